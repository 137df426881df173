// Command fleet measures one trajflow process driving a fleet of simulated
// endpoints at fleet-scale load: by default 32 simulated continuous-batching
// servers of 500 slots each and 16,000 requests in flight. The servers run
// in this process; trajflow runs as a child process (`trajflow run`), so
// that its CPU time and peak RSS (getrusage of the child) are its own.
//
//	go run ./bench/fleet            # 32 endpoints, 16,000 in flight, 64,000 requests, ~3 min
//	go run ./bench/fleet -quick     # smoke run, seconds
//	go run ./bench/fleet -hung 0,1  # the same fleet with no and with one hung endpoint, ~7 min
//
// With -hung K,…, one run per K (alternated over -pairs): K of the
// endpoints are replaced by servers that answer GET /models (the
// preflight) and hold every other request without answering until the
// client hangs up. The runs use the configuration's default silence watch
// (generate.silence_after not set). Each row adds the requests moved off
// the hung endpoints (metrics.json last_run.endpoints[].moved) and whether
// the run's log named them; the makespan is compared with the run with no
// hung endpoint of the same pair.
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
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/trajflow/trajflow/bench/internal/harness"
	"github.com/trajflow/trajflow/inference/openai"
	"github.com/trajflow/trajflow/inference/sim"
	"github.com/trajflow/trajflow/schema"
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
	// Hung is the number of endpoints (of Endpoints) that hold every
	// completion without answering; the per-endpoint figures, the ideal
	// and the requests count the answering ones alone. HungHeld counts
	// the completions the hung endpoints accepted, Moved the attempts the
	// child moved off them (metrics.json), HungNamed whether its log
	// named every hung endpoint as taken out silent. Pair is the pair the
	// run belongs to (-pairs). Canaries counts the silence watch's canary
	// requests the child sent, to every endpoint (metrics.json), which
	// the servers count apart (openai.CanaryHeader): not in Requests,
	// HungHeld, nor the makespan.
	Hung      int   `json:"hung"`
	Pair      int   `json:"pair"`
	HungHeld  int64 `json:"hung_held"`
	Moved     int64 `json:"moved"`
	HungNamed bool  `json:"hung_named"`
	Canaries  int64 `json:"canaries"`
}

// Compare is one -hung run against the run with no hung endpoint of the
// same pair: the ratios of the makespans (T_actual and wall).
type Compare struct {
	Pair         int     `json:"pair"`
	Hung         int     `json:"hung"`
	HealthyS     float64 `json:"t_actual_healthy_s"`
	HungS        float64 `json:"t_actual_hung_s"`
	Ratio        float64 `json:"ratio"`
	HealthyWallS float64 `json:"wall_healthy_s"`
	HungWallS    float64 `json:"wall_hung_s"`
	WallRatio    float64 `json:"wall_ratio"`
	Moved        int64   `json:"moved"`
	HungNamed    bool    `json:"hung_named"`
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
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/completions") || r.Header.Get(openai.CanaryHeader) != "" {
			// Not a completion of the run: the endpoint checks
			// (/v1/models, the context-length probes) and the silence
			// watch's canaries are not counted.
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

// hungEndpoint answers GET /models (the preflight) from a simulated
// server and holds every other request without answering until the client
// hangs up or the bench ends: an engine that accepts connections and
// never answers.
type hungEndpoint struct {
	url  string
	srv  *http.Server
	sim  *sim.Server
	done chan struct{}
	held atomic.Int64
}

func startHung(o sim.Options) (*hungEndpoint, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	e := &hungEndpoint{url: "http://" + ln.Addr().String() + "/v1", sim: sim.New(o), done: make(chan struct{})}
	h := e.sim.Handler()
	e.srv = &http.Server{ReadHeaderTimeout: 30 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			h.ServeHTTP(w, r)
			return
		}
		if r.Header.Get(openai.CanaryHeader) == "" {
			e.held.Add(1) // a completion of the run; the canaries are in Canaries
		}
		select {
		case <-e.done:
		case <-r.Context().Done():
		}
	})}
	go func() { _ = e.srv.Serve(ln) }()
	return e, nil
}

func (e *hungEndpoint) close() {
	close(e.done)
	e.sim.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = e.srv.Shutdown(ctx)
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
	hungList := fs.String("hung", "", "comma-separated numbers of hung endpoints, one run each (e.g. 0,1: the fleet healthy, then with one endpoint that never answers); the makespans are compared with the run with 0")
	pairs := fs.Int("pairs", 1, "with -hung: repeat the runs this many times, in alternate order")
	jsonPath := fs.String("json", "", "also write the result as JSON to this file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *quick {
		*nEndpoints, *inflight, *tasks, *scale = 4, 400, 400, 0.2
	}
	fail := func(err error) int { fmt.Fprintln(stderr, "fleet:", err); return 1 }
	var hungs []int
	if *hungList != "" {
		for _, f := range strings.Split(*hungList, ",") {
			k, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || k < 0 || k >= *nEndpoints {
				return fail(fmt.Errorf("-hung %q: want numbers from 0 to %d", *hungList, *nEndpoints-1))
			}
			hungs = append(hungs, k)
		}
		if !slices.Contains(hungs, 0) {
			return fail(fmt.Errorf("-hung %q: include 0, the run the others are compared with", *hungList))
		}
	}
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
	simOpts := b.SimOptions(w)
	costSim := sim.New(simOpts)
	cost := harness.CostOf(costSim.Options())
	costSim.Close()

	// The ideal from the oracle: the same requests replayed in process.
	fmt.Fprintf(stderr, "fleet: oracle of %d rollouts ...\n", *tasks**n)
	cfg, err := b.Config(w, tasksPath, "http://127.0.0.1:1/v1", filepath.Join(dir, "oracle")) // the oracle replays in process: the endpoint is not asked
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
	trajs := harness.AllTrajs(oracle)

	f := fleetRun{dir: dir, tasksPath: tasksPath, simOpts: simOpts, n: *n, tasks: *tasks, endpoints: *nEndpoints,
		inflight: *inflight, capacity: capacity, maxTokens: *maxTokens, scale: *scale, stderr: stderr}
	if len(hungs) == 0 {
		r, err := f.run(ctx, 0, idealOf(trajs, cost, *nEndpoints))
		if err != nil {
			return fail(err)
		}
		printResult(stdout, r)
		return writeJSON(*jsonPath, r, fail)
	}
	var rs []Result
	for p := range *pairs {
		order := slices.Clone(hungs)
		if p%2 == 1 {
			slices.Reverse(order)
		}
		for _, k := range order {
			f.pair = p
			r, err := f.run(ctx, k, idealOf(trajs, cost, *nEndpoints-k))
			if err != nil {
				return fail(err)
			}
			rs = append(rs, r)
		}
	}
	cs := compare(rs)
	printHung(stdout, rs, cs)
	return writeJSON(*jsonPath, struct {
		Runs    []Result  `json:"runs"`
		Compare []Compare `json:"compare"`
	}{rs, cs}, fail)
}

func writeJSON(path string, v any, fail func(error) int) int {
	if path == "" {
		return 0
	}
	data, _ := json.MarshalIndent(v, "", "  ")
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fail(err)
	}
	return 0
}

// fleetRun is what every run of one invocation shares.
type fleetRun struct {
	dir, tasksPath                                string
	simOpts                                       sim.Options
	n, tasks, endpoints, inflight, capacity, pair int
	maxTokens                                     int
	scale                                         float64
	stderr                                        io.Writer
	seq                                           int
}

// run is one trajflow child over a fresh fleet of f.endpoints servers,
// the last hung of them hung, against the ideal makespan ideal.
func (f *fleetRun) run(ctx context.Context, hung int, ideal time.Duration) (Result, error) {
	f.seq++
	first.Store(0)
	last.Store(0)
	// Every server has the same seed: a request's reply depends on it and
	// the request alone, whichever endpoint answers.
	var eps []*endpoint
	var hes []*hungEndpoint
	defer func() {
		for _, e := range eps {
			e.close()
		}
		for _, e := range hes {
			e.close()
		}
	}()
	var urls []string
	for range f.endpoints - hung {
		e, err := startEndpoint(f.simOpts)
		if err != nil {
			return Result{}, err
		}
		eps = append(eps, e)
		urls = append(urls, fmt.Sprintf("%q", e.url))
	}
	for range hung {
		e, err := startHung(f.simOpts)
		if err != nil {
			return Result{}, err
		}
		hes = append(hes, e)
		urls = append(urls, fmt.Sprintf("%q", e.url))
	}
	out := filepath.Join(f.dir, fmt.Sprintf("out-%d", f.seq))
	cfgPath := filepath.Join(f.dir, fmt.Sprintf("fleet-%d.yaml", f.seq))
	text := fmt.Sprintf(configYAML, f.tasksPath, f.n, strings.Join(urls, ", "), f.inflight, f.maxTokens, f.inflight, out)
	if err := os.WriteFile(cfgPath, []byte(text), 0o644); err != nil {
		return Result{}, err
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
	fmt.Fprintf(f.stderr, "fleet: trajflow run: %d endpoints (%d hung), %d in flight, %d requests ...\n", f.endpoints, hung, f.inflight, f.tasks*f.n)
	cpu0 := harness.CPUTime()
	cr, err := harness.RunChild(ctx, cfgPath)
	benchCPU := harness.CPUTime() - cpu0
	stopSampling()
	<-sampled
	if err != nil {
		return Result{}, err
	}
	if want := fmt.Sprintf("rows written: %d,", f.tasks*f.n); !strings.Contains(cr.Stdout, want) {
		return Result{}, fmt.Errorf("the run did not write %d rows:\n%s", f.tasks*f.n, cr.Stdout)
	}
	r := Result{Endpoints: f.endpoints, Capacity: f.capacity, Concurrency: f.inflight, Tasks: f.tasks, TimeScale: f.scale,
		PeakInflight: peak.Load(), IdealS: ideal.Seconds(), WallS: cr.Wall.Seconds(),
		UserS: cr.User.Seconds(), SysS: cr.Sys.Seconds(), RSSMiB: harness.MiB(cr.MaxRSS), BenchCPUS: benchCPU.Seconds(),
		Hung: hung, Pair: f.pair}
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
	moved, canaries, err := movedOf(filepath.Join(out, schema.MetricsFile))
	if err != nil {
		return Result{}, err
	}
	for _, e := range eps {
		r.Canaries += canaries[e.url]
	}
	for _, e := range hes {
		r.Canaries += canaries[e.url]
	}
	if r.Requests != int64(f.tasks*f.n) {
		return Result{}, fmt.Errorf("the servers answered %d completions, want %d", r.Requests, f.tasks*f.n)
	}
	r.HungNamed = hung > 0
	for _, e := range hes {
		r.HungHeld += e.held.Load()
		r.Moved += moved[e.url]
		if !strings.Contains(cr.Stderr, "endpoint "+e.url+" taken out (silent") {
			r.HungNamed = false
		}
	}
	for _, e := range eps {
		if moved[e.url] > 0 {
			return Result{}, fmt.Errorf("%d attempts moved off the answering endpoint %s (taken out as silent):\n%s", moved[e.url], e.url, cr.Stderr)
		}
	}
	return r, nil
}

// movedOf reads the attempts moved off each endpoint, and the canaries
// sent to each, from a run's metrics.json (last_run.endpoints[].moved,
// .canaries).
func movedOf(path string) (moved, canaries map[string]int64, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	var m struct {
		LastRun struct {
			Endpoints []struct {
				Endpoint        string
				Moved, Canaries int64
			} `json:"endpoints"`
		} `json:"last_run"`
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, nil, fmt.Errorf("%s: %v", path, err)
	}
	moved, canaries = map[string]int64{}, map[string]int64{}
	for _, e := range m.LastRun.Endpoints {
		moved[e.Endpoint] = e.Moved
		canaries[e.Endpoint] = e.Canaries
	}
	return moved, canaries, nil
}

// compare pairs each run with hung endpoints with the run with none of
// the same pair.
func compare(rs []Result) []Compare {
	var cs []Compare
	for _, r := range rs {
		if r.Hung == 0 {
			continue
		}
		for _, h := range rs {
			if h.Hung != 0 || h.Pair != r.Pair {
				continue
			}
			c := Compare{Pair: r.Pair, Hung: r.Hung, HealthyS: h.ActualS, HungS: r.ActualS, HealthyWallS: h.WallS, HungWallS: r.WallS, Moved: r.Moved, HungNamed: r.HungNamed}
			if h.ActualS > 0 {
				c.Ratio = r.ActualS / h.ActualS
			}
			if h.WallS > 0 {
				c.WallRatio = r.WallS / h.WallS
			}
			cs = append(cs, c)
		}
	}
	return cs
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

func printHung(w io.Writer, rs []Result, cs []Compare) {
	r0 := rs[0]
	fmt.Fprintf(w, "%d endpoints × %d slots (time scale %g), generate.concurrency %d, %d tasks × n=%d = %d requests, one trajflow child process per run; hung endpoints hold every completion unanswered, the silence watch at its defaults\n\n",
		r0.Endpoints, r0.Capacity, r0.TimeScale, r0.Concurrency, r0.Tasks, r0.Requests/int64(r0.Tasks), r0.Requests)
	fmt.Fprintln(w, "| pair | hung | T_ideal s | T_actual s | efficiency | wall s | CPU s | peak RSS MiB | per answering endpoint min / max | held by hung | moved | canaries | log named hung |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---|")
	for _, r := range rs {
		named := "–"
		if r.Hung > 0 {
			named = map[bool]string{true: "yes", false: "NO"}[r.HungNamed]
		}
		fmt.Fprintf(w, "| %d | %d | %.2f | %.2f | %.3f | %.2f | %.2f | %.1f | %d / %d | %d | %d | %d | %s |\n",
			r.Pair+1, r.Hung, r.IdealS, r.ActualS, r.Efficiency, r.WallS, r.UserS+r.SysS, r.RSSMiB, r.PerMin, r.PerMax, r.HungHeld, r.Moved, r.Canaries, named)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| pair | hung | T_actual healthy s | T_actual hung s | ratio hung ÷ healthy | wall healthy s | wall hung s | wall ratio | moved | log named hung |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
	for _, c := range cs {
		fmt.Fprintf(w, "| %d | %d | %.2f | %.2f | %.3f | %.2f | %.2f | %.3f | %d | %v |\n",
			c.Pair+1, c.Hung, c.HealthyS, c.HungS, c.Ratio, c.HealthyWallS, c.HungWallS, c.WallRatio, c.Moved, c.HungNamed)
	}
}
