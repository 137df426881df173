package runstats

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/runner/metrics"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/sources"
	"github.com/trajflow/trajflow/stages/generate"
	"github.com/trajflow/trajflow/stages/groups"
)

// Counters count a run's work as it goes. Counters are read by the progress
// line while the pipeline writes them.
type Counters struct {
	tasks, rejected, skipped, dispatched, written atomic.Int64
	filesCommitted, groupsCommitted               atomic.Int64
	// invalidUTF8 counts input rows whose invalid UTF-8 was replaced.
	invalidUTF8                      atomic.Int64
	ok, errored, cancelled, filtered atomic.Int64
	completionTokens, keptTokens     atomic.Int64
	// billed counts the tokens billed for, for the cost.
	billed billed
	// keptGenerated counts the rollouts of kept groups that generated a
	// token; contextTruncated the ok rollouts a later turn's
	// context-length refusal ended.
	keptGenerated, contextTruncated atomic.Int64

	mu           sync.Mutex
	groups, kept int
	// unfiltered counts the kept groups that groups.on_exhausted:
	// keep_unfiltered kept without the keep rule.
	unfiltered int
	dropped    map[string]int
	rewardSum  float64
	rewardN    int
	errClasses map[string]int
	lastError  string
}

// NewCounters are a run's counters, at zero.
func NewCounters() *Counters {
	return &Counters{dropped: map[string]int{}, errClasses: map[string]int{}}
}

// Resolve counts a rollout that left the loop.
func (s *Counters) Resolve(r *pipeline.Rollout) {
	s.completionTokens.Add(int64(r.CompletionTokens))
	s.billed.add(r)
	switch r.Status {
	case pipeline.StatusOK:
		s.ok.Add(1)
		if r.FinishReason == generate.FinishContextLength {
			s.contextTruncated.Add(1)
		}
	case pipeline.StatusError:
		s.errored.Add(1)
		s.mu.Lock()
		s.errClasses[r.ErrorClass]++
		s.lastError = r.Error
		s.mu.Unlock()
	case pipeline.StatusCancelled:
		s.cancelled.Add(1)
	}
}

// Group counts a finished group after its keep rule ran.
func (s *Counters) Group(g *pipeline.Group) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.groups++
	if !g.Kept {
		s.dropped[g.FilterReason]++
		for _, r := range g.Rollouts {
			if r.Status == pipeline.StatusFiltered {
				s.filtered.Add(1)
				s.ok.Add(-1) // counted ok when it left the loop
			}
		}
		return
	}
	s.kept++
	if strings.HasPrefix(g.FilterReason, groups.ReasonUnfiltered) {
		s.unfiltered++
	}
	for _, r := range g.Rollouts {
		s.keptTokens.Add(int64(r.CompletionTokens))
		if generated(r) {
			s.keptGenerated.Add(1)
		}
		if r.Status == pipeline.StatusOK {
			s.rewardSum += r.Reward
			s.rewardN++
		}
	}
}

// CutOff counts a group a stop cut off: it is not committed, so each of
// its members, whatever it resolved as, counts as cancelled.
func (s *Counters) CutOff(g *pipeline.Group) {
	for _, r := range g.Rollouts {
		switch r.Status {
		case pipeline.StatusOK:
			s.ok.Add(-1)
		case pipeline.StatusError:
			s.errored.Add(-1)
			// The classes count what the error count counts.
			s.mu.Lock()
			if s.errClasses[r.ErrorClass]--; s.errClasses[r.ErrorClass] <= 0 {
				delete(s.errClasses, r.ErrorClass)
			}
			s.mu.Unlock()
		case pipeline.StatusCancelled:
			continue
		}
		s.cancelled.Add(1)
	}
}

// Progress reports the run's progress every run.progress until stopped:
// to Options.Progress when set (once more when stopped), else as a line on
// stderr. It also polls the endpoints' own metrics when asked to.
func (r *Tracker) Progress(ctx context.Context) (stop func()) {
	every := r.cfg.Run.Progress.D()
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	if r.scraper != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.scraper.run(ctx, max(every, time.Second))
		}()
	}
	if every > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					if r.in.Progress != nil {
						r.in.Progress(r.Snapshot())
					} else {
						fmt.Fprintln(r.in.Stderr, r.progressLine())
					}
				}
			}
		}()
	}
	return func() {
		cancel()
		wg.Wait()
		if r.in.Progress != nil {
			r.in.Progress(r.Snapshot())
		}
	}
}

func (r *Tracker) progressLine() string {
	s := r.Counters
	el := time.Since(r.started)
	resolved := s.ok.Load() + s.errored.Load() + s.cancelled.Load()
	rate := float64(resolved) / el.Seconds()
	line := fmt.Sprintf("trajflow: %s tasks read %d, rollouts done %d/%d, errors %d, rows committed %d, %.1f rollouts/s",
		el.Round(time.Second), s.tasks.Load(), resolved, s.dispatched.Load(), s.errored.Load(), s.written.Load(), rate)
	snap := r.Snapshot()
	if snap.CancelledRequests > 0 {
		line += fmt.Sprintf(", cancelled in flight %d (~%d tokens)", snap.CancelledRequests, snap.CancelledTokensEstimate)
	}
	if w := snap.RetryAfterWait(); w > 0 {
		line += fmt.Sprintf(", an endpoint asked to wait %s more (Retry-After)", w.Round(time.Second))
	}
	for _, p := range r.in.Hosted().Parts() {
		line += ", " + p
	}
	return line + snap.CostText()
}

// CostText is ", cost C (projected total P)" for a run with a price
// (generate.price), "" without.
func (s Snapshot) CostText() string {
	if !s.Priced {
		return ""
	}
	text := ", cost " + metrics.FormatCost(s.Cost)
	if p, ok := s.ProjectedCost(); ok {
		text += " (projected total " + metrics.FormatCost(p) + ")"
	}
	return text
}

// Summary is what a run did.
type Summary struct {
	RunID string
	// Dir is the directory the run wrote: the output directory, or for a
	// sharded run its shard's directory under it.
	Dir string
	// Shard is the shard the run read (index, count, and the environment
	// variables it came from with source.shard: auto); its Count is 1 for
	// a run that is not sharded.
	Shard    sources.Shard
	Files    []string
	Duration time.Duration
	// Metrics is the path of metrics.json, "" when none was written (no
	// committed data).
	Metrics string
	// Steps is the steps directory (output.steps), "" when the run wrote
	// none. Each of Files has its steps file there, of the same name.
	Steps string
	// Tasks read, bad rows skipped into the rejects file, and tasks skipped
	// because an earlier run of the output directory committed them.
	Tasks, Rejected, Resumed int64
	// Target is groups.target (0: none); EarlierKept the kept groups that
	// earlier runs of the output directory committed, which count towards
	// it. A run started with EarlierKept >= Target has nothing to do.
	Target, EarlierKept int
	// InvalidUTF8 counts input rows that held invalid UTF-8, which was
	// replaced by U+FFFD before the row was read.
	InvalidUTF8 int64
	// Rollouts dispatched into the pipeline and how each resolved.
	Dispatched, OK, Errors, Cancelled, Filtered int64
	// Rows committed to the data files: rows of a file not committed when
	// the run ended (an abort) are not counted.
	Rows int64
	// Groups finished, kept, and dropped by reason.
	Groups, Kept int
	// CommittedGroups are the groups of the rows committed to the data
	// files; when a run stops on an error, kept groups whose file was not
	// committed are not among them (a resume redoes those).
	CommittedGroups int
	// Unfiltered counts the kept groups that groups.on_exhausted:
	// keep_unfiltered kept without the keep rule (included in Kept).
	Unfiltered   int
	Dropped      map[string]int
	ErrorClasses map[string]int
	// MeanReward is over the ok rollouts of kept groups.
	MeanReward float64
	// Completion tokens generated, and those in kept groups.
	CompletionTokens, KeptTokens int64
	// Cost is what this run's requests cost (generate.price: every
	// resolved rollout's billed tokens, metrics.BilledOf, less those of
	// the answers from generate.cache, which sent nothing), when Priced;
	// ProjectedCost what the whole run would, when it stopped early and an
	// estimate is known (else Cost); CacheSaved what the cache's answers
	// would have cost.
	Cost, ProjectedCost, CacheSaved float64
	Priced                          bool
	// CancelledRequests are the requests in flight when their trajectory
	// was cancelled (a stop, groups.on_target: cancel, a timeout): the
	// server generated part of an answer nobody reads, counted in no
	// token figure above. CancelledTokensEstimate estimates that part
	// (generate.RequestStats).
	CancelledRequests, CancelledTokensEstimate int64
	// ServerTokens is the growth of the endpoints' own generation-token
	// counter (vLLM's vllm:generation_tokens_total) over the run, which
	// counts the cancelled requests' partial output too; -1 when an
	// endpoint reports none (or the endpoints are not HTTP).
	ServerTokens int64
	// ContextTruncated counts the ok rollouts that ended truncated because
	// the server refused a later turn's prompt as longer than its context
	// (finish reason context_length; the row's error says so). A refusal
	// of the first prompt is an error of class context_length instead.
	ContextTruncated int64
	// Interrupted is true when the run stopped before its input ended.
	Interrupted bool
	// Stop says why the run stopped before its input ended ("" when it
	// did not stop early): a signal, a fatal error, the circuit breaker or
	// run.max_error_rate.
	Stop string
	// Hosted is the response cache's, the rate limiter's and the Batch
	// API's figures.
	Hosted HostedStats
}

// Summary is what the run did, ended by err (nil: it ran to its end).
func (r *Tracker) Summary(err error) *Summary {
	// The estimate of a run stopped early (snapshot takes the lock).
	proj, projOK := r.Snapshot().ProjectedCost()
	s := r.Counters
	s.mu.Lock()
	defer s.mu.Unlock()
	sum := &Summary{
		RunID: r.cfg.Run.ID, Dir: r.in.Display(r.cfg.Output.Dir), Shard: r.cfg.Source.Shard, Files: r.files, Duration: time.Since(r.started),
		Metrics: r.in.Display(existing(filepath.Join(r.cfg.Output.Dir, schema.MetricsFile))),
		Steps:   r.in.Display(r.stepsDir()),
		Tasks:   s.tasks.Load(), Rejected: s.rejected.Load(), Resumed: s.skipped.Load(),
		Target: r.cfg.Groups.Target, EarlierKept: r.in.EarlierKept(),
		InvalidUTF8: s.invalidUTF8.Load(),
		Dispatched:  s.dispatched.Load(), OK: s.ok.Load(), Errors: s.errored.Load(),
		Cancelled: s.cancelled.Load(), Filtered: s.filtered.Load(), Rows: s.written.Load(),
		Groups: s.groups, Kept: s.kept, CommittedGroups: int(s.groupsCommitted.Load()), Unfiltered: s.unfiltered, Dropped: maps.Clone(s.dropped), ErrorClasses: maps.Clone(s.errClasses),
		CompletionTokens: s.completionTokens.Load(), KeptTokens: s.keptTokens.Load(),
		ContextTruncated: s.contextTruncated.Load(),
		ServerTokens:     -1,
		Interrupted:      err != nil,
	}
	if cause := r.in.Stop(); cause != nil {
		sum.Stop = cause.Error()
	}
	sum.Hosted = r.in.Hosted()
	sum.CancelledRequests, sum.CancelledTokensEstimate = r.in.Requests()
	if srv := r.server(); srv.known {
		sum.ServerTokens = srv.generated
	}
	if s.rewardN > 0 {
		sum.MeanReward = s.rewardSum / float64(s.rewardN)
	}
	sum.Cost, sum.CacheSaved, sum.Priced = r.costNow()
	sum.ProjectedCost = sum.Cost
	if err != nil && projOK {
		sum.ProjectedCost = proj
	}
	// Rollouts dispatched but never resolved were cut off by the
	// interruption: they count as cancelled.
	if lost := sum.Dispatched - sum.OK - sum.Errors - sum.Cancelled - sum.Filtered; lost > 0 {
		sum.Cancelled += lost
	}
	return sum
}

// String is the summary as the command prints it.
func (s *Summary) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "run %s: %d tasks, %d rollouts (%d ok, %d error, %d cancelled, %d filtered) in %s\n",
		s.RunID, s.Tasks, s.Dispatched, s.OK, s.Errors, s.Cancelled, s.Filtered, s.Duration.Round(time.Millisecond))
	if s.Shard.Count > 1 {
		fmt.Fprintf(&b, "shard: %d of %d", s.Shard.Index, s.Shard.Count)
		if s.Shard.From != "" {
			fmt.Fprintf(&b, " (%s)", s.Shard.From)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "groups: %d finished, %d kept", s.Groups, s.Kept)
	if s.Interrupted && s.CommittedGroups < s.Kept {
		// A commit failed (a full disk, say): the groups of the files
		// not committed are kept but lost to this run.
		fmt.Fprintf(&b, " (%d of them committed; the other %d were in files the run stopped before committing, and a resume redoes them)",
			s.CommittedGroups, s.Kept-s.CommittedGroups)
	}
	if s.Unfiltered > 0 {
		fmt.Fprintf(&b, " (%d of them unfiltered: the input ran out short of the target)", s.Unfiltered)
	}
	for _, k := range slices.Sorted(maps.Keys(s.Dropped)) {
		fmt.Fprintf(&b, ", %d dropped (%s)", s.Dropped[k], k)
	}
	fmt.Fprintf(&b, "\nrows written: %d, mean reward %.4f\n", s.Rows, s.MeanReward)
	if len(s.ErrorClasses) > 0 {
		b.WriteString("errors by class:" + classCounts(s.ErrorClasses) + "\n")
	}
	if s.ContextTruncated > 0 {
		fmt.Fprintf(&b, "context-length refusals after the first turn: %d (those rows end truncated with their earlier turns)\n", s.ContextTruncated)
	}
	if s.Stop != "" {
		fmt.Fprintf(&b, "stopped early: %s\n", s.Stop)
	}
	if s.Resumed > 0 {
		fmt.Fprintf(&b, "resumed: %d tasks already committed were skipped\n", s.Resumed)
	}
	switch {
	case s.Target > 0 && s.EarlierKept >= s.Target:
		fmt.Fprintf(&b, "target: already reached by earlier runs (%d kept groups committed, target %d); nothing to do\n", s.EarlierKept, s.Target)
	case s.Target > 0 && s.EarlierKept > 0:
		fmt.Fprintf(&b, "target: %d kept groups of %d (%d by earlier runs, %d by this run)\n", s.EarlierKept+s.Kept, s.Target, s.EarlierKept, s.Kept)
	}
	if s.Rejected > 0 {
		fmt.Fprintf(&b, "bad rows skipped: %d (see %s/%s)\n", s.Rejected, s.Dir, schema.RejectsFile)
	}
	if s.InvalidUTF8 > 0 {
		fmt.Fprintf(&b, "input rows with invalid UTF-8: %d (each run of bad bytes replaced by U+FFFD)\n", s.InvalidUTF8)
	}
	fmt.Fprintf(&b, "tokens generated: %d (answered requests), in kept groups: %d\n", s.CompletionTokens, s.KeptTokens)
	if s.CancelledRequests > 0 {
		fmt.Fprintf(&b, "requests cancelled in flight: %d, their partial output about %d tokens (estimated, counted above nowhere)\n", s.CancelledRequests, s.CancelledTokensEstimate)
	}
	if s.ServerTokens >= 0 {
		fmt.Fprintf(&b, "the servers' own count of tokens generated during the run: %d\n", s.ServerTokens)
	}
	b.WriteString(s.hostedLines())
	if s.Priced {
		fmt.Fprintf(&b, "cost: %s", metrics.FormatCost(s.Cost))
		if s.ProjectedCost != s.Cost {
			fmt.Fprintf(&b, " (projected total %s)", metrics.FormatCost(s.ProjectedCost))
		}
		// The same rows as metrics.json's cost, for a run that starts its
		// output directory without generate.cache.
		b.WriteString(" (generate.price; every request of this run: data, filtered and error rows")
		if s.CacheSaved > 0 {
			fmt.Fprintf(&b, "; not counted: %d answers from generate.cache, worth %s", s.Hosted.CacheHits, metrics.FormatCost(s.CacheSaved))
		}
		b.WriteString(")\n")
	}
	fmt.Fprintf(&b, "output: %s/%s (%d files this run), metrics: %s\n", s.Dir, schema.DataDir, len(s.Files), cmp.Or(s.Metrics, "none (nothing committed to "+schema.DataDir+"/)"))
	if s.Steps != "" {
		fmt.Fprintf(&b, "step rows: %s (a steps file beside each data file)\n", s.Steps)
	}
	return b.String()
}

// stepsDir is the steps directory when the run has one with a committed
// file, else "".
func (r *Tracker) stepsDir() string {
	if !r.cfg.Output.Steps {
		return ""
	}
	dir := filepath.Join(r.cfg.Output.Dir, schema.StepsDir)
	if m, _ := filepath.Glob(filepath.Join(dir, schema.PartGlob)); len(m) == 0 {
		return ""
	}
	return dir
}

// classCounts are counts by class as " a=1 b=2", classes sorted.
func classCounts(m map[string]int) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(&b, " %s=%d", k, m[k])
	}
	return b.String()
}

// existing is path when a file is there, else "".
func existing(path string) string {
	if _, err := os.Stat(path); err != nil {
		return ""
	}
	return path
}
