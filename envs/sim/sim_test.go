package sim_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/envs"
	simenv "github.com/trajflow/trajflow/envs/sim"
	simulator "github.com/trajflow/trajflow/inference/sim"
	"github.com/trajflow/trajflow/pipeline"
)

func trailer(t testing.TB, tr simulator.Trailer) json.RawMessage {
	b, err := json.Marshal(tr)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestStep(t *testing.T) {
	env, err := envs.New("sim", envs.Options{Section: "env"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		trailer    json.RawMessage
		obs        string // "" with wantObs false: no observation
		wantObs    bool
		reward     float64
		terminated bool
		err        string
	}{
		{name: "more turns", trailer: trailer(t, simulator.Trailer{TurnsLeft: 2, ObsTokens: 3, EnvDelayMs: 1}),
			obs: "obs obs obs", wantObs: true},
		{name: "more turns, empty observation", trailer: trailer(t, simulator.Trailer{TurnsLeft: 1}), obs: "", wantObs: true},
		{name: "last turn right", trailer: trailer(t, simulator.Trailer{Correct: true, ObsTokens: 5}), reward: 1, terminated: true},
		{name: "last turn wrong", trailer: trailer(t, simulator.Trailer{Correct: false}), reward: 0, terminated: true},
		{name: "no trailer", trailer: nil, err: "sim env needs the sim:// backend or trajflow sim-server"},
		{name: "null trailer", trailer: json.RawMessage("null"), err: "sim env needs the sim:// backend"},
		{name: "bad trailer", trailer: json.RawMessage(`{"turns_left":"x"}`), err: "bad sim trailer"},
		{name: "huge observation", trailer: json.RawMessage(`{"obs_tokens":1e9,"turns_left":1}`), err: "bad sim trailer"},
		{name: "negative trailer", trailer: json.RawMessage(`{"obs_tokens":-1,"turns_left":1}`), err: "negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &pipeline.Rollout{Task: &pipeline.Task{}, Extra: tt.trailer}
			if _, err := env.Reset(context.Background(), r); err != nil {
				t.Fatalf("Reset: %v", err)
			}
			step, err := env.Step(context.Background(), r, pipeline.Message{Role: "assistant", Turn: 1})
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Step: %v", err)
			}
			if step.Terminated != tt.terminated || step.Reward != tt.reward {
				t.Fatalf("terminated %v reward %v; want %v %v", step.Terminated, step.Reward, tt.terminated, tt.reward)
			}
			if tt.wantObs {
				if len(step.Observations) != 1 || step.Observations[0].Content != tt.obs ||
					step.Observations[0].Role != pipeline.RoleUser || step.Observations[0].Turn != 1 {
					t.Fatalf("observations %+v, want one user message %q", step.Observations, tt.obs)
				}
			} else if len(step.Observations) != 0 {
				t.Fatalf("observations %+v, want none", step.Observations)
			}
			if tt.terminated && step.Metrics["acc"] != tt.reward {
				t.Fatalf("acc = %v, want %v", step.Metrics["acc"], tt.reward)
			}
		})
	}
}

func TestStepNoTrailerIsErrNoTrailer(t *testing.T) {
	env, _ := envs.New("sim", envs.Options{Section: "env"})
	_, err := env.Step(context.Background(), &pipeline.Rollout{Task: &pipeline.Task{}}, pipeline.Message{})
	if !errors.Is(err, simenv.ErrNoTrailer) {
		t.Fatalf("err = %v, want ErrNoTrailer", err)
	}
}

// A cancelled context ends the delay at once with the context's error (the
// delay is an hour: the test would hang otherwise).
func TestStepHonoursContext(t *testing.T) {
	env, _ := envs.New("sim", envs.Options{Section: "env"})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := &pipeline.Rollout{Task: &pipeline.Task{}, Extra: trailer(t, simulator.Trailer{EnvDelayMs: 3.6e6, TurnsLeft: 1})}
	if _, err := env.Step(ctx, r, pipeline.Message{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestRegistry(t *testing.T) {
	_, err := envs.New("sim", envs.Options{Section: "env", Values: map[string]any{"delay": 3}})
	if err == nil || !strings.Contains(err.Error(), "env.delay: unknown option") {
		t.Fatalf("err = %v, want env.delay: unknown option", err)
	}
	if _, err := envs.New("simulator", envs.Options{Section: "env"}); err == nil || !strings.Contains(err.Error(), `"simulator"`) {
		t.Fatalf("unknown env: err = %v", err)
	}
}

func FuzzReadTrailer(f *testing.F) {
	for _, s := range []string{`{"turns_left":1,"env_delay_ms":2.5,"obs_tokens":3,"correct":true}`, `null`, ``, `{`, `{"turns_left":-1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		tr, err := simenv.ReadTrailer(b)
		if err == nil && (tr.TurnsLeft < 0 || tr.ObsTokens < 0 || tr.EnvDelayMs < 0 || tr.ObsTokens > simenv.MaxObsTokens) {
			t.Fatalf("ReadTrailer(%q) = %+v without error", b, tr)
		}
		// The fast path agrees with encoding/json whenever it answers.
		fast, ok := simenv.ParseTrailer(b)
		if !ok {
			return
		}
		var want simulator.Trailer
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatalf("ParseTrailer(%q) = %+v, but encoding/json fails: %v", b, fast, err)
		}
		if fast != want {
			t.Fatalf("ParseTrailer(%q) = %+v, encoding/json %+v", b, fast, want)
		}
	})
}

// The compact trailers the simulator writes take the fast path; others
// still decode (through encoding/json) to the same values.
func TestReadTrailerForms(t *testing.T) {
	want := simulator.Trailer{TurnsLeft: 2, EnvDelayMs: 12.5, ObsTokens: 30, Correct: true}
	compact := trailer(t, want)
	if got, ok := simenv.ParseTrailer(compact); !ok || got != want {
		t.Fatalf("ParseTrailer(%s) = %+v, %v; want %+v, true", compact, got, ok, want)
	}
	for _, s := range []string{
		string(compact),
		`{ "turns_left": 2, "env_delay_ms": 1.25e1, "obs_tokens": 30, "correct": true }`,
		`{"Turns_Left":2,"env_delay_ms":12.5,"obs_tokens":30,"correct":true,"extra":[1,2]}`,
		`{"turns_left":9,"turns_left":2,"env_delay_ms":12.5,"obs_tokens":30,"correct":true}`,
	} {
		got, err := simenv.ReadTrailer([]byte(s))
		if err != nil || got != want {
			t.Errorf("ReadTrailer(%s) = %+v, %v; want %+v", s, got, err, want)
		}
	}
	for _, s := range []string{`{"turns_left":01}`, `{"turns_left":1.0}`, `{"env_delay_ms":.5}`, `{"correct":1}`, `{"obs_tokens":1,}`, `{"turns_left":99999999999999999999}`} {
		if tr, err := simenv.ReadTrailer([]byte(s)); err == nil {
			t.Errorf("ReadTrailer(%s) = %+v, want an error", s, tr)
		}
	}
}

func BenchmarkReadTrailer(b *testing.B) {
	raw := trailer(b, simulator.Trailer{TurnsLeft: 0, EnvDelayMs: 0, ObsTokens: 0, Correct: true})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := simenv.ReadTrailer(raw); err != nil {
			b.Fatal(err)
		}
	}
}

func Example() {
	env, err := envs.New("sim", envs.Options{Section: "env"})
	if err != nil {
		panic(err)
	}
	r := &pipeline.Rollout{Task: &pipeline.Task{}}
	for _, tr := range []string{`{"turns_left":1,"obs_tokens":4}`, `{"turns_left":0,"correct":true}`} {
		r.Extra = json.RawMessage(tr) // set by the generate stage from the reply
		step, err := env.Step(context.Background(), r, pipeline.Message{Role: "assistant"})
		if err != nil {
			panic(err)
		}
		if step.Terminated {
			fmt.Println("done, reward", step.Reward)
		} else {
			fmt.Println("observation:", step.Observations[0].Content)
		}
	}
	// Output:
	// observation: obs obs obs obs
	// done, reward 1
}
