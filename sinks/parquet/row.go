package parquet

import (
	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
)

// The Parquet row types (row, stepRow, their element types) and the
// converter from records to rows are generated from schema's column
// tables into row_gen.go; these are the helpers its code calls.

// listSlice returns row i of a list array as a subslice of vals, the
// list's flattened values (no copy).
func listSlice[T any](l *array.List, vals []T, i int) []T {
	s, e := l.ValueOffsets(i)
	if e <= s {
		return nil
	}
	return vals[s:e:e]
}

// nullableListSlice is listSlice for a nullable list: nil where l is
// null (written as a null), a non-nil slice, maybe empty, elsewhere.
func nullableListSlice[T any](l *array.List, vals []T, i int) []T {
	if l.IsNull(i) {
		return nil
	}
	s, e := l.ValueOffsets(i)
	if e <= s {
		return []T{}
	}
	return vals[s:e:e]
}

// valueAt points at row i's value in vals (a's values; no copy), or is
// nil where a is null.
func valueAt[T any](a arrow.Array, vals []T, i int) *T {
	if a.IsNull(i) {
		return nil
	}
	return &vals[i]
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
