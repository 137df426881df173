package ollama

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/readback"
	"github.com/trajflow/trajflow/serve/client"
)

// writeFile writes text to dir/name and returns the path.
func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// mathTasks writes n arithmetic tasks.
func mathTasks(t *testing.T, dir string, n int) string {
	t.Helper()
	var b strings.Builder
	for i := range n {
		a, c := 10+i%80, 3+(i*7)%50
		fmt.Fprintf(&b, `{"id": "t-%04d", "question": "What is %d + %d?", "expected_answer": "%d"}`+"\n", i, a, c, a+c)
	}
	return writeFile(t, dir, "tasks.jsonl", b.String())
}

// config is what varies between the tests' configs.
type config struct {
	tasks, out, endpoint, model string
	n                           int
	maxTokens                   int
	params                      string // more keys of generate.params (flow style, each after ", ")
	output                      string // more keys of the output section (flow style, each after ", ")
	env                         string // the env section's YAML (flow style)
	prompt                      string // the prompt section's YAML (flow style)
	extra                       string // more top-level YAML
}

func writeConfig(t *testing.T, dir, name string, c config) string {
	t.Helper()
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	if c.env == "" {
		c.env = "{name: math, answer_field: expected_answer}"
	}
	if c.prompt == "" {
		c.prompt = `{system: "You are a careful mathematician.", user: "Solve: {question}"}`
	}
	if c.maxTokens == 0 {
		c.maxTokens = 16
	}
	text := fmt.Sprintf(`run: {id: ollama-e2e, progress: 0}
source: {path: %s}
prompt: %s
repeat: {n: %d, seed: 1234}
generate:
  endpoints: [%s]
  model: %s
  concurrency: 4
  params: {temperature: 1.0, max_tokens: %d%s}
env: %s
groups: {keep: all}
output: {dir: %s%s}
%s`, q(c.tasks), c.prompt, c.n, q(c.endpoint), q(c.model), c.maxTokens, c.params, c.env, q(c.out), c.output, c.extra)
	return writeFile(t, dir, name, text)
}

// rows reads back a run's committed rows and checks that every (task,
// rollout) is there exactly once.
func rows(t *testing.T, out string, tasks, n int) []*pipeline.Rollout {
	t.Helper()
	rs, err := readback.Dir(filepath.Join(out, "data"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[pipeline.Key]bool{}
	for _, r := range rs {
		k := r.Key()
		if seen[k] {
			t.Errorf("row %+v is committed twice", k)
		}
		seen[k] = true
	}
	for task := range tasks {
		for i := range n {
			if !seen[pipeline.Key{TaskIndex: int64(task), RolloutIndex: i}] {
				t.Errorf("task %d rollout %d: no row", task, i)
			}
		}
	}
	if len(rs) != tasks*n {
		t.Errorf("%d rows, want %d", len(rs), tasks*n)
	}
	return rs
}

// messageKey is a chat request's messages (role and text) and the reply
// (text and tool calls): what ties a row's turn to the exchange that
// generated it.
func messageKey(prompt []pipeline.Message, reply pipeline.Message) string {
	var b strings.Builder
	for _, m := range prompt {
		fmt.Fprintf(&b, "%s\x00%s\x01", m.Role, m.Content)
	}
	fmt.Fprintf(&b, "=>%s", reply.Content)
	for _, c := range reply.ToolCalls {
		fmt.Fprintf(&b, "\x02%s(%s)", c.Name, c.Arguments)
	}
	return b.String()
}

// usageByTurn indexes the proxy's exchanges by messageKey.
func usageByTurn(t *testing.T, xs []exchange) map[string][2]int {
	t.Helper()
	out := map[string][2]int{}
	for _, x := range xs {
		if x.Status != 200 || len(x.Response.Choices) == 0 {
			continue
		}
		var prompt []pipeline.Message
		for _, raw := range x.Request.Messages {
			var m struct {
				Role    string  `json:"role"`
				Content *string `json:"content"`
			}
			if err := json.Unmarshal(raw, &m); err != nil {
				t.Fatalf("request message %s: %v", raw, err)
			}
			pm := pipeline.Message{Role: m.Role}
			if m.Content != nil {
				pm.Content = *m.Content
			}
			prompt = append(prompt, pm)
		}
		msg := x.Response.Choices[0].Message
		reply := pipeline.Message{Role: "assistant"}
		if msg.Content != nil {
			reply.Content = *msg.Content
		}
		for _, c := range msg.ToolCalls {
			reply.ToolCalls = append(reply.ToolCalls, pipeline.ToolCall{Name: c.Function.Name, Arguments: c.Function.Arguments})
		}
		out[messageKey(prompt, reply)] = [2]int{x.Response.Usage.PromptTokens, x.Response.Usage.CompletionTokens}
	}
	return out
}

// checkUsage checks each row's prompt_tokens and completion_tokens
// against the sums of the usage the engine answered to its turns.
func checkUsage(t *testing.T, rs []*pipeline.Rollout, xs []exchange) {
	t.Helper()
	usage := usageByTurn(t, xs)
	for _, r := range rs {
		var p, c, turns int
		for i, m := range r.Messages {
			if m.Role != "assistant" {
				continue
			}
			u, ok := usage[messageKey(r.Messages[:i], m)]
			if !ok {
				t.Errorf("task %d rollout %d: turn %d (%q) matches no response the engine sent", r.Task.Index, r.RolloutIndex, turns, m.Content)
				continue
			}
			p, c, turns = p+u[0], c+u[1], turns+1
		}
		if r.PromptTokens != p || r.CompletionTokens != c {
			t.Errorf("task %d rollout %d: prompt_tokens %d, completion_tokens %d; the engine's usage over %d turns: %d, %d",
				r.Task.Index, r.RolloutIndex, r.PromptTokens, r.CompletionTokens, turns, p, c)
		}
		if p == 0 || c == 0 {
			t.Errorf("task %d rollout %d: the engine's usage says %d prompt and %d completion tokens", r.Task.Index, r.RolloutIndex, p, c)
		}
	}
}

// TestOllamaSingleTurn: the math environment on the random tiny model,
// 6 tasks × 2; every row ok, one turn of at most max_tokens tokens, its
// token counts those the engine answered.
func TestOllamaSingleTurn(t *testing.T) {
	e := sharedEngine(t)
	rec := newRecorder(t, "http://"+e.addr)
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	cfg := writeConfig(t, dir, "run.yaml", config{tasks: mathTasks(t, dir, 6), out: out, endpoint: rec.url, model: "tiny:latest", n: 2})
	res := trajflow(t, "run", cfg)
	if res.code != 0 {
		t.Fatalf("exit %d:\n%s\nengine log:\n%s", res.code, res.stderr, e.log())
	}
	rs := rows(t, out, 6, 2)
	for _, r := range rs {
		if r.Status != pipeline.StatusOK || r.NumTurns != 1 || len(r.Messages) != 3 {
			t.Errorf("task %d rollout %d: status %q (%s), %d turns, %d messages", r.Task.Index, r.RolloutIndex, r.Status, r.Error, r.NumTurns, len(r.Messages))
		}
		if r.CompletionTokens < 1 || r.CompletionTokens > 16 {
			t.Errorf("task %d rollout %d: %d completion tokens, max_tokens 16", r.Task.Index, r.RolloutIndex, r.CompletionTokens)
		}
		if r.FinishReason != "stop" && r.FinishReason != "length" {
			t.Errorf("task %d rollout %d: finish_reason %q", r.Task.Index, r.RolloutIndex, r.FinishReason)
		}
	}
	checkUsage(t, rs, rec.exchanges())
	if n := len(rec.exchanges()); n != 12 {
		t.Errorf("%d chat completions went to the engine, want 12", n)
	}
}

// TestOllamaMultiTurn: the guess environment on the random tiny model:
// every reply is an invalid guess, so each rollout runs to max_turns,
// each turn's prompt the whole conversation so far.
func TestOllamaMultiTurn(t *testing.T) {
	e := sharedEngine(t)
	rec := newRecorder(t, "http://"+e.addr)
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	tasks := writeFile(t, dir, "tasks.jsonl", `{"id": "g0", "low": 1, "high": 20}`+"\n"+`{"id": "g1", "low": 1, "high": 50}`+"\n")
	cfg := writeConfig(t, dir, "run.yaml", config{
		tasks: tasks, out: out, endpoint: rec.url, model: "tiny:latest", n: 2, maxTokens: 8,
		prompt: `{system: "Reply with one number per turn.", user: "I picked a whole number between {low} and {high}. Guess it."}`,
		env:    "{name: guess, max_guesses: 3, max_turns: 3}",
	})
	res := trajflow(t, "run", cfg)
	if res.code != 0 {
		t.Fatalf("exit %d:\n%s\nengine log:\n%s", res.code, res.stderr, e.log())
	}
	rs := rows(t, out, 2, 2)
	multi := 0
	for _, r := range rs {
		if r.Status != pipeline.StatusOK {
			t.Errorf("task %d rollout %d: status %q: %s", r.Task.Index, r.RolloutIndex, r.Status, r.Error)
		}
		if r.NumTurns > 1 {
			multi++
		}
		var assistant int
		for _, m := range r.Messages {
			if m.Role == "assistant" {
				assistant++
			}
		}
		if assistant != r.NumTurns {
			t.Errorf("task %d rollout %d: %d assistant messages, num_turns %d", r.Task.Index, r.RolloutIndex, assistant, r.NumTurns)
		}
	}
	if multi == 0 {
		t.Errorf("no rollout took more than one turn")
	}
	checkUsage(t, rs, rec.exchanges())
}

// TestOllamaToolCalls: the tools environment on tiny-tools, whose weights
// always write the same calculator call. Ollama parses it (the Qwen3
// parser) into tool_calls; trajflow runs it, sends the tool's answer back
// as a tool message, and the engine takes it: every turn is that call,
// every tool message "5", until max_turns.
func TestOllamaToolCalls(t *testing.T) {
	e := sharedEngine(t)
	rec := newRecorder(t, "http://"+e.addr)
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	cfg := writeConfig(t, dir, "run.yaml", config{
		tasks: mathTasks(t, dir, 3), out: out, endpoint: rec.url, model: "tiny-tools", n: 2, maxTokens: 64,
		prompt: `{system: "Use the calculator tool, then call submit_answer.", user: "{question}"}`,
		env:    "{name: tools, answer_field: expected_answer, tools: [calculator, submit_answer], max_turns: 3}",
	})
	res := trajflow(t, "run", cfg)
	if res.code != 0 {
		t.Fatalf("exit %d:\n%s\nengine log:\n%s", res.code, res.stderr, e.log())
	}
	rs := rows(t, out, 3, 2)
	for _, r := range rs {
		if r.Status != pipeline.StatusOK || r.NumTurns != 3 || r.ToolCalls != 3 || !r.MaxTurnsReached {
			t.Errorf("task %d rollout %d: status %q (%s), %d turns, %d tool calls, max_turns reached %v",
				r.Task.Index, r.RolloutIndex, r.Status, r.Error, r.NumTurns, r.ToolCalls, r.MaxTurnsReached)
		}
		for _, m := range r.Messages[firstReply(r):] {
			switch m.Role {
			case "assistant":
				if len(m.ToolCalls) != 1 || m.ToolCalls[0].Name != "calculator" || m.ToolCalls[0].ID == "" {
					t.Fatalf("task %d rollout %d: assistant message %+v, want one calculator call", r.Task.Index, r.RolloutIndex, m)
				}
				var args map[string]any
				if err := json.Unmarshal([]byte(m.ToolCalls[0].Arguments), &args); err != nil || args["expression"] != "2+3" {
					t.Errorf("task %d rollout %d: arguments %s", r.Task.Index, r.RolloutIndex, m.ToolCalls[0].Arguments)
				}
			case "tool":
				if m.Content != "5" || m.ToolCallID == "" {
					t.Errorf("task %d rollout %d: tool message %+v", r.Task.Index, r.RolloutIndex, m)
				}
			default:
				t.Errorf("task %d rollout %d: a %s message after the prompt", r.Task.Index, r.RolloutIndex, m.Role)
			}
		}
	}
	// The later turns sent the tool answers back, and the engine took them.
	answered := 0
	for _, x := range rec.exchanges() {
		if x.Status != 200 {
			t.Errorf("the engine answered HTTP %d: %s", x.Status, x.RawResponse)
		}
		for _, raw := range x.Request.Messages {
			if bytes.Contains(raw, []byte(`"role":"tool"`)) {
				answered++
				break
			}
		}
		if len(x.Request.Tools) != 2 {
			t.Errorf("a request offered %d tools, want 2", len(x.Request.Tools))
		}
	}
	if answered != 2*6 {
		t.Errorf("%d requests carried tool answers, want 12", answered)
	}
	checkUsage(t, rs, rec.exchanges())
}

// TestOllamaServe: `trajflow serve` generates with the engine and hands
// out a step of kept groups over HTTP.
func TestOllamaServe(t *testing.T) {
	e := sharedEngine(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	cfg := writeConfig(t, dir, "serve.yaml", config{
		tasks: mathTasks(t, dir, 8), out: out, endpoint: e.base(), model: "tiny:latest", n: 2,
		extra: "serve: {addr: \"127.0.0.1:0\", commit_interval: 100ms}\n",
	})
	cmd := exec.Command(binary, "serve", cfg)
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	defer func() {
		_ = cmd.Process.Kill() // best effort: it may have exited
		<-done
	}()
	var addr string
	for deadline := time.Now().Add(time.Minute); addr == ""; {
		if _, rest, ok := strings.Cut(stderr.String(), "serving on "); ok {
			addr = strings.Fields(rest)[0]
			break
		}
		select {
		case <-done:
			t.Fatalf("trajflow serve exited: %s", stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("trajflow serve did not listen: %s", stderr.String())
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := client.New(addr, "")
	step, err := c.Next(ctx, 3, client.FormatJSONL)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	if step.Groups != 3 || step.Rows != 6 {
		t.Errorf("step %d: %d groups, %d rows; want 3 groups of 2", step.Number, step.Groups, step.Rows)
	}
	if n := bytes.Count(step.Body, []byte("\n")); n != 6 {
		t.Errorf("the JSONL step has %d lines, want 6", n)
	}
	if !bytes.Contains(step.Body, []byte(`"assistant"`)) {
		t.Errorf("the step's rows hold no assistant message: %.500s", step.Body)
	}
	if err := c.Ack(ctx, step.Number); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("trajflow serve did not stop on SIGTERM: %s", stderr.String())
	}
}

// TestOllamaValidateSend: `trajflow validate --send` sends each rendered
// row's first request to the engine. The model may be named with or
// without its tag (Ollama serves tiny as tiny:latest); an unknown model
// is refused naming what the engine serves.
func TestOllamaValidateSend(t *testing.T) {
	e := sharedEngine(t)
	dir := t.TempDir()
	tasks := mathTasks(t, dir, 3)
	for _, model := range []string{"tiny:latest", "tiny"} {
		cfg := writeConfig(t, dir, "v.yaml", config{tasks: tasks, out: filepath.Join(dir, "out"), endpoint: e.base(), model: model, n: 2})
		res := trajflow(t, "validate", "--send", cfg)
		if res.code != 0 {
			t.Errorf("model %q: validate --send exit %d:\n%s%s", model, res.code, res.stdout, res.stderr)
		}
	}
	cfg := writeConfig(t, dir, "v.yaml", config{tasks: tasks, out: filepath.Join(dir, "out"), endpoint: e.base(), model: "nope", n: 2})
	res := trajflow(t, "validate", "--send", cfg)
	if res.code != 2 || !strings.Contains(res.stderr, `"nope"`) || !strings.Contains(res.stderr, "tiny:latest") {
		t.Errorf("unknown model: exit %d, want 2 naming the model and what is served:\n%s", res.code, res.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "out")); err == nil {
		t.Errorf("validate wrote the output directory")
	}
}

// TestOllamaKillResume: the engine is killed with SIGKILL (its process
// group: the server and its model runner) while a run of 24 tasks × 2
// generates, once it committed its first file; the run
// exits 4 within seconds, keeping what it committed. After a restart of
// the engine on the same port and model store, the rerun completes every
// (task, rollout) exactly once.
func TestOllamaKillResume(t *testing.T) {
	base := sharedEngine(t) // creates the models in its store
	bin, _ := paths(t)
	root := t.TempDir()
	e, err := startEngine(bin, root, base.store, "")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { e.kill() }()
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	const tasks, n = 24, 2
	cfg := writeConfig(t, dir, "run.yaml", config{
		tasks: mathTasks(t, dir, tasks), out: out, endpoint: e.base(), model: "tiny:latest", n: n, maxTokens: 32,
		output: ", file_rows: 4, batch_rows: 2",
	})

	start := time.Now()
	cmd := exec.Command(binary, "run", cfg)
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	for deadline := time.Now().Add(2 * time.Minute); ; {
		if m, _ := filepath.Glob(filepath.Join(out, "data", "part-*.parquet")); len(m) > 0 {
			break
		}
		select {
		case <-done:
			t.Fatalf("the run ended (exit %d) before its first commit:\n%s", cmd.ProcessState.ExitCode(), stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatalf("no commit within 2 minutes:\n%s", stderr.String())
		}
	}
	t.Logf("first commit %s after the start", time.Since(start).Round(time.Millisecond))
	e.kill()
	killed := time.Now()
	select {
	case <-done:
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("the run did not end within a minute of the engine's death:\n%s", stderr.String())
	}
	took := time.Since(killed)
	if code := cmd.ProcessState.ExitCode(); code != 4 {
		t.Errorf("exit %d after the engine died, want 4:\n%s", code, stderr.String())
	}
	if took > 30*time.Second {
		t.Errorf("the run took %s to exit after the engine died", took)
	}
	t.Logf("exit %d %s after the kill; stderr:\n%s", cmd.ProcessState.ExitCode(), took.Round(time.Millisecond), stderr.String())
	before, err := readback.Dir(filepath.Join(out, "data"))
	if err != nil {
		t.Fatal(err)
	}
	if len(before) == 0 || len(before) >= tasks*n {
		t.Errorf("%d rows committed before the kill, want some, not all of %d", len(before), tasks*n)
	}

	e2, err := startEngine(bin, root, base.store, e.addr)
	if err != nil {
		t.Fatal(err)
	}
	e = e2
	start = time.Now()
	res := trajflow(t, "run", cfg)
	t.Logf("the rerun took %s", time.Since(start).Round(time.Millisecond))
	if res.code != 0 {
		t.Fatalf("rerun: exit %d:\n%s\nengine log:\n%s", res.code, res.stderr, e.log())
	}
	if !strings.Contains(res.stdout+res.stderr, "resumed: ") {
		t.Errorf("the rerun did not say it resumed:\n%s%s", res.stdout, res.stderr)
	}
	for _, r := range rows(t, out, tasks, n) {
		if r.Status != pipeline.StatusOK {
			t.Errorf("task %d rollout %d: status %q: %s", r.Task.Index, r.RolloutIndex, r.Status, r.Error)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for a process to write while the
// test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// firstReply is the index of a row's first assistant message: the
// messages before it are the prompt.
func firstReply(r *pipeline.Rollout) int {
	for i, m := range r.Messages {
		if m.Role == "assistant" {
			return i
		}
	}
	return len(r.Messages)
}
