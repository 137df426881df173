package lines

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/trajflow/trajflow/internal/durable"
	"github.com/trajflow/trajflow/pipeline"
)

// Writer appends JSON lines to a file it creates on the first line, so a
// run without failures leaves no empty file. Close syncs the file (its
// directory synced when it was created), so that a run that ended leaves
// its lines durable. It is safe for concurrent use.
type Writer struct {
	path string
	mu   sync.Mutex
	f    *os.File
}

// New returns a writer of the file at path.
func New(path string) *Writer { return &Writer{path: path} }

// Write appends v as one JSON line.
func (w *Writer) Write(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		f, err := durable.OpenAppend(w.path, 0o644)
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

// Close syncs and closes the file, if one was created.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return nil
	}
	err := durable.Sync(w.f)
	if errors.Is(err, syscall.EINVAL) {
		err = nil // not a file that can be synced: a device, a pipe
	}
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	w.f = nil
	if err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(w.path), err)
	}
	return nil
}

// Failure is one line of the failures log: a rollout that resolved as an
// error.
type Failure struct {
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

// FailureOf is the failure line of a rollout.
func FailureOf(r *pipeline.Rollout) Failure {
	return Failure{
		Time: time.Now().UTC(), RunID: r.RunID, TaskIndex: r.Task.Index, Attempt: r.Attempt,
		RolloutIndex: r.RolloutIndex, TrajID: r.TrajID, Retries: r.Retries, Turn: r.NumTurns,
		ErrorClass: r.ErrorClass, Error: r.Error, Where: r.Task.Source,
	}
}

// Reject is one line of the rejects log: a bad input row skipped under
// source.on_bad_row: skip.
type Reject struct {
	Where  string `json:"where"`
	Reason string `json:"reason"`
	Row    string `json:"row"`
}
