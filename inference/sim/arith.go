package sim

import (
	"errors"
	"math"
	"math/big"
	"strings"
)

// FindArithmetic finds an arithmetic question in text: the last run of
// integers, + - * / and parentheses holding at least one operator that
// evaluates. It returns the exact value (an integer, or "p/q" when the
// division is not exact) and true, or false when text has none.
func FindArithmetic(text string) (string, bool) {
	isExpr := func(c byte) bool { return isDigit(c) || strings.IndexByte("+-*/() \t", c) >= 0 }
	best := ""
	found := false
	for i := 0; i < len(text); {
		if !isExpr(text[i]) {
			i++
			continue
		}
		j := i
		for j < len(text) && isExpr(text[j]) {
			j++
		}
		run := strings.TrimSpace(text[i:j])
		i = j
		if !strings.ContainsAny(run, "+-*/") || !strings.ContainsAny(run, "0123456789") {
			continue
		}
		if v, err := evalArith(run); err == nil {
			best, found = v, true
		}
	}
	return best, found
}

// evalArith evaluates one expression exactly.
func evalArith(s string) (string, error) {
	p := &arithParser{s: s}
	v, err := p.expr(0)
	if err != nil {
		return "", err
	}
	p.skip()
	if p.i != len(p.s) {
		return "", errors.New("trailing input")
	}
	if !p.binary {
		return "", errors.New("no operator")
	}
	if v.IsInt() {
		return v.Num().String(), nil
	}
	return v.String(), nil
}

type arithParser struct {
	s      string
	i      int
	binary bool // saw a binary operator
}

const maxArithDepth = 64

func (p *arithParser) skip() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

// expr := term (('+'|'-') term)*
func (p *arithParser) expr(depth int) (*big.Rat, error) {
	v, err := p.term(depth)
	if err != nil {
		return nil, err
	}
	for {
		p.skip()
		if p.i >= len(p.s) || (p.s[p.i] != '+' && p.s[p.i] != '-') {
			return v, nil
		}
		op := p.s[p.i]
		p.i++
		p.binary = true
		w, err := p.term(depth)
		if err != nil {
			return nil, err
		}
		if op == '+' {
			v.Add(v, w)
		} else {
			v.Sub(v, w)
		}
	}
}

// term := factor (('*'|'/') factor)*
func (p *arithParser) term(depth int) (*big.Rat, error) {
	v, err := p.factor(depth)
	if err != nil {
		return nil, err
	}
	for {
		p.skip()
		if p.i >= len(p.s) || (p.s[p.i] != '*' && p.s[p.i] != '/') {
			return v, nil
		}
		op := p.s[p.i]
		p.i++
		p.binary = true
		w, err := p.factor(depth)
		if err != nil {
			return nil, err
		}
		if op == '*' {
			v.Mul(v, w)
		} else {
			if w.Sign() == 0 {
				return nil, errors.New("division by zero")
			}
			v.Quo(v, w)
		}
		if v.Num().BitLen() > 256 || v.Denom().BitLen() > 256 {
			return nil, errors.New("too large")
		}
	}
}

// factor := '-' factor | '(' expr ')' | integer
func (p *arithParser) factor(depth int) (*big.Rat, error) {
	if depth > maxArithDepth {
		return nil, errors.New("too deep")
	}
	p.skip()
	if p.i >= len(p.s) {
		return nil, errors.New("unexpected end")
	}
	switch c := p.s[p.i]; {
	case c == '-':
		p.i++
		v, err := p.factor(depth + 1)
		if err != nil {
			return nil, err
		}
		return v.Neg(v), nil
	case c == '(':
		p.i++
		v, err := p.expr(depth + 1)
		if err != nil {
			return nil, err
		}
		p.skip()
		if p.i >= len(p.s) || p.s[p.i] != ')' {
			return nil, errors.New("missing )")
		}
		p.i++
		return v, nil
	case isDigit(c):
		j := p.i
		for j < len(p.s) && isDigit(p.s[j]) {
			j++
		}
		if j-p.i > 18 {
			return nil, errors.New("number too long")
		}
		v, ok := new(big.Rat).SetString(p.s[p.i:j])
		if !ok {
			return nil, errors.New("bad number")
		}
		p.i = j
		return v, nil
	}
	return nil, errors.New("unexpected character")
}

// wrongAnswer returns a wrong answer near right, chosen by k.
func wrongAnswer(right string, k uint64) string {
	r, ok := new(big.Rat).SetString(right)
	if !ok {
		return "0"
	}
	d := int64(1 + mix(k)%9)
	if mix(k^1)&1 == 1 {
		d = -d
	}
	r.Add(r, big.NewRat(d, 1))
	if r.IsInt() {
		return r.Num().String()
	}
	f, _ := r.Float64()
	if math.IsInf(f, 0) {
		return "0"
	}
	return r.String()
}
