package runner_test

import (
	"testing"
	"time"

	"github.com/trajflow/trajflow/runner"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/stages/generate"
	"github.com/trajflow/trajflow/stages/groups"
)

// An offline run writes policy version 0 on every generated token, and
// the sampling parameters it sent; a run under a Policy writes its
// version, and a staleness gate admits and counts every group.
func TestRunPolicyVersions(t *testing.T) {
	for _, tt := range []struct {
		name    string
		version int64
		gate    bool
	}{
		{"offline", 0, false},
		{"policy", 5, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := quickstart(t, "source.limit=12", "generate.api=tokens")
			var opts runner.Options
			var gate *groups.Staleness
			if tt.version > 0 {
				opts.Continuous = &runner.Continuous{Policy: generate.NewPolicy(tt.version)}
			}
			if tt.gate {
				var err error
				gate, err = groups.NewStaleness(groups.StalenessOptions{Bound: groups.Bound{MaxStaleness: 0, StepGroups: 4}}, opts.Continuous.Policy)
				if err != nil {
					t.Fatal(err)
				}
				opts.Continuous.Staleness = gate
			}
			if _, err := run(t, cfg, opts); err != nil {
				t.Fatal(err)
			}
			rows := readBack(t, cfg.Output.Dir, schema.DataDir)
			if len(rows) != 48 {
				t.Fatalf("%d rows", len(rows))
			}
			for _, r := range rows {
				p := int32(len(r.PromptTokenIDs))
				if len(r.PolicyVersions) != 1 || r.AdmittedVersion != tt.version || r.MinPolicyVersion() != tt.version {
					t.Fatalf("row %s: spans %v admitted %d", r.TrajID, r.PolicyVersions, r.AdmittedVersion)
				}
				s := r.PolicyVersions[0]
				if s.Version != tt.version || s.VersionMax != tt.version || s.Start != p || s.End != p+int32(len(r.ResponseTokenIDs)) {
					t.Fatalf("row %s: span %+v over %d+%d tokens", r.TrajID, s, p, len(r.ResponseTokenIDs))
				}
				sp := r.Sampling
				if sp.Temperature == nil || *sp.Temperature != 1.0 || sp.MaxTokens == nil || *sp.MaxTokens != 256 || sp.TopP != nil || sp.TopK != nil {
					t.Fatalf("row %s: sampling %+v", r.TrajID, sp)
				}
			}
			if gate != nil {
				// (5 + 0 + 1)×4 = 24 groups may be accepted: all 12 were.
				if st := gate.Stats(); st.Running != 0 || st.Accepted != 12 || st.Requeued+st.Dropped+st.KeptStale != 0 {
					t.Errorf("gate %+v", st)
				}
			}
		})
	}
}

// The staleness gate paces a run: with max_staleness 0 and a batch of 2
// groups, only 2 groups are admitted per version; a simulated trainer
// moves the version on whenever the gate is full and idle.
func TestRunStalenessPaces(t *testing.T) {
	cfg := quickstart(t, "source.limit=12")
	pol := generate.NewPolicy(0)
	gate, err := groups.NewStaleness(groups.StalenessOptions{Bound: groups.Bound{MaxStaleness: 0, StepGroups: 2}}, pol)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			if st := gate.Stats(); st.Capacity == 0 && st.Running == 0 {
				_ = pol.SetVersion(st.Version + 1)
			}
		}
	}()
	if _, err := run(t, cfg, runner.Options{Continuous: &runner.Continuous{Policy: pol, Staleness: gate}}); err != nil {
		t.Fatal(err)
	}
	rows := readBack(t, cfg.Output.Dir, schema.DataDir)
	perVersion := map[int64]int{}
	for _, r := range rows {
		perVersion[r.AdmittedVersion]++
		if r.PolicyVersions[0].Version != r.AdmittedVersion {
			t.Errorf("row %s admitted at %d generated under %v", r.TrajID, r.AdmittedVersion, r.PolicyVersions)
		}
	}
	for v := range int64(6) {
		if perVersion[v] != 8 { // 2 groups of 4
			t.Errorf("version %d admitted %d rows, want 8 (%v)", v, perVersion[v], perVersion)
		}
	}
}
