package httpenv

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/stages/envstep"
)

// gymResources is a resources server shaped as NeMo Gym's
// (base_resources_server.py): seed_session sets a session cookie; the
// stateful tool "deposit" adds to the session's balance and notices a
// repeated POST of the same call (its "op"); "broken" answers 500;
// verify rewards a final answer equal to the balance and returns extra
// fields, as Gym verifiers do; aggregate_metrics answers Gym's shape.
// Every request body is kept, by path.
type gymResources struct {
	mu       sync.Mutex
	next     int
	balance  map[string]int
	ops      map[string]int // op -> POSTs seen
	received map[string][]map[string]any
}

func newGymResources(t *testing.T) (*gymResources, *httptest.Server) {
	g := &gymResources{balance: map[string]int{}, ops: map[string]int{}, received: map[string][]map[string]any{}}
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	return g, srv
}

func (g *gymResources) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	defer g.mu.Unlock()
	b, _ := io.ReadAll(r.Body)
	var body map[string]any
	if err := json.Unmarshal(b, &body); err != nil {
		w.WriteHeader(422)
		fmt.Fprintf(w, `{"detail": "not JSON: %s"}`, b)
		return
	}
	g.received[r.URL.Path] = append(g.received[r.URL.Path], body)
	sess := ""
	if c, err := r.Cookie("session_id"); err == nil {
		sess = c.Value
	}
	switch r.URL.Path {
	case "/seed_session":
		g.next++
		http.SetCookie(w, &http.Cookie{Name: "session_id", Value: fmt.Sprint("s", g.next)})
		fmt.Fprint(w, `{}`)
	case "/deposit":
		op := fmt.Sprint(body["op"])
		g.ops[op]++
		g.balance[sess] += int(body["amount"].(float64))
		fmt.Fprintf(w, `{"balance": %d}`, g.balance[sess])
	case "/broken":
		w.WriteHeader(500)
		fmt.Fprint(w, `{"detail": "database is down"}`)
	case "/verify":
		reward := 0.0
		out := body["response"].(map[string]any)["output"].([]any)
		if last, ok := out[len(out)-1].(map[string]any); ok && last["type"] == "message" {
			text := last["content"].([]any)[0].(map[string]any)["text"]
			if text == fmt.Sprint(g.balance[sess]) {
				reward = 1
			}
		}
		answer := map[string]any{}
		for k, v := range body {
			answer[k] = v
		}
		answer["reward"] = reward
		answer["extracted_answer"] = "x"
		answer["judge_passed"] = reward == 1
		answer["reward_components"] = map[string]any{"format": 0.5}
		json.NewEncoder(w).Encode(answer)
	case "/aggregate_metrics":
		rows := body["verify_responses"].([]any)
		fmt.Fprintf(w, `{"agent_metrics": {"n": %d}, "key_metrics": {"n": %d}, "group_level_metrics": []}`, len(rows), len(rows))
	default:
		w.WriteHeader(404)
		fmt.Fprint(w, `{"detail": "Not Found"}`)
	}
}

func (g *gymResources) got(path string) []map[string]any {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.received[path]
}

var gymRow = map[string]any{
	"expected_answer": "7", "agent_ref": map[string]any{"name": "bank_agent"},
	"responses_create_params": map[string]any{
		"input": []any{map[string]any{"role": "user", "content": "Deposit 7."}},
		"tools": []any{map[string]any{"type": "function", "name": "deposit", "parameters": map[string]any{}, "strict": true}},
	},
}

// turn is one model reply for the drive helper.
type turn struct {
	msg    pipeline.Message
	finish string
}

// drive runs a rollout through an envstep.Stepper as the loop does:
// reset, then one Step per reply until the trajectory ends.
func drive(t *testing.T, e envs.Env, maxTurns int, r *pipeline.Rollout, replies ...turn) *pipeline.Rollout {
	t.Helper()
	ctx := context.Background()
	s := envstep.New(e, "gym", envstep.Limits{MaxTurns: maxTurns})
	if err := s.Reset(ctx, r); err != nil || r.Done() {
		t.Fatalf("reset: %v %s", err, r.Error)
	}
	for _, tr := range replies {
		r.NumTurns++
		tr.msg.Role, tr.msg.Turn = pipeline.RoleAssistant, r.NumTurns
		r.FinishReason = tr.finish
		r.PromptTokens += 10
		r.CompletionTokens += 5
		r.Messages = append(r.Messages, tr.msg)
		done, err := s.Step(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if done {
			return r
		}
	}
	t.Fatalf("%s did not end after %d replies", r, len(replies))
	return nil
}

func call(id, name, args string) turn {
	return turn{msg: pipeline.Message{ToolCalls: []pipeline.ToolCall{{ID: id, Type: "function", Name: name, Arguments: args}}}, finish: "tool_calls"}
}

func answer(text string) turn { return turn{msg: pipeline.Message{Content: text}, finish: "stop"} }

func gymRollout(row map[string]any, index int64, rolloutIndex int) *pipeline.Rollout {
	r := rollout(fmt.Sprint("t", index, "-", rolloutIndex), row)
	r.Task.Index, r.RolloutIndex = index, rolloutIndex
	return r
}

func TestGymStatefulToolIsPostedOnce(t *testing.T) {
	g, srv := newGymResources(t)
	e := newEnv(t, Config{URL: srv.URL, Protocol: ProtocolNeMoGym})
	r := drive(t, e, 4, gymRollout(gymRow, 0, 0), call("c1", "deposit", `{"op": "c1", "amount": 3}`), call("c2", "deposit", `{"op": "c2", "amount": 4}`), answer("7"))
	if r.Status != pipeline.StatusOK || r.Reward != 1 {
		t.Fatalf("status %s reward %v error %s", r.Status, r.Reward, r.Error)
	}
	for op, n := range g.ops {
		if n != 1 {
			t.Errorf("tool call %s posted %d times", op, n)
		}
	}
	if len(g.got("/deposit")) != 2 || len(g.got("/verify")) != 1 {
		t.Fatalf("server got %d deposits, %d verifies", len(g.got("/deposit")), len(g.got("/verify")))
	}
	// Verify fields beyond reward: numbers and booleans are metrics.
	want := map[string]float64{"judge_passed": 1, "reward_components.format": 0.5}
	if fmt.Sprint(r.Metrics) != fmt.Sprint(want) {
		t.Fatalf("metrics = %v, want %v", r.Metrics, want)
	}
}

func TestGymToolAnswering500IsTheToolOutput(t *testing.T) {
	g, srv := newGymResources(t)
	e := newEnv(t, Config{URL: srv.URL, Protocol: ProtocolNeMoGym, MaxAttempts: 3})
	r := drive(t, e, 4, gymRollout(gymRow, 0, 0), call("c1", "broken", `{}`), call("c2", "nope", `{}`), answer("0"))
	if r.Status != pipeline.StatusOK || r.Reward != 1 {
		t.Fatalf("status %s reward %v error %s", r.Status, r.Reward, r.Error)
	}
	if n := len(g.got("/broken")); n != 1 {
		t.Fatalf("the 500 tool was posted %d times, want 1", n)
	}
	if r.Messages[2].Content != `{"detail": "database is down"}` || r.Messages[4].Content != `{"detail": "Not Found"}` {
		t.Fatalf("tool outputs = %q, %q", r.Messages[2].Content, r.Messages[4].Content)
	}
	out := g.got("/verify")[0]["response"].(map[string]any)["output"].([]any)
	if fo := out[1].(map[string]any); fo["type"] != "function_call_output" || fo["output"] != `{"detail": "database is down"}` {
		t.Fatalf("verify's output[1] = %v", fo)
	}
}

func TestGymMaxTurnsEndingOnAToolCallIsVerified(t *testing.T) {
	g, srv := newGymResources(t)
	e := newEnv(t, Config{URL: srv.URL, Protocol: ProtocolNeMoGym})
	r := drive(t, e, 1, gymRollout(gymRow, 0, 0), call("c1", "deposit", `{"op": "c1", "amount": 7}`))
	if r.Status != pipeline.StatusOK || !r.MaxTurnsReached {
		t.Fatalf("status %s max_turns_reached %v error %s", r.Status, r.MaxTurnsReached, r.Error)
	}
	v := g.got("/verify")
	if len(g.got("/deposit")) != 1 || len(v) != 1 {
		t.Fatalf("server got %d deposits, %d verifies; want the tool run, then verify", len(g.got("/deposit")), len(v))
	}
	out := v[0]["response"].(map[string]any)["output"].([]any)
	if len(out) != 2 || out[0].(map[string]any)["type"] != "function_call" || out[1].(map[string]any)["output"] != `{"balance": 7}` {
		t.Fatalf("verify's output = %v", out)
	}
	if r.Metrics["judge_passed"] != 0 {
		t.Fatalf("metrics = %v", r.Metrics)
	}
}

func TestGymTruncatedReplyIsIncomplete(t *testing.T) {
	g, srv := newGymResources(t)
	e := newEnv(t, Config{URL: srv.URL, Protocol: ProtocolNeMoGym})
	cut := call("c1", "deposit", `{"op": "c1", "amount": 7}`)
	cut.finish = "length"
	cut.msg.Content = "<think>I should deposit"
	drive(t, e, 4, gymRollout(gymRow, 0, 0), cut)
	if len(g.got("/deposit")) != 0 {
		t.Fatal("a cut reply's tool call was run; Gym's agent stops at an incomplete reply")
	}
	resp := g.got("/verify")[0]["response"].(map[string]any)
	if resp["status"] != "incomplete" || fmt.Sprint(resp["incomplete_details"]) != "map[reason:max_output_tokens]" {
		t.Fatalf("verify's response status %v incomplete_details %v", resp["status"], resp["incomplete_details"])
	}
	if u := resp["usage"].(map[string]any); u["input_tokens"] != 10.0 || u["output_tokens"] != 5.0 || u["total_tokens"] != 15.0 {
		t.Fatalf("usage = %v", u)
	}
}

// TestGymRowsAreSentUnchanged: without config overrides or a seed, the
// row's responses_create_params reach the resources server as they are.
func TestGymRowsAreSentUnchanged(t *testing.T) {
	rows := []map[string]any{
		{"responses_create_params": map[string]any{"input": "What is 7?", "instructions": "Answer with a number.", "temperature": 0.5}, "expected_answer": "7"},
		{"responses_create_params": map[string]any{"input": []any{map[string]any{"role": "user", "content": "7?"}}, "instructions": "Be terse."}, "agent_ref": map[string]any{"name": "a"}},
	}
	for i, row := range rows {
		g, srv := newGymResources(t)
		e := newEnv(t, Config{URL: srv.URL, Protocol: ProtocolNeMoGym})
		r := gymRollout(row, int64(10+i), 2)
		r.NoSeed = true
		// The prompt the model sees has the instructions as a system message.
		r.Messages = []pipeline.Message{{Role: "system", Content: "x"}, {Role: "user", Content: "y"}}
		drive(t, e, 2, r, answer("<think>easy</think>7"))
		want, _ := json.Marshal(row["responses_create_params"])
		for _, path := range []string{"/seed_session", "/verify"} {
			b := g.got(path)[0]
			got, _ := json.Marshal(b["responses_create_params"])
			if string(got) != string(want) {
				t.Errorf("row %d: %s got responses_create_params %s, want %s", i, path, got, want)
			}
			if b["_ng_task_index"] != float64(10+i) || b["_ng_rollout_index"] != 2.0 {
				t.Errorf("row %d: %s got _ng_task_index %v _ng_rollout_index %v", i, path, b["_ng_task_index"], b["_ng_rollout_index"])
			}
		}
		out := g.got("/verify")[0]["response"].(map[string]any)["output"].([]any)
		if len(out) != 2 || out[0].(map[string]any)["type"] != "reasoning" || out[1].(map[string]any)["content"].([]any)[0].(map[string]any)["text"] != "7" {
			t.Errorf("row %d: output = %v", i, out)
		}
	}
}

func TestGymAggregateMetrics(t *testing.T) {
	g, srv := newGymResources(t)
	e := newEnv(t, Config{URL: srv.URL, Protocol: ProtocolNeMoGym})
	if res, err := e.Finish(context.Background()); res != nil || err != nil {
		t.Fatalf("Finish before any verify = %s, %v", res, err)
	}
	// Finished out of order, with task indexes that sort differently as
	// text (10 before 2) and as numbers.
	for _, k := range [][2]int{{10, 0}, {2, 1}, {2, 0}} {
		drive(t, e, 2, gymRollout(gymRow, int64(k[0]), k[1]), answer(fmt.Sprint(k)))
	}
	res, err := e.Finish(context.Background())
	if err != nil || !strings.Contains(string(res), `"agent_metrics": {"n": 3}`) {
		t.Fatalf("Finish = %s, %v", res, err)
	}
	rows := g.got("/aggregate_metrics")[0]["verify_responses"].([]any)
	var order []string
	for _, r := range rows {
		m := r.(map[string]any)
		order = append(order, fmt.Sprint(m["_ng_task_index"], "/", m["_ng_rollout_index"]))
	}
	if fmt.Sprint(order) != "[2/0 2/1 10/0]" {
		t.Fatalf("verify_responses in order %v, want Gym's (task, rollout) numeric order", order)
	}
	first := rows[0].(map[string]any)
	if first["_ng_rollout_index"] != 0.0 || first["reward"] == nil || first["agent_ref"] == nil || first["extracted_answer"] != "x" {
		t.Fatalf("verify_responses[0] = %v", first)
	}
	if _, ok := first["responses_create_params"]; ok {
		t.Fatal("verify_responses keep responses_create_params; Gym strips it")
	}
	if resp := first["response"].(map[string]any); len(resp) != 1 || resp["usage"] == nil {
		t.Fatalf("verify_responses[0].response = %v, want only usage", resp)
	}
}

func TestGymRefusesWhatGymRefuses(t *testing.T) {
	_, srv := newGymResources(t)
	e := newEnv(t, Config{URL: srv.URL, Protocol: ProtocolNeMoGym})
	row := map[string]any{"responses_create_params": map[string]any{
		"input": "hi", "tools": []any{map[string]any{"type": "function", "name": "f", "parameters": map[string]any{}}},
	}}
	_, err := e.Reset(context.Background(), gymRollout(row, 0, 0))
	if err == nil || !strings.Contains(err.Error(), `needs "strict"`) {
		t.Fatalf("reset of a function tool without strict: %v", err)
	}
}

func TestGymToolArguments(t *testing.T) {
	for _, c := range []struct {
		args, want string
	}{
		{`{"a": 1}`, ""},
		{`[]`, ""},
		{``, `{"error": "Invalid tool call arguments: JSONDecodeError('Expecting value: line 1 column 1 (char 0)')"}`},
		{`{"a": `, `{"error": "Invalid tool call arguments: JSONDecodeError('unexpected end of JSON input')"}`},
	} {
		if got := argumentsError(c.args); got != c.want {
			t.Errorf("argumentsError(%q) = %s, want %s", c.args, got, c.want)
		}
	}
}

// TestGymRowsSentWithOverrides: the config's request parameters are laid
// over the row's responses_create_params (an override replaces the row's
// key, in the Responses API's names) and the rollout's seed is added in
// metadata.extra_body (repeat.add_seed), in the bodies of /seed_session
// and /verify, as Gym's rollout collection merges its overrides and
// num_repeats_add_seed into every row. A row
// without agent_ref gets its route's name.
func TestGymRowsSentWithOverrides(t *testing.T) {
	row := map[string]any{"responses_create_params": map[string]any{"input": "What is 7?", "temperature": 0.5, "top_p": 0.9}, "expected_answer": "7"}
	g, srv := newGymResources(t)
	e := newEnv(t, Config{URL: srv.URL, Protocol: ProtocolNeMoGym})
	r := gymRollout(row, 3, 1)
	r.Seed, r.GymSeed = 1, true
	r.ConfigParams = map[string]any{"temperature": 1.0, "max_tokens": 64}
	drive(t, e, 2, r, answer("7"))
	want := `{"input":"What is 7?","max_output_tokens":64,"metadata":{"extra_body":"{\"seed\":1}"},"temperature":1,"top_p":0.9}`
	for _, path := range []string{"/seed_session", "/verify"} {
		b := g.got(path)[0]
		got, _ := json.Marshal(b["responses_create_params"])
		if string(got) != want {
			t.Errorf("%s got responses_create_params %s, want %s", path, got, want)
		}
		if ref, _ := json.Marshal(b["agent_ref"]); string(ref) != `{"name":"`+r.Env+`"}` || r.Env == "" {
			t.Errorf("%s got agent_ref %s", path, ref)
		}
	}
	if len(row["responses_create_params"].(map[string]any)) != 3 {
		t.Fatal("the row's own params were changed")
	}
}

// TestGymAggregateMetricsEveryAttempt: /aggregate_metrics gets every
// verified attempt, so a (task, rollout) pair tried twice (a dropped
// group's attempt and its retry) is sent twice, where NeMo Gym, which runs
// each pair once, sends one answer per pair.
func TestGymAggregateMetricsEveryAttempt(t *testing.T) {
	g, srv := newGymResources(t)
	e := newEnv(t, Config{URL: srv.URL, Protocol: ProtocolNeMoGym})
	for attempt := range 2 {
		r := gymRollout(gymRow, 3, 0)
		r.Attempt = attempt
		drive(t, e, 2, r, answer("7"))
	}
	if _, err := e.Finish(context.Background()); err != nil {
		t.Fatal(err)
	}
	rows := g.got("/aggregate_metrics")[0]["verify_responses"].([]any)
	if len(rows) != 2 {
		t.Fatalf("%d verify_responses for two attempts of task 3 rollout 0, want 2", len(rows))
	}
	for _, r := range rows {
		if m := r.(map[string]any); m["_ng_task_index"] != 3.0 || m["_ng_rollout_index"] != 0.0 {
			t.Fatalf("verify_responses %v", rows)
		}
	}
}
