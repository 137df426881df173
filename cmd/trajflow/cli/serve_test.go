package cli_test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/trajflow/trajflow/cmd/trajflow/cli"
	"github.com/trajflow/trajflow/serve/client"
)

// Bad serve command lines and configs exit 2 naming the flag or key, and
// create nothing.
func TestServeBadInput(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(root)
	out := filepath.Join(t.TempDir(), "out")
	base := []string{"serve", "examples/serve/serve.yaml", "--set", "output.dir=" + out}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no config", []string{"serve"}, "Usage: trajflow serve"},
		{"--addr without a value", append(base, "--addr"), "--addr needs HOST:PORT"},
		{"unknown flag", append(base, "--port", "1"), "unknown flag --port"},
		{"open address, no token", append(base, "--addr", "0.0.0.0:0"), "serve.token_env: required"},
		{"token variable unset", append(base, "--addr", "0.0.0.0:0", "--set", "serve.token_env=TRAJFLOW_TEST_UNSET_TOKEN"), "TRAJFLOW_TEST_UNSET_TOKEN is unset or empty"},
		{"bad addr", append(base, "--addr", "nowhere"), "serve.addr"},
		{"negative lease", append(base, "--set", "serve.lease=-1s"), "serve.lease"},
		{"bad pause mode", append(base, "--set", "serve.pause_mode=later"), "serve.pause_mode"},
		{"a target", append(base, "--set", "groups.target=8"), "groups.target"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := cli.Main(tc.args, &stdout, &stderr)
			if code != cli.ExitUsage || !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, stderr.String(), tc.want)
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Fatalf("the refused serve created %s", out)
			}
		})
	}
}

// An input line over source.max_line_bytes stops serve with exit 2, as it
// stops run: the message names the file, the line and the keys to change.
func TestServeLineTooLong(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(root)
	dir := t.TempDir()
	tasks := filepath.Join(dir, "tasks.jsonl")
	long := `{"question": "` + strings.Repeat("9", 4096) + `", "expected_answer": "1"}` + "\n"
	if err := os.WriteFile(tasks, []byte(long), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"serve", "examples/serve/serve.yaml", "--addr", "127.0.0.1:0", "--set", "output.dir=" + filepath.Join(dir, "out"),
		"--set", "source.path=" + tasks, "--set", "source.max_line_bytes=1024", "--set", "generate.sim.time_scale=0"}
	var stdout bytes.Buffer
	stderr := &syncBuffer{}
	done := make(chan int, 1)
	go func() { done <- cli.Main(args, &stdout, stderr) }()
	// The service reads the input once a trainer asks for a step.
	go func() {
		for range 200 {
			if m := regexp.MustCompile(`serving on (http://\S+)`).FindStringSubmatch(stderr.String()); m != nil {
				if resp, err := http.Get(m[1] + "/v1/steps/next?groups=1"); err == nil {
					resp.Body.Close()
				}
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	select {
	case code := <-done:
		msg := stderr.String()
		if code != cli.ExitUsage || !strings.Contains(msg, "tasks.jsonl:1") || !strings.Contains(msg, "raise source.max_line_bytes") {
			t.Fatalf("exit %d, stderr:\n%s", code, msg)
		}
	case <-time.After(time.Minute):
		t.Fatalf("serve did not stop on the long line within a minute; stderr:\n%s", stderr.String())
	}
}

// On a terminal, trajflow serve draws the run's live view and a line of
// the service's; SIGINT stops it with exit 130.
func TestServeLiveView(t *testing.T) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	defer ptmx.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 40, Cols: 200}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var screen bytes.Buffer
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			mu.Lock()
			screen.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	text := func() string {
		mu.Lock()
		defer mu.Unlock()
		return regexp.MustCompile(`\x1b\[[0-9;?]*[A-Za-z]`).ReplaceAllString(screen.String(), "")
	}
	root, _ := filepath.Abs("../../..")
	t.Chdir(root)
	code := make(chan int, 1)
	go func() {
		var stdout bytes.Buffer
		code <- cli.Main([]string{"serve", "examples/serve/serve.yaml", "--addr", "127.0.0.1:0",
			"--set", "output.dir=" + t.TempDir(), "--set", "run.progress=100ms"}, &stdout, tty)
	}()
	addr := regexp.MustCompile(`serving on (http://[0-9.:]+)`)
	var url string
	for deadline := time.Now().Add(30 * time.Second); url == ""; time.Sleep(20 * time.Millisecond) {
		if m := addr.FindStringSubmatch(text()); m != nil {
			url = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("serve did not start:\n%s", text())
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := client.New(url, "").Next(ctx, 2, client.FormatJSONL); err != nil {
		t.Fatal(err)
	}
	want := regexp.MustCompile(`serve +steps 1 made, 0 acked, 1 leased, 0 to serve again; \d+ groups queued, 0 waiting; policy v0`)
	for deadline := time.Now().Add(10 * time.Second); !want.MatchString(text()); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the terminal shows no %q:\n%s", want, text())
		}
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-code:
		if c != cli.ExitInterrupted {
			t.Fatalf("exit %d after SIGINT:\n%s", c, text())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop on SIGINT")
	}
	tty.Close()
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`rollouts +\d+ done`),
		regexp.MustCompile(`groups +kept \d+`),
	} {
		if !want.MatchString(text()) {
			t.Errorf("the terminal shows no %q:\n%s", want, text())
		}
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
