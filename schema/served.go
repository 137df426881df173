package schema

import "fmt"

// The output layout of trajflow serve under output.dir, beside the run's
// own directories: every training step it serves is committed to
// served/step-NNNNNN/ (a copy of the step's kept groups from data/, in
// one part file) before it is served, and served/state.json records which
// groups each step holds, which steps were acknowledged and the policy
// version.
const (
	// ServedDir holds the served steps and the service's state.
	ServedDir = "served"
	// ServedStepPrefix names a step's folder: step-000012.
	ServedStepPrefix = "step-"
	// ServeStateFile is the service's state, replaced atomically.
	ServeStateFile = "state.json"
)

// ServedStepDir is the name of step n's folder under ServedDir.
func ServedStepDir(n int64) string { return fmt.Sprintf("%s%06d", ServedStepPrefix, n) }
