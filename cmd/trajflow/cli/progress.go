package cli

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"golang.org/x/term"

	"github.com/trajflow/trajflow/runner"
)

// liveTerminal reports whether w is a terminal the live view can draw on:
// one that reports a size. A terminal that reports 0×0 (some CI runners
// and serial consoles) gets the plain progress line instead.
func liveTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return false
	}
	cols, rows, err := term.GetSize(int(f.Fd()))
	return err == nil && cols > 0 && rows > 0
}

// liveView draws a run's progress on a terminal as a few live lines (mpb):
//
//	tasks     1840 read / 5000   [=====>------]  ETA 1m12s
//	rollouts  7210 done, 144 in flight (gen 128, env 16)   [=======>----]
//	groups    kept 310/500, keep rate 0.41, dropped: nonzero_std 402
//	errors    12 (http 10, timeout 2)   tokens/s 48213   rollouts/s 120.4
//	endpoint  http://gpu-0:8000/v1  in flight 64  server: running 61, waiting 3, KV 0.71
type liveView struct {
	p *mpb.Progress

	mu   sync.Mutex
	snap runner.Snapshot

	tasks, rollouts *mpb.Bar
	lines           []*mpb.Bar
	endpoints       bool // the endpoint lines were added
}

// endpointLines is how many endpoints the view lists.
const endpointLines = 4

func newLiveView(w io.Writer) *liveView {
	v := &liveView{p: mpb.New(mpb.WithOutput(w), mpb.WithWidth(28), mpb.WithRefreshRate(250*time.Millisecond), mpb.WithAutoRefresh())}
	v.tasks = v.p.New(0, mpb.BarStyle(),
		mpb.PrependDecorators(decor.Any(func(decor.Statistics) string {
			v.mu.Lock()
			defer v.mu.Unlock()
			if v.snap.TaskLimit > 0 {
				return fmt.Sprintf("tasks     %d read / %d", v.snap.TasksRead, v.snap.TaskLimit)
			}
			return fmt.Sprintf("tasks     %d read", v.snap.TasksRead)
		}, decor.WCSyncSpaceR)),
		mpb.AppendDecorators(decor.Any(func(decor.Statistics) string {
			v.mu.Lock()
			defer v.mu.Unlock()
			if left, ok := v.snap.ETA(); ok {
				return "ETA " + left.Round(time.Second).String()
			}
			return "ETA -"
		})))
	v.rollouts = v.p.New(0, mpb.BarStyle(),
		mpb.PrependDecorators(decor.Any(func(decor.Statistics) string {
			v.mu.Lock()
			defer v.mu.Unlock()
			s := v.snap
			return fmt.Sprintf("rollouts  %d done, %d in flight (gen %d, env %d)", s.Resolved(), s.Dispatched-s.Resolved(), s.InGeneration, s.InEnvironment)
		}, decor.WCSyncSpaceR)))
	v.lines = append(v.lines, v.text(groupsLine), v.text(ratesLine))
	return v
}

// line adds a line of text f draws.
func (v *liveView) line(f func() string) {
	v.lines = append(v.lines, v.p.New(0, mpb.NopStyle(), mpb.PrependDecorators(decor.Any(func(decor.Statistics) string { return f() }))))
}

// text adds a line of text drawn from the latest snapshot.
func (v *liveView) text(f func(runner.Snapshot) string) *mpb.Bar {
	return v.p.New(0, mpb.NopStyle(), mpb.PrependDecorators(decor.Any(func(decor.Statistics) string {
		v.mu.Lock()
		defer v.mu.Unlock()
		return f(v.snap)
	})))
}

// update shows s.
func (v *liveView) update(s runner.Snapshot) {
	v.mu.Lock()
	v.snap = s
	v.mu.Unlock()
	if !v.endpoints && len(s.Endpoints) > 0 {
		v.endpoints = true
		for i := range min(len(s.Endpoints), endpointLines) {
			v.lines = append(v.lines, v.text(func(s runner.Snapshot) string { return endpointLine(s, i) }))
		}
	}
	total := max(s.TaskLimit, s.TasksRead)
	v.tasks.SetTotal(total, false)
	v.tasks.SetCurrent(s.TasksRead)
	v.rollouts.SetTotal(max(s.Dispatched, 1), false)
	v.rollouts.SetCurrent(s.Resolved())
}

// done completes the view with the last snapshot and waits until drawn.
func (v *liveView) done() {
	for _, b := range append([]*mpb.Bar{v.tasks, v.rollouts}, v.lines...) {
		b.SetTotal(-1, true)
	}
	v.p.Wait()
}

func groupsLine(s runner.Snapshot) string {
	kept := fmt.Sprint(s.GroupsKept)
	if s.Target > 0 {
		kept = fmt.Sprintf("%d/%d", s.GroupsKept, s.Target)
	}
	line := fmt.Sprintf("groups    kept %s of %d finished, keep rate %.2f", kept, s.GroupsFinished, s.KeepRate())
	if len(s.Dropped) > 0 {
		line += ", dropped: " + counts(s.Dropped)
	}
	return line
}

func ratesLine(s runner.Snapshot) string {
	rollouts, tokens := s.Rate()
	errs := fmt.Sprintf("errors    %d", s.Errors)
	if len(s.ErrorClasses) > 0 {
		errs += " (" + counts(s.ErrorClasses) + ")"
	}
	line := fmt.Sprintf("%s   tokens/s %.0f   rollouts/s %.1f   rows committed %d%s", errs, tokens, rollouts, s.RowsCommitted, s.CostText())
	if s.CancelledRequests > 0 {
		line += fmt.Sprintf("   cancelled in flight %d (~%d tokens)", s.CancelledRequests, s.CancelledTokensEstimate)
	}
	if s.ServerTokens >= 0 {
		line += fmt.Sprintf("   tokens %d (servers' count %d)", s.CompletionTokens, s.ServerTokens)
	}
	if w := s.RetryAfterWait(); w >= time.Second {
		line += fmt.Sprintf("   waiting on Retry-After %s", w.Round(time.Second))
	}
	return line + hostedText(s.Hosted)
}

// hostedText is the rate limiter's, the response cache's and the Batch
// API's part of the progress line ("" when the run uses none).
func hostedText(h runner.HostedStats) string {
	var b strings.Builder
	for _, p := range h.Parts() {
		b.WriteString("   " + p)
	}
	return b.String()
}

func endpointLine(s runner.Snapshot, i int) string {
	if i >= len(s.Endpoints) {
		return ""
	}
	e := s.Endpoints[i]
	line := fmt.Sprintf("endpoint  %s  in flight %d", e.Endpoint, e.InFlight)
	if !e.Healthy {
		line += " (out, probing)"
	}
	if e.RetryAfter >= time.Second {
		line += fmt.Sprintf("  asked to wait %s (Retry-After)", e.RetryAfter.Round(time.Second))
	}
	if e.Server.OK {
		line += fmt.Sprintf("  server: running %.0f, waiting %.0f, KV cache %.0f%%", e.Server.Running, e.Server.Waiting, 100*e.Server.KVCache)
	}
	if i == endpointLines-1 && len(s.Endpoints) > endpointLines {
		line += fmt.Sprintf("  (+%d more)", len(s.Endpoints)-endpointLines)
	}
	return line
}

// counts lists a count map as "a 3, b 1", largest first.
func counts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] || m[keys[i]] == m[keys[j]] && keys[i] < keys[j] })
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}
