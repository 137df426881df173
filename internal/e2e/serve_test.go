package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/serve/client"
)

// writeServeConfig writes a serve config on the simulator: groups of 4,
// the zero-std groups dropped, a little simulated latency.
func writeServeConfig(t *testing.T, dir, tasks, out string) string {
	t.Helper()
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	cfg := fmt.Sprintf(`run: {id: e2e-serve}
source: {path: %s}
prompt: {user: "Solve: {question}"}
repeat: {n: 4, seed: 1234}
generate:
  endpoints: ["sim://"]
  model: sim-math
  concurrency: 16
  params: {temperature: 1.0, max_tokens: 128}
  sim: {seed: 7, accuracy: 0.5, time_scale: 0.01}
env: {name: math, answer_field: expected_answer}
groups: {keep: nonzero_std}
output: {dir: %s}
serve: {addr: "127.0.0.1:0", commit_interval: 100ms}
`, q(tasks), q(out))
	path := filepath.Join(dir, "serve.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// serveProc is a trajflow serve process.
type serveProc struct {
	cmd    *exec.Cmd
	url    string
	mu     sync.Mutex
	stderr bytes.Buffer
	done   chan struct{}
}

// startServe starts trajflow serve and waits until it listens.
func startServe(t *testing.T, args ...string) *serveProc {
	t.Helper()
	p := &serveProc{cmd: exec.Command(binary, append([]string{"serve"}, args...)...), done: make(chan struct{})}
	pipe, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.stderr.WriteString(line + "\n")
			p.mu.Unlock()
			if _, rest, ok := strings.Cut(line, "serving on "); ok {
				addr <- strings.Fields(rest)[0]
			}
		}
		io.Copy(io.Discard, pipe)
		p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
	})
	select {
	case p.url = <-addr:
	case <-p.done:
		t.Fatalf("trajflow serve exited before listening: %s", p.log())
	case <-time.After(60 * time.Second):
		t.Fatalf("trajflow serve did not listen: %s", p.log())
	}
	return p
}

func (p *serveProc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// signal sends sig and waits for the exit, returning the exit code.
func (p *serveProc) signal(t *testing.T, sig syscall.Signal) int {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("trajflow serve did not exit on %v: %s", sig, p.log())
	}
	return p.cmd.ProcessState.ExitCode()
}

// groupKey is a group: its task and attempt.
type groupKey struct {
	task    int64
	attempt int
}

// groupsIn returns the groups of a dataset and checks each is whole.
func groupsIn(t *testing.T, ds dataset) map[groupKey][]*pipeline.Rollout {
	t.Helper()
	out := map[groupKey][]*pipeline.Rollout{}
	for k, r := range ds.rows {
		g := groupKey{k.TaskIndex, k.Attempt}
		out[g] = append(out[g], r)
	}
	return out
}

// TestServeKillRestart: a serve killed with kill -9 and started again
// keeps the lease of the step it had served and not seen acknowledged,
// then serves it again, whole and under its number; no rollout is in
// data/ twice, every group served is in
// data/, no group is in two steps, and every committed kept group is in a
// step or queued. SIGTERM stops it as a run stops (exit 130).
func TestServeKillRestart(t *testing.T) {
	dir := t.TempDir()
	tasks := writeTasks(t, dir, 400, 3)
	out := filepath.Join(dir, "out")
	cfg := writeServeConfig(t, dir, tasks, out)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	p := startServe(t, cfg, "--set", "serve.lease=1s")
	c := client.New(p.url, "")
	first, err := c.Next(ctx, 4, client.FormatParquet)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Ack(ctx, first.Number); err != nil {
		t.Fatal(err)
	}
	unacked, err := c.Next(ctx, 4, client.FormatParquet)
	if err != nil {
		t.Fatal(err)
	}
	// Let generation run on (a buffer step, groups in flight), then kill.
	time.Sleep(300 * time.Millisecond)
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done

	p = startServe(t, cfg, "--set", "serve.lease=1s")
	c = client.New(p.url, "")
	// The step's lease was recorded with it: served again once it runs
	// out.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		st, err := c.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Steps.Pending == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the recorded lease never ran out: %+v", st.Steps)
		}
	}
	again, err := c.Next(ctx, 4, client.FormatParquet)
	if err != nil {
		t.Fatal(err)
	}
	if again.Number != unacked.Number || !bytes.Equal(again.Body, unacked.Body) {
		t.Fatalf("after kill -9: step %d (%d bytes), want step %d (%d bytes) again", again.Number, len(again.Body), unacked.Number, len(unacked.Body))
	}
	for range 3 {
		st, err := c.Next(ctx, 4, client.FormatParquet)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Ack(ctx, st.Number); err != nil {
			t.Fatal(err)
		}
	}
	if code := p.signal(t, syscall.SIGTERM); code != 130 {
		t.Fatalf("SIGTERM: exit %d, want 130: %s", code, p.log())
	}

	data := groupsIn(t, readDataset(t, filepath.Join(out, "data"))) // fails on a duplicate row
	// A group filtered out is committed too (filtered/), once: its prompt
	// is consumed and never sampled again across the restart.
	filtered := groupsIn(t, readDataset(t, filepath.Join(out, "filtered")))
	if len(filtered) == 0 {
		t.Fatal("no filtered group committed")
	}
	for g := range filtered {
		if _, ok := data[g]; ok {
			t.Fatalf("group %v both kept and filtered", g)
		}
	}
	steps, _ := filepath.Glob(filepath.Join(out, "served", "step-*"))
	sort.Strings(steps)
	if len(steps) != 5 {
		t.Fatalf("%d step folders, want 5: %v", len(steps), steps)
	}
	inStep := map[groupKey]string{}
	for _, sd := range steps {
		gs := groupsIn(t, readDataset(t, sd))
		if len(gs) != 4 {
			t.Fatalf("%s: %d groups", sd, len(gs))
		}
		for g, rows := range gs {
			if prev, ok := inStep[g]; ok {
				t.Fatalf("group %v in %s and %s", g, prev, sd)
			}
			inStep[g] = sd
			if len(rows) != len(data[g]) || len(rows) != 4 {
				t.Fatalf("group %v: %d rows in %s, %d in data/", g, len(rows), sd, len(data[g]))
			}
		}
	}
	// stats and report read the served steps directly: the served
	// directory (every step) and a step's folder.
	for _, tc := range []struct {
		path string
		rows int64
	}{
		{filepath.Join(out, "served"), int64(4 * len(inStep))},
		{steps[0], 16},
	} {
		st := run(t, "stats", "--json", tc.path)
		var m struct {
			Rows int64 `json:"rows"`
		}
		if err := json.Unmarshal([]byte(st.stdout), &m); st.code != 0 || err != nil || m.Rows != tc.rows {
			t.Fatalf("stats %s: exit %d, rows %d (%v), want %d:\n%s%s", tc.path, st.code, m.Rows, err, tc.rows, st.stdout, st.stderr)
		}
	}
	html := filepath.Join(dir, "served.html")
	if rp := run(t, "report", "-o", html, filepath.Join(out, "served")); rp.code != 0 {
		t.Fatalf("report of the served directory: exit %d: %s", rp.code, rp.stderr)
	}
	// A third start: everything committed and in no step is queued.
	p = startServe(t, cfg, "--set", "serve.lease=1s")
	st, err := client.New(p.url, "").Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The step served again and not acknowledged is still leased (its
	// lease is recorded; TestServeKillServedAgain) or to be served again.
	if want := len(data) - len(inStep); st.QueuedGroups < want || st.Steps.Made != 5 || st.Steps.Pending+st.Steps.Leased != 1 {
		t.Fatalf("restarted: %d queued (data/ %d groups, %d in steps), steps %+v", st.QueuedGroups, len(data), len(inStep), st.Steps)
	}
}

// TestServeRefusesOpenAddrWithoutToken: off loopback without a token,
// serve exits 2 naming serve.token_env and listens on nothing.
func TestServeRefusesOpenAddrWithoutToken(t *testing.T) {
	dir := t.TempDir()
	cfg := writeServeConfig(t, dir, writeTasks(t, dir, 10, 1), filepath.Join(dir, "out"))
	res := run(t, "serve", cfg, "--addr", "0.0.0.0:0")
	if res.code != 2 || !strings.Contains(res.stderr, "serve.token_env") {
		t.Fatalf("exit %d, stderr %s; want 2 naming serve.token_env", res.code, res.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "out")); !os.IsNotExist(err) {
		t.Fatalf("the refused serve created its output: %v", err)
	}
}

// TestServePythonExample runs examples/serve/grpo_loop.py (the Python
// client of the standard library) against a trajflow serve process of
// examples/serve/serve.yaml with a bearer token.
func TestServePythonExample(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("python3 is not installed; .ci/run installs it")
		}
		t.Skip("python3 not installed")
	}
	dir := t.TempDir()
	tasks, err := filepath.Abs(filepath.Join("..", "..", "examples", "quickstart", "tasks.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	const token = "e2e-python-token-0123"
	p := startServeEnv(t, []string{"TRAJFLOW_E2E_TOKEN=" + token}, filepath.Join("..", "..", "examples", "serve", "serve.yaml"),
		"--addr", "127.0.0.1:0", "--set", "serve.token_env=TRAJFLOW_E2E_TOKEN",
		"--set", "source.path="+tasks, "--set", "output.dir="+filepath.Join(dir, "out"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, filepath.Join("..", "..", "examples", "serve", "grpo_loop.py"),
		"--url", p.url, "--token-env", "TRAJFLOW_E2E_TOKEN", "--steps", "3", "--groups", "4", "--train-seconds", "0.1")
	cmd.Env = append(os.Environ(), "TRAJFLOW_E2E_TOKEN="+token)
	outb, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("grpo_loop.py: %v\n%s\nserve: %s", err, outb, p.log())
	}
	if !strings.Contains(string(outb), "ok: 3 steps, policy v3") {
		t.Fatalf("grpo_loop.py: %s", outb)
	}
	// The client's Parquet format (the bytes; a table where pyarrow is
	// installed) and its errors naming the parameter.
	script := `
import sys
sys.path.insert(0, sys.argv[1])
from client import ServeClient, ServeError
c = ServeClient(sys.argv[2], token=sys.argv[3])
s = c.next(2, format="parquet")
assert s.body[:4] == b"PAR1" and s.body[-4:] == b"PAR1", s.body[:8]
# generated ahead while the loop above moved the policy to v3: versions up to 3
assert s.groups == 2 and s.versions and all(0 <= v <= 3 for v in s.versions), (s.groups, s.versions)
if s.table is not None:
    assert s.table.num_rows == s.rows_count
c.ack(s.number)
try:
    c.next(0)
    sys.exit("groups=0 accepted")
except ServeError as e:
    assert e.status == 400 and e.parameter == "groups", e
try:
    ServeClient(sys.argv[2]).status()
    sys.exit("no token accepted")
except ServeError as e:
    assert e.status == 401, e
print("parquet ok", s.number)
`
	cmd = exec.CommandContext(ctx, py, "-c", script, filepath.Join("..", "..", "examples", "serve"), p.url, token)
	if outb, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(outb), "parquet ok") {
		t.Fatalf("client.py, parquet: %v\n%s", err, outb)
	}
	if strings.Contains(p.log(), token) {
		t.Fatalf("the token is in serve's log: %s", p.log())
	}
}

// startServeEnv is startServe with extra environment variables (the
// process inherits the test's environment).
func startServeEnv(t *testing.T, env []string, args ...string) *serveProc {
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	return startServe(t, args...)
}

// TestServeKillLoop: trainers take and acknowledge steps while serve is
// killed with kill -9 at random moments and started again: a step number
// always names the same bytes, whichever start served it; no group is in
// two steps; data/ holds every rollout once; every step folder is whole.
func TestServeKillLoop(t *testing.T) {
	if testing.Short() {
		t.Skip("several kill -9 cycles (skipped under -short)")
	}
	dir := t.TempDir()
	tasks := writeTasks(t, dir, 3000, 11)
	out := filepath.Join(dir, "out")
	cfg := writeServeConfig(t, dir, tasks, out)
	var mu sync.Mutex
	bodies := map[int64]string{} // step → sha256 of its Parquet body
	rng := rand.New(rand.NewPCG(7, 0))
	for round := range 4 {
		p := startServe(t, cfg)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for w := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := client.New(p.url, "")
				for ctx.Err() == nil {
					st, err := c.Next(ctx, 3, client.FormatParquet)
					if err != nil {
						return
					}
					sum := sha256.Sum256(st.Body)
					mu.Lock()
					if prev, ok := bodies[st.Number]; ok && prev != hex.EncodeToString(sum[:]) {
						mu.Unlock()
						t.Errorf("round %d: step %d served with other bytes", round, st.Number)
						return
					}
					bodies[st.Number] = hex.EncodeToString(sum[:])
					mu.Unlock()
					if (st.Number+int64(w))%2 == 0 {
						_ = c.Ack(ctx, st.Number)
					}
				}
			}()
		}
		time.Sleep(time.Duration(150+rng.IntN(500)) * time.Millisecond)
		p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
		cancel()
		wg.Wait()
	}
	p := startServe(t, cfg)
	if code := p.signal(t, syscall.SIGTERM); code != 130 {
		t.Fatalf("SIGTERM: exit %d: %s", code, p.log())
	}
	data := groupsIn(t, readDataset(t, filepath.Join(out, "data")))
	steps, _ := filepath.Glob(filepath.Join(out, "served", "step-*"))
	if len(steps) < 4 {
		t.Fatalf("%d steps in 4 rounds", len(steps))
	}
	inStep := map[groupKey]string{}
	for _, sd := range steps {
		var n int64
		fmt.Sscanf(filepath.Base(sd), "step-%d", &n)
		b, err := os.ReadFile(filepath.Join(sd, "part-00000.parquet"))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		if want, ok := bodies[n]; ok && want != hex.EncodeToString(sum[:]) {
			t.Fatalf("%s differs from what was served", sd)
		}
		gs := groupsIn(t, readDataset(t, sd))
		if len(gs) != 3 {
			t.Fatalf("%s: %d groups", sd, len(gs))
		}
		for g, rows := range gs {
			if prev, ok := inStep[g]; ok {
				t.Fatalf("group %v in %s and %s", g, prev, sd)
			}
			inStep[g] = sd
			if len(rows) != len(data[g]) {
				t.Fatalf("group %v: %d rows in %s, %d in data/", g, len(rows), sd, len(data[g]))
			}
		}
	}
	t.Logf("%d steps served over 4 kill -9 cycles, %d kept groups committed", len(steps), len(data))
}

// TestServeTrainersSurviveRestarts: two trainers, the Go client's loop
// and examples/serve/grpo_loop.py (pause, policy version, resume each
// step), go on while serve is killed with kill -9 twice and started again
// half a second later on the same address: each retries the refused
// connections and the answers cut short, and finishes its steps; no group
// reaches a trainer in two steps, and no step is acknowledged that the
// trainer did not get.
func TestServeTrainersSurviveRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("two kill -9 cycles under two trainers (skipped under -short)")
	}
	py, pyErr := exec.LookPath("python3")
	dir := t.TempDir()
	tasks := writeTasks(t, dir, 3000, 5)
	out := filepath.Join(dir, "out")
	cfg := writeServeConfig(t, dir, tasks, out)
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	p := startServe(t, cfg, "--addr", addr)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const steps = 12
	progress := make(chan int, steps)
	type got struct {
		number int64
		body   []byte
	}
	var trained []got // read once loop has answered
	loop := make(chan error, 1)
	go func() {
		c := client.New(p.url, "")
		c.Name = "go-trainer"
		c.Retry = client.Retry{Initial: 20 * time.Millisecond, Max: 500 * time.Millisecond, Deadline: time.Minute}
		loop <- func() error {
			for i := range steps {
				st, err := c.Next(ctx, 3, client.FormatParquet)
				if err != nil {
					return fmt.Errorf("step %d of the loop: %w", i, err)
				}
				trained = append(trained, got{st.Number, st.Body})
				time.Sleep(50 * time.Millisecond) // the optimizer
				if err := c.Ack(ctx, st.Number); err != nil {
					return fmt.Errorf("ack of step %d: %w", st.Number, err)
				}
				progress <- i
			}
			return nil
		}()
	}()
	var pyOut bytes.Buffer
	var pyCmd *exec.Cmd
	if pyErr == nil {
		pyCmd = exec.CommandContext(ctx, py, filepath.Join("..", "..", "examples", "serve", "grpo_loop.py"),
			"--url", p.url, "--steps", "12", "--groups", "2", "--train-seconds", "0.1")
		pyCmd.Stdout, pyCmd.Stderr = &pyOut, &pyOut
		if err := pyCmd.Start(); err != nil {
			t.Fatal(err)
		}
	}
	waitFor := func(after int) {
		for {
			select {
			case i := <-progress:
				if i >= after {
					return
				}
			case err := <-loop:
				t.Fatalf("the Go trainer stopped early: %v\nserve: %s", err, p.log())
			}
		}
	}
	for _, after := range []int{2, 6} {
		waitFor(after)
		if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-p.done
		time.Sleep(500 * time.Millisecond)
		p = startServe(t, cfg, "--addr", addr)
	}
	if err := <-loop; err != nil {
		t.Fatalf("the Go trainer stopped: %v\nserve: %s", err, p.log())
	}
	if pyCmd != nil {
		if err := pyCmd.Wait(); err != nil || !strings.Contains(pyOut.String(), "ok: 12 steps") {
			t.Fatalf("grpo_loop.py across the restarts: %v\n%s", err, pyOut.String())
		}
	}
	numbers := map[int64]bool{}
	inStep := map[groupKey]int64{}
	for _, g := range trained {
		if numbers[g.number] {
			t.Fatalf("step %d reached the trainer twice", g.number)
		}
		numbers[g.number] = true
		path := filepath.Join(dir, fmt.Sprintf("got-%d.parquet", g.number))
		if err := os.WriteFile(path, g.body, 0o644); err != nil {
			t.Fatal(err)
		}
		rs, _ := readFile(t, path, memory.NewGoAllocator())
		for _, r := range rs {
			k := groupKey{r.Key().TaskIndex, r.Key().Attempt}
			if prev, ok := inStep[k]; ok && prev != g.number {
				t.Fatalf("group %v in steps %d and %d", k, prev, g.number)
			}
			inStep[k] = g.number
		}
	}
	st, err := client.New(p.url, "").Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := steps
	if pyCmd != nil {
		want += 12
	}
	if st.Steps.Acked != want || st.Paused {
		t.Fatalf("after the loops: steps %+v, paused %v; want %d acknowledged, not paused", st.Steps, st.Paused, want)
	}
}

// TestServeAddrFlag: --addr takes an IPv6 loopback address as typed
// ([::1]:PORT, a loopback address: no token needed), and a bad --addr is
// blamed on --addr, not on a --set the user never typed.
func TestServeAddrFlag(t *testing.T) {
	dir := t.TempDir()
	cfg := writeServeConfig(t, dir, writeTasks(t, dir, 10, 1), filepath.Join(dir, "out"))
	res := run(t, "serve", cfg, "--addr", "nowhere")
	if res.code != 2 || !strings.Contains(res.stderr, "--addr nowhere: serve.addr") || strings.Contains(res.stderr, "--set") {
		t.Fatalf("--addr nowhere: exit %d, stderr %s; want 2 blaming --addr", res.code, res.stderr)
	}
	if ln, err := net.Listen("tcp", "[::1]:0"); err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	} else {
		ln.Close()
	}
	p := startServe(t, cfg, "--addr", "[::1]:0")
	if !strings.HasPrefix(p.url, "http://[::1]:") {
		t.Fatalf("listening on %s, want [::1]", p.url)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := client.New(p.url, "").Status(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestServePythonRanks runs examples/serve/ddp_loop.py as two ranks of a
// data-parallel job (RANK, WORLD_SIZE, as torchrun sets them) against a
// trajflow serve process: each rank gets its slice of every step, and the
// steps are acknowledged once both ranks acknowledged theirs.
func TestServePythonRanks(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("python3 is not installed; .ci/run installs it")
		}
		t.Skip("python3 not installed")
	}
	dir := t.TempDir()
	cfg := writeServeConfig(t, dir, writeTasks(t, dir, 400, 3), filepath.Join(dir, "out"))
	p := startServe(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const world, steps = 2, 3
	outs := make([]bytes.Buffer, world)
	cmds := make([]*exec.Cmd, world)
	for rank := range world {
		cmds[rank] = exec.CommandContext(ctx, py, filepath.Join("..", "..", "examples", "serve", "ddp_loop.py"),
			"--url", p.url, "--steps", fmt.Sprint(steps), "--groups", "4", "--train-seconds", "0.05")
		cmds[rank].Env = append(os.Environ(), fmt.Sprintf("RANK=%d", rank), fmt.Sprintf("WORLD_SIZE=%d", world))
		cmds[rank].Stdout, cmds[rank].Stderr = &outs[rank], &outs[rank]
		if err := cmds[rank].Start(); err != nil {
			t.Fatal(err)
		}
	}
	for rank, cmd := range cmds {
		if err := cmd.Wait(); err != nil || !strings.Contains(outs[rank].String(), fmt.Sprintf("rank %d: ok: %d steps", rank, steps)) {
			t.Fatalf("rank %d: %v\n%s\nserve: %s", rank, err, outs[rank].String(), p.log())
		}
	}
	st, err := client.New(p.url, "").Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Steps.Acked != steps || st.Steps.Made != steps || st.PolicyVersion != steps || st.Paused {
		t.Fatalf("after the ranks: steps %+v, policy v%d, paused %v; want %d steps made and acknowledged", st.Steps, st.PolicyVersion, st.Paused, steps)
	}
}

// TestServeKillServedAgain: a step served again (its first lease ran
// out) and then a kill -9 of serve: the restarted service keeps the new
// lease (recorded before the answer), so the trainer holding the step
// acknowledges it and nobody else gets it meanwhile; a step leased and
// not acknowledged across a kill -9 is served again once its lease runs
// out, never lost; once acknowledged it is never served again, another
// kill -9 included.
func TestServeKillServedAgain(t *testing.T) {
	dir := t.TempDir()
	tasks := writeTasks(t, dir, 400, 5)
	out := filepath.Join(dir, "out")
	cfg := writeServeConfig(t, dir, tasks, out)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const lease = "serve.lease=5s"
	kill := func(p *serveProc) {
		t.Helper()
		if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-p.done
	}
	waitPending := func(c *client.Client) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			st, err := c.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.Steps.Pending == 1 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the lease never ran out: %+v", st.Steps)
			}
		}
	}

	p := startServe(t, cfg, "--set", lease)
	c := client.New(p.url, "")
	first, err := c.Next(ctx, 4, client.FormatParquet)
	if err != nil {
		t.Fatal(err)
	}
	waitPending(c) // its trainer died: the step is to be served again
	again, err := c.Next(ctx, 4, client.FormatParquet)
	if err != nil {
		t.Fatal(err)
	}
	if again.Number != first.Number || !bytes.Equal(again.Body, first.Body) {
		t.Fatalf("served again: step %d, want step %d", again.Number, first.Number)
	}
	kill(p)

	// Restarted: the lease of the serving again stands; a caller gets a
	// new step, not that one.
	p = startServe(t, cfg, "--set", lease)
	c = client.New(p.url, "")
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Steps.Made != 1 || st.Steps.Leased != 1 || st.Steps.Pending != 0 {
		t.Fatalf("restarted within the lease of step %d served again: steps %+v, want it leased", first.Number, st.Steps)
	}
	other, err := c.Next(ctx, 4, client.FormatParquet)
	if err != nil {
		t.Fatal(err)
	}
	if other.Number == first.Number {
		t.Fatalf("step %d, leased to a trainer across the restart, was served to another caller", first.Number)
	}
	// The second step's trainer never acknowledges it; kill -9 again:
	// it is served again once its lease runs out, not lost.
	if err := c.Ack(ctx, first.Number); err != nil {
		t.Fatal(err)
	}
	kill(p)
	p = startServe(t, cfg, "--set", lease)
	c = client.New(p.url, "")
	waitPending(c)
	back, err := c.Next(ctx, 4, client.FormatParquet)
	if err != nil {
		t.Fatal(err)
	}
	if back.Number != other.Number || !bytes.Equal(back.Body, other.Body) {
		t.Fatalf("after kill -9: step %d, want step %d served again", back.Number, other.Number)
	}
	if err := c.Ack(ctx, back.Number); err != nil {
		t.Fatal(err)
	}
	kill(p)
	p = startServe(t, cfg, "--set", lease)
	c = client.New(p.url, "")
	next, err := c.Next(ctx, 4, client.FormatParquet)
	if err != nil {
		t.Fatal(err)
	}
	if next.Number == first.Number || next.Number == other.Number {
		t.Fatalf("acknowledged step %d served again", next.Number)
	}
	seen := map[groupKey]int64{}
	for _, s := range []*client.Step{first, other, next} {
		path := filepath.Join(dir, fmt.Sprintf("step-%d.parquet", s.Number))
		if err := os.WriteFile(path, s.Body, 0o644); err != nil {
			t.Fatal(err)
		}
		rows, _ := readFile(t, path, memory.NewGoAllocator())
		for _, r := range rows {
			g := groupKey{r.Task.Index, r.Attempt}
			if prev, ok := seen[g]; ok && prev != s.Number {
				t.Fatalf("group %v in steps %d and %d", g, prev, s.Number)
			}
			seen[g] = s.Number
		}
	}
	if st, err := c.Status(ctx); err != nil || st.Steps.Made != 3 || st.Steps.Acked != 2 {
		t.Fatalf("at the end: %+v (%v), want 3 made, 2 acknowledged", st, err)
	}
}
