// Command overhead measures trajflow's own cost: rollouts per CPU-second
// through the whole pipeline (source, template, repeat, generate ⇄ sim
// env, groups, collate, Parquet) against an instant simulated server
// (time scale 0, a separate `trajflow sim-server` process over HTTP),
// compared with bare client loops sending the same requests to the same
// server, and a CPU profile of the pipeline run.
//
//	go run ./bench/overhead          # 20k rollouts
//	go run ./bench/overhead -quick   # smoke run
//
// Only this process's CPU time counts (getrusage); the server's is its own.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/schema"

	"github.com/trajflow/trajflow/bench/internal/harness"
	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/inference/openai"
	"github.com/trajflow/trajflow/runner"
	"github.com/trajflow/trajflow/stages/repeat"
)

func main() { harness.Main(run) }

// Result is one way of sending the workload's requests.
type Result struct {
	Name     string  `json:"name"`
	Rollouts int     `json:"rollouts"`
	WallS    float64 `json:"wall_s"`
	CPUS     float64 `json:"cpu_s"`
	// PerCPU is rollouts per CPU-second of this process.
	PerCPU float64 `json:"rollouts_per_cpu_s"`
	// ParquetBytes is the size of the Parquet files the pipeline
	// committed (pipeline only).
	ParquetBytes int64 `json:"parquet_bytes,omitempty"`
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("overhead", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quick := fs.Bool("quick", false, "smoke run")
	tasks := fs.Int("tasks", 5000, "tasks (each n rollouts)")
	n := fs.Int("n", 4, "rollouts per task")
	conc := fs.Int("concurrency", 64, "generate.concurrency, and the bare loops' workers")
	logprobs := fs.Bool("logprobs", false, "request per-token logprobs")
	maxTokens := fs.Int("max-tokens", 0, "max_tokens (0: the short preset's lengths, median 60)")
	compression := fs.String("compression", "zstd", "output.compression of the pipeline run")
	profile := fs.String("profile", "", "write the pipeline's CPU profile here (default: in the work directory)")
	top := fs.Int("top", 25, "print this many lines of `go tool pprof -top` (0: none)")
	jsonPath := fs.String("json", "", "also write the results as JSON to this file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *quick {
		*tasks, *top = 200, 0
	}
	dir, err := os.MkdirTemp("", "trajflow-bench-overhead-")
	if err != nil {
		fmt.Fprintln(stderr, "overhead:", err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }() // best effort: a temporary directory, not output
	if *profile == "" {
		*profile = filepath.Join(dir, "cpu.pprof")
	}
	res, err := measure(ctx, dir, *tasks, *n, *conc, *logprobs, *maxTokens, *compression, *profile, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "overhead:", err)
		return 1
	}
	fmt.Fprintf(stdout, "%d tasks × n=%d = %d rollouts, generate.concurrency %d, logprobs %v, output.compression %s, instant sim-server child over HTTP\n\n",
		*tasks, *n, *tasks**n, *conc, *logprobs, *compression)
	fmt.Fprintln(stdout, "| client | rollouts | wall s | CPU s | rollouts/CPU-s | pipeline ratio |")
	fmt.Fprintln(stdout, "|---|---:|---:|---:|---:|---:|")
	pipe := res[0].PerCPU
	for _, r := range res {
		fmt.Fprintf(stdout, "| %s | %d | %.2f | %.2f | %.0f | %.3f |\n", r.Name, r.Rollouts, r.WallS, r.CPUS, r.PerCPU, pipe/r.PerCPU)
	}
	if *jsonPath != "" {
		data, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(*jsonPath, append(data, '\n'), 0o644); err != nil {
			fmt.Fprintln(stderr, "overhead:", err)
			return 1
		}
	}
	fmt.Fprintf(stdout, "\nParquet written by the pipeline: %d bytes, %.0f bytes a rollout\n", res[0].ParquetBytes, float64(res[0].ParquetBytes)/float64(max(res[0].Rollouts, 1)))
	if line, err := sinkShare(*profile); err == nil {
		fmt.Fprintf(stdout, "Parquet sink CPU (sinks/parquet.(*Writer) methods and below, from the profile): %s\n", line)
	}
	if *top > 0 {
		fmt.Fprintf(stdout, "\nCPU profile of the pipeline run (%s):\n\n", *profile)
		if out, err := pprofTop(*profile, *top); err != nil {
			fmt.Fprintln(stdout, "(go tool pprof unavailable:", err, ")")
		} else {
			fmt.Fprintln(stdout, "```")
			fmt.Fprint(stdout, out)
			fmt.Fprintln(stdout, "```")
		}
	}
	return 0
}

func measure(ctx context.Context, dir string, tasks, n, conc int, logprobs bool, maxTokens int, compression, profile string, log io.Writer) ([]Result, error) {
	srv, err := harness.StartSimChild(ctx, "--time-scale", "0", "--seed", "7", "--preset", "short")
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	tasksPath := filepath.Join(dir, "tasks.jsonl")
	if err := harness.WriteTasks(tasksPath, tasks); err != nil {
		return nil, err
	}
	b := harness.Bench{RepeatSeed: 1000, Concurrency: conc, EnvConcurrency: conc}
	w := harness.Workload{Name: "overhead", Tasks: tasks, N: n, MaxTokens: maxTokens}
	cfg, err := b.Config(w, tasksPath, srv.URL, filepath.Join(dir, "out"))
	if err != nil {
		return nil, err
	}
	if logprobs {
		cfg.Generate.Params["logprobs"] = true
	}
	cfg.Output.Parquet.Compression = compression
	if err := cfg.Validate(); err != nil {
		return nil, err
	}

	// The same requests, built with trajflow's own source, template and
	// repeat stages before any clock starts.
	ts, err := harness.LoadTasks(ctx, cfg)
	if err != nil {
		return nil, err
	}
	exp := repeat.New(cfg.Repeat, cfg.Run.ID, cfg.Env.Name, cfg.Generate.Model)
	var reqs []*inference.Request
	for _, t := range ts {
		for _, r := range exp.Expand(t, 0) {
			p := inference.MergeParams(t.Params, cfg.Generate.Params)
			p["seed"] = r.Seed
			reqs = append(reqs, &inference.Request{Model: cfg.Generate.Model, Messages: r.Messages, Params: p, Affinity: r.GroupID})
		}
	}

	// Warm up the server and the connections.
	if _, err := clientLoop(ctx, cfg.Generate, reqs[:min(len(reqs), 2*conc)], conc); err != nil {
		return nil, err
	}
	fmt.Fprintln(log, "overhead: pipeline ...")
	pipe, err := pipeline(ctx, cfg, profile)
	if err != nil {
		return nil, err
	}
	if pipe.ParquetBytes, err = dirBytes(filepath.Join(cfg.Output.Dir, schema.DataDir)); err != nil {
		return nil, err
	}
	if pipe.Rollouts != len(reqs) {
		return nil, fmt.Errorf("the pipeline resolved %d rollouts, want %d", pipe.Rollouts, len(reqs))
	}
	fmt.Fprintln(log, "overhead: llm client loop ...")
	cl, err := clientLoop(ctx, cfg.Generate, reqs, conc)
	if err != nil {
		return nil, err
	}
	fmt.Fprintln(log, "overhead: raw net/http loop ...")
	raw, err := rawLoop(ctx, srv.URL, reqs, conc)
	if err != nil {
		return nil, err
	}
	return []Result{pipe, cl, raw}, nil
}

func result(name string, rollouts int, wall, cpu time.Duration) Result {
	r := Result{Name: name, Rollouts: rollouts, WallS: wall.Seconds(), CPUS: cpu.Seconds()}
	if cpu > 0 {
		r.PerCPU = float64(rollouts) / cpu.Seconds()
	}
	return r
}

// pipeline runs `trajflow run` in this process under a CPU profile.
func pipeline(ctx context.Context, cfg *config.Config, profile string) (Result, error) {
	f, err := os.Create(profile)
	if err != nil {
		return Result{}, err
	}
	defer func() { _ = f.Close() }() // best effort: read only
	start, cpu0 := time.Now(), harness.CPUTime()
	if err := pprof.StartCPUProfile(f); err != nil {
		return Result{}, err
	}
	sum, err := runner.Run(ctx, cfg, runner.Options{})
	pprof.StopCPUProfile()
	wall, cpu := time.Since(start), harness.CPUTime()-cpu0
	if err != nil {
		return Result{}, err
	}
	if sum.Errors > 0 {
		return Result{}, fmt.Errorf("the pipeline had %d errors: %v", sum.Errors, sum.ErrorClasses)
	}
	return result("trajflow pipeline (trajflow run, Parquet out)", int(sum.OK), wall, cpu), nil
}

// clientLoop sends reqs with trajflow's HTTP client from conc workers.
func clientLoop(ctx context.Context, gen config.Generate, reqs []*inference.Request, conc int) (Result, error) {
	c, err := openai.NewHTTP(gen.Config, openai.HTTPOptions{})
	if err != nil {
		return Result{}, err
	}
	defer c.Close()
	start, cpu0 := time.Now(), harness.CPUTime()
	err = workers(ctx, len(reqs), conc, func(i int) error {
		_, err := c.Complete(ctx, reqs[i])
		return err
	})
	return result("bare loop, trajflow's llm client", len(reqs), time.Since(start), harness.CPUTime()-cpu0), err
}

// rawLoop posts the same request bodies (encoded before the clock starts)
// with net/http and reads every response body whole.
func rawLoop(ctx context.Context, base string, reqs []*inference.Request, conc int) (Result, error) {
	bodies := make([][]byte, len(reqs))
	for i, r := range reqs {
		body := map[string]any{"model": r.Model, "messages": r.Messages}
		for k, v := range r.Params {
			body[k] = v
		}
		b, err := json.Marshal(body)
		if err != nil {
			return Result{}, err
		}
		bodies[i] = b
	}
	tr := &http.Transport{MaxIdleConnsPerHost: conc}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	url := strings.TrimSuffix(base, "/") + "/chat/completions"
	start, cpu0 := time.Now(), harness.CPUTime()
	err := workers(ctx, len(reqs), conc, func(i int) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(bodies[i]))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer func() { _ = resp.Body.Close() }() // best effort: a response body, read
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("HTTP %d", resp.StatusCode)
		}
		return nil
	})
	return result("bare loop, raw net/http (body read, not decoded)", len(reqs), time.Since(start), harness.CPUTime()-cpu0), err
}

// workers runs f(0..n-1) on conc goroutines.
func workers(ctx context.Context, n, conc int, f func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := f(i); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

// pprofTop is `go tool pprof -top` of the profile.
// dirBytes sums the sizes of the Parquet files in dir.
func dirBytes(dir string) (int64, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.parquet"))
	if err != nil {
		return 0, err
	}
	var n int64
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return 0, err
		}
		n += st.Size()
	}
	return n, nil
}

// sinkShare returns pprof's account of the samples under the Parquet
// sink's Writer methods (Write, and Close, which flushes the last pages):
// with no node dropped, the nodes shown account for every focused sample
// ("Showing nodes accounting for 1.2s, 15% of 8s total").
func sinkShare(profile string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	out, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=1000000", "-nodefraction=0", "-edgefraction=0",
		`-focus=sinks/parquet\.\(\*Writer\)\.`, self, profile).Output()
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(out), "\n") {
		if i := strings.Index(line, "Showing nodes accounting for "); i >= 0 {
			return strings.TrimSpace(line[i+len("Showing nodes accounting for "):]), nil
		}
	}
	return "", fmt.Errorf("no summary in pprof's output")
}

func pprofTop(profile string, lines int) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	out, err := exec.Command("go", "tool", "pprof", "-top", fmt.Sprintf("-nodecount=%d", lines), self, profile).Output()
	if err != nil {
		return "", err
	}
	return string(out), nil
}
