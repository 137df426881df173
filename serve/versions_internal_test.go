package serve

import (
	"slices"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
)

// TestVersionsOf: a row's policy versions are read from the
// policy_versions spans where the schema has them; a row without spans
// (answers without token ids: chat mode) has its min_policy_version, the
// version its oldest answer was requested under; else none (version 0).
// Reading version 0 for a chat row generated at version 2 set every group
// after a version bump aside as stale, forever.
func TestVersionsOf(t *testing.T) {
	span := arrow.StructOf(
		arrow.Field{Name: "version", Type: arrow.PrimitiveTypes.Int64},
		arrow.Field{Name: "start", Type: arrow.PrimitiveTypes.Int32},
		arrow.Field{Name: "end", Type: arrow.PrimitiveTypes.Int32},
	)
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "policy_versions", Type: arrow.ListOf(span), Nullable: true},
		{Name: "min_policy_version", Type: arrow.PrimitiveTypes.Int64},
	}, nil)
	b := array.NewRecordBuilder(memory.NewGoAllocator(), sc)
	defer b.Release()
	lb := b.Field(0).(*array.ListBuilder)
	sb := lb.ValueBuilder().(*array.StructBuilder)
	mb := b.Field(1).(*array.Int64Builder)
	add := func(spans ...[3]int64) {
		lb.Append(true)
		if len(spans) > 0 {
			mb.Append(spans[0][0])
		}
		for _, s := range spans {
			sb.Append(true)
			sb.FieldBuilder(0).(*array.Int64Builder).Append(s[0])
			sb.FieldBuilder(1).(*array.Int32Builder).Append(int32(s[1]))
			sb.FieldBuilder(2).(*array.Int32Builder).Append(int32(s[2]))
		}
	}
	add([3]int64{2, 0, 10}, [3]int64{3, 10, 40}, [3]int64{2, 40, 41})
	add() // a chat row generated at version 4
	mb.Append(4)
	lb.AppendNull() // a chat row generated at version 0
	mb.Append(0)
	add([3]int64{5, 0, 3})
	rec := b.NewRecord()
	defer rec.Release()
	v := versionsOf(rec)
	for i, want := range [][]int64{{2, 3}, {4}, {0}, {5}} {
		if got := v(i); !slices.Equal(got, want) {
			t.Errorf("row %d: %v, want %v", i, got, want)
		}
	}
	// No such column: none.
	other := arrow.NewSchema([]arrow.Field{{Name: "reward", Type: arrow.PrimitiveTypes.Float64}}, nil)
	ob := array.NewRecordBuilder(memory.NewGoAllocator(), other)
	defer ob.Release()
	ob.Field(0).(*array.Float64Builder).Append(1)
	orec := ob.NewRecord()
	defer orec.Release()
	if got := versionsOf(orec)(0); got != nil {
		t.Fatalf("no column: %v", got)
	}
	if got := addVersions([]int64{1, 4}, []int64{3, 1, 9}); !slices.Equal(got, []int64{1, 3, 4, 9}) {
		t.Fatalf("addVersions: %v", got)
	}
}
