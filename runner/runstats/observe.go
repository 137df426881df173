package runstats

import (
	"context"
	"io"
	"maps"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/trajflow/trajflow/gateway"
	"github.com/trajflow/trajflow/pipeline"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Snapshot is a run's progress at one moment: what the progress view and
// the Prometheus metrics show.
type Snapshot struct {
	Elapsed time.Duration
	// TasksRead counts input rows read; TaskLimit is source.limit (0: not
	// known ahead).
	TasksRead, TaskLimit int64
	// Rollouts dispatched into the loop, and how many resolved each way.
	Dispatched, OK, Errors, Cancelled, Filtered int64
	// InGeneration and InEnvironment are the model calls and environment
	// calls in flight now.
	InGeneration, InEnvironment int
	// GroupsFinished and GroupsKept count groups; Target is groups.target
	// (0: none). Dropped counts dropped groups by reason.
	GroupsFinished, GroupsKept, Target int
	Dropped                            map[string]int
	// ErrorClasses counts error rollouts by class.
	ErrorClasses map[string]int
	// CompletionTokens counts generated tokens (of answered requests).
	CompletionTokens int64
	// CancelledRequests and CancelledTokensEstimate are the requests
	// cancelled in flight and an estimate of their partial output
	// (Summary.CancelledRequests).
	CancelledRequests, CancelledTokensEstimate int64
	// ServerTokens is the endpoints' own generation-token counter's growth
	// since the run started; -1 when they report none.
	ServerTokens int64
	// RowsCommitted and FilesCommitted count committed data rows and files.
	RowsCommitted, FilesCommitted int64
	// Queues are the items waiting after each stage.
	Queues map[string]int
	// Endpoints are the inference endpoints' loads (HTTP endpoints only).
	Endpoints []EndpointLoad
	// Gateway are the agent gateway's counters (nil: the run has none).
	Gateway *gateway.Stats
	// Hosted is the response cache's, the rate limiter's and the Batch
	// API's figures.
	Hosted HostedStats
	// Cost is what the requests resolved so far cost (generate.price),
	// when Priced; ProjectedCost estimates the whole run's.
	Cost   float64
	Priced bool
	// TasksResumed counts the tasks an earlier run committed (skipped);
	// InputFraction is the share of the input read (0: not known).
	TasksResumed  int64
	InputFraction float64
}

// EndpointLoad is one inference endpoint as trajflow sees it, and as the
// server's own /metrics says (vLLM) when it serves them.
type EndpointLoad struct {
	Endpoint                    string
	InFlight                    int
	Requests, Retries, Failures int64
	// Moved counts the attempts moved off the endpoint while it was
	// silent.
	Moved int64
	// Canaries counts the silence watch's canary requests sent to the
	// endpoint (one token each), apart from Requests.
	Canaries int64
	Healthy  bool
	// RetryAfter is what is left of the wait the endpoint asked for
	// (Retry-After); 0: none.
	RetryAfter time.Duration
	// Server is the server's own figures; ok false when it serves none.
	Server ServerLoad
}

// ServerLoad is what an inference server reports of its own load.
type ServerLoad struct {
	OK bool
	// Running and Waiting are requests decoding and queued on the server;
	// KVCache is the share of the KV cache in use (0–1).
	Running, Waiting, KVCache float64
	// Counted is true when the server reports its token counters
	// (vllm:prompt_tokens_total, vllm:generation_tokens_total): the
	// tokens it prefilled and generated since it started.
	Counted                 bool
	PromptTokens, GenTokens float64
}

// RetryAfterWait is the longest wait an endpoint asked for (Retry-After)
// that is not over yet; 0 when none.
func (s Snapshot) RetryAfterWait() time.Duration {
	var w time.Duration
	for _, e := range s.Endpoints {
		w = max(w, e.RetryAfter)
	}
	return w
}

// Resolved is the rollouts that left the loop.
func (s Snapshot) Resolved() int64 { return s.OK + s.Errors + s.Cancelled + s.Filtered }

// KeepRate is the share of finished groups kept (0 before any finished).
func (s Snapshot) KeepRate() float64 {
	if s.GroupsFinished == 0 {
		return 0
	}
	return float64(s.GroupsKept) / float64(s.GroupsFinished)
}

// ETA estimates the time left: to the kept target at the keep rate and
// group rate seen so far, else to the end of source.limit at the task
// rate; ok is false when neither is known.
func (s Snapshot) ETA() (left time.Duration, ok bool) {
	secs := s.Elapsed.Seconds()
	switch {
	case s.Target > 0 && s.GroupsKept > 0 && secs > 0:
		rate := float64(s.GroupsKept) / secs
		return time.Duration(float64(s.Target-s.GroupsKept) / rate * float64(time.Second)), true
	case s.TaskLimit > 0 && s.GroupsFinished > 0 && secs > 0:
		rate := float64(s.GroupsFinished) / secs
		return time.Duration(float64(s.TaskLimit-int64(s.GroupsFinished)) / rate * float64(time.Second)), true
	}
	return 0, false
}

// Rate is per-second throughput: rollouts resolved and tokens generated.
func (s Snapshot) Rate() (rollouts, tokens float64) {
	secs := s.Elapsed.Seconds()
	if secs <= 0 {
		return 0, 0
	}
	return float64(s.Resolved()) / secs, float64(s.CompletionTokens) / secs
}

// Snapshot reads the run's counters now. Safe while the run goes.
func (r *Tracker) Snapshot() Snapshot {
	st := r.Counters
	s := Snapshot{
		TasksRead: st.tasks.Load(), TaskLimit: r.cfg.Source.Limit,
		Dispatched: st.dispatched.Load(), OK: st.ok.Load(), Errors: st.errored.Load(),
		Cancelled: st.cancelled.Load(), Filtered: st.filtered.Load(),
		Target: r.cfg.Groups.Target, CompletionTokens: st.completionTokens.Load(),
		RowsCommitted: st.written.Load(), FilesCommitted: st.filesCommitted.Load(),
		TasksResumed: st.skipped.Load(),
	}
	s.Cost, _, s.Priced = r.costNow()
	if f, ok := r.inputFraction(); ok {
		s.InputFraction = f
	}
	r.lifeMu.Lock()
	started, sc, srv := r.started, r.scraper, r.srv
	r.lifeMu.Unlock()
	if !started.IsZero() {
		s.Elapsed = time.Since(started)
	}
	s.CancelledRequests, s.CancelledTokensEstimate = r.in.Requests()
	s.ServerTokens = -1
	if n, ok := sc.generated(); ok && srv.ok && n >= srv.start {
		s.ServerTokens = int64(n - srv.start)
	}
	st.mu.Lock()
	s.GroupsFinished, s.GroupsKept = st.groups, st.kept
	s.Dropped, s.ErrorClasses = maps.Clone(st.dropped), maps.Clone(st.errClasses)
	st.mu.Unlock()
	if r.in.Busy != nil {
		s.InGeneration, s.InEnvironment = r.in.Busy()
	}
	s.Queues = r.in.Queues()
	s.Hosted = r.in.Hosted()
	if r.in.Gateway != nil {
		if g, ok := r.in.Gateway(); ok {
			s.Gateway = &g
		}
	}
	if c := r.in.HTTP(); c != nil {
		for i, e := range c.Stats() {
			s.Endpoints = append(s.Endpoints, EndpointLoad{
				Endpoint: pipeline.RedactURLs(e.Endpoint), InFlight: e.InFlight, Requests: e.Requests,
				Retries: e.Retries, Failures: e.Failures, Moved: e.Moved, Canaries: e.Canaries, Healthy: e.Healthy, RetryAfter: e.RetryAfter,
				Server: sc.load(i),
			})
		}
	}
	return s
}

// scraper polls each HTTP endpoint's own /metrics (vLLM serves them at the
// server's root) for its running and waiting requests and KV-cache use.
// An endpoint that serves none is asked once.
type scraper struct {
	client *http.Client
	urls   []string

	mu    sync.Mutex
	loads []ServerLoad
	none  []bool
}

func newScraper(endpoints []string) *scraper {
	s := &scraper{client: &http.Client{Timeout: 2 * time.Second}}
	for _, e := range endpoints {
		root := strings.TrimSuffix(strings.TrimSuffix(e, "/"), "/v1")
		s.urls = append(s.urls, root+"/metrics")
	}
	s.loads = make([]ServerLoad, len(s.urls))
	s.none = make([]bool, len(s.urls))
	return s
}

func (s *scraper) load(i int) ServerLoad {
	if s == nil {
		return ServerLoad{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if i < len(s.loads) {
		return s.loads[i]
	}
	return ServerLoad{}
}

// generated sums the endpoints' generation-token counters as last polled;
// ok is false unless every endpoint reports one.
func (s *scraper) generated() (n float64, ok bool) {
	if s == nil {
		return 0, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.loads {
		if !l.Counted {
			return 0, false
		}
		n += l.GenTokens
	}
	return n, len(s.loads) > 0
}

// run polls every interval until ctx ends.
func (s *scraper) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		s.poll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *scraper) poll(ctx context.Context) {
	for i, u := range s.urls {
		s.mu.Lock()
		skip := s.none[i]
		s.mu.Unlock()
		if skip {
			continue
		}
		load, served := s.fetch(ctx, u)
		s.mu.Lock()
		s.loads[i] = load
		s.none[i] = !served
		s.mu.Unlock()
	}
}

// fetch reads one endpoint's metrics; served is false when it has none
// (any answer but 200), true on a transient failure.
func (s *scraper) fetch(ctx context.Context, u string) (load ServerLoad, served bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return load, false
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return load, true
	}
	defer func() { _ = resp.Body.Close() }() // best effort: a response body, read
	if resp.StatusCode != http.StatusOK {
		return load, false
	}
	return parseServerMetrics(resp.Body), true
}

// parseServerMetrics reads vLLM's gauges from its Prometheus text:
// requests running and waiting (summed over label sets), and the KV
// cache's use (vllm:kv_cache_usage_perc, or vllm:gpu_cache_usage_perc of
// older versions).
func parseServerMetrics(r io.Reader) ServerLoad {
	var l ServerLoad
	// vLLM's names hold colons (vllm:num_requests_running): UTF-8
	// validation takes them, as the legacy one does.
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil && len(fams) == 0 {
		return l
	}
	value := func(m *dto.Metric) float64 {
		switch {
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue()
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue()
		case m.GetUntyped() != nil:
			return m.GetUntyped().GetValue()
		}
		return 0
	}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			v := value(m)
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				// Not a count or a share: a server's bad sample is left
				// out rather than carried into the live view.
				continue
			}
			switch name {
			case "vllm:num_requests_running":
				l.Running += v
				l.OK = true
			case "vllm:num_requests_waiting":
				l.Waiting += v
				l.OK = true
			case "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc":
				l.KVCache = max(l.KVCache, v)
				l.OK = true
			case "vllm:prompt_tokens_total", "vllm:prompt_tokens":
				l.PromptTokens += v
				l.Counted = true
			case "vllm:generation_tokens_total", "vllm:generation_tokens":
				l.GenTokens += v
				l.Counted = true
			}
		}
	}
	return l
}
