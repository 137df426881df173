package parquet

import (
	"context"
	"os"
	"path/filepath"
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
// structs would have them.
func deepCopy(rows []row) []row {
	out := make([]row, len(rows))
	for i, r := range rows {
		r.RunID, r.GroupID, r.TrajID = strings.Clone(r.RunID), strings.Clone(r.GroupID), strings.Clone(r.TrajID)
		r.Env, r.Model, r.Status = strings.Clone(r.Env), strings.Clone(r.Model), strings.Clone(r.Status)
		r.ErrorClass, r.FinishReason, r.FilterReason = strings.Clone(r.ErrorClass), strings.Clone(r.FinishReason), strings.Clone(r.FilterReason)
		r.Error, r.Task = strings.Clone(r.Error), strings.Clone(r.Task)
		r.TurnRewards = append([]float64(nil), r.TurnRewards...)
		r.Metrics = append([]metric(nil), r.Metrics...)
		for j := range r.Metrics {
			r.Metrics[j].Name = strings.Clone(r.Metrics[j].Name)
		}
		msgs := make([]message, len(r.Messages))
		for j, m := range r.Messages {
			m.Role, m.Content, m.ToolCallID, m.Name = strings.Clone(m.Role), strings.Clone(m.Content), strings.Clone(m.ToolCallID), strings.Clone(m.Name)
			tcs := make([]toolCall, len(m.ToolCalls))
			for k, tc := range m.ToolCalls {
				tcs[k] = toolCall{strings.Clone(tc.ID), strings.Clone(tc.Type), strings.Clone(tc.Name), strings.Clone(tc.Arguments)}
			}
			m.ToolCalls = tcs
			msgs[j] = m
		}
		r.Messages = msgs
		r.PromptTokenIDs = append([]int32(nil), r.PromptTokenIDs...)
		r.ResponseTokenIDs = append([]int32(nil), r.ResponseTokenIDs...)
		r.LossMask = append([]int8(nil), r.LossMask...)
		r.ResponseLogprobs = append([]float32(nil), r.ResponseLogprobs...)
		out[i] = r
	}
	return out
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
