package serve

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/trajflow/trajflow/internal/durable"
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
	tokens   int64 // groupTokens, which the slices of a step are cut by
}

func (g *group) release() {
	for _, r := range g.recs {
		r.Release()
	}
	g.recs = nil
}

// service is one trajflow serve: its ledger (the steps, their leases, the
// queue and the waiting trainers), the served directory its steps are
// written to, and the run's progress for the status.
type service struct {
	dir string // OUTPUT/served (a replay's: OUTPUT/replay)
	// stepsDir, in a replay, is where the recorded steps' folders are
	// (OUTPUT/served); "": dir.
	stepsDir string
	alloc    memory.Allocator
	maxK     int // serve.max_groups_per_step
	popts    parquet.Options
	ctx      context.Context // ends when the service stops
	led      *ledger
	// policy and supply are the ledger's: the fleet's policy and the
	// run's demand, handed to the run; unserved its tasks of the groups
	// not handed out (nil unless serve.on_stale requeue).
	policy   *generate.Policy
	supply   *groups.Supply
	unserved *groups.Unserved

	snapMu sync.Mutex
	snap   runner.Snapshot

	// writes are the step folders being written, by step (startWrite).
	writeMu sync.Mutex
	writes  map[int64]*stepWrite
	// writing counts the writes in flight: a stop waits for them.
	writing sync.WaitGroup
	// holdWrite, when set (tests), is called before a step's folder is
	// written.
	holdWrite func(n int64)
	// eval runs serve.eval's evaluations; nil without it.
	eval *evaluator
	// engine holds the engine's side of the steps made since acks
	// carried logprobs, for their drift.
	engine driftCache
}

// serviceConfig is what newService builds a service from.
type serviceConfig struct {
	// Dir is the served directory (OUTPUT/served), locked.
	Dir string
	// StepsDir is, in a replay, the recorded steps' directory
	// (OUTPUT/served); "": Dir.
	StepsDir string
	// State is the recorded state (loadState).
	State *state
	// Ctx ends when the service stops.
	Ctx   context.Context
	Lease time.Duration
	// PauseTimeout is serve.pause_timeout.
	PauseTimeout time.Duration
	Buffer       int // serve.buffer_steps
	// Fill, Staleness and OnStale are the ledger's (ledgerConfig).
	Fill      int
	Staleness *groups.Bound
	OnStale   string
	// Unserved is the ledger's (ledgerConfig), handed to the run too.
	Unserved *groups.Unserved
	// StaleWindow is the ledger's (ledgerConfig).
	StaleWindow int
	MaxK        int // serve.max_groups_per_step
	Supply      *groups.Supply
	// Parquet are the step files' writer options.
	Parquet parquet.Options
	// Now is the clock (default time.Now); Persist records a state
	// (default: Dir's state file, through internal/durable).
	Now     func() time.Time
	Persist func(*state) error
}

// newService returns a service ready to serve: its ledger over the
// recorded state, with the recorded policy version and pause applied.
func newService(c serviceConfig) (*service, error) {
	persist := c.Persist
	if persist == nil {
		persist = func(st *state) error { return saveState(c.Dir, st) }
	}
	led, err := newLedger(ledgerConfig{
		State: c.State, Persist: persist, Now: c.Now, Lease: c.Lease, PauseTimeout: c.PauseTimeout, Buffer: c.Buffer, Fill: c.Fill, Staleness: c.Staleness, Supply: c.Supply,
		OnStale: c.OnStale, Unserved: c.Unserved, StaleWindow: c.StaleWindow,
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(c.Dir, schema.ServeStateFile), err)
	}
	ctx := c.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	return &service{
		dir: c.Dir, stepsDir: c.StepsDir, alloc: memory.NewGoAllocator(), maxK: c.MaxK, popts: c.Parquet, ctx: ctx,
		led: led, policy: led.policy, supply: led.dem.supply, unserved: led.sp.unserved,
	}, nil
}

// setSnapshot keeps the run's latest progress for the status.
func (s *service) setSnapshot(sn runner.Snapshot) {
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	s.snap = sn
}

// snapshot is the run's latest progress.
func (s *service) snapshot() runner.Snapshot {
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	return s.snap
}

// loadFile reads a committed data file's kept groups into the queue, less
// those already in a step or queued. The file is read once: a step made of
// these groups is written from their records, and its first answer
// encoded from them.
func (s *service) loadFile(ctx context.Context, path string) error {
	fresh, meta, err := s.readGroups(ctx, path, func(ref groupRef) bool { return !s.led.taken(ref) })
	if err != nil {
		return err
	}
	s.led.enqueue(fresh, meta)
	return nil
}

// readGroups reads the kept groups of a committed data file that want
// asks for, in the file's order, with the file's metadata.
func (s *service) readGroups(ctx context.Context, path string, want func(groupRef) bool) ([]*group, map[string]string, error) {
	f, err := pqread.Open(path, s.alloc, 4096)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = f.Close() }() // best effort: read only
	meta := f.Metadata()
	var fresh []*group
	byRef := map[groupRef]*group{}
	err = f.Records(ctx, nil, func(rec arrow.Record) error {
		versions := versionsOf(rec)
		return eachGroup(rec, func(ref groupRef, start, end int) {
			g := byRef[ref]
			if g == nil && want(ref) {
				g = &group{ref: ref}
				byRef[ref] = g
				fresh = append(fresh, g)
			}
			if g != nil {
				g.recs = append(g.recs, rec.NewSlice(int64(start), int64(end)))
				g.rows += end - start
				for i := start; i < end; i++ {
					g.versions = addVersions(g.versions, versions(i))
				}
			}
		})
	})
	if err != nil {
		for _, g := range fresh {
			g.release()
		}
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, g := range fresh {
		g.tokens = groupTokens(g.recs)
	}
	return fresh, meta, nil
}

// versionsOf returns, for a record, a function giving the policy versions
// of a row's tokens: those of its policy_versions spans, or, for a row
// without spans (answers without token ids: generate.api chat without
// return_token_ids), its min_policy_version, the version its oldest
// answer was requested under. nil where the schema has neither (output
// written without a policy).
func versionsOf(rec arrow.Record) func(i int) []int64 {
	spans := spanVersionsOf(rec)
	var minV *array.Int64
	if idx := rec.Schema().FieldIndices(schema.ColumnName(schema.ColMinPolicyVersion)); len(idx) == 1 {
		minV, _ = rec.Column(idx[0]).(*array.Int64)
	}
	return func(i int) []int64 {
		if vs := spans(i); len(vs) > 0 || minV == nil || minV.IsNull(i) {
			return vs
		}
		return []int64{minV.Value(i)}
	}
}

// spanVersionsOf returns, for a record, a function giving the versions of
// a row's policy_versions spans (spans whose struct has a version field);
// nil where the schema has none.
func spanVersionsOf(rec arrow.Record) func(i int) []int64 {
	idx := rec.Schema().FieldIndices(schema.ColumnName(schema.ColPolicyVersions))
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
	vi, ok := st.DataType().(*arrow.StructType).FieldIdx(schema.SpanFieldName(schema.SpanVersion))
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

// makeStep makes granted groups a new step (for world ranks, rank's
// slice leased; world 0: served whole): the state records it, and only
// then is it served, while its folder is written beside (startWrite: the
// groups are committed in data/ already, and a restart writes the folder
// of a recorded step that a crash left unwritten from there,
// rebuildSteps). On an error the groups go back to the head of the
// queue; on success they are the caller's, to answer from their records
// and release once the folder is written (written).
func (s *service) makeStep(ctx context.Context, fresh []*group, rank, world int) (st *stepState, err error) {
	n := s.led.reserve()
	st = &stepState{Step: n, World: world, LeasedRank: rank}
	for _, g := range fresh {
		st.Groups = append(st.Groups, g.ref)
		st.Rows += g.rows
		st.Versions = addVersions(st.Versions, g.versions)
		// Recorded for a whole step too: a stranded one may be cut for
		// a world's ranks later.
		st.GroupTokens = append(st.GroupTokens, g.tokens)
		st.GroupRows = append(st.GroupRows, g.rows)
	}
	s.startWrite(n, fresh)
	if err := s.led.recordStep(st); err != nil {
		// Best effort: a folder the state does not record is removed at
		// the next start.
		_ = s.written(context.WithoutCancel(ctx), n) // the write ends, as the service stops at the latest
		_ = os.RemoveAll(filepath.Join(s.dir, schema.ServedStepDir(n)))
		s.led.unmade(fresh, world)
		return nil, err
	}
	return st, nil
}

// stepWrite is a step's folder being written: done is closed once it is
// (err nil) or could not be.
type stepWrite struct {
	done chan struct{}
	err  error
}

// startWrite writes step n's folder from the groups' records in the
// background, until the service stops; written waits for it.
func (s *service) startWrite(n int64, fresh []*group) {
	sw := &stepWrite{done: make(chan struct{})}
	s.writeMu.Lock()
	if s.writes == nil {
		s.writes = map[int64]*stepWrite{}
	}
	s.writes[n] = sw
	s.writeMu.Unlock()
	// The write holds its own references: the caller may release the
	// groups once it has answered.
	own := make([]*group, len(fresh))
	for i, g := range fresh {
		c := *g
		c.recs = slices.Clone(g.recs)
		for _, r := range c.recs {
			r.Retain()
		}
		own[i] = &c
	}
	fresh = own
	s.writing.Add(1)
	go func() {
		defer s.writing.Done()
		defer close(sw.done)
		defer func() {
			for _, g := range fresh {
				for _, r := range g.recs {
					r.Release()
				}
			}
		}()
		if s.holdWrite != nil {
			s.holdWrite(n)
		}
		// A stop lets the write finish (waitWrites): the step is
		// recorded and answered already.
		if err := s.writeStep(context.WithoutCancel(s.ctx), n, fresh); err != nil {
			sw.err = fmt.Errorf("writing step %d: %w", n, err)
		}
		if s.engine.wanted() {
			s.engine.put(n, fresh)
		}
	}()
}

// waitWrites waits for the step folders being written.
func (s *service) waitWrites() { s.writing.Wait() }

// written waits until step n's folder, if it is being written, is (or
// could not be: the write's error; a restart writes it again from data/).
func (s *service) written(ctx context.Context, n int64) error {
	s.writeMu.Lock()
	sw := s.writes[n]
	s.writeMu.Unlock()
	if sw == nil {
		return nil
	}
	select {
	case <-sw.done:
	case <-ctx.Done():
		return fmt.Errorf("waiting for step %d's file: %w", n, ctx.Err())
	}
	s.writeMu.Lock()
	if s.writes[n] == sw && sw.err == nil {
		delete(s.writes, n)
	}
	s.writeMu.Unlock()
	return sw.err
}

// rebuildSteps writes the folder of every recorded step that has none (a
// crash came between the state recording the step and its folder being
// written) from its groups in the data files at paths, in the step's
// order of groups. A narrowed step's folder holds, as its first did, the
// groups trained on too (a record of what was trained on; answers keep
// its remainder's alone): those first, then the remainder's, each in
// step order.
func (s *service) rebuildSteps(ctx context.Context, st *state, paths []string) error {
	want := map[groupRef]bool{}
	var missing []*stepState
	for _, step := range st.Steps {
		if _, err := os.Stat(s.stepFile(step.Step)); err == nil {
			continue
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		missing = append(missing, step)
		for _, g := range step.made() {
			want[g] = true
		}
	}
	if len(missing) == 0 {
		return nil
	}
	found := map[groupRef]*group{}
	defer func() {
		for _, g := range found {
			g.release()
		}
	}()
	for _, p := range paths {
		gs, _, err := s.readGroups(ctx, p, func(ref groupRef) bool { return want[ref] && found[ref] == nil })
		if err != nil {
			return err
		}
		for _, g := range gs {
			found[g.ref] = g
		}
	}
	for _, step := range missing {
		var gs []*group
		for _, ref := range step.made() {
			g := found[ref]
			if g == nil {
				return fmt.Errorf("step %d (recorded in %s): its folder is missing and its group %v is in no data file under %s to write it again from",
					step.Step, filepath.Join(s.dir, schema.ServeStateFile), ref, schema.DataDir)
			}
			gs = append(gs, g)
		}
		if err := s.writeStep(ctx, step.Step, gs); err != nil {
			return fmt.Errorf("writing step %d again from %s: %w", step.Step, schema.DataDir, err)
		}
	}
	return nil
}

// writeStep writes step n's folder: its part file, in a temporary folder
// synced and renamed into place, the served directory synced.
func (s *service) writeStep(ctx context.Context, n int64, fresh []*group) error {
	final := filepath.Join(s.dir, schema.ServedStepDir(n))
	tmp := filepath.Join(s.dir, schema.TempName(schema.ServedStepDir(n)))
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	err := s.writePart(ctx, tmp, n, func(fn func(arrow.Record) error) error {
		for _, g := range fresh {
			for _, rec := range g.recs {
				if err := fn(rec); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := durable.SyncDir(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, final); err != nil {
		_ = os.RemoveAll(tmp) // best effort: a temporary folder; the rename's error is returned
		return err
	}
	return durable.SyncDir(s.dir)
}

// writePart writes the records each calls back with as step n's part
// file into dir (created; removed on an error): the output schema, with
// the run's and the step's metadata (schema.KeyServedStep).
func (s *service) writePart(ctx context.Context, dir string, n int64, each func(func(arrow.Record) error) error) error {
	popts := s.popts
	popts.Metadata = s.stepMetadata(n)
	w, err := parquet.New(dir, popts)
	if err != nil {
		return err
	}
	if err := each(func(rec arrow.Record) error { return w.Write(ctx, rec) }); err != nil {
		// The writer's open file goes with its folder.
		err = errors.Join(err, w.Abort())
		_ = os.RemoveAll(dir) // best effort: a temporary folder; the write's error is returned
		return err
	}
	if err := w.Close(ctx); err != nil {
		_ = os.RemoveAll(dir) // best effort: a temporary folder; the close's error is returned
		return err
	}
	return nil
}

// stepMetadata is step n's metadata: the data files' (as first read),
// and its number (schema.KeyServedStep).
func (s *service) stepMetadata(n int64) map[string]string {
	md := map[string]string{}
	for k, v := range s.led.metadata() {
		md[k] = v
	}
	md[schema.KeyServedStep] = fmt.Sprint(n)
	return md
}

// answerSchema is sc with the metadata of the step's part file (md: as
// written, stepMetadata, or as read back), keys in order: an Arrow
// answer's schema, the same whether its records come from the data files
// (a new step) or the step's file (served again, or replayed).
func answerSchema(sc *arrow.Schema, md map[string]string) *arrow.Schema {
	m := arrow.MetadataFrom(md)
	return arrow.NewSchema(sc.Fields(), &m)
}

// engineRows reads the engine's side of step st's rows (the groups in
// keep; nil: all), in the order they are answered: each row's logprobs
// of its generated tokens and their versions (driftOf).
func (s *service) engineRows(ctx context.Context, st *stepState, keep map[groupRef]bool) (engineRows, error) {
	var out engineRows
	if err := s.written(ctx, st.Step); err != nil {
		return out, err
	}
	if held, ok := s.engine.get(st, keep); ok {
		return held, nil
	}
	f, err := pqread.Open(s.stepFile(st.Step), s.alloc, 4096)
	if err != nil {
		return out, err
	}
	defer func() { _ = f.Close() }() // best effort: read only
	// The columns drift reads, and the groups' keys: not the messages
	// and the token ids of every row, which a step of long answers holds
	// many megabytes of.
	fields, err := f.Fields(driftColumns...)
	if err != nil {
		return out, err
	}
	err = eachKept(ctx, f, fields, st.Step, keep, out.addRecord)
	return out, err
}

// driftColumns are the columns engineRows reads of a step's file.
var driftColumns = []string{
	schema.ColumnName(schema.ColTaskIndex), schema.ColumnName(schema.ColAttempt),
	schema.ColumnName(schema.ColPromptTokenIDs), schema.ColumnName(schema.ColLossMask),
	schema.ColumnName(schema.ColResponseLogprobs), schema.ColumnName(schema.ColMinPolicyVersion),
	schema.ColumnName(schema.ColPolicyVersions),
}

// stepFile is the path of step n's part file (in stepsDir, a replay's
// recorded steps, else in dir).
func (s *service) stepFile(n int64) string {
	if s.stepsDir != "" {
		return filepath.Join(s.stepsDir, schema.ServedStepFile(n))
	}
	return filepath.Join(s.dir, schema.ServedStepFile(n))
}

// status is the service's status: the ledger's and the run's progress.
// It changes nothing.
func (s *service) status() client.Status {
	var out client.Status
	snap := s.snapshot()
	out.InGeneration, out.InEnvironment = snap.InGeneration, snap.InEnvironment
	out.GroupsKept, out.GroupsFinished = snap.GroupsKept, snap.GroupsFinished
	if snap.GroupsFinished > 0 {
		out.KeepRate = float64(snap.GroupsKept) / float64(snap.GroupsFinished)
	}
	out.TokensGenerated = snap.CompletionTokens
	if math.IsNaN(out.KeepRate) {
		out.KeepRate = 0
	}
	s.led.status(&out)
	out.Eval = s.eval.status()
	return out
}
