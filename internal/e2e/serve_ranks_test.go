package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/trajflow/trajflow/serve/client"
)

// sliceGroups are the groups of a JSONL step body.
func sliceGroups(t *testing.T, body []byte) map[groupKey]bool {
	t.Helper()
	out := map[groupKey]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(body)), "\n") {
		var row struct {
			Task    int64 `json:"task_index"`
			Attempt int   `json:"attempt"`
		}
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatalf("a JSONL row: %v: %q", err, line)
		}
		out[groupKey{row.Task, row.Attempt}] = true
	}
	return out
}

// servedStep is a step as served/state.json records it.
type servedStep struct {
	Step    int64      `json:"step"`
	Acked   bool       `json:"acked"`
	World   int        `json:"world"`
	Groups  [][2]int64 `json:"groups"`
	Trained [][2]int64 `json:"trained_groups"`
}

// recordedStep reads step n from out's served/state.json.
func recordedStep(t *testing.T, out string, n int64) servedStep {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(out, "served", "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Steps []servedStep `json:"steps"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	for _, s := range st.Steps {
		if s.Step == n {
			return s
		}
	}
	t.Fatalf("step %d not in served/state.json: %s", n, b)
	return servedStep{}
}

// keys are refs as groups.
func keys(refs [][2]int64) map[groupKey]bool {
	out := map[groupKey]bool{}
	for _, r := range refs {
		out[groupKey{r[0], int(r[1])}] = true
	}
	return out
}

// strandedOf4 has a job of 4 ranks take the slices of a step of 8
// groups and ranks 0 and 1 acknowledge theirs, then waits until the step
// is stranded: its number, its groups, and the groups trained on.
func strandedOf4(ctx context.Context, t *testing.T, c *client.Client, lease time.Duration) (int64, map[groupKey]bool, map[groupKey]bool) {
	t.Helper()
	var n int64
	all, trained := map[groupKey]bool{}, map[groupKey]bool{}
	for rank := range 4 {
		st, err := c.NextRank(ctx, 8, rank, 4, client.FormatJSONL)
		if err != nil {
			t.Fatal(err)
		}
		if rank > 0 && st.Number != n {
			t.Fatalf("rank %d of 4: step %d, want step %d", rank, st.Number, n)
		}
		n = st.Number
		gs := sliceGroups(t, st.Body)
		maps.Copy(all, gs)
		if rank < 2 {
			maps.Copy(trained, gs)
		}
	}
	for rank := range 2 {
		if err := c.AckRank(ctx, n, rank, 4); err != nil {
			t.Fatal(err)
		}
	}
	if len(all) != 8 {
		t.Fatalf("the slices of step %d hold %d groups, want 8", n, len(all))
	}
	// The ranks' leases run out, and one lease more: stranded.
	time.Sleep(2*lease + lease/2)
	return n, all, trained
}

// TestServeKillWorldChange: a job of 4 ranks takes the slices of a step
// of 8 groups, ranks 0 and 1 acknowledge theirs, and the job is gone; the
// step stranded, rank 0 of a job of 2 takes it, which records it
// narrowed to its remainder (served/state.json: the acknowledged slices'
// groups in trained_groups, the others in groups) before the answer, and
// serve is killed with kill -9 at a point after that: right after the
// answer, or after rank 0 of 2 acknowledged its slice. Restarted, the job
// of 2 finishes the step: rank 1 takes its slice and, in the first case,
// rank 0 acknowledges the slice it held across the kill or takes it again
// once its lease ran out. No answer after the acks of the job of 4 holds
// a group of theirs, and every group of the step is trained on exactly
// once across both worlds (the acknowledged slices partition it), nor is
// any in the next step; the state records the step acknowledged.
func TestServeKillWorldChange(t *testing.T) {
	const lease = time.Second
	for _, tc := range []struct {
		name string
		// ackBeforeKill: rank 0 of 2 acknowledges its slice before the
		// kill; askAgain: after the restart, it takes its slice again
		// once its recorded lease ran out (its answer was lost).
		ackBeforeKill, askAgain bool
	}{
		{"kill after the narrowed answer, rank 0 acks across it", false, false},
		{"kill after the narrowed answer, rank 0 asks again", false, true},
		{"kill after rank 0 of 2 acked", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			out := filepath.Join(dir, "out")
			cfg := writeServeConfig(t, dir, writeTasks(t, dir, 400, 13), out)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			set := []string{cfg, "--set", "serve.lease=1s"}

			p := startServe(t, set...)
			c := client.New(p.url, "")
			n, all, trained := strandedOf4(ctx, t, c, lease)

			// Every answer after the acks of the job of 4.
			answers := []map[groupKey]bool{}
			take := func(c *client.Client, rank int) map[groupKey]bool {
				t.Helper()
				st, err := c.NextRank(ctx, 8, rank, 2, client.FormatJSONL)
				if err != nil {
					t.Fatal(err)
				}
				if st.Number != n || st.World != 2 || st.StepGroups != 8-len(trained) {
					t.Fatalf("rank %d of 2: step %d (world %d, %d groups), want step %d's %d groups left",
						rank, st.Number, st.World, st.StepGroups, n, 8-len(trained))
				}
				gs := sliceGroups(t, st.Body)
				answers = append(answers, gs)
				return gs
			}
			ack := func(c *client.Client, rank int) {
				t.Helper()
				if err := c.AckRank(ctx, n, rank, 2); err != nil {
					t.Fatal(err)
				}
			}
			acked := map[int]map[groupKey]bool{} // the slices of 2 acknowledged, by rank
			held := take(c, 0)
			if tc.ackBeforeKill {
				ack(c, 0)
				acked[0] = held
			}
			if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			<-p.done
			rec := recordedStep(t, out, n)
			if rec.World != 2 || !maps.Equal(keys(rec.Trained), trained) || len(rec.Groups)+len(rec.Trained) != 8 {
				t.Fatalf("after kill -9: step %d recorded %+v, want it cut for 2 with trained_groups %v", n, rec, trained)
			}

			p = startServe(t, set...)
			c = client.New(p.url, "")
			acked[1] = take(c, 1)
			ack(c, 1)
			if !tc.ackBeforeKill {
				if tc.askAgain {
					// Rank 0's lease, recorded before the kill, runs out.
					time.Sleep(lease + lease/2)
					again := take(c, 0)
					if !maps.Equal(again, held) {
						t.Fatalf("rank 0 of 2 again: %v, want its slice %v", again, held)
					}
				}
				ack(c, 0)
				acked[0] = held
			}

			for i, gs := range answers {
				for g := range gs {
					if trained[g] {
						t.Fatalf("answer %d after the acks of 4 ranks holds %v, trained on", i, g)
					}
				}
			}
			times := map[groupKey]int{}
			for g := range trained {
				times[g]++
			}
			for _, gs := range acked {
				for g := range gs {
					times[g]++
				}
			}
			for g := range all {
				if times[g] != 1 {
					t.Fatalf("group %v of step %d trained on %d times, want once (trained by 4: %v, acked by 2: %v)", g, n, times[g], trained, acked)
				}
			}
			if len(times) != len(all) {
				t.Fatalf("%d groups trained on, step %d has %d", len(times), n, len(all))
			}
			st, err := c.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.Steps.Pending != 0 || st.Steps.Acked != 1 {
				t.Fatalf("at the end: steps %+v, want step %d acknowledged", st.Steps, n)
			}
			// The next step, made after the restart, holds none of step
			// n's groups (its trained ones stay taken across the kill).
			next, err := c.Next(ctx, 8, client.FormatJSONL)
			if err != nil {
				t.Fatal(err)
			}
			for g := range sliceGroups(t, next.Body) {
				if next.Number == n || all[g] {
					t.Fatalf("the next step, %d, holds %v of step %d", next.Number, g, n)
				}
			}
			if code := p.signal(t, syscall.SIGTERM); code != 130 {
				t.Fatalf("SIGTERM: exit %d: %s", code, p.log())
			}
			if rec := recordedStep(t, out, n); !rec.Acked || !maps.Equal(keys(rec.Trained), trained) {
				t.Fatalf("at the end: step %d recorded %+v, want it acknowledged, trained_groups %v", n, rec, trained)
			}
		})
	}
}

// TestServeKillWorldChangeRandom: as TestServeKillWorldChange, the step
// narrowed for a job of 2 by rank 0's answer, but serve is killed with
// kill -9 at a random moment while the job of 2 goes on (rank 0
// acknowledging its slice, rank 1 taking and acknowledging its own, at
// once); restarted, each rank acknowledges the slice it holds or takes
// it (once the lease recorded for a lost answer ran out). In each of 4
// rounds (seeded) no answer holds a group trained on, each rank gets the
// same slice every time, the two slices partition the remainder, and
// served/state.json records the step acknowledged with the job of 4's
// acknowledged groups in trained_groups and the remainder's in groups.
func TestServeKillWorldChangeRandom(t *testing.T) {
	const lease = time.Second
	for round := range 4 {
		t.Run(fmt.Sprint("round ", round), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(uint64(round), 29))
			dir := t.TempDir()
			out := filepath.Join(dir, "out")
			cfg := writeServeConfig(t, dir, writeTasks(t, dir, 400, 13), out)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			set := []string{cfg, "--set", "serve.lease=1s"}
			p := startServe(t, set...)
			c := client.New(p.url, "")
			n, all, trained := strandedOf4(ctx, t, c, lease)

			var mu sync.Mutex
			held := map[int]map[groupKey]bool{} // each rank's slice of 2
			// take has rank take its slice of 2: an error of the
			// request is returned, an answer not the rank's slice of
			// the remainder fails the test.
			take := func(ctx context.Context, c *client.Client, rank int) error {
				st, err := c.NextRank(ctx, 8, rank, 2, client.FormatJSONL)
				if err != nil {
					return err
				}
				gs := sliceGroups(t, st.Body)
				mu.Lock()
				defer mu.Unlock()
				if st.Number != n || st.World != 2 {
					t.Errorf("rank %d of 2: step %d (world %d), want step %d", rank, st.Number, st.World, n)
					return nil
				}
				for g := range gs {
					if trained[g] {
						t.Errorf("rank %d of 2 got %v, trained on", rank, g)
					}
				}
				if prev, ok := held[rank]; ok && !maps.Equal(prev, gs) {
					t.Errorf("rank %d of 2 got %v, before %v", rank, gs, prev)
				}
				held[rank] = gs
				return nil
			}
			if err := take(ctx, c, 0); err != nil {
				t.Fatal(err)
			}
			// The job of 2 goes on; serve is killed at a random moment,
			// the job's requests then given up (the client would retry
			// the refused connections).
			jobCtx, stopJob := context.WithCancel(ctx)
			var wg sync.WaitGroup
			wg.Add(2)
			go func() {
				defer wg.Done()
				_ = c.AckRank(jobCtx, n, 0, 2) // cut short by the kill, or not: acknowledged again after it
			}()
			go func() {
				defer wg.Done()
				if take(jobCtx, c, 1) == nil {
					_ = c.AckRank(jobCtx, n, 1, 2) // likewise
				}
			}()
			time.Sleep(time.Duration(rng.IntN(40)) * time.Millisecond)
			if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			<-p.done
			stopJob()
			wg.Wait()
			if t.Failed() {
				t.FailNow()
			}

			p = startServe(t, set...)
			c = client.New(p.url, "")
			if len(held) < 2 {
				// Rank 1's request may have been recorded, its answer
				// lost: its slice is served again once the lease
				// recorded runs out (before, it would get a new step).
				time.Sleep(lease + lease/2)
			}
			for rank := range 2 {
				if _, ok := held[rank]; !ok {
					if err := take(ctx, c, rank); err != nil {
						t.Fatal(err)
					}
				}
				if err := c.AckRank(ctx, n, rank, 2); err != nil {
					t.Fatal(err)
				}
			}
			if code := p.signal(t, syscall.SIGTERM); code != 130 {
				t.Fatalf("SIGTERM: exit %d: %s", code, p.log())
			}
			rest := map[groupKey]bool{}
			for g := range all {
				if !trained[g] {
					rest[g] = true
				}
			}
			got := map[groupKey]bool{}
			for rank, gs := range held {
				for g := range gs {
					if got[g] {
						t.Fatalf("group %v in both slices of 2 (rank %d)", g, rank)
					}
					got[g] = true
				}
			}
			if !maps.Equal(got, rest) {
				t.Fatalf("the slices of 2 hold %v, want the remainder %v", got, rest)
			}
			rec := recordedStep(t, out, n)
			if !rec.Acked || !maps.Equal(keys(rec.Trained), trained) || !maps.Equal(keys(rec.Groups), rest) {
				t.Fatalf("at the end: step %d recorded %+v, want it acknowledged, trained_groups %v, groups %v", n, rec, trained, rest)
			}
		})
	}
}
