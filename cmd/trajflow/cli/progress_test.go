package cli_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/creack/pty"

	"github.com/trajflow/trajflow/cmd/trajflow/cli"
	"github.com/trajflow/trajflow/inference/sim"
)

// On a terminal, `trajflow run` draws the live view: tasks read, rollouts
// done and in flight (generation and environment), kept groups and the
// keep rate, errors, tokens/s, rollouts/s and an ETA.
func TestLiveViewOnATerminal(t *testing.T) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	defer ptmx.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 40, Cols: 160}); err != nil {
		t.Fatal(err)
	}
	var screen bytes.Buffer
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		io.Copy(&screen, ptmx) // until the terminal closes
	}()

	root, _ := filepath.Abs("../../..")
	t.Chdir(root)
	var stdout bytes.Buffer
	code := cli.Main([]string{"run", "examples/quickstart/config.yaml",
		"--set", "output.dir=" + t.TempDir(), "--set", "source.limit=80", "--set", "run.progress=100ms",
		"--set", "groups.target=15", "--set", "groups.keep=nonzero_std", "--set", "groups.max_attempts=3",
		"--set", "generate.sim.time_scale=0.3", "--set", "generate.concurrency=8"}, &stdout, tty)
	tty.Close()
	wg.Wait()
	if code != cli.ExitOK && code != cli.ExitShortOfData {
		t.Fatalf("exit %d\n%s\n%s", code, &stdout, &screen)
	}
	text := regexp.MustCompile(`\x1b\[[0-9;?]*[A-Za-z]`).ReplaceAllString(screen.String(), "")
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`tasks +\d+ read / 80`),
		regexp.MustCompile(`ETA (\d|-)`),
		regexp.MustCompile(`rollouts +\d+ done, \d+ in flight \(gen \d+, env \d+\)`),
		regexp.MustCompile(`groups +kept \d+/15 of \d+ finished, keep rate \d\.\d\d`),
		regexp.MustCompile(`errors +\d+`),
		regexp.MustCompile(`tokens/s \d+`),
		regexp.MustCompile(`rollouts/s \d+\.\d`),
	} {
		if !want.MatchString(text) {
			t.Errorf("the terminal shows no %q:\n%s", want, text)
		}
	}
	if testing.Verbose() {
		t.Log(text[max(0, len(text)-1500):])
	}
	if strings.Contains(text, "trajflow: ") && strings.Contains(text, "rollouts done") {
		t.Errorf("the plain progress line was printed on a terminal:\n%s", text)
	}
}

// The live view never shows a URL's user name (a token given as the user
// name is the whole secret); a terminal that reports its size as 0×0 gets
// the plain progress line.
func TestLiveViewRedactsAndDrawsOnAnySize(t *testing.T) {
	s := sim.New(sim.Options{Seed: 3, Preset: "short", Accuracy: 0.5, Model: "sim-math", TimeScale: 0.3})
	defer s.Close()
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	const token = "sk-live-view-token-93d1"
	endpoint := strings.Replace(srv.URL, "http://", "http://"+token+"@", 1) + "/v1"
	root, _ := filepath.Abs("../../..")
	t.Chdir(root)
	for _, size := range []pty.Winsize{{Rows: 40, Cols: 160}, {Rows: 0, Cols: 0}} {
		t.Run(fmt.Sprintf("%dx%d", size.Cols, size.Rows), func(t *testing.T) {
			ptmx, tty, err := pty.Open()
			if err != nil {
				t.Skipf("no pseudo-terminal: %v", err)
			}
			defer ptmx.Close()
			if err := pty.Setsize(ptmx, &size); err != nil {
				t.Fatal(err)
			}
			var screen bytes.Buffer
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				io.Copy(&screen, ptmx)
			}()
			var stdout bytes.Buffer
			code := cli.Main([]string{"run", "examples/quickstart/config.yaml",
				"--set", "output.dir=" + t.TempDir(), "--set", "source.limit=40", "--set", "run.progress=100ms",
				"--set", "generate.endpoints=[" + endpoint + "]", "--set", "generate.concurrency=4"}, &stdout, tty)
			tty.Close()
			wg.Wait()
			if code != cli.ExitOK {
				t.Fatalf("exit %d\n%s\n%s", code, &stdout, &screen)
			}
			text := regexp.MustCompile(`\x1b\[[0-9;?]*[A-Za-z]`).ReplaceAllString(screen.String(), "")
			if strings.Contains(text+stdout.String(), token) {
				t.Fatalf("the URL's user name is shown:\n%s", text)
			}
			want := []string{"endpoint  http://[REDACTED]@127.0.0.1", "rollouts"}
			if size.Cols == 0 {
				// No size to draw the view in: the plain progress line.
				want = []string{"trajflow: ", "rollouts done"}
			}
			for _, want := range want {
				if !strings.Contains(text, want) {
					t.Errorf("the terminal shows no %q:\n%s", want, text)
				}
			}
		})
	}
}
