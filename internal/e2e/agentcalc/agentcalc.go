// Package agentcalc is the example agents' calculator tool
// (examples/agents/lib.mjs) in Go, for the end-to-end tests that check the
// tool results the agents put in their rows.
package agentcalc

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
)

// Calculate is examples/agents/lib.mjs's calculate in Go: what the SDK
// agents' calculator answers for expression, a number as JavaScript's
// String writes it or an error string.
func Calculate(expression string) string {
	if !regexp.MustCompile(`^[0-9+\-*/(). ]+$`).MatchString(expression) {
		return "error: only digits, + - * / ( ) . and spaces are allowed"
	}
	toks := regexp.MustCompile(`\d+(\.\d+)?|\.\d+|[+\-*/()]`).FindAllString(expression, -1)
	i := 0
	peek := func() string {
		if i < len(toks) {
			return toks[i]
		}
		return ""
	}
	next := func() string { s := peek(); i++; return s }
	var sum func() (float64, error)
	var primary func() (float64, error)
	primary = func() (float64, error) {
		switch tok := next(); {
		case tok == "(":
			v, err := sum()
			if err != nil {
				return 0, err
			}
			if next() != ")" {
				return 0, fmt.Errorf("missing )")
			}
			return v, nil
		case tok == "-":
			v, err := primary()
			return -v, err
		case tok == "+":
			return primary()
		case tok == "":
			return 0, fmt.Errorf("unexpected end")
		case tok[0] != '.' && (tok[0] < '0' || tok[0] > '9'):
			return 0, fmt.Errorf("unexpected %s", tok)
		default:
			return strconv.ParseFloat(tok, 64)
		}
	}
	product := func() (float64, error) {
		v, err := primary()
		for err == nil && (peek() == "*" || peek() == "/") {
			op := next()
			var w float64
			if w, err = primary(); op == "*" {
				v *= w
			} else {
				v /= w
			}
		}
		return v, err
	}
	sum = func() (float64, error) {
		v, err := product()
		for err == nil && (peek() == "+" || peek() == "-") {
			op := next()
			var w float64
			if w, err = product(); op == "+" {
				v += w
			} else {
				v -= w
			}
		}
		return v, err
	}
	v, err := sum()
	if err == nil && i != len(toks) {
		err = fmt.Errorf("unexpected %s", toks[i])
	}
	if err != nil {
		return "error: " + err.Error()
	}
	switch {
	case math.IsNaN(v):
		return "NaN"
	case math.IsInf(v, 1):
		return "Infinity"
	case math.IsInf(v, -1):
		return "-Infinity"
	case v == 0:
		return "0"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}
