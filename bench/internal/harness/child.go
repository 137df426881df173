package harness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/trajflow/trajflow/cmd/trajflow/cli"
)

// ChildEnv marks a benchmark binary re-executed as trajflow's own command
// line: with it set, MaybeChild runs cli.Main on the arguments and exits.
// The child is thus trajflow itself (`trajflow run …`, `trajflow
// sim-server …`) in a separate process, without building another binary.
const ChildEnv = "TRAJFLOW_BENCH_CHILD"

// ProfileEnv, when set to a folder, has the benchmark and every child
// write a CPU profile of its whole life to FOLDER/bench-PID.pprof and
// FOLDER/child-PID.pprof (go tool pprof reads them with the benchmark
// binary): where each process's time goes (the in-process simulator's in
// the benchmark's).
const ProfileEnv = "TRAJFLOW_BENCH_CPUPROFILE"

// profile starts the CPU profile ProfileEnv asks for, as FOLDER/NAME-PID.pprof;
// the function it returns stops it.
func profile(name string) (stop func()) {
	dir := os.Getenv(ProfileEnv)
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.pprof", name, os.Getpid())))
	if err == nil && pprof.StartCPUProfile(f) == nil {
		return func() { pprof.StopCPUProfile(); _ = f.Close() }
	}
	fmt.Fprintf(os.Stderr, "%s: no CPU profile: %v\n", ProfileEnv, err)
	return func() {}
}

// MaybeChild runs trajflow's command line and exits when this process was
// started as a child by Child; otherwise it returns.
func MaybeChild() {
	if os.Getenv(ChildEnv) != "1" {
		return
	}
	stop := profile("child")
	code := cli.Main(os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Child is `trajflow ARGS…` in a child process (this executable
// re-executed with ChildEnv).
func Child(ctx context.Context, args ...string) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, self, args...)
	cmd.Env = append(os.Environ(), ChildEnv+"=1")
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	return cmd, nil
}

// SimChild is `trajflow sim-server` running as a child process.
type SimChild struct {
	URL string
	cmd *exec.Cmd
}

// StartSimChild starts `trajflow sim-server --addr 127.0.0.1:0 ARGS…` and
// waits for its listening line.
func StartSimChild(ctx context.Context, args ...string) (*SimChild, error) {
	cmd, err := Child(ctx, append([]string{"sim-server", "--addr", "127.0.0.1:0"}, args...)...)
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	lines := bufio.NewScanner(out)
	for lines.Scan() {
		if _, url, ok := strings.Cut(lines.Text(), "listening on "); ok {
			go func() { _, _ = io.Copy(io.Discard, out) }()
			return &SimChild{URL: strings.TrimSpace(url), cmd: cmd}, nil
		}
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	return nil, errors.New("sim-server child exited before listening")
}

// Close stops the server (SIGTERM) and waits for it.
func (s *SimChild) Close() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	_ = s.cmd.Wait()
}

// ChildRun is how a `trajflow run` child process went.
type ChildRun struct {
	Wall time.Duration
	// CPU is the child's user + system time; MaxRSS its peak resident set
	// (getrusage of the child, ru_maxrss).
	CPU time.Duration
	// User and Sys are the two parts of CPU.
	User, Sys time.Duration
	MaxRSS    int64 // bytes
	Stdout    string
	// Stderr is the child's standard error: its log (endpoint health
	// changes among it).
	Stderr string
}

// RunChild runs `trajflow run CONFIG --quiet SETS…` as a child process and
// reports its resources.
func RunChild(ctx context.Context, config string, sets ...string) (ChildRun, error) {
	args := []string{"run", config, "--quiet"}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	cmd, err := Child(ctx, args...)
	if err != nil {
		return ChildRun{}, err
	}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err = cmd.Run()
	res := ChildRun{Wall: time.Since(start), Stdout: stdout.String(), Stderr: stderr.String()}
	if ps := cmd.ProcessState; ps != nil {
		if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
			res.User, res.Sys = time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
			res.CPU = res.User + res.Sys
			res.MaxRSS = ru.Maxrss * 1024 // kilobytes on Linux
		}
	}
	if err != nil {
		return res, fmt.Errorf("trajflow run: %w\n%s", err, stderr.String())
	}
	return res, nil
}

// Main is a bench command's main: it serves as the trajflow child when
// started as one (see MaybeChild), else runs run with a context cancelled
// on interrupt, and exits with its code.
func Main(run RunFunc) {
	MaybeChild()
	stopProfile := profile("bench")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	stopProfile()
	os.Exit(code)
}
