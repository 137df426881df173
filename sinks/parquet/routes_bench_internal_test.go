package parquet

import (
	"bytes"
	"math/rand/v2"
	"testing"

	pq "github.com/parquet-go/parquet-go"
)

// routesPlain and routesDict are routed_experts as written without and
// with the dictionary encoding (schema.Column.Dict).
type (
	routesPlain struct {
		R []int16 `parquet:"routed_experts,optional,list"`
	}
	routesDict struct {
		R []int16 `parquet:"routed_experts,optional,list,dict"`
	}
)

// BenchmarkRoutesEncoding writes 64 rows of routes (7,000 positions, 8
// layers × top 2 of 64 experts, uniformly drawn ids: the simulator's MoE
// model) with the sink's zstd codec, plain and dictionary-encoded, and
// reports the file's bytes a position.
func BenchmarkRoutesEncoding(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	const rows, positions, width = 64, 7000, 16
	data := make([][]int16, rows)
	for i := range data {
		data[i] = make([]int16, positions*width)
		for j := range data[i] {
			data[i][j] = int16(rng.IntN(64))
		}
	}
	b.Run("plain", func(b *testing.B) {
		benchRoutes(b, data, func(v []int16) routesPlain { return routesPlain{v} })
	})
	b.Run("dict", func(b *testing.B) {
		benchRoutes(b, data, func(v []int16) routesDict { return routesDict{v} })
	})
}

func benchRoutes[T any](b *testing.B, data [][]int16, row func([]int16) T) {
	rows := make([]T, len(data))
	for i, d := range data {
		rows[i] = row(d)
	}
	c, err := codec("zstd")
	if err != nil {
		b.Fatal(err)
	}
	var buf bytes.Buffer
	for b.Loop() {
		buf.Reset()
		w := pq.NewGenericWriter[T](&buf, pq.Compression(c))
		if _, err := w.Write(rows); err != nil {
			b.Fatal(err)
		}
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(buf.Len())/float64(len(data)*len(data[0])/16), "bytes/position")
}
