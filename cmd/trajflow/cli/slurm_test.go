//go:build unix

package cli_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/cmd/trajflow/cli"
)

// slurmConfig writes a small simulator config and its tasks into a
// directory whose path has a space, and returns the directory and the
// config's path.
func slurmConfig(t *testing.T) (dir, cfg string) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "my runs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	tasks := `{"question": "What is 1 + 1?", "expected_answer": "2"}` + "\n"
	if err := os.WriteFile(filepath.Join(dir, "tasks.jsonl"), []byte(tasks), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg = filepath.Join(dir, "math.yaml")
	body := `source: {path: tasks.jsonl}
prompt: {user: "Solve: {question}"}
repeat: {n: 4}
generate: {endpoints: ["sim://"], model: sim-math}
env: {name: math, answer_field: expected_answer}
output: {dir: out}
run: {grace: 45s}
`
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, cfg
}

func slurmMain(t *testing.T, dir string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	t.Chdir(dir)
	var o, e bytes.Buffer
	code = cli.Main(append([]string{"slurm"}, args...), &o, &e)
	return code, o.String(), e.String()
}

func TestSlurmWritesScripts(t *testing.T) {
	dir, cfg := slurmConfig(t)
	code, stdout, stderr := slurmMain(t, dir, cfg, "--shards", "3", "--max-parallel", "2", "--set", "repeat.n=2",
		"--binary", "/opt/tf/trajflow", "--sbatch", "--partition=cpu", "--", "--time", "1:00:00", "-A", "proj")
	if code != cli.ExitOK {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	if !strings.Contains(stderr, "note: run.grace is 45s; Slurm kills a requeued or preempted task KillWait") {
		t.Errorf("no note on run.grace 45s:\n%s", stderr)
	}
	scripts := filepath.Join(dir, "math-slurm")
	array, merge := filepath.Join(scripts, "array.sh"), filepath.Join(scripts, "merge.sh")
	for _, want := range []string{
		"wrote " + array + " (3 tasks)",
		"jid=$(sbatch --parsable '" + array + "') && sbatch --dependency=afterok:${jid%%;*} '" + merge + "'",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	a, m := readFile(t, array), readFile(t, merge)
	for _, want := range []string{
		"#SBATCH --array=0-2%2\n", "#SBATCH --requeue\n", "#SBATCH --open-mode=append\n",
		"#SBATCH --signal=B:USR1@75\n", // run.grace 45s + 30s
		"#SBATCH --job-name=trajflow-math\n",
		`#SBATCH --output="` + scripts + `/logs/%x-%A_%a.out"` + "\n",
		`#SBATCH --chdir="` + dir + `"` + "\n",
		"#SBATCH --partition=cpu\n", "#SBATCH --time 1:00:00\n", "#SBATCH -A proj\n",
		"/opt/tf/trajflow run '" + cfg + "' --set source.shard=auto --set repeat.n=2 &\n",
	} {
		if !strings.Contains(a, want) {
			t.Errorf("array.sh lacks %q:\n%s", want, a)
		}
	}
	for _, want := range []string{
		"#SBATCH --job-name=trajflow-math-merge\n", "#SBATCH --partition=cpu\n",
		"exec /opt/tf/trajflow merge --out '" + filepath.Join(dir, "out", "merged") + "' '" + filepath.Join(dir, "out") + "'\n",
	} {
		if !strings.Contains(m, want) {
			t.Errorf("merge.sh lacks %q:\n%s", want, m)
		}
	}
	for _, p := range []string{array, merge} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm()&0o100 == 0 {
			t.Errorf("%s: not executable (%v)", p, err)
		}
	}
	if _, err := os.Stat(filepath.Join(scripts, "logs")); err != nil {
		t.Errorf("no log directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "out")); !os.IsNotExist(err) {
		t.Errorf("trajflow slurm created the output directory (stat: %v)", err)
	}
}

func TestSlurmBadInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		args func(cfg string) []string
		want string
	}{
		{"no shards", func(c string) []string { return []string{c} }, "--shards N is required"},
		{"zero shards", func(c string) []string { return []string{c, "--shards", "0"} }, "--shards needs a whole number >= 1"},
		{"bad max parallel", func(c string) []string { return []string{c, "--shards", "2", "--max-parallel", "x"} }, "--max-parallel needs a whole number >= 1"},
		{"unknown flag", func(c string) []string { return []string{c, "--shards", "2", "--bogus"} }, "unknown flag --bogus"},
		{"bad config key", func(c string) []string { return []string{c, "--shards", "2", "--set", "repeat.nn=3"} }, "repeat.nn: unknown key"},
		{"bad config value", func(c string) []string { return []string{c, "--shards", "2", "--set", "repeat.n=0"} }, "repeat.n"},
		{"unknown environment", func(c string) []string { return []string{c, "--shards", "2", "--set", "env.name=nope"} }, "env.name"},
		{"shard count differs", func(c string) []string {
			return []string{c, "--shards", "4", "--set", "source.shard.count=8"}
		}, "--set source.shard.count=8: each array task takes its shard from Slurm"},
		{"config sharded by hand", func(c string) []string {
			b, _ := os.ReadFile(c)
			os.WriteFile(c, []byte(strings.Replace(string(b), "source: {path: tasks.jsonl}", "source: {path: tasks.jsonl, shard: {index: 1, count: 2}}", 1)), 0o644)
			return []string{c, "--shards", "4"}
		}, "source.shard is index 1 of 2; the array gives each task its shard"},
		{"time limit within the signal time", func(c string) []string { return []string{c, "--shards", "2", "--", "--time", "2:00"} },
			"sbatch --time 2:00: the tasks are signalled to stop and requeue 75 s before their time limit (run.grace 45s + 30 s"},
		{"short form of the time limit", func(c string) []string { return []string{c, "--shards", "2", "--sbatch", "-t=0-0:2"} },
			"give a --time above 2m15s"},
		{"option the script sets", func(c string) []string { return []string{c, "--shards", "2", "--", "--array=0-9"} }, "sets it in the scripts"},
		{"short form too", func(c string) []string { return []string{c, "--shards", "2", "--sbatch", "-o", "--sbatch", "x.out"} }, "sets it in the scripts"},
		{"value without option", func(c string) []string { return []string{c, "--shards", "2", "--", "gpu"} }, "an option starts with -"},
		{"missing config", func(c string) []string { return []string{filepath.Join(filepath.Dir(c), "nope.yaml"), "--shards", "2"} }, "nope.yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, cfg := slurmConfig(t)
			code, _, stderr := slurmMain(t, dir, tc.args(cfg)...)
			if code != cli.ExitUsage {
				t.Errorf("exit %d, want %d\n%s", code, cli.ExitUsage, stderr)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("stderr lacks %q:\n%s", tc.want, stderr)
			}
			for _, p := range []string{"math-slurm", "nope-slurm", "out"} {
				if _, err := os.Stat(filepath.Join(dir, p)); !os.IsNotExist(err) {
					t.Errorf("a bad invocation created %s (stat: %v)", p, err)
				}
			}
		})
	}
}

// fakeSbatch stands for sbatch: it logs its arguments and answers as
// `sbatch --parsable` does, from FAKE_IDS (one id per call), or fails
// with FAKE_FAIL on the call it names.
const fakeSbatch = `#!/bin/bash
echo "$*" >> "$FAKE_DIR/calls"
n=$(wc -l < "$FAKE_DIR/calls")
if [ "$n" = "${FAKE_FAIL_CALL:-0}" ]; then
  echo "sbatch: error: Batch job submission failed: Invalid partition name specified" >&2
  exit 1
fi
set -- $FAKE_IDS
shift $((n - 1))
echo "$1"
`

func TestSlurmSubmit(t *testing.T) {
	for _, tc := range []struct {
		name     string
		failCall string
		code     int
		stdout   []string
		stderr   []string
		calls    int
	}{
		{name: "both submitted", code: cli.ExitOK, calls: 2,
			stdout: []string{"array job 41 (2 tasks): ", "merge job 42 (after array job 41): "}},
		{name: "array refused", failCall: "1", code: cli.ExitFailed, calls: 1,
			stderr: []string{"Invalid partition name specified"}},
		{name: "merge refused", failCall: "2", code: cli.ExitFailed, calls: 2,
			stderr: []string{"the array job 41 is submitted, the merge job is not", "Invalid partition name specified", "sbatch --dependency=afterok:41 "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, cfg := slurmConfig(t)
			bin := t.TempDir()
			if err := os.WriteFile(filepath.Join(bin, "sbatch"), []byte(fakeSbatch), 0o755); err != nil {
				t.Fatal(err)
			}
			t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
			t.Setenv("FAKE_DIR", bin)
			t.Setenv("FAKE_IDS", "41;cluster 42")
			t.Setenv("FAKE_FAIL_CALL", tc.failCall)
			code, stdout, stderr := slurmMain(t, dir, cfg, "--shards", "2", "--submit")
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, stdout, stderr)
			}
			for _, w := range tc.stdout {
				if !strings.Contains(stdout, w) {
					t.Errorf("stdout lacks %q:\n%s", w, stdout)
				}
			}
			for _, w := range tc.stderr {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
			calls := strings.Split(strings.TrimSpace(readFile(t, filepath.Join(bin, "calls"))), "\n")
			scripts := filepath.Join(dir, "math-slurm")
			want := []string{"--parsable " + filepath.Join(scripts, "array.sh"),
				"--parsable --dependency=afterok:41 " + filepath.Join(scripts, "merge.sh")}[:tc.calls]
			if strings.Join(calls, "\n") != strings.Join(want, "\n") {
				t.Errorf("sbatch calls:\n%s\nwant:\n%s", strings.Join(calls, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

func TestSlurmSubmitWithoutSbatch(t *testing.T) {
	dir, cfg := slurmConfig(t)
	t.Setenv("PATH", t.TempDir())
	code, _, stderr := slurmMain(t, dir, cfg, "--shards", "2", "--submit", "--binary", "/opt/tf/trajflow")
	if code != cli.ExitFailed || !strings.Contains(stderr, "--submit:") || !strings.Contains(stderr, "array.sh") {
		t.Errorf("exit %d, stderr:\n%s", code, stderr)
	}
}

func TestSlurmShortGrace(t *testing.T) {
	dir, cfg := slurmConfig(t)
	code, _, stderr := slurmMain(t, dir, cfg, "--shards", "2", "--set", "run.grace=20s", "--out", "jobs")
	if code != cli.ExitOK {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	if stderr != "" {
		t.Errorf("stderr: %s", stderr)
	}
	a := readFile(t, filepath.Join(dir, "jobs", "array.sh"))
	// Slurm may signal up to 60 s early; no shorter time is asked for.
	for _, want := range []string{"#SBATCH --signal=B:USR1@60\n", "--set source.shard=auto --set run.grace=20s &\n", "#SBATCH --array=0-1\n"} {
		if !strings.Contains(a, want) {
			t.Errorf("array.sh lacks %q:\n%s", want, a)
		}
	}
}

// The command trajflow slurm prints, run by bash with a fake sbatch that
// answers as on a federation ("41;cluster"), submits the array job and
// the merge job after it.
func TestSlurmPrintedCommand(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash:", err)
	}
	dir, cfg := slurmConfig(t)
	code, stdout, stderr := slurmMain(t, dir, cfg, "--shards", "2", "--out", "my jobs")
	if code != cli.ExitOK {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	_, line, ok := strings.Cut(stdout, "submit them with:\n")
	if !ok {
		t.Fatalf("no command in\n%s", stdout)
	}
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "sbatch"), []byte(fakeSbatch), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bash, "-c", strings.TrimSpace(line))
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "FAKE_DIR="+bin, "FAKE_IDS=41;cluster 42")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", line, err, out)
	}
	scripts := filepath.Join(dir, "my jobs")
	want := "--parsable " + filepath.Join(scripts, "array.sh") + "\n--dependency=afterok:41 " + filepath.Join(scripts, "merge.sh") + "\n"
	if got := readFile(t, filepath.Join(bin, "calls")); got != want {
		t.Errorf("sbatch calls:\n%s\nwant:\n%s", got, want)
	}
}

// An s3:// output.dir stays a URL in the scripts: the merge job reads the
// bucket's root and writes beside it.
func TestSlurmObjectStorageOutput(t *testing.T) {
	dir, cfg := slurmConfig(t)
	code, _, stderr := slurmMain(t, dir, cfg, "--shards", "2", "--binary", "/opt/tf/trajflow", "--set", "output.dir=s3://bucket/run")
	if code != cli.ExitOK {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	m := readFile(t, filepath.Join(dir, "math-slurm", "merge.sh"))
	if want := "exec /opt/tf/trajflow merge --out s3://bucket/run/merged s3://bucket/run\n"; !strings.Contains(m, want) {
		t.Errorf("merge.sh lacks %q:\n%s", want, m)
	}
}
