package serve

import (
	"fmt"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/stages/collate"
	"github.com/trajflow/trajflow/stages/groups"
)

// chatGroups returns k kept groups of tasks from, from+1, … as the
// service reads them from committed rows (versionsOf over the collator's
// record): rows of answers without token ids (generate.api chat), each
// admitted at version admitted and answered at version answered.
func chatGroups(t *testing.T, from, k int, admitted, answered int64) []*group {
	t.Helper()
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer alloc.AssertSize(t, 0)
	c := collate.New(alloc, 100)
	defer c.Release()
	for i := range k {
		task := &pipeline.Task{Index: int64(from + i)}
		g := &pipeline.Group{Key: pipeline.GroupKey{TaskIndex: task.Index}, Kept: true}
		for j := range 2 {
			r := &pipeline.Rollout{Task: task, RolloutIndex: j, Status: pipeline.StatusOK, Kept: true,
				AdmittedVersion: admitted, CompletionTokens: 30, TokenIDsMissing: true,
				Messages: []pipeline.Message{{Role: pipeline.RoleUser, Content: "q"}, {Role: pipeline.RoleAssistant, Content: "a", Turn: 1}}}
			r.NoteAnswered(answered)
			g.Rollouts = append(g.Rollouts, r)
		}
		c.Add(g)
	}
	rec := c.Flush()
	defer rec.Release()
	versions := versionsOf(rec)
	var out []*group
	if err := eachGroup(rec, func(ref groupRef, start, end int) {
		g := &group{ref: ref, rows: end - start}
		for i := start; i < end; i++ {
			g.versions = addVersions(g.versions, versions(i))
		}
		out = append(out, g)
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// The loop of issue 46 at the ledger: a trainer takes a step, moves the
// policy on by two versions and takes the next, under max_staleness 1 and
// on_stale requeue, while the fleet answers without token ids (no spans).
// Each round's groups, generated after the bump (their rollouts admitted
// before it, waiting out the pause), are served, none set aside. Read as
// version 0 (their missing spans) or as their admission's version, every
// one of them was set aside as stale and the step never came.
func TestLedgerChatRowsAcrossVersionJumps(t *testing.T) {
	db := &store{}
	run := newHeldRun()
	l, err := newLedger(ledgerConfig{Persist: db.persist, Now: newFakeClock().now, Lease: testLease, Staleness: &groups.Bound{MaxStaleness: 1}, OnStale: groups.StaleRequeue, Unserved: run.u})
	if err != nil {
		t.Fatal(err)
	}
	const k = 4
	for round := range 6 {
		v := int64(2 * round)
		if err := l.setVersion(v); err != nil {
			t.Fatal(err)
		}
		l.enqueue(run.hold(chatGroups(t, round*k, k, max(v-2, 0), v)), nil)
		if got := stepOf(t, l, k); len(got) != k {
			st := statusOf(l)
			t.Fatalf("round %d at version %d: step of %v, want %d groups; %d set aside as stale", round, v, got, k, st.StaleGroups)
		}
	}
	if st := statusOf(l); st.StaleGroups != 0 || st.StaleAlarm != nil {
		t.Fatalf("status: %d stale, alarm %+v", st.StaleGroups, st.StaleAlarm)
	}
}

// The stale guard: over a window of the latest kept groups decided, more
// than half set aside as stale turns the alarm on (logged once, with the
// versions involved; shown in the status) and fewer turns it off again.
// A window not yet full never alarms.
func TestStaleGuard(t *testing.T) {
	db := &store{}
	run := newHeldRun()
	l, err := newLedger(ledgerConfig{Persist: db.persist, Now: newFakeClock().now, Lease: testLease, Staleness: &groups.Bound{MaxStaleness: 1}, OnStale: groups.StaleRequeue, Unserved: run.u, StaleWindow: 8})
	if err != nil {
		t.Fatal(err)
	}
	if w := len(l.sp.watch.ring); w != 32 {
		t.Fatalf("window %d, want at least 32", w)
	}
	l.sp.watch = newStaleWatch(8)
	if err := l.setVersion(3); err != nil {
		t.Fatal(err)
	}
	// 3 handed out, then 4 set aside: 4 of 7, the window not full.
	l.enqueue(run.hold(versioned(0, 3, 3, 3)), nil)
	if got := stepOf(t, l, 3); len(got) != 3 {
		t.Fatalf("step of %v", got)
	}
	l.enqueue(run.hold(versioned(10, 0, 1, 1, 0)), nil)
	if got := stepOf(t, l, 3); got != nil {
		t.Fatalf("step of stale groups %v", got)
	}
	if line := l.staleCheck(); line != "" || statusOf(l).StaleAlarm != nil {
		t.Fatalf("alarm with the window not full: %q", line)
	}
	if st := statusOf(l); st.StaleShare != 4.0/7 {
		t.Fatalf("stale share %v, want 4/7", st.StaleShare)
	}
	// One more set aside: 5 of 8.
	l.enqueue(run.hold(versioned(20, 1)), nil)
	if got := stepOf(t, l, 3); got != nil {
		t.Fatalf("step of stale groups %v", got)
	}
	line := l.staleCheck()
	for _, want := range []string{"5 of the last 8", "versions 0–1", "version 3", "max_staleness 1"} {
		if !strings.Contains(line, want) {
			t.Errorf("alarm line %q lacks %q", line, want)
		}
	}
	a := statusOf(l).StaleAlarm
	if a == nil || a.SetAside != 5 || a.Window != 8 || a.Oldest != 0 || a.Newest != 1 || a.Policy != 3 || a.MaxStaleness != 1 {
		t.Fatalf("status alarm %+v", a)
	}
	if again := l.staleCheck(); again != "" {
		t.Fatalf("the alarm logged twice: %q", again)
	}
	// Fresh groups handed out push the stale ones out of the window.
	l.enqueue(run.hold(versioned(30, 3, 3, 3, 3)), nil)
	if got := stepOf(t, l, 2); len(got) != 2 {
		t.Fatalf("step of %v", got)
	}
	if line := l.staleCheck(); line != "" { // 5 of 8 still: 2 handed out replaced 2 handed out
		t.Fatalf("alarm off too soon: %q", line)
	}
	if got := stepOf(t, l, 2); len(got) != 2 {
		t.Fatalf("step of %v", got)
	}
	// The last two handed out pushed out the third handed out of step 1
	// and the first set aside: 4 of 8 is not more than half.
	if line := l.staleCheck(); !strings.Contains(line, "back to") || statusOf(l).StaleAlarm != nil {
		t.Fatalf("alarm not off after fresh steps: %q, status %+v", line, statusOf(l).StaleAlarm)
	}
}

// staleWatch alone: the share over a ring of decisions.
func TestStaleWatchRing(t *testing.T) {
	for _, tt := range []struct {
		marks string // s: set aside, h: handed out
		share float64
		alarm bool
	}{
		{"", 0, false},
		{"sss", 1, false}, // not full
		{"ssss", 1, true},
		{"sshh", 0.5, false}, // half is not more than half
		{"hhsss", 0.75, true},
		{"ssshh", 0.5, false},
		{"sssshhh", 0.25, false},
	} {
		t.Run(fmt.Sprintf("%q", tt.marks), func(t *testing.T) {
			w := newStaleWatch(4)
			for i, m := range tt.marks {
				w.add(m == 's', int64(i))
			}
			if w.share() != tt.share || w.alarming() != tt.alarm {
				t.Fatalf("share %v alarming %v, want %v %v", w.share(), w.alarming(), tt.share, tt.alarm)
			}
		})
	}
}
