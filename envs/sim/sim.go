package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/trajflow/trajflow/envs"
	simulator "github.com/trajflow/trajflow/inference/sim"
	"github.com/trajflow/trajflow/pipeline"
)

// Name is the environment's registered name.
const Name = "sim"

func init() { envs.Register(Name, New) }

// Options are the sim environment's config keys: none.
type Options struct{}

// Env follows the simulator's trailer. It keeps no state.
type Env struct{}

var _ envs.Env = (*Env)(nil)

// ErrNoTrailer is returned when the last response carried no trailer.
var ErrNoTrailer = errors.New("sim env needs the sim:// backend or trajflow sim-server (the response carried no sim trailer)")

// New builds the sim environment; it has no options of its own.
func New(opts envs.Options) (envs.Env, error) {
	var o Options
	if err := opts.Decode(&o); err != nil {
		return nil, err
	}
	return &Env{}, nil
}

// Reset starts a trajectory; the simulator's replies drive the rest.
func (e *Env) Reset(ctx context.Context, r *pipeline.Rollout) (*envs.Reset, error) {
	return &envs.Reset{}, nil
}

// Step waits the trailer's delay, then continues with an observation of
// obs_tokens words while turns are left, or ends with reward 1 (correct) or 0.
func (e *Env) Step(ctx context.Context, r *pipeline.Rollout, action pipeline.Message) (*envs.Step, error) {
	tr, err := ReadTrailer(r.Extra)
	if err != nil {
		return nil, err
	}
	if tr.EnvDelayMs > 0 {
		t := time.NewTimer(time.Duration(tr.EnvDelayMs * float64(time.Millisecond)))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
	if tr.TurnsLeft > 0 {
		return &envs.Step{Observations: []pipeline.Message{{
			Role: pipeline.RoleUser, Content: Observation(tr.ObsTokens), Turn: action.Turn,
		}}}, nil
	}
	acc := 0.0
	if tr.Correct {
		acc = 1
	}
	return &envs.Step{Reward: acc, Terminated: true, Metrics: map[string]float64{"acc": acc}}, nil
}

// MaxObsTokens bounds a trailer's obs_tokens, so a malformed trailer cannot
// make an observation of gigabytes.
const MaxObsTokens = 1 << 20

// ReadTrailer decodes a response's trailer; an absent one is ErrNoTrailer.
func ReadTrailer(raw json.RawMessage) (simulator.Trailer, error) {
	var tr simulator.Trailer
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return tr, ErrNoTrailer
	}
	tr, ok := parseTrailer(raw)
	var err error
	if !ok {
		// Anything the fast path does not know (spaces, escapes, other
		// keys, malformed input) takes encoding/json's path.
		if tr, err = decodeTrailer(raw); err != nil {
			return tr, err
		}
	}
	if tr.EnvDelayMs < 0 || tr.ObsTokens < 0 || tr.TurnsLeft < 0 {
		return tr, fmt.Errorf("sim env: bad sim trailer %.80q: negative field", raw)
	}
	if tr.ObsTokens > MaxObsTokens {
		return tr, fmt.Errorf("sim env: bad sim trailer: obs_tokens %d is above %d", tr.ObsTokens, MaxObsTokens)
	}
	return tr, nil
}

// decodeTrailer is ReadTrailer's encoding/json path (its own function, so
// that the fast path's Trailer stays on the stack).
func decodeTrailer(raw []byte) (simulator.Trailer, error) {
	var tr simulator.Trailer
	if err := json.Unmarshal(raw, &tr); err != nil {
		return tr, fmt.Errorf("sim env: bad sim trailer %.80q: %w", raw, err)
	}
	return tr, nil
}

// Observation is the observation text of n words: "obs obs ... obs".
func Observation(n int) string {
	if n <= 0 {
		return ""
	}
	return strings.Repeat("obs ", n-1) + "obs"
}
