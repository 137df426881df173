package resume

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/internal/durable"
	"github.com/trajflow/trajflow/internal/pqread"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/sources"
)

// SecretKey reads the output directory's key, creating it on first use.
func SecretKey(dir string) ([]byte, error) {
	path := filepath.Join(dir, schema.SecretKeyFile)
	if b, err := os.ReadFile(path); err == nil {
		key, derr := hex.DecodeString(strings.TrimSpace(string(b)))
		if derr != nil || len(key) < 16 {
			return nil, fmt.Errorf("output.dir: %s is damaged: remove it (a resume then sees secret keys as changed)", path)
		}
		return key, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("output.dir: %w", err)
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	// Shards of one run may start at once: the key is written beside its
	// place, synced, and linked into it (durable.File.CommitNew, the
	// directory synced), which fails when another got there first; then
	// that one's key is the run's. Synced before the link, the key is
	// never found empty after a power cut.
	if err := durable.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("output.dir: %w", err)
	}
	f, err := durable.Create(path, 0o600)
	if err != nil {
		return nil, fmt.Errorf("output.dir: %w", err)
	}
	if _, err := f.WriteString(hex.EncodeToString(key) + "\n"); err != nil {
		return nil, fmt.Errorf("output.dir: %w", errors.Join(err, f.Abort()))
	}
	if err := f.CommitNew(); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return SecretKey(dir)
		}
		return nil, fmt.Errorf("output.dir: %w", err)
	}
	return key, nil
}

// Committed is the work a previous run of the same output directory
// committed: per task, its last committed attempt and whether it was kept.
type Committed struct {
	// source is the input identity that covers the most bytes among the
	// committed files (nil when none recorded one).
	source *sources.Identity
	tasks  map[int64]taskState
	// Kept counts the kept groups.
	Kept  int
	rows  int64
	files int
}

type taskState struct {
	attempt int
	kept    bool
	// keptAttempt is the latest attempt kept, when kept.
	keptAttempt int
	// requeue: the latest attempt was dropped for Options.RequeueReason.
	requeue bool
}

// Skip decides, for a task read from the input, whether its work is done
// and otherwise which attempt to sample.
func (c *Committed) Skip(taskIndex int64, maxAttempts int, resample bool) (skip bool, attempt int) {
	st, ok := c.tasks[taskIndex]
	switch {
	case !ok:
		return false, 0
	case st.kept:
		return true, 0
	}
	return st.afterDrop(maxAttempts, resample)
}

// SkipDropped decides as Skip does, by the task's latest attempt alone,
// as dropped, whatever attempt of it was kept before (a kept group a
// service set aside, followed by an attempt not kept).
func (c *Committed) SkipDropped(taskIndex int64, maxAttempts int, resample bool) (skip bool, attempt int) {
	return c.tasks[taskIndex].afterDrop(maxAttempts, resample)
}

// afterDrop decides a task whose latest attempt was dropped: sampled
// again when it was dropped for Options.RequeueReason, or under
// groups.resample with attempts left; else done.
func (st taskState) afterDrop(maxAttempts int, resample bool) (skip bool, attempt int) {
	if st.requeue || resample && st.attempt+1 < maxAttempts {
		return false, st.attempt + 1
	}
	return true, 0
}

// KeptAttempt returns, for a task with a kept group committed, its
// latest kept attempt and its latest attempt committed (later than the
// kept one where a service set the kept group aside as too stale and its
// new attempt was committed, not kept); ok is false when none was kept.
func (c *Committed) KeptAttempt(taskIndex int64) (kept, last int, ok bool) {
	st, ok := c.tasks[taskIndex]
	if !ok || !st.kept {
		return 0, 0, false
	}
	return st.keptAttempt, st.attempt, true
}

// add counts a group committed, kept or not (dropped for
// Options.RequeueReason: requeue).
func (c *Committed) add(k pipeline.GroupKey, kept, requeue bool) {
	st, ok := c.tasks[k.TaskIndex]
	if !ok || k.Attempt > st.attempt {
		st.requeue = requeue
	}
	st.attempt = max(st.attempt, k.Attempt)
	if kept {
		c.Kept++
		st.kept = true
		st.keptAttempt = max(st.keptAttempt, k.Attempt)
	}
	c.tasks[k.TaskIndex] = st
}

// ErrConfigChanged is returned when an output directory holds work of a
// config whose semantic keys differ from this run's.
var ErrConfigChanged = errors.New("the output directory holds work of a different config")

// ErrSchemaVersion is returned when an output directory holds part files
// of another schema version than the one this trajflow writes: a resumed
// run would mix two schemas in one dataset, which readers globbing the
// directory (DuckDB, pyarrow) and trajflow merge refuse.
var ErrSchemaVersion = errors.New("the output directory holds files of another schema version")

// Options are Load's settings.
type Options struct {
	// AllowConfigChange resumes work committed under a config whose
	// semantic keys differ, or from another input.
	AllowConfigChange bool
	// SourcePath is the local path of the run's input, checked against the
	// input the committed files were read from.
	SourcePath string
	// RequeueReason, when set, is the filter reason of a dropped group
	// whose task is sampled again in a new attempt (a continuous run's
	// stale group under on_stale: requeue): a task whose latest attempt
	// committed was dropped for it is not done (Skip samples the next
	// attempt), so that a crash between the drop and the new attempt
	// loses no prompt.
	RequeueReason string
}

// Load reads the keys of the part files in cfg's data and filtered
// directories (and errors, with run.resume_errors: keep), checks that they
// were produced by this config (its fingerprint, keyed with the output's
// secret key) and its input, and that every part file (surplus and errors
// too) is in the schema version this run writes.
func Load(ctx context.Context, cfg *config.Config, opts Options) (*Committed, error) {
	c := &Committed{tasks: map[int64]taskState{}}
	fp, _ := cfg.Fingerprint()
	// Groups with a failed member (errors/) are not done: a rerun redoes
	// them, unless run.resume_errors is keep.
	keepErrors := cfg.Run.ResumeErrors == "keep"
	for _, dest := range []string{schema.DataDir, schema.FilteredDir, schema.SurplusDir, schema.ErrorsDir} {
		paths, err := filepath.Glob(filepath.Join(cfg.Output.Dir, dest, schema.PartGlob))
		if err != nil {
			return nil, err
		}
		sort.Strings(paths)
		for _, p := range paths {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if dest == schema.SurplusDir || dest == schema.ErrorsDir && !keepErrors {
				if err := checkVersion(p); err != nil {
					return nil, err
				}
				continue
			}
			if err := c.read(ctx, cfg, opts, p, dest == schema.DataDir, fp); err != nil {
				return nil, err
			}
			c.files++
		}
	}
	if c.source != nil && !opts.AllowConfigChange {
		if err := sources.Verify(opts.SourcePath, *c.source); err != nil {
			if !errors.Is(err, sources.ErrOtherInput) {
				return nil, fmt.Errorf("resume: %w", err)
			}
			return nil, fmt.Errorf("%w: source.path: %v; use another output.dir, or --allow-config-change to resume anyway", ErrConfigChanged, err)
		}
	}
	return c, nil
}

// checkVersion refuses a part file of another schema version than
// schema.Version.
func checkVersion(path string) error {
	f, err := pqread.Open(path, memory.NewGoAllocator(), 1)
	if err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	defer func() { _ = f.Close() }() // best effort: read only
	return fileVersion(f, path)
}

// fileVersion checks that f, opened from path, is in schema.Version.
func fileVersion(f *pqread.File, path string) error {
	s, err := f.Schema()
	if err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	v, err := schema.FileVersion(f.Metadata(), s)
	if err != nil {
		return fmt.Errorf("resume: %s: not in trajflow's output schema: %w", path, err)
	}
	if v != schema.Version {
		return fmt.Errorf("%w: %s has schema version %s, this trajflow writes version %s, and a resumed run would mix both in one directory; finish the run with the trajflow version that started it, or use another output.dir",
			ErrSchemaVersion, path, v, schema.Version)
	}
	return nil
}

// read adds the groups of the part file at path to c.
func (c *Committed) read(ctx context.Context, cfg *config.Config, opts Options, path string, kept bool, fp string) error {
	f, err := pqread.Open(path, memory.NewGoAllocator(), 64<<10)
	if err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	defer func() { _ = f.Close() }() // best effort: read only
	if err := fileVersion(f, path); err != nil {
		return err
	}
	meta := f.Metadata()
	if got, ok := meta[schema.KeyConfigFingerprint]; !ok || got != fp {
		var diffs []string
		if stored, ok := meta[schema.KeyConfig]; ok {
			diffs, _ = cfg.DiffSemantic(stored)
		}
		if !opts.AllowConfigChange {
			msg := "no fingerprint recorded"
			if len(diffs) > 0 {
				msg = "changed keys: " + strings.Join(diffs, "; ")
			}
			return fmt.Errorf("%w: %s (%s); use another output.dir, or --allow-config-change to resume anyway", ErrConfigChanged, path, msg)
		}
	}
	if v, ok := meta[schema.KeySource]; ok {
		var id sources.Identity
		if err := json.Unmarshal([]byte(v), &id); err != nil {
			return fmt.Errorf("resume: %s: %s is unreadable: %w", path, schema.KeySource, err)
		}
		if c.source == nil || id.Bytes > c.source.Bytes {
			c.source = &id
		}
	}
	columns := schema.Columns()
	taskIndex, attempt := columns[schema.ColTaskIndex].Name, columns[schema.ColAttempt].Name
	names := []string{taskIndex, attempt}
	if !kept && opts.RequeueReason != "" {
		names = append(names, columns[schema.ColFilterReason].Name)
	}
	cols, err := f.Fields(names...)
	if err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	seen := map[pipeline.GroupKey]bool{}
	errType := fmt.Errorf("resume: %s: %s or %s has an unexpected type", path, taskIndex, attempt)
	err = f.Records(ctx, cols, func(rec arrow.Record) error {
		tasks, ok1 := rec.Column(0).(*array.Int64)
		attempts, ok2 := rec.Column(1).(*array.Int32)
		if !ok1 || !ok2 {
			return errType
		}
		requeue := func(int) bool { return false }
		if len(cols) > 2 {
			reasons, ok := rec.Column(2).(*array.String)
			if !ok {
				return fmt.Errorf("%s: %s has an unexpected type", path, columns[schema.ColFilterReason].Name)
			}
			requeue = func(i int) bool { return reasons.IsValid(i) && reasons.Value(i) == opts.RequeueReason }
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			k := pipeline.GroupKey{TaskIndex: tasks.Value(i), Attempt: int(attempts.Value(i))}
			c.rows++
			if seen[k] {
				continue
			}
			seen[k] = true
			c.add(k, kept, requeue(i))
		}
		return nil
	})
	if err != nil && err != errType && !errors.Is(err, ctx.Err()) {
		return fmt.Errorf("resume: %w", err)
	}
	return err
}
