package gymagent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
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

// Name is the environment's registry name.
const Name = "nemo_gym_agent"

// SessionKey is the key of responses_create_params.metadata that carries
// the rollout's gateway session id (gateway.GymSessionKey).
const SessionKey = "trajflow_session"

// Defaults: Gym's (nemo_gym/server_utils.py: MAX_NUM_TRIES = 3, 0.5 s
// between tries, aiohttp's ClientTimeout() without limits).
const (
	DefaultMaxAttempts = 3
	DefaultRetryDelay  = 500 * time.Millisecond
	maxAnswer          = 256 << 20
)

func init() {
	envs.RegisterSpec(Name, envs.Spec{
		New: func(opts envs.Options) (envs.Env, error) {
			var c Config
			if err := opts.Decode(&c); err != nil {
				return nil, err
			}
			c.Section = opts.Section
			return New(c)
		},
		// Time limits and retries change how reliably, not what.
		Operational: []string{"request_timeout", "max_attempts", "retry_delay"},
	})
}

// Config is the environment's options (the env section's own keys).
type Config struct {
	// Agents maps each agent server's name (a row's agent_ref.name) to
	// its base URL (required), e.g. {bank_agent: http://127.0.0.1:9001}.
	Agents map[string]string `yaml:"agents"`
	// AgentName is the agent of rows without agent_ref (Gym's
	// +agent_name). A row without agent_ref when it is empty is an error,
	// as in Gym.
	AgentName string `yaml:"agent_name"`
	// RequestTimeout bounds one POST /run (and /aggregate_metrics); 0 is
	// none, as Gym's collection (aiohttp's ClientTimeout()): env.timeout
	// bounds the trajectory.
	//
	// Default: `0` (none).
	RequestTimeout pipeline.Duration `yaml:"request_timeout"`
	// MaxAttempts bounds the tries of a POST whose connection could not
	// be made (1: no retry), as Gym's MAX_NUM_TRIES. Unlike Gym, a /run
	// whose request was sent is never posted again (it would run the
	// rollout twice on the agent and resources servers): its failure is
	// the rollout's.
	//
	// Default: `3`.
	MaxAttempts int `yaml:"max_attempts"`
	// RetryDelay is the wait between tries, as Gym's 0.5 s.
	//
	// Default: `500ms`.
	RetryDelay pipeline.Duration `yaml:"retry_delay"`

	// Section names the config section in errors (default "env").
	Section string `yaml:"-"`
	// Client, when set, replaces the default HTTP client.
	Client *http.Client `yaml:"-"`
}

// Env posts rows to NeMo Gym agent servers. It implements envs.Agent.
type Env struct {
	cfg    Config
	client *http.Client

	mu       sync.Mutex
	answered map[string][]map[string]any // agent -> stripped run answers
}

var (
	_ envs.Agent        = (*Env)(nil)
	_ envs.Finisher     = (*Env)(nil)
	_ envs.FixedGateway = (*Env)(nil)
)

// New checks c and returns the environment. It contacts no server.
func New(c Config) (*Env, error) {
	if c.Section == "" {
		c.Section = "env"
	}
	var p pipeline.Problems
	if len(c.Agents) == 0 {
		p.Add(c.Section+".agents", "required: map each agent_ref name to its agent server's base URL (e.g. {my_agent: http://127.0.0.1:9001})")
	}
	for _, name := range sortedKeys(c.Agents) {
		u, err := url.Parse(c.Agents[name])
		switch {
		case name == "":
			p.Add(c.Section+".agents", "an agent has an empty name")
		case err != nil:
			p.Add(c.Section+".agents."+name, "%v", err)
		case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
			p.Add(c.Section+".agents."+name, "%q is not an http(s) URL", c.Agents[name])
		}
	}
	if c.AgentName != "" && c.Agents[c.AgentName] == "" && len(c.Agents) > 0 {
		p.Add(c.Section+".agent_name", "%q is not one of agents (%s)", c.AgentName, strings.Join(sortedKeys(c.Agents), ", "))
	}
	if c.RequestTimeout < 0 {
		p.Add(c.Section+".request_timeout", "must not be negative")
	}
	switch {
	case c.MaxAttempts < 0:
		p.Add(c.Section+".max_attempts", "must be at least 1, got %d", c.MaxAttempts)
	case c.MaxAttempts == 0:
		c.MaxAttempts = DefaultMaxAttempts
	}
	switch {
	case c.RetryDelay < 0:
		p.Add(c.Section+".retry_delay", "must not be negative")
	case c.RetryDelay == 0:
		c.RetryDelay = pipeline.Duration(DefaultRetryDelay)
	}
	if err := p.Err(); err != nil {
		return nil, err
	}
	client := c.Client
	if client == nil {
		client = &http.Client{Timeout: time.Duration(c.RequestTimeout)}
	}
	return &Env{cfg: c, client: client, answered: map[string][]map[string]any{}}, nil
}

// FixedGateway implements envs.FixedGateway: the agent servers are
// configured with their model server's address before the run.
func (e *Env) FixedGateway() bool { return true }

// Reset implements envs.Env: the agent writes its own prompts.
func (e *Env) Reset(ctx context.Context, r *pipeline.Rollout) (*envs.Reset, error) {
	return &envs.Reset{}, nil
}

// ErrStep is Step's error: the loop drives the environment with Run.
var ErrStep = errors.New("nemo_gym_agent env: Step is not called: the environment is driven by its agent servers (Run)")

// Step implements envs.Env; it is never called by the loop.
func (e *Env) Step(ctx context.Context, r *pipeline.Rollout, action pipeline.Message) (*envs.Step, error) {
	return nil, ErrStep
}

// RunRequest is the body Run posts to an agent's /run for r in session
// id, and the agent it goes to: the row as Gym's collection prepares it
// (nemogym.Request) with metadata.trajflow_session set.
func (e *Env) RunRequest(r *pipeline.Rollout, session string) (agent string, body map[string]any, err error) {
	fields, err := nemogym.Fields(r.Task)
	if err != nil {
		return "", nil, err
	}
	if _, ok := fields[nemogym.ParamsKey].(map[string]any); !ok {
		return "", nil, fmt.Errorf("task %s: no %s object: a NeMo Gym agent server takes Gym rows (responses_create_params.input holding the prompt)", source(r), nemogym.ParamsKey)
	}
	_, hasRef := fields[nemogym.AgentRefKey]
	body, err = nemogym.Request(r)
	if err != nil {
		return "", nil, err
	}
	if !hasRef {
		if e.cfg.AgentName == "" {
			return "", nil, fmt.Errorf("task %s: no agent_ref, and %s.agent_name is not set (Gym refuses such a row too)", source(r), e.cfg.Section)
		}
		body[nemogym.AgentRefKey] = map[string]any{"name": e.cfg.AgentName}
	}
	ref, _ := body[nemogym.AgentRefKey].(map[string]any)
	agent, _ = ref["name"].(string)
	if agent == "" {
		return "", nil, fmt.Errorf("task %s: agent_ref.name: missing or not a string", source(r))
	}
	if e.cfg.Agents[agent] == "" {
		return "", nil, fmt.Errorf("task %s: agent_ref.name %q is not one of %s.agents (%s)", source(r), agent, e.cfg.Section, strings.Join(sortedKeys(e.cfg.Agents), ", "))
	}
	rcp := maps.Clone(body[nemogym.ParamsKey].(map[string]any))
	md := map[string]any{}
	if old, ok := rcp["metadata"].(map[string]any); ok {
		maps.Copy(md, old)
	}
	md[SessionKey] = session
	rcp["metadata"] = md
	body[nemogym.ParamsKey] = rcp
	return agent, body, nil
}

// Run implements envs.Agent: it posts r's row to its agent's /run and
// scores r with the answer.
func (e *Env) Run(ctx context.Context, r *pipeline.Rollout, s envs.Session) (*envs.Step, error) {
	agent, body, err := e.RunRequest(r, s.ID)
	if err != nil {
		return nil, fmt.Errorf("nemo_gym_agent env: %w", err)
	}
	res, err := e.post(ctx, agent, "/run", body)
	if err != nil {
		return nil, err
	}
	var answer map[string]any
	if err := json.Unmarshal(res, &answer); err != nil || answer == nil {
		return nil, &envs.ClassedError{Class: envs.ClassAgentReward, Err: fmt.Errorf("nemo_gym_agent env: POST %s/run: the answer is not a JSON object: %s", e.cfg.Agents[agent], snippet(res))}
	}
	reward, ok := answer[nemogym.RewardKey].(float64)
	if !ok {
		return nil, &envs.ClassedError{Class: envs.ClassAgentReward, Err: fmt.Errorf("nemo_gym_agent env: POST %s/run: the answer has no numeric reward: %s", e.cfg.Agents[agent], snippet(res))}
	}
	e.mu.Lock()
	e.answered[agent] = append(e.answered[agent], stripped(answer, body))
	e.mu.Unlock()
	st := &envs.Step{Reward: reward, Terminated: true}
	if m := metrics(answer, body); len(m) > 0 {
		st.Metrics = m
	}
	return st, nil
}

// metrics are the answer's numeric and boolean fields that the row did
// not hold (a verifier's), reward_components' as reward_components.NAME.
func metrics(answer, sent map[string]any) map[string]float64 {
	out := map[string]float64{}
	for k, v := range answer {
		if _, was := sent[k]; was || k == nemogym.RewardKey {
			continue
		}
		switch x := v.(type) {
		case float64:
			out[k] = x
		case bool:
			if x {
				out[k] = 1
			} else {
				out[k] = 0
			}
		case map[string]any:
			if k == "reward_components" {
				for name, c := range x {
					if f, ok := c.(float64); ok {
						out[k+"."+name] = f
					}
				}
			}
		}
	}
	return out
}

// stripped is a run answer as Gym's collection sends it to
// /aggregate_metrics (_call_aggregate_metrics): without response and
// responses_create_params (response.usage kept), with the row's
// _ng_task_index, _ng_rollout_index and agent_ref.
func stripped(answer, sent map[string]any) map[string]any {
	out := make(map[string]any, len(answer)+3)
	for k, v := range answer {
		if k != nemogym.ResponseKey && k != nemogym.ParamsKey {
			out[k] = v
		}
	}
	if resp, ok := answer[nemogym.ResponseKey].(map[string]any); ok && resp["usage"] != nil {
		out[nemogym.ResponseKey] = map[string]any{"usage": resp["usage"]}
	}
	for _, k := range []string{nemogym.TaskIndexKey, nemogym.RolloutIndexKey, nemogym.AgentRefKey} {
		out[k] = sent[k]
	}
	return out
}

// Finish implements envs.Finisher: it posts the run's answers, sorted by
// (task index, rollout index), to each agent's /aggregate_metrics. With
// one agent its answer is the result; with several, {"agents": [...]}
// holds one entry per agent ({agent_ref, agent_metrics, key_metrics,
// group_level_metrics}, Gym's _aggregate_metrics.json entries).
func (e *Env) Finish(ctx context.Context) (json.RawMessage, error) {
	e.mu.Lock()
	all := map[string][]map[string]any{}
	for k, v := range e.answered {
		all[k] = append([]map[string]any(nil), v...)
	}
	e.mu.Unlock()
	if len(all) == 0 {
		return nil, nil
	}
	var entries []map[string]any
	for _, agent := range sortedKeys(all) {
		rows := all[agent]
		sort.SliceStable(rows, func(i, j int) bool {
			ti, tj := index(rows[i][nemogym.TaskIndexKey]), index(rows[j][nemogym.TaskIndexKey])
			if ti != tj {
				return ti < tj
			}
			return index(rows[i][nemogym.RolloutIndexKey]) < index(rows[j][nemogym.RolloutIndexKey])
		})
		res, err := e.post(ctx, agent, "/aggregate_metrics", map[string]any{"verify_responses": rows})
		if err != nil {
			return nil, err
		}
		var entry map[string]any
		if err := json.Unmarshal(res, &entry); err != nil || entry == nil {
			return nil, fmt.Errorf("nemo_gym_agent env: POST %s/aggregate_metrics: the answer is not a JSON object: %s", e.cfg.Agents[agent], snippet(res))
		}
		entry[nemogym.AgentRefKey] = map[string]any{"name": agent}
		entries = append(entries, entry)
	}
	if len(entries) == 1 {
		delete(entries[0], nemogym.AgentRefKey) // the runner names the route
		return json.Marshal(entries[0])
	}
	return json.Marshal(map[string]any{"agents": entries})
}

// post posts body to the agent's path and returns the answer of a 2xx.
// Only a connection that could not be made is tried again.
func (e *Env) post(ctx context.Context, agent, path string, body any) ([]byte, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("nemo_gym_agent env: %s: %w", path, err)
	}
	u := strings.TrimSuffix(e.cfg.Agents[agent], "/") + path
	for attempt := 1; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("nemo_gym_agent env: POST %s: %w", u, err)
		}
		req.Header.Set("Content-Type", "application/json")
		res, err := e.client.Do(req)
		if err != nil {
			if ctx.Err() == nil && dialFailed(err) && attempt < e.cfg.MaxAttempts {
				select {
				case <-time.After(time.Duration(e.cfg.RetryDelay)):
					continue
				case <-ctx.Done():
				}
			}
			return nil, fmt.Errorf("nemo_gym_agent env: POST %s (try %d): %w", u, attempt, err)
		}
		ans, err := io.ReadAll(io.LimitReader(res.Body, maxAnswer))
		_ = res.Body.Close() // best effort: read already
		if err != nil {
			return nil, fmt.Errorf("nemo_gym_agent env: POST %s: reading the answer: %w", u, err)
		}
		if res.StatusCode/100 != 2 {
			return nil, fmt.Errorf("nemo_gym_agent env: POST %s: HTTP %d: %s", u, res.StatusCode, snippet(ans))
		}
		return ans, nil
	}
}

// dialFailed reports whether err is a connection that was never made
// (nothing of the request was sent).
func dialFailed(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func index(v any) float64 {
	switch x := v.(type) {
	case int:
		return float64(x)
	case int64:
		return float64(x)
	case float64:
		return x
	case json.Number:
		f, _ := x.Float64()
		return f
	}
	return -1
}

func snippet(b []byte) string {
	const n = 300
	s := strings.TrimSpace(string(b))
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func source(r *pipeline.Rollout) string {
	if r.Task == nil {
		return "(none)"
	}
	return r.Task.Source
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
