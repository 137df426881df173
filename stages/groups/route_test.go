package groups_test

import (
	"fmt"
	"testing"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/stages/groups"
)

// Route sends each verdict to its directory and marks the group as the
// verdict says.
func TestRoute(t *testing.T) {
	group := func(kept bool, reason string) *pipeline.Group {
		r := &pipeline.Rollout{Status: pipeline.StatusOK, Kept: kept, FilterReason: reason}
		if !kept && reason != "" {
			r.Status = pipeline.StatusFiltered
		}
		return &pipeline.Group{Rollouts: []*pipeline.Rollout{r}, Kept: kept, FilterReason: reason}
	}
	drain := groups.Config{OnTarget: "drain"}
	cancel := groups.Config{OnTarget: "cancel"}
	for _, tt := range []struct {
		name       string
		routing    groups.Routing
		verdict    groups.Verdict
		group      *pipeline.Group
		dir        string
		ok, kept   bool
		wantReason string
	}{
		{"kept", groups.Routing{Config: cancel}, groups.Keep, group(true, ""), schema.DataDir, true, true, ""},
		{"kept unfiltered", groups.Routing{Config: cancel}, groups.KeepUnfiltered, group(false, "zero_std"), schema.DataDir, true, true, groups.ReasonUnfiltered + "zero_std"},
		{"surplus drained", groups.Routing{Config: drain}, groups.Surplus, group(true, ""), schema.SurplusDir, true, false, groups.ReasonTarget},
		{"surplus cancelled, filtered written", groups.Routing{Config: cancel, Filtered: true}, groups.Surplus, group(true, ""), schema.FilteredDir, true, false, groups.ReasonTarget},
		{"surplus cancelled", groups.Routing{Config: cancel}, groups.Surplus, group(true, ""), "", false, false, groups.ReasonTarget},
		{"error", groups.Routing{Config: cancel}, groups.Drop, group(false, groups.ReasonError), schema.ErrorsDir, true, false, groups.ReasonError},
		{"dropped, filtered written", groups.Routing{Config: cancel, Filtered: true}, groups.Drop, group(false, "zero_std"), schema.FilteredDir, true, false, "zero_std"},
		{"dropped", groups.Routing{Config: cancel}, groups.Drop, group(false, "zero_std"), "", false, false, "zero_std"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir, ok := tt.routing.Route(groups.Decision{Group: tt.group, Verdict: tt.verdict})
			if dir != tt.dir || ok != tt.ok {
				t.Errorf("Route: %q, %v; want %q, %v", dir, ok, tt.dir, tt.ok)
			}
			if g := tt.group; g.Kept != tt.kept || g.FilterReason != tt.wantReason {
				t.Errorf("group kept %v, reason %q; want %v, %q", g.Kept, g.FilterReason, tt.kept, tt.wantReason)
			}
		})
	}
}

// A kept group goes to data/, a drained surplus group to surplus/, and a
// dropped one nowhere unless output.filtered writes it.
func ExampleRouting_Route() {
	routing := groups.Routing{Config: groups.Config{OnTarget: "drain"}}
	for _, v := range []groups.Verdict{groups.Keep, groups.Surplus, groups.Drop} {
		g := &pipeline.Group{Rollouts: []*pipeline.Rollout{{Status: pipeline.StatusOK}}, Kept: v == groups.Keep}
		if v == groups.Drop {
			g.FilterReason = "zero_std"
		}
		dir, ok := routing.Route(groups.Decision{Group: g, Verdict: v})
		fmt.Println(dir, ok)
	}
	// Output:
	// data true
	// surplus true
	//  false
}
