package agent_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/envs/agent"
)

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "run.sh"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "plain.txt"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   string // "" = valid
	}{
		{"program in PATH", map[string]any{"command": []any{"sh", "agent.sh"}}, ""},
		{"relative path from dir", map[string]any{"command": []any{"./run.sh"}, "dir": dir}, ""},
		{"absolute path", map[string]any{"command": []any{filepath.Join(dir, "run.sh")}}, ""},
		{"every key", map[string]any{
			"command": []any{"sh"}, "env": map[string]any{"A": "1"}, "dir": dir,
			"verify": "math", "verify_options": map[string]any{"answer_field": "answer"},
			"stderr_tail": 100, "kill_grace": "5s", "max_output": 4096, "stderr_passthrough": false,
		}, ""},
		{"missing command", nil, "env.command: required (e.g. [python3, agent.py])"},
		{"empty command", map[string]any{"command": []any{}}, "env.command: required"},
		{"unknown program", map[string]any{"command": []any{"no-such-agent-program", "x"}}, `env.command: program "no-such-agent-program" not found in PATH`},
		{"missing relative path", map[string]any{"command": []any{"./missing.sh"}, "dir": dir}, `env.command: program "./missing.sh" (` + filepath.Join(dir, "missing.sh") + `, from env.dir): no such file or directory`},
		{"not executable", map[string]any{"command": []any{"./plain.txt"}, "dir": dir}, `env.command: program "./plain.txt" is not executable`},
		{"bad dir", map[string]any{"command": []any{"sh"}, "dir": filepath.Join(dir, "nope")}, "env.dir: "},
		{"unknown verify", map[string]any{"command": []any{"sh"}, "verify": "nope"}, `env.verify: unknown environment "nope" (have `},
		{"verify itself", map[string]any{"command": []any{"sh"}, "verify": "agent"}, "env.verify: the agent environment cannot verify itself"},
		{"bad verify option", map[string]any{"command": []any{"sh"}, "verify": "math", "verify_options": map[string]any{"bogus": 1}}, "env.verify_options.bogus: unknown option (have answer_field)"},
		{"verify_options alone", map[string]any{"command": []any{"sh"}, "verify_options": map[string]any{"answer_field": "a"}}, "env.verify_options: set without env.verify"},
		{"unknown key", map[string]any{"command": []any{"sh"}, "no_such_key": 1}, "env.no_such_key: unknown option (have command, dir, env, kill_grace, max_output, stderr_passthrough, stderr_tail, verify, verify_options)"},
		{"reserved variable", map[string]any{"command": []any{"sh"}, "env": map[string]any{"OPENAI_API_KEY": "k"}}, "env.env.OPENAI_API_KEY: set by trajflow for each rollout"},
		{"negative stderr_tail", map[string]any{"command": []any{"sh"}, "stderr_tail": -1}, "env.stderr_tail: must not be negative"},
		{"negative kill_grace", map[string]any{"command": []any{"sh"}, "kill_grace": "-1s"}, "env.kill_grace: must not be negative"},
		{"bad kill_grace", map[string]any{"command": []any{"sh"}, "kill_grace": "soon"}, "env.kill_grace: "},
		{"negative max_output", map[string]any{"command": []any{"sh"}, "max_output": -5}, "env.max_output: must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := envs.Options{Section: "env", Values: tc.values}
			err := envs.Validate(agent.Name, opts)
			_, newErr := envs.New(agent.Name, opts)
			for what, err := range map[string]error{"Validate": err, "New": newErr} {
				switch {
				case tc.want == "" && err != nil:
					t.Errorf("%s: %v", what, err)
				case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
					t.Errorf("%s: err = %v, want it to hold %q", what, err, tc.want)
				}
			}
		})
	}
}

func TestSpec(t *testing.T) {
	spec, ok := envs.Lookup(agent.Name)
	if !ok {
		t.Fatal("agent is not registered")
	}
	if strings.Join(spec.Secret, ",") != "env" {
		t.Errorf("Secret = %v, want [env]", spec.Secret)
	}
	if strings.Join(spec.Operational, ",") != "kill_grace,stderr_passthrough" {
		t.Errorf("Operational = %v", spec.Operational)
	}
}

// A config names another section in its errors.
func TestSectionInErrors(t *testing.T) {
	_, err := agent.New(agent.Config{Section: "eval.env"})
	if err == nil || !strings.Contains(err.Error(), "eval.env.command: required") {
		t.Errorf("err = %v, want it to name eval.env.command", err)
	}
}
