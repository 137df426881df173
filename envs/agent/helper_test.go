package agent_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/envs/agent"
	"github.com/trajflow/trajflow/pipeline"
)

// script writes an executable shell script into a fresh directory and
// returns its path.
func script(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agent.sh")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// fakeSession is a gateway session the tests control.
type fakeSession struct {
	calls  atomic.Int64
	ends   atomic.Int64
	reward *float64
	onEnd  func() // runs inside End
}

func (f *fakeSession) session() envs.Session {
	return envs.Session{
		ID:               "sess-1",
		Key:              "key-secret",
		OpenAIBaseURL:    "http://gw.test/s/sess-1/v1",
		AnthropicBaseURL: "http://gw.test/s/sess-1",
		RewardURL:        "http://gw.test/s/sess-1/reward",
		Reward: func() (float64, bool) {
			if f.reward == nil {
				return 0, false
			}
			return *f.reward, true
		},
		Calls: func() int { return int(f.calls.Load()) },
		End: func() {
			if f.onEnd != nil {
				f.onEnd()
			}
			f.ends.Add(1)
		},
	}
}

// called is a session that answered one call.
func called() *fakeSession {
	f := &fakeSession{}
	f.calls.Store(1)
	return f
}

func rollout() *pipeline.Rollout {
	return &pipeline.Rollout{
		Task:         &pipeline.Task{Index: 7, Raw: []byte(`{"question": "1+1?", "expected_answer": "2"}`), Fields: map[string]any{"question": "1+1?", "expected_answer": "2"}},
		RolloutIndex: 3,
		Attempt:      1,
		Seed:         1234,
		Model:        "test-model",
	}
}

// newEnv builds the environment, its stderr lines collected in the
// returned buffer.
func newEnv(t *testing.T, c agent.Config) (*agent.Env, *syncBuffer) {
	t.Helper()
	buf := &syncBuffer{}
	if c.Stderr == nil {
		c.Stderr = buf
	}
	e, err := agent.New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e, buf
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// wantClass checks that err is a *envs.ClassedError of class whose
// message holds every part.
func wantClass(t *testing.T, err error, class string, parts ...string) {
	t.Helper()
	var ce *envs.ClassedError
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v (%T), want a ClassedError of class %s", err, err, class)
	}
	if ce.Class != class {
		t.Fatalf("class = %s, want %s (err: %v)", ce.Class, class, err)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("err = %q, want it to hold %q", err, p)
		}
	}
}

// readPID reads a process id a script wrote into path, waiting for it.
func readPID(t *testing.T, path string) int {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		b, err := os.ReadFile(path)
		if err != nil || !bytes.HasSuffix(b, []byte("\n")) {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return pid
	}
	t.Fatalf("%s: no pid written", path)
	return 0
}

// gone reports whether process pid has ended (a zombie not yet reaped by
// its new parent counts as ended).
func gone(pid int) bool {
	if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && len(b) > i+2 && b[i+2] == 'Z'
}

// waitGone waits up to a second for pid to end.
func waitGone(t *testing.T, pid int, what string) {
	t.Helper()
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if gone(pid) {
			return
		}
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	t.Errorf("%s (pid %d) still running", what, pid)
}
