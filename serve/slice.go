package serve

import (
	"cmp"
	"errors"
	"slices"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"

	"github.com/trajflow/trajflow/schema"
)

// partition cuts a step's groups into world slices balanced by tokens,
// groups never split: the groups, heaviest first (ties: in step order),
// each go to the slice with the fewest tokens so far (ties: the lowest
// rank), the greedy longest-processing-time rule, within 4/3 of the best
// balance. Each slice lists its groups' indices in step order. It depends
// on tokens alone, so every rank, and a restart, cuts the same slices.
//
//	tokens [9 1 5 5], world 2  →  [[0 1] [2 3]]  (10 and 10 tokens)
func partition(tokens []int64, world int) [][]int {
	order := make([]int, len(tokens))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(tokens[b], tokens[a]) })
	out := make([][]int, world)
	load := make([]int64, world)
	for _, g := range order {
		r := 0
		for i := 1; i < world; i++ {
			if load[i] < load[r] {
				r = i
			}
		}
		out[r] = append(out[r], g)
		load[r] += tokens[g]
	}
	for _, s := range out {
		slices.Sort(s)
	}
	return out
}

// groupTokens is a group's tokens for balancing the slices: the prompt's
// and the training view's (prompt_token_ids and total_tokens) of its
// rows, a row's completion_tokens (the server's usage) where its
// total_tokens is null (no token ids); its rows where the columns are
// missing.
func groupTokens(recs []arrow.Record) int64 {
	var n int64
	for _, rec := range recs {
		sc := rec.Schema()
		pi := sc.FieldIndices(schema.ColumnName(schema.ColPromptTokenIDs))
		ti := sc.FieldIndices(schema.ColumnName(schema.ColTotalTokens))
		prompts, ok1 := column[*array.List](rec, pi)
		totals, ok2 := column[*array.Int64](rec, ti)
		if !ok1 || !ok2 {
			n += rec.NumRows()
			continue
		}
		completion, haveCompletion := column[*array.Int64](rec, sc.FieldIndices(schema.ColumnName(schema.ColCompletionTokens)))
		for i := 0; i < int(rec.NumRows()); i++ {
			from, to := prompts.ValueOffsets(i)
			switch {
			case totals.IsValid(i):
				n += to - from + totals.Value(i)
			case haveCompletion:
				n += completion.Value(i)
			default:
				n++
			}
		}
	}
	return n
}

// column is a record's column of the one index in idx, as type A.
func column[A arrow.Array](rec arrow.Record, idx []int) (A, bool) {
	var zero A
	if len(idx) != 1 {
		return zero, false
	}
	a, ok := rec.Column(idx[0]).(A)
	return a, ok
}

// keepGroups returns the rows of rec whose group is in keep, as slices of
// it (each the caller's to release).
func keepGroups(rec arrow.Record, keep map[groupRef]bool) ([]arrow.Record, error) {
	var out []arrow.Record
	err := eachGroup(rec, func(ref groupRef, start, end int) {
		if keep[ref] {
			out = append(out, rec.NewSlice(int64(start), int64(end)))
		}
	})
	return out, err
}

// eachGroup calls fn with each group of rec in order: its ref and its
// rows start..end-1 (rows of a group are contiguous).
func eachGroup(rec arrow.Record, fn func(ref groupRef, start, end int)) error {
	sc := rec.Schema()
	tasks, ok1 := column[*array.Int64](rec, sc.FieldIndices(schema.ColumnName(schema.ColTaskIndex)))
	attempts, ok2 := column[*array.Int32](rec, sc.FieldIndices(schema.ColumnName(schema.ColAttempt)))
	if !ok1 || !ok2 {
		return errNoGroupColumns
	}
	n := int(rec.NumRows())
	for start := 0; start < n; {
		ref := groupRef{tasks.Value(start), int64(attempts.Value(start))}
		end := start + 1
		for end < n && tasks.Value(end) == ref[0] && int64(attempts.Value(end)) == ref[1] {
			end++
		}
		fn(ref, start, end)
		start = end
	}
	return nil
}

// errNoGroupColumns: a step's file without task_index and attempt.
var errNoGroupColumns = errors.New("no task_index or attempt column")
