package subprocess

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/envs/internal/stderrlines"
	"github.com/trajflow/trajflow/envs/internal/wire"
	"github.com/trajflow/trajflow/pipeline"
)

// Name is the environment's registry name.
const Name = "subprocess"

// Defaults.
const (
	DefaultWorkers     = 4
	DefaultStepTimeout = 30 * time.Second
	DefaultGrace       = 2 * time.Second
	// MaxLineBytes bounds one response line.
	MaxLineBytes = 64 << 20
)

func init() {
	envs.RegisterSpec(Name, envs.Spec{
		New: func(opts envs.Options) (envs.Env, error) {
			c, err := decode(opts)
			if err != nil {
				return nil, err
			}
			return New(c)
		},
		Validate: func(opts envs.Options) error {
			c, err := decode(opts)
			if err != nil {
				return err
			}
			return c.check()
		},
		// The pool's size and time limits change how fast, not what.
		Operational: []string{"workers", "step_timeout", "shutdown_grace"},
		// Variables handed to the processes often hold keys.
		Secret: []string{"env"},
	})
}

func decode(opts envs.Options) (Config, error) {
	var c Config
	if err := opts.Decode(&c); err != nil {
		return c, err
	}
	c.Section = opts.Section
	return c, nil
}

// Config is the environment's options (the env section's own keys).
type Config struct {
	// Command is the program and its arguments (required), e.g.
	// [python3, env.py]; see docs/external-envs.md.
	Command []string `yaml:"command"`
	// Workers is the number of processes.
	//
	// Default: `4`.
	Workers int `yaml:"workers"`
	// StepTimeout bounds one reset or step call.
	//
	// Default: `30s`.
	StepTimeout pipeline.Duration `yaml:"step_timeout"`
	// Env holds extra environment variables for the processes, added to
	// trajflow's own environment.
	Env map[string]string `yaml:"env"`
	// Dir is the processes' working directory.
	//
	// Default: trajflow's.
	Dir string `yaml:"dir"`
	// ShutdownGrace is how long closing the environment waits for a
	// process to exit after closing its stdin before killing it.
	//
	// Default: `2s`.
	ShutdownGrace pipeline.Duration `yaml:"shutdown_grace"`

	// Section names the config section in errors (default "env").
	Section string `yaml:"-"`
	// Stderr receives the processes' stderr lines (default os.Stderr).
	Stderr io.Writer `yaml:"-"`
}

// Env is a pool of environment processes. It implements envs.Env and
// io.Closer.
type Env struct {
	cfg    Config
	slots  chan *slot
	nextID atomic.Int64
	stderr *stderrlines.Sink

	mu     sync.Mutex
	closed bool
	live   map[*proc]struct{}
	done   chan struct{}
}

var (
	_ envs.Env  = (*Env)(nil)
	_ io.Closer = (*Env)(nil)
)

// ErrClosed is returned by calls after Close.
var ErrClosed = errors.New("subprocess env: closed")

// slot is one worker position in the pool; p is nil until started or after
// its process was killed.
type slot struct {
	id int
	p  *proc
}

// check reports the first problem of c's keys (without starting anything)
// and fills their defaults.
func (c *Config) check() error {
	if c.Section == "" {
		c.Section = "env"
	}
	if len(c.Command) == 0 || c.Command[0] == "" {
		return fmt.Errorf("%s.command: required (e.g. [python3, env.py])", c.Section)
	}
	if c.Workers < 0 {
		return fmt.Errorf("%s.workers: must be positive, got %d", c.Section, c.Workers)
	}
	if c.Workers == 0 {
		c.Workers = DefaultWorkers
	}
	if c.StepTimeout < 0 {
		return fmt.Errorf("%s.step_timeout: must be positive, got %s", c.Section, c.StepTimeout.D())
	}
	if c.StepTimeout == 0 {
		c.StepTimeout = pipeline.Duration(DefaultStepTimeout)
	}
	if c.ShutdownGrace < 0 {
		return fmt.Errorf("%s.shutdown_grace: must not be negative, got %s", c.Section, c.ShutdownGrace.D())
	}
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = pipeline.Duration(DefaultGrace)
	}
	return nil
}

// New validates c, starts the workers and returns the pool.
func New(c Config) (*Env, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	if c.Stderr == nil {
		c.Stderr = os.Stderr
	}
	e := &Env{
		cfg:    c,
		slots:  make(chan *slot, c.Workers),
		stderr: stderrlines.NewSink(c.Stderr),
		live:   map[*proc]struct{}{},
		done:   make(chan struct{}),
	}
	for i := 0; i < c.Workers; i++ {
		s := &slot{id: i}
		p, err := e.start(s.id)
		if err != nil {
			_ = e.Close() // best effort: the environment's shutdown does not touch the output
			return nil, err
		}
		s.p = p
		e.slots <- s
	}
	return e, nil
}

// Reset implements envs.Env.
func (e *Env) Reset(ctx context.Context, r *pipeline.Rollout) (*envs.Reset, error) {
	req, err := wire.NewReset(r)
	if err != nil {
		return nil, fmt.Errorf("subprocess env: reset: %w", err)
	}
	req.Op = "reset"
	resp, err := e.call(ctx, "reset", func(id int64) any { req.ID = id; return req })
	if err != nil {
		return nil, err
	}
	return resp.Reset(), nil
}

// Step implements envs.Env.
func (e *Env) Step(ctx context.Context, r *pipeline.Rollout, action pipeline.Message) (*envs.Step, error) {
	req, err := wire.NewStep(r, action)
	if err != nil {
		return nil, fmt.Errorf("subprocess env: step: %w", err)
	}
	req.Op = "step"
	resp, err := e.call(ctx, "step", func(id int64) any { req.ID = id; return req })
	if err != nil {
		return nil, err
	}
	return resp.Step(r.State), nil
}

// call sends one request to an idle worker and reads its answer.
func (e *Env) call(ctx context.Context, op string, build func(id int64) any) (*wire.Response, error) {
	var s *slot
	select {
	case s = <-e.slots:
	case <-ctx.Done():
		return nil, fmt.Errorf("subprocess env: %s: waiting for a worker: %w", op, ctx.Err())
	case <-e.done:
		return nil, ErrClosed
	}
	defer func() { e.slots <- s }()
	if s.p == nil || s.p.isDead() {
		p, err := e.start(s.id)
		if err != nil {
			return nil, fmt.Errorf("subprocess env: %s: %w", op, err)
		}
		s.p = p
	}
	id := e.nextID.Add(1)
	line, err := json.Marshal(build(id))
	if err != nil {
		return nil, fmt.Errorf("subprocess env: %s: encoding request: %w", op, err)
	}
	resp, err := s.p.roundTrip(ctx, append(line, '\n'), id, e.cfg.StepTimeout.D())
	if err != nil {
		if !errors.Is(err, wire.ErrEnv) {
			e.retire(s.p)
			s.p = nil
			return nil, fmt.Errorf("subprocess env: %s: worker %d: %w; process killed and replaced", op, s.id, err)
		}
		return nil, fmt.Errorf("subprocess env: %s: worker %d: %w", op, s.id, err)
	}
	return resp, nil
}

// start launches the process of worker id.
func (e *Env) start(id int) (*proc, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, ErrClosed
	}
	p, err := startProc(id, e.cfg, e.stderr)
	if err != nil {
		return nil, fmt.Errorf("%s.command: starting worker %d: %w", e.cfg.Section, id, err)
	}
	e.live[p] = struct{}{}
	return p, nil
}

// retire kills p and forgets it.
func (e *Env) retire(p *proc) {
	p.kill()
	e.mu.Lock()
	delete(e.live, p)
	e.mu.Unlock()
}

// Close stops every process: it closes their stdin, waits up to
// shutdown_grace for them to exit, then kills them. Calls in flight fail.
func (e *Env) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	close(e.done)
	procs := make([]*proc, 0, len(e.live))
	for p := range e.live {
		procs = append(procs, p)
	}
	e.live = map[*proc]struct{}{}
	e.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.shutdown(e.cfg.ShutdownGrace.D())
		}()
	}
	wg.Wait()
	return nil
}

// PIDs lists the process ids of the running workers, for diagnostics.
func (e *Env) PIDs() []int {
	e.mu.Lock()
	defer e.mu.Unlock()
	pids := make([]int, 0, len(e.live))
	for p := range e.live {
		pids = append(pids, p.cmd.Process.Pid)
	}
	sort.Ints(pids)
	return pids
}

// proc is one running process.
type proc struct {
	id     int
	cmd    *exec.Cmd
	stdin  *os.File // our write end
	stdout *os.File // our read end
	out    *bufio.Reader
	errw   *stderrlines.Prefixed

	dead     atomic.Bool
	killOnce sync.Once
	waitOnce sync.Once
	waitErr  error
}

func startProc(id int, c Config, stderr *stderrlines.Sink) (*proc, error) {
	cmd := exec.Command(c.Command[0], c.Command[1:]...)
	cmd.Dir = c.Dir
	if len(c.Env) > 0 {
		env := os.Environ()
		keys := make([]string, 0, len(c.Env))
		for k := range c.Env {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			env = append(env, k+"="+c.Env[k])
		}
		cmd.Env = env
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		_ = inR.Close() // best effort: the error above is returned
		_ = inW.Close() // best effort: the error above is returned
		return nil, err
	}
	errw := stderr.Prefixed(fmt.Sprintf("[env worker %d] ", id))
	cmd.Stdin = inR
	cmd.Stdout = outW
	cmd.Stderr = errw
	cmd.WaitDelay = time.Second
	err = cmd.Start()
	_ = inR.Close()  // best effort: the child's ends, held by the child now
	_ = outW.Close() // best effort: the child's ends, held by the child now
	if err != nil {
		_ = inW.Close()  // best effort: the error above is returned
		_ = outR.Close() // best effort: the error above is returned
		return nil, err
	}
	return &proc{id: id, cmd: cmd, stdin: inW, stdout: outR, out: bufio.NewReaderSize(outR, 64<<10), errw: errw}, nil
}

func (p *proc) isDead() bool { return p.dead.Load() }

// roundTrip writes one request line and reads the response with the given
// id, within timeout and ctx. Any error but the environment's own means the
// process can no longer be trusted.
func (p *proc) roundTrip(ctx context.Context, line []byte, id int64, timeout time.Duration) (*wire.Response, error) {
	deadline := time.Now().Add(timeout)
	_ = p.stdin.SetWriteDeadline(deadline) // best effort: a pipe without deadlines fails the exchange itself
	_ = p.stdout.SetReadDeadline(deadline) // best effort: a pipe without deadlines fails the exchange itself
	stop := context.AfterFunc(ctx, func() {
		_ = p.stdin.SetWriteDeadline(time.Unix(1, 0)) // best effort: a pipe without deadlines fails the exchange itself
		_ = p.stdout.SetReadDeadline(time.Unix(1, 0)) // best effort: a pipe without deadlines fails the exchange itself
	})
	defer stop()
	fail := func(what string, err error) error {
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w", what, ctx.Err())
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("%s: no answer within step_timeout %s", what, timeout)
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("%s: %v; process exited (%s)", what, err, p.exitStatus())
		}
		if errors.Is(err, io.EOF) || errors.Is(err, os.ErrClosed) || isBrokenPipe(err) {
			return fmt.Errorf("%s: process exited (%s)", what, p.exitStatus())
		}
		return fmt.Errorf("%s: %w", what, err)
	}
	if _, err := p.stdin.Write(line); err != nil {
		return nil, fail(fmt.Sprintf("writing request %d", id), err)
	}
	for {
		b, err := readLine(p.out, MaxLineBytes)
		if err != nil {
			return nil, fail(fmt.Sprintf("reading response %d", id), err)
		}
		if len(bytes.TrimSpace(b)) == 0 {
			continue // blank lines are ignored
		}
		return DecodeLine(b, id)
	}
}

// DecodeLine decodes one response line and checks that it answers request
// id. An error the environment reported ({"error": ...}) wraps
// wire.ErrEnv; any other error means the line is not a valid answer.
func DecodeLine(line []byte, id int64) (*wire.Response, error) {
	resp, err := wire.Decode(line)
	if err != nil {
		return nil, fmt.Errorf("bad response line %s: %w", snippet(line), err)
	}
	if resp.ID == nil {
		return nil, fmt.Errorf("bad response line %s: no id (want %d)", snippet(line), id)
	}
	if *resp.ID != id {
		return nil, fmt.Errorf("bad response line %s: id %d answers another request (want %d)", snippet(line), *resp.ID, id)
	}
	if err := resp.Err(); err != nil {
		return nil, err
	}
	return resp, nil
}

// readLine reads one '\n'-terminated line (without it) of at most max bytes.
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var buf []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(buf)+len(chunk) > max+1 {
			return nil, fmt.Errorf("response line longer than %d bytes", max)
		}
		buf = append(buf, chunk...)
		switch {
		case err == nil:
			return bytes.TrimRight(buf, "\r\n"), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(buf) > 0:
			return nil, fmt.Errorf("unterminated response line %s: %w", snippet(buf), io.ErrUnexpectedEOF)
		default:
			return nil, err
		}
	}
}

func snippet(b []byte) string {
	const n = 120
	if len(b) > n {
		return fmt.Sprintf("%q...", b[:n])
	}
	return fmt.Sprintf("%q", b)
}

// exitStatus waits briefly for an exited process and describes how it ended.
func (p *proc) exitStatus() string {
	done := make(chan struct{})
	go func() { p.wait(); close(done) }()
	select {
	case <-done:
		if p.waitErr == nil {
			return "exit status 0"
		}
		return p.waitErr.Error()
	case <-time.After(time.Second):
		return "stdout closed"
	}
}

// wait reaps the process once.
func (p *proc) wait() {
	p.waitOnce.Do(func() {
		p.waitErr = p.cmd.Wait()
		p.errw.Flush()
	})
}

// kill kills the process, reaps it and closes our pipe ends.
func (p *proc) kill() {
	p.killOnce.Do(func() {
		p.dead.Store(true)
		_ = p.cmd.Process.Kill() // best effort: the worker may have exited
		p.wait()
		_ = p.stdin.Close()  // best effort: the environment's shutdown does not touch the output
		_ = p.stdout.Close() // best effort: the environment's shutdown does not touch the output
	})
}

// shutdown closes stdin (a well-behaved process exits at end of input),
// waits up to grace, then kills.
func (p *proc) shutdown(grace time.Duration) {
	_ = p.stdin.Close() // best effort: the environment's shutdown does not touch the output
	done := make(chan struct{})
	go func() { p.wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
	}
	p.kill()
	<-done
}
