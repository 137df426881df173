package serve

import (
	"bytes"
	"context"
	"net/http"
	"slices"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/ipc"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/trajflow/trajflow/stages/generate"
)

// A step's answer is the same bytes in every format whether it is made
// from the groups' records (a new step) or read back from its part file
// (a step served again, or replayed): an Arrow answer holds one record
// batch a group either way.
func TestAnswerSameBytesFromRecordsAndFile(t *testing.T) {
	s, st, fresh := testStep(t, 6, 4, 64)
	defer func() {
		for _, g := range fresh {
			g.release()
		}
	}()
	h := &handler{s: s, pauseMode: generate.PauseAbort, logf: t.Logf}
	ctx := context.Background()
	if err := s.written(ctx, st.Step); err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{FormatArrow, FormatJSONL} {
		var a, b buffer
		a.h, b.h = http.Header{}, http.Header{}
		if err := h.answerStep(ctx, &a, st.Step, format, fresh, nil); err != nil {
			t.Fatal(err)
		}
		if err := h.answerStep(ctx, &b, st.Step, format, nil, nil); err != nil {
			t.Fatal(err)
		}
		if a.Len() == 0 || !bytes.Equal(a.Bytes(), b.Bytes()) {
			t.Fatalf("%s: from the records %d bytes, from the file %d bytes, not the same", format, a.Len(), b.Len())
		}
		if format == FormatArrow {
			r, err := ipc.NewReader(bytes.NewReader(a.Bytes()))
			if err != nil {
				t.Fatal(err)
			}
			batches := 0
			for r.Next() {
				batches++
			}
			r.Release()
			if batches != 6 {
				t.Fatalf("%d record batches, want one a group (6)", batches)
			}
		}
	}
}

// byGroup: one record a group, a group spread over records concatenated,
// records of several groups sliced; nothing left allocated.
func TestByGroup(t *testing.T) {
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer alloc.AssertSize(t, 0)
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "task_index", Type: arrow.PrimitiveTypes.Int64},
		{Name: "attempt", Type: arrow.PrimitiveTypes.Int32},
		{Name: "reward", Type: arrow.PrimitiveTypes.Float64},
	}, nil)
	rec := func(rows ...[3]float64) arrow.Record {
		b := array.NewRecordBuilder(alloc, sc)
		defer b.Release()
		for _, r := range rows {
			b.Field(0).(*array.Int64Builder).Append(int64(r[0]))
			b.Field(1).(*array.Int32Builder).Append(int32(r[1]))
			b.Field(2).(*array.Float64Builder).Append(r[2])
		}
		return b.NewRecord()
	}
	in := []arrow.Record{rec([3]float64{1, 0, 0.1}, [3]float64{1, 0, 0.2}), rec([3]float64{1, 0, 0.3}, [3]float64{2, 0, 0.4}, [3]float64{3, 1, 0.5}), rec([3]float64{3, 1, 0.6})}
	defer func() {
		for _, r := range in {
			r.Release()
		}
	}()
	var got [][]float64
	err := byGroup(alloc, func(fn func(arrow.Record) error) error {
		for _, r := range in {
			if err := fn(r); err != nil {
				return err
			}
		}
		return nil
	}, func(r arrow.Record) error {
		got = append(got, slices.Clone(r.Column(2).(*array.Float64).Float64Values()))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := [][]float64{{0.1, 0.2, 0.3}, {0.4}, {0.5, 0.6}}
	if len(got) != len(want) {
		t.Fatalf("batches %v, want %v", got, want)
	}
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Fatalf("batches %v, want %v", got, want)
		}
	}
}
