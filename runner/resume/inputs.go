package resume

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/internal/durable"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/schema"
)

// Input is one line of schema.InputsFile: a task's first request as rendered.
type Input struct {
	TaskIndex int64              `json:"task_index"`
	Source    string             `json:"source"`
	Env       string             `json:"env,omitempty"`
	Messages  []pipeline.Message `json:"messages"`
	Tools     []json.RawMessage  `json:"tools,omitempty"`
	// Params are the row's params with generate.params merged over them
	// (secret-named keys redacted); the per-rollout seed is not among them.
	Params map[string]any `json:"params,omitempty"`
}

// Inputs appends Input lines, each task index once across resumes:
// the indexes a file already holds are read when it is opened, and a last
// line a crash cut short is cut off. Flush and Close make what was
// written durable (the file synced; its directory synced when the file
// was created), so that the lines of every task committed before them
// survive a power cut.
type Inputs struct {
	path string
	mu   sync.Mutex
	f    *os.File
	bw   *bufio.Writer
	// written is the highest task index the file held when opened (-1:
	// none). Tasks are rendered in input order, once a run, so a resumed
	// run skips exactly the tasks up to it: O(1) memory whatever the
	// number of tasks.
	written int64
	// err is the first write, flush or sync that failed: every later
	// call returns it, and the file is never synced again (after a
	// failed fsync the kernel may have dropped the lines and would
	// report the next fsync successful).
	err error
}

// OpenInputs reads what the file at path already holds (none: a new
// file, created on the first line).
func OpenInputs(path string) (*Inputs, error) {
	w := &Inputs{path: path, written: -1}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return w, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", schema.InputsFile, err)
	}
	defer func() { _ = f.Close() }() // best effort: read only
	br := bufio.NewReader(f)
	var good int64 // bytes up to the end of the last whole line
	for {
		line, err := br.ReadBytes('\n')
		if err == io.EOF {
			break // a last line without its newline was cut short
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", schema.InputsFile, err)
		}
		var in struct {
			TaskIndex *int64 `json:"task_index"`
		}
		if json.Unmarshal(bytes.TrimSpace(line), &in) != nil || in.TaskIndex == nil {
			break // a torn write: what follows is dropped and rewritten
		}
		w.written = max(w.written, *in.TaskIndex)
		good += int64(len(line))
	}
	if st, err := f.Stat(); err == nil && st.Size() > good {
		if err := os.Truncate(path, good); err != nil {
			return nil, fmt.Errorf("%s: %w", schema.InputsFile, err)
		}
	}
	// What was read is taken as written (those tasks are not written
	// again): make it durable now, the file and its name. A run killed
	// before its sync left it in the kernel's cache only, and this run may
	// never write (and sync) the file again before it commits those tasks.
	if err := durable.Sync(f); err != nil {
		return nil, fmt.Errorf("%s: %w", schema.InputsFile, err)
	}
	if err := durable.SyncDir(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("%s: sync its directory: %w", schema.InputsFile, err)
	}
	return w, nil
}

// Write appends the task's rendered request unless the file holds it.
func (w *Inputs) Write(t *pipeline.Task, params map[string]any) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if t.Index <= w.written {
		return nil
	}
	p := inference.MergeParams(t.Params, params)
	red, _ := config.RedactValue([]string{"generate", "params"}, p).(map[string]any)
	if len(red) == 0 {
		red = nil
	}
	b, err := json.Marshal(Input{TaskIndex: t.Index, Source: t.Source, Env: t.Env, Messages: t.Messages, Tools: t.Tools, Params: red})
	if err != nil {
		return fmt.Errorf("%s: %w", schema.InputsFile, err)
	}
	if w.err != nil {
		return w.err
	}
	if w.f == nil {
		f, err := durable.OpenAppend(w.path, 0o644)
		if err != nil {
			return fmt.Errorf("%s: %w", filepath.Base(w.path), err)
		}
		w.f, w.bw = f, bufio.NewWriterSize(f, 64<<10)
	}
	if _, err := w.bw.Write(append(b, '\n')); err != nil {
		return w.fail(err)
	}
	return nil
}

// fail records the first failure of the file.
func (w *Inputs) fail(err error) error {
	if w.err == nil && durable.DiskFull(err) && w.f != nil {
		// What the file needed: its size and the lines not yet written.
		var size int64
		if fi, serr := w.f.Stat(); serr == nil {
			size = fi.Size()
		}
		if w.bw != nil {
			size += int64(w.bw.Buffered())
		}
		err = durable.NeedSpace(w.path, size, err)
	}
	if w.err == nil {
		w.err = fmt.Errorf("%s: %w", schema.InputsFile, err)
	}
	return w.err
}

// Flush writes the buffered lines to the file and syncs it.
func (w *Inputs) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	if w.bw == nil {
		return nil
	}
	err := w.bw.Flush()
	if err == nil {
		err = durable.Sync(w.f)
	}
	if err != nil {
		return w.fail(err)
	}
	return nil
}

// Close closes the file, if one was opened.
func (w *Inputs) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return w.err
	}
	err := w.err
	if err == nil {
		if err = w.bw.Flush(); err == nil {
			err = durable.Sync(w.f)
		}
		if err != nil {
			err = w.fail(err)
		}
	}
	if cerr := w.f.Close(); err == nil && cerr != nil {
		err = w.fail(cerr)
	}
	w.f, w.bw = nil, nil
	return err
}
