package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/trajflow/trajflow/schema"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/sinks/arrowipc"
	"github.com/trajflow/trajflow/sinks/jsonl"
)

// provisionInterop opens the optional interop outputs: NeMo Gym JSONL and
// an Arrow IPC stream of the kept rows.
func (r *run) provisionInterop() error {
	cfg := r.cfg
	if cfg.Output.JSONL {
		f, err := createNext(filepath.Join(cfg.Output.Dir, JSONLDir), "rollouts-", ".jsonl")
		if err != nil {
			return fmt.Errorf("output.jsonl: %w", err)
		}
		r.jsonl = f
		r.closers = append(r.closers, f.abort)
	}
	if cfg.Output.ArrowStream != "" {
		w, err := arrowipc.Create(cfg.Output.ArrowStream, schema.Schema(), r.opts.Alloc)
		if err != nil {
			return fmt.Errorf("output.arrow_stream: %w", err)
		}
		r.stream = w
		r.closers = append(r.closers, w.Abort)
	}
	return nil
}

func (r *run) writeInterop(ctx context.Context, rec arrow.Record) error {
	if r.jsonl != nil {
		if err := r.jsonl.w.Write(ctx, rec); err != nil {
			return fmt.Errorf("output.jsonl: %w", err)
		}
	}
	if r.stream != nil {
		if err := r.stream.Write(ctx, rec); err != nil {
			return fmt.Errorf("output.arrow_stream: %w", err)
		}
	}
	return nil
}

func (r *run) closeInterop(ctx context.Context) error {
	if r.jsonl != nil {
		if err := r.jsonl.commit(ctx); err != nil {
			return fmt.Errorf("output.jsonl: %w", err)
		}
	}
	if r.stream != nil {
		if err := r.stream.Close(ctx); err != nil {
			return fmt.Errorf("output.arrow_stream: %w", err)
		}
	}
	return nil
}

// interopFile is a JSONL file written under a temporary name and renamed
// into place when the run ends.
type interopFile struct {
	f          *os.File
	w          *jsonl.Writer
	tmp, final string
}

// createNext creates the next free prefixNNNNNsuffix file in dir (a resumed
// run adds a file, it never overwrites one).
func createNext(dir, prefix, suffix string) (*interopFile, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	for i := 0; ; i++ {
		final := filepath.Join(dir, fmt.Sprintf("%s%05d%s", prefix, i, suffix))
		if _, err := os.Stat(final); err == nil {
			continue
		}
		tmp := filepath.Join(dir, "."+filepath.Base(final)+".tmp")
		f, err := os.Create(tmp)
		if err != nil {
			return nil, err
		}
		return &interopFile{f: f, w: jsonl.New(f), tmp: tmp, final: final}, nil
	}
}

func (f *interopFile) commit(ctx context.Context) error {
	if f.f == nil {
		return nil
	}
	if err := f.w.Close(ctx); err != nil {
		return err
	}
	if err := f.f.Sync(); err != nil {
		return err
	}
	if err := f.f.Close(); err != nil {
		return err
	}
	f.f = nil
	return os.Rename(f.tmp, f.final)
}

func (f *interopFile) abort() {
	if f.f != nil {
		f.f.Close()
		os.Remove(f.tmp)
		f.f = nil
	}
}

// lineWriter appends JSON lines to a file created on the first line.
type lineWriter struct {
	path string
	mu   sync.Mutex
	f    *os.File
}

func (w *lineWriter) Write(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		f, err := os.OpenFile(w.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("%s: %w", filepath.Base(w.path), err)
		}
		w.f = f
	}
	if _, err := w.f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(w.path), err)
	}
	return nil
}

func (w *lineWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return nil
	}
	err := w.f.Close()
	w.f = nil
	return err
}

// failure is one line of the failures file.
type failure struct {
	Time         time.Time `json:"time"`
	RunID        string    `json:"run_id"`
	TaskIndex    int64     `json:"task_index"`
	Attempt      int       `json:"attempt"`
	RolloutIndex int       `json:"rollout_index"`
	TrajID       string    `json:"traj_id"`
	Retries      int       `json:"retries"`
	Turn         int       `json:"turn"`
	ErrorClass   string    `json:"error_class"`
	Error        string    `json:"error"`
	Where        string    `json:"where"`
}

func failureLine(r *pipeline.Rollout) failure {
	return failure{
		Time: time.Now().UTC(), RunID: r.RunID, TaskIndex: r.Task.Index, Attempt: r.Attempt,
		RolloutIndex: r.RolloutIndex, TrajID: r.TrajID, Retries: r.Retries, Turn: r.NumTurns,
		ErrorClass: r.ErrorClass, Error: r.Error, Where: r.Task.Source,
	}
}
