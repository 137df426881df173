// Command memory measures the peak resident memory of a `trajflow run`
// child process (getrusage of the child: ru_maxrss) over a small and a
// large number of tasks against an instant simulated server over HTTP: a
// streaming pipeline's memory must not grow with its input.
//
//	go run ./bench/memory                  # 10k and 1M tasks
//	go run ./bench/memory -large 200000    # a shorter large run
//	go run ./bench/memory -quick           # smoke run
//	go run ./bench/memory -trace DIR       # also RSS over time, GC trace
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/trajflow/trajflow/bench/internal/harness"
	"github.com/trajflow/trajflow/inference/sim"
)

func main() { harness.Main(run) }

// Result is one child run.
type Result struct {
	Tasks     int     `json:"tasks"`
	Rollouts  int     `json:"rollouts"`
	WallS     float64 `json:"wall_s"`
	CPUS      float64 `json:"cpu_s"`
	MaxRSSMiB float64 `json:"max_rss_mib"`
	PerSec    float64 `json:"rollouts_per_s"`
}

const configYAML = `source: {path: %q}
prompt: {user: "{question}"}
repeat: {n: %d, seed: 1000}
generate:
  endpoints: [%q]
  model: sim
  concurrency: %d
  params: {return_token_ids: true, max_tokens: %d}
env: {name: sim, concurrency: %d}
groups: {keep: all}
output: {dir: %q}
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("memory", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quick := fs.Bool("quick", false, "smoke run: 1k and 10k tasks")
	small := fs.Int("small", 10_000, "tasks of the small run")
	large := fs.Int("large", 1_000_000, "tasks of the large run")
	n := fs.Int("n", 1, "rollouts per task")
	conc := fs.Int("concurrency", 64, "generate.concurrency and env.concurrency")
	maxTokens := fs.Int("max-tokens", 32, "max_tokens of every request")
	jsonPath := fs.String("json", "", "also write the results as JSON to this file")
	traceDir := fs.String("trace", "", "write each child's VmRSS over time (rss-TASKS.csv) and stderr (stderr-TASKS.log) to this directory")
	traceEvery := fs.Duration("trace-every", 100*time.Millisecond, "VmRSS sampling interval of -trace")
	gctrace := fs.Bool("gctrace", false, "with -trace: run the child with GODEBUG=gctrace=1")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *quick {
		*small, *large = 1_000, 10_000
	}
	dir, err := os.MkdirTemp("", "trajflow-bench-memory-")
	if err != nil {
		fmt.Fprintln(stderr, "memory:", err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }() // best effort: a temporary directory, not output

	srv, err := harness.StartSim(sim.Options{Seed: 7, Preset: "short", Keep: -1})
	if err != nil {
		fmt.Fprintln(stderr, "memory:", err)
		return 1
	}
	defer srv.Close()
	tasksPath := filepath.Join(dir, "tasks.jsonl")
	if err := harness.WriteTasks(tasksPath, max(*small, *large)); err != nil {
		fmt.Fprintln(stderr, "memory:", err)
		return 1
	}
	var res []Result
	for _, k := range []int{*small, *large} {
		out := filepath.Join(dir, fmt.Sprintf("out-%d", k))
		cfgPath := filepath.Join(dir, fmt.Sprintf("config-%d.yaml", k))
		cfg := fmt.Sprintf(configYAML, tasksPath, *n, srv.URL, *conc, *maxTokens, *conc, out)
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
			fmt.Fprintln(stderr, "memory:", err)
			return 1
		}
		fmt.Fprintf(stderr, "memory: %d tasks ...\n", k)
		var cr harness.ChildRun
		if *traceDir != "" {
			if err := os.MkdirAll(*traceDir, 0o755); err != nil {
				fmt.Fprintln(stderr, "memory:", err)
				return 1
			}
			cr, err = traceChild(ctx, *traceDir, fmt.Sprint(k), *traceEvery, *gctrace, cfgPath, fmt.Sprintf("source.limit=%d", k))
		} else {
			cr, err = harness.RunChild(ctx, cfgPath, fmt.Sprintf("source.limit=%d", k))
		}
		if err != nil {
			fmt.Fprintln(stderr, "memory:", err)
			return 1
		}
		if want := fmt.Sprintf("rows written: %d,", k**n); !strings.Contains(cr.Stdout, want) {
			fmt.Fprintf(stderr, "memory: the run did not write %d rows:\n%s", k**n, cr.Stdout)
			return 1
		}
		res = append(res, Result{Tasks: k, Rollouts: k * *n, WallS: cr.Wall.Seconds(), CPUS: cr.CPU.Seconds(),
			MaxRSSMiB: harness.MiB(cr.MaxRSS), PerSec: float64(k**n) / cr.Wall.Seconds()})
		_ = os.RemoveAll(out)
	}
	fmt.Fprintf(stdout, "trajflow run child process, n=%d, max_tokens %d, generate/env concurrency %d, instant sim over HTTP\n\n", *n, *maxTokens, *conc)
	fmt.Fprintln(stdout, "| tasks | rollouts | wall s | child CPU s | rollouts/s | peak RSS MiB |")
	fmt.Fprintln(stdout, "|---:|---:|---:|---:|---:|---:|")
	for _, r := range res {
		fmt.Fprintf(stdout, "| %d | %d | %.1f | %.1f | %.0f | %.1f |\n", r.Tasks, r.Rollouts, r.WallS, r.CPUS, r.PerSec, r.MaxRSSMiB)
	}
	ratio := res[1].MaxRSSMiB / res[0].MaxRSSMiB
	fmt.Fprintf(stdout, "\npeak RSS ratio %d/%d tasks: %.3f (goal ≤ 1.2); large run %.1f MiB (goal < 300 MiB)\n", *large, *small, ratio, res[1].MaxRSSMiB)
	if *jsonPath != "" {
		data, _ := json.MarshalIndent(map[string]any{"runs": res, "rss_ratio": ratio, "at": time.Now().UTC()}, "", "  ")
		if err := os.WriteFile(*jsonPath, append(data, '\n'), 0o644); err != nil {
			fmt.Fprintln(stderr, "memory:", err)
			return 1
		}
	}
	return 0
}
