package guess_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/trajflow/trajflow/envs"
	"github.com/trajflow/trajflow/envs/guess"
	"github.com/trajflow/trajflow/pipeline"
)

func newEnv(t testing.TB, values map[string]any) envs.Env {
	t.Helper()
	e, err := envs.New("guess", envs.Options{Section: "env", Values: values})
	if err != nil {
		t.Fatalf("envs.New: %v", err)
	}
	return e
}

// play resets a game and plays the replies, as the pipeline does: the state
// of each answer feeds the next turn.
type game struct {
	t     *testing.T
	env   envs.Env
	r     *pipeline.Rollout
	steps []*envs.Step
}

func start(t *testing.T, env envs.Env, seed int64, fields map[string]any) *game {
	t.Helper()
	r := &pipeline.Rollout{Seed: seed, Task: &pipeline.Task{Source: "games.jsonl:3", Fields: fields}}
	reset, err := env.Reset(context.Background(), r)
	if err != nil {
		t.Fatalf("Reset: %v", err)
	}
	r.Messages = append(r.Messages, reset.Observations...)
	r.State = reset.State
	return &game{t: t, env: env, r: r}
}

func (g *game) move(reply string) *envs.Step {
	g.t.Helper()
	action := pipeline.Message{Role: pipeline.RoleAssistant, Content: reply, Turn: len(g.steps) + 1}
	g.r.Messages = append(g.r.Messages, action)
	step, err := g.env.Step(context.Background(), g.r, action)
	if err != nil {
		g.t.Fatalf("Step(%q): %v", reply, err)
	}
	g.r.Messages = append(g.r.Messages, step.Observations...)
	g.r.State = step.State
	g.steps = append(g.steps, step)
	return step
}

func secret(t *testing.T, g *game) int64 {
	st, ok := g.r.State.(guess.State)
	if !ok {
		t.Fatalf("state is %T", g.r.State)
	}
	return st.Secret
}

func TestReset(t *testing.T) {
	env := newEnv(t, map[string]any{"max_guesses": 5})
	g := start(t, env, 42, map[string]any{"low": 10, "high": 20.0})
	if len(g.r.Messages) != 1 || g.r.Messages[0].Role != pipeline.RoleUser {
		t.Fatalf("Reset observations = %+v, want one user message", g.r.Messages)
	}
	rules := g.r.Messages[0].Content
	for _, w := range []string{"between 10 and 20", "5 guesses", "higher", "lower", "correct"} {
		if !strings.Contains(rules, w) {
			t.Errorf("rules %q lack %q", rules, w)
		}
	}
	if s := secret(t, g); s < 10 || s > 20 {
		t.Fatalf("secret %d outside 10..20", s)
	}
	// The secret is a function of the seed: same seed, same secret; the
	// seeds 0..99 do not all give one secret.
	if again := start(t, env, 42, map[string]any{"low": 10, "high": 20}); secret(t, again) != secret(t, g) {
		t.Fatalf("same seed gave secrets %d and %d", secret(t, g), secret(t, again))
	}
	seen := map[int64]bool{}
	for seed := int64(0); seed < 100; seed++ {
		s := guess.Secret(seed, 1, 100)
		if s < 1 || s > 100 {
			t.Fatalf("Secret(%d, 1, 100) = %d", seed, s)
		}
		seen[s] = true
	}
	if len(seen) < 30 {
		t.Fatalf("100 seeds gave only %d distinct secrets", len(seen))
	}
}

func TestResetErrors(t *testing.T) {
	env := newEnv(t, nil)
	for _, tt := range []struct {
		fields map[string]any
		want   string
	}{
		{map[string]any{"low": 50, "high": 10}, `games.jsonl:3: field "low" (50) is above field "high" (10)`},
		{map[string]any{"low": 1.5}, `games.jsonl:3: field "low" must be a whole number`},
		{map[string]any{"high": []any{}}, `games.jsonl:3: field "high" must be a whole number`},
	} {
		r := &pipeline.Rollout{Task: &pipeline.Task{Source: "games.jsonl:3", Fields: tt.fields}}
		if _, err := env.Reset(context.Background(), r); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Reset(%v): err = %v, want %q", tt.fields, err, tt.want)
		}
	}
}

func TestGame(t *testing.T) {
	env := newEnv(t, map[string]any{"max_guesses": 4})
	g := start(t, env, 7, map[string]any{"low": 1, "high": 100})
	s := secret(t, g)

	tests := []struct {
		reply      string
		feedback   string
		reward     float64
		terminated bool
		guesses    float64
		solved     float64
	}{
		{fmt.Sprintf("Is it %d?", s-1), "higher. 3 guesses left", 0, false, 1, 0},
		{fmt.Sprintf("Between 1-100 I pick %d", s+1), "lower. 2 guesses left", 0, false, 2, 0},
		{"hmm, no idea", "could not read a guess", 0, false, 3, 0},
		{fmt.Sprintf("Then %d.", s), "correct", 1, true, 4, 1},
	}
	for i, tt := range tests {
		step := g.move(tt.reply)
		if len(step.Observations) != 1 || step.Observations[0].Role != pipeline.RoleUser ||
			!strings.Contains(step.Observations[0].Content, tt.feedback) || step.Observations[0].Turn != i+1 {
			t.Fatalf("move %d (%q): observations %+v, want one user message with %q", i+1, tt.reply, step.Observations, tt.feedback)
		}
		if step.Reward != tt.reward || step.Terminated != tt.terminated ||
			step.Metrics["guesses"] != tt.guesses || step.Metrics["solved"] != tt.solved {
			t.Fatalf("move %d (%q): reward %v terminated %v metrics %v; want %v %v guesses=%v solved=%v",
				i+1, tt.reply, step.Reward, step.Terminated, step.Metrics, tt.reward, tt.terminated, tt.guesses, tt.solved)
		}
	}
	for i, st := range g.steps {
		if !st.ReportsValidity || st.InvalidAction != (i == 2) {
			t.Fatalf("move %d: invalid %v reports %v, want only the unreadable reply invalid", i+1, st.InvalidAction, st.ReportsValidity)
		}
	}
	if g.steps[3].Metrics["invalid"] != 1 {
		t.Fatalf("invalid = %v, want 1", g.steps[3].Metrics["invalid"])
	}
	// The game is over: one more move is the caller's mistake.
	if _, err := env.Step(context.Background(), g.r, pipeline.Message{Content: "1"}); err == nil {
		t.Fatal("Step after the end succeeded")
	}
}

func TestOutOfGuesses(t *testing.T) {
	env := newEnv(t, map[string]any{"max_guesses": 2})
	g := start(t, env, 3, map[string]any{"low": 5, "high": 5}) // the secret is 5
	if s := secret(t, g); s != 5 {
		t.Fatalf("secret %d, want 5", s)
	}
	if step := g.move("4"); step.Terminated || !strings.Contains(step.Observations[0].Content, "higher") {
		t.Fatalf("first move: %+v", step)
	}
	step := g.move("6")
	if !step.Terminated || step.Reward != 0 || step.Metrics["solved"] != 0 || step.Metrics["guesses"] != 2 {
		t.Fatalf("last move: terminated %v reward %v metrics %v", step.Terminated, step.Reward, step.Metrics)
	}
	if c := step.Observations[0].Content; !strings.Contains(c, "lower") || !strings.Contains(c, "out of guesses; the number was 5") {
		t.Fatalf("last feedback %q", c)
	}
}

// A binary search always wins 1..100 within 7 guesses, whatever the seed.
func TestBinarySearchWins(t *testing.T) {
	env := newEnv(t, nil)
	for seed := int64(0); seed < 50; seed++ {
		g := start(t, env, seed, nil)
		lo, hi := int64(1), int64(100)
		var step *envs.Step
		for !(step != nil && step.Terminated) {
			mid := (lo + hi) / 2
			step = g.move("My guess: " + strconv.FormatInt(mid, 10))
			switch c := step.Observations[0].Content; {
			case strings.Contains(c, "higher"):
				lo = mid + 1
			case strings.Contains(c, "lower"):
				hi = mid - 1
			}
		}
		if step.Reward != 1 || step.Metrics["solved"] != 1 {
			t.Fatalf("seed %d: binary search lost after %d guesses (secret %d)", seed, len(g.steps), secret(t, g))
		}
	}
}

func TestStepWithoutReset(t *testing.T) {
	env := newEnv(t, nil)
	r := &pipeline.Rollout{Task: &pipeline.Task{}}
	if _, err := env.Step(context.Background(), r, pipeline.Message{Content: "5"}); err == nil ||
		!strings.Contains(err.Error(), "no game state") {
		t.Fatalf("err = %v", err)
	}
}

func TestParseGuess(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		err  string
	}{
		{"42", 42, ""},
		{"I'll say 17, no, 23", 23, ""},
		{"range 1-100, guess 50", 50, ""},
		{"1-100", 100, ""},
		{"-5", -5, ""},
		{"it is -5", -5, ""},
		{"+7", 7, ""},
		{"50.", 50, ""},
		{"50.5", 0, "not a whole number"},
		{"99999999999999999999", 0, "out of range"},
		{"no number", 0, "no number"},
		{"", 0, "no number"},
	}
	for _, tt := range tests {
		got, err := guess.ParseGuess(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseGuess(%q) = %d, %v; want error %q", tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseGuess(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
}

func FuzzParseGuess(f *testing.F) {
	for _, s := range []string{"42", "1-100 50", "-3", "7.5", "99999999999999999999", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := guess.ParseGuess(s)
		if err != nil {
			return
		}
		if !strings.Contains(s, strconv.FormatInt(n, 10)) && !strings.Contains(s, strconv.FormatInt(-n, 10)) {
			t.Fatalf("ParseGuess(%q) = %d, not in the reply", s, n)
		}
	})
}

func TestRegistry(t *testing.T) {
	for _, tt := range []struct {
		values map[string]any
		want   string
	}{
		{map[string]any{"max_guess": 3}, "env.max_guess: unknown option"},
		{map[string]any{"max_guesses": 0}, "env.max_guesses: must be >= 1"},
		{map[string]any{"max_guesses": "seven"}, "env.max_guesses"},
	} {
		if _, err := envs.New("guess", envs.Options{Section: "env", Values: tt.values}); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%v): err = %v, want %q", tt.values, err, tt.want)
		}
	}
	if _, err := envs.New("gues", envs.Options{Section: "env"}); err == nil || !strings.Contains(err.Error(), "guess") {
		t.Errorf("unknown env: err = %v", err)
	}
}

func Example() {
	env, err := envs.New("guess", envs.Options{Section: "env", Values: map[string]any{"max_guesses": 3}})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	r := &pipeline.Rollout{Seed: 1, Task: &pipeline.Task{Fields: map[string]any{"low": 1, "high": 4}}}
	reset, _ := env.Reset(ctx, r)
	r.State = reset.State
	for _, reply := range []string{"2", "3", "4"} {
		step, err := env.Step(ctx, r, pipeline.Message{Role: "assistant", Content: reply})
		if err != nil {
			panic(err)
		}
		fmt.Println(step.Observations[0].Content, step.Reward)
		r.State = step.State
		if step.Terminated {
			break
		}
	}
	// Output:
	// 2: higher. 2 guesses left. 0
	// 3 is correct! You found it in 2 guesses. 1
}

// One Env plays many games at once; each game's state is its own.
func TestConcurrentGames(t *testing.T) {
	env := newEnv(t, nil)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for seed := int64(0); seed < 16; seed++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &pipeline.Rollout{Seed: seed, Task: &pipeline.Task{}}
			reset, err := env.Reset(context.Background(), r)
			if err != nil {
				errs <- err
				return
			}
			r.State = reset.State
			lo, hi := int64(1), int64(100)
			for moves := 1; ; moves++ {
				mid := (lo + hi) / 2
				step, err := env.Step(context.Background(), r, pipeline.Message{Content: strconv.FormatInt(mid, 10)})
				if err != nil {
					errs <- err
					return
				}
				r.State = step.State
				if step.Metrics["guesses"] != float64(moves) {
					errs <- fmt.Errorf("seed %d: guesses %v after %d moves", seed, step.Metrics["guesses"], moves)
					return
				}
				if step.Terminated {
					if step.Reward != 1 || r.State.(guess.State).Secret != mid || mid != guess.Secret(seed, 1, 100) {
						errs <- fmt.Errorf("seed %d: lost or wrong secret", seed)
					}
					return
				}
				if strings.Contains(step.Observations[0].Content, "higher") {
					lo = mid + 1
				} else {
					hi = mid - 1
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
