package harness

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/trajflow/trajflow/internal/pqread"
	"github.com/trajflow/trajflow/schema"
)

// Committed is what the Parquet files of a directory hold, read back with
// Arrow's own Parquet reader.
type Committed struct {
	Rows, Groups int
	// ZeroStd counts groups whose group_reward_std is 0; NotKept rows
	// whose kept column is false.
	ZeroStd, NotKept int
	// Tasks are the distinct task indexes, ascending.
	Tasks []int64
}

// ReadCommitted reads the light columns of dir/part-*.parquet.
func ReadCommitted(ctx context.Context, dir string) (Committed, error) {
	var c Committed
	paths, err := filepath.Glob(filepath.Join(dir, schema.PartGlob))
	if err != nil {
		return c, err
	}
	groups := map[string]float64{}
	tasks := map[int64]bool{}
	for _, p := range paths {
		if err := readPart(ctx, p, &c, groups, tasks); err != nil {
			return c, fmt.Errorf("%s: %w", p, err)
		}
	}
	c.Groups = len(groups)
	for _, std := range groups {
		if std == 0 {
			c.ZeroStd++
		}
	}
	for t := range tasks {
		c.Tasks = append(c.Tasks, t)
	}
	sort.Slice(c.Tasks, func(i, j int) bool { return c.Tasks[i] < c.Tasks[j] })
	return c, nil
}

func readPart(ctx context.Context, path string, c *Committed, groups map[string]float64, tasks map[int64]bool) error {
	f, err := pqread.Open(path, memory.NewGoAllocator(), 4096)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }() // best effort: read only
	cols, err := f.Fields(schema.ColumnName(schema.ColGroupID), schema.ColumnName(schema.ColGroupRewardStd),
		schema.ColumnName(schema.ColKept), schema.ColumnName(schema.ColTaskIndex))
	if err != nil {
		return err
	}
	return f.Records(ctx, cols, func(rec arrow.Record) error {
		gid, ok1 := rec.Column(0).(*array.String)
		std, ok2 := rec.Column(1).(*array.Float64)
		kept, ok3 := rec.Column(2).(*array.Boolean)
		task, ok4 := rec.Column(3).(*array.Int64)
		if !ok1 || !ok2 || !ok3 || !ok4 {
			return fmt.Errorf("%s: unexpected columns %s", path, rec.Schema())
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			c.Rows++
			groups[gid.Value(i)] = std.Value(i)
			tasks[task.Value(i)] = true
			if !kept.Value(i) {
				c.NotKept++
			}
		}
		return nil
	})
}
