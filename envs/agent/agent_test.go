package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/envs/agent"
	_ "github.com/trajflow/trajflow/envs/math" // the verifier of TestVerify
	"github.com/trajflow/trajflow/pipeline"
)

func TestRewardSources(t *testing.T) {
	posted := 0.75
	for _, tc := range []struct {
		name        string
		body        string
		posted      *float64
		wantReward  float64
		wantMetrics map[string]float64
	}{
		{
			name:        "last line with metrics",
			body:        `cat >/dev/null; echo "thinking..."; echo '{"reward": 0.5, "metrics": {"acc": 1, "turns": 3}}'; echo; echo "  "`,
			wantReward:  0.5,
			wantMetrics: map[string]float64{"acc": 1, "turns": 3},
		},
		{
			name:       "last line without metrics",
			body:       `echo '{"reward": -1, "note": "other keys are ignored"}'`,
			wantReward: -1,
		},
		{
			name:       "posted reward",
			body:       `cat >/dev/null`,
			posted:     &posted,
			wantReward: 0.75,
		},
		{
			name:       "posted reward before the last line",
			body:       `echo '{"reward": 0.1}'`,
			posted:     &posted,
			wantReward: 0.75,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, _ := newEnv(t, agent.Config{Command: []string{script(t, tc.body)}})
			f := called()
			f.reward = tc.posted
			step, err := e.Run(context.Background(), rollout(), f.session())
			if err != nil {
				t.Fatal(err)
			}
			if step.Reward != tc.wantReward || !step.Terminated {
				t.Errorf("step = %+v, want reward %v, terminated", step, tc.wantReward)
			}
			if len(step.Metrics) != len(tc.wantMetrics) {
				t.Errorf("metrics = %v, want %v", step.Metrics, tc.wantMetrics)
			}
			for k, v := range tc.wantMetrics {
				if step.Metrics[k] != v {
					t.Errorf("metrics[%s] = %v, want %v", k, step.Metrics[k], v)
				}
			}
			if n := f.ends.Load(); n != 1 {
				t.Errorf("End called %d times, want 1", n)
			}
		})
	}
}

func TestVerify(t *testing.T) {
	for _, tc := range []struct {
		answer string
		want   float64
	}{
		{`The sum is \boxed{2}.`, 1},
		{`The sum is \boxed{3}.`, 0},
	} {
		// The agent prints a reward the verifier overrides.
		e, _ := newEnv(t, agent.Config{
			Command:       []string{script(t, `echo '{"reward": 0.25}'`)},
			Verify:        "math",
			VerifyOptions: map[string]any{"answer_field": "expected_answer"},
		})
		r := rollout()
		f := called()
		// The gateway leaves the session's calls in r.Messages.
		f.onEnd = func() {
			r.Messages = append(r.Messages,
				pipeline.Message{Role: "user", Content: "1+1?", Turn: 0},
				pipeline.Message{Role: pipeline.RoleAssistant, Content: tc.answer, Turn: 1},
				pipeline.Message{Role: pipeline.RoleAssistant, Content: "", ToolCalls: []pipeline.ToolCall{{ID: "c1"}}, Turn: 2},
			)
		}
		step, err := e.Run(context.Background(), r, f.session())
		if err != nil {
			t.Fatal(err)
		}
		if step.Reward != tc.want || step.Metrics["acc"] != tc.want || !step.Terminated {
			t.Errorf("answer %q: step = %+v, want reward and acc %v", tc.answer, step, tc.want)
		}
	}
}

func TestVerifyWithoutAnswer(t *testing.T) {
	e, _ := newEnv(t, agent.Config{Command: []string{"true"}, Verify: "math"})
	_, err := e.Run(context.Background(), rollout(), called().session())
	wantClass(t, err, envs.ClassAgentReward, "env.verify: the session recorded no assistant message")
}

// The agent's environment and stdin, as a python agent sees them.
func TestEnvironmentAndStdin(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "seen.json")
	prog := filepath.Join(dir, "agent.py")
	src := `import json, os, sys
task = sys.stdin.read()
names = ["OPENAI_BASE_URL", "OPENAI_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY",
         "TRAJFLOW_SESSION", "TRAJFLOW_REWARD_URL", "TRAJFLOW_TASK_INDEX", "TRAJFLOW_ROLLOUT_INDEX",
         "TRAJFLOW_ATTEMPT", "TRAJFLOW_SEED", "TRAJFLOW_MODEL", "EXTRA", "HOME_SEEN"]
seen = {n: os.environ.get(n) for n in names}
seen["stdin"] = task
seen["cwd"] = os.getcwd()
with open(os.environ["OUT"], "w") as f:
    json.dump(seen, f)
print(json.dumps({"reward": 1, "metrics": {"seed": int(os.environ["TRAJFLOW_SEED"])}}))
`
	if err := os.WriteFile(prog, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("OPENAI_API_KEY", "trajflow-own-key") // must not reach the agent
	t.Setenv("HOME_SEEN", "inherited")
	e, _ := newEnv(t, agent.Config{
		Command: []string{"python3", "agent.py"},
		Dir:     dir,
		Env:     map[string]string{"EXTRA": "x=1", "OUT": out},
	})
	step, err := e.Run(context.Background(), rollout(), called().session())
	if err != nil {
		t.Fatal(err)
	}
	if step.Metrics["seed"] != 1234 {
		t.Errorf("metrics = %v, want seed 1234", step.Metrics)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var seen map[string]string
	if err := json.Unmarshal(b, &seen); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"OPENAI_BASE_URL":        "http://gw.test/s/sess-1/v1",
		"OPENAI_API_KEY":         "key-secret",
		"ANTHROPIC_BASE_URL":     "http://gw.test/s/sess-1",
		"ANTHROPIC_API_KEY":      "key-secret",
		"TRAJFLOW_SESSION":       "sess-1",
		"TRAJFLOW_REWARD_URL":    "http://gw.test/s/sess-1/reward",
		"TRAJFLOW_TASK_INDEX":    "7",
		"TRAJFLOW_ROLLOUT_INDEX": "3",
		"TRAJFLOW_ATTEMPT":       "1",
		"TRAJFLOW_SEED":          "1234",
		"TRAJFLOW_MODEL":         "test-model",
		"EXTRA":                  "x=1",
		"HOME_SEEN":              "inherited",
		"stdin":                  `{"question":"1+1?","expected_answer":"2"}` + "\n",
	}
	for k, v := range want {
		if seen[k] != v {
			t.Errorf("%s = %q, want %q", k, seen[k], v)
		}
	}
	if real, _ := filepath.EvalSymlinks(dir); seen["cwd"] != dir && seen["cwd"] != real {
		t.Errorf("cwd = %q, want %q (env.dir)", seen["cwd"], dir)
	}
}

// An agent that does not read its stdin (here a task far larger than a
// pipe's buffer) is fine.
func TestStdinNotRead(t *testing.T) {
	e, _ := newEnv(t, agent.Config{Command: []string{script(t, `echo '{"reward": 1}'`)}})
	r := rollout()
	r.Task.Raw = []byte(`{"big": "` + strings.Repeat("a", 4<<20) + `"}`)
	step, err := e.Run(context.Background(), r, called().session())
	if err != nil || step.Reward != 1 {
		t.Fatalf("step %+v, err %v", step, err)
	}
}

func TestCrash(t *testing.T) {
	e, _ := newEnv(t, agent.Config{Command: []string{script(t, `cat >/dev/null; echo '{"reward": 1}'; echo "Traceback: boom" >&2; exit 3`)}})
	f := called()
	_, err := e.Run(context.Background(), rollout(), f.session())
	wantClass(t, err, envs.ClassAgentCrash, "exit status 3", "stderr tail:\nTraceback: boom")
	if n := f.ends.Load(); n != 1 {
		t.Errorf("End called %d times, want 1", n)
	}
}

func TestCrashBySignal(t *testing.T) {
	e, _ := newEnv(t, agent.Config{Command: []string{script(t, `kill -9 $$`)}})
	_, err := e.Run(context.Background(), rollout(), called().session())
	wantClass(t, err, envs.ClassAgentCrash, "signal: killed", "stderr was empty")
}

func TestStderrTail(t *testing.T) {
	e, _ := newEnv(t, agent.Config{
		Command:    []string{script(t, `i=0; while [ $i -lt 200 ]; do echo "line $i" >&2; i=$((i+1)); done; exit 1`)},
		StderrTail: 40,
	})
	_, err := e.Run(context.Background(), rollout(), called().session())
	wantClass(t, err, envs.ClassAgentCrash, "exit status 1", "...", "line 199")
	if strings.Contains(err.Error(), "line 100") {
		t.Errorf("err = %q keeps more than stderr_tail", err)
	}
}

func TestStderrPassthrough(t *testing.T) {
	body := `printf 'first li' >&2; sleep 0.05; printf 'ne\nsecond\nno newline' >&2; echo '{"reward": 1}'`
	e, buf := newEnv(t, agent.Config{Command: []string{script(t, body)}})
	if _, err := e.Run(context.Background(), rollout(), called().session()); err != nil {
		t.Fatal(err)
	}
	want := "[agent sess-1] first line\n[agent sess-1] second\n[agent sess-1] no newline\n"
	if got := buf.String(); got != want {
		t.Errorf("stderr = %q, want %q", got, want)
	}

	off := false
	e, buf = newEnv(t, agent.Config{Command: []string{script(t, body)}, StderrPassthrough: &off})
	if _, err := e.Run(context.Background(), rollout(), called().session()); err != nil {
		t.Fatal(err)
	}
	if got := buf.String(); got != "" {
		t.Errorf("stderr_passthrough false: stderr = %q, want nothing", got)
	}
}

// expiringCtx is a context whose deadline the test decides: it ends with
// context.DeadlineExceeded when expire is called.
type expiringCtx struct {
	context.Context
	done chan struct{}
	once sync.Once
}

func newExpiringCtx() *expiringCtx {
	return &expiringCtx{Context: context.Background(), done: make(chan struct{})}
}

func (c *expiringCtx) expire()               { c.once.Do(func() { close(c.done) }) }
func (c *expiringCtx) Done() <-chan struct{} { return c.done }

func (c *expiringCtx) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// At the deadline the agent and its children get SIGTERM (SIGKILL after
// the grace); the rollout is an agent_timeout error within the grace.
func TestTimeoutKillsGroup(t *testing.T) {
	const grace = 500 * time.Millisecond
	for _, tc := range []struct {
		name     string
		trap     string
		minTaken time.Duration // after the deadline
	}{
		{name: "exits on SIGTERM"},
		// SIG_IGN is inherited by the child: both need SIGKILL.
		{name: "ignores SIGTERM", trap: `trap '' TERM`, minTaken: grace},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			body := tc.trap + `
echo $$ > ` + dir + `/leader
echo "waiting" >&2
sleep 30 &
echo $! > ` + dir + `/child
wait`
			e, _ := newEnv(t, agent.Config{Command: []string{script(t, body)}, KillGrace: pipeline.Duration(grace)})
			ctx := newExpiringCtx()
			f := called()
			done := make(chan error, 1)
			go func() {
				_, err := e.Run(ctx, rollout(), f.session())
				done <- err
			}()
			leader, child := readPID(t, dir+"/leader"), readPID(t, dir+"/child")
			ctx.expire()
			start := time.Now()
			err := <-done
			taken := time.Since(start)
			wantClass(t, err, envs.ClassAgentTimeout, "agent timed out after", "(env.timeout) and was killed", "stderr tail:\nwaiting")
			if taken < tc.minTaken || taken > grace+3*time.Second {
				t.Errorf("Run returned %s after the deadline, want at least %s and about the grace (%s) at most", taken, tc.minTaken, grace)
			}
			waitGone(t, leader, "agent")
			waitGone(t, child, "agent's child")
			if n := f.ends.Load(); n != 1 {
				t.Errorf("End called %d times, want 1", n)
			}
		})
	}
}

func TestCancel(t *testing.T) {
	dir := t.TempDir()
	e, _ := newEnv(t, agent.Config{Command: []string{script(t, `echo $$ > `+dir+`/leader; sleep 30`)}})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		readPID(t, dir+"/leader")
		cancel()
	}()
	_, err := e.Run(ctx, rollout(), called().session())
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	var ce *envs.ClassedError
	if errors.As(err, &ce) {
		t.Errorf("err = %v has class %s, want none", err, ce.Class)
	}
	waitGone(t, readPID(t, dir+"/leader"), "agent")
}

func TestCancelledBeforeStart(t *testing.T) {
	e, _ := newEnv(t, agent.Config{Command: []string{"true"}})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f := called()
	if _, err := e.Run(ctx, rollout(), f.session()); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if n := f.ends.Load(); n != 1 {
		t.Errorf("End called %d times, want 1", n)
	}
}

// Children left behind by an agent that exited are stopped.
func TestLeftoverChildStopped(t *testing.T) {
	dir := t.TempDir()
	e, _ := newEnv(t, agent.Config{Command: []string{script(t, `sleep 30 &
echo $! > `+dir+`/child
echo '{"reward": 1}'`)}})
	step, err := e.Run(context.Background(), rollout(), called().session())
	if err != nil || step.Reward != 1 {
		t.Fatalf("step %+v, err %v", step, err)
	}
	waitGone(t, readPID(t, dir+"/child"), "agent's child")
}

// A process that left the agent's group holding its stdout does not keep
// Run waiting.
func TestEscapedChildDoesNotBlock(t *testing.T) {
	if _, err := os.Stat("/usr/bin/setsid"); err != nil {
		t.Skip("no setsid")
	}
	dir := t.TempDir()
	e, _ := newEnv(t, agent.Config{Command: []string{script(t, `setsid sleep 30 &
echo $! > `+dir+`/child
echo '{"reward": 1}'`)}})
	start := time.Now()
	step, err := e.Run(context.Background(), rollout(), called().session())
	child := readPID(t, dir+"/child")
	defer func() { _ = syscall.Kill(child, syscall.SIGKILL) }()
	if err != nil || step.Reward != 1 {
		t.Fatalf("step %+v, err %v", step, err)
	}
	if taken := time.Since(start); taken > 5*time.Second {
		t.Errorf("Run took %s", taken)
	}
}

func TestNoCall(t *testing.T) {
	e, _ := newEnv(t, agent.Config{Command: []string{script(t, `echo '{"reward": 1}'`)}})
	f := &fakeSession{}
	_, err := e.Run(context.Background(), rollout(), f.session())
	wantClass(t, err, envs.ClassAgentNoCall, "the agent made no model call")
}

func TestBadRewardLine(t *testing.T) {
	for _, tc := range []struct {
		name string
		body string
		max  int
		want []string
	}{
		{"garbage", `echo '{"reward": 1}'; echo 'All done!'`, 0, []string{`last stdout line "All done!" is not a reward: not a JSON object`, `want a JSON object like {"reward": 1.0`}},
		{"no reward key", `echo '{"score": 1}'`, 0, []string{`no "reward" key`}},
		{"reward a string", `echo '{"reward": "1"}'`, 0, []string{`"reward" is a string, want a number`}},
		{"nothing printed", `cat >/dev/null`, 0, []string{"the agent printed nothing on stdout and posted no reward", "TRAJFLOW_REWARD_URL"}},
		{"line over max_output", `printf '{"reward": 1, "pad": "%0200d"}\n' 0`, 64, []string{"longer than env.max_output (64 bytes)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, _ := newEnv(t, agent.Config{Command: []string{script(t, tc.body)}, MaxOutput: tc.max})
			_, err := e.Run(context.Background(), rollout(), called().session())
			wantClass(t, err, envs.ClassAgentReward, tc.want...)
		})
	}
}

// Only the end of a long stdout is kept, and its last line read.
func TestLongOutput(t *testing.T) {
	e, _ := newEnv(t, agent.Config{
		Command:   []string{script(t, `i=0; while [ $i -lt 2000 ]; do echo "progress $i"; i=$((i+1)); done; echo '{"reward": 2}'`)},
		MaxOutput: 100,
	})
	step, err := e.Run(context.Background(), rollout(), called().session())
	if err != nil || step.Reward != 2 {
		t.Fatalf("step %+v, err %v", step, err)
	}
}

// End is called once, after the agent's process ended.
func TestEndAfterExit(t *testing.T) {
	dir := t.TempDir()
	e, _ := newEnv(t, agent.Config{Command: []string{script(t, `echo $$ > `+dir+`/leader; sleep 0.1; echo '{"reward": 1}'`)}})
	f := called()
	var exited bool
	f.onEnd = func() { exited = gone(readPID(t, dir+"/leader")) }
	if _, err := e.Run(context.Background(), rollout(), f.session()); err != nil {
		t.Fatal(err)
	}
	if n := f.ends.Load(); n != 1 || !exited {
		t.Errorf("End called %d times (want 1), agent exited before it: %v", n, exited)
	}
}

func TestStartFailure(t *testing.T) {
	path := script(t, "exit 0")
	e, _ := newEnv(t, agent.Config{Command: []string{path}})
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	f := called()
	_, err := e.Run(context.Background(), rollout(), f.session())
	wantClass(t, err, envs.ClassAgentCrash, "env.command: starting the agent")
	if n := f.ends.Load(); n != 1 {
		t.Errorf("End called %d times, want 1", n)
	}
}

func TestResetAndStep(t *testing.T) {
	e, _ := newEnv(t, agent.Config{Command: []string{"true"}})
	reset, err := e.Reset(context.Background(), rollout())
	if err != nil || len(reset.Observations) != 0 || reset.State != nil {
		t.Errorf("Reset = %+v, %v; want an empty reset", reset, err)
	}
	if _, err := e.Step(context.Background(), rollout(), pipeline.Message{}); !errors.Is(err, agent.ErrStep) {
		t.Errorf("Step err = %v, want ErrStep", err)
	}
}

// Rollouts run at once share the environment.
func TestConcurrentRuns(t *testing.T) {
	e, buf := newEnv(t, agent.Config{Command: []string{script(t, `echo "agent $TRAJFLOW_ROLLOUT_INDEX" >&2; echo "{\"reward\": $TRAJFLOW_ROLLOUT_INDEX}"`)}})
	errs := make(chan error, 8)
	for i := range 8 {
		go func() {
			r := rollout()
			r.RolloutIndex = i
			step, err := e.Run(context.Background(), r, called().session())
			if err == nil && step.Reward != float64(i) {
				err = errors.New("wrong reward")
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if n := strings.Count(buf.String(), "[agent sess-1] agent "); n != 8 {
		t.Errorf("stderr holds %d agent lines, want 8:\n%s", n, buf)
	}
}
