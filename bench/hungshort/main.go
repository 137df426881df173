// Command hungshort measures what one hung endpoint costs a short run:
// `trajflow run` (a child process) against `trajflow sim-server` alone,
// then against the sim-server and a server that answers GET /models (the
// preflight; a hung engine still lists its models) and holds every other
// request without answering until the client hangs up. The workload is
// internal/e2e TestSilentEndpointRun's: 150 math tasks × n=4, the
// sim-server at --time-scale 0.05, generate.concurrency 32,
// generate.timeout 5m, the silence watch at its defaults (-silence-after
// sets generate.silence_after). The two runs alternate over -rounds.
//
//	go run ./bench/hungshort              # 2 rounds, seconds
//	go run ./bench/hungshort -rounds 3 -silence-after 1s
//
// Each row is one run: its wall time (the child process's whole life),
// the attempts moved off the hung endpoint and the canaries sent to each
// endpoint (metrics.json last_run.endpoints), and whether the run's log
// named the hung endpoint; then the ratio of each round's hung run to
// its healthy one. BENCHMARKS.md, "A hung endpoint in a short run".
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/trajflow/trajflow/bench/internal/harness"
	_ "github.com/trajflow/trajflow/envs/builtin" // the math environment
	"github.com/trajflow/trajflow/schema"
)

func main() { harness.Main(run) }

const configYAML = `run: {id: hungshort, progress: 0}
source: {path: %q}
prompt: {system: "You are a careful mathematician.", user: "Solve: {question}"}
repeat: {n: %d, seed: 1234}
generate:
  endpoints: [%s]
  model: sim-math
  params: {temperature: 1.0, max_tokens: 256}
  concurrency: %d
  timeout: 5m
env: {name: math, answer_field: expected_answer}
output: {dir: %q}
`

// Run is one `trajflow run`.
type Run struct {
	Round int     `json:"round"`
	Hung  bool    `json:"hung"`
	WallS float64 `json:"wall_s"`
	// Moved are the attempts moved off the hung endpoint; Canaries the
	// canaries sent to the healthy and to the hung endpoint.
	Moved          int64    `json:"moved"`
	HealthyCanary  int64    `json:"canaries_healthy"`
	HungCanary     int64    `json:"canaries_hung"`
	HungNamed      bool     `json:"hung_named"`
	Rows           int64    `json:"rows_ok"`
	SilentLogLines []string `json:"silent_log,omitempty"`
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("hungshort", flag.ContinueOnError)
	fs.SetOutput(stderr)
	tasks := fs.Int("tasks", 150, "tasks")
	n := fs.Int("n", 4, "rollouts per task")
	rounds := fs.Int("rounds", 2, "rounds (a healthy run, then a hung one)")
	scale := fs.Float64("time-scale", 0.05, "the sim-server's --time-scale")
	conc := fs.Int("concurrency", 32, "generate.concurrency")
	silence := fs.String("silence-after", "", "generate.silence_after (empty: the default)")
	jsonOut := fs.String("json", "", "write the runs as JSON to this file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := measure(ctx, stdout, *tasks, *n, *rounds, *scale, *conc, *silence, *jsonOut); err != nil {
		fmt.Fprintln(stderr, "hungshort:", err)
		return 1
	}
	return 0
}

func measure(ctx context.Context, stdout io.Writer, tasks, n, rounds int, scale float64, conc int, silence, jsonOut string) error {
	dir, err := os.MkdirTemp("", "hungshort-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }() // best effort: a temporary directory, not output
	taskFile := filepath.Join(dir, "tasks.jsonl")
	if err := harness.WriteTasks(taskFile, tasks); err != nil {
		return err
	}
	sim, err := harness.StartSimChild(ctx, "--model", "sim-math", "--seed", "7", "--accuracy", "0.6", "--time-scale", fmt.Sprint(scale))
	if err != nil {
		return err
	}
	defer sim.Close()
	done := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			_, _ = io.WriteString(w, `{"data":[{"id":"sim-math"}]}`)
			return
		}
		select {
		case <-done:
		case <-r.Context().Done():
		}
	}))
	defer hung.Close()
	defer close(done)
	hungURL := hung.URL + "/v1"
	var runs []Run
	for round := range rounds {
		for _, withHung := range []bool{false, true} {
			eps := fmt.Sprintf("%q", sim.URL)
			if withHung {
				eps += fmt.Sprintf(", %q", hungURL)
			}
			out := filepath.Join(dir, fmt.Sprintf("out-%d-%v", round, withHung))
			cfg := filepath.Join(dir, fmt.Sprintf("config-%d-%v.yaml", round, withHung))
			if err := os.WriteFile(cfg, fmt.Appendf(nil, configYAML, taskFile, n, eps, conc, out), 0o644); err != nil {
				return err
			}
			var sets []string
			if silence != "" {
				sets = append(sets, "generate.silence_after="+silence)
			}
			cr, err := harness.RunChild(ctx, cfg, sets...)
			if err != nil {
				return err
			}
			r := Run{Round: round + 1, Hung: withHung, WallS: cr.Wall.Seconds()}
			for _, l := range strings.Split(cr.Stderr, "\n") {
				if strings.Contains(l, "taken out (silent") {
					r.SilentLogLines = append(r.SilentLogLines, l)
					r.HungNamed = r.HungNamed || strings.Contains(l, hungURL)
				}
			}
			if err := readMetrics(filepath.Join(out, schema.MetricsFile), hungURL, &r); err != nil {
				return err
			}
			runs = append(runs, r)
		}
	}
	fmt.Fprintf(stdout, "%d tasks × n=%d, sim-server --time-scale %g, generate.concurrency %d, silence_after %q\n\n", tasks, n, scale, conc, silence)
	fmt.Fprintln(stdout, "| round | hung | wall s | rows ok | moved | canaries healthy / hung | log named hung |")
	fmt.Fprintln(stdout, "|---:|---|---:|---:|---:|---|---|")
	for _, r := range runs {
		fmt.Fprintf(stdout, "| %d | %v | %.2f | %d | %d | %d / %d | %v |\n", r.Round, r.Hung, r.WallS, r.Rows, r.Moved, r.HealthyCanary, r.HungCanary, r.HungNamed)
	}
	fmt.Fprintln(stdout)
	for i := 0; i+1 < len(runs); i += 2 {
		fmt.Fprintf(stdout, "round %d: one hung ÷ healthy alone = %.2f\n", runs[i].Round, runs[i+1].WallS/runs[i].WallS)
	}
	for _, r := range runs {
		for _, l := range r.SilentLogLines {
			fmt.Fprintf(stdout, "round %d: %s\n", r.Round, l)
		}
	}
	if jsonOut != "" {
		b, err := json.MarshalIndent(runs, "", "  ")
		if err != nil {
			return err
		}
		return os.WriteFile(jsonOut, b, 0o644)
	}
	return nil
}

// readMetrics fills r's rows (status ok), moved and canaries from a run's
// metrics.json.
func readMetrics(path, hungURL string, r *Run) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var m struct {
		Status  map[string]int64 `json:"status"`
		LastRun struct {
			Endpoints []struct {
				Endpoint        string
				Moved, Canaries int64
			} `json:"endpoints"`
		} `json:"last_run"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	r.Rows = m.Status["ok"]
	for _, e := range m.LastRun.Endpoints {
		if e.Endpoint == hungURL {
			r.Moved, r.HungCanary = e.Moved, e.Canaries
		} else {
			r.HealthyCanary = e.Canaries
		}
	}
	return nil
}
