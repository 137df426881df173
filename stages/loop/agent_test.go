package loop_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/gateway"
	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/inference/openai"
	"github.com/trajflow/trajflow/inference/sim"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/stages/envstep"
	"github.com/trajflow/trajflow/stages/generate"
	"github.com/trajflow/trajflow/stages/loop"
)

// fakeSessions opens sessions whose models the test's agents call
// directly (the gateway's HTTP side is tested in package gateway).
type fakeSessions struct {
	mu     sync.Mutex
	models map[string]gateway.Model
	n      int
}

func (f *fakeSessions) Open(m gateway.Model) envs.Session {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	id := strconv.Itoa(f.n)
	if f.models == nil {
		f.models = map[string]gateway.Model{}
	}
	var calls atomic.Int64
	f.models[id] = gateway.ModelFunc(func(ctx context.Context, c *gateway.Call) (*gateway.Answer, error) {
		a, err := m.Call(ctx, c)
		if err == nil {
			calls.Add(1)
		}
		return a, err
	})
	return envs.Session{ID: id,
		Calls: func() int { return int(calls.Load()) },
		End: func() {
			f.mu.Lock()
			delete(f.models, id)
			f.mu.Unlock()
		},
		Reward: func() (float64, bool) { return 0, false },
	}
}

// scriptAgent is an agent that makes the calls its script gives: each
// call's messages, from the answers so far.
type scriptAgent struct {
	f      *fakeSessions
	script func(answers []pipeline.Message) [][]pipeline.Message
	calls  int

	mu  sync.Mutex
	got map[int64][]*gateway.Answer // the answers, by the rollout's seed
}

func (a *scriptAgent) Reset(context.Context, *pipeline.Rollout) (*envs.Reset, error) {
	return &envs.Reset{}, nil
}

func (a *scriptAgent) Step(context.Context, *pipeline.Rollout, pipeline.Message) (*envs.Step, error) {
	return nil, fmt.Errorf("not stepped")
}

func (a *scriptAgent) Run(ctx context.Context, r *pipeline.Rollout, s envs.Session) (*envs.Step, error) {
	var answers []pipeline.Message
	for i := 0; i < a.calls; i++ {
		a.f.mu.Lock()
		m := a.f.models[s.ID]
		a.f.mu.Unlock()
		msgs := a.script(answers)[i]
		ans, err := m.Call(ctx, &gateway.Call{API: gateway.AgentChat, Messages: msgs, Params: map[string]any{"temperature": 0.5}})
		if err != nil {
			return nil, err
		}
		answers = append(answers, ans.Message)
		a.mu.Lock()
		if a.got == nil {
			a.got = map[int64][]*gateway.Answer{}
		}
		a.got[r.Seed] = append(a.got[r.Seed], ans)
		a.mu.Unlock()
	}
	s.End()
	return &envs.Step{Reward: 1, Terminated: true, Metrics: map[string]float64{"answers": float64(len(answers))}}, nil
}

// rewriting is an agent's conversation of four calls whose third rewrites
// the history (a summary in place of the first two turns).
func rewriting(q string) func(answers []pipeline.Message) [][]pipeline.Message {
	sys := pipeline.Message{Role: pipeline.RoleSystem, Content: "You are terse."}
	user := func(s string) pipeline.Message { return pipeline.Message{Role: pipeline.RoleUser, Content: s} }
	return func(a []pipeline.Message) [][]pipeline.Message {
		at := func(i int) pipeline.Message {
			if i < len(a) {
				return pipeline.Message{Role: pipeline.RoleAssistant, Content: a[i].Content, ToolCalls: a[i].ToolCalls}
			}
			return pipeline.Message{}
		}
		return [][]pipeline.Message{
			{sys, user(q)},
			{sys, user(q), at(0), user("go on")},
			{sys, user("Summary so far: the question was " + q)},
			{sys, user("Summary so far: the question was " + q), at(2), user("and now?")},
		}
	}
}

// runAgents runs n rollouts of agent through a loop against the
// simulator's HTTP server (whose template keeps earlier reasoning) in
// the given API, and returns them with every
// generation's prompt and completion ids by seed.
func runAgents(t *testing.T, api inference.API, n int, agent func(f *fakeSessions) envs.Env) ([]*pipeline.Rollout, map[int64][][]int32) {
	t.Helper()
	return runAgentsUnder(t, api, n, nil, agent)
}

// runAgentsUnder is runAgents with the generate stage under policy.
func runAgentsUnder(t *testing.T, api inference.API, n int, policy *generate.Policy, agent func(f *fakeSessions) envs.Env) ([]*pipeline.Rollout, map[int64][][]int32) {
	t.Helper()
	return runAgentsMoE(t, api, n, policy, sim.MoE{}, agent)
}

// runAgentsMoE is runAgentsUnder against a simulated model of the given
// MoE shape, asking for routed experts when it has layers.
func runAgentsMoE(t *testing.T, api inference.API, n int, policy *generate.Policy, moe sim.MoE, agent func(f *fakeSessions) envs.Env) ([]*pipeline.Rollout, map[int64][][]int32) {
	t.Helper()
	s := sim.New(sim.Options{Seed: 7, Preset: "agent", MinTurns: 3, MaxTurns: 6, ObsTokens: 40, StripReasoning: false, MoE: moe})
	defer s.Close()
	rec := &recorder{next: s.Handler(), seqs: map[int64][][]int32{}}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	c, err := openai.NewHTTP(inference.Config{Endpoints: []string{srv.URL + "/v1"}, Model: "sim", API: api, Concurrency: 4, MaxAttempts: 1}, openai.HTTPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	gen, err := generate.New(c, generate.Options{Model: "sim", API: api, Policy: policy,
		Params:        map[string]any{"max_tokens": 1024, "logprobs": true, "return_token_ids": true},
		RoutedExperts: moe.On(), RoutedExpertsLayers: moe.Layers})
	if err != nil {
		t.Fatal(err)
	}
	var rs []*pipeline.Rollout
	for i := range n {
		task := &pipeline.Task{Index: int64(i), Raw: []byte(`{"question":"q"}`)}
		rs = append(rs, &pipeline.Rollout{Task: task, GroupSize: 1, GroupID: fmt.Sprintf("t%d", i), Seed: int64(i + 1)})
	}
	f := &fakeSessions{}
	g := pipeline.NewGraph()
	src := pipeline.NewSource(g, "src", 0, func(ctx context.Context, emit func(*pipeline.Rollout) error) error {
		for _, r := range rs {
			if err := emit(r); err != nil {
				return err
			}
		}
		return nil
	})
	l := loop.New(g, "loop", gen, envstep.New(agent(f), "agent", envstep.Limits{}), loop.Options{GenWorkers: 2, EnvWorkers: 1, MaxInflight: 4, Timeout: 30 * time.Second, Sessions: f})
	var out []*pipeline.Rollout
	src.Via(l).To(pipeline.NewSink(g, "out", 0, func(_ context.Context, r *pipeline.Rollout) error {
		out = append(out, r)
		return nil
	}, nil))
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(out) != n {
		t.Fatalf("%d rollouts out of %d", len(out), n)
	}
	return out, rec.seqs
}

// TestAgentRewriteStartsSegment: an agent whose third call rewrites its
// history gets a row of two segments: no continuity break counted, every
// request's ids a prefix of its own segment's tokens, the second
// segment's prompt the template's rendering of the rewritten history, and
// mask 1 on exactly the generated ids; in tokens and in chat mode.
func TestAgentRewriteStartsSegment(t *testing.T) {
	for _, api := range []inference.API{inference.APITokens, inference.APIChat} {
		t.Run(string(api), func(t *testing.T) {
			var agent *scriptAgent
			out, seqs := runAgents(t, api, 6, func(f *fakeSessions) envs.Env {
				agent = &scriptAgent{f: f, calls: 4, script: rewriting("What is 2 + 3?")}
				return agent
			})
			for _, r := range out {
				if r.Status != pipeline.StatusOK || r.Reward != 1 || r.NumTurns != 4 {
					t.Fatalf("%s: %s %q reward %v, %d turns", r, r.Status, r.Error, r.Reward, r.NumTurns)
				}
				if r.TokenContinuityBreaks != 0 {
					t.Errorf("%s: %d continuity breaks", r, r.TokenContinuityBreaks)
				}
				if len(r.Segments) != 1 {
					t.Fatalf("%s: segments %+v, want one rewrite", r, r.Segments)
				}
				sg := r.Segments[0]
				if sg.Message != 5 || sg.Turn != 3 || sg.Token <= 0 {
					t.Fatalf("%s: segment %+v, want message 5, turn 3", r, sg)
				}
				if want := []float64{0, 0, 0, 1}; !slices.Equal(r.TurnRewards, want) {
					t.Errorf("%s: turn rewards %v, want %v", r, r.TurnRewards, want)
				}
				row := r.Tokens()
				first, second := row[:sg.Token], row[sg.Token:]
				reqs := seqs[r.Seed]
				if len(reqs) != 4 {
					t.Fatalf("%s: %d requests recorded", r, len(reqs))
				}
				for i, q := range reqs {
					in := first
					if i >= 2 {
						in = second
					}
					if !isPrefix(q, in) {
						t.Fatalf("%s: request %d (%d ids) is not a prefix of its segment (%d ids)", r, i, len(q), len(in))
					}
				}
				// Each answer carries the ids the model saw for its call
				// (its segment's tokens before it) and the ids it generated:
				// in tokens mode, exactly what the engine was sent and gave.
				for i, ans := range agent.got[r.Seed] {
					if len(ans.PromptTokenIDs) == 0 || len(ans.Message.TokenIDs) == 0 || len(ans.Message.Logprobs) != len(ans.Message.TokenIDs) {
						t.Fatalf("%s: answer %d: %d prompt ids, %d ids, %d logprobs", r, i, len(ans.PromptTokenIDs), len(ans.Message.TokenIDs), len(ans.Message.Logprobs))
					}
					in := first
					if i >= 2 {
						in = second
					}
					seen := slices.Concat(ans.PromptTokenIDs, ans.Message.TokenIDs)
					if !isPrefix(seen, in) {
						t.Fatalf("%s: answer %d: prompt and generated ids are not a prefix of its segment", r, i)
					}
					if api == inference.APITokens && !slices.Equal(seen, reqs[i]) {
						t.Fatalf("%s: answer %d: prompt and generated ids (%d) are not the request's (%d)", r, i, len(seen), len(reqs[i]))
					}
				}
				rewritten := r.Messages[sg.Message : sg.Message+2]
				if want := (sim.Template{}).Render(rewritten, nil, true); !isPrefix(want, second) {
					t.Fatalf("%s: the second segment does not start with the rewritten history's rendering", r)
				}
				ones, generated := 0, 0
				for _, v := range r.LossMask {
					ones += int(v)
				}
				for _, m := range r.Messages {
					if m.Role == pipeline.RoleAssistant {
						generated += int(m.TokenEnd - m.TokenStart)
					}
				}
				if ones != generated || generated == 0 {
					t.Fatalf("%s: mask ones %d, generated %d", r, ones, generated)
				}
				if r.CallParams["temperature"] != 0.5 {
					t.Errorf("%s: the call's parameters were not kept: %v", r, r.CallParams)
				}
			}
		})
	}
}

// TestAgentWithoutCallIsError: an agent that ends without calling the
// model is an error row of class agent_no_call, never an ok one.
func TestAgentWithoutCallIsError(t *testing.T) {
	out, _ := runAgents(t, inference.APITokens, 2, func(f *fakeSessions) envs.Env {
		return &scriptAgent{f: f, calls: 0, script: rewriting("q")}
	})
	for _, r := range out {
		if r.Status != pipeline.StatusError || r.ErrorClass != envs.ClassAgentNoCall {
			t.Fatalf("%s: %s %s, want an agent_no_call error", r, r.Status, r.ErrorClass)
		}
	}
}

// pausedAgent makes three calls; after the first it tells the test
// (answered), which pauses the fleet and later resumes it.
type pausedAgent struct {
	scriptAgent
	answered chan struct{}
	second   chan struct{} // closed when the second call returned
}

func (a *pausedAgent) Run(ctx context.Context, r *pipeline.Rollout, s envs.Session) (*envs.Step, error) {
	a.f.mu.Lock()
	m := a.f.models[s.ID]
	a.f.mu.Unlock()
	msgs := []pipeline.Message{{Role: pipeline.RoleUser, Content: "What is 2 + 3?"}}
	for i := range 3 {
		ans, err := m.Call(ctx, &gateway.Call{API: gateway.AgentChat, Messages: msgs})
		if err != nil {
			return nil, err
		}
		switch i {
		case 0:
			close(a.answered)
		case 1:
			close(a.second)
		}
		msgs = append(msgs, pipeline.Message{Role: pipeline.RoleAssistant, Content: ans.Message.Content}, pipeline.Message{Role: pipeline.RoleUser, Content: "go on"})
	}
	s.End()
	return &envs.Step{Reward: 1, Terminated: true}, nil
}

// TestAgentCallsHeldByPause: under serve's policy, an agent's call made
// while the fleet is paused waits for the resume, and its tokens carry
// the version after the update; the answer before the pause keeps its own.
func TestAgentCallsHeldByPause(t *testing.T) {
	policy := generate.NewPolicy(0)
	a := &pausedAgent{answered: make(chan struct{}), second: make(chan struct{})}
	go func() {
		<-a.answered
		// The agent's second call comes while paused: it must wait.
		_ = policy.Pause(generate.PauseKeep)
		select {
		case <-a.second:
			t.Error("a call was answered while the fleet was paused")
		case <-time.After(300 * time.Millisecond):
		}
		_ = policy.SetVersion(1)
		policy.Resume()
	}()
	out, _ := runAgentsUnder(t, inference.APITokens, 1, policy, func(f *fakeSessions) envs.Env {
		a.f = f
		return a
	})
	r := out[0]
	if r.Status != pipeline.StatusOK || r.NumTurns != 3 {
		t.Fatalf("%s: %s %q, %d turns", r, r.Status, r.Error, r.NumTurns)
	}
	var answers []pipeline.Message
	for _, m := range r.Messages {
		if m.Role == pipeline.RoleAssistant {
			answers = append(answers, m)
		}
	}
	versionAt := func(pos int32) int64 {
		for _, sp := range r.PolicyVersions {
			if sp.Start <= pos && pos < sp.End {
				return sp.Version
			}
		}
		return -1
	}
	for i, m := range answers {
		want := int64(1)
		if i == 0 {
			want = 0
		}
		if got := versionAt(m.TokenStart); got != want {
			t.Errorf("answer %d: version %d, want %d (spans %+v)", i, got, want, r.PolicyVersions)
		}
	}
}

// TestAgentSplitAnswerContinues: an agent that sends an earlier answer
// back as two consecutive assistant messages (its text split in two, as
// an SDK may send an answer's parts) continues its conversation: the row
// keeps that answer once, as the model wrote it, and the new turn's
// observations are only the messages after it; no segment, no
// continuity break, in tokens and in chat mode.
func TestAgentSplitAnswerContinues(t *testing.T) {
	sys := pipeline.Message{Role: pipeline.RoleSystem, Content: "You are terse."}
	user := func(s string) pipeline.Message { return pipeline.Message{Role: pipeline.RoleUser, Content: s} }
	split := func(a []pipeline.Message) [][]pipeline.Message {
		calls := [][]pipeline.Message{{sys, user("What is 2 + 3?")}}
		if len(a) > 0 {
			text := a[0].Content
			k := len(text) / 2
			calls = append(calls, []pipeline.Message{sys, user("What is 2 + 3?"),
				{Role: pipeline.RoleAssistant, Content: text[:k]},
				{Role: pipeline.RoleAssistant, Content: text[k:], ToolCalls: a[0].ToolCalls},
				user("go on")})
		}
		return calls
	}
	for _, api := range []inference.API{inference.APITokens, inference.APIChat} {
		t.Run(string(api), func(t *testing.T) {
			out, _ := runAgents(t, api, 4, func(f *fakeSessions) envs.Env {
				return &scriptAgent{f: f, calls: 2, script: split}
			})
			for _, r := range out {
				if r.Status != pipeline.StatusOK || r.NumTurns != 2 {
					t.Fatalf("%s: %s %q, %d turns", r, r.Status, r.Error, r.NumTurns)
				}
				roles := []string{}
				for _, m := range r.Messages {
					roles = append(roles, m.Role)
				}
				want := []string{pipeline.RoleSystem, pipeline.RoleUser, pipeline.RoleAssistant, pipeline.RoleUser, pipeline.RoleAssistant}
				if !slices.Equal(roles, want) {
					t.Fatalf("%s: messages %v, want %v", r, roles, want)
				}
				if len(r.Segments) != 0 || r.TokenContinuityBreaks != 0 {
					t.Fatalf("%s: segments %+v, %d continuity breaks", r, r.Segments, r.TokenContinuityBreaks)
				}
				if r.Messages[3].Content != "go on" || r.Messages[2].TokenEnd <= r.Messages[2].TokenStart && api == inference.APITokens {
					t.Fatalf("%s: the first answer %+v, observation %q", r, r.Messages[2], r.Messages[3].Content)
				}
			}
		})
	}
}
