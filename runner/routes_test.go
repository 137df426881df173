package runner_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/runner"
	"github.com/trajflow/trajflow/schema"
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
	rows := readBack(t, cfg.Output.Dir, schema.DataDir)
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
			b, _ := os.ReadFile(filepath.Join(cfg.Output.Dir, schema.RejectsFile))
			for _, want := range tc.rejects {
				if !strings.Contains(string(b), want) {
					t.Errorf("rejects lack %q:\n%s", want, b)
				}
			}
			if rows := readBack(t, cfg.Output.Dir, schema.DataDir); len(rows) != 2 || rows[0].Env != "math" {
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
		{"bad limit", []string{"env.routes.a.max_turns=-1"}, "env.routes.a.max_turns: must be between 0 (no limit) and 65536, got -1"},
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

// metrics.json holds NeMo RL's rollout metrics, overall and per
// environment, matching a recomputation from the Parquet rows with NeMo
// RL's rules (truncated: the sequence reached max_seq_len, as its
// input + generated + observation >= max_seq_len, recomputed from the
// rows' token ids, not read from their truncated column; natural
// termination: terminated or truncated, as its batched loop's done; max
// turns reached: num_turns >= the route's max_turns, as its async loop's
// turn_count >= max_rollout_turns); the Gym aggregate file has one entry
// per environment. The quiz route's max_seq_len makes some trajectories
// end truncated without being terminated, where the batched loop's
// natural_termination_rate (terminated or truncated) and the async
// loop's (terminated only) part.
func TestNeMoRLMetricsFromParquet(t *testing.T) {
	cfg := nemoGym(t, "env.routes.quiz.max_seq_len=350")
	if _, err := run(t, cfg, runner.Options{}); err != nil {
		t.Fatal(err)
	}
	rows := readBack(t, cfg.Output.Dir, schema.DataDir)
	b, err := os.ReadFile(filepath.Join(cfg.Output.Dir, schema.MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	type turnStats struct {
		Turn          int   `json:"turn"`
		ActiveSamples int64 `json:"active_samples"`
		GenTokens     int64 `json:"gen_tokens"`
	}
	type nemo struct {
		TotalTurns               int64       `json:"total_turns"`
		AvgTurnsPerSample        float64     `json:"avg_turns_per_sample"`
		MaxTurnsPerSample        int64       `json:"max_turns_per_sample"`
		NaturalTerminationRate   float64     `json:"natural_termination_rate"`
		TruncationRate           float64     `json:"truncation_rate"`
		MaxTurnsReachedRate      float64     `json:"max_turns_reached_rate"`
		MeanGenTokensPerSample   float64     `json:"mean_gen_tokens_per_sample"`
		MeanEnvTokensPerSample   float64     `json:"mean_env_tokens_per_sample"`
		MeanTotalTokensPerSample float64     `json:"mean_total_tokens_per_sample"`
		PerTurn                  []turnStats `json:"per_turn"`
	}
	var got struct {
		nemo
		Envs map[string]nemo `json:"envs"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	maxTurns := func(route string) int {
		if rc := cfg.Env.Routes[route]; rc != nil && rc.MaxTurns > 0 {
			return rc.MaxTurns
		}
		return cfg.Env.MaxTurns
	}
	maxSeqLen := func(route string) int {
		if rc := cfg.Env.Routes[route]; rc != nil && rc.MaxSeqLen > 0 {
			return rc.MaxSeqLen
		}
		return cfg.Env.MaxSeqLen
	}
	// NeMo RL's truncation: the sequence (prompt, generated and
	// observation tokens) reached max_seq_len (>=, the overflow cut).
	seedTruncated := func(r *pipeline.Rollout) bool {
		m := maxSeqLen(r.Env)
		return m > 0 && len(r.PromptTokenIDs)+len(r.ResponseTokenIDs) >= m
	}
	var truncOnly, termOnly int
	for _, r := range rows {
		if seedTruncated(r) && !r.Terminated {
			truncOnly++
		}
		if r.Terminated && !seedTruncated(r) {
			termOnly++
		}
	}
	if truncOnly == 0 || termOnly == 0 {
		t.Fatalf("%d rows truncated without being terminated, %d terminated without being truncated: want both", truncOnly, termOnly)
	}
	recompute := func(env string) nemo {
		var m nemo
		var n, term, trunc, maxT, gen, envTok, total float64
		for _, r := range rows {
			if env != "" && r.Env != env {
				continue
			}
			n++
			truncated := seedTruncated(r)
			m.TotalTurns += int64(r.NumTurns)
			m.MaxTurnsPerSample = max(m.MaxTurnsPerSample, int64(r.NumTurns))
			for _, c := range []struct {
				on bool
				n  *float64
			}{
				{r.Terminated || truncated, &term},
				{truncated, &trunc},
				{maxTurns(r.Env) > 0 && r.NumTurns >= maxTurns(r.Env), &maxT},
			} {
				if c.on {
					*c.n++
				}
			}
			for _, mk := range r.LossMask {
				if mk == 1 {
					gen++
				} else {
					envTok++
				}
			}
			total += float64(len(r.ResponseTokenIDs))
			grow := func(n int) {
				for len(m.PerTurn) < n {
					m.PerTurn = append(m.PerTurn, turnStats{Turn: len(m.PerTurn) + 1})
				}
			}
			grow(r.NumTurns)
			for i := 0; i < r.NumTurns; i++ {
				m.PerTurn[i].ActiveSamples++
			}
			// Generated tokens of turn t: the spans of the turn's
			// assistant messages.
			for _, msg := range r.Messages {
				if msg.Role == "assistant" && msg.Turn >= 1 {
					grow(msg.Turn)
					m.PerTurn[msg.Turn-1].GenTokens += int64(msg.TokenEnd - msg.TokenStart)
				}
			}
		}
		m.AvgTurnsPerSample = float64(m.TotalTurns) / n
		m.NaturalTerminationRate, m.TruncationRate, m.MaxTurnsReachedRate = term/n, trunc/n, maxT/n
		m.MeanGenTokensPerSample, m.MeanEnvTokensPerSample, m.MeanTotalTokensPerSample = gen/n, envTok/n, total/n
		return m
	}
	check := func(name string, got, want nemo) {
		gj, _ := json.Marshal(got)
		wj, _ := json.Marshal(want)
		if string(gj) != string(wj) {
			t.Errorf("%s:\nmetrics.json %s\nrecomputed   %s", name, gj, wj)
		}
	}
	check("all", got.nemo, recompute(""))
	if len(got.Envs) != 2 {
		t.Fatalf("envs %v", got.Envs)
	}
	for _, env := range []string{"math", "quiz"} {
		check(env, got.Envs[env], recompute(env))
	}
	if got.MaxTurnsPerSample < 2 || got.MeanGenTokensPerSample == 0 ||
		len(got.PerTurn) < 2 || got.PerTurn[0].GenTokens == 0 || got.PerTurn[1].GenTokens == 0 {
		t.Errorf("too plain a run to test: %+v", got.nemo)
	}

	b, err = os.ReadFile(filepath.Join(cfg.Output.Dir, schema.AggregateMetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	var agg []struct {
		AgentRef     struct{ Name string } `json:"agent_ref"`
		AgentMetrics struct{ Rows int64 }  `json:"agent_metrics"`
		KeyMetrics   map[string]float64    `json:"key_metrics"`
	}
	if err := json.Unmarshal(b, &agg); err != nil {
		t.Fatal(err)
	}
	if len(agg) != 2 || agg[0].AgentRef.Name != "math" || agg[0].AgentMetrics.Rows != 16 || agg[1].AgentMetrics.Rows != 12 {
		t.Errorf("aggregate metrics: %s", b)
	}
	if _, ok := agg[0].KeyMetrics["pass@1"]; !ok {
		t.Errorf("key metrics lack pass@1: %v", agg[0].KeyMetrics)
	}
}

// TestNeMoRLExampleMetrics runs examples/nemo-rl (one turn allowed) and
// recomputes NeMo RL's rates from the rows with its rules: every sample
// took its last allowed turn, so run_async_multi_turn_rollout counts it in
// max_turns_reached_rate (turn_count >= max_rollout_turns, checked after
// the turn whatever ended it); run_multi_turn_rollout's
// natural_termination_rate counts the samples done by termination or
// truncation. A second run swaps the math environment for the
// multi-turn guess game (3 turns, max_seq_len 500): there trajectories end
// truncated without being terminated, and with or without their last
// allowed turn. Truncation is recomputed the seed's way, from the token
// ids (input + generated + observation >= max_seq_len), not read from the
// rows' truncated column.
func TestNeMoRLExampleMetrics(t *testing.T) {
	root, _ := filepath.Abs("..")
	for _, multi := range []bool{false, true} {
		t.Run(map[bool]string{false: "example", true: "guess"}[multi], func(t *testing.T) {
			cfg, err := config.Load(filepath.Join(root, "examples/nemo-rl/config.yaml"), []string{
				"source.path=" + filepath.Join(root, "examples/quickstart/tasks.jsonl"),
				"output.dir=" + t.TempDir(), "run.progress=0", "source.limit=10",
			})
			if err != nil {
				t.Fatal(err)
			}
			if multi {
				cfg.Env.Name = "guess"
				delete(cfg.Env.Options, "answer_field")
				cfg.Env.MaxTurns, cfg.Env.MaxSeqLen = 3, 500
			}
			if _, err := run(t, cfg, runner.Options{}); err != nil {
				t.Fatal(err)
			}
			rows := readBack(t, cfg.Output.Dir, schema.DataDir)
			var n, maxT, natural, truncOnly, maxTOnly float64
			for _, r := range rows {
				n++
				turnCount := r.NumTurns
				truncated := len(r.PromptTokenIDs)+len(r.ResponseTokenIDs) >= cfg.Env.MaxSeqLen
				if turnCount >= cfg.Env.MaxTurns {
					maxT++
				}
				if r.Terminated || truncated {
					natural++
				}
				if truncated && !r.Terminated {
					truncOnly++
				}
				if turnCount >= cfg.Env.MaxTurns && !truncated && !r.Terminated {
					maxTOnly++
				}
			}
			b, err := os.ReadFile(filepath.Join(cfg.Output.Dir, schema.MetricsFile))
			if err != nil {
				t.Fatal(err)
			}
			var got struct {
				NaturalTerminationRate float64 `json:"natural_termination_rate"`
				MaxTurnsReachedRate    float64 `json:"max_turns_reached_rate"`
			}
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			if n == 0 || got.MaxTurnsReachedRate != maxT/n || got.NaturalTerminationRate != natural/n {
				t.Fatalf("max_turns_reached_rate %v natural_termination_rate %v; NeMo RL's rules give %v and %v over %v rows",
					got.MaxTurnsReachedRate, got.NaturalTerminationRate, maxT/n, natural/n, n)
			}
			if !multi && got.MaxTurnsReachedRate != 1 {
				t.Fatalf("max_turns_reached_rate %v: every sample of a one-turn run took its last allowed turn", got.MaxTurnsReachedRate)
			}
			if multi && (truncOnly == 0 || maxTOnly == 0 || maxT == n) {
				t.Fatalf("too plain a run: %v of %v rows truncated without being terminated, %v ended by the turn limit alone, %v took their last turn", truncOnly, n, maxTOnly, maxT)
			}
		})
	}
}
