//go:build unix

package slurm

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeTrajflow stands for trajflow run: it records its arguments and the
// SIGTERMs it gets, and on the first one it "commits" (300 ms) and exits
// 130, as trajflow's graceful stop does. FAKE_MODE=ok exits 0 at once.
const fakeTrajflow = `#!/bin/bash
echo "$@" > "$FAKE_DIR/args"
terms=0
stop=0
trap 'terms=$((terms+1)); echo $terms > "$FAKE_DIR/terms"; stop=1' TERM
touch "$FAKE_DIR/started"
[ "$FAKE_MODE" = ok ] && exit 0
while [ $stop = 0 ]; do sleep 0.05; done
sleep 0.3
touch "$FAKE_DIR/committed"
exit 130
`

const fakeScontrol = `#!/bin/bash
echo "$@" >> "$FAKE_DIR/scontrol"
`

// TestArrayScriptSignals runs the array script with bash, a fake trajflow
// and a fake scontrol, and checks what each signal does: SIGTERM to the
// whole job (Slurm's requeue, preemption, scancel) reaches trajflow once
// and the shell waits for it to commit; SIGUSR1 to the shell alone gives
// trajflow one SIGTERM and requeues the task; the exit code is
// trajflow's.
func TestArrayScriptSignals(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash:", err)
	}
	for _, tc := range []struct {
		name     string
		mode     string
		signal   func(pid int) error
		wantCode int
		requeue  bool
	}{
		{name: "done", mode: "ok", wantCode: 0},
		{name: "SIGTERM to the job", signal: func(pid int) error { return syscall.Kill(-pid, syscall.SIGTERM) }, wantCode: 130},
		{name: "SIGUSR1 to the shell", signal: func(pid int) error { return syscall.Kill(pid, syscall.SIGUSR1) }, wantCode: 130, requeue: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			bin := filepath.Join(dir, "bin dir")
			if err := os.Mkdir(bin, 0o755); err != nil {
				t.Fatal(err)
			}
			for name, text := range map[string]string{"trajflow": fakeTrajflow, "scontrol": fakeScontrol} {
				if err := os.WriteFile(filepath.Join(bin, name), []byte(text), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			j := testJob()
			j.Binary = filepath.Join(bin, "trajflow")
			j.Sets = []string{"repeat.n=2", "prompt.user=it's {question}"}
			script, err := j.Array()
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "array.sh")
			if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(bash, path)
			cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "FAKE_DIR="+dir, "FAKE_MODE="+tc.mode,
				"SLURM_JOB_ID=107", "SLURM_ARRAY_JOB_ID=100", "SLURM_ARRAY_TASK_ID=2", "SLURM_ARRAY_TASK_COUNT=4")
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			var out strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			waitFile(t, filepath.Join(dir, "started"))
			if tc.signal != nil {
				if err := tc.signal(cmd.Process.Pid); err != nil {
					t.Fatal(err)
				}
			}
			err = cmd.Wait()
			code := 0
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				code = exit.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.wantCode {
				t.Errorf("exit code %d, want %d; output:\n%s", code, tc.wantCode, out.String())
			}
			args, _ := os.ReadFile(filepath.Join(dir, "args"))
			if want := "run /home/u/runs/math.yaml --set source.shard=auto --set repeat.n=2 --set prompt.user=it's {question}\n"; string(args) != want {
				t.Errorf("trajflow got %q, want %q", args, want)
			}
			if tc.signal != nil {
				// The shell ended after trajflow had committed, and
				// trajflow got one SIGTERM: a second would make it drop
				// what it had not committed.
				if _, err := os.Stat(filepath.Join(dir, "committed")); err != nil {
					t.Errorf("the script exited before trajflow committed: %v\n%s", err, out.String())
				}
				if terms, _ := os.ReadFile(filepath.Join(dir, "terms")); strings.TrimSpace(string(terms)) != "1" {
					t.Errorf("trajflow got %q SIGTERMs, want 1\n%s", terms, out.String())
				}
			}
			sc, _ := os.ReadFile(filepath.Join(dir, "scontrol"))
			if tc.requeue && string(sc) != "requeue 107\n" {
				t.Errorf("scontrol got %q, want requeue 107\n%s", sc, out.String())
			}
			if !tc.requeue && len(sc) > 0 {
				t.Errorf("scontrol called: %q\n%s", sc, out.String())
			}
			if !strings.Contains(out.String(), "trajflow-slurm: task 2 of 4, job 107, start 1") {
				t.Errorf("no start line in\n%s", out.String())
			}
		})
	}
}

func waitFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear", path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestMergeScriptArgs runs the merge script with a fake trajflow and
// checks the arguments trajflow gets, with paths that have spaces.
func TestMergeScriptArgs(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash:", err)
	}
	dir := t.TempDir()
	fake := filepath.Join(dir, "trajflow")
	if err := os.WriteFile(fake, []byte("#!/bin/bash\nprintf '%s\\n' \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	j := testJob()
	j.Binary, j.Shards, j.Output, j.MergeOut = fake, 3, "/data/my run", "/data/my run/merged"
	script, err := j.Merge()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bash, "-c", script).Output()
	if err != nil {
		t.Fatal(err)
	}
	want := "merge\n--out\n/data/my run/merged\n/data/my run\n"
	if string(out) != want {
		t.Errorf("trajflow got\n%s\nwant\n%s", out, want)
	}
}
