package agent_test

import (
	"context"
	"fmt"
	"os"

	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/envs/agent"
	"github.com/trajflow/trajflow/pipeline"
)

// An agent run for one rollout. The agent here is a shell one-liner that
// reads its task and prints its reward; a real one (e.g. [python3,
// agent.py]) calls the model at OPENAI_BASE_URL first. The loop gives Run
// the rollout's gateway session; here a stand-in that counts one call.
func ExampleEnv_Run() {
	env, err := envs.New(agent.Name, envs.Options{Section: "env", Values: map[string]any{
		"command":            []any{"sh", "-c", `read task; echo "task: $task" >&2; echo '{"reward": 1, "metrics": {"acc": 1}}'`},
		"stderr_passthrough": false,
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	r := &pipeline.Rollout{Task: &pipeline.Task{Raw: []byte(`{"question": "2+2?"}`)}}
	session := envs.Session{
		ID:    "s1",
		Key:   "k1",
		Calls: func() int { return 1 },
		End:   func() {},
	}
	step, err := env.(envs.Agent).Run(context.Background(), r, session)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(step.Reward, step.Metrics["acc"], step.Terminated)
	// Output: 1 1 true
}

// A config error names its key.
func ExampleNew() {
	_, err := agent.New(agent.Config{Command: []string{"no-such-agent-program"}, Stderr: os.Stderr})
	fmt.Println(err)
	// Output: env.command: program "no-such-agent-program" not found in PATH
}
