package subprocess

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/envs/internal/wire"
	"github.com/trajflow/trajflow/pipeline"
)

// syncBuffer is a bytes.Buffer safe for the pool's stderr copiers.
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

func newHelperEnv(t *testing.T, workers int, timeout time.Duration, extra map[string]string) (*Env, *syncBuffer) {
	t.Helper()
	cmd, env := helperCommand()
	for k, v := range extra {
		env[k] = v
	}
	stderr := &syncBuffer{}
	e, err := New(Config{Command: cmd, Env: env, Workers: workers, StepTimeout: pipeline.Duration(timeout),
		ShutdownGrace: pipeline.Duration(200 * time.Millisecond), Stderr: stderr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e, stderr
}

func rollout(traj string, fields map[string]any) *pipeline.Rollout {
	raw, _ := json.Marshal(fields)
	return &pipeline.Rollout{
		TrajID: traj, Seed: 7,
		Task:     &pipeline.Task{Index: 0, Source: "test:1", Raw: raw, Fields: fields},
		Messages: []pipeline.Message{{Role: pipeline.RoleUser, Content: "start"}},
	}
}

// step appends action to r, steps, and applies the result like the pipeline.
func step(ctx context.Context, e envs.Env, r *pipeline.Rollout, content string) (*envs.Step, error) {
	action := pipeline.Message{Role: pipeline.RoleAssistant, Content: content}
	r.Messages = append(r.Messages, action)
	st, err := e.Step(ctx, r, action)
	if err != nil {
		return nil, err
	}
	r.Messages = append(r.Messages, st.Observations...)
	r.State = st.State
	return st, nil
}

func reset(t *testing.T, e envs.Env, r *pipeline.Rollout) *envs.Reset {
	t.Helper()
	rs, err := e.Reset(context.Background(), r)
	if err != nil {
		t.Fatalf("reset: %v", err)
	}
	r.State = rs.State
	r.Messages = append(r.Messages, rs.Observations...)
	return rs
}

func TestResetAndSteps(t *testing.T) {
	e, stderr := newHelperEnv(t, 1, 10*time.Second, nil)
	r := rollout("traj-1", map[string]any{"word": "apple"})
	rs := reset(t, e, r)
	if len(rs.Observations) != 1 || rs.Observations[0].Content != "hello apple" || rs.Observations[0].Role != "user" {
		t.Fatalf("reset observations = %+v", rs.Observations)
	}
	if len(rs.Tools) != 1 || !strings.Contains(string(rs.Tools[0]), `"noop"`) {
		t.Fatalf("reset tools = %s", rs.Tools)
	}
	if rs.Anchor == nil || *rs.Anchor != `{"pos":0}` {
		t.Fatalf("reset anchor = %v, want the object's compact JSON", rs.Anchor)
	}
	for i := 1; i <= 3; i++ {
		content := "go"
		switch i {
		case 2:
			content = "bad"
		case 3:
			content = "done"
		}
		st, err := step(context.Background(), e, r, content)
		if err != nil {
			t.Fatal(err)
		}
		if st.Reward != float64(i) || st.Terminated != (i == 3) {
			t.Fatalf("step %d: reward %v terminated %v", i, st.Reward, st.Terminated)
		}
		if len(st.StopStrings) != 1 || st.StopStrings[0] != "</answer>" {
			t.Fatalf("stop = %v", st.StopStrings)
		}
		if st.InvalidAction != (i == 2) || st.ReportsValidity != (i == 2) {
			t.Fatalf("step %d: invalid %v reports %v, want is_action_valid read only from step 2", i, st.InvalidAction, st.ReportsValidity)
		}
		if st.Anchor == nil || *st.Anchor != fmt.Sprintf("at %d", i) {
			t.Fatalf("step %d: anchor = %v", i, st.Anchor)
		}
		if got := string(st.State.(json.RawMessage)); got != fmt.Sprintf(`{"steps":%d}`, i) {
			t.Fatalf("state = %s", got)
		}
	}
	e.Close()
	if !strings.Contains(stderr.String(), "[env worker 0] helper ") {
		t.Fatalf("stderr not prefixed: %q", stderr.String())
	}
}

// A process environment answers image observations as OpenAI content
// parts, and is sent them back the same way on the next step.
func TestImageObservations(t *testing.T) {
	e, _ := newHelperEnv(t, 1, 10*time.Second, nil)
	defer e.Close()
	r := rollout("traj-img", map[string]any{"word": "board"})
	reset(t, e, r)
	st, err := step(context.Background(), e, r, "image")
	if err != nil {
		t.Fatal(err)
	}
	want := []pipeline.ContentPart{{Type: "text", Text: "the board:"}, {Type: "image_url", ImageURL: helperImage}}
	if len(st.Observations) != 1 || st.Observations[0].Content != "the board:" || !reflect.DeepEqual(st.Observations[0].Parts, want) {
		t.Fatalf("observations %+v", st.Observations)
	}
	if st.Metrics["images_sent"] != 0 {
		t.Fatalf("first step: %v images sent", st.Metrics["images_sent"])
	}
	// The next request's messages hold the image observation.
	if st, err = step(context.Background(), e, r, "image"); err != nil {
		t.Fatal(err)
	}
	if st.Metrics["images_sent"] != 1 {
		t.Fatalf("second step: %v images sent, want 1", st.Metrics["images_sent"])
	}
}

func pidOf(t *testing.T, e envs.Env, r *pipeline.Rollout) float64 {
	t.Helper()
	st, err := step(context.Background(), e, r, "go")
	if err != nil {
		t.Fatalf("step after fault: %v", err)
	}
	return st.Metrics["pid"]
}

func TestFaultsKillAndReplace(t *testing.T) {
	cases := []struct {
		action  string
		timeout time.Duration
		want    []string
	}{
		{"crash", 10 * time.Second, []string{"process exited (exit status 3)", "killed and replaced", "worker 0"}},
		{"hang", 1500 * time.Millisecond, []string{"no answer within step_timeout 1.5s", "killed and replaced"}},
		{"garbage", 10 * time.Second, []string{`bad response line "this is not JSON"`, "killed and replaced"}},
		{"wrongid", 10 * time.Second, []string{"answers another request", "killed and replaced"}},
		{"partial", 10 * time.Second, []string{"unterminated response line", "killed and replaced"}},
	}
	for _, c := range cases {
		t.Run(c.action, func(t *testing.T) {
			e, stderr := newHelperEnv(t, 1, c.timeout, nil)
			r := rollout("t", map[string]any{"word": "x"})
			reset(t, e, r)
			before := pidOf(t, e, r)
			_, err := step(context.Background(), e, r, c.action)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if errors.Is(err, wire.ErrEnv) {
				t.Errorf("fault reported as environment error: %v", err)
			}
			if syscall.Kill(int(before), 0) == nil {
				t.Errorf("old process %d still alive", int(before))
			}
			after := pidOf(t, e, r)
			if after == before || after == 0 {
				t.Errorf("process not replaced: pid %v then %v", before, after)
			}
			if c.action == "crash" && !strings.Contains(stderr.String(), "[env worker 0] crashing on purpose") {
				t.Errorf("crash's stderr not passed through: %q", stderr.String())
			}
		})
	}
}

func TestEnvErrorKeepsProcess(t *testing.T) {
	e, _ := newHelperEnv(t, 1, 5*time.Second, nil)
	r := rollout("t", map[string]any{"word": "x"})
	reset(t, e, r)
	before := pidOf(t, e, r)
	_, err := step(context.Background(), e, r, "enverror")
	if !errors.Is(err, wire.ErrEnv) || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("err = %v", err)
	}
	if after := pidOf(t, e, r); after != before {
		t.Fatalf("process replaced after an environment error: %v then %v", before, after)
	}
}

func TestContextCancelled(t *testing.T) {
	e, _ := newHelperEnv(t, 1, time.Minute, nil)
	r := rollout("t", map[string]any{"word": "x"})
	reset(t, e, r)
	before := pidOf(t, e, r)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	_, err := step(ctx, e, r, "hang")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if after := pidOf(t, e, r); after == before {
		t.Fatal("process interrupted mid-request was kept")
	}
	// A context that ends while every worker is busy.
	hangCtx, stopHang := context.WithCancel(context.Background())
	hung := make(chan error)
	r2 := rollout("busy", nil)
	r2.State = r.State
	go func() { _, err := step(hangCtx, e, r2, "hang"); hung <- err }()
	for len(e.slots) > 0 { // wait until the hang holds the only worker
		time.Sleep(time.Millisecond)
	}
	waitCtx, cancelWait := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancelWait()
	if _, err := e.Reset(waitCtx, r); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "waiting for a worker") {
		t.Fatalf("reset with all workers busy: %v", err)
	}
	stopHang()
	if err := <-hung; !errors.Is(err, context.Canceled) {
		t.Fatalf("hung step: %v", err)
	}
}

func TestPoolConcurrency(t *testing.T) {
	const workers, trajs, steps = 3, 24, 4
	e, _ := newHelperEnv(t, workers, 10*time.Second, nil)
	var wg sync.WaitGroup
	errs := make(chan error, trajs)
	pids := sync.Map{}
	for i := 0; i < trajs; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rollout(fmt.Sprintf("t%d", i), map[string]any{"word": i})
			rs, err := e.Reset(context.Background(), r)
			if err != nil {
				errs <- err
				return
			}
			r.State = rs.State
			for s := 1; s <= steps; s++ {
				st, err := step(context.Background(), e, r, "go")
				if err != nil {
					errs <- err
					return
				}
				if st.Reward != float64(s) {
					errs <- fmt.Errorf("traj %d step %d: reward %v (state lost between workers?)", i, s, st.Reward)
					return
				}
				pids.Store(st.Metrics["pid"], true)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	n := 0
	pids.Range(func(_, _ any) bool { n++; return true })
	if n < 1 || n > workers {
		t.Fatalf("%d distinct processes served, pool has %d", n, workers)
	}
	if got := len(e.PIDs()); got != workers {
		t.Fatalf("PIDs() = %d processes, want %d", got, workers)
	}
}

func TestCloseLeavesNothing(t *testing.T) {
	for _, ignoreEOF := range []bool{false, true} {
		t.Run(fmt.Sprintf("ignore_eof=%v", ignoreEOF), func(t *testing.T) {
			base := runtime.NumGoroutine()
			extra := map[string]string{}
			if ignoreEOF {
				extra["HELPER_IGNORE_EOF"] = "1"
			}
			e, _ := newHelperEnv(t, 2, 10*time.Second, extra)
			r := rollout("t", map[string]any{"word": "x"})
			reset(t, e, r)
			pid := int(pidOf(t, e, r))
			pids := e.PIDs()
			if len(pids) != 2 {
				t.Fatalf("PIDs = %v", pids)
			}
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			if len(e.PIDs()) != 0 {
				t.Fatalf("PIDs after Close = %v", e.PIDs())
			}
			for _, p := range append(pids, pid) {
				if err := syscall.Kill(p, 0); !errors.Is(err, syscall.ESRCH) {
					t.Errorf("process %d after Close: kill(0) = %v, want ESRCH", p, err)
				}
			}
			if _, err := e.Reset(context.Background(), r); !errors.Is(err, ErrClosed) {
				t.Fatalf("reset after Close: %v", err)
			}
			// Goroutines wind down (exec's stderr copiers have returned
			// once Close returns; allow the runtime a moment to reap).
			for i := 0; i < 100 && runtime.NumGoroutine() > base; i++ {
				time.Sleep(10 * time.Millisecond)
			}
			if n := runtime.NumGoroutine(); n > base {
				buf := make([]byte, 1<<16)
				t.Fatalf("%d goroutines after Close, %d before:\n%s", n, base, buf[:runtime.Stack(buf, true)])
			}
		})
	}
}

func TestConfigErrors(t *testing.T) {
	cases := []struct {
		name string
		vals map[string]any
		want string
	}{
		{"missing command", map[string]any{}, "env.command: required"},
		{"unknown key", map[string]any{"command": []string{"true"}, "wokers": 2}, "wokers"},
		{"bad workers", map[string]any{"command": []string{"true"}, "workers": -1}, "env.workers"},
		{"bad timeout", map[string]any{"command": []string{"true"}, "step_timeout": "soon"}, "env"},
		{"no such program", map[string]any{"command": []string{"/nonexistent/trajflow-env"}}, "env.command: starting worker 0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, err := envs.New(Name, envs.Options{Section: "env", Values: c.vals})
			if err == nil {
				e.(*Env).Close()
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q lacks %q", err, c.want)
			}
		})
	}
}

func TestRegistryOptions(t *testing.T) {
	cmd, env := helperCommand()
	e, err := envs.New(Name, envs.Options{Section: "env", Values: map[string]any{
		"command": cmd, "env": env, "workers": 2, "step_timeout": "5s", "dir": t.TempDir(),
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.(*Env).Close()
	if n := len(e.(*Env).PIDs()); n != 2 {
		t.Fatalf("%d workers, want 2", n)
	}
	r := rollout("t", map[string]any{"word": "w"})
	reset(t, e, r)
	if st, err := step(context.Background(), e, r, "go"); err != nil || st.Reward != 1 {
		t.Fatalf("step: %v %v", st, err)
	}
}

func TestPythonExample(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: the full suite runs it")
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	e, err := New(Config{Command: []string{py, "../../examples/python-env/env.py"}, Workers: 2, Stderr: &syncBuffer{}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	play := func(guesses ...string) (*pipeline.Rollout, []*envs.Step) {
		r := rollout("py", map[string]any{"word": "strawberry", "letter": "r"})
		rs := reset(t, e, r)
		if len(rs.Observations) != 1 || !strings.Contains(rs.Observations[0].Content, "'r'") {
			t.Fatalf("reset = %+v", rs.Observations)
		}
		var steps []*envs.Step
		for _, g := range guesses {
			st, err := step(context.Background(), e, r, g)
			if err != nil {
				t.Fatal(err)
			}
			steps = append(steps, st)
		}
		return r, steps
	}
	_, s := play("It is 3.")
	if s[0].Reward != 1 || !s[0].Terminated || s[0].Metrics["acc"] != 1 {
		t.Fatalf("right first guess: %+v", s[0])
	}
	_, s = play("2", "5", "3")
	if s[0].Terminated || !strings.Contains(s[0].Observations[0].Content, "too low") {
		t.Fatalf("low guess: %+v", s[0])
	}
	if s[1].Terminated || !strings.Contains(s[1].Observations[0].Content, "too high") {
		t.Fatalf("high guess: %+v", s[1])
	}
	if s[2].Reward != 1 || !s[2].Terminated || s[2].Metrics["guesses"] != 3 {
		t.Fatalf("third guess: %+v", s[2])
	}
	_, s = play("no idea", "1", "7")
	if s[2].Reward != 0 || !s[2].Terminated || s[2].Metrics["acc"] != 0 {
		t.Fatalf("out of guesses: %+v", s[2])
	}
	// A task the game cannot play is the environment's own error.
	r := rollout("bad", map[string]any{"word": "x"})
	if _, err := e.Reset(context.Background(), r); !errors.Is(err, wire.ErrEnv) || !strings.Contains(err.Error(), "letter") {
		t.Fatalf("bad task: %v", err)
	}
}

func FuzzDecodeLine(f *testing.F) {
	for _, s := range []string{
		`{"id": 7, "observations": [{"role":"user","content":"hi"}], "tools": [{"type":"function"}], "state": {"a": 1}}`,
		`{"id": 8, "reward": 1.0, "terminated": true, "metrics": {"acc": 1}, "stop": ["x"], "state": null}`,
		`{"id": 8, "error": "message"}`,
		`{"id": 9}`,
		`{"id": "8"}`,
		`{"id": 8, "bogus": 1}`,
		`{"id": 8} {"id": 8}`,
		`not json`,
		``,
		`[1,2]`,
		`{"id": 8, "observations": [{"role":"robot"}]}`,
	} {
		f.Add([]byte(s), int64(8))
	}
	f.Fuzz(func(t *testing.T, line []byte, id int64) {
		resp, err := DecodeLine(line, id)
		if err != nil {
			if resp != nil {
				t.Fatal("response with an error")
			}
			return
		}
		if resp.ID == nil || *resp.ID != id {
			t.Fatalf("accepted a response to another request: %v", resp.ID)
		}
		if resp.Error != nil {
			t.Fatal("accepted an error response as a result")
		}
		for _, o := range resp.Observations {
			switch o.Role {
			case "user", "tool", "system", "assistant":
			default:
				t.Fatalf("accepted role %q", o.Role)
			}
		}
		st := resp.Step(json.RawMessage(`"prev"`))
		if _, err := wire.StateJSON(st.State); err != nil {
			t.Fatalf("state not re-encodable: %v", err)
		}
	})
}

// An observation of role "environment" (NeMo RL's) is taken as the
// user's.
func TestEnvironmentRole(t *testing.T) {
	e, _ := newHelperEnv(t, 1, 10*time.Second, nil)
	r := rollout("traj-env", map[string]any{"word": "x"})
	reset(t, e, r)
	st, err := step(context.Background(), e, r, "environment")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Observations) != 1 || st.Observations[0].Role != pipeline.RoleUser || st.Observations[0].Content != "from the env" {
		t.Fatalf("observations %+v", st.Observations)
	}
}
