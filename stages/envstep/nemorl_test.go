package envstep_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/stages/envstep"
)

// scriptedEnv answers turn t with steps[t-1].
type scriptedEnv struct{ steps []*envs.Step }

func (e scriptedEnv) Reset(context.Context, *pipeline.Rollout) (*envs.Reset, error) {
	return &envs.Reset{}, nil
}

func (e scriptedEnv) Step(_ context.Context, r *pipeline.Rollout, _ pipeline.Message) (*envs.Step, error) {
	return e.steps[r.NumTurns-1], nil
}

// nemoRLSample is run_sample_multi_turn_rollout's bookkeeping (NeMo RL's
// async loop), written out again: the turn loop up to max_rollout_turns,
// total_reward summed, stop strings replaced only by a step that returns
// some (and only while the sample goes on), max_turns_reached once
// turn_count >= max_rollout_turns whatever ended the turn.
func nemoRLSample(steps []*envs.Step, maxTurns int, initialStop []string) (turns int, total float64, terminated, maxReached bool, stop []string) {
	stop = initialStop
	for range maxTurns {
		if terminated {
			break
		}
		turns++
		st := steps[turns-1]
		total += st.Reward
		terminated = st.Terminated
		if !terminated && st.StopStrings != nil {
			stop = st.StopStrings
		}
		if turns >= maxTurns {
			maxReached = true
		}
	}
	return
}

// TestStepMatchesNeMoRLAsyncLoop: over scripted environments the step
// stage ends each sample at the turn, with the reward, termination,
// max_turns_reached and stop strings that NeMo RL's async loop gives it.
func TestStepMatchesNeMoRLAsyncLoop(t *testing.T) {
	s := func(reward float64, stop []string, term bool) *envs.Step {
		return &envs.Step{Observations: []pipeline.Message{{Role: "user", Content: "o"}}, Reward: reward, StopStrings: stop, Terminated: term}
	}
	scripts := [][]*envs.Step{
		{s(0.5, nil, false), s(0.25, []string{"</a>"}, false), s(1, nil, false), s(2, nil, true)},
		{s(1, []string{"x"}, false), s(0, nil, false), s(0.5, []string{"y"}, false), s(1, nil, false)},
		{s(1, nil, true), s(5, nil, false), s(5, nil, false), s(5, nil, false)},
		{s(0, []string{"a"}, false), s(0, nil, false), s(3, nil, true), s(0, nil, false)},
	}
	for i, steps := range scripts {
		for maxTurns := 1; maxTurns <= len(steps); maxTurns++ {
			t.Run(fmt.Sprint(i, "/", maxTurns), func(t *testing.T) {
				initial := []string{"init"}
				wantTurns, wantReward, wantTerm, wantMax, wantStop := nemoRLSample(steps, maxTurns, initial)

				st := envstep.New(scriptedEnv{steps}, "scripted", envstep.Limits{MaxTurns: maxTurns})
				r := after(0, "a")
				r.StopStrings = initial
				if err := st.Reset(context.Background(), r); err != nil {
					t.Fatal(err)
				}
				for {
					r.NumTurns++
					r.Messages = append(r.Messages, pipeline.Message{Role: "assistant", Content: "a", Turn: r.NumTurns})
					done, err := st.Step(context.Background(), r)
					if err != nil {
						t.Fatal(err)
					}
					if done {
						break
					}
					if r.NumTurns > maxTurns {
						t.Fatalf("still going after %d turns", r.NumTurns)
					}
				}
				if r.NumTurns != wantTurns || r.Reward != wantReward || r.Terminated != wantTerm || r.MaxTurnsReached != wantMax {
					t.Fatalf("turns %d reward %v terminated %v max_turns_reached %v; NeMo RL: %d %v %v %v",
						r.NumTurns, r.Reward, r.Terminated, r.MaxTurnsReached, wantTurns, wantReward, wantTerm, wantMax)
				}
				if !r.Terminated && !slices.Equal(r.StopStrings, wantStop) {
					t.Fatalf("stop strings %v, NeMo RL's %v", r.StopStrings, wantStop)
				}
			})
		}
	}
}
