// Command longanswers measures the peak resident memory of a `trajflow
// run` child process (ru_maxrss) against a server whose every answer is a
// completion of a fixed, large size: what a run holds for long answers is
// bounded by the group, the record and the response limits, not by luck.
//
//	go run ./bench/longanswers                        # 20, 150 and 200 MiB answers
//	go run ./bench/longanswers -cases 20:12:3         # MiB:n:tasks
//
// A case's group of n answers over 2 GiB of text fails as too_large (exit
// 4, its rows in errors/ with their texts cut); the others commit.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/trajflow/trajflow/bench/internal/harness"
	_ "github.com/trajflow/trajflow/envs/builtin" // the math environment
)

func main() { harness.Main(run) }

const configYAML = `source: {path: %q, limit: %d}
prompt: {user: "{question}"}
repeat: {n: %d, seed: 1}
generate:
  endpoints: [%q]
  model: long
  concurrency: %d
  timeout: 600
env: {name: math, answer_field: expected_answer}
groups: {keep: all}
output: {dir: %q}
`

// longCase is one measurement: answers of MiB each, groups of n, tasks groups.
type longCase struct{ mib, n, tasks int }

func parseCases(s string) ([]longCase, error) {
	var out []longCase
	for _, c := range strings.Split(s, ",") {
		f := strings.Split(c, ":")
		if len(f) != 3 {
			return nil, fmt.Errorf("case %q: want MiB:n:tasks", c)
		}
		var v [3]int
		for i := range f {
			n, err := strconv.Atoi(f[i])
			if err != nil || n < 1 {
				return nil, fmt.Errorf("case %q: %q is not a positive integer", c, f[i])
			}
			v[i] = n
		}
		out = append(out, longCase{v[0], v[1], v[2]})
	}
	return out, nil
}

// serve answers every completion with content of size bytes.
func serve(size int) (url string, stop func(), err error) {
	body, err := json.Marshal(map[string]any{
		"choices": []any{map[string]any{"message": map[string]any{"role": "assistant", "content": strings.Repeat("x", size)}, "finish_reason": "length"}},
		"usage":   map[string]any{"prompt_tokens": 60, "completion_tokens": size / 4},
	})
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"long"}]}`) // best effort: the client retries
			return
		}
		_, _ = io.Copy(io.Discard, r.Body) // best effort: the request is not used
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body) // best effort: a client gone is the run's to report
	})}
	go func() {
		_ = srv.Serve(ln) // best effort: ends with Close
	}()
	stop = func() {
		_ = srv.Close() // best effort: a bench server
	}
	return "http://" + ln.Addr().String() + "/v1", stop, nil
}

var (
	rowsRe   = regexp.MustCompile(`rows written: (\d+)`)
	errorsRe = regexp.MustCompile(`errors by class: (\S+)`)
)

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("longanswers", flag.ContinueOnError)
	fs.SetOutput(stderr)
	casesFlag := fs.String("cases", "20:12:3,150:12:1,200:12:2", "comma-separated MiB:n:tasks (answer size, group size, groups)")
	conc := fs.Int("concurrency", 12, "generate.concurrency")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cases, err := parseCases(*casesFlag)
	if err != nil {
		fmt.Fprintln(stderr, "longanswers:", err)
		return 2
	}
	dir, err := os.MkdirTemp("", "trajflow-bench-long-")
	if err != nil {
		fmt.Fprintln(stderr, "longanswers:", err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }() // best effort: a temporary directory, not output
	tasks := filepath.Join(dir, "tasks.jsonl")
	if err := harness.WriteTasks(tasks, 64); err != nil {
		fmt.Fprintln(stderr, "longanswers:", err)
		return 1
	}
	fmt.Fprintf(stdout, "trajflow run child process, generate.concurrency %d, every answer of a fixed size\n\n", *conc)
	fmt.Fprintln(stdout, "| answer MiB | groups × n | exit | rows written | errors | wall s | peak RSS MiB |")
	fmt.Fprintln(stdout, "|---:|---:|---:|---:|---|---:|---:|")
	for i, c := range cases {
		url, stop, err := serve(c.mib << 20)
		if err != nil {
			fmt.Fprintln(stderr, "longanswers:", err)
			return 1
		}
		out := filepath.Join(dir, fmt.Sprint("out-", i))
		cfg := filepath.Join(dir, fmt.Sprint("config-", i, ".yaml"))
		if err := os.WriteFile(cfg, fmt.Appendf(nil, configYAML, tasks, c.tasks, c.n, url, *conc, out), 0o644); err != nil {
			stop()
			fmt.Fprintln(stderr, "longanswers:", err)
			return 1
		}
		fmt.Fprintf(stderr, "longanswers: %d MiB answers, %d × %d ...\n", c.mib, c.tasks, c.n)
		cr, err := harness.RunChild(ctx, cfg)
		stop()
		code := 0
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			code = ee.ExitCode()
			if code != 4 { // 4: the rollouts failed (too_large), the expected end of an over-large group
				fmt.Fprintln(stderr, "longanswers:", err)
			}
		case err != nil:
			fmt.Fprintln(stderr, "longanswers:", err)
			return 1
		}
		rows, errs := "?", "none"
		if m := rowsRe.FindStringSubmatch(cr.Stdout); m != nil {
			rows = m[1]
		}
		if m := errorsRe.FindStringSubmatch(cr.Stdout); m != nil {
			errs = m[1]
		}
		fmt.Fprintf(stdout, "| %d | %d × %d | %d | %s | %s | %.1f | %.0f |\n", c.mib, c.tasks, c.n, code, rows, errs, cr.Wall.Seconds(), harness.MiB(cr.MaxRSS))
		_ = os.RemoveAll(out) // best effort: the next case's disk
	}
	return 0
}
