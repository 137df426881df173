package builtin_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/envs"
	_ "github.com/trajflow/trajflow/envs/builtin"
	"github.com/trajflow/trajflow/pipeline"
)

func TestBuiltinsRegistered(t *testing.T) {
	for _, name := range []string{"guess", "math", "sim", "tools", "none"} {
		if !slices.Contains(envs.Names(), name) {
			t.Errorf("%q is not registered (have %v)", name, envs.Names())
			continue
		}
		env, err := envs.New(name, envs.Options{Section: "env"})
		if err != nil {
			t.Errorf("New(%q) with no options: %v", name, err)
			continue
		}
		if _, err := env.Reset(context.Background(), &pipeline.Rollout{Task: &pipeline.Task{}}); err != nil {
			t.Errorf("%s: Reset of an empty task: %v", name, err)
		}
		if _, err := envs.New(name, envs.Options{Section: "env", Values: map[string]any{"no_such_key": 1}}); err == nil ||
			!strings.Contains(err.Error(), "env.no_such_key") {
			t.Errorf("%s: unknown key: err = %v, want it to name env.no_such_key", name, err)
		}
	}
	_, err := envs.New("nope", envs.Options{Section: "env"})
	if err == nil || !strings.Contains(err.Error(), `env.name: unknown environment "nope"`) {
		t.Fatalf("unknown env: err = %v", err)
	}
	for _, name := range []string{"agent", "guess", "grid", "http", "math", "nemo_gym_agent", "sim", "subprocess", "tools"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("unknown env error %q does not list %q", err, name)
		}
	}
}

// Environments whose options must name a program or a server are
// registered too; with no options, their Validate names the missing key.
func TestBuiltinsRegisteredWithRequiredKeys(t *testing.T) {
	for name, key := range map[string]string{"agent": "env.command", "subprocess": "env.command"} {
		if !slices.Contains(envs.Names(), name) {
			t.Errorf("%q is not registered (have %v)", name, envs.Names())
			continue
		}
		if err := envs.Validate(name, envs.Options{Section: "env"}); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s: Validate with no options: err = %v, want it to name %s", name, err, key)
		}
	}
}

func Example() {
	env, err := envs.New("math", envs.Options{Section: "env", Values: map[string]any{"answer_field": "answer"}})
	if err != nil {
		panic(err)
	}
	r := &pipeline.Rollout{Task: &pipeline.Task{Fields: map[string]any{"answer": 12}}}
	step, err := env.Step(context.Background(), r, pipeline.Message{Role: "assistant", Content: `\boxed{12}`})
	fmt.Println(step.Reward, err)
	// Output: 1 <nil>
}
