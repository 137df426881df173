package sources

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// benchRows writes n NeMo Gym rows of about 1 KB each.
func benchRows(b *testing.B, n int) string {
	b.Helper()
	p := filepath.Join(b.TempDir(), "bench.jsonl")
	f, err := os.Create(p)
	if err != nil {
		b.Fatal(err)
	}
	pad := strings.Repeat("lorem ipsum ", 70)
	for i := range n {
		fmt.Fprintf(f, `{"responses_create_params": {"input": [{"role": "user", "content": "Problem %d: %s"}], "temperature": 1.0}, "expected_answer": "%d"}`+"\n", i, pad, i)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	return p
}

// BenchmarkJSONL reads a file of 1 KB NeMo Gym rows. It reports rows/s
// and the peak heap in use, which stays flat whatever the file size.
func BenchmarkJSONL(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("rows=%d", n), func(b *testing.B) {
			p := benchRows(b, n)
			var peak uint64
			var ms runtime.MemStats
			b.ResetTimer()
			for range b.N {
				r, err := Open(Config{Path: p}, Options{})
				if err != nil {
					b.Fatal(err)
				}
				for i := 0; ; i++ {
					_, err := r.Next(context.Background())
					if err == io.EOF {
						break
					}
					if err != nil {
						b.Fatal(err)
					}
					if i%10_000 == 0 {
						runtime.ReadMemStats(&ms)
						peak = max(peak, ms.HeapInuse)
					}
				}
				r.Close()
			}
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "rows/s")
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
		})
	}
}
