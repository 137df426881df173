package report

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/trajflow/trajflow/pipeline/pipelinetest"
	"github.com/trajflow/trajflow/schema"
	pqsink "github.com/trajflow/trajflow/sinks/parquet"
	"github.com/trajflow/trajflow/stages/collate"
)

// The report shows the cost of rows written with a price, and no cost
// row for rows written without.
func TestReportCost(t *testing.T) {
	write := func(dir, price string) int64 {
		opts := pqsink.Options{}
		if price != "" {
			opts.Metadata = map[string]string{schema.KeyPrice: price}
		}
		w, err := pqsink.New(filepath.Join(dir, "data"), opts)
		if err != nil {
			t.Fatal(err)
		}
		c := collate.New(memory.DefaultAllocator, 1000)
		defer c.Release()
		var tokens int64
		for ti := range int64(5) {
			g := pipelinetest.Group(ti, 4, 100)
			for _, r := range g.Rollouts {
				r.PromptTokens = 0
				tokens += int64(r.CompletionTokens)
			}
			if rec := c.Add(g); rec != nil {
				t.Fatal("a record before the flush")
			}
		}
		rec := c.Flush()
		defer rec.Release()
		if err := w.Write(context.Background(), rec); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		return tokens
	}
	priced := t.TempDir()
	tokens := write(priced, `{"input_per_mtok":1,"output_per_mtok":1000000}`)
	html := buildReport(t, []string{priced}, Options{})
	if want := fmt.Sprintf(`id="cost">%d.0000<`, tokens); !strings.Contains(html, want) {
		i := strings.Index(html, `id="cost"`)
		t.Fatalf("report lacks %s (cost cell: %.80s)", want, html[max(i, 0):])
	}
	plain := t.TempDir()
	write(plain, "")
	if html := buildReport(t, []string{plain}, Options{}); strings.Contains(html, `id="cost"`) {
		t.Fatal("a cost row for rows without a price")
	}
}
