package groups_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/stages/groups"
)

// versions is a settable groups.Versions.
type versions struct {
	mu sync.Mutex
	v  int64
	ch chan struct{}
}

func newVersions() *versions { return &versions{ch: make(chan struct{})} }

func (x *versions) Version() int64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.v
}

func (x *versions) Changed() <-chan struct{} {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.ch
}

func (x *versions) set(v int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.v = v
	close(x.ch)
	x.ch = make(chan struct{})
}

// admitNow admits without waiting: false when the gate is full.
func admitNow(s *groups.Staleness) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := s.Admit(ctx)
	return err == nil
}

// The capacity is (v + s + 1)×B − (accepted + running): dropped groups
// free their place, accepted ones hold it until the version moves on.
func TestStalenessCapacity(t *testing.T) {
	ver := newVersions()
	s, err := groups.NewStaleness(groups.StalenessOptions{Bound: groups.Bound{MaxStaleness: 1, StepGroups: 4}}, ver)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		if !admitNow(s) {
			t.Fatalf("group %d not admitted at version 0 (capacity 8)", i)
		}
	}
	if admitNow(s) {
		t.Fatal("a 9th group admitted at version 0, s 1, B 4")
	}
	// The keep rule drops one: its place is free, and an admission
	// waiting for it goes on.
	waiting := make(chan error, 1)
	go func() {
		_, err := s.Admit(context.Background())
		waiting <- err
	}()
	select {
	case <-waiting:
		t.Fatal("admitted with the gate full")
	case <-time.After(30 * time.Millisecond):
	}
	s.Done(false)
	select {
	case err := <-waiting:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a dropped group's place did not wake the waiting admission")
	}
	for range 8 {
		s.Done(true)
	}
	if admitNow(s) {
		t.Fatal("admitted with 8 accepted at version 0")
	}
	// A waiting admission goes on when the version moves.
	done := make(chan error, 1)
	go func() {
		_, err := s.Admit(context.Background())
		done <- err
	}()
	select {
	case <-done:
		t.Fatal("admitted before the version moved")
	case <-time.After(30 * time.Millisecond):
	}
	ver.set(1)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Version != 1 || st.Running != 1 || st.Accepted != 8 || st.Capacity != 3 {
		t.Errorf("stats %+v, want version 1, running 1, accepted 8, capacity 3", st)
	}
}

func admittedGroup(admitted ...int64) *pipeline.Group {
	g := &pipeline.Group{Kept: true}
	for _, a := range admitted {
		g.Rollouts = append(g.Rollouts, &pipeline.Rollout{Status: pipeline.StatusOK, Kept: true, AdmittedVersion: a})
	}
	return g
}

// A kept group older than max_staleness is kept, dropped or requeued as
// on_stale says, and counted; a fresh or dropped group is left alone.
func TestStalenessOnStale(t *testing.T) {
	for _, tt := range []struct {
		onStale  string
		kept     bool
		requeue  bool
		requeued int
		dropped  int
		keptOld  int
	}{
		{"", false, true, 1, 0, 0},
		{groups.StaleRequeue, false, true, 1, 0, 0},
		{groups.StaleDrop, false, false, 0, 1, 0},
		{groups.StaleKeep, true, false, 0, 0, 1},
	} {
		ver := newVersions()
		s, err := groups.NewStaleness(groups.StalenessOptions{Bound: groups.Bound{MaxStaleness: 1, StepGroups: 2}, OnStale: tt.onStale}, ver)
		if err != nil {
			t.Fatal(err)
		}
		ver.set(3)
		fresh := admittedGroup(2, 3)
		if s.Apply(fresh) || !fresh.Kept || s.Stale(fresh) {
			t.Errorf("%s: a group admitted at 2 is stale at 3 with s 1", tt.onStale)
		}
		// Judged on its tokens, not its admission: admitted at 1, it
		// waited out a pause and was generated at 3.
		waited := admittedGroup(1, 3)
		waited.Rollouts[0].NoteAnswered(3)
		if s.Stale(waited) {
			t.Errorf("%s: a group whose tokens are of version 3 is stale at 3", tt.onStale)
		}
		old := admittedGroup(3, 1)
		if !s.Stale(old) {
			t.Fatalf("%s: a group admitted at 1 is not stale at 3", tt.onStale)
		}
		requeue := s.Apply(old)
		if requeue != tt.requeue || old.Kept != tt.kept {
			t.Errorf("%s: requeue %v kept %v", tt.onStale, requeue, old.Kept)
		}
		if !tt.kept && (old.FilterReason != groups.ReasonStale || old.Rollouts[0].Status != pipeline.StatusFiltered || old.Rollouts[1].Kept) {
			t.Errorf("%s: group %+v rollout %+v", tt.onStale, old, old.Rollouts[0])
		}
		st := s.Stats()
		if st.Requeued != tt.requeued || st.Dropped != tt.dropped || st.KeptStale != tt.keptOld {
			t.Errorf("%s: stats %+v", tt.onStale, st)
		}
		dropped := admittedGroup(0)
		dropped.Kept = false
		if s.Apply(dropped) {
			t.Errorf("%s: a dropped group requeued", tt.onStale)
		}
	}
}

func TestStalenessOptionsValidate(t *testing.T) {
	for _, tt := range []struct {
		o    groups.StalenessOptions
		want string
	}{
		{groups.StalenessOptions{Bound: groups.Bound{MaxStaleness: -1, StepGroups: 1}}, "max_staleness"},
		{groups.StalenessOptions{Bound: groups.Bound{StepGroups: 0}}, "step_groups"},
		{groups.StalenessOptions{Bound: groups.Bound{StepGroups: 1}, OnStale: "later"}, "on_stale"},
		{groups.StalenessOptions{Bound: groups.Bound{StepGroups: 1}, Accepted: -2}, "accepted"},
	} {
		_, err := groups.NewStaleness(tt.o, newVersions())
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: %v, want an error naming %s", tt.o, err, tt.want)
		}
	}
	if _, err := groups.NewStaleness(groups.StalenessOptions{Bound: groups.Bound{StepGroups: 1}}, nil); err == nil {
		t.Error("no versions accepted")
	}
}

// Discard gives back the places of accepted groups that will never be
// consumed, counted as on_stale says (requeued under requeue, the
// default; dropped under drop); a discard of none changes nothing.
func TestStalenessDiscard(t *testing.T) {
	for _, tt := range []struct {
		name              string
		onStale           string
		accepted, discard int
		// At version 0 with max_staleness 0 and B 4 the capacity is
		// 4 − accepted.
		wantAccepted, wantCapacity, wantRequeued, wantDropped int
	}{
		{"none", "", 4, 0, 4, 0, 0, 0},
		{"two, requeue", "", 4, 2, 2, 2, 2, 0},
		{"two, drop", groups.StaleDrop, 4, 2, 2, 2, 0, 2},
		{"more than accepted", groups.StaleDrop, 1, 3, 0, 4, 0, 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := groups.NewStaleness(groups.StalenessOptions{Bound: groups.Bound{MaxStaleness: 0, StepGroups: 4}, Accepted: tt.accepted, OnStale: tt.onStale}, newVersions())
			if err != nil {
				t.Fatal(err)
			}
			s.Discard(tt.discard)
			st := s.Stats()
			if st.Accepted != tt.wantAccepted || st.Capacity != tt.wantCapacity || st.Requeued != tt.wantRequeued || st.Dropped != tt.wantDropped {
				t.Fatalf("stats %+v, want accepted %d capacity %d requeued %d dropped %d", st, tt.wantAccepted, tt.wantCapacity, tt.wantRequeued, tt.wantDropped)
			}
		})
	}
}

// TestBound: max_staleness's rules, written once: the capacity formula
// (v + s + 1) × B with a version below 0 counted as 0, the stale test
// v - a > s, and the check naming serve's keys.
func TestBound(t *testing.T) {
	b := groups.Bound{MaxStaleness: 1, StepGroups: 8}
	for v, want := range map[int64]int{-3: 16, 0: 16, 1: 24, 5: 56} {
		if got := b.Groups(v); got != want {
			t.Errorf("Groups(%d) = %d, want %d", v, got, want)
		}
	}
	if b.Stale(4, 5) || !b.Stale(3, 5) {
		t.Error("Stale: a group one version behind is fresh under s = 1, two behind stale")
	}
	err := groups.Bound{MaxStaleness: -1}.Validate()
	if err == nil || !strings.Contains(err.Error(), "max_staleness: must be >= 0, got -1") || !strings.Contains(err.Error(), "step_groups: required with max_staleness") {
		t.Errorf("Validate: %v", err)
	}
	if err := b.Validate(); err != nil {
		t.Error(err)
	}
}
