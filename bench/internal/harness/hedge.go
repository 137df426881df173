package harness

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Rank is how a Hedge orders the requests that want a batch slot (past
// the probe, when Hedge.Probe is set).
type Rank int

const (
	// RankInput keeps input order: the server's FIFO, FirstKept's.
	RankInput Rank = iota
	// RankLeast serves the least attained service first, in quanta of
	// Hedge.Quantum tokens: a multi-level feedback queue, round robin
	// over the quanta when Hedge.Preempt is set.
	RankLeast
	// RankMost serves the most attained service first: a request that has
	// run long (likely long, or capped) keeps its slot.
	RankMost
	// RankSibling serves the highest estimated length first: the group's
	// length factor estimated from its finished members' log lengths
	// (lengths share it), or the request's own decoded tokens when more.
	RankSibling
)

// String names r as the model's rows do.
func (r Rank) String() string {
	switch r {
	case RankLeast:
		return "least served"
	case RankMost:
		return "most served"
	case RankSibling:
		return "sibling length"
	}
	return "input order"
}

// Hedge is one length-blind dynamic-sampling policy of HedgeModel. Every
// decision reads only what a live client knows at that step: each
// request's tokens decoded so far, its group's finished members (their
// lengths and correctness), and the input order; never a length or a
// verdict before it is revealed.
type Hedge struct {
	// Probe > 0 ranks first the requests that have decoded fewer than
	// Probe tokens (every request gets a probe before any runs on).
	Probe int
	// Members > 0 staggers each group: its first Members requests rank
	// before every later member of any group, so each group's first
	// members run (and reveal the group's length factor) before the rest.
	Members int
	// Rank orders the requests past the probe (all of them when Probe is
	// 0); Quantum is RankLeast's.
	Rank    Rank
	Quantum int
	// Preempt lets a better-ranked waiting request take the slot of the
	// worst-ranked running one when the batch is full (vLLM's priority
	// scheduling); the preempted request is recomputed when it resumes,
	// its prompt and generated tokens prefilled at Cost.P a token.
	Preempt bool
	// Swap resumes a preempted request without recomputing it (its KV
	// cache kept, as a server that swaps instead of recomputing would):
	// a counterfactual, the simulator recomputes.
	Swap bool
	// Cancel is FirstKept's cancellation of the undecided groups.
	Cancel Cancel
	// Age > 0 hedges late groups: a running group none of whose members
	// has finished after its oldest member decoded Age tokens is cancelled
	// while the kept and decided groups, and the other undecided groups in
	// flight at the keep rate seen so far, still hold the target plus
	// Cancel.Spare.
	Age int
	// Surplus cancels decided groups beyond the target plus Cancel.Spare
	// (the kept ones count first), those with the most members unfinished
	// first: over-admission that keeps the candidates likely to finish
	// first.
	Surplus bool
	// Replace starts the next input group, beyond the first M, for every
	// group Age or Surplus cancels, and tops up: whenever the kept and
	// decided groups and the undecided ones in flight at the keep rate
	// seen so far fall short of the target plus Cancel.Spare, it starts
	// groups until they do not.
	Replace bool
	// Over > 0 bounds Age's hedging: it cancels no group once the groups
	// started reach Over × (target + Cancel.Spare) ÷ the keep rate seen
	// so far (the input budget of an over-admitting client; Over 1.2
	// allows a fifth more groups than the expected need), and the run
	// goes on as without Age.
	Over float64
	// From > 0 holds Age's hedging back until the kept and decided groups
	// reach From × target: only the groups still running late are hedged.
	From float64
	// Prior is the keep rate the run assumes before its groups finish
	// (a client takes it from earlier steps; 0: ½), weighed as two
	// groups: the keep rate seen so far is (kept + 2·Prior) ÷
	// (finished + 2).
	Prior float64
	// Median is RankSibling's prior median length in tokens (a client
	// takes it from earlier steps; 0: 2000).
	Median float64
}

// String describes h as the model's rows do.
func (h Hedge) String() string {
	var parts []string
	if h.Probe > 0 {
		parts = append(parts, fmt.Sprintf("probe %d", h.Probe))
	}
	if h.Members > 0 {
		parts = append(parts, fmt.Sprintf("first %d members", h.Members))
	}
	rank := h.Rank.String()
	if h.Rank == RankLeast {
		rank += fmt.Sprintf(" (quantum %d)", h.Quantum)
	}
	parts = append(parts, rank)
	if h.Preempt {
		parts = append(parts, "preempt")
	}
	if h.Swap {
		parts = append(parts, "swap (no recompute)")
	}
	switch {
	case h.Cancel.On && h.Cancel.Spare > 0:
		parts = append(parts, fmt.Sprintf("cancel undecided, spare %d", h.Cancel.Spare))
	case h.Cancel.On:
		parts = append(parts, "cancel undecided")
	case h.Cancel.Spare > 0:
		parts = append(parts, fmt.Sprintf("spare %d", h.Cancel.Spare))
	}
	if h.Age > 0 {
		parts = append(parts, fmt.Sprintf("age %d", h.Age))
	}
	if h.Surplus {
		parts = append(parts, "cancel surplus decided")
	}
	if h.Replace {
		parts = append(parts, "replace")
	}
	if h.Over > 0 {
		parts = append(parts, fmt.Sprintf("over %.2f", h.Over))
	}
	if h.From > 0 {
		parts = append(parts, fmt.Sprintf("from %.2f·K", h.From))
	}
	if h.Prior > 0 {
		parts = append(parts, fmt.Sprintf("prior keep %.2g", h.Prior))
	}
	return strings.Join(parts, ", ")
}

// ordered reports whether h ranks the line other than in input order.
func (h Hedge) ordered() bool { return h.Probe > 0 || h.Members > 0 || h.Rank != RankInput }

// HedgeResult is HedgeModel's outcome: FirstKept's figures, and what the
// policy did.
type HedgeResult struct {
	Stopped
	// Steps are the batch steps run; Started the groups started,
	// Cancelled those the policy dropped, Preempted the preemptions.
	Steps, Started, Cancelled, Preempted int
}

// errMultiTurn is HedgeModel's answer to a multi-turn trajectory.
var errMultiTurn = errors.New("harness: HedgeModel models single-turn trajectories only")

// HedgeModel is the makespan and decoded tokens of a zero-overhead
// dynamic-sampling client under policy h on the simulator's batching
// model: FirstKept's client and server (the first m groups of gs sent at
// t = 0 in order, at most conc requests in the server, stop at the
// target-th kept group to finish), with h's ranking, preemption and
// cancellations, and the groups after the first m started as h.Replace
// says. With the zero Hedge but Cancel it is FirstKept on gs[:m]. Every
// trajectory must have one turn.
func HedgeModel(gs []OracleGroup, m, target int, c Cost, conc int, h Hedge) (HedgeResult, error) {
	for _, g := range gs {
		for _, tr := range g.Trajs {
			if len(tr.Turns) > 1 {
				return HedgeResult{}, errMultiTurn
			}
		}
	}
	r := newHedgeRun(gs, target, c, conc, h)
	for range min(m, len(gs)) {
		r.start()
	}
	r.topUp()
	r.run()
	return r.out, nil
}

// hreq is what the client knows of one request: its tokens decoded so
// far, and its length and correctness once it finished. The true
// remaining length lives only in the batch model's modelReq.
type hreq struct {
	g, member, seq, gen int
	prompt              int
	done                bool
	length              int
	correct             bool
}

// hgroup is what the client knows of one group.
type hgroup struct {
	reqs                []*hreq
	left, finished      int
	first               bool
	decided, gone, over bool
	logSum              float64 // Σ ln length of the finished members
}

// hedgeRun is one HedgeModel run.
type hedgeRun struct {
	gs     []OracleGroup
	target int
	h      Hedge
	m      *batchModel
	groups []*hgroup
	byMR   map[*modelReq]*hreq
	next   int // the next input group to start
	out    HedgeResult
	// decided counts the decided groups still running; completed the
	// groups finished.
	decided, completed int
	// events records the policy's decisions, and with logFinish the
	// finishes, for the tests.
	events    []hedgeEvent
	logFinish bool
	lnMed     float64
}

// hedgeEvent is one decision of the policy, or a finish.
type hedgeEvent struct {
	step          int
	kind          byte // 's' start, 'c' cancel, 'p' preempt, 'f' finish
	group, member int
}

func newHedgeRun(gs []OracleGroup, target int, c Cost, conc int, h Hedge) *hedgeRun {
	med := h.Median
	if med <= 0 {
		med = 2000
	}
	return &hedgeRun{gs: gs, target: target, h: h, m: newBatchModel(c, conc),
		groups: make([]*hgroup, len(gs)), byMR: map[*modelReq]*hreq{}, lnMed: math.Log(med)}
}

// start sends the next input group's requests, in order.
func (r *hedgeRun) start() bool {
	if r.next >= len(r.gs) {
		return false
	}
	gi := r.next
	r.next++
	hg := &hgroup{}
	r.groups[gi] = hg
	for i, tr := range r.gs[gi].Trajs {
		if len(tr.Turns) == 0 {
			continue
		}
		u := tr.Turns[0]
		mr := &modelReq{g: gi, traj: i, remaining: max(u.Decode, 1), prompt: u.Prompt}
		q := &hreq{g: gi, member: len(hg.reqs), seq: gi*1024 + i, prompt: u.Prompt}
		hg.reqs = append(hg.reqs, q)
		r.byMR[mr] = q
		r.m.waiting = append(r.m.waiting, mr)
		hg.left++
	}
	r.out.Started++
	r.events = append(r.events, hedgeEvent{r.out.Steps, 's', gi, -1})
	return true
}

// run steps the model until the target or the end of the work.
func (r *hedgeRun) run() {
	for r.out.Kept < r.target {
		r.arrange()
		finished, ran, ok := r.m.step(func(arrival) *modelReq { return nil })
		if !ok {
			return
		}
		r.out.Steps++
		r.out.Decoded += int64(ran)
		for _, mr := range r.m.running {
			r.byMR[mr].gen++
		}
		cut := false
		for _, mr := range finished {
			cut = r.finish(mr) || cut
		}
		if cut {
			r.cancelUndecided()
		}
		if r.out.Kept < r.target {
			r.hedge()
			r.topUp()
		}
	}
}

// topUp starts groups while the expected kept groups fall short of the
// target plus the spares (Replace only).
func (r *hedgeRun) topUp() {
	if !r.h.Replace {
		return
	}
	for r.expected(-1) < float64(r.target+r.h.Cancel.Spare) && r.start() {
	}
}

// spent reports whether Over's budget of started groups is spent.
func (r *hedgeRun) spent() bool {
	return r.h.Over > 0 && float64(r.out.Started) >= r.h.Over*float64(r.target+r.h.Cancel.Spare)/r.keepRate()
}

// expected is the kept groups the run can expect: the kept, the decided
// in flight, and the undecided in flight (but group skip) at the keep
// rate seen so far.
func (r *hedgeRun) expected(skip int) float64 {
	und := 0
	for gi := range r.next {
		if gi != skip && r.live(gi) && !r.groups[gi].decided {
			und++
		}
	}
	return float64(r.out.Kept+r.decided) + r.keepRate()*float64(und)
}

// finish records a request's last token; it reports whether FirstKept's
// cancellation of the undecided groups is due.
func (r *hedgeRun) finish(mr *modelReq) bool {
	q := r.byMR[mr]
	q.gen++
	q.done = true
	q.length = q.gen
	if r.logFinish {
		r.events = append(r.events, hedgeEvent{r.out.Steps, 'f', q.g, q.member})
	}
	tr := r.gs[q.g].Trajs[mr.traj]
	q.correct = tr.Correct
	hg := r.groups[q.g]
	hg.left--
	hg.logSum += math.Log(float64(q.length))
	switch hg.finished++; {
	case hg.finished == 1:
		hg.first = q.correct
	case !hg.decided && q.correct != hg.first:
		hg.decided = true
		r.decided++
	}
	if hg.left == 0 {
		hg.over = true
		r.completed++
		if hg.decided {
			r.decided--
		}
		if r.gs[q.g].Kept {
			r.out.Kept++
			r.out.T = seconds(r.m.t + tr.Turns[0].EnvDelay.Seconds())
		}
	}
	return r.h.Cancel.On && r.out.Kept+r.decided >= r.target+r.h.Cancel.Spare
}

// live reports whether group gi is started and neither finished nor
// dropped.
func (r *hedgeRun) live(gi int) bool {
	hg := r.groups[gi]
	return hg != nil && !hg.over && !hg.gone
}

// cancelUndecided drops every undecided group still running, as FirstKept
// does.
func (r *hedgeRun) cancelUndecided() {
	for gi := range r.next {
		if r.live(gi) && !r.groups[gi].decided {
			r.drop(gi, false)
		}
	}
	r.sweep()
}

// drop marks group gi gone; replace starts the next input group when the
// policy says so. sweep takes the gone groups' requests out.
func (r *hedgeRun) drop(gi int, replace bool) {
	r.groups[gi].gone = true
	r.out.Cancelled++
	r.events = append(r.events, hedgeEvent{r.out.Steps, 'c', gi, -1})
	if replace && r.h.Replace {
		r.start()
	}
}

func (r *hedgeRun) sweep() {
	r.m.remove(func(mr *modelReq) bool { return r.groups[mr.g].gone })
}

// hedge applies the policy's own cancellations (Age, Surplus).
func (r *hedgeRun) hedge() {
	n := r.out.Cancelled
	if r.h.Age > 0 {
		r.cancelOld()
	}
	if r.h.Surplus {
		r.cancelSurplus()
	}
	if r.out.Cancelled > n {
		r.sweep()
	}
}

// keepRate is the keep rate seen so far: (kept + 2·prior) ÷
// (completed + 2), the prior ½ unless Hedge.Prior says.
func (r *hedgeRun) keepRate() float64 {
	prior := r.h.Prior
	if prior <= 0 {
		prior = 0.5
	}
	return (float64(r.out.Kept) + 2*prior) / float64(r.completed+2)
}

// oldLooking reports whether live group gi has no member finished while
// its oldest member has decoded at least Age tokens.
func (r *hedgeRun) oldLooking(gi int) bool {
	hg := r.groups[gi]
	if hg.finished > 0 || hg.decided {
		return false
	}
	oldest := 0
	for _, q := range hg.reqs {
		oldest = max(oldest, q.gen)
	}
	return oldest >= r.h.Age
}

// cancelOld drops the old-looking groups, latest started first, while the
// rest still hold the target plus the spares.
func (r *hedgeRun) cancelOld() {
	if r.spent() || float64(r.out.Kept+r.decided) < r.h.From*float64(r.target) {
		return
	}
	for gi := r.next - 1; gi >= 0; gi-- {
		if !r.live(gi) || !r.oldLooking(gi) {
			continue
		}
		if r.expected(gi) < float64(r.target+r.h.Cancel.Spare) {
			return
		}
		r.drop(gi, true)
	}
}

// cancelSurplus drops decided groups beyond the target plus the spares,
// those with the most members unfinished (then the latest started) first.
func (r *hedgeRun) cancelSurplus() {
	extra := r.out.Kept + r.decided - r.target - r.h.Cancel.Spare
	if extra <= 0 {
		return
	}
	var ds []int
	for gi := range r.next {
		if r.live(gi) && r.groups[gi].decided {
			ds = append(ds, gi)
		}
	}
	slices.SortStableFunc(ds, func(a, b int) int {
		if la, lb := r.groups[a].left, r.groups[b].left; la != lb {
			return lb - la
		}
		return b - a
	})
	for _, gi := range ds[:min(extra, len(ds))] {
		r.decided--
		r.drop(gi, true)
	}
}

// hkey is a request's rank: lower first; seq breaks ties (input order).
type hkey struct {
	lvl int
	sub float64
	seq int
}

func (a hkey) before(b hkey) bool {
	if a.lvl != b.lvl {
		return a.lvl < b.lvl
	}
	return a.sub < b.sub
}

func cmpKey(a, b hkey) int {
	switch {
	case a.before(b):
		return -1
	case b.before(a):
		return 1
	}
	return a.seq - b.seq
}

// key ranks q on what the client knows now.
func (r *hedgeRun) key(q *hreq) hkey {
	k := hkey{lvl: 2, seq: q.seq}
	switch {
	case r.h.Probe > 0 && q.gen < r.h.Probe:
		k.lvl = 0
	case q.member < r.h.Members:
		k.lvl = 1
	}
	switch r.h.Rank {
	case RankLeast:
		k.sub = float64(q.gen / max(r.h.Quantum, 1))
	case RankMost:
		k.sub = -float64(q.gen)
	case RankSibling:
		k.sub = -r.estimate(q)
	}
	return k
}

// estimate is q's estimated log length: the group's factor from its
// finished members' log lengths and its running members' decoded tokens
// past the median (lower bounds; a normal prior as wide as the
// per-sample noise, so k members weigh k ÷ (k+1)), or ln of q's decoded
// tokens when more.
func (r *hedgeRun) estimate(q *hreq) float64 {
	hg := r.groups[q.g]
	sum, k := hg.logSum-float64(hg.finished)*r.lnMed, hg.finished
	for _, s := range hg.reqs {
		if !s.done && s.gen > 0 && math.Log(float64(s.gen)) > r.lnMed {
			sum += math.Log(float64(s.gen)) - r.lnMed
			k++
		}
	}
	return max(r.lnMed+sum/float64(k+1), math.Log(float64(q.gen+1)))
}

// ranked is a request with its rank, for sorting.
type ranked struct {
	mr *modelReq
	k  hkey
}

func cmpRanked(a, b ranked) int { return cmpKey(a.k, b.k) }

// rankAll ranks rs on what the client knows now, best first.
func (r *hedgeRun) rankAll(rs []*modelReq) []ranked {
	out := make([]ranked, len(rs))
	for i, mr := range rs {
		out[i] = ranked{mr, r.key(r.byMR[mr])}
	}
	slices.SortStableFunc(out, cmpRanked)
	return out
}

// arrange orders the line by rank and, with Preempt, swaps the
// worst-ranked running requests for better-ranked waiting ones; a
// preempted request stays in the server, and its next admission
// prefills its prompt and what it generated (nothing with Swap).
func (r *hedgeRun) arrange() {
	if !r.h.ordered() {
		return
	}
	m := r.m
	nq := len(m.queue)
	line := r.rankAll(append(m.queue, m.waiting...))
	if r.h.Preempt && len(m.running) >= m.c.B && len(line) > 0 {
		run := r.rankAll(m.running)
		n := 0
		for i := len(run) - 1; i >= 0 && n < len(line) && line[n].k.before(run[i].k); i-- {
			n++
		}
		if n > 0 {
			out := run[len(run)-n:]
			r.evict(out)
			line = append(line, out...)
			slices.SortStableFunc(line, cmpRanked)
			nq += n
		}
	}
	m.queue = m.queue[:0]
	m.waiting = m.waiting[:0]
	for i, x := range line {
		if i < nq {
			m.queue = append(m.queue, x.mr)
		} else {
			m.waiting = append(m.waiting, x.mr)
		}
	}
}

// evict takes out from the running requests, to be recomputed.
func (r *hedgeRun) evict(out []ranked) {
	gone := map[*modelReq]bool{}
	for _, x := range out {
		gone[x.mr] = true
		q := r.byMR[x.mr]
		x.mr.prompt = q.prompt + q.gen
		if r.h.Swap {
			x.mr.prompt = 0
		}
		r.out.Preempted++
		r.events = append(r.events, hedgeEvent{r.out.Steps, 'p', x.mr.g, q.member})
	}
	r.m.running = slices.DeleteFunc(r.m.running, func(mr *modelReq) bool { return gone[mr] })
}
