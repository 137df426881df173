package serve

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/trajflow/trajflow/internal/pqread"
	"github.com/trajflow/trajflow/runner"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/serve/client"
	"github.com/trajflow/trajflow/sinks/parquet"
	"github.com/trajflow/trajflow/stages/generate"
	"github.com/trajflow/trajflow/stages/groups"
)

// group is one kept group committed to data/ and not yet in a step: its
// rows (slices of the records read back, retained) and the policy
// versions of its tokens.
type group struct {
	ref      groupRef
	recs     []arrow.Record
	rows     int
	versions []int64
}

func (g *group) release() {
	for _, r := range g.recs {
		r.Release()
	}
	g.recs = nil
}

// service is the state of one trajflow serve: the queue of kept groups
// not yet in a step, the steps and their leases, the trainers waiting for
// a step, and the demand it sets for the run.
type service struct {
	dir      string // OUTPUT/served
	alloc    memory.Allocator
	supply   *groups.Supply
	policy   *generate.Policy
	lease    time.Duration
	buffer   int
	maxK     int // serve.max_groups_per_step
	now      func() time.Time
	popts    parquet.Options
	ctx      context.Context // ends when the service stops
	snapshot func() runner.Snapshot

	mu       sync.Mutex
	st       *state
	steps    map[int64]*stepState
	assigned map[groupRef]bool // groups in a step, or being made one
	queued   map[groupRef]*group
	queue    []*group
	waiters  []*waiter
	leases   map[int64]time.Time // a leased step's expiry
	largest  int                 // the largest groups=K asked for
	ended    error               // the run ended: no more groups come
	meta     map[string]string   // the data files' metadata
	counts   counts
}

// counts are the service's counters since it started.
type counts struct {
	served, reserved, acked, expired int64
}

// waiter is a trainer waiting for a step of k groups.
type waiter struct {
	k  int
	ch chan grant // buffered: dispatch never blocks
}

// grant is what a waiter gets: fresh groups to make a new step of, a step
// to serve again, or the reason none will come.
type grant struct {
	fresh []*group
	step  *stepState
	err   error
}

// errEnded wraps the reason no more groups come.
var errEnded = errors.New("no more kept groups will come")

func newService(dir string, st *state) *service {
	s := &service{
		dir: dir, st: st, alloc: memory.NewGoAllocator(), now: time.Now,
		steps: map[int64]*stepState{}, assigned: map[groupRef]bool{},
		queued: map[groupRef]*group{}, leases: map[int64]time.Time{},
	}
	for _, step := range st.Steps {
		s.steps[step.Step] = step
		for _, g := range step.Groups {
			s.assigned[g] = true
		}
		s.largest = max(s.largest, len(step.Groups))
	}
	return s
}

// loadFile reads a committed data file's kept groups into the queue, less
// those already in a step.
func (s *service) loadFile(ctx context.Context, path string) error {
	f, err := pqread.Open(path, s.alloc, 4096)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }() // best effort: read only
	meta := f.Metadata()
	var fresh []*group
	byRef := map[groupRef]*group{}
	err = f.Records(ctx, nil, func(rec arrow.Record) error {
		sc := rec.Schema()
		ti, ai := sc.FieldIndices("task_index"), sc.FieldIndices("attempt")
		if len(ti) != 1 || len(ai) != 1 {
			return fmt.Errorf("%s: no task_index or attempt column", path)
		}
		tasks, ok1 := rec.Column(ti[0]).(*array.Int64)
		attempts, ok2 := rec.Column(ai[0]).(*array.Int32)
		if !ok1 || !ok2 {
			return fmt.Errorf("%s: task_index or attempt has an unexpected type", path)
		}
		versions := versionsOf(rec)
		n := int(rec.NumRows())
		for start := 0; start < n; {
			ref := groupRef{tasks.Value(start), int64(attempts.Value(start))}
			end := start + 1
			for end < n && tasks.Value(end) == ref[0] && int64(attempts.Value(end)) == ref[1] {
				end++
			}
			s.mu.Lock()
			taken := s.assigned[ref]
			g := s.queued[ref]
			s.mu.Unlock()
			if !taken {
				if g == nil {
					g = byRef[ref]
				}
				if g == nil {
					g = &group{ref: ref}
					byRef[ref] = g
					fresh = append(fresh, g)
				}
				g.recs = append(g.recs, rec.NewSlice(int64(start), int64(end)))
				g.rows += end - start
				for i := start; i < end; i++ {
					g.versions = addVersions(g.versions, versions(i))
				}
			}
			start = end
		}
		return nil
	})
	if err != nil {
		for _, g := range fresh {
			g.release()
		}
		return fmt.Errorf("%s: %w", path, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.meta == nil {
		s.meta = meta
	}
	for _, g := range fresh {
		if len(g.versions) == 0 {
			g.versions = []int64{0}
		}
		s.queued[g.ref] = g
		s.queue = append(s.queue, g)
	}
	s.dispatch()
	return nil
}

// versionsOf returns, for a record, a function giving the policy versions
// of a row's tokens: from the policy_versions column (spans whose struct
// has a version field) where the schema has one, else version 0 (output
// written without a policy).
func versionsOf(rec arrow.Record) func(i int) []int64 {
	idx := rec.Schema().FieldIndices("policy_versions")
	if len(idx) != 1 {
		return func(int) []int64 { return nil }
	}
	list, ok := rec.Column(idx[0]).(*array.List)
	if !ok {
		return func(int) []int64 { return nil }
	}
	st, ok := list.ListValues().(*array.Struct)
	if !ok {
		return func(int) []int64 { return nil }
	}
	vi, ok := st.DataType().(*arrow.StructType).FieldIdx("version")
	if !ok {
		return func(int) []int64 { return nil }
	}
	var value func(j int) int64
	switch vals := st.Field(vi).(type) {
	case *array.Int64:
		value = func(j int) int64 { return vals.Value(j) }
	case *array.Int32:
		value = func(j int) int64 { return int64(vals.Value(j)) }
	default:
		return func(int) []int64 { return nil }
	}
	field := st.Field(vi)
	return func(i int) []int64 {
		if list.IsNull(i) {
			return nil
		}
		from, to := list.ValueOffsets(i)
		var out []int64
		for j := from; j < to; j++ {
			if field.IsValid(int(j)) {
				out = addVersions(out, []int64{value(int(j))})
			}
		}
		return out
	}
}

// addVersions adds vs to the ascending set a.
func addVersions(a, vs []int64) []int64 {
	for _, v := range vs {
		i, found := slices.BinarySearch(a, v)
		if !found {
			a = slices.Insert(a, i, v)
		}
	}
	return a
}

// leased reports whether step n is leased now; s.mu is held.
func (s *service) leased(n int64) bool {
	exp, ok := s.leases[n]
	if !ok {
		return false
	}
	if s.now().Before(exp) {
		return true
	}
	delete(s.leases, n)
	s.counts.expired++
	return false
}

// pendingStep is the oldest step of k groups neither acknowledged nor
// leased: served before, to be served again. s.mu is held.
func (s *service) pendingStep(k int) *stepState {
	for _, st := range s.st.Steps {
		if !st.Acked && len(st.Groups) == k && !s.leased(st.Step) {
			return st
		}
	}
	return nil
}

// dispatch hands steps to the waiting trainers, first come first served:
// a step of the same size that is to be served again, else fresh groups
// from the queue; when the run ended, those that cannot be served are
// told so. It then sets the run's demand. s.mu is held.
func (s *service) dispatch() {
	blocked := false
	kept := s.waiters[:0]
	for _, w := range s.waiters {
		if st := s.pendingStep(w.k); st != nil {
			s.leases[st.Step] = s.now().Add(s.lease)
			s.counts.reserved++
			w.ch <- grant{step: st}
			continue
		}
		if !blocked && len(s.queue) >= w.k {
			fresh := slices.Clone(s.queue[:w.k])
			s.queue = slices.Delete(s.queue, 0, w.k)
			for _, g := range fresh {
				delete(s.queued, g.ref)
				s.assigned[g.ref] = true
			}
			w.ch <- grant{fresh: fresh}
			continue
		}
		if s.ended != nil {
			w.ch <- grant{err: fmt.Errorf("%w: %d kept groups are queued and the step asks for %d (%v)", errEnded, len(s.queue), w.k, s.ended)}
			continue
		}
		blocked = true
		kept = append(kept, w)
	}
	clear(s.waiters[len(kept):])
	s.waiters = kept
	s.setDemand()
}

// setDemand raises the run's demand to the kept groups that are in steps,
// those the waiting trainers ask for, and serve.buffer_steps steps of the
// largest size asked for ahead. s.mu is held.
func (s *service) setDemand() {
	want := len(s.assigned) + s.buffer*s.largest
	for _, w := range s.waiters {
		want += w.k
	}
	if s.supply != nil {
		s.supply.Raise(want)
	}
}

// wait registers a trainer asking for a step of k groups and returns its
// waiter; cancel takes it back.
func (s *service) wait(k int) *waiter {
	w := &waiter{k: k, ch: make(chan grant, 1)}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.largest = max(s.largest, k)
	s.waiters = append(s.waiters, w)
	s.dispatch()
	return w
}

// cancel takes back a waiter whose trainer went away; what was granted to
// it and not taken goes back: fresh groups to the head of the queue, a
// step to those to be served again.
func (s *service) cancel(w *waiter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waiters = slices.DeleteFunc(s.waiters, func(x *waiter) bool { return x == w })
	select {
	case g := <-w.ch:
		s.giveBack(g)
	default:
	}
	s.dispatch()
}

// giveBack returns a grant not served; s.mu is held.
func (s *service) giveBack(g grant) {
	if g.step != nil {
		delete(s.leases, g.step.Step)
		s.counts.reserved--
	}
	for _, gr := range g.fresh {
		delete(s.assigned, gr.ref)
		s.queued[gr.ref] = gr
	}
	s.queue = append(slices.Clone(g.fresh), s.queue...)
}

// end records that no more groups come (the run ended) and tells the
// waiters that cannot be served.
func (s *service) end(err error) {
	if err == nil {
		err = errors.New("the input ran out")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = err
	s.dispatch()
}

// tick expires leases and serves the steps they free.
func (s *service) tick() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.waiters) > 0 {
		s.dispatch()
	}
}

// makeStep commits fresh groups as a new step: its folder written and
// renamed into place, then the state recording it, before it is served.
// On an error the groups go back to the queue.
func (s *service) makeStep(ctx context.Context, fresh []*group) (st *stepState, err error) {
	s.mu.Lock()
	n := s.st.Next
	s.st.Next++
	meta := s.meta
	s.mu.Unlock()
	defer func() {
		if err != nil {
			s.mu.Lock()
			s.giveBack(grant{fresh: fresh})
			s.dispatch()
			s.mu.Unlock()
		}
	}()
	st = &stepState{Step: n}
	for _, g := range fresh {
		st.Groups = append(st.Groups, g.ref)
		st.Rows += g.rows
		st.Versions = addVersions(st.Versions, g.versions)
	}
	final := filepath.Join(s.dir, schema.ServedStepDir(n))
	tmp := filepath.Join(s.dir, "."+schema.ServedStepDir(n)+".tmp")
	if err := os.RemoveAll(tmp); err != nil {
		return nil, err
	}
	popts := s.popts
	popts.Metadata = map[string]string{}
	for k, v := range meta {
		popts.Metadata[k] = v
	}
	popts.Metadata[KeyStep] = fmt.Sprint(n)
	w, err := parquet.New(tmp, popts)
	if err != nil {
		return nil, err
	}
	for _, g := range fresh {
		for _, rec := range g.recs {
			if err := w.Write(ctx, rec); err != nil {
				// The writer's open file goes with its folder.
				err = errors.Join(err, w.Abort())
				_ = os.RemoveAll(tmp) // best effort: a temporary folder; the write's error is returned
				return nil, err
			}
		}
	}
	if err := w.Close(ctx); err != nil {
		_ = os.RemoveAll(tmp) // best effort: a temporary folder; the close's error is returned
		return nil, err
	}
	if err := syncDir(tmp); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, final); err != nil {
		_ = os.RemoveAll(tmp) // best effort: a temporary folder; the rename's error is returned
		return nil, err
	}
	if err := syncDir(s.dir); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.Steps = append(s.st.Steps, st)
	if err := s.st.save(s.dir); err != nil {
		s.st.Steps = s.st.Steps[:len(s.st.Steps)-1]
		_ = os.RemoveAll(final) // best effort: a folder the state does not record is removed at the next start
		return nil, fmt.Errorf("recording step %d: %w", n, err)
	}
	s.steps[n] = st
	s.leases[n] = s.now().Add(s.lease)
	s.counts.served++
	for _, g := range fresh {
		g.release()
	}
	return st, nil
}

// KeyStep is the Parquet metadata key holding a served step's number.
const KeyStep = "trajflow.served_step"

// stepFile is the path of step n's part file.
func (s *service) stepFile(n int64) string {
	return filepath.Join(s.dir, schema.ServedStepDir(n), "part-00000.parquet")
}

// errNeverServed is the error of an ack of a step never served.
var errNeverServed = errors.New("was never served")

// ack completes step n: acknowledged once and for all (a repeated ack is
// a no-op), recorded before it returns.
func (s *service) ack(n int64) (*stepState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.steps[n]
	if st == nil {
		return nil, fmt.Errorf("step %d %w", n, errNeverServed)
	}
	if st.Acked {
		return st, nil
	}
	st.Acked = true
	if err := s.st.save(s.dir); err != nil {
		st.Acked = false
		return nil, fmt.Errorf("recording the ack of step %d: %w", n, err)
	}
	delete(s.leases, n)
	s.counts.acked++
	return st, nil
}

// setVersion makes v the policy version, recorded in the state.
func (s *service) setVersion(v int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.policy.SetVersion(v); err != nil {
		return err
	}
	if s.st.Policy == v {
		return nil
	}
	old := s.st.Policy
	s.st.Policy = v
	if err := s.st.save(s.dir); err != nil {
		s.st.Policy = old
		return fmt.Errorf("recording policy version %d: %w", v, err)
	}
	return nil
}

// pause pauses the fleet in mode, recorded in the state.
func (s *service) pause(mode generate.PauseMode) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.policy.Pause(mode); err != nil {
		return err
	}
	return s.recordPause(string(mode))
}

// resume lets the fleet go on, recorded in the state.
func (s *service) resume() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.policy.Resume()
	return s.recordPause("")
}

// recordPause records the pause mode (empty: not paused); s.mu is held.
func (s *service) recordPause(mode string) error {
	if s.st.Paused == mode {
		return nil
	}
	old := s.st.Paused
	s.st.Paused = mode
	if err := s.st.save(s.dir); err != nil {
		s.st.Paused = old
		return fmt.Errorf("recording the pause (%q): %w; a restart would not know it", mode, err)
	}
	return nil
}

func (s *service) status() client.Status {
	var out client.Status
	if s.snapshot != nil {
		snap := s.snapshot()
		out.InGeneration, out.InEnvironment = snap.InGeneration, snap.InEnvironment
		out.GroupsKept, out.GroupsFinished = snap.GroupsKept, snap.GroupsFinished
		if snap.GroupsFinished > 0 {
			out.KeepRate = float64(snap.GroupsKept) / float64(snap.GroupsFinished)
		}
		out.TokensGenerated = snap.CompletionTokens
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out.PolicyVersion = s.policy.Version()
	paused, mode := s.policy.Paused()
	out.Paused = paused
	if paused {
		out.PauseMode = string(mode)
	}
	out.QueuedGroups = len(s.queue)
	out.Waiting = []int{}
	for _, w := range s.waiters {
		out.Waiting = append(out.Waiting, w.k)
	}
	if s.supply != nil {
		out.Demand = s.supply.Target()
	}
	out.Leases = []client.Lease{}
	for _, st := range s.st.Steps {
		out.Steps.Made++
		switch {
		case st.Acked:
			out.Steps.Acked++
		case s.leased(st.Step):
			out.Steps.Leased++
			out.Leases = append(out.Leases, client.Lease{Step: st.Step, Expires: s.leases[st.Step].UTC()})
		default:
			out.Steps.Pending++
		}
	}
	sort.Slice(out.Leases, func(i, j int) bool { return out.Leases[i].Step < out.Leases[j].Step })
	out.Served, out.Reserved, out.Expired, out.Acked = s.counts.served, s.counts.reserved, s.counts.expired, s.counts.acked
	out.Staleness = map[string]int{}
	for _, g := range s.queue {
		lag := out.PolicyVersion - g.versions[0]
		out.Staleness[fmt.Sprint(max(lag, 0))]++
	}
	if s.ended != nil {
		out.Ended = s.ended.Error()
	}
	if math.IsNaN(out.KeepRate) {
		out.KeepRate = 0
	}
	return out
}
