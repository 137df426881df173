package cli_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	_ "github.com/trajflow/trajflow/envs/builtin" // the environments the tests run
	"github.com/trajflow/trajflow/readback"
	"github.com/trajflow/trajflow/sinks/images"

	"github.com/trajflow/trajflow/cmd/trajflow/cli"
	"github.com/trajflow/trajflow/pipeline"
)

// runExample runs an example config from the repository root through the
// command line, into a temporary output directory.
func runExample(t *testing.T, name string, extra ...string) []*pipeline.Rollout {
	t.Helper()
	root, _ := filepath.Abs("../../..")
	t.Chdir(root)
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	args := append([]string{"run", filepath.Join("examples", name, "config.yaml"), "--quiet", "--set", "output.dir=" + out}, extra...)
	if code := cli.Main(args, &stdout, &stderr); code != cli.ExitOK {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, &stdout, &stderr)
	}
	if !strings.Contains(stdout.String(), "rows written:") {
		t.Fatalf("no summary:\n%s", &stdout)
	}
	rows, err := readback.Dir(filepath.Join(out, "data"))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 {
		t.Fatal("no rows")
	}
	// Every example means something offline: the simulator scores.
	sum := 0.0
	for _, r := range rows {
		sum += r.Reward
	}
	if mean := sum / float64(len(rows)); mean <= 0 {
		t.Errorf("mean reward %.4f on the simulator, want > 0", mean)
	} else {
		t.Logf("%s: %d rows, mean reward %.4f", name, len(rows), mean)
	}
	return rows
}

func count(rows []*pipeline.Rollout, f func(*pipeline.Rollout) bool) int {
	n := 0
	for _, r := range rows {
		if f(r) {
			n++
		}
	}
	return n
}

func TestExamples(t *testing.T) {
	// Each example has its subtest below.
	configs, _ := filepath.Glob("../../../examples/*/config.yaml")
	covered := map[string]bool{"quickstart": true, "guess": true, "tools": true, "sim-agent": true, "python-env": true, "nemo-rl": true, "nemo-gym": true, "vlm": true, "grid": true, "agents": true}
	for _, c := range configs {
		if name := filepath.Base(filepath.Dir(c)); !covered[name] {
			t.Errorf("example %s has no subtest in TestExamples", name)
		}
	}
	// The migration examples: their metrics are checked in
	// TestMigrationExamples; here, that they score.
	for _, name := range []string{"nemo-rl", "nemo-gym"} {
		t.Run(name, func(t *testing.T) {
			if name == "nemo-gym" && testing.Short() {
				t.Skip("slow: the full suite runs it")
			}
			runExample(t, name)
		})
	}
	t.Run("agents", func(t *testing.T) {
		if _, err := exec.LookPath("python3"); err != nil {
			t.Skip("python3 not installed")
		}
		// The agent of examples/agents/config.yaml: one ok row per
		// (task, rollout), every one with at least one model call.
		rows := runExample(t, "agents")
		if len(rows) != 16 || count(rows, func(r *pipeline.Rollout) bool { return r.Status == pipeline.StatusOK && r.NumTurns > 0 }) != 16 {
			t.Fatalf("%d rows", len(rows))
		}
	})
	t.Run("vlm", func(t *testing.T) {
		rows := runExample(t, "vlm")
		for _, r := range rows {
			p := r.Messages[0].Parts
			if len(p) != 2 || p[1].Type != pipeline.PartImage || !strings.HasPrefix(p[1].ImageURL, "sha256:") {
				t.Fatalf("%s: parts %+v", r, p)
			}
		}
		if len(rows) != 24 {
			t.Fatalf("%d rows", len(rows))
		}
	})
	t.Run("quickstart", func(t *testing.T) {
		rows := runExample(t, "quickstart")
		if len(rows) != 960 || count(rows, func(r *pipeline.Rollout) bool { return r.Reward == 1 }) == 0 {
			t.Fatalf("%d rows", len(rows))
		}
	})
	t.Run("guess", func(t *testing.T) {
		rows := runExample(t, "guess")
		multi := count(rows, func(r *pipeline.Rollout) bool {
			// prompt (2) + rules, then assistant + feedback per turn
			fb := 0
			for _, m := range r.Messages {
				if m.Role == "user" && m.Turn > 0 {
					fb++
				}
			}
			return r.NumTurns > 1 && fb >= r.NumTurns-1 && r.Env == "guess"
		})
		if multi == 0 {
			t.Fatal("no game went past its first turn with feedback")
		}
		if n := count(rows, func(r *pipeline.Rollout) bool { return r.NumTurns > 8 }); n > 0 {
			t.Fatalf("%d games past max_turns", n)
		}
	})
	t.Run("grid", func(t *testing.T) {
		// Step-wise: the trajectory rows hold the whole game as messages,
		// the step rows (checked in runner's TestGridExample) the tokens.
		rows := runExample(t, "grid")
		if n := count(rows, func(r *pipeline.Rollout) bool {
			return r.NumTurns > 1 && r.Env == "grid" && len(r.ResponseTokenIDs) == 0 && r.Metrics["invalid_actions"] >= 0
		}); n == 0 {
			t.Fatal("no game went past its first turn")
		}
		// The invalid_actions column counts what the metric does.
		if n := count(rows, func(r *pipeline.Rollout) bool { return r.InvalidActions != int(r.Metrics["invalid_actions"]) }); n > 0 {
			t.Fatalf("%d rows' invalid_actions column differs from their metric", n)
		}
		if n := count(rows, func(r *pipeline.Rollout) bool { return r.InvalidActions > 0 }); n == 0 {
			t.Fatal("no row counts an invalid action")
		}
	})
	t.Run("tools", func(t *testing.T) {
		rows := runExample(t, "tools")
		withTools := count(rows, func(r *pipeline.Rollout) bool {
			calls, results := 0, 0
			for _, m := range r.Messages {
				calls += len(m.ToolCalls)
				if m.Role == "tool" && m.ToolCallID != "" {
					results++
				}
			}
			return calls > 0 && calls == results && r.ToolCalls == calls
		})
		if withTools == 0 {
			t.Fatal("no rollout made tool calls answered by tool messages")
		}
	})
	t.Run("sim-agent", func(t *testing.T) {
		rows := runExample(t, "sim-agent", "--set", "generate.sim.time_scale=0")
		if n := count(rows, func(r *pipeline.Rollout) bool { return r.NumTurns > 1 && r.Terminated }); n == 0 {
			t.Fatal("no multi-turn trajectory")
		}
		if n := count(rows, func(r *pipeline.Rollout) bool { return r.GroupRewardStd == 0 }); n > 0 {
			t.Fatalf("%d kept rows of groups without reward variance", n)
		}
	})
	t.Run("python-env", func(t *testing.T) {
		if testing.Short() {
			t.Skip("slow: the full suite runs it")
		}
		if _, err := exec.LookPath("python3"); err != nil {
			t.Skip("python3 not installed")
		}
		rows := runExample(t, "python-env")
		if n := count(rows, func(r *pipeline.Rollout) bool {
			return r.Env == "subprocess" && r.NumTurns >= 1 && r.Status == pipeline.StatusOK
		}); n != len(rows) {
			t.Fatalf("%d of %d rows ran in the Python environment", n, len(rows))
		}
	})
}

func TestUsageAndExitCodes(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("source: {path: x.jsonl}\nrepeat: {n: -2, extra: 1}\n"), 0o644)
	missing := filepath.Join(dir, "cfg.yaml")
	os.WriteFile(missing, []byte("source: {path: "+filepath.Join(dir, "nope.jsonl")+"}\noutput: {dir: "+dir+"/out}\n"), 0o644)
	tests := []struct {
		args []string
		code int
		want string
	}{
		{nil, cli.ExitUsage, "Usage:"},
		{[]string{"frobnicate"}, cli.ExitUsage, `unknown command "frobnicate"`},
		{[]string{"run"}, cli.ExitUsage, "Usage: trajflow run"},
		{[]string{"run", bad}, cli.ExitUsage, "repeat.extra: unknown key"},
		{[]string{"run", bad, "--bogus"}, cli.ExitUsage, "unknown flag --bogus"},
		{[]string{"run", filepath.Join(dir, "absent.yaml")}, cli.ExitUsage, "absent.yaml"},
		{[]string{"run", missing}, cli.ExitFailed, "nope.jsonl"},
		{[]string{"version"}, cli.ExitOK, "trajflow "},
		{[]string{"merge", "--target-file-size", "12XB", "a", "b"}, cli.ExitUsage, "--target-file-size: size \"12XB\""},
		{[]string{"merge", "--rows-per-file", "10", "--target-file-size", "1MB", "a", "b"}, cli.ExitUsage, "alternatives"},
		{[]string{"merge", "--rows-per-file", "0", "a", "b"}, cli.ExitUsage, "must be >= 1"},
		{[]string{"merge", "only-one"}, cli.ExitUsage, "Usage: trajflow merge"},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		code := cli.Main(tt.args, &stdout, &stderr)
		if code != tt.code || !strings.Contains(stdout.String()+stderr.String(), tt.want) {
			t.Errorf("%v: exit %d, want %d with %q\nstdout: %s\nstderr: %s", tt.args, code, tt.code, tt.want, &stdout, &stderr)
		}
	}
}

// A bad config exits 2 before anything is created: every problem is
// listed at once, each naming the file and line or the --set flag, and the
// output directory does not exist afterwards.
func TestBadConfigExits2BeforeCreatingAnything(t *testing.T) {
	dir := t.TempDir()
	tasks := filepath.Join(dir, "t.jsonl")
	if err := os.WriteFile(tasks, []byte(`{"question": "1+1", "expected_answer": "2"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	head := "source: {path: " + tasks + "}\noutput: {dir: " + out + "}\n"
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"unknown env", []string{write("a.yaml", head+"env:\n  name: maths\n")},
			[]string{`a.yaml: line 4: env.name: unknown environment "maths" (have `}},
		{"bad template and env option at once", []string{write("b.yaml", head+"prompt:\n  user: \"Q {question\"\nenv: {name: math, answer_fieldd: x}\n")},
			[]string{"b.yaml: line 4: prompt.user: unterminated {", "b.yaml: line 5: env.answer_fieldd: unknown option (have answer_field)"}},
		{"subprocess env without command", []string{write("c.yaml", head+"env: {name: subprocess, workers: 2}\n")},
			[]string{"c.yaml: line 3: env.command: required"}},
		{"n: 0", []string{write("e.yaml", head+"repeat: {n: 0}\n")},
			[]string{"e.yaml: line 3: repeat.n: must be >= 1, got 0"}},
		{"endpoints: []", []string{write("f.yaml", head+"generate:\n  endpoints: []\n")},
			[]string{"f.yaml: line 4: generate.endpoints: empty list"}},
		{"--set value read as a mapping shows the quoting", []string{write("g.yaml", head), "--set", "prompt.user=Compute: {question}"},
			[]string{`--set prompt.user=Compute: {question}: prompt.user: want a string, got a mapping`, `--set 'prompt.user="Compute: {question}"'`}},
		{"--set errors name the flag", []string{write("d.yaml", head), "--set", "repeat.nn=3", "--set", "env.name=x"},
			[]string{"--set repeat.nn=3: repeat.nn: unknown key", `--set env.name=x: env.name: unknown environment "x"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := cli.Main(append([]string{"run", "--quiet"}, tt.args...), &stdout, &stderr)
			if code != cli.ExitUsage {
				t.Fatalf("exit %d, want %d\nstderr: %s", code, cli.ExitUsage, &stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, &stderr)
				}
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("output directory exists after a bad config (stat: %v)", err)
			}
		})
	}
}

func TestStatsAndMerge(t *testing.T) {
	root, _ := filepath.Abs("../../..")
	t.Chdir(root)
	out := t.TempDir()
	main := func(args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if code := cli.Main(args, &stdout, &stderr); code != cli.ExitOK {
			t.Fatalf("%v: exit %d\n%s%s", args, code, &stdout, &stderr)
		}
		return stdout.String()
	}
	main("run", "examples/quickstart/config.yaml", "-q", "--set", "output.dir="+out, "--set", "source.limit=60", "--set", "output.file_rows=40", "--set", "output.batch_rows=16")
	written, err := os.ReadFile(filepath.Join(out, "metrics.json"))
	if err != nil {
		t.Fatal(err)
	}
	// metrics.json is what `trajflow stats --json` computes from the
	// Parquet alone, and the run's own token figures (last_run).
	var fromRun map[string]any
	if err := json.Unmarshal(written, &fromRun); err != nil {
		t.Fatal(err)
	}
	if lr, ok := fromRun["last_run"].(map[string]any); !ok || lr["completion_tokens"].(float64) <= 0 {
		t.Fatalf("metrics.json has no last_run: %v", fromRun["last_run"])
	}
	delete(fromRun, "last_run")
	without, _ := json.MarshalIndent(fromRun, "", "  ")
	var fromStats map[string]any
	got0 := main("stats", "--json", out)
	if err := json.Unmarshal([]byte(got0), &fromStats); err != nil {
		t.Fatal(err)
	}
	again, _ := json.MarshalIndent(fromStats, "", "  ")
	if string(again) != string(without) {
		t.Fatalf("stats --json differs from metrics.json:\n%s\nvs\n%s", again, without)
	}
	table := main("stats", out)
	for _, want := range []string{"rows         240", "pass@k", "tasks        60"} {
		if !strings.Contains(table, want) {
			t.Fatalf("stats table lacks %q:\n%s", want, table)
		}
	}
	before, _ := filepath.Glob(filepath.Join(out, "data", "part-*.parquet"))
	merged := t.TempDir()
	if msg := main("merge", "--out", merged, "--file-rows", "1000", out); !strings.Contains(msg, "merged 240 rows") {
		t.Fatalf("merge said %q", msg)
	}
	after, _ := filepath.Glob(filepath.Join(merged, "data", "part-*.parquet"))
	if len(after) != 1 || len(before) < 3 {
		t.Fatalf("%d files merged into %d", len(before), len(after))
	}
	if got := main("stats", "--json", merged); strings.TrimSpace(got) != strings.TrimSpace(got0) {
		t.Fatal("stats changed after merge")
	}
	// A second merge into the same directory is refused without --force.
	var stderr bytes.Buffer
	if code := cli.Main([]string{"merge", "--out", merged, out}, io.Discard, &stderr); code != cli.ExitFailed {
		t.Fatalf("exit %d: %s", code, &stderr)
	}
}

// TestMergeCarriesStepsAndImages: merging a sharded run with step rows
// (the grid example, two shards, a file every 8 rows) into files cut
// inside the inputs gives every merged data file its steps file of the
// same name, holding exactly the step rows of its own trajectories, all
// of the inputs' step rows once; merging a run with images (the VLM
// example) copies every image its rows name, and each resolves to bytes
// of its hash. The merged steps are read with Arrow's reader.
func TestMergeCarriesStepsAndImages(t *testing.T) {
	root, _ := filepath.Abs("../../..")
	t.Chdir(root)
	runIt := func(t *testing.T, args ...string) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if code := cli.Main(append([]string{"run"}, args...), &stdout, &stderr); code != cli.ExitOK {
			t.Fatalf("run %v: exit %d\n%s%s", args, code, &stdout, &stderr)
		}
	}
	merge := func(t *testing.T, args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if code := cli.Main(append([]string{"merge"}, args...), &stdout, &stderr); code != cli.ExitOK {
			t.Fatalf("merge %v: exit %d\n%s%s", args, code, &stdout, &stderr)
		}
		return stdout.String()
	}
	t.Run("steps", func(t *testing.T) {
		out := t.TempDir()
		for i := range 2 {
			runIt(t, "examples/grid/config.yaml", "--quiet", "--set", "output.dir="+out, "--set", "source.limit=12",
				"--set", "output.file_rows=8", "--set", "output.batch_rows=8", "--set", fmt.Sprintf("source.shard={index: %d, count: 2}", i))
		}
		in, _ := filepath.Glob(filepath.Join(out, "shards", "*", "steps", "part-*.parquet"))
		var inSteps []string
		for _, p := range in {
			rows, err := readback.StepsFile(p)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				inSteps = append(inSteps, fmt.Sprintf("%d/%d/%d/%d", r.TaskIndex, r.Attempt, r.RolloutIndex, r.Step))
			}
		}
		dest := filepath.Join(t.TempDir(), "merged")
		said := merge(t, "--rows-per-file", "12", out, dest)
		if !strings.Contains(said, "with their step rows: a steps file beside each, in "+filepath.Join(dest, "steps")) {
			t.Fatalf("merge does not say it merged the step rows:\n%s", said)
		}
		data, _ := filepath.Glob(filepath.Join(dest, "data", "part-*.parquet"))
		steps, _ := filepath.Glob(filepath.Join(dest, "steps", "part-*.parquet"))
		if len(data) < 3 || len(steps) != len(data) || len(in) < 4 {
			t.Fatalf("%d input steps files merged into %d data and %d steps files", len(in), len(data), len(steps))
		}
		var outSteps []string
		for i, d := range data {
			if filepath.Base(steps[i]) != filepath.Base(d) {
				t.Fatalf("%s has no steps file of its name (%s)", d, steps[i])
			}
			trajs, err := readback.File(d)
			if err != nil {
				t.Fatal(err)
			}
			turns := map[string]int{}
			for _, r := range trajs {
				turns[fmt.Sprintf("%d/%d/%d", r.Task.Index, r.Attempt, r.RolloutIndex)] = r.NumTurns
			}
			rows, err := readback.StepsFile(steps[i])
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				k := fmt.Sprintf("%d/%d/%d", r.TaskIndex, r.Attempt, r.RolloutIndex)
				if _, ok := turns[k]; !ok {
					t.Fatalf("%s: step row of %s, a trajectory not in %s", steps[i], k, d)
				}
				turns[k]--
				outSteps = append(outSteps, fmt.Sprintf("%s/%d", k, r.Step))
			}
			for k, left := range turns {
				if left != 0 {
					t.Fatalf("%s: trajectory %s has %d turns more than step rows in %s", d, k, left, steps[i])
				}
			}
		}
		slices.Sort(inSteps)
		slices.Sort(outSteps)
		if len(inSteps) == 0 || !slices.Equal(inSteps, outSteps) {
			t.Fatalf("merged %d step rows, the inputs hold %d", len(outSteps), len(inSteps))
		}
	})
	t.Run("images", func(t *testing.T) {
		out := t.TempDir()
		runIt(t, "examples/vlm/config.yaml", "--quiet", "--set", "output.dir="+out)
		dest := filepath.Join(t.TempDir(), "merged")
		have, _ := filepath.Glob(filepath.Join(out, "images", "*"))
		said := merge(t, out, dest)
		if want := fmt.Sprintf("images: %d copied into %s (0 already there)", len(have), filepath.Join(dest, "images")); len(have) == 0 || !strings.Contains(said, want) {
			t.Fatalf("merge's output lacks %q:\n%s", want, said)
		}
		rows, err := readback.Dir(filepath.Join(dest, "data"))
		if err != nil {
			t.Fatal(err)
		}
		refs := 0
		for _, r := range rows {
			for _, m := range r.Messages {
				for _, p := range m.Parts {
					if p.Type != pipeline.PartImage {
						continue
					}
					data, _, err := images.Lookup(filepath.Join(dest, "images"), p.ImageURL)
					if err != nil {
						t.Fatal(err)
					}
					if sum := sha256.Sum256(data); "sha256:"+hex.EncodeToString(sum[:]) != p.ImageURL {
						t.Fatalf("%s resolves to bytes of another hash", p.ImageURL)
					}
					refs++
				}
			}
		}
		if refs == 0 {
			t.Fatal("the merged rows name no image")
		}
	})
}
