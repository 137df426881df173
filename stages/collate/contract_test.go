package collate_test

import (
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/pipeline/pipelinetest"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/stages/collate"
)

// unwritten returns the paths of the leaves of a that hold only zero
// values (empty strings, 0, false) or no values at all.
func unwritten(path string, a arrow.Array) []string {
	switch a := a.(type) {
	case *array.List:
		return unwritten(path+".element", a.ListValues())
	case *array.Struct:
		var out []string
		st := a.DataType().(*arrow.StructType)
		for i := range a.NumField() {
			out = append(out, unwritten(path+"."+st.Field(i).Name, a.Field(i))...)
		}
		return out
	}
	for i := range a.Len() {
		if v := a.ValueStr(i); v != "" && v != "0" && v != "false" {
			return nil
		}
	}
	return []string{path}
}

// fullGroup returns rollouts that together set every column.
func fullGroup() *pipeline.Group {
	g := pipelinetest.Group(3, 8, 64)
	g.Rollouts[1].Retries = 2
	g.Rollouts[2].Truncated = true
	g.Rollouts[3].MaxTurnsReached = true
	g.Rollouts[4].Error = "boom"
	g.Rollouts[5].FilterReason = "unfiltered:zero_std"
	return g
}

// Collate writes every column of the table (schema.Columns) and every
// field of its structs: a column added to the table that the collator
// leaves empty fails here, naming it. The decoder reads back every column
// that is not derived: a record decoded and collated again is the same.
func TestCollateWritesEveryColumn(t *testing.T) {
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer alloc.AssertSize(t, 0)
	c := collate.New(alloc, 1)
	defer c.Release()
	rec := c.Add(fullGroup())
	if rec == nil {
		t.Fatal("no record")
	}
	defer rec.Release()
	if !rec.Schema().Equal(schema.Schema()) {
		t.Fatalf("record schema differs from the table's:\n%v", rec.Schema())
	}
	for i, col := range schema.Columns() {
		if rec.Schema().Field(i).Name != col.Name {
			t.Errorf("column %d is %s, the table's %s", i, rec.Schema().Field(i).Name, col.Name)
		}
		if got := rec.Column(i).Len(); got != int(rec.NumRows()) {
			t.Errorf("column %s has %d values for %d rows", col.Name, got, rec.NumRows())
		}
		for _, p := range unwritten(col.Name, rec.Column(i)) {
			t.Errorf("collate writes nothing into %s", p)
		}
	}

	rs, err := schema.Rollouts(rec)
	if err != nil {
		t.Fatal(err)
	}
	c2 := collate.New(alloc, 1)
	defer c2.Release()
	again := c2.Add(&pipeline.Group{Rollouts: rs})
	if again == nil {
		t.Fatal("no record")
	}
	defer again.Release()
	for i, col := range schema.Columns() {
		if !array.Equal(rec.Column(i), again.Column(i)) {
			t.Errorf("column %s differs after decoding and collating again:\n %v\nvs %v", col.Name, rec.Column(i), again.Column(i))
		}
	}
}
