package serve

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/trajflow/trajflow/internal/durable"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/serve/client"
)

// stateVersion is the version of the state file's layout.
const stateVersion = 1

// state is the service's durable state (served/state.json): the steps
// assembled so far with the groups each holds, whether it was
// acknowledged and until when its leases run, the policy version and
// whether the fleet is paused. Every lease is recorded before its answer
// (a new step's with the step; one served again, a rank's slice of a step
// another rank made, or a stranded step taken by a caller of another
// kind by recordLease), so a restart keeps it.
type state struct {
	Version int `json:"version"`
	// Policy is the last policy version set (POST /v1/policy).
	Policy int64 `json:"policy_version"`
	// Paused is the pause mode while the fleet is paused (POST
	// /v1/pause), empty otherwise: a restarted service comes back paused.
	Paused string `json:"paused,omitempty"`
	// PausedAt and PausedBy are when the pause was recorded and who asked
	// for it (the request's by, else its remote address); empty when not
	// paused. serve.pause_timeout counts from PausedAt, across restarts.
	PausedAt time.Time `json:"paused_since,omitzero"`
	PausedBy string    `json:"paused_by,omitempty"`
	// Next is the number of the next step.
	Next  int64        `json:"next_step"`
	Steps []*stepState `json:"steps"`
	// Stale are the kept groups found too stale to serve when a step was
	// made (serve.max_staleness, serve.on_stale requeue or drop): in
	// data/, never served. Under requeue each one's task is sampled
	// again once it is recorded here, and a restart samples again those
	// whose new attempt was not committed.
	Stale []groupRef `json:"stale,omitempty"`
}

// stepState is one assembled step.
type stepState struct {
	Step   int64      `json:"step"`
	Groups []groupRef `json:"groups"`
	Rows   int        `json:"rows"`
	// Versions are the policy versions the step's tokens were generated
	// under, ascending.
	Versions []int64 `json:"policy_versions"`
	Acked    bool    `json:"acked"`
	// LeasedUntil is when the lease of the step's latest serving whole
	// runs out (or, for a step of a world, its maker rank's first):
	// recorded with the step and again when it is served again, so a
	// restart keeps that lease, and a trainer that goes on across the
	// restart acknowledges its step rather than another trainer getting
	// it too.
	LeasedUntil time.Time `json:"leased_until,omitzero"`
	// LeasedRank is the rank whose slice LeasedUntil leases (a step of a
	// world).
	LeasedRank int `json:"leased_rank,omitempty"`
	// RankLeases are, for a step of a world, when the leases of the other
	// ranks' slices (or a slice served again, or the whole step taken by
	// a whole-step caller: rank -1) run out, by rank. A whole step served
	// again records its new lease in LeasedUntil.
	RankLeases map[int]time.Time `json:"rank_leases,omitempty"`
	// World is the number of data-parallel ranks the step is served to,
	// each its slice (partition); 0: served whole. GroupTokens and
	// GroupRows are its groups' tokens and rows, which the slices are
	// cut by (recorded for a whole step too: a stranded one may be cut
	// for a world; steps recorded before lack them); RanksAcked the ranks that acknowledged their slice (the
	// step is Acked once every rank did).
	World       int     `json:"world,omitempty"`
	GroupTokens []int64 `json:"group_tokens,omitempty"`
	GroupRows   []int   `json:"group_rows,omitempty"`
	RanksAcked  []int   `json:"ranks_acked,omitempty"`
	// Trained are the groups of slices the ranks of an earlier world
	// acknowledged before the step was stranded and its remainder went
	// to a caller of another kind (narrowed): never served again.
	// Groups, GroupTokens, GroupRows and Rows are then the remainder's,
	// which the step's file holds with the trained groups; Versions stay
	// the whole step's.
	Trained []groupRef `json:"trained_groups,omitempty"`
	// Drift is the drift between the trainer's logprobs and the
	// engine's, recorded with the ack that sent them (a step of a world:
	// its ranks' slices merged); nil when no ack sent any.
	Drift *client.StepDriftRecord `json:"drift,omitempty"`
}

// made is every group the step was made of: the groups trained on
// before it was narrowed (Trained), then those it serves (Groups).
func (st *stepState) made() []groupRef { return slices.Concat(st.Trained, st.Groups) }

// groupRef names a group: its task and attempt.
type groupRef [2]int64

func (g groupRef) String() string { return fmt.Sprintf("task %d attempt %d", g[0], g[1]) }

// key is the group's key in the run.
func (g groupRef) key() pipeline.GroupKey {
	return pipeline.GroupKey{TaskIndex: g[0], Attempt: int(g[1])}
}

// loadState reads dir's state file; a missing one is a fresh state.
func loadState(dir string) (*state, error) {
	path := filepath.Join(dir, schema.ServeStateFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &state{Version: stateVersion, Next: 1}, nil
	}
	if err != nil {
		return nil, err
	}
	var s state
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s is damaged: %w", path, err)
	}
	if s.Version != stateVersion {
		return nil, fmt.Errorf("%s: state version %d, this trajflow reads version %d", path, s.Version, stateVersion)
	}
	if s.Next < 1 {
		s.Next = 1
	}
	for _, st := range s.Steps {
		if st.Step >= s.Next {
			s.Next = st.Step + 1
		}
	}
	return &s, nil
}

// stateMode is the mode of a new state file; a replaced one keeps its
// own.
const stateMode = 0o644

// saveState replaces dir's state file with st atomically (internal/durable:
// written under a temporary name, synced, renamed into place, the
// directory synced), keeping the file's mode.
func saveState(dir string, st *state) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return durable.WriteFile(filepath.Join(dir, schema.ServeStateFile), b, stateMode)
}

// removeStale removes what a crash left in the served directory: the
// temporary folders and files of a step or a state being written, and the
// step folders the state does not record (written, but never served).
func removeStale(dir string, s *state) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	known := map[string]bool{}
	for _, st := range s.Steps {
		known[schema.ServedStepDir(st.Step)] = true
	}
	for _, e := range entries {
		name := e.Name()
		stale := schema.IsTemp(name)
		if strings.HasPrefix(name, schema.ServedStepPrefix) && e.IsDir() && !known[name] {
			stale = true
		}
		if stale {
			if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
				return err
			}
		}
	}
	return nil
}
