package readback_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/apache/arrow/go/v17/parquet"
	"github.com/apache/arrow/go/v17/parquet/file"
	"github.com/apache/arrow/go/v17/parquet/pqarrow"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/readback"
	"github.com/trajflow/trajflow/schema"
	pqsink "github.com/trajflow/trajflow/sinks/parquet"
)

// A rollout's routes go through collate and the Parquet sink: Arrow's
// own Parquet reader sees a nullable list<int16> column, null where the
// rollout has none, [layers, top_k, ids…] over every position elsewhere,
// -1 where not routed; readback gives the routes back.
func TestRoutesRoundTrip(t *testing.T) {
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer alloc.AssertSize(t, 0)
	dir := t.TempDir()
	w, err := pqsink.New(dir, pqsink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	gs := segmentGroups() // the fixture: every third rollout has routes
	rec := collated(t, alloc, gs)
	err = w.Write(context.Background(), rec)
	rec.Release()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "part-00000.parquet")
	var want []*pipeline.Rollout
	for _, g := range gs {
		want = append(want, g.Rollouts...)
	}

	// Arrow's own reader, straight from the file.
	rd, err := file.OpenParquetFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	fr, err := pqarrow.NewFileReader(rd, pqarrow.ArrowReadProperties{}, alloc)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := fr.ReadTable(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
	idx := tbl.Schema().FieldIndices("routed_experts")
	if len(idx) != 1 {
		t.Fatalf("routed_experts: %d columns", len(idx))
	}
	if f := tbl.Schema().Field(idx[0]); !f.Nullable || !arrow.TypeEqual(f.Type.(*arrow.ListType).Elem(), arrow.PrimitiveTypes.Int16) {
		t.Fatalf("routed_experts read by Arrow as %v", f)
	}
	row, withRoutes := 0, 0
	for _, ch := range tbl.Column(idx[0]).Data().Chunks() {
		l := ch.(*array.List)
		vals := l.ListValues().(*array.Int16).Int16Values()
		for i := range l.Len() {
			r := want[row]
			row++
			if r.Routes == nil {
				if !l.IsNull(i) {
					t.Errorf("%s: routed_experts not null", r)
				}
				continue
			}
			withRoutes++
			s, e := l.ValueOffsets(i)
			v := vals[s:e]
			n := len(r.PromptTokenIDs) + len(r.ResponseTokenIDs)
			if l.IsNull(i) || len(v) != 2+n*4 || v[0] != 2 || v[1] != 2 {
				t.Fatalf("%s: routed_experts of %d elements (want %d), header %v", r, len(v), 2+n*4, v[:min(len(v), 2)])
			}
			if !slices.Equal(v[2:], r.Routes.Experts) {
				t.Errorf("%s: routed_experts ids differ from the routes written", r)
			}
			if v[len(v)-1] != pipeline.NotRouted {
				t.Errorf("%s: the last position is routed", r)
			}
		}
	}
	if withRoutes == 0 || withRoutes == len(want) {
		t.Fatalf("%d of %d rows with routes: the fixture does not mix them", withRoutes, len(want))
	}

	got, err := readback.File(path)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range got {
		if (r.Routes == nil) != (want[i].Routes == nil) || r.Routes != nil && (r.Routes.Layers != 2 || !slices.Equal(r.Routes.Experts, want[i].Routes.Experts)) {
			t.Errorf("row %d: routes %+v, want %+v", i, r.Routes, want[i].Routes)
		}
	}
}

// A file of schema version 6 (no routed_experts column), written with
// Arrow's own writer, still reads: its rows have no routes.
func TestVersion6File(t *testing.T) {
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer alloc.AssertSize(t, 0)
	rec := collated(t, alloc, segmentGroups())
	defer rec.Release()
	if schema.ColRoutedExperts != schema.NumColumns-1 {
		t.Fatal("routed_experts is not the last column")
	}
	v6 := arrow.NewSchema(schema.ForVersion(schema.VersionV6).Fields(), nil)
	old := array.NewRecord(v6, rec.Columns()[:schema.ColRoutedExperts], rec.NumRows())
	defer old.Release()
	path := filepath.Join(t.TempDir(), "part-00000.parquet")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	fw, err := pqarrow.NewFileWriter(v6, out, parquet.NewWriterProperties(parquet.WithAllocator(alloc)), pqarrow.NewArrowWriterProperties(pqarrow.WithAllocator(alloc)))
	if err != nil {
		t.Fatal(err)
	}
	if err := fw.Write(old); err != nil {
		t.Fatal(err)
	}
	if err := fw.AppendKeyValueMetadata(schema.MetadataKey, schema.VersionV6); err != nil {
		t.Fatal(err)
	}
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := readback.File(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != int(rec.NumRows()) {
		t.Fatalf("%d rows, want %d", len(got), rec.NumRows())
	}
	for _, r := range got {
		if r.Routes != nil {
			t.Errorf("%s: routes from a version 6 file", r)
		}
	}
}
