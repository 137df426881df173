package openai

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
	"time"

	"github.com/trajflow/trajflow/internal/durable"
)

// The batch state file: one JSON object a line, appended and synced before
// the step it records is taken, so a run killed at any point knows on its
// restart what it may have submitted.
//
//	{"op": "plan",    "key": K, "ids": [custom_id, ...]}  before the upload
//	{"op": "file",    "key": K, "file": FILE_ID}           once the upload answered
//	{"op": "batch",   "key": K, "batch": BATCH_ID}         once the create answered
//	                                                       (or a restart found it by K)
//	{"op": "abandon", "key": K}                            the batch was never created
type stateEvent struct {
	Op    string    `json:"op"`
	Key   string    `json:"key"`
	IDs   []string  `json:"ids,omitempty"`
	File  string    `json:"file,omitempty"`
	Batch string    `json:"batch,omitempty"`
	At    time.Time `json:"at"`
}

// plannedBatch is what the state file says of one batch.
type plannedBatch struct {
	Key       string
	IDs       []string
	File      string
	Batch     string
	Abandoned bool
}

type stateLog struct {
	mu sync.Mutex
	f  *os.File
	// err is the first append that failed: every later one returns it
	// and writes nothing (a failed write may have left part of a line,
	// and after a failed fsync the kernel may have dropped the lines and
	// would report the next fsync successful: never retried on the same
	// descriptor).
	err error
}

// openState reads the state file at path (creating it, its directory
// synced so that its name survives a crash) and returns its batches in the
// order they were planned. A line torn by a kill (the last, without its
// newline) is dropped: the step after it was never taken.
func openState(path string) (*stateLog, []*plannedBatch, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("batch state: %w", err)
	}
	if err := durable.SyncDir(filepath.Dir(path)); err != nil {
		return nil, nil, errors.Join(fmt.Errorf("batch state: sync the directory of %s: %w", path, err), f.Close())
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("batch state: %w", err), f.Close())
	}
	if i := bytes.LastIndexByte(data, '\n'); i+1 != len(data) {
		if err := f.Truncate(int64(i + 1)); err != nil {
			return nil, nil, errors.Join(fmt.Errorf("batch state: %w", err), f.Close())
		}
		data = data[:i+1]
	}
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		return nil, nil, errors.Join(fmt.Errorf("batch state: %w", err), f.Close())
	}
	byKey := map[string]*plannedBatch{}
	var order []*plannedBatch
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	for n := 1; sc.Scan(); n++ {
		var e stateEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Key == "" {
			return nil, nil, errors.Join(fmt.Errorf("batch state %s: line %d: not a state event (%v); the file records the batches this output directory submitted: do not edit it", path, n, err), f.Close())
		}
		b := byKey[e.Key]
		if b == nil {
			b = &plannedBatch{Key: e.Key}
			byKey[e.Key] = b
			order = append(order, b)
		}
		switch e.Op {
		case "plan":
			b.IDs = e.IDs
		case "file":
			b.File = e.File
		case "batch":
			b.Batch = e.Batch
		case "abandon":
			b.Abandoned = true
		default:
			return nil, nil, errors.Join(fmt.Errorf("batch state %s: line %d: unknown op %q", path, n, e.Op), f.Close())
		}
	}
	return &stateLog{f: f}, order, nil
}

// append writes e and syncs it.
func (s *stateLog) append(e stateEvent) error {
	e.At = time.Now().UTC()
	line, err := json.Marshal(e)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	if _, err := s.f.Write(append(line, '\n')); err != nil {
		s.err = fmt.Errorf("batch state: %w", err)
		return s.err
	}
	if err := durable.Sync(s.f); err != nil {
		s.err = fmt.Errorf("batch state: %w", err)
		return s.err
	}
	return nil
}

func (s *stateLog) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.f.Close(); err != nil {
		return fmt.Errorf("batch state: %w", err)
	}
	return nil
}
