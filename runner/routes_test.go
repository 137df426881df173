package runner_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/runner"
)

// nemoGym is the NeMo Gym example's config (math and a subprocess env,
// routed by agent_ref.name), rooted at the repository.
func nemoGym(t *testing.T, sets ...string) *config.Config {
	t.Helper()
	root, _ := filepath.Abs("..")
	sets = append([]string{
		"source.path=" + filepath.Join(root, "examples/nemo-gym/tasks.jsonl"),
		"output.dir=" + t.TempDir(),
		"run.progress=0",
	}, sets...)
	cfg, err := config.Load(filepath.Join(root, "examples/nemo-gym/config.yaml"), sets)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Env.Routes["quiz"].Options["command"] = []any{"python3", filepath.Join(root, "examples/python-env/env.py")}
	return cfg
}

// routedConfig is a sim run over tasks with the given env section (YAML).
func routedConfig(t *testing.T, tasks, env string, sets ...string) *config.Config {
	t.Helper()
	cfg, err := loadRouted(t, tasks, env, sets...)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func loadRouted(t *testing.T, tasks, env string, sets ...string) (*config.Config, error) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	y := "source: {path: " + tasks + "}\nprompt: {user: \"Solve: {question}\"}\nrepeat: {n: 2, seed: 1}\n" +
		"generate: {endpoints: [\"sim://\"], model: sim}\nenv:\n" + env + "output: {dir: " + filepath.Join(dir, "out") + "}\nrun: {progress: 0}\n"
	if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	return config.Load(path, sets)
}

const twoRoutes = `  route_field: agent_ref.name
  routes:
    math: {answer_field: expected_answer}
    other: {name: math, answer_field: expected_answer}
`

func TestRoutesPerRow(t *testing.T) {
	cfg := nemoGym(t)
	sum, err := run(t, cfg, runner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rows := readBack(t, cfg.Output.Dir, runner.DataDir)
	if len(rows) != 28 || sum.OK != 28 {
		t.Fatalf("%d rows, summary %+v", len(rows), sum)
	}
	byEnv := map[string]int{}
	for _, r := range rows {
		var task struct {
			AgentRef struct{ Name string } `json:"agent_ref"`
		}
		if err := json.Unmarshal(r.Task.Raw, &task); err != nil {
			t.Fatal(err)
		}
		if r.Env != task.AgentRef.Name {
			t.Errorf("task %d: env %q, agent_ref.name %q", r.Task.Index, r.Env, task.AgentRef.Name)
		}
		byEnv[r.Env]++
		switch r.Env {
		case "math":
			// The math env scores one turn.
			if r.NumTurns != 1 {
				t.Errorf("math task %d: %d turns", r.Task.Index, r.NumTurns)
			}
		case "quiz":
			// The subprocess env opened with its question (an observation
			// of Reset) and ran up to the route's max_turns (4).
			if !strings.Contains(r.Messages[1].Content, "How many times") {
				t.Errorf("quiz task %d: second message %q, want the env's question", r.Task.Index, r.Messages[1].Content)
			}
			if r.NumTurns > 4 {
				t.Errorf("quiz task %d: %d turns, route max_turns is 4", r.Task.Index, r.NumTurns)
			}
		}
	}
	if byEnv["math"] != 16 || byEnv["quiz"] != 12 {
		t.Errorf("rows by env %v, want math 16, quiz 12", byEnv)
	}
}

func TestRouteBadRow(t *testing.T) {
	dir := t.TempDir()
	tasks := filepath.Join(dir, "tasks.jsonl")
	os.WriteFile(tasks, []byte(`{"question":"1+1","expected_answer":"2","agent_ref":{"name":"math"}}
{"question":"2+2","expected_answer":"4","agent_ref":{"name":"chess"}}
{"question":"3+3","expected_answer":"6"}
`), 0o644)
	for _, tc := range []struct {
		name    string
		onBad   string
		wantErr string
		rejects []string
	}{
		{name: "error", onBad: "error", wantErr: `agent_ref.name "chess" has no route (routes: math, other)`},
		{name: "skip", onBad: "skip", rejects: []string{`agent_ref.name \"chess\" has no route (routes: math, other)`, `the row has no agent_ref.name`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := routedConfig(t, tasks, twoRoutes, "source.on_bad_row="+tc.onBad)
			_, err := run(t, cfg, runner.Options{})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(filepath.Join(cfg.Output.Dir, runner.RejectsFile))
			for _, want := range tc.rejects {
				if !strings.Contains(string(b), want) {
					t.Errorf("rejects lack %q:\n%s", want, b)
				}
			}
			if rows := readBack(t, cfg.Output.Dir, runner.DataDir); len(rows) != 2 || rows[0].Env != "math" {
				t.Errorf("%d rows", len(rows))
			}
		})
	}
}

func TestRoutesCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		sets []string
		want string
	}{
		{"unknown env", []string{"env.routes.a.name=nosuch"}, "env.routes.a.name: unknown environment"},
		{"bad option", []string{"env.routes.a.bogus=1"}, "env.routes.a.bogus: unknown option"},
		{"bad limit", []string{"env.routes.a.max_turns=-1"}, "env.routes.a.max_turns: must be >= 0"},
		{"name and routes", []string{"env.name=math"}, "env.name: give either name"},
		{"option beside routes", []string{"env.answer_field=x"}, "env.answer_field: an environment option beside routes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// config.Load checks the keys; runner.Check the environments.
			cfg, err := loadRouted(t, "tasks.jsonl", "  routes: {a: {name: math}}\n", tc.sets...)
			if err == nil {
				err = runner.Check(cfg, runner.Options{})
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
			if cfg != nil {
				if _, serr := os.Stat(cfg.Output.Dir); serr == nil {
					t.Error("Check created the output directory")
				}
			}
		})
	}
}
