package groups

import (
	"github.com/trajflow/trajflow/schema"
)

// Routing is the groups stage's routing policy: which output directory a
// decided group goes to.
type Routing struct {
	// Config is the groups section (groups.on_target, the step
	// statistics' parameters).
	Config Config
	// Filtered writes the groups the keep rule dropped (output.filtered).
	Filtered bool
	// Steps gives the kept groups their step statistics (output.steps).
	Steps bool
}

// Route applies a decision to its group (MarkSurplus, MarkUnfiltered;
// StepStats for a kept group under Steps) and names the output directory
// the group goes to:
//
//	Keep, KeepUnfiltered           ─▶ data/
//	Surplus (on_target: drain)     ─▶ surplus/
//	a member failed (ReasonError)  ─▶ errors/
//	dropped otherwise              ─▶ filtered/ (Filtered), else nowhere
//
// ok is false for a group written nowhere.
func (rt Routing) Route(d Decision) (dir string, ok bool) {
	g := d.Group
	switch d.Verdict {
	case Surplus:
		MarkSurplus(g)
	case KeepUnfiltered:
		MarkUnfiltered(g)
	}
	switch {
	case d.Verdict == Keep || d.Verdict == KeepUnfiltered:
		if rt.Steps {
			StepStats(g, StepParamsOf(rt.Config))
		}
		return schema.DataDir, true
	case d.Verdict == Surplus && rt.Config.OnTarget == "drain":
		return schema.SurplusDir, true
	case g.FilterReason == ReasonError:
		return schema.ErrorsDir, true
	case rt.Filtered:
		return schema.FilteredDir, true
	}
	return "", false
}
