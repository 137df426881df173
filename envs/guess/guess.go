package guess

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"strconv"

	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/pipeline"
)

// Name is the environment's registered name.
const Name = "guess"

func init() { envs.Register(Name, New) }

// Defaults.
const (
	DefaultMaxGuesses = 7
	DefaultLow        = 1
	DefaultHigh       = 100
)

// Options are the guess environment's config keys.
type Options struct {
	// MaxGuesses is the number of moves a game allows.
	//
	// Default: `7`.
	MaxGuesses int `yaml:"max_guesses"`
}

// Env is the number-guessing game. It keeps no per-game state: a game's
// state travels in Rollout.State as a [State].
type Env struct {
	maxGuesses int
}

var _ envs.Env = (*Env)(nil)

// New builds the guess environment from its options.
func New(opts envs.Options) (envs.Env, error) {
	o := Options{MaxGuesses: DefaultMaxGuesses}
	if err := opts.Decode(&o); err != nil {
		return nil, err
	}
	if o.MaxGuesses < 1 {
		sec := opts.Section
		if sec == "" {
			sec = "env"
		}
		return nil, fmt.Errorf("%s.max_guesses: must be >= 1, got %d", sec, o.MaxGuesses)
	}
	return &Env{maxGuesses: o.MaxGuesses}, nil
}

// State is one game's state.
type State struct {
	Low, High int64
	Secret    int64
	// Moves counts the moves made, valid or not; Invalid those that held
	// no whole number.
	Moves   int
	Invalid int
	Solved  bool
}

// Secret returns the secret number of a game with the given seed and range:
// the same seed and range always give the same secret.
func Secret(seed, low, high int64) int64 {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x67756573735f656e)) // "guess_en"
	span := uint64(high - low)
	if span == math.MaxUint64 {
		return int64(rng.Uint64())
	}
	return low + int64(rng.Uint64N(span+1))
}

// Reset draws the secret and tells the model the rules.
func (e *Env) Reset(ctx context.Context, r *pipeline.Rollout) (*envs.Reset, error) {
	low, high, err := bounds(r.Task)
	if err != nil {
		return nil, err
	}
	st := State{Low: low, High: high, Secret: Secret(r.Seed, low, high)}
	rules := fmt.Sprintf("Let's play a game. I am thinking of a whole number between %d and %d (inclusive). "+
		"You have %d guesses. After each guess I answer \"higher\" (the number is higher than your guess), "+
		"\"lower\" (it is lower) or \"correct\". Reply with one number per turn; I read the last number in your reply.",
		low, high, e.maxGuesses)
	return &envs.Reset{
		Observations: []pipeline.Message{{Role: pipeline.RoleUser, Content: rules}},
		State:        st,
	}, nil
}

// Step reads the model's guess and answers it.
func (e *Env) Step(ctx context.Context, r *pipeline.Rollout, action pipeline.Message) (*envs.Step, error) {
	st, ok := r.State.(State)
	if !ok {
		return nil, fmt.Errorf("guess: %s has no game state (got %T); was Reset called?", r, r.State)
	}
	if st.Solved || st.Moves >= e.maxGuesses {
		return nil, fmt.Errorf("guess: %s: the game is over", r)
	}
	st.Moves++
	left := e.maxGuesses - st.Moves
	step := &envs.Step{ReportsValidity: true}
	var feedback string
	g, err := ParseGuess(action.Content)
	switch {
	case err != nil:
		st.Invalid++
		step.InvalidAction = true
		feedback = fmt.Sprintf("I could not read a guess: %v. Reply with a whole number between %d and %d.", err, st.Low, st.High)
	case g == st.Secret:
		st.Solved = true
		step.Reward = 1
		step.Terminated = true
		feedback = fmt.Sprintf("%d is correct! You found it in %d guesses.", g, st.Moves)
	case g < st.Secret:
		feedback = fmt.Sprintf("%d: higher.", g)
	default:
		feedback = fmt.Sprintf("%d: lower.", g)
	}
	if !st.Solved {
		if left == 0 {
			step.Terminated = true
			feedback += fmt.Sprintf(" You are out of guesses; the number was %d.", st.Secret)
		} else {
			feedback += fmt.Sprintf(" %d guesses left.", left)
		}
	}
	solved := 0.0
	if st.Solved {
		solved = 1
	}
	step.Observations = []pipeline.Message{{Role: pipeline.RoleUser, Content: feedback, Turn: action.Turn}}
	step.Metrics = map[string]float64{"guesses": float64(st.Moves), "solved": solved, "invalid": float64(st.Invalid)}
	step.State = st
	return step, nil
}

// intRe matches whole numbers with an optional sign, and decimals (which are
// then rejected rather than read as their fractional digits).
var intRe = regexp.MustCompile(`[-+]?\d+(?:\.\d+)?`)

// ErrNoGuess is returned by ParseGuess for a reply without a number.
var ErrNoGuess = errors.New("no number in the reply")

// ParseGuess returns the last whole number in a reply. A '-' right after a
// letter or digit is a dash ("1-100"), not a sign.
func ParseGuess(s string) (int64, error) {
	locs := intRe.FindAllStringIndex(s, -1)
	if len(locs) == 0 {
		return 0, ErrNoGuess
	}
	at := locs[len(locs)-1]
	m := s[at[0]:at[1]]
	if (m[0] == '-' || m[0] == '+') && at[0] > 0 && isWordByte(s[at[0]-1]) {
		m = m[1:]
	}
	n, err := strconv.ParseInt(m, 10, 64)
	if err != nil {
		var ne *strconv.NumError
		if errors.As(err, &ne) && errors.Is(ne.Err, strconv.ErrRange) {
			return 0, fmt.Errorf("%.40s is out of range", m)
		}
		return 0, fmt.Errorf("%.40s is not a whole number", m)
	}
	return n, nil
}

func isWordByte(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// bounds reads the task's low and high fields.
func bounds(t *pipeline.Task) (low, high int64, err error) {
	low, high = DefaultLow, DefaultHigh
	if t == nil {
		return low, high, nil
	}
	for _, f := range []struct {
		name string
		dst  *int64
	}{{"low", &low}, {"high", &high}} {
		v, ok := t.Fields[f.name]
		if !ok || v == nil {
			continue
		}
		n, ok := wholeNumber(v)
		if !ok {
			return 0, 0, fmt.Errorf("%s: field %q must be a whole number, got %v", rowName(t), f.name, v)
		}
		*f.dst = n
	}
	if low > high {
		return 0, 0, fmt.Errorf("%s: field \"low\" (%d) is above field \"high\" (%d)", rowName(t), low, high)
	}
	return low, high, nil
}

func wholeNumber(v any) (int64, bool) {
	switch x := v.(type) {
	case int:
		return int64(x), true
	case int64:
		return x, true
	case int32:
		return int64(x), true
	case float64:
		if x != math.Trunc(x) || math.Abs(x) > 1<<53 {
			return 0, false
		}
		return int64(x), true
	case interface{ Int64() (int64, error) }: // json.Number
		n, err := x.Int64()
		return n, err == nil
	case string:
		n, err := strconv.ParseInt(x, 10, 64)
		return n, err == nil
	}
	return 0, false
}

func rowName(t *pipeline.Task) string {
	if t.Source != "" {
		return t.Source
	}
	return fmt.Sprintf("task %d", t.Index)
}
