package httpenv

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/nemogym"
	"github.com/trajflow/trajflow/pipeline"
)

// Session is the nemo_gym protocol's per-trajectory state: the cookies the
// resources server set for this trajectory. It travels in Rollout.State, so
// trajectories never share a session.
type Session struct {
	Cookies map[string]string `json:"cookies,omitempty"`
}

// merge returns the session updated with a response's Set-Cookie headers.
func (s Session) merge(set []*http.Cookie) Session {
	if len(set) == 0 {
		return s
	}
	out := Session{Cookies: maps.Clone(s.Cookies)}
	if out.Cookies == nil {
		out.Cookies = map[string]string{}
	}
	now := time.Now()
	for _, c := range set {
		if c.MaxAge < 0 || (!c.Expires.IsZero() && c.Expires.Before(now)) {
			delete(out.Cookies, c.Name)
			continue
		}
		out.Cookies[c.Name] = c.Value
	}
	return out
}

func session(state any) (Session, bool) {
	switch s := state.(type) {
	case Session:
		return s, true
	case *Session:
		if s != nil {
			return *s, true
		}
	}
	return Session{}, false
}

// reserved are the resources server's own endpoints (Gym's
// RESERVED_MCP_TOOL_NAMES in nemo_gym/base_resources_server.py), never a
// tool.
var reserved = map[string]bool{"seed_session": true, "verify": true, "aggregate_metrics": true, "mcp": true}

// verified collects the stripped verify answers of the run for
// /aggregate_metrics, as Gym's rollout collection does
// (_call_aggregate_metrics): each answer without response and
// responses_create_params, with response.usage kept.
type verified struct {
	mu   sync.Mutex
	rows []map[string]any
}

func (v *verified) add(row map[string]any) {
	v.mu.Lock()
	v.rows = append(v.rows, row)
	v.mu.Unlock()
}

func (e *Env) nemoReset(ctx context.Context, r *pipeline.Rollout) (*envs.Reset, error) {
	req, err := nemogym.Request(r)
	if err != nil {
		return nil, fmt.Errorf("http env: reset: %w", err)
	}
	if err := nemogym.CheckTools(req[nemogym.ParamsKey].(map[string]any)); err != nil {
		return nil, fmt.Errorf("http env: reset: task %s: %w", taskSource(r), err)
	}
	res, err := e.postGym(ctx, "/seed_session", req, nil)
	if err != nil {
		return nil, err
	}
	if res.status/100 != 2 {
		return nil, fmt.Errorf("http env: POST %s: HTTP %d: %s", res.url, res.status, snippet(res.body))
	}
	return &envs.Reset{State: Session{}.merge(res.cookies)}, nil
}

// nemoStep is one step of Gym's simple agent loop
// (responses_api_agents/simple_agent/app.py): a cut reply ends the loop
// (verify, without running its tool calls), tool calls are run, a reply
// with text and no tool call ends the loop (verify). A reply with only
// reasoning asks the model again, as Gym's loop does.
func (e *Env) nemoStep(ctx context.Context, r *pipeline.Rollout, action pipeline.Message) (*envs.Step, error) {
	sess, ok := session(r.State)
	if !ok {
		return nil, fmt.Errorf("http env: step: the trajectory has no nemo_gym session (state %T); was it reset by this environment?", r.State)
	}
	if nemogym.IncompleteDetails(r.FinishReason) != nil {
		return e.nemoVerify(ctx, sess, r, action)
	}
	if len(action.ToolCalls) > 0 {
		return e.nemoTools(ctx, sess, action)
	}
	if reasoning, text := nemogym.SplitThink(action.Content); len(reasoning) > 0 && text == "" {
		return &envs.Step{State: sess}, nil
	}
	return e.nemoVerify(ctx, sess, r, action)
}

// End implements envs.Ender: a trajectory that max_turns or a full
// sequence ended is verified, as Gym's agent verifies after max_steps.
// Other protocols have nothing to add.
func (e *Env) End(ctx context.Context, r *pipeline.Rollout) (*envs.Step, error) {
	if e.cfg.Protocol != ProtocolNeMoGym {
		return nil, nil
	}
	sess, ok := session(r.State)
	if !ok || len(r.Messages) == 0 {
		return nil, nil
	}
	return e.nemoVerify(ctx, sess, r, r.Messages[len(r.Messages)-1])
}

// Finish implements envs.Finisher: with protocol nemo_gym it posts the
// run's verify answers to {url}/aggregate_metrics and returns the answer.
func (e *Env) Finish(ctx context.Context) (json.RawMessage, error) {
	if e.cfg.Protocol != ProtocolNeMoGym {
		return nil, nil
	}
	e.verified.mu.Lock()
	rows := e.verified.rows
	e.verified.mu.Unlock()
	if len(rows) == 0 {
		return nil, nil
	}
	// Gym sorts the results by (task index, rollout index), as numbers.
	sort.SliceStable(rows, func(i, j int) bool {
		ti, tj := indexOf(rows[i][nemogym.TaskIndexKey]), indexOf(rows[j][nemogym.TaskIndexKey])
		if ti != tj {
			return ti < tj
		}
		return indexOf(rows[i][nemogym.RolloutIndexKey]) < indexOf(rows[j][nemogym.RolloutIndexKey])
	})
	res, err := e.postGym(ctx, "/aggregate_metrics", map[string]any{"verify_responses": rows}, nil)
	if err != nil {
		return nil, err
	}
	if res.status/100 != 2 {
		return nil, fmt.Errorf("http env: POST %s: HTTP %d: %s", res.url, res.status, snippet(res.body))
	}
	if !json.Valid(res.body) {
		return nil, fmt.Errorf("http env: POST %s: bad answer %s", res.url, snippet(res.body))
	}
	return json.RawMessage(res.body), nil
}

// indexOf is a row index as a number (-1 when it is not one).
func indexOf(v any) float64 {
	switch x := v.(type) {
	case int:
		return float64(x)
	case int64:
		return float64(x)
	case float64:
		return x
	case json.Number:
		if f, err := x.Float64(); err == nil {
			return f
		}
	}
	return -1
}

// nemoTools posts each tool call to {url}/<name> and answers with one tool
// message per call. Like Gym's agent, the answer's body is the tool's
// output whatever its status ("Resource-server errors are valid
// model-visible tool outputs"), and a call is never posted twice.
func (e *Env) nemoTools(ctx context.Context, sess Session, action pipeline.Message) (*envs.Step, error) {
	obs := make([]pipeline.Message, 0, len(action.ToolCalls))
	for _, call := range action.ToolCalls {
		msg := pipeline.Message{Role: pipeline.RoleTool, ToolCallID: call.ID, Name: call.Name}
		switch err := argumentsError(call.Arguments); {
		case err != "":
			msg.Content = err
		case call.Name == "" || reserved[call.Name] || strings.ContainsAny(call.Name, "/?#%\\ \t\r\n"):
			msg.Content = toolError(fmt.Sprintf("Tool %q is not available", call.Name))
		default:
			res, err := e.postGym(ctx, "/"+url.PathEscape(call.Name), json.RawMessage(call.Arguments), sess.Cookies)
			if err != nil {
				return nil, err
			}
			sess = sess.merge(res.cookies)
			msg.Content = string(res.body)
		}
		obs = append(obs, msg)
	}
	return &envs.Step{Observations: obs, State: sess}, nil
}

// argumentsError is Gym's tool output for arguments that are not JSON
// (simple_agent/app.py: {"error": "Invalid tool call arguments: <repr>"});
// "" when they are JSON. Empty arguments are not JSON, as in Gym.
func argumentsError(args string) string {
	var v any
	err := json.Unmarshal([]byte(args), &v)
	if err == nil {
		return ""
	}
	msg := err.Error()
	if args == "" {
		// Python's json.loads words it so.
		msg = "Expecting value: line 1 column 1 (char 0)"
	}
	return toolError(fmt.Sprintf("Invalid tool call arguments: JSONDecodeError('%s')", msg))
}

// toolError is a tool output {"error": msg}, spaced as Python's json.dumps.
func toolError(msg string) string {
	b, _ := json.Marshal(msg)
	return `{"error": ` + string(b) + `}`
}

// nemoVerify posts the whole trajectory to {url}/verify and ends it with
// the reward of the answer. The answer's other new numeric fields become
// metrics (a reward_components object's as reward_components.NAME).
func (e *Env) nemoVerify(ctx context.Context, sess Session, r *pipeline.Rollout, action pipeline.Message) (*envs.Step, error) {
	body, err := VerifyRequest(r, action, time.Now())
	if err != nil {
		return nil, fmt.Errorf("http env: verify: %w", err)
	}
	res, err := e.postGym(ctx, "/verify", body, sess.Cookies)
	if err != nil {
		return nil, err
	}
	if res.status/100 != 2 {
		return nil, fmt.Errorf("http env: POST %s: HTTP %d: %s", res.url, res.status, snippet(res.body))
	}
	var answer map[string]any
	if err := json.Unmarshal(res.body, &answer); err != nil || answer == nil {
		return nil, fmt.Errorf("http env: POST %s: bad verify answer %s: %v", res.url, snippet(res.body), err)
	}
	reward, ok := answer[nemogym.RewardKey].(float64)
	if !ok {
		return nil, fmt.Errorf("http env: POST %s: verify answer has no numeric reward: %s", res.url, snippet(res.body))
	}
	metrics := map[string]float64{}
	for k, v := range answer {
		if _, sent := body[k]; sent || k == nemogym.RewardKey {
			continue
		}
		switch x := v.(type) {
		case float64:
			metrics[k] = x
		case bool:
			metrics[k] = b2f(x)
		case map[string]any:
			if k == "reward_components" {
				for name, c := range x {
					if f, ok := c.(float64); ok {
						metrics[k+"."+name] = f
					}
				}
			}
		}
	}
	e.verified.add(stripped(answer, body))
	step := &envs.Step{Reward: reward, Terminated: true, State: sess.merge(res.cookies)}
	if len(metrics) > 0 {
		step.Metrics = metrics
	}
	return step, nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// stripped is a verify answer as Gym's rollout collection sends it to
// /aggregate_metrics: without response and responses_create_params, with
// response.usage, the rollout's indices and agent_ref.
func stripped(answer, req map[string]any) map[string]any {
	out := make(map[string]any, len(answer)+3)
	for k, v := range answer {
		if k != nemogym.ResponseKey && k != nemogym.ParamsKey {
			out[k] = v
		}
	}
	for _, k := range []string{nemogym.TaskIndexKey, nemogym.RolloutIndexKey, nemogym.AgentRefKey} {
		if v, ok := req[k]; ok {
			out[k] = v
		}
	}
	if resp, ok := req[nemogym.ResponseKey].(map[string]any); ok && resp["usage"] != nil {
		out[nemogym.ResponseKey] = map[string]any{"usage": resp["usage"]}
	}
	return out
}

// VerifyRequest builds the body of a NeMo Gym /verify request as Gym's
// simple agent does (run: body.model_dump() | {"response": ...}): the
// row's fields with its responses_create_params unchanged,
// _ng_task_index and _ng_rollout_index, and response, the trajectory after
// the prompt in the Responses API shape (nemogym.Response), the action
// last.
func VerifyRequest(r *pipeline.Rollout, action pipeline.Message, now time.Time) (map[string]any, error) {
	req, err := nemogym.Request(r)
	if err != nil {
		return nil, err
	}
	msgs := r.Messages
	if n := len(msgs); n == 0 || !sameMessage(msgs[n-1], action) {
		msgs = append(msgs[:n:n], action)
	}
	req[nemogym.ResponseKey] = nemogym.Response(r, msgs, req[nemogym.ParamsKey].(map[string]any), now)
	return req, nil
}

func taskSource(r *pipeline.Rollout) string {
	if r.Task == nil {
		return "(none)"
	}
	return r.Task.Source
}

func sameMessage(a, b pipeline.Message) bool {
	return a.Role == b.Role && a.Content == b.Content && len(a.ToolCalls) == len(b.ToolCalls)
}
