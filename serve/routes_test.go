package serve

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/ipc"
	"github.com/apache/arrow/go/v17/arrow/memory"
	pq "github.com/apache/arrow/go/v17/parquet/file"
	"github.com/apache/arrow/go/v17/parquet/pqarrow"

	"github.com/trajflow/trajflow/pipeline/pipelinetest"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/stages/generate"
)

// A served step carries routed_experts in every format, from the records
// of a new step and from its file: null for the rows without routes, the
// rows' routes (schema.EncodeRoutes) for the others.
func TestStepCarriesRoutedExperts(t *testing.T) {
	const groups, n, payload = 3, 4, 2000
	s, st, fresh := testStep(t, groups, n, payload)
	defer func() {
		for _, g := range fresh {
			g.release()
		}
	}()
	want := map[string][]int16{}
	routed := 0
	for g := range groups {
		for _, r := range pipelinetest.Group(int64(g), n, payload).Rollouts {
			want[fmt.Sprint(r.Task.Index, "/", r.RolloutIndex)] = schema.EncodeRoutes(r.Routes, len(r.PromptTokenIDs)+len(r.ResponseTokenIDs))
			if r.Routes != nil {
				routed++
			}
		}
	}
	if routed == 0 || routed == len(want) {
		t.Fatalf("%d of %d rows with routes: the fixture does not mix them", routed, len(want))
	}
	h := &handler{s: s, pauseMode: generate.PauseAbort, logf: t.Logf}
	ctx := context.Background()
	for _, format := range []string{FormatParquet, FormatArrow, FormatJSONL} {
		for _, source := range []string{"records", "file"} {
			t.Run(format+"/"+source, func(t *testing.T) {
				from := fresh
				if source == "file" {
					from = nil
				}
				b := &buffer{discard: discard{http.Header{}}}
				if err := h.answerStep(ctx, b, st.Step, format, from, nil); err != nil {
					t.Fatal(err)
				}
				got := servedRoutes(t, format, b.Bytes())
				if len(got) != len(want) {
					t.Fatalf("%d rows served, want %d", len(got), len(want))
				}
				for k, w := range want {
					g, ok := got[k]
					if !ok || (g == nil) != (w == nil) || !slices.Equal(g, w) {
						t.Errorf("row %s: routed_experts %v, want %v", k, g, w)
					}
				}
			})
		}
	}
}

// servedRoutes reads the routed_experts of each row of a step's answer,
// keyed by task_index/rollout_index: nil where null.
func servedRoutes(t *testing.T, format string, body []byte) map[string][]int16 {
	t.Helper()
	out := map[string][]int16{}
	fromRecord := func(rec arrow.Record) {
		sc := rec.Schema()
		ti := rec.Column(sc.FieldIndices("task_index")[0]).(*array.Int64)
		ri := rec.Column(sc.FieldIndices("rollout_index")[0]).(*array.Int32)
		idx := sc.FieldIndices("routed_experts")
		if len(idx) != 1 {
			t.Fatalf("%s: no routed_experts column", format)
		}
		l := rec.Column(idx[0]).(*array.List)
		vals := l.ListValues().(*array.Int16).Int16Values()
		for i := range int(rec.NumRows()) {
			k := fmt.Sprint(ti.Value(i), "/", ri.Value(i))
			if l.IsNull(i) {
				out[k] = nil
				continue
			}
			s, e := l.ValueOffsets(i)
			out[k] = append([]int16{}, vals[s:e]...)
		}
	}
	switch format {
	case FormatParquet:
		rd, err := pq.NewParquetReader(bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		fr, err := pqarrow.NewFileReader(rd, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
		if err != nil {
			t.Fatal(err)
		}
		tbl, err := fr.ReadTable(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer tbl.Release()
		tr := array.NewTableReader(tbl, 1<<20)
		defer tr.Release()
		for tr.Next() {
			fromRecord(tr.Record())
		}
	case FormatArrow:
		r, err := ipc.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Release()
		for r.Next() {
			fromRecord(r.Record())
		}
		if err := r.Err(); err != nil {
			t.Fatal(err)
		}
	case FormatJSONL:
		sc := bufio.NewScanner(bytes.NewReader(body))
		sc.Buffer(nil, 1<<26)
		for sc.Scan() {
			var row struct {
				TaskIndex     int64   `json:"task_index"`
				RolloutIndex  int32   `json:"rollout_index"`
				RoutedExperts []int16 `json:"routed_experts"`
			}
			if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
				t.Fatal(err)
			}
			out[fmt.Sprint(row.TaskIndex, "/", row.RolloutIndex)] = row.RoutedExperts
		}
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}
