package serve_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/parquet/file"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/serve"
	"github.com/trajflow/trajflow/serve/client"
)

// jsonlGroups are the groups of a JSONL step body, with their rows and
// tokens (prompt ids and total_tokens).
func jsonlGroups(t *testing.T, body []byte) (map[group]int, int64) {
	t.Helper()
	out := map[group]int{}
	var tokens int64
	for _, line := range strings.Split(strings.TrimSpace(string(body)), "\n") {
		var row struct {
			Task    int64   `json:"task_index"`
			Attempt int64   `json:"attempt"`
			Prompt  []int32 `json:"prompt_token_ids"`
			Total   int64   `json:"total_tokens"`
		}
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatal(err)
		}
		out[group{row.Task, row.Attempt}]++
		tokens += int64(len(row.Prompt)) + row.Total
	}
	return out, tokens
}

// TestServeRanks: with rank and world each rank of a data-parallel job
// gets a disjoint slice of the same step, whole groups that together are
// the step, balanced by tokens; the step is acknowledged once every rank
// acknowledged its slice; a rank whose lease ran out gets its slice
// again, read back from the step's file, the same groups.
func TestServeRanks(t *testing.T) {
	s := start(t, testConfig(t, t.TempDir(), "serve.lease=1s"), serve.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const world, k = 3, 9
	slices := make([]*client.Step, world)
	var wg sync.WaitGroup
	errs := make(chan error, world)
	for rank := range world {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := client.New(s.url, "")
			st, err := c.NextRank(ctx, k, rank, world, client.FormatJSONL)
			if err != nil {
				errs <- err
				return
			}
			slices[rank] = st
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	all := map[group]int{}
	var loads []int64
	for rank, st := range slices {
		if st.Number != 1 || st.Rank != rank || st.World != world || st.StepGroups != k {
			t.Fatalf("rank %d: step %d rank %d world %d of %d groups", rank, st.Number, st.Rank, st.World, st.StepGroups)
		}
		gs, tokens := jsonlGroups(t, st.Body)
		if len(gs) != st.Groups || len(gs) == 0 {
			t.Fatalf("rank %d: %d groups in the body, header %d", rank, len(gs), st.Groups)
		}
		rows := 0
		for g, n := range gs {
			if _, dup := all[g]; dup {
				t.Fatalf("group %v in two ranks' slices", g)
			}
			all[g] = n
			rows += n
			if n != 4 {
				t.Fatalf("rank %d: group %v split: %d rows of 4", rank, g, n)
			}
		}
		if rows != st.Rows {
			t.Fatalf("rank %d: %d rows, header %d", rank, rows, st.Rows)
		}
		loads = append(loads, tokens)
	}
	if len(all) != k {
		t.Fatalf("the slices hold %d groups, want the step's %d", len(all), k)
	}
	c := client.New(s.url, "")
	for rank := range world - 1 {
		if err := c.AckRank(ctx, 1, rank, world); err != nil {
			t.Fatal(err)
		}
	}
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Steps.Acked != 0 {
		t.Fatalf("acknowledged before the last rank: %+v", st.Steps)
	}
	// The last rank's lease runs out: it gets the same slice again, read
	// back from the file.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if st, err = c.Status(ctx); err != nil {
			t.Fatal(err)
		}
		if st.Steps.Leased == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lease did not run out: %+v", st.Leases)
		}
		time.Sleep(50 * time.Millisecond)
	}
	again, err := c.NextRank(ctx, k, world-1, world, client.FormatJSONL)
	if err != nil {
		t.Fatal(err)
	}
	if again.Number != 1 || string(again.Body) != string(slices[world-1].Body) {
		t.Fatalf("served again: step %d, the same bytes %v", again.Number, string(again.Body) == string(slices[world-1].Body))
	}
	if err := c.AckRank(ctx, 1, world-1, world); err != nil {
		t.Fatal(err)
	}
	if st, err = c.Status(ctx); err != nil || st.Steps.Acked != 1 {
		t.Fatalf("after every rank's ack: %+v, %v", st.Steps, err)
	}
	// Errors name the parameter.
	var ce *client.Error
	for _, tc := range []struct {
		call  func() error
		param string
	}{
		{func() error { _, err := c.NextRank(ctx, 2, 0, 3, ""); return err }, "world"},
		{func() error { _, err := c.NextRank(ctx, 4, 2, 2, ""); return err }, "rank"},
		{func() error { _, err := c.NextRank(ctx, 4, 0, 2, client.FormatParquet); return err }, "format"},
		{func() error { return c.AckRank(ctx, 1, 0, 2) }, "world"},
	} {
		if err := tc.call(); !errors.As(err, &ce) || ce.Status != 400 || ce.Parameter != tc.param {
			t.Errorf("%v, want a 400 naming %s", err, tc.param)
		}
	}
	t.Logf("slice loads (tokens): %v", loads)
}

// waitStranded waits until step n is to be served again (its lease ran
// out) and then a lease more: nobody of its kind took it back, so it is
// stranded and a caller of the other kind may take it.
func waitStranded(ctx context.Context, t *testing.T, c *client.Client, lease time.Duration) {
	t.Helper()
	waitStatus(ctx, t, c, "a step to serve again", func(st client.Status) bool { return st.Steps.Pending == 1 })
	time.Sleep(lease + lease/2)
}

// TestServeStrandedSteps: a whole step whose trainer is gone goes to the
// ranks of a data-parallel job, cut for their world (disjoint slices that
// together are the step), and acknowledged by both; a step made for a
// world whose ranks are gone goes to a whole-step caller, whole.
func TestServeStrandedSteps(t *testing.T) {
	const lease = time.Second
	s := start(t, testConfig(t, t.TempDir(), "serve.lease=1s"), serve.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := client.New(s.url, "")

	whole, err := c.Next(ctx, 4, client.FormatJSONL) // never acknowledged
	if err != nil {
		t.Fatal(err)
	}
	want, _ := jsonlGroups(t, whole.Body)
	waitStranded(ctx, t, c, lease)
	got := map[group]int{}
	for rank := range 2 {
		st, err := c.NextRank(ctx, 4, rank, 2, client.FormatJSONL)
		if err != nil {
			t.Fatal(err)
		}
		if st.Number != whole.Number || st.World != 2 || st.StepGroups != 4 {
			t.Fatalf("rank %d: step %d (world %d, %d groups), want its slice of step %d", rank, st.Number, st.World, st.StepGroups, whole.Number)
		}
		gs, _ := jsonlGroups(t, st.Body)
		for g, n := range gs {
			if _, dup := got[g]; dup {
				t.Fatalf("group %v in both slices", g)
			}
			got[g] = n
		}
	}
	if !maps.Equal(got, want) {
		t.Fatalf("the slices hold %v, the step %v", got, want)
	}
	for rank := range 2 {
		if err := c.AckRank(ctx, whole.Number, rank, 2); err != nil {
			t.Fatal(err)
		}
	}

	sliced, err := c.NextRank(ctx, 4, 0, 2, client.FormatJSONL) // rank 1 never comes; rank 0 never acks
	if err != nil {
		t.Fatal(err)
	}
	waitStranded(ctx, t, c, lease)
	again, err := c.Next(ctx, 4, client.FormatJSONL)
	if err != nil {
		t.Fatal(err)
	}
	gs, _ := jsonlGroups(t, again.Body)
	if again.Number != sliced.Number || again.World != 0 || again.Groups != 4 || len(gs) != 4 {
		t.Fatalf("whole caller: step %d (world %d, %d groups, %d in the body), want step %d whole", again.Number, again.World, again.Groups, len(gs), sliced.Number)
	}
	if err := c.Ack(ctx, again.Number); err != nil {
		t.Fatal(err)
	}
	wantAcked(ctx, t, c, 2)
}

// partlyAcked serves a step of 8 groups to ranks 0 and 1 of a world of
// 4, which acknowledge their slices (ranks 2 and 3 never come), and waits
// until the step is stranded; it returns the step's number and the
// groups trained on.
func partlyAcked(ctx context.Context, t *testing.T, c *client.Client, lease time.Duration) (int64, map[group]int) {
	t.Helper()
	trained := map[group]int{}
	var n int64
	for rank := range 2 {
		st, err := c.NextRank(ctx, 8, rank, 4, client.FormatJSONL)
		if err != nil {
			t.Fatal(err)
		}
		n = st.Number
		gs, _ := jsonlGroups(t, st.Body)
		maps.Copy(trained, gs)
	}
	for rank := range 2 {
		if err := c.AckRank(ctx, n, rank, 4); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(2*lease + lease/2) // the last lease ran out, and a lease more
	return n, trained
}

// TestServeStrandedPartlyAcked: a step of 4 slices whose ranks 0 and 1
// acknowledged theirs and whose ranks 2 and 3 are gone goes, stranded,
// with the groups of the slices not acknowledged alone: to the ranks of
// a world of 2, cut for theirs (Trajflow-Step-Groups counts the
// remainder), or whole to a whole-step caller (a Parquet file of the
// remainder); their acks complete it, and no group trained on is served
// again.
func TestServeStrandedPartlyAcked(t *testing.T) {
	const lease = time.Second
	s := start(t, testConfig(t, t.TempDir(), "serve.lease=1s"), serve.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := client.New(s.url, "")

	n, trained := partlyAcked(ctx, t, c, lease)
	got := map[group]int{}
	for rank := range 2 {
		st, err := c.NextRank(ctx, 8, rank, 2, client.FormatJSONL)
		if err != nil {
			t.Fatal(err)
		}
		if st.Number != n || st.World != 2 || st.StepGroups != 8-len(trained) {
			t.Fatalf("rank %d of 2: step %d (world %d, %d groups), want its slice of step %d's %d groups left",
				rank, st.Number, st.World, st.StepGroups, n, 8-len(trained))
		}
		gs, _ := jsonlGroups(t, st.Body)
		if len(gs) != st.Groups {
			t.Fatalf("rank %d of 2: %d groups in the body, Trajflow-Groups %d", rank, len(gs), st.Groups)
		}
		for g, rows := range gs {
			if _, dup := got[g]; dup {
				t.Fatalf("group %v in both slices", g)
			}
			if _, again := trained[g]; again {
				t.Fatalf("group %v, trained on, served again", g)
			}
			got[g] = rows
		}
	}
	if len(got) != 8-len(trained) {
		t.Fatalf("the slices hold %d groups, want the %d left", len(got), 8-len(trained))
	}
	for rank := range 2 {
		if err := c.AckRank(ctx, n, rank, 2); err != nil {
			t.Fatal(err)
		}
	}

	m, trained := partlyAcked(ctx, t, c, lease)
	whole, err := c.Next(ctx, 8, client.FormatParquet)
	if err != nil {
		t.Fatal(err)
	}
	gs := readStep(t, whole.Body)
	if got := stepMetadata(t, whole.Body)[schema.KeyServedStep]; got != fmt.Sprint(m) {
		t.Fatalf("whole caller: the remainder's Parquet answer says %s %q, want %d as the step files do", schema.KeyServedStep, got, m)
	}
	if whole.Number != m || whole.World != 0 || whole.Groups != 8-len(trained) || len(gs) != whole.Groups {
		t.Fatalf("whole caller: step %d (world %d, %d groups, %d in the body), want step %d's %d groups left",
			whole.Number, whole.World, whole.Groups, len(gs), m, 8-len(trained))
	}
	for g := range gs {
		if _, again := trained[g]; again {
			t.Fatalf("group %v, trained on, served again", g)
		}
	}
	if err := c.Ack(ctx, m); err != nil {
		t.Fatal(err)
	}
	wantAcked(ctx, t, c, 2)
}

// TestServeStrandedPartlyAckedAcrossRestart: the remainder of a step of 4
// slices two ranks acknowledged, cut for a world of 2, keeps its cut
// across a restart of the service: rank 1 gets the rest of the remainder,
// rank 0, its lease run out, the same groups again, and their acks
// complete the step.
func TestServeStrandedPartlyAckedAcrossRestart(t *testing.T) {
	const lease = time.Second
	out, addr := t.TempDir(), freeAddr(t)
	cfg := func() *config.Config { return testConfig(t, out, "serve.addr="+addr, "serve.lease=1s") }
	s := start(t, cfg(), serve.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := client.New(s.url, "")

	n, trained := partlyAcked(ctx, t, c, lease)
	first, err := c.NextRank(ctx, 8, 0, 2, client.FormatJSONL)
	if err != nil {
		t.Fatal(err)
	}
	if first.Number != n || first.StepGroups != 8-len(trained) {
		t.Fatalf("rank 0 of 2: step %d of %d groups, want step %d's %d groups left", first.Number, first.StepGroups, n, 8-len(trained))
	}
	slice0, _ := jsonlGroups(t, first.Body)
	s.stop(t)
	start(t, cfg(), serve.Options{}) // stopped by its cleanup

	second, err := c.NextRank(ctx, 8, 1, 2, client.FormatJSONL)
	if err != nil {
		t.Fatal(err)
	}
	slice1, _ := jsonlGroups(t, second.Body)
	if second.Number != n || second.World != 2 || second.StepGroups != first.StepGroups || len(slice0)+len(slice1) != first.StepGroups {
		t.Fatalf("restarted: rank 1 got step %d (world %d, %d groups, %d in its slice), want the rest of step %d's %d groups left",
			second.Number, second.World, second.StepGroups, len(slice1), n, first.StepGroups)
	}
	for g := range slice1 {
		if _, dup := slice0[g]; dup {
			t.Fatalf("group %v in both slices", g)
		}
		if _, again := trained[g]; again {
			t.Fatalf("group %v, trained on, served again", g)
		}
	}
	time.Sleep(lease + lease/2) // rank 0's recorded lease runs out
	again, err := c.NextRank(ctx, 8, 0, 2, client.FormatJSONL)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := jsonlGroups(t, again.Body); again.Number != n || !maps.Equal(got, slice0) {
		t.Fatalf("rank 0 again: step %d of %v, want step %d of %v", again.Number, got, n, slice0)
	}
	for rank := range 2 {
		if err := c.AckRank(ctx, n, rank, 2); err != nil {
			t.Fatal(err)
		}
	}
	wantAcked(ctx, t, c, 1)
}

// arrowGroups are the groups of an Arrow step's records, with their rows.
func arrowGroups(t *testing.T, recs []arrow.Record) map[group]int {
	t.Helper()
	out := map[group]int{}
	for _, rec := range recs {
		sc := rec.Schema()
		ti, ai := sc.FieldIndices(schema.ColumnName(schema.ColTaskIndex)), sc.FieldIndices(schema.ColumnName(schema.ColAttempt))
		if len(ti) != 1 || len(ai) != 1 {
			t.Fatalf("an Arrow step without task_index or attempt: %v", sc)
		}
		tasks, ok1 := rec.Column(ti[0]).(*array.Int64)
		attempts, ok2 := rec.Column(ai[0]).(*array.Int32)
		if !ok1 || !ok2 {
			t.Fatalf("task_index or attempt of another type: %v", sc)
		}
		for i := range int(rec.NumRows()) {
			out[group{tasks.Value(i), int64(attempts.Value(i))}]++
		}
	}
	return out
}

// TestServeNarrowedStepRebuilt: a step of 4 slices two ranks
// acknowledged, its remainder taken by a caller of another kind
// (recorded narrowed), whose folder is missing at a restart (its write
// failed, or it was lost), has its folder written again from data/ with
// all its groups, the ones trained on and the remainder's, as the folder
// first written held them (the steps' folders are a record of what was
// trained on); after the restart the answers, a world of 2's JSONL or
// Arrow slices or a whole caller's Parquet, hold exactly the remainder's
// groups, never a group trained on, and their acks complete the step.
func TestServeNarrowedStepRebuilt(t *testing.T) {
	const lease = time.Second
	for _, tc := range []struct {
		name   string
		world  int // 0: a whole-step caller
		format string
	}{
		{"slices of 2, JSONL", 2, client.FormatJSONL},
		{"slices of 2, Arrow", 2, client.FormatArrow},
		{"whole, Parquet", 0, client.FormatParquet},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out, addr := t.TempDir(), freeAddr(t)
			cfg := func() *config.Config { return testConfig(t, out, "serve.addr="+addr, "serve.lease=1s") }
			s := start(t, cfg(), serve.Options{})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			c := client.New(s.url, "")
			groupsOf := func(st *client.Step) map[group]int {
				switch tc.format {
				case client.FormatJSONL:
					gs, _ := jsonlGroups(t, st.Body)
					return gs
				case client.FormatArrow:
					defer st.Release()
					return arrowGroups(t, st.Records)
				default:
					return readStep(t, st.Body)
				}
			}
			next := func(rank int) *client.Step {
				t.Helper()
				var st *client.Step
				var err error
				if tc.world == 0 {
					st, err = c.Next(ctx, 8, tc.format)
				} else {
					st, err = c.NextRank(ctx, 8, rank, tc.world, tc.format)
				}
				if err != nil {
					t.Fatal(err)
				}
				return st
			}

			n, trained := partlyAcked(ctx, t, c, lease)
			if first := next(0); first.Number != n || first.World != tc.world {
				t.Fatalf("the first caller of the new kind: step %d (world %d), want step %d (world %d)", first.Number, first.World, n, tc.world)
			}
			s.stop(t)
			var rec struct {
				Steps []struct {
					Step    int64      `json:"step"`
					Groups  [][2]int64 `json:"groups"`
					Trained [][2]int64 `json:"trained_groups"`
				} `json:"steps"`
			}
			b, err := os.ReadFile(filepath.Join(out, schema.ServedDir, schema.ServeStateFile))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &rec); err != nil {
				t.Fatal(err)
			}
			remainder := map[group]bool{}
			for _, st := range rec.Steps {
				if st.Step != n {
					continue
				}
				if len(st.Trained) != len(trained) || len(st.Groups) != 8-len(trained) {
					t.Fatalf("step %d recorded with %d groups and %d trained on, want %d and %d", n, len(st.Groups), len(st.Trained), 8-len(trained), len(trained))
				}
				for _, g := range st.Trained {
					if _, ok := trained[group{g[0], g[1]}]; !ok {
						t.Fatalf("step %d records %v trained on, not in an acknowledged slice", n, g)
					}
				}
				for _, g := range st.Groups {
					remainder[group{g[0], g[1]}] = true
				}
			}
			if len(remainder) != 8-len(trained) {
				t.Fatalf("step %d not recorded narrowed: %s", n, b)
			}
			// What a crash before the folder was written leaves.
			if err := os.RemoveAll(filepath.Join(out, schema.ServedDir, schema.ServedStepDir(n))); err != nil {
				t.Fatal(err)
			}
			start(t, cfg(), serve.Options{}) // stopped by its cleanup
			b, err = os.ReadFile(filepath.Join(out, schema.ServedDir, schema.ServedStepFile(n)))
			if err != nil {
				t.Fatalf("the narrowed step's folder was not written again: %v", err)
			}
			// A record of what was trained on, as the folder first
			// written: the groups trained on and the remainder.
			whole := maps.Clone(remainder)
			for g := range trained {
				whole[g] = true
			}
			if got := readStep(t, b); len(got) != 8 || !everyIn(got, whole) {
				t.Fatalf("step %d written again holds %v, want its 8 groups, trained on %v and the remainder %v", n, got, trained, remainder)
			}

			// The lease recorded before the restart runs out; then every
			// caller of the new kind gets its part of the remainder.
			time.Sleep(lease + lease/2)
			got := map[group]int{}
			ranks := max(tc.world, 1)
			for rank := range ranks {
				st := next(rank)
				gs := groupsOf(st)
				if st.Number != n || st.World != tc.world || len(gs) != st.Groups {
					t.Fatalf("rank %d: step %d (world %d, %d groups in the body, Trajflow-Groups %d), want step %d (world %d)",
						rank, st.Number, st.World, len(gs), st.Groups, n, tc.world)
				}
				for g, rows := range gs {
					if _, again := trained[g]; again {
						t.Fatalf("group %v, trained on, served again", g)
					}
					if _, dup := got[g]; dup {
						t.Fatalf("group %v in two answers", g)
					}
					got[g] = rows
				}
			}
			if len(got) != len(remainder) || !everyIn(got, remainder) {
				t.Fatalf("the answers hold %v, want the remainder %v", got, remainder)
			}
			for rank := range ranks {
				if tc.world == 0 {
					err = c.Ack(ctx, n)
				} else {
					err = c.AckRank(ctx, n, rank, tc.world)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			wantAcked(ctx, t, c, 1)
		})
	}
}

// stepMetadata is a Parquet answer's key-value metadata.
func stepMetadata(t *testing.T, body []byte) map[string]string {
	t.Helper()
	pf, err := file.NewParquetReader(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	out := map[string]string{}
	kv := pf.MetaData().KeyValueMetadata()
	for i, k := range kv.Keys() {
		out[k] = kv.Values()[i]
	}
	return out
}

// wantAcked fails the test unless the service's status counts acked
// steps acknowledged and none pending.
func wantAcked(ctx context.Context, t *testing.T, c *client.Client, acked int) {
	t.Helper()
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Steps.Acked != acked || st.Steps.Pending != 0 {
		t.Fatalf("at the end: steps %+v, want %d acknowledged and none pending", st.Steps, acked)
	}
}

// everyIn reports whether every group of gs is in set.
func everyIn(gs map[group]int, set map[group]bool) bool {
	for g := range gs {
		if !set[g] {
			return false
		}
	}
	return true
}
