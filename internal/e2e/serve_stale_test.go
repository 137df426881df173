package e2e

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trajflow/trajflow/serve/client"
)

// TestServeKillStaleRequeue: under serve.max_staleness 1 with
// on_stale requeue, a policy version two ahead sets the queued groups
// aside as too stale to hand out (and those in flight finish stale), and
// serve is killed with kill -9 at a moment drawn after it: before the state records them, between the
// record and their new attempts, or after those were committed. Started
// again, it samples each task set aside again exactly once: every group
// served/state.json lists as stale, and every group dropped as stale when
// it finished (filtered/, filter_reason stale), has its next attempt
// committed, to data/ or filtered/, once; no attempt is committed twice;
// and a task's only attempts before its last are groups set aside as
// stale.
func TestServeKillStaleRequeue(t *testing.T) {
	if testing.Short() {
		t.Skip("several kill -9 cycles (skipped under -short)")
	}
	dir := t.TempDir()
	tasks := writeTasks(t, dir, 3000, 17)
	out := filepath.Join(dir, "out")
	cfg := writeServeConfig(t, dir, tasks, out)
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Slower requests than the other tests': groups are still in flight
	// when the version moves on, and finish stale.
	b = []byte(strings.NewReplacer("commit_interval: 100ms}", "commit_interval: 100ms, lease: 2s, max_staleness: 1, step_groups: 2}",
		"time_scale: 0.01", "time_scale: 1").Replace(string(b)))
	if err := os.WriteFile(cfg, b, 0o644); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(19, 0))
	version := int64(0)
	for round := range 5 {
		p := startServe(t, cfg)
		c := client.New(p.url, "")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		waitServe(ctx, t, c, "groups queued", func(st *client.Status) bool { return st.QueuedGroups >= 2 })
		// A version on lets the bound admit more; two more set the
		// queued groups aside, and those in flight finish stale.
		version++
		if err := c.SetPolicy(ctx, version); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		waitServe(ctx, t, c, "groups in flight", func(st *client.Status) bool { return st.InGeneration > 0 })
		version += 2
		if err := c.SetPolicy(ctx, version); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		time.Sleep(time.Duration(rng.IntN(1500)) * time.Millisecond)
		p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
		cancel()
	}

	// The last start: a trainer drains the queue, one step at a time,
	// and only then moves the version on (a trainer that moves it on
	// with groups of many versions queued has them go stale at hand-out
	// again and again), until every group recorded stale has its next
	// attempt committed.
	p := startServe(t, cfg)
	c := client.New(p.url, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stale map[groupKey]bool
	for {
		stale = staleListed(t, out)
		committed := committedIn(t, out)
		missing := setAsideWithout(stale, committed)
		if len(missing) == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("%d groups set aside as stale have no next attempt committed (%v): %s", len(missing), missing, p.log())
		}
		st, err := c.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.QueuedGroups >= 2 {
			step, err := c.Next(ctx, 2, client.FormatParquet)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Ack(ctx, step.Number); err != nil {
				t.Fatal(err)
			}
			continue
		}
		// The queue drained, a new version lets the bound admit more
		// (the new attempts among them) and sets at most one queued
		// group aside.
		version++
		if err := c.SetPolicy(ctx, version); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code := p.signal(t, syscall.SIGTERM); code != 130 {
		t.Fatalf("SIGTERM: exit %d: %s", code, p.log())
	}
	if len(stale) == 0 {
		t.Fatal("no group was found stale: the test set none aside")
	}
	stale = staleListed(t, out)
	committed := committedIn(t, out)
	last := map[int64]int{}
	for g := range committed {
		last[g.task] = max(last[g.task], g.attempt)
	}
	for g, reason := range committed {
		if g.attempt < last[g.task] && !stale[g] && reason != "stale" {
			t.Errorf("task %d: attempt %d (%q) is followed by attempt %d, but was not set aside as stale", g.task, g.attempt, reason, last[g.task])
		}
	}
	if missing := setAsideWithout(stale, committed); len(missing) > 0 {
		t.Errorf("groups set aside as stale without their next attempt committed: %v", missing)
	}
	dropped := 0
	for _, reason := range committed {
		if reason == "stale" {
			dropped++
		}
	}
	t.Logf("%d groups recorded stale at hand-out and %d dropped as stale when they finished over 5 kill -9 cycles, each sampled again once; %d groups committed", len(stale), dropped, len(committed))
}

// setAsideWithout is the groups set aside as stale, at hand-out (listed
// in the state) or when they finished (filtered/, filter_reason stale),
// whose next attempt is not committed.
func setAsideWithout(stale map[groupKey]bool, committed map[groupKey]string) []groupKey {
	var out []groupKey
	for g, reason := range committed {
		if reason == "stale" {
			stale[g] = true
		}
	}
	for g := range stale {
		if _, ok := committed[groupKey{g.task, g.attempt + 1}]; !ok {
			out = append(out, g)
		}
	}
	return out
}

// waitServe polls the status until ok holds, failing when ctx ends first.
func waitServe(ctx context.Context, t *testing.T, c *client.Client, what string, ok func(*client.Status) bool) {
	t.Helper()
	for {
		st, err := c.Status(ctx)
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok(st) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// staleListed is the groups served/state.json records as stale.
func staleListed(t *testing.T, out string) map[groupKey]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(out, "served", "state.json"))
	if os.IsNotExist(err) {
		return map[groupKey]bool{}
	}
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Stale [][2]int64 `json:"stale"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	out2 := map[groupKey]bool{}
	for _, g := range st.Stale {
		out2[groupKey{g[0], int(g[1])}] = true
	}
	return out2
}

// committedIn is the groups committed to data/ and filtered/, each with
// its filter reason (empty: kept); a group committed twice, in one
// directory or both, is an error.
func committedIn(t *testing.T, out string) map[groupKey]string {
	t.Helper()
	got := map[groupKey]string{}
	where := map[groupKey]string{}
	for _, dir := range []string{"data", "filtered"} {
		for g, rows := range groupsIn(t, readDataset(t, filepath.Join(out, dir))) {
			if prev, ok := where[g]; ok {
				t.Fatalf("group %v committed to %s and %s", g, prev, dir)
			}
			where[g] = dir
			got[g] = rows[0].FilterReason
		}
	}
	return got
}
