package parquet

import "testing"

// BenchmarkConvert measures the conversion of records into Parquet rows
// alone (converter.convert and reset), the part of Writer.Write before
// parquet-go: its share of BenchmarkSink is all that writing the records'
// columns without the rows could save.
func BenchmarkConvert(b *testing.B) {
	recs := benchRecords(b, 8)
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	var conv converter
	b.SetBytes(benchBatchRows * benchPayload)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rows := conv.convert(recs[i%len(recs)])
		if len(rows) != benchBatchRows {
			b.Fatalf("%d rows", len(rows))
		}
		conv.reset()
	}
	b.ReportMetric(float64(b.N*benchBatchRows)/b.Elapsed().Seconds(), "rows/s")
}
