package sim

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/pipeline"
)

func assistant(s string) pipeline.Message {
	return pipeline.Message{Role: pipeline.RoleAssistant, Content: s}
}

func TestFindGame(t *testing.T) {
	tests := []struct {
		name   string
		msgs   []pipeline.Message
		ok     bool
		count  bool
		lo, hi int64
		truth  int64
	}{
		{"no game", []pipeline.Message{user("Complete episode 3 of the workload.")}, false, false, 0, 0, 0},
		{"a range without guessing", []pipeline.Message{user("Pick a value between 1 and 20.")}, false, false, 0, 0, 0},
		{"guessing", []pipeline.Message{system("A number-guessing game."), user("I picked a whole number between 1 and 20. Guess it.")}, true, false, 1, 20, 0},
		{"negative range", []pipeline.Message{user("Guess my number between -10 and 10.")}, true, false, -10, 10, 0},
		{"hints narrow", []pipeline.Message{
			user("Guess a number between 1 and 100."),
			assistant("well My guess: 50"), user("50: higher. 6 guesses left."),
			assistant("My guess: 75"), user("75: lower. 5 guesses left."),
			assistant("no idea"), user("I could not read a guess."),
		}, true, false, 51, 74, 0},
		{"counting", []pipeline.Message{user("How many times does the letter 'r' appear in the word 'strawberry'? Reply with a single number.")}, true, true, 0, 10, 3},
		{"counting, too high", []pipeline.Message{
			user("How many times does the letter 's' appear in the word 'Mississippi'?"),
			assistant("My answer: 6"), user("6 is too high. Try again; 2 guesses left."),
		}, true, true, 0, 5, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, ok := findGame(tt.msgs)
			if ok != tt.ok {
				t.Fatalf("found %v, want %v", ok, tt.ok)
			}
			if !ok {
				return
			}
			if g.counting != tt.count || g.lo != tt.lo || g.hi != tt.hi || g.truth != tt.truth {
				t.Errorf("got %+v, want counting %v [%d, %d] truth %d", *g, tt.count, tt.lo, tt.hi, tt.truth)
			}
		})
	}
}

func TestHint(t *testing.T) {
	for s, want := range map[string]int{
		"50: higher. 6 guesses left.": 1, "50: lower.": -1, "3 is too high.": -1, "3 is too low.": 1, "I could not read it": 0,
	} {
		if got := hint(s); got != want {
			t.Errorf("hint(%q) = %d, want %d", s, got, want)
		}
	}
}

// referee answers a guess as the guess environment does, or as the Python
// example's counting game does.
func referee(counting bool, secret, guess int64) string {
	switch {
	case guess == secret:
		return "correct"
	case counting && guess > secret:
		return fmt.Sprintf("%d is too high.", guess)
	case counting:
		return fmt.Sprintf("%d is too low.", guess)
	case guess < secret:
		return fmt.Sprintf("%d: higher.", guess)
	default:
		return fmt.Sprintf("%d: lower.", guess)
	}
}

// play runs one game against the simulator: it returns the number of
// moves to the answer, or 0 when maxMoves ran out.
func play(t *testing.T, s *Server, seed int64, counting bool, secret int64, maxMoves int, msgs ...pipeline.Message) int {
	t.Helper()
	for move := 1; move <= maxMoves; move++ {
		r := mustComplete(t, s, chatReq(seed, msgs...))
		c := r.Message.Content
		prefix := "My guess: "
		if counting {
			prefix = "My answer: "
		}
		i := strings.LastIndex(c, prefix)
		if i < 0 || r.FinishReason != "stop" {
			t.Fatalf("move %d: no %q in %q (finish %s)", move, prefix, c, r.FinishReason)
		}
		g, err := strconv.ParseInt(c[i+len(prefix):], 10, 64)
		if err != nil {
			t.Fatalf("move %d: %q: %v", move, c, err)
		}
		fb := referee(counting, secret, g)
		if fb == "correct" {
			return move
		}
		msgs = append(msgs, assistant(c), user(fb))
	}
	return 0
}

// The simulator plays number games to the end: right trajectories bisect
// (guessing) or count right (counting), and every game is deterministic.
func TestPlaysGames(t *testing.T) {
	s := New(Options{Seed: 3})
	defer s.Close()
	wins, games := 0, 0
	for seed := int64(0); seed < 40; seed++ {
		secret := 1 + seed*37%100
		rules := user("I am thinking of a whole number between 1 and 100. Guess it; I answer higher or lower.")
		n := play(t, s, seed, false, secret, 12, rules)
		if n != play(t, New(Options{Seed: 3}), seed, false, secret, 12, rules) {
			t.Fatalf("seed %d: a replay played another game", seed)
		}
		games++
		if n > 0 && n <= 7 {
			wins++
		}
	}
	if wins == 0 || wins == games {
		t.Errorf("won %d of %d games in 7 moves: want some wins and some losses", wins, games)
	}
	cwins := 0
	for seed := int64(0); seed < 40; seed++ {
		q := user("How many times does the letter 'a' appear in the word 'banana'? Reply with a single number.")
		if n := play(t, s, seed, true, 3, 3, q); n > 0 {
			cwins++
		}
	}
	t.Logf("guessing: %d of %d won in 7 moves; counting: %d of 40 right within 3 answers", wins, games, cwins)
	if cwins == 0 || cwins == 40 {
		t.Errorf("counted right within 3 answers in %d of 40 games: want most, not all", cwins)
	}
}

// A right trajectory never needs more moves than bisection does.
func TestRightTrajectoryBisects(t *testing.T) {
	g := &game{lo: 1, hi: 100, from: 1, to: 100}
	for secret := int64(1); secret <= 100; secret++ {
		g := *g
		moves := 0
		for {
			moves++
			m := g.move(true, 0)
			if m == secret {
				break
			}
			if moves > 7 {
				t.Fatalf("secret %d: more than 7 moves", secret)
			}
			g.last, g.hasLast = m, true
			if m < secret {
				g.lastHint, g.lo = 1, m+1
			} else {
				g.lastHint, g.hi = -1, m-1
			}
		}
	}
}
