// Command fleet measures one trajflow process driving a fleet of simulated
// endpoints at fleet-scale load: by default 32 simulated continuous-batching
// servers of 500 slots each and 16,000 requests in flight. The servers run
// in this process; trajflow runs as a child process (`trajflow run`), so
// that its CPU time and peak RSS (getrusage of the child) are its own.
//
//	go run ./bench/fleet            # 32 endpoints, 16,000 in flight, 64,000 requests, ~3 min
//	go run ./bench/fleet -quick     # smoke run, seconds
//
// It reports the schedule efficiency against the fleet's ideal makespan,
// the child's CPU (user, system, cores used) and peak RSS, the requests in
// flight at the servers, and the per-endpoint balance. BENCHMARKS.md
// explains every figure.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/trajflow/trajflow/bench/internal/harness"
	"github.com/trajflow/trajflow/inference/sim"
)

func main() { harness.Main(run) }

// Result is one fleet run.
type Result struct {
	Endpoints   int     `json:"endpoints"`
	Capacity    int     `json:"capacity_per_endpoint"`
	Concurrency int     `json:"generate_concurrency"`
	Tasks       int     `json:"tasks"`
	Requests    int64   `json:"requests"`
	TimeScale   float64 `json:"time_scale"`
	// PeakInflight is the most requests running or queued at the servers
	// together, sampled every 10ms.
	PeakInflight int64 `json:"peak_inflight"`
	// IdealS is the fleet's ideal makespan (see idealOf); ActualS runs from
	// the first request's arrival at a server to the last reply; WallS is
	// the child process's whole life (start-up, reading, the final commit).
	IdealS     float64 `json:"t_ideal_s"`
	ActualS    float64 `json:"t_actual_s"`
	WallS      float64 `json:"wall_s"`
	Efficiency float64 `json:"efficiency"`
	// The child's CPU time, user and system, and cores used (CPU / wall).
	UserS     float64 `json:"cpu_user_s"`
	SysS      float64 `json:"cpu_sys_s"`
	Cores     float64 `json:"cores"`
	RSSMiB    float64 `json:"peak_rss_mib"`
	PerCPUSec float64 `json:"requests_per_cpu_s"`
	// Requests per endpoint.
	PerMin    int64   `json:"requests_min"`
	PerMax    int64   `json:"requests_max"`
	PerMean   float64 `json:"requests_mean"`
	PerStddev float64 `json:"requests_stddev"`
	// BenchCPUS is this process's CPU time (the servers) during the run.
	BenchCPUS float64 `json:"servers_cpu_s"`
}

const configYAML = `run: {id: fleet, progress: 1h}
source: {path: %q}
prompt: {user: "{question}"}
repeat: {n: %d, seed: 1000}
generate:
  endpoints: [%s]
  model: sim
  concurrency: %d
  params: {return_token_ids: true, max_tokens: %d}
env: {name: sim, max_turns: 1000, concurrency: %d}
groups: {keep: all}
output: {dir: %q}
`

// endpoint is one simulated server behind a loopback HTTP listener that
// counts the completions it answers and when the first arrived and the
// last was answered.
type endpoint struct {
	*sim.Server
	url         string
	srv         *http.Server
	completions atomic.Int64
}

// first and last are the fleet's first arrival and last reply (unix ns).
var first, last atomic.Int64

func startEndpoint(o sim.Options) (*endpoint, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	e := &endpoint{Server: sim.New(o), url: "http://" + ln.Addr().String() + "/v1"}
	h := e.Handler()
	e.srv = &http.Server{ReadHeaderTimeout: 30 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/completions") {
			// Not a completion: the endpoint checks (/v1/models, the
			// context-length probes) are not counted.
			h.ServeHTTP(w, r)
			return
		}
		first.CompareAndSwap(0, time.Now().UnixNano())
		h.ServeHTTP(w, r)
		e.completions.Add(1)
		now := time.Now().UnixNano()
		for {
			l := last.Load()
			if now <= l || last.CompareAndSwap(l, now) {
				break
			}
		}
	})}
	go func() { _ = e.srv.Serve(ln) }()
	return e, nil
}

func (e *endpoint) close() {
	e.Server.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = e.srv.Shutdown(ctx)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fleet", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quick := fs.Bool("quick", false, "smoke run: 4 endpoints, 400 in flight, seconds")
	nEndpoints := fs.Int("endpoints", 32, "simulated endpoints")
	inflight := fs.Int("inflight", 16000, "generate.concurrency: requests in flight")
	tasks := fs.Int("tasks", 16000, "tasks (each repeat.n rollouts of one request)")
	n := fs.Int("n", 4, "repeat.n")
	scale := fs.Float64("scale", 16, "simulator time scale (16: a request lasts about 26 s at a full batch, long enough for 16,000 in flight on a loaded 2-core machine)")
	maxTokens := fs.Int("max-tokens", 256, "max_tokens of every request (the short preset's cap)")
	jsonPath := fs.String("json", "", "also write the result as JSON to this file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *quick {
		*nEndpoints, *inflight, *tasks, *scale = 4, 400, 400, 0.2
	}
	fail := func(err error) int { fmt.Fprintln(stderr, "fleet:", err); return 1 }
	dir, err := os.MkdirTemp("", "trajflow-bench-fleet-")
	if err != nil {
		return fail(err)
	}
	defer func() { _ = os.RemoveAll(dir) }() // best effort: a temporary directory, not output

	capacity := (*inflight + *nEndpoints - 1) / *nEndpoints
	b := harness.Bench{Seed: 7, RepeatSeed: 1000, TimeScale: *scale, Capacity: capacity, Concurrency: *inflight, EnvConcurrency: *inflight}
	w := harness.Workload{Name: "fleet", Tasks: *tasks, N: *n, Preset: "short", Keep: -1, MaxTokens: *maxTokens}
	tasksPath := filepath.Join(dir, "tasks.jsonl")
	if err := harness.WriteTasks(tasksPath, *tasks); err != nil {
		return fail(err)
	}
	// Every server has the same seed: a request's reply depends on it and
	// the request alone, whichever endpoint answers.
	var eps []*endpoint
	defer func() {
		for _, e := range eps {
			e.close()
		}
	}()
	var urls []string
	for range *nEndpoints {
		e, err := startEndpoint(b.SimOptions(w))
		if err != nil {
			return fail(err)
		}
		eps = append(eps, e)
		urls = append(urls, fmt.Sprintf("%q", e.url))
	}
	cost := harness.CostOf(eps[0].Options())

	// The ideal from the oracle: the same requests replayed in process.
	fmt.Fprintf(stderr, "fleet: oracle of %d rollouts ...\n", *tasks**n)
	cfg, err := b.Config(w, tasksPath, eps[0].url, filepath.Join(dir, "oracle"))
	if err != nil {
		return fail(err)
	}
	ts, err := harness.LoadTasks(ctx, cfg)
	if err != nil {
		return fail(err)
	}
	oracle, err := harness.Oracle(ctx, b, w, cfg, ts)
	if err != nil {
		return fail(err)
	}
	ideal := idealOf(harness.AllTrajs(oracle), cost, *nEndpoints)

	out := filepath.Join(dir, "out")
	cfgPath := filepath.Join(dir, "fleet.yaml")
	text := fmt.Sprintf(configYAML, tasksPath, *n, strings.Join(urls, ", "), *inflight, *maxTokens, *inflight, out)
	if err := os.WriteFile(cfgPath, []byte(text), 0o644); err != nil {
		return fail(err)
	}
	// Sample the requests in flight at the servers while the child runs.
	var peak atomic.Int64
	sampleCtx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-sampleCtx.Done():
				return
			case <-t.C:
			}
			var sum int64
			for _, e := range eps {
				st := e.Stats()
				sum += int64(st.Running + st.Queued)
			}
			if sum > peak.Load() {
				peak.Store(sum)
			}
		}
	}()
	fmt.Fprintf(stderr, "fleet: trajflow run: %d endpoints, %d in flight, %d requests ...\n", *nEndpoints, *inflight, *tasks**n)
	cpu0 := harness.CPUTime()
	cr, err := harness.RunChild(ctx, cfgPath)
	benchCPU := harness.CPUTime() - cpu0
	stopSampling()
	<-sampled
	if err != nil {
		return fail(err)
	}
	if want := fmt.Sprintf("rows written: %d,", *tasks**n); !strings.Contains(cr.Stdout, want) {
		return fail(fmt.Errorf("the run did not write %d rows:\n%s", *tasks**n, cr.Stdout))
	}
	r := Result{Endpoints: *nEndpoints, Capacity: capacity, Concurrency: *inflight, Tasks: *tasks, TimeScale: *scale,
		PeakInflight: peak.Load(), IdealS: ideal.Seconds(), WallS: cr.Wall.Seconds(),
		UserS: cr.User.Seconds(), SysS: cr.Sys.Seconds(), RSSMiB: harness.MiB(cr.MaxRSS), BenchCPUS: benchCPU.Seconds()}
	r.ActualS = time.Duration(last.Load() - first.Load()).Seconds()
	if r.ActualS > 0 {
		r.Efficiency = r.IdealS / r.ActualS
	}
	if r.WallS > 0 {
		r.Cores = (r.UserS + r.SysS) / r.WallS
	}
	var counts []float64
	r.PerMin = math.MaxInt64
	for _, e := range eps {
		c := e.completions.Load()
		r.Requests += c
		r.PerMin, r.PerMax = min(r.PerMin, c), max(r.PerMax, c)
		counts = append(counts, float64(c))
	}
	r.PerMean, r.PerStddev = meanStd(counts)
	if cpu := r.UserS + r.SysS; cpu > 0 {
		r.PerCPUSec = float64(r.Requests) / cpu
	}
	if r.Requests != int64(*tasks**n) {
		return fail(fmt.Errorf("the servers answered %d completions, want %d", r.Requests, *tasks**n))
	}
	printResult(stdout, r)
	if *jsonPath != "" {
		data, _ := json.MarshalIndent(r, "", "  ")
		if err := os.WriteFile(*jsonPath, append(data, '\n'), 0o644); err != nil {
			return fail(err)
		}
	}
	return 0
}

// idealOf is the fleet's ideal makespan: E servers of B slots each share
// the workload perfectly, so the busy term is the one-server ideal of the
// workload with E·B slots and the per-token costs C and P spread over E
// servers, and no trajectory finishes faster than its own chain on one
// server (harness.IdealOf).
func idealOf(trajs []*harness.Traj, c harness.Cost, e int) time.Duration {
	one := harness.IdealOf(trajs, c)
	fleet := harness.IdealOf(trajs, harness.Cost{A: c.A, C: c.C / float64(e), P: c.P / float64(e), B: c.B * e})
	return max(fleet.Busy, one.Chain)
}

func meanStd(xs []float64) (mean, std float64) {
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	for _, x := range xs {
		std += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(std / float64(len(xs)))
}

func printResult(w io.Writer, r Result) {
	fmt.Fprintf(w, "%d simulated endpoints × %d slots (time scale %g), generate.concurrency %d, %d tasks × n=%d = %d requests, one trajflow child process\n\n",
		r.Endpoints, r.Capacity, r.TimeScale, r.Concurrency, r.Tasks, r.Requests/int64(r.Tasks), r.Requests)
	fmt.Fprintln(w, "| peak in flight | T_ideal s | T_actual s | efficiency | wall s | CPU user s | CPU sys s | cores | requests/CPU-s | peak RSS MiB | per endpoint min / max / mean / stddev | servers' CPU s |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|")
	fmt.Fprintf(w, "| %d | %.2f | %.2f | %.3f | %.2f | %.2f | %.2f | %.2f | %.0f | %.1f | %d / %d / %.0f / %.1f | %.1f |\n",
		r.PeakInflight, r.IdealS, r.ActualS, r.Efficiency, r.WallS, r.UserS, r.SysS, r.Cores, r.PerCPUSec, r.RSSMiB,
		r.PerMin, r.PerMax, r.PerMean, r.PerStddev, r.BenchCPUS)
}
