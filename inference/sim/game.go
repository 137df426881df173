package sim

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/trajflow/trajflow/pipeline"
)

// Number games: the simulated model plays the games whose answer is a
// whole number, narrowing down on the hints that follow each of its
// guesses. Two kinds are recognised from the conversation:
//
//   - counting: a user message asks how many times a letter appears in a
//     word ("How many times does the letter 'r' appear in the word
//     'strawberry'?"). The answer lies in [0, len(word)]; a right
//     trajectory says the true count, a wrong one starts 1 to 3 off and
//     steps by one toward the hints.
//   - guessing: a user message names a range ("between 1 and 20") and the
//     conversation speaks of guessing. A right trajectory bisects the
//     interval the hints leave; a wrong one keeps only the last hint in
//     mind and guesses at random on its side of the range.
//
// Hints are the user messages after each guess: "higher" or "too low"
// (the number is above the guess), "lower" or "too high" (below). The
// reply ends "My guess: N" (guessing) or "My answer: N" (counting).

var (
	countRe = regexp.MustCompile(`(?i)how many times does (?:the letter |the character )?['"‘“]?(\pL)['"’”]? (?:appear|occur)s? in (?:the word )?['"‘“]?(\pL+)['"’”]?`)
	rangeRe = regexp.MustCompile(`(?i)between (-?\d{1,15}) and (-?\d{1,15})`)
	guessRe = regexp.MustCompile(`(?i)guess`)
	wholeRe = regexp.MustCompile(`-?\d{1,15}`)
)

// game is a number game found in a conversation.
type game struct {
	counting bool
	// lo, hi bound the answer (inclusive), narrowed by the hints; from, to
	// are the range the game started with.
	lo, hi, from, to int64
	// truth is the counting game's answer.
	truth int64
	// last is the model's last readable guess; hasLast is false before
	// the first one.
	last    int64
	hasLast bool
	// lastHint is the direction of the hint to the last guess: +1 the
	// answer is higher, -1 lower, 0 none.
	lastHint int
}

// findGame reads a number game and its hints from a conversation.
func findGame(msgs []pipeline.Message) (*game, bool) {
	var g *game
	guessing := false
	for i := range msgs {
		m := &msgs[i]
		if m.Role != pipeline.RoleUser && m.Role != pipeline.RoleSystem {
			continue
		}
		if guessRe.MatchString(m.Content) {
			guessing = true
		}
		if m.Role != pipeline.RoleUser {
			continue
		}
		if c := countRe.FindStringSubmatch(m.Content); c != nil {
			word, letter := strings.ToLower(c[2]), strings.ToLower(c[1])
			n := int64(len([]rune(word)))
			g = &game{counting: true, hi: n, to: n, truth: int64(strings.Count(word, letter))}
		}
	}
	if g == nil && guessing {
		for i := range msgs {
			if msgs[i].Role != pipeline.RoleUser {
				continue
			}
			if r := rangeRe.FindAllStringSubmatch(msgs[i].Content, -1); r != nil {
				lo, err1 := strconv.ParseInt(r[len(r)-1][1], 10, 64)
				hi, err2 := strconv.ParseInt(r[len(r)-1][2], 10, 64)
				if err1 == nil && err2 == nil && lo <= hi {
					g = &game{lo: lo, hi: hi, from: lo, to: hi}
				}
			}
		}
	}
	if g == nil {
		return nil, false
	}
	// The hints: the user messages after each assistant guess.
	for i := range msgs {
		if msgs[i].Role != pipeline.RoleAssistant {
			continue
		}
		n := wholeRe.FindAllString(msgs[i].Content, -1)
		if len(n) == 0 {
			continue
		}
		guess, err := strconv.ParseInt(n[len(n)-1], 10, 64)
		if err != nil {
			continue
		}
		g.last, g.hasLast, g.lastHint = guess, true, 0
		for j := i + 1; j < len(msgs) && msgs[j].Role != pipeline.RoleAssistant; j++ {
			if msgs[j].Role != pipeline.RoleUser {
				continue
			}
			if h := hint(msgs[j].Content); h != 0 {
				g.lastHint = h
			}
		}
		switch {
		case g.lastHint > 0 && guess+1 > g.lo:
			g.lo = guess + 1
		case g.lastHint < 0 && guess-1 < g.hi:
			g.hi = guess - 1
		}
	}
	return g, true
}

// hint reads a hint: +1 the answer is higher than the guess, -1 lower, 0
// none.
func hint(s string) int {
	s = strings.ToLower(s)
	switch {
	case strings.Contains(s, "too high"):
		return -1
	case strings.Contains(s, "too low"):
		return 1
	case strings.Contains(s, "higher"):
		return 1
	case strings.Contains(s, "lower"):
		return -1
	}
	return 0
}

// move is the model's next guess: right says whether the trajectory is a
// right one, k keys its draws.
func (g *game) move(right bool, k uint64) int64 {
	if g.counting {
		switch {
		case !g.hasLast && right:
			return g.truth
		case !g.hasLast:
			d := 1 + int64(mix(k)%3)
			if mix(k^1)&1 == 1 && g.truth-d >= 0 {
				d = -d
			}
			return g.truth + d
		case g.lastHint != 0:
			return g.last + int64(g.lastHint) // one step toward the hint
		default:
			return g.last
		}
	}
	lo, hi := g.lo, g.hi
	if !right {
		// A wrong trajectory keeps only the last hint in mind.
		lo, hi = g.from, g.to
		switch {
		case g.hasLast && g.lastHint > 0:
			lo = max(lo, g.last+1)
		case g.hasLast && g.lastHint < 0:
			hi = min(hi, g.last-1)
		}
	}
	if lo > hi { // contradictory hints: start over
		lo, hi = g.from, g.to
	}
	span := uint64(hi - lo)
	if right {
		return lo + int64(span/2)
	}
	if span == ^uint64(0) {
		return int64(mix(k))
	}
	return lo + int64(mix(k)%(span+1))
}

// tail is the end of the reply that makes move n.
func (g *game) tail(n int64) string {
	if g.counting {
		return "My answer: " + strconv.FormatInt(n, 10)
	}
	return "My guess: " + strconv.FormatInt(n, 10)
}
