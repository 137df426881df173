package envs_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/pipeline"
)

type testOptions struct {
	AnswerField string `yaml:"answer_field"`
	MaxGuesses  int    `yaml:"max_guesses"`
}

func TestOptionsDecode(t *testing.T) {
	tests := []struct {
		name    string
		values  map[string]any
		want    testOptions
		wantErr []string // substrings of the error; nil: no error
	}{
		{name: "empty", values: nil, want: testOptions{AnswerField: "def", MaxGuesses: 7}},
		{name: "set", values: map[string]any{"answer_field": "ans", "max_guesses": 3},
			want: testOptions{AnswerField: "ans", MaxGuesses: 3}},
		{name: "unknown key", values: map[string]any{"answer_field": "x", "bogus": 1},
			wantErr: []string{"env.bogus: unknown option", "answer_field, max_guesses"}},
		{name: "bad type", values: map[string]any{"max_guesses": "many"},
			wantErr: []string{"env.max_guesses: want a whole number, got the text `many`"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := testOptions{AnswerField: "def", MaxGuesses: 7}
			err := envs.Options{Section: "env", Values: tt.values}.Decode(&got)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Decode: %v", err)
				}
				if got != tt.want {
					t.Fatalf("got %+v, want %+v", got, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("Decode succeeded, want error containing %q", tt.wantErr)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// An embedder registers its environment once; Validate then checks a
// config's env section without building anything.
func ExampleValidate() {
	envs.Register("example-echo", func(opts envs.Options) (envs.Env, error) {
		var o struct {
			Prefix string `yaml:"prefix"`
		}
		if err := opts.Decode(&o); err != nil {
			return nil, err
		}
		return nil, nil // a real factory returns its environment
	})
	fmt.Println(envs.Validate("example-echo", envs.Options{Section: "env", Values: map[string]any{"prefix": "> "}}))
	fmt.Println(envs.Validate("example-echo", envs.Options{Section: "env", Values: map[string]any{"prefx": "> "}}))
	fmt.Println(envs.Validate("example-ehco", envs.Options{Section: "env"}))
	// Output:
	// <nil>
	// env.prefx: unknown option (have prefix)
	// env.name: unknown environment "example-ehco" (have example-echo, none)
}

func TestNoneEnv(t *testing.T) {
	env, err := envs.New(envs.None, envs.Options{Section: "env"})
	if err != nil {
		t.Fatal(err)
	}
	r := &pipeline.Rollout{Task: &pipeline.Task{}}
	if _, err := env.Reset(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	step, err := env.Step(context.Background(), r, pipeline.Message{Role: "assistant", Content: "x"})
	if err != nil || !step.Terminated || step.Reward != 0 || len(step.Observations) != 0 {
		t.Fatalf("step %+v, %v: want the trajectory ended after one reply, reward 0", step, err)
	}
	if _, err := envs.New(envs.None, envs.Options{Section: "env", Values: map[string]any{"x": 1}}); err == nil || !strings.Contains(err.Error(), "env.x") {
		t.Fatalf("an option of none: %v", err)
	}
}
