package envstep_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/stages/envstep"
)

type fixedEnv struct {
	step *envs.Step
	err  error
}

func (e fixedEnv) Reset(context.Context, *pipeline.Rollout) (*envs.Reset, error) {
	return &envs.Reset{Observations: []pipeline.Message{{Role: "user", Content: "rules"}}, State: "s0"}, nil
}

func (e fixedEnv) Step(context.Context, *pipeline.Rollout, pipeline.Message) (*envs.Step, error) {
	return e.step, e.err
}

func after(turns int, content string) *pipeline.Rollout {
	r := &pipeline.Rollout{Task: &pipeline.Task{Source: "t.jsonl:1"}, NumTurns: turns, CompletionTokens: 10,
		PromptTokenIDs: make([]int32, 20), ResponseTokenIDs: make([]int32, 10),
		Messages: []pipeline.Message{{Role: "user", Content: "q"}, {Role: "assistant", Content: content}}}
	return r
}

func TestStep(t *testing.T) {
	obs := func(s string) []pipeline.Message { return []pipeline.Message{{Role: "user", Content: s}} }
	tests := []struct {
		name    string
		limits  envstep.Limits
		step    *envs.Step
		err     error
		done    bool
		status  pipeline.Status
		flag    string
		lastObs string
		numMsgs int
	}{
		{"continues", envstep.Limits{MaxTurns: 3}, &envs.Step{Observations: obs("more"), Reward: 0.5}, nil, false, "", "", "more", 3},
		{"terminates", envstep.Limits{MaxTurns: 3}, &envs.Step{Reward: 1, Terminated: true}, nil, true, pipeline.StatusOK, "terminated", "", 2},
		{"env truncates", envstep.Limits{MaxTurns: 3}, &envs.Step{Truncated: true}, nil, true, pipeline.StatusOK, "truncated", "", 2},
		{"max turns", envstep.Limits{MaxTurns: 1}, &envs.Step{Observations: obs("more")}, nil, true, pipeline.StatusOK, "max_turns", "more", 3},
		{"no turn limit", envstep.Limits{}, &envs.Step{Observations: obs("more")}, nil, false, "", "", "more", 3},
		{"terminates with an observation", envstep.Limits{}, &envs.Step{Observations: obs("done"), Terminated: true}, nil, true, pipeline.StatusOK, "terminated", "done", 3},
		{"env fails", envstep.Limits{MaxTurns: 3}, nil, errors.New("crashed"), true, pipeline.StatusError, "", "", 2},
		// NeMo RL's async loop: the last allowed turn counts as max turns
		// reached whatever ended it.
		{"terminates on its last turn", envstep.Limits{MaxTurns: 1}, &envs.Step{Reward: 1, Terminated: true}, nil, true, pipeline.StatusOK, "terminated,max_turns", "", 2},
		{"truncated on its last turn", envstep.Limits{MaxTurns: 1}, &envs.Step{Truncated: true}, nil, true, pipeline.StatusOK, "truncated,max_turns", "", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := envstep.New(fixedEnv{tt.step, tt.err}, "fixed", tt.limits)
			r := after(1, "12345678")
			done, err := s.Step(context.Background(), r)
			if err != nil {
				t.Fatal(err)
			}
			if done != tt.done || r.Status != tt.status || len(r.Messages) != tt.numMsgs {
				t.Fatalf("done %v status %s messages %d", done, r.Status, len(r.Messages))
			}
			flags := map[string]bool{"terminated": r.Terminated, "truncated": r.Truncated, "max_turns": r.MaxTurnsReached}
			for k, v := range flags {
				if v != slices.Contains(strings.Split(tt.flag, ","), k) {
					t.Fatalf("flags %v, want only %q", flags, tt.flag)
				}
			}
			if tt.lastObs != "" && r.Messages[len(r.Messages)-1].Content != tt.lastObs {
				t.Fatalf("last observation %q", r.Messages[len(r.Messages)-1].Content)
			}
			if tt.status == pipeline.StatusError && (r.ErrorClass != "env" || !strings.Contains(r.Error, "crashed")) {
				t.Fatalf("error %q class %q", r.Error, r.ErrorClass)
			}
		})
	}
}

// TestStopStringsCarryForward: stop strings an environment returns apply
// until it returns others (NeMo RL's async loop); an empty list clears.
func TestStopStringsCarryForward(t *testing.T) {
	steps := []struct {
		stop []string
		want []string
	}{
		{[]string{"</answer>"}, []string{"</answer>"}},
		{nil, []string{"</answer>"}},
		{[]string{"STOP"}, []string{"STOP"}},
		{[]string{}, []string{}},
	}
	r := after(0, "a")
	for i, st := range steps {
		s := envstep.New(fixedEnv{step: &envs.Step{Observations: []pipeline.Message{{Role: "user", Content: "o"}}, StopStrings: st.stop}}, "fixed", envstep.Limits{})
		r.NumTurns = i + 1
		r.Messages = append(r.Messages, pipeline.Message{Role: "assistant", Content: "a"})
		if _, err := s.Step(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(r.StopStrings, st.want) {
			t.Fatalf("step %d: stop strings %q, want %q", i, r.StopStrings, st.want)
		}
	}
}

func TestRewardsSumOverTurns(t *testing.T) {
	s := envstep.New(fixedEnv{step: &envs.Step{Observations: []pipeline.Message{{Role: "user", Content: "o"}}, Reward: 0.25, Metrics: map[string]float64{"x": 1}}}, "fixed", envstep.Limits{MaxTurns: 3})
	r := after(0, "a")
	if err := s.Reset(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if r.State != "s0" || r.Messages[len(r.Messages)-1].Content != "rules" || r.Env != "fixed" {
		t.Fatalf("after reset: state %v messages %+v", r.State, r.Messages)
	}
	for turn := 1; turn <= 3; turn++ {
		r.NumTurns = turn
		r.Messages = append(r.Messages, pipeline.Message{Role: "assistant", Content: "a"})
		done, _ := s.Step(context.Background(), r)
		if done != (turn == 3) {
			t.Fatalf("turn %d done %v", turn, done)
		}
	}
	if r.Reward != 0.75 || len(r.TurnRewards) != 3 || !r.MaxTurnsReached || r.Metrics["x"] != 1 {
		t.Fatalf("reward %g turn rewards %v", r.Reward, r.TurnRewards)
	}
}

// endingEnv is an envs.Ender: it sees every trajectory the loop ends
// without it, with the turn's observations already appended.
type endingEnv struct {
	fixedEnv
	end  *envs.Step
	err  error
	seen *[]int
}

func (e endingEnv) End(_ context.Context, r *pipeline.Rollout) (*envs.Step, error) {
	*e.seen = append(*e.seen, len(r.Messages))
	return e.end, e.err
}

func TestEnder(t *testing.T) {
	more := &envs.Step{Observations: []pipeline.Message{{Role: "tool", Content: "out"}}, Reward: 0.25}
	tests := []struct {
		name    string
		limits  envstep.Limits
		step    *envs.Step
		end     *envs.Step
		err     error
		ended   []int // len(r.Messages) at each End call
		reward  float64
		status  pipeline.Status
		metrics map[string]float64
	}{
		{"max turns ends on a tool call", envstep.Limits{MaxTurns: 1}, more, &envs.Step{Reward: 1, Metrics: map[string]float64{"acc": 1}}, nil, []int{3}, 1.25, pipeline.StatusOK, map[string]float64{"acc": 1}},
		{"the env terminates: no End", envstep.Limits{MaxTurns: 1}, &envs.Step{Reward: 1, Terminated: true}, nil, nil, nil, 1, pipeline.StatusOK, nil},
		{"turns left: no End", envstep.Limits{MaxTurns: 2}, more, nil, nil, nil, 0.25, "", nil},
		{"End fails", envstep.Limits{MaxTurns: 1}, more, nil, errors.New("verify down"), []int{3}, 0.25, pipeline.StatusError, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var seen []int
			s := envstep.New(endingEnv{fixedEnv{step: tt.step}, tt.end, tt.err, &seen}, "e", tt.limits)
			r := after(1, "x")
			if _, err := s.Step(context.Background(), r); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(seen, tt.ended) || r.Reward != tt.reward || r.Status != tt.status || len(r.Metrics) != len(tt.metrics) {
				t.Fatalf("ended %v reward %v status %q metrics %v; want %v %v %q %v", seen, r.Reward, r.Status, r.Metrics, tt.ended, tt.reward, tt.status, tt.metrics)
			}
			if tt.end != nil && r.TurnRewards[len(r.TurnRewards)-1] != tt.reward {
				t.Fatalf("turn rewards %v: End's reward belongs to the last turn", r.TurnRewards)
			}
		})
	}
}

// TestNumbersRefused: a reward or metric that is not finite, or beyond
// MaxAbsReward, fails the rollout as an env error naming the field; the
// rollout keeps no such number.
func TestNumbersRefused(t *testing.T) {
	tests := []struct {
		name string
		step *envs.Step
		want string
	}{
		{"NaN reward", &envs.Step{Reward: math.NaN(), Terminated: true}, "reward: NaN is not a finite number"},
		{"+Inf reward", &envs.Step{Reward: math.Inf(1), Terminated: true}, "reward: +Inf is not a finite number"},
		{"1e308 reward", &envs.Step{Reward: 1e308, Terminated: true}, "reward: 1e+308 is out of range"},
		{"-1.7e308 reward", &envs.Step{Reward: -1.7e308}, "reward: -1.7e+308 is out of range"},
		{"NaN metric", &envs.Step{Reward: 1, Metrics: map[string]float64{"acc": 1, "len": math.NaN()}, Terminated: true}, `metrics["len"]: NaN is not a finite number`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := envstep.New(fixedEnv{tt.step, nil}, "fixed", envstep.Limits{MaxTurns: 3})
			r := after(1, "x")
			done, err := s.Step(context.Background(), r)
			if err != nil || !done || r.Status != pipeline.StatusError || r.ErrorClass != "env" || !strings.Contains(r.Error, tt.want) {
				t.Fatalf("done %v err %v: status %s class %q error %q", done, err, r.Status, r.ErrorClass, r.Error)
			}
			if math.IsNaN(r.Reward) || math.IsInf(r.Reward, 0) || r.Reward != 0 || len(r.Metrics) != 0 {
				t.Fatalf("reward %v metrics %v kept", r.Reward, r.Metrics)
			}
		})
	}
	// The bound itself is a reward.
	r := after(1, "x")
	s := envstep.New(fixedEnv{&envs.Step{Reward: -envstep.MaxAbsReward, Terminated: true}, nil}, "fixed", envstep.Limits{})
	if _, err := s.Step(context.Background(), r); err != nil || r.Status != pipeline.StatusOK || r.Reward != -envstep.MaxAbsReward {
		t.Fatalf("%v: status %s reward %v", err, r.Status, r.Reward)
	}
}
