package subprocess

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/envs"
	"go.yaml.in/yaml/v3"
)

// The example config loads, its env section builds this environment, and
// every example task plays to a reward of 1 with the right answer.
func TestExampleConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: the full suite runs it")
	}
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not installed")
	}
	data, err := os.ReadFile("../../examples/python-env/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Env map[string]any `yaml:"env"`
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Env["name"] != Name || cfg.Env["max_turns"] != 4 {
		t.Fatalf("env section = %+v", cfg.Env)
	}
	opts := map[string]any{"dir": "../.."} // the config's paths are relative to the repository root
	for k, v := range cfg.Env {
		switch k {
		case "name", "max_turns", "max_seq_len", "concurrency", "turn_timeout", "timeout":
		default:
			opts[k] = v
		}
	}
	e, err := envs.New(Name, envs.Options{Section: "env", Values: opts})
	if err != nil {
		t.Fatal(err)
	}
	defer e.(*Env).Close()
	f, err := os.Open("../../examples/python-env/tasks.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		var fields map[string]any
		if err := json.Unmarshal(sc.Bytes(), &fields); err != nil {
			t.Fatalf("tasks.jsonl:%d: %v", n+1, err)
		}
		r := rollout("ex", fields)
		reset(t, e, r)
		word, letter := fields["word"].(string), fields["letter"].(string)
		answer := strings.Count(strings.ToLower(word), strings.ToLower(letter))
		st, err := step(context.Background(), e, r, "My answer: "+itoa(answer))
		if err != nil {
			t.Fatal(err)
		}
		if st.Reward != 1 || !st.Terminated {
			t.Fatalf("task %d (%s/%s): %+v", n, word, letter, st)
		}
		n++
	}
	if n == 0 {
		t.Fatal("no example tasks")
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }
