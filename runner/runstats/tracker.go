package runstats

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/gateway"
	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/inference/openai"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/sources"
)

// Inputs are what a Tracker reads of the run it follows; every function
// may be nil (nothing to read yet).
type Inputs struct {
	// Progress, when set, receives the progress (Options.Progress);
	// Stderr the plain progress line otherwise.
	Progress func(Snapshot)
	Stderr   io.Writer
	// Alloc is the allocator metrics.json is computed with.
	Alloc memory.Allocator
	// Hosted are the client's hosted-API figures; HTTP the config's HTTP
	// client, for its endpoints' figures.
	Hosted func() HostedStats
	HTTP   func() *openai.HTTPClient
	// Source is the run's input, for the share of it read.
	Source func() sources.Reader
	// Requests are the generate stage's cancelled requests and their
	// estimated tokens.
	Requests func() (cancelled, estimate int64)
	// Busy are the rollouts in generation and in the environment now;
	// Queues the graph's queue depths.
	Busy   func() (generation, environment int)
	Queues func() map[string]int
	// Display shows a path as the user named the output (under an s3://
	// output.dir).
	Display func(string) string
	// Stop is what stopped the run early, nil when nothing did.
	Stop func() error
	// EarlierKept are the kept groups earlier runs of the output
	// directory committed.
	EarlierKept func() int
	// OnCommit, when set, hears of each committed data file.
	OnCommit func(path string, rows int)
	// Gateway returns the agent gateway's counters; ok is false when the
	// run has no gateway.
	Gateway func() (st gateway.Stats, ok bool)
}

// Tracker follows one run: its counters, its progress, the endpoints' own
// metrics, its Prometheus endpoint, its cost, and at the end its summary
// and metrics files.
type Tracker struct {
	// Counters count the run's work as it goes.
	*Counters
	cfg *config.Config
	in  Inputs
	// lifeMu guards what the run's goroutine sets as it starts and the
	// snapshot reads from others (the progress ticker, the Prometheus
	// endpoint): started, scraper, and srv (its baseline, and its final count
	// that ServerFinal sets while /metrics may be scraped).
	lifeMu sync.Mutex
	// started is when the graph started.
	started time.Time
	files   []string
	// scraper polls the endpoints' own metrics (nil unless HTTP); srv is
	// their token counter over the run; prom the Prometheus metrics
	// (run.metrics_addr; nil when off).
	scraper *scraper
	srv     serverCount
	prom    *Prometheus
}

// New is the tracker of a run of cfg.
func New(cfg *config.Config, in Inputs) *Tracker {
	if in.Stderr == nil {
		in.Stderr = io.Discard
	}
	// A function not given reads as nothing yet.
	in.Hosted, in.HTTP, in.Source = orZero(in.Hosted), orZero(in.HTTP), orZero(in.Source)
	in.Queues, in.Stop, in.EarlierKept = orZero(in.Queues), orZero(in.Stop), orZero(in.EarlierKept)
	if in.Requests == nil {
		in.Requests = func() (int64, int64) { return 0, 0 }
	}
	if in.Display == nil {
		in.Display = func(p string) string { return p }
	}
	return &Tracker{Counters: NewCounters(), cfg: cfg, in: in}
}

// Start marks the start of the graph.
func (r *Tracker) Start() {
	r.lifeMu.Lock()
	r.started = time.Now()
	r.lifeMu.Unlock()
}

// Scrape polls the endpoints' own metrics from now on (their load for the
// live view and Prometheus, their token counters for the summary).
func (r *Tracker) Scrape(endpoints []string) {
	sc := newScraper(endpoints)
	r.lifeMu.Lock()
	r.scraper = sc
	r.lifeMu.Unlock()
}

// Committed counts a committed data file, its rows and the groups they
// are of, in the summary.
func (r *Tracker) Committed(path string, rows, groups int) {
	r.files = append(r.files, r.in.Display(path))
	r.written.Add(int64(rows))
	r.filesCommitted.Add(1)
	r.groupsCommitted.Add(int64(groups))
	if r.in.OnCommit != nil {
		r.in.OnCommit(path, rows)
	}
}

// orZero is f, or, when f is nil, a function that returns the zero value.
func orZero[T any](f func() T) func() T {
	if f != nil {
		return f
	}
	return func() (zero T) { return zero }
}

// ServeMetrics serves the run's Prometheus metrics on addr
// (run.metrics_addr), with extra beside them when set, until stop.
func (r *Tracker) ServeMetrics(ctx context.Context, addr string, extra prometheus.Collector) (stop func(), err error) {
	r.prom = newPrometheus(r.Snapshot)
	if extra != nil {
		if err := r.prom.reg.Register(extra); err != nil {
			return nil, fmt.Errorf("run.metrics_addr: %w", err)
		}
	}
	return r.prom.serve(ctx, addr)
}

// Attempt records one HTTP attempt in the Prometheus metrics, when
// served (openai.HTTPOptions.OnAttempt).
func (r *Tracker) Attempt(endpoint string, took time.Duration, err *inference.Error, retrying bool) {
	if r.prom == nil {
		return
	}
	outcome := "ok"
	if err != nil {
		outcome = err.Class
	}
	r.prom.request.WithLabelValues(pipeline.RedactURLs(endpoint), outcome).Observe(took.Seconds())
	if retrying {
		r.prom.retries.WithLabelValues(outcome).Inc()
	}
}

// WrapEnv times env's calls for the Prometheus metrics, when served.
func (r *Tracker) WrapEnv(env envs.Env) envs.Env {
	if r.prom == nil {
		return env
	}
	switch e := env.(type) {
	case envs.Agent:
		// Driven, not stepped: its runs are timed as trajectories.
		return env
	case envs.Ender:
		return timedEnder{TimedEnv{Env: env, steps: r.prom.envStep}, e}
	}
	return TimedEnv{Env: env, steps: r.prom.envStep}
}
