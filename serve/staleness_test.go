package serve_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/apache/arrow/go/v17/parquet/file"
	"github.com/apache/arrow/go/v17/parquet/pqarrow"

	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/serve"
	"github.com/trajflow/trajflow/serve/client"
)

// serve.max_staleness 0 with steps of 2 groups: at policy version 0 the
// gate admits (0+0+1)×2 groups, so a second step waits for the trainer's
// next version; after POST /v1/policy {"version": 1} it is served, and
// every group of it was admitted at version 1.
func TestServeMaxStaleness(t *testing.T) {
	out := t.TempDir()
	s := start(t, testConfig(t, out, "serve.max_staleness=0", "serve.step_groups=2", "serve.buffer_steps=0"), serve.Options{})
	c := client.New(s.url, "")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	first, err := c.Next(ctx, 2, client.FormatParquet)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Ack(ctx, first.Number); err != nil {
		t.Fatal(err)
	}
	// The gate is full at version 0: no third group is admitted.
	short, cancelShort := context.WithTimeout(ctx, 1500*time.Millisecond)
	_, err = c.Next(short, 2, client.FormatParquet)
	cancelShort()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a second step at version 0 under max_staleness 0: %v, want it to wait", err)
	}
	if err := c.SetPolicy(ctx, 1); err != nil {
		t.Fatal(err)
	}
	second, err := c.Next(ctx, 2, client.FormatParquet)
	if err != nil {
		t.Fatal(err)
	}
	if second.Groups != 2 {
		t.Fatalf("step %d holds %d groups", second.Number, second.Groups)
	}
	for _, v := range second.Versions {
		if v != 1 {
			t.Fatalf("step %d holds tokens of versions %v, want only 1 (max_staleness 0)", second.Number, second.Versions)
		}
	}
	status, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if status.PolicyVersion != 1 {
		t.Fatalf("status policy version %d", status.PolicyVersion)
	}
}

// waitStatus polls the status until ok holds (the service generates in
// the background), failing when ctx ends first.
func waitStatus(ctx context.Context, t *testing.T, c *client.Client, what string, ok func(client.Status) bool) client.Status {
	t.Helper()
	for {
		st, err := c.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ok(*st) {
			return *st
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v; status: %d queued, demand %d", what, ctx.Err(), st.QueuedGroups, st.Demand)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Under serve.max_staleness the look-ahead is what the staleness bound
// allows, not serve.buffer_steps: before any request the service
// generates (0 + 1 + 1) × 3 kept groups, no more, and a new policy
// version admits 3 more.
func TestServeAheadToStalenessBound(t *testing.T) {
	out := t.TempDir()
	s := start(t, testConfig(t, out, "serve.max_staleness=1", "serve.step_groups=3"), serve.Options{})
	c := client.New(s.url, "")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st := waitStatus(ctx, t, c, "6 groups queued at version 0", func(st client.Status) bool {
		return st.QueuedGroups >= 6 && st.InGeneration == 0 && st.InEnvironment == 0
	})
	if st.QueuedGroups != 6 || st.Demand != 6 {
		t.Fatalf("at version 0: %d groups queued, demand %d; want 6 and 6 ((0+1+1)×3)", st.QueuedGroups, st.Demand)
	}
	if err := c.SetPolicy(ctx, 1); err != nil {
		t.Fatal(err)
	}
	st = waitStatus(ctx, t, c, "9 groups queued at version 1", func(st client.Status) bool {
		return st.QueuedGroups >= 9 && st.InGeneration == 0 && st.InEnvironment == 0
	})
	if st.QueuedGroups != 9 || st.Demand != 9 {
		t.Fatalf("at version 1: %d groups queued, demand %d; want 9 and 9", st.QueuedGroups, st.Demand)
	}
}

// Without max_staleness the look-ahead holds at least the kept groups
// that keep generate.concurrency busy (16 slots, groups of 4: 4 groups),
// from before the first request; after a step of 2 it is 2 in steps and
// 4 ahead.
func TestServeLookAheadFillsConcurrency(t *testing.T) {
	out := t.TempDir()
	s := start(t, testConfig(t, out), serve.Options{})
	c := client.New(s.url, "")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st := waitStatus(ctx, t, c, "4 groups queued before any request", func(st client.Status) bool { return st.QueuedGroups >= 4 })
	if st.Demand != 4 {
		t.Fatalf("before any request: demand %d, want 4 (16 slots ÷ groups of 4)", st.Demand)
	}
	step, err := c.Next(ctx, 2, client.FormatJSONL)
	if err != nil {
		t.Fatal(err)
	}
	if step.Groups != 2 {
		t.Fatalf("step of %d groups, want 2", step.Groups)
	}
	st = waitStatus(ctx, t, c, "the demand after a step", func(st client.Status) bool { return st.Demand >= 6 })
	if st.Demand != 6 {
		t.Fatalf("after a step of 2: demand %d, want 6 (2 in steps + 4 ahead)", st.Demand)
	}
}

// committedGroups reads the groups committed to data/ and filtered/ under
// out, each with the directory it is in (both, joined, for a group in
// both).
func committedGroups(t *testing.T, out string) map[group]string {
	t.Helper()
	got := map[group]string{}
	rows := map[group]int{}
	for _, dir := range []string{schema.DataDir, schema.FilteredDir} {
		paths, err := filepath.Glob(filepath.Join(out, dir, schema.PartGlob))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range paths {
			f, err := file.OpenParquetFile(p, false)
			if err != nil {
				t.Fatal(err)
			}
			r, err := pqarrow.NewFileReader(f, pqarrow.ArrowReadProperties{BatchSize: 1 << 16}, memory.NewGoAllocator())
			if err != nil {
				t.Fatal(err)
			}
			tbl, err := r.ReadTable(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			tr := array.NewTableReader(tbl, 1<<20)
			for tr.Next() {
				rec := tr.Record()
				tasks := rec.Column(rec.Schema().FieldIndices("task_index")[0]).(*array.Int64)
				attempts := rec.Column(rec.Schema().FieldIndices("attempt")[0]).(*array.Int32)
				for i := 0; i < int(rec.NumRows()); i++ {
					g := group{tasks.Value(i), int64(attempts.Value(i))}
					if d, ok := got[g]; ok && d != dir {
						got[g] = d + "+" + dir
					} else {
						got[g] = dir
					}
					rows[g]++
				}
			}
			tr.Release()
			tbl.Release()
			_ = f.Close()
		}
	}
	for g, n := range rows {
		if n != 4 {
			t.Fatalf("group %v: %d rows committed, want one group of 4 (committed twice?)", g, n)
		}
	}
	return got
}

// waitCommitted waits until the groups committed hold every group of
// want, failing when ctx ends first.
func waitCommitted(ctx context.Context, t *testing.T, out string, want ...group) map[group]string {
	t.Helper()
	for {
		got := committedGroups(t, out)
		missing := slices.ContainsFunc(want, func(g group) bool { _, ok := got[g]; return !ok })
		if !missing {
			return got
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %v to be committed: %v; committed %v", want, ctx.Err(), got)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// attemptsOf is the attempts committed of task, ascending.
func attemptsOf(got map[group]string, task int64) []int64 {
	var out []int64
	for g := range got {
		if g.task == task {
			out = append(out, g.attempt)
		}
	}
	slices.Sort(out)
	return out
}

// serve.max_staleness 0, on_stale requeue (the default): the two groups
// queued at version 0 are two versions behind once the trainer posts
// version 2, so they are never served; their tasks are sampled again in
// attempt 1, once each, and the status counts them.
func TestServeStaleAtHandOutRequeued(t *testing.T) {
	out := t.TempDir()
	s := start(t, testConfig(t, out, "serve.max_staleness=0", "serve.step_groups=2", "serve.buffer_steps=0", "serve.lease=1s"), serve.Options{})
	c := client.New(s.url, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waitStatus(ctx, t, c, "2 groups queued at version 0", func(st client.Status) bool { return st.QueuedGroups == 2 })
	queued := committedGroups(t, out)
	var stale []group
	for g, dir := range queued {
		if dir == schema.DataDir {
			stale = append(stale, g)
		}
	}
	if len(stale) != 2 {
		t.Fatalf("kept before the new version: %v, want 2 groups", queued)
	}
	if err := c.SetPolicy(ctx, 2); err != nil {
		t.Fatal(err)
	}
	st := waitStatus(ctx, t, c, "the stale groups requeued", func(st client.Status) bool { return st.RequeuedGroups >= 2 })
	if st.StaleGroups != 2 || st.RequeuedGroups != 2 {
		t.Fatalf("status stale_groups %d, requeued_groups %d; want 2 and 2", st.StaleGroups, st.RequeuedGroups)
	}
	var again []group
	for _, g := range stale {
		again = append(again, group{g.task, g.attempt + 1})
	}
	// The new attempts are admitted at version 2 or at a later one,
	// as the gate's places and the requeue meet. Each round waits until
	// the gate is full and nothing runs (every place accepted:
	// (v+1)×2 kept groups since the discard, less those served), then
	// trains on every queued group before the next version, so no group
	// is ever queued or running across a version change: none but the
	// first two can turn stale, whatever the timing.
	served := 0
	for v := int64(2); ; v++ {
		full := int(v+1)*2 - served
		waitStatus(ctx, t, c, fmt.Sprintf("%d groups queued at version %d", full, v), func(st client.Status) bool { return st.QueuedGroups == full })
		for range full / 2 {
			step, err := c.Next(ctx, 2, client.FormatParquet)
			if err != nil {
				t.Fatal(err)
			}
			for g := range readStep(t, step.Body) {
				if slices.Contains(stale, g) {
					t.Fatalf("step %d holds %v, found stale", step.Number, g)
				}
			}
			if err := c.Ack(ctx, step.Number); err != nil {
				t.Fatal(err)
			}
			served += 2
		}
		got := committedGroups(t, out)
		if !slices.ContainsFunc(again, func(g group) bool { _, ok := got[g]; return !ok }) {
			break
		}
		if err := c.SetPolicy(ctx, v+1); err != nil {
			t.Fatal(err)
		}
	}
	s.stop(t)
	got := committedGroups(t, out)
	for _, g := range stale {
		if a := attemptsOf(got, g.task); !slices.Equal(a, []int64{g.attempt, g.attempt + 1}) {
			t.Fatalf("task %d: attempts %v committed, want %d and %d", g.task, a, g.attempt, g.attempt+1)
		}
	}
}

// A crash between the state recording a group stale (served/state.json
// lists it) and its task's new attempt being committed: the restarted
// service samples the task again in the next attempt, and a further
// restart does not sample it again, whether that attempt was kept or
// dropped (a restart with generate.sim.accuracy 1: every group's rewards
// are equal, and the keep rule drops it).
func TestServeStaleRequeueAcrossRestart(t *testing.T) {
	for _, tt := range []struct {
		name     string
		accuracy string // generate.sim.accuracy of the restart that samples it again
	}{
		{"new attempt kept or dropped", "0.5"},
		{"new attempt dropped", "1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			staleRequeueAcrossRestart(t, tt.accuracy)
		})
	}
}

func staleRequeueAcrossRestart(t *testing.T, accuracy string) {
	out := t.TempDir()
	sets := []string{"serve.max_staleness=1", "serve.step_groups=2", "serve.lease=1s"}
	s := start(t, testConfig(t, out, sets...), serve.Options{})
	c := client.New(s.url, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waitStatus(ctx, t, c, "4 groups queued at version 0", func(st client.Status) bool { return st.QueuedGroups == 4 })
	s.stop(t)
	var set group // the group the state records stale
	for g, dir := range committedGroups(t, out) {
		if dir == schema.DataDir && (set == group{} || g.task > set.task) {
			set = g
		}
	}
	// No step was made: the state file is written whole, as the record
	// of the group found stale writes it.
	b, err := json.Marshal(map[string]any{"version": 1, "policy_version": 0, "next_step": 1, "steps": []any{},
		"stale": [][2]int64{{set.task, set.attempt}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, schema.ServedDir, schema.ServeStateFile), b, 0o644); err != nil {
		t.Fatal(err)
	}

	s = start(t, testConfig(t, out, append(sets, "generate.sim.accuracy="+accuracy)...), serve.Options{AllowConfigChange: true})
	c = client.New(s.url, "")
	again := group{set.task, set.attempt + 1}
	got := waitCommitted(ctx, t, out, again)
	if accuracy == "1" && got[again] != schema.FilteredDir {
		t.Fatalf("under accuracy 1 the new attempt %v is in %s, want it dropped", again, got[again])
	}
	status := waitStatus(ctx, t, c, "the requeue counted", func(st client.Status) bool { return st.RequeuedGroups > 0 })
	if status.RequeuedGroups != 1 || status.StaleGroups != 1 {
		t.Fatalf("after the restart: requeued_groups %d, stale_groups %d; want 1 and 1", status.RequeuedGroups, status.StaleGroups)
	}
	s.stop(t)

	// Once more: the run reads the task again (a new version, under
	// which no queued group is stale, asks for groups beyond it, or the
	// input runs out) and samples it no more.
	s = start(t, testConfig(t, out, sets...), serve.Options{AllowConfigChange: true})
	c = client.New(s.url, "")
	last := int64(0)
	for g := range committedGroups(t, out) {
		last = max(last, g.task)
	}
	if err := c.SetPolicy(ctx, 1); err != nil {
		t.Fatal(err)
	}
	waitStatus(ctx, t, c, "a task after the last one committed", func(st client.Status) bool {
		for g := range committedGroups(t, out) {
			if g.task > last {
				return true
			}
		}
		return st.Ended != ""
	})
	if status, err := c.Status(ctx); err != nil || status.RequeuedGroups != 0 {
		t.Fatalf("after the second restart: %+v, %v; want no group requeued", status, err)
	}
	s.stop(t)
	if a := attemptsOf(committedGroups(t, out), set.task); !slices.Equal(a, []int64{set.attempt, set.attempt + 1}) {
		t.Fatalf("task %d: attempts %v committed, want %d and %d, once each", set.task, a, set.attempt, set.attempt+1)
	}
}
