package parquet

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/memory"
	pq "github.com/parquet-go/parquet-go"

	"github.com/trajflow/trajflow/pipeline/pipelinetest"
	"github.com/trajflow/trajflow/stages/collate"
)

const (
	benchPayload   = 8192 // bytes of text and token data per rollout
	benchGroupSize = 8
	benchBatchRows = 1024
)

// benchRecords returns records of benchBatchRows rows with ~8 KB payload a row.
func benchRecords(b *testing.B, n int) []arrow.Record {
	c := collate.New(memory.NewGoAllocator(), benchBatchRows)
	defer c.Release()
	var recs []arrow.Record
	for task := int64(0); len(recs) < n; task++ {
		if rec := c.Add(pipelinetest.Group(task, benchGroupSize, benchPayload)); rec != nil {
			recs = append(recs, rec)
		}
	}
	return recs
}

// deepCopy makes rows that own their memory, as a program holding Go
// structs would have them: every string and slice, nested ones included,
// is copied.
func deepCopy(rows []row) []row {
	out := reflect.New(reflect.TypeOf(rows)).Elem()
	out.Set(deepCopyValue(reflect.ValueOf(rows)))
	return out.Interface().([]row)
}

func deepCopyValue(v reflect.Value) reflect.Value {
	switch v.Kind() {
	case reflect.String:
		return reflect.ValueOf(strings.Clone(v.String())).Convert(v.Type())
	case reflect.Slice:
		if v.IsNil() {
			return v
		}
		out := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		for i := range v.Len() {
			out.Index(i).Set(deepCopyValue(v.Index(i)))
		}
		return out
	case reflect.Pointer:
		if v.IsNil() {
			return v
		}
		out := reflect.New(v.Type().Elem())
		out.Elem().Set(deepCopyValue(v.Elem()))
		return out
	case reflect.Struct:
		out := reflect.New(v.Type()).Elem()
		for i := range v.NumField() {
			out.Field(i).Set(deepCopyValue(v.Field(i)))
		}
		return out
	}
	return v
}

func benchCompressions() []string { return []string{"zstd", "snappy"} }

// BenchmarkSink measures Writer.Write from Arrow records to committed files.
func BenchmarkSink(b *testing.B) {
	recs := benchRecords(b, 8)
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	for _, comp := range benchCompressions() {
		b.Run(comp, func(b *testing.B) {
			dir := b.TempDir()
			w, err := New(dir, Options{Compression: comp, FileRows: 50_000})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.SetBytes(benchBatchRows * benchPayload)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := w.Write(ctx, recs[i%len(recs)]); err != nil {
					b.Fatal(err)
				}
			}
			if err := w.Close(ctx); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N*benchBatchRows)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

// BenchmarkDirect measures parquet-go writing the same rows from Go
// structs that own their memory, with the same options and file rotation.
func BenchmarkDirect(b *testing.B) {
	recs := benchRecords(b, 8)
	batches := make([][]row, len(recs))
	var conv converter
	for i, r := range recs {
		batches[i] = deepCopy(conv.convert(r))
		conv.reset()
		r.Release()
	}
	for _, comp := range benchCompressions() {
		b.Run(comp, func(b *testing.B) {
			dir := b.TempDir()
			c, _ := codec(comp)
			opts := []pq.WriterOption{pq.Compression(c), pq.DefaultEncodingFor(pq.ByteArray, &pq.Plain),
				pq.DataPageVersion(1), pq.MaxRowsPerRowGroup(DefaultRowGroupRows)}
			files := 0
			var f *os.File
			var pw *pq.GenericWriter[row]
			rows := 0
			closeFile := func() {
				if err := pw.Close(); err != nil {
					b.Fatal(err)
				}
				if err := f.Close(); err != nil {
					b.Fatal(err)
				}
				pw = nil
			}
			b.SetBytes(benchBatchRows * benchPayload)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if pw == nil {
					var err error
					f, err = os.Create(filepath.Join(dir, "direct-"+string(rune('a'+files%26))+".parquet"))
					if err != nil {
						b.Fatal(err)
					}
					files++
					pw = pq.NewGenericWriter[row](f, opts...)
					rows = 0
				}
				if _, err := pw.Write(batches[i%len(batches)]); err != nil {
					b.Fatal(err)
				}
				if rows += benchBatchRows; rows >= 50_000 {
					closeFile()
				}
			}
			if pw != nil {
				closeFile()
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N*benchBatchRows)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
