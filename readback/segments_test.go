package readback_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/apache/arrow/go/v17/parquet"
	"github.com/apache/arrow/go/v17/parquet/pqarrow"

	"github.com/trajflow/trajflow/internal/pqread"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/pipeline/pipelinetest"
	"github.com/trajflow/trajflow/readback"
	"github.com/trajflow/trajflow/schema"
	pqsink "github.com/trajflow/trajflow/sinks/parquet"
	"github.com/trajflow/trajflow/stages/collate"
)

// segmentGroups are two groups of four rollouts: rollout 0 of task 0 an
// agent's that rewrote its history twice (three segments), rollout 2 of
// task 1 one whose second segment holds no token ids (token -1), the
// others the fixture's (one rewrite on rollout 1, none on the rest).
func segmentGroups() []*pipeline.Group {
	gs := []*pipeline.Group{pipelinetest.Group(0, 4, 200), pipelinetest.Group(1, 4, 200)}
	gs[0].Rollouts[0].Segments = []pipeline.Segment{{Message: 2, Token: 12, Turn: 1}, {Message: 4, Token: 30, Turn: 2}}
	gs[1].Rollouts[2].Segments = []pipeline.Segment{{Message: 3, Token: -1, Turn: 2}}
	return gs
}

// collated returns the groups collated into one record.
func collated(t *testing.T, alloc memory.Allocator, gs []*pipeline.Group) arrow.Record {
	t.Helper()
	c := collate.New(alloc, 1000)
	defer c.Release()
	for _, g := range gs {
		if rec := c.Add(g); rec != nil {
			rec.Release()
			t.Fatal("collate handed out a record before Flush")
		}
	}
	return c.Flush()
}

// A rollout's segments go through collate and the Parquet sink, and come
// back equal, through Arrow's Parquet reader's own view of the column and
// through readback.
func TestSegmentsRoundTrip(t *testing.T) {
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer alloc.AssertSize(t, 0)
	dir := t.TempDir()
	w, err := pqsink.New(dir, pqsink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	gs := segmentGroups()
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
	var want [][]pipeline.Segment
	for _, g := range gs {
		for _, r := range g.Rollouts {
			want = append(want, r.Segments)
		}
	}

	// Arrow's reader, the segments column alone.
	f, err := pqread.Open(path, alloc, 256)
	if err != nil {
		t.Fatal(err)
	}
	cols, err := f.Fields("segments")
	if err != nil {
		t.Fatal(err)
	}
	var raw [][]pipeline.Segment
	err = f.Records(context.Background(), cols, func(rec arrow.Record) error {
		l := rec.Column(0).(*array.List)
		st := l.ListValues().(*array.Struct)
		msg, tok, turn := st.Field(schema.SegmentMessage).(*array.Int32), st.Field(schema.SegmentToken).(*array.Int32), st.Field(schema.SegmentTurn).(*array.Int32)
		for i := range l.Len() {
			if l.IsNull(i) {
				t.Errorf("row %d: segments is null", len(raw))
			}
			var segs []pipeline.Segment
			s, e := l.ValueOffsets(i)
			for j := int(s); j < int(e); j++ {
				segs = append(segs, pipeline.Segment{Message: msg.Value(j), Token: tok.Value(j), Turn: turn.Value(j)})
			}
			raw = append(raw, segs)
		}
		return nil
	})
	_ = f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(raw, want) {
		t.Errorf("segments read by Arrow = %v, want %v", raw, want)
	}

	got, err := readback.File(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("read back %d rows, want %d", len(got), len(want))
	}
	for i, r := range got {
		if !reflect.DeepEqual(r.Segments, want[i]) {
			t.Errorf("row %d: segments %v, want %v", i, r.Segments, want[i])
		}
	}
	if len(got[0].Segments) != 2 || got[6].Segments[0].Token != -1 || got[2].Segments != nil {
		t.Errorf("fixture not read back as written: %v, %v, %v", got[0].Segments, got[6].Segments, got[2].Segments)
	}
}

// A file of schema version 5 (no segments column), written with Arrow's
// own writer, still reads: its rows come back as written, each one
// segment.
func TestVersion5File(t *testing.T) {
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer alloc.AssertSize(t, 0)
	gs := segmentGroups()
	rec := collated(t, alloc, gs)
	defer rec.Release()
	if rec.Schema().Field(schema.ColSegments).Name != "segments" || schema.ColSegments != schema.NumColumns-2 {
		t.Fatal("segments is not the last column but routed_experts")
	}
	v5 := arrow.NewSchema(schema.ForVersion(schema.VersionV5).Fields(), nil)
	old := array.NewRecord(v5, rec.Columns()[:schema.ColSegments], rec.NumRows())
	defer old.Release()

	path := filepath.Join(t.TempDir(), "part-00000.parquet")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	fw, err := pqarrow.NewFileWriter(v5, out, parquet.NewWriterProperties(parquet.WithAllocator(alloc)), pqarrow.NewArrowWriterProperties(pqarrow.WithAllocator(alloc)))
	if err != nil {
		t.Fatal(err)
	}
	if err := fw.Write(old); err != nil {
		t.Fatal(err)
	}
	if err := fw.AppendKeyValueMetadata(schema.MetadataKey, schema.VersionV5); err != nil {
		t.Fatal(err)
	}
	if err := fw.Close(); err != nil { // closes out
		t.Fatal(err)
	}

	f, err := pqread.Open(path, alloc, 256)
	if err != nil {
		t.Fatal(err)
	}
	s, err := f.Schema()
	if err == nil {
		var v string
		v, err = schema.FileVersion(f.Metadata(), s)
		if v != schema.VersionV5 {
			t.Errorf("FileVersion = %q, want %s", v, schema.VersionV5)
		}
	}
	_ = f.Close()
	if err != nil {
		t.Fatal(err)
	}

	got, err := readback.File(path)
	if err != nil {
		t.Fatal(err)
	}
	var want []*pipeline.Rollout
	for _, g := range gs {
		for _, r := range g.Rollouts {
			r.Segments, r.Routes = nil, nil // version 5 has neither
			want = append(want, r)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("read back %d rows, want %d", len(got), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("row %d differs:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
}
