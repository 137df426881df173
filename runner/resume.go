package runner

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/trajflow/trajflow/internal/pqread"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/sinks/parquet"
)

// KeyConfig is the Parquet metadata key holding the canonical JSON of the
// config's semantic keys, so that a refused resume can name what changed.
const KeyConfig = "trajflow.config"

// committed is the work a previous run of the same output directory
// committed: per task, its last committed attempt and whether it was kept.
type committed struct {
	tasks map[int64]taskState
	kept  int // kept groups
	rows  int64
	files int
}

type taskState struct {
	attempt int
	kept    bool
}

// skip decides, for a task read from the input, whether its work is done
// and otherwise which attempt to sample.
func (c *committed) skip(taskIndex int64, maxAttempts int, resample bool) (skip bool, attempt int) {
	st, ok := c.tasks[taskIndex]
	switch {
	case !ok:
		return false, 0
	case st.kept:
		return true, 0
	case resample && st.attempt+1 < maxAttempts:
		return false, st.attempt + 1
	}
	return true, 0
}

// ErrConfigChanged is returned when an output directory holds work of a
// config whose semantic keys differ from this run's.
var ErrConfigChanged = errors.New("the output directory holds work of a different config")

// loadCommitted reads the keys of the part files in the data and filtered
// directories (and errors, with run.resume_errors: keep), and checks that
// they were produced by this config.
func (r *run) loadCommitted(ctx context.Context) (*committed, error) {
	c := &committed{tasks: map[int64]taskState{}}
	fp, _ := r.cfg.Fingerprint()
	// Groups with a failed member (errors/) are not done: a rerun redoes
	// them, unless run.resume_errors is keep.
	dirs := []string{DataDir, FilteredDir}
	if r.cfg.Run.ResumeErrors == "keep" {
		dirs = append(dirs, ErrorsDir)
	}
	for _, dest := range dirs {
		paths, err := filepath.Glob(filepath.Join(r.cfg.Output.Dir, dest, "part-*.parquet"))
		if err != nil {
			return nil, err
		}
		sort.Strings(paths)
		for _, p := range paths {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if err := r.readCommitted(ctx, p, dest == DataDir, fp, c); err != nil {
				return nil, err
			}
			c.files++
		}
	}
	return c, nil
}

func (r *run) readCommitted(ctx context.Context, path string, kept bool, fp string, c *committed) error {
	f, err := pqread.Open(path, memory.NewGoAllocator(), 64<<10)
	if err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	defer f.Close()
	meta := f.Metadata()
	if got, ok := meta[parquet.KeyConfigFingerprint]; !ok || got != fp {
		var diffs []string
		if stored, ok := meta[KeyConfig]; ok {
			diffs, _ = r.cfg.DiffSemantic(stored)
		}
		if !r.opts.AllowConfigChange {
			msg := "no fingerprint recorded"
			if len(diffs) > 0 {
				msg = "changed keys: " + strings.Join(diffs, "; ")
			}
			return fmt.Errorf("%w: %s (%s); use another output.dir, or --allow-config-change to resume anyway", ErrConfigChanged, path, msg)
		}
	}
	cols, err := f.Fields("task_index", "attempt")
	if err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	seen := map[pipeline.GroupKey]bool{}
	errType := fmt.Errorf("resume: %s: task_index or attempt has an unexpected type", path)
	err = f.Records(ctx, cols, func(rec arrow.Record) error {
		tasks, ok1 := rec.Column(0).(*array.Int64)
		attempts, ok2 := rec.Column(1).(*array.Int32)
		if !ok1 || !ok2 {
			return errType
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			k := pipeline.GroupKey{TaskIndex: tasks.Value(i), Attempt: int(attempts.Value(i))}
			c.rows++
			if seen[k] {
				continue
			}
			seen[k] = true
			if kept {
				c.kept++
			}
			if st, ok := c.tasks[k.TaskIndex]; !ok || k.Attempt > st.attempt || kept {
				c.tasks[k.TaskIndex] = taskState{attempt: max(k.Attempt, st.attempt), kept: kept || st.kept}
			}
		}
		return nil
	})
	if err != nil && err != errType && !errors.Is(err, ctx.Err()) {
		return fmt.Errorf("resume: %w", err)
	}
	return err
}
