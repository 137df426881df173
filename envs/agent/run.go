package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/envs/internal/stderrlines"
	"github.com/trajflow/trajflow/pipeline"
)

// drainWait bounds how long Run waits, after the agent's process group is
// gone, for its stdout and stderr to reach end of file (a process that left
// the group may hold them open).
const drainWait = time.Second

// Run implements envs.Agent: it runs the agent to its end, ends the
// session, and scores the trajectory (see the package doc). s.End is
// called once the process ended, on every path: no call of the session
// writes r after Run returned.
func (e *Env) Run(ctx context.Context, r *pipeline.Rollout, s envs.Session) (*envs.Step, error) {
	out, err := e.runProcess(ctx, r, s)
	if s.End != nil {
		s.End()
	}
	if err != nil {
		return nil, err
	}
	if s.Calls != nil && s.Calls() == 0 {
		return nil, classed(envs.ClassAgentNoCall, "the agent made no model call (it exited with status 0 without a request to OPENAI_BASE_URL or ANTHROPIC_BASE_URL)")
	}
	return e.score(ctx, r, s, out)
}

func classed(class, format string, args ...any) error {
	return &envs.ClassedError{Class: class, Err: fmt.Errorf(format, args...)}
}

// runProcess starts the agent, feeds it the task, and waits for it (or
// stops it when ctx ends). It returns the tail of its stdout.
func (e *Env) runProcess(ctx context.Context, r *pipeline.Rollout, s envs.Session) (*tail, error) {
	if err := ctx.Err(); err != nil {
		return nil, e.stopped(ctx, 0, nil)
	}
	cmd := exec.Command(e.cfg.Command[0], e.cfg.Command[1:]...)
	cmd.Dir = e.cfg.Dir
	cmd.Env = e.environ(r, s)
	ownGroup(cmd)

	var files []*os.File // read and write ends of stdin, stdout and stderr
	closeAll := func(fs ...*os.File) {
		for _, f := range fs {
			_ = f.Close() // best effort: nothing was read or written through it that matters now
		}
	}
	for range 3 {
		rd, wr, err := os.Pipe()
		if err != nil {
			closeAll(files...)
			return nil, fmt.Errorf("agent env: %w", err)
		}
		files = append(files, rd, wr)
	}
	inR, inW, outR, outW, errR, errW := files[0], files[1], files[2], files[3], files[4], files[5]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	start := time.Now()
	err := cmd.Start()
	closeAll(inR, outW, errW) // the child holds its ends now
	if err != nil {
		closeAll(inW, outR, errR)
		return nil, classed(envs.ClassAgentCrash, "%s.command: starting the agent %v: %v", e.cfg.Section, e.cfg.Command, err)
	}
	pgid := cmd.Process.Pid

	stdout := &tail{max: e.cfg.MaxOutput}
	stderr := &tail{max: e.cfg.StderrTail}
	var stderrTo io.Writer = stderr
	var echo *stderrlines.Prefixed
	if *e.cfg.StderrPassthrough {
		echo = e.stderr.Prefixed("[agent " + s.ID + "] ")
		stderrTo = io.MultiWriter(stderr, echo)
	}
	var copies sync.WaitGroup
	copies.Go(func() {
		// A process that does not read its stdin is fine: the write's
		// error (EPIPE, or the deadline set once the process ended) is
		// ignored.
		_, _ = inW.Write(taskLine(r))
		_ = inW.Close() // best effort: as above
	})
	copies.Go(func() { _, _ = copyAll(stdout, outR) })
	copies.Go(func() {
		_, _ = copyAll(stderrTo, errR)
		if echo != nil {
			echo.Flush()
		}
	})
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()

	var waitErr error
	var elapsed time.Duration // when ctx ended, how long the agent had run
	stoppedByCtx := false
	grace := e.cfg.KillGrace.D()
	select {
	case waitErr = <-waited:
		stopGroup(pgid, false, time.Now().Add(grace))
	case <-ctx.Done():
		elapsed, stoppedByCtx = time.Since(start), true
		deadline := time.Now().Add(grace)
		terminate(pgid)
		t := time.NewTimer(grace)
		select {
		case waitErr = <-waited: // the context's end is the error that counts
			t.Stop()
		case <-t.C:
			kill(pgid)
			waitErr = <-waited
		}
		stopGroup(pgid, true, deadline)
	}

	// The process ended: stop feeding it, and let the copies of its output
	// end (at end of file, or at drainWait for a holder that left the
	// group).
	_ = inW.SetWriteDeadline(time.Unix(1, 0)) // best effort: a closed pipe needs none
	drained := make(chan struct{})
	go func() { copies.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(drainWait):
		_ = outR.SetReadDeadline(time.Unix(1, 0)) // best effort: see above
		_ = errR.SetReadDeadline(time.Unix(1, 0)) // best effort: see above
		<-drained
	}
	closeAll(outR, errR)

	if stoppedByCtx {
		return nil, e.stopped(ctx, elapsed, stderr)
	}
	if waitErr != nil {
		return nil, classed(envs.ClassAgentCrash, "agent %v %s%s", e.cfg.Command, exitText(waitErr), stderrText(stderr))
	}
	return stdout, nil
}

// stopped is the error of an agent stopped because ctx ended after it ran
// for elapsed: agent_timeout at the trajectory's deadline, else ctx's
// error.
func (e *Env) stopped(ctx context.Context, elapsed time.Duration, stderr *tail) error {
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return ctx.Err()
	}
	if stderr == nil {
		return classed(envs.ClassAgentTimeout, "agent timed out before it started (env.timeout)")
	}
	return classed(envs.ClassAgentTimeout, "agent timed out after %s (env.timeout) and was killed%s", elapsed.Round(time.Millisecond), stderrText(stderr))
}

// exitText says how the process ended.
func exitText(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return "exited: " + ee.Error() // "exit status 3", "signal: killed"
	}
	return "failed: " + err.Error()
}

// stderrText is the end of an error: the tail of the agent's stderr.
func stderrText(t *tail) string {
	if t == nil {
		return ""
	}
	s := t.text()
	if s == "" {
		return "; stderr was empty"
	}
	return "; stderr tail:\n" + s
}

// copyAll copies r to w, stopping at end of file or the first error.
func copyAll(w io.Writer, r io.Reader) (int64, error) {
	buf := make([]byte, 32<<10)
	return io.CopyBuffer(w, r, buf)
}

// taskLine is the task row as one JSON line.
func taskLine(r *pipeline.Rollout) []byte {
	var raw []byte
	if r.Task != nil {
		raw = r.Task.Raw
		if len(raw) == 0 && r.Task.Fields != nil {
			raw, _ = json.Marshal(r.Task.Fields) // fields decoded from JSON encode again
		}
	}
	var b bytes.Buffer
	if len(raw) == 0 || json.Compact(&b, raw) != nil {
		b.Reset()
		if len(raw) == 0 {
			b.WriteString("{}")
		} else {
			b.Write(bytes.ReplaceAll(raw, []byte("\n"), []byte(" ")))
		}
	}
	b.WriteByte('\n')
	return b.Bytes()
}

// environ is the agent's environment: trajflow's (less the variables set
// here), env.env, then the rollout's session and identity.
func (e *Env) environ(r *pipeline.Rollout, s envs.Session) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !isReserved(k) {
			env = append(env, kv)
		}
	}
	keys := make([]string, 0, len(e.cfg.Env))
	for k := range e.cfg.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+e.cfg.Env[k])
	}
	env = append(env,
		"OPENAI_BASE_URL="+s.OpenAIBaseURL,
		"OPENAI_API_KEY="+s.Key,
		"ANTHROPIC_BASE_URL="+s.AnthropicBaseURL,
		"ANTHROPIC_API_KEY="+s.Key,
		"TRAJFLOW_SESSION="+s.ID,
		"TRAJFLOW_REWARD_URL="+s.RewardURL,
		"TRAJFLOW_ROLLOUT_INDEX="+strconv.Itoa(r.RolloutIndex),
		"TRAJFLOW_ATTEMPT="+strconv.Itoa(r.Attempt),
		"TRAJFLOW_SEED="+strconv.FormatInt(r.Seed, 10),
	)
	if r.Task != nil {
		env = append(env, "TRAJFLOW_TASK_INDEX="+strconv.FormatInt(r.Task.Index, 10))
	}
	if r.Model != "" {
		env = append(env, "TRAJFLOW_MODEL="+r.Model)
	}
	return env
}

func isReserved(k string) bool {
	for _, r := range reserved {
		if k == r {
			return true
		}
	}
	return false
}

// score is the trajectory's reward: the verifier's, else the posted one,
// else the agent's last stdout line.
func (e *Env) score(ctx context.Context, r *pipeline.Rollout, s envs.Session, out *tail) (*envs.Step, error) {
	if e.verifier != nil {
		return e.verify(ctx, r)
	}
	if s.Reward != nil {
		if x, ok := s.Reward(); ok {
			return &envs.Step{Reward: x, Terminated: true}, nil
		}
	}
	line := lastLine(out.buf)
	if len(line) == 0 {
		return nil, classed(envs.ClassAgentReward, "the agent printed nothing on stdout and posted no reward; %s", RewardLineHelp)
	}
	if out.truncated && !bytes.Contains(bytes.TrimRight(out.buf, " \t\r\n"), []byte("\n")) {
		return nil, classed(envs.ClassAgentReward, "the agent's last stdout line is longer than %s.max_output (%d bytes); %s", e.cfg.Section, e.cfg.MaxOutput, RewardLineHelp)
	}
	reward, metrics, err := ParseRewardLine(line)
	if err != nil {
		return nil, classed(envs.ClassAgentReward, "the agent's last stdout line %s is not a reward: %v; %s", quote(line), err, RewardLineHelp)
	}
	return &envs.Step{Reward: reward, Metrics: metrics, Terminated: true}, nil
}

// verify scores the session's final answer with the verifier, as the loop
// would step it: Reset (its State becomes r.State), then Step.
func (e *Env) verify(ctx context.Context, r *pipeline.Rollout) (*envs.Step, error) {
	answer, ok := lastAssistant(r.Messages)
	if !ok {
		return nil, classed(envs.ClassAgentReward, "%s.verify: the session recorded no assistant message to score", e.cfg.Section)
	}
	reset, err := e.verifier.Reset(ctx, r)
	if err != nil {
		return nil, fmt.Errorf("%s.verify (%s): reset: %w", e.cfg.Section, e.cfg.Verify, err)
	}
	if reset != nil {
		r.State = reset.State
	}
	st, err := e.verifier.Step(ctx, r, answer)
	if err != nil {
		return nil, fmt.Errorf("%s.verify (%s): step: %w", e.cfg.Section, e.cfg.Verify, err)
	}
	if st == nil {
		return nil, fmt.Errorf("%s.verify (%s): step returned no result", e.cfg.Section, e.cfg.Verify)
	}
	return &envs.Step{Reward: st.Reward, Metrics: st.Metrics, Terminated: true}, nil
}

// lastAssistant is the final answer: the last assistant message with
// content, else the last assistant message.
func lastAssistant(msgs []pipeline.Message) (pipeline.Message, bool) {
	last := -1
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role != pipeline.RoleAssistant {
			continue
		}
		if msgs[i].Content != "" || len(msgs[i].Parts) > 0 {
			return msgs[i], true
		}
		if last < 0 {
			last = i
		}
	}
	if last < 0 {
		return pipeline.Message{}, false
	}
	return msgs[last], true
}
