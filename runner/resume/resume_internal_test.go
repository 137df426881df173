package resume

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/schema"
)

// inputs.jsonl is buffered: lines a full disk refused surface at Close,
// not silently.
func TestInputsCloseReportsAFullDisk(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full:", err)
	}
	w := &Inputs{path: "/dev/full", written: -1}
	task := &pipeline.Task{Index: 0, Source: "t.jsonl:1", Messages: []pipeline.Message{{Role: "user", Content: "1+1"}}}
	if err := w.Write(task, nil); err != nil {
		t.Fatalf("write: %v (the line should fit the buffer)", err)
	}
	err := w.Close()
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), schema.InputsFile) {
		t.Fatalf("Close: %v, want ENOSPC naming %s", err, schema.InputsFile)
	}
}

// The output directory's lock holds the pid, keeps a second run out, and
// its release reports a failure (here: released twice).
func TestLockDirReleaseReportsItsErrors(t *testing.T) {
	dir := t.TempDir()
	release, err := LockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, schema.LockFile))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(b)); got != strconv.Itoa(os.Getpid()) {
		t.Fatalf("lock file holds %q, want the pid %d", got, os.Getpid())
	}
	if _, err := LockDir(dir); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second lock: %v, want in use", err)
	}
	if err := release(); err != nil {
		t.Fatalf("release: %v", err)
	}
	if err := release(); err == nil || !strings.Contains(err.Error(), schema.LockFile) {
		t.Fatalf("second release: %v, want an error naming %s", err, schema.LockFile)
	}
	again, err := LockDir(dir)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	if err := again(); err != nil {
		t.Fatal(err)
	}
}

// KeptAttempt is a task's latest kept attempt and latest attempt, in
// whatever order the directories are read: a later attempt after a kept
// one is a service's new attempt of a group it set aside as too stale to
// hand out. Skip still finds a task with a kept group done.
func TestKeptAttempt(t *testing.T) {
	c := &Committed{tasks: map[int64]taskState{}}
	key := func(task int64, attempt int) pipeline.GroupKey {
		return pipeline.GroupKey{TaskIndex: task, Attempt: attempt}
	}
	c.add(key(0, 1), false, false) // filtered/ after data/ in read order, or before
	c.add(key(0, 0), true, false)
	c.add(key(1, 0), true, false)
	c.add(key(1, 1), true, false)
	c.add(key(2, 0), false, false)
	for _, tt := range []struct {
		task       int64
		kept, last int
		ok         bool
	}{
		{0, 0, 1, true},
		{1, 1, 1, true},
		{2, 0, 0, false},
		{3, 0, 0, false},
	} {
		kept, last, ok := c.KeptAttempt(tt.task)
		if kept != tt.kept || last != tt.last || ok != tt.ok {
			t.Errorf("task %d: KeptAttempt %d, %d, %v; want %d, %d, %v", tt.task, kept, last, ok, tt.kept, tt.last, tt.ok)
		}
	}
	if c.Kept != 3 {
		t.Errorf("kept %d groups, want 3", c.Kept)
	}
	if skip, _ := c.Skip(0, 3, true); !skip {
		t.Error("task 0, kept, not skipped")
	}
}

// A task whose latest attempt committed was dropped for
// Options.RequeueReason (a stale group under on_stale requeue) is not
// done: Skip samples the next attempt, whatever groups.resample says;
// one whose later attempt was committed is decided by that attempt.
func TestSkipRequeueReason(t *testing.T) {
	c := &Committed{tasks: map[int64]taskState{}}
	key := func(task int64, attempt int) pipeline.GroupKey {
		return pipeline.GroupKey{TaskIndex: task, Attempt: attempt}
	}
	c.add(key(0, 0), false, true)
	c.add(key(1, 1), false, false) // its new attempt, dropped by the keep rule
	c.add(key(1, 0), false, true)
	c.add(key(2, 0), false, true)
	c.add(key(2, 1), true, false)
	c.add(key(3, 1), false, true) // a requeued attempt dropped as stale again
	c.add(key(3, 0), true, false)
	for _, tt := range []struct {
		task    int64
		skip    bool
		attempt int
	}{
		{0, false, 1},
		{1, true, 0},
		{2, true, 0},
		{3, true, 0}, // kept: decided by the service (groups.Unserved)
	} {
		skip, attempt := c.Skip(tt.task, 1, false)
		if skip != tt.skip || attempt != tt.attempt {
			t.Errorf("task %d: Skip %v, %d; want %v, %d", tt.task, skip, attempt, tt.skip, tt.attempt)
		}
	}
	// Task 3's latest attempt was dropped as stale (sampled again), task
	// 1's by the keep rule (done, without groups.resample).
	if skip, attempt := c.SkipDropped(3, 1, false); skip || attempt != 2 {
		t.Errorf("task 3: SkipDropped %v, %d; want false, 2", skip, attempt)
	}
	if skip, _ := c.SkipDropped(1, 1, false); !skip {
		t.Error("task 1: SkipDropped samples it again, its latest attempt was not dropped as stale")
	}
}
