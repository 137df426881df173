package math

import (
	"math"
	"regexp"
	"strconv"
	"strings"
)

// boxedCommands are the LaTeX commands whose argument is a final answer.
var boxedCommands = []string{`\boxed`, `\fbox`}

// numberRe matches a number in free text: an optional sign, digits with
// optional thousands separators or a decimal part, an optional exponent, and
// an optional "/denominator".
var numberRe = regexp.MustCompile(`-?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?(?:\s*/\s*\d+)?`)

// ExtractAnswer returns the final answer of a reply: the content of its last
// \boxed{...} (braces balanced), or else the last number in it. ok is false
// when the reply holds neither.
func ExtractAnswer(s string) (answer string, ok bool) {
	if a, ok := lastBoxed(s); ok {
		return a, true
	}
	return lastNumber(s)
}

// lastBoxed returns the argument of the last \boxed{...} whose braces close.
func lastBoxed(s string) (string, bool) {
	best, bestAt := "", -1
	for _, cmd := range boxedCommands {
		for from := 0; ; {
			i := strings.Index(s[from:], cmd)
			if i < 0 {
				break
			}
			start := from + i + len(cmd)
			from = start
			j := start
			for j < len(s) && s[j] == ' ' {
				j++
			}
			if j >= len(s) || s[j] != '{' {
				continue
			}
			arg, ok := balanced(s[j:])
			if ok && start > bestAt {
				best, bestAt = strings.TrimSpace(arg), start
			}
		}
	}
	return best, bestAt >= 0
}

// balanced returns what lies between s's leading '{' and its matching '}'.
func balanced(s string) (string, bool) {
	depth := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++ // an escaped character (\{ or \}) does not count
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				return s[1:i], true
			}
		}
	}
	return "", false
}

// lastNumber returns the last number in s.
//
// Every match holds a digit, so the last match holds the last digit; and
// no match spans a byte that no match can hold (a letter but e or E, a
// bracket, ...), so scanning from the last such byte before the last
// digit finds the matches a scan of the whole text finds there. A long
// reply costs a backward byte scan, not a regexp pass over all of it.
func lastNumber(s string) (string, bool) {
	d := len(s) - 1
	for d >= 0 && (s[d] < '0' || s[d] > '9') {
		d--
	}
	if d < 0 {
		return "", false
	}
	w := d
	for w > 0 && inNumber(s[w-1]) {
		w--
	}
	var at []int
	for from := w; from < len(s); {
		loc := numberRe.FindStringIndex(s[from:])
		if loc == nil {
			break
		}
		at = []int{from + loc[0], from + loc[1]}
		from += loc[1]
	}
	if at == nil {
		return "", false
	}
	last := s[at[0]:at[1]]
	// A '-' right after a word or number is a dash ("pages 10-12"), not a sign.
	if last[0] == '-' && at[0] > 0 && isWordByte(s[at[0]-1]) {
		last = last[1:]
	}
	// "3 / 4" → "3/4"; a trailing "/" without denominator was not matched.
	return strings.Join(strings.Fields(last), ""), true
}

// inNumber reports whether a match of numberRe may hold c.
func inNumber(c byte) bool {
	switch {
	case c >= '0' && c <= '9':
		return true
	case c == ',' || c == '.' || c == '-' || c == '+' || c == 'e' || c == 'E' || c == '/':
		return true
	case c == ' ' || c == '\t' || c == '\n' || c == '\f' || c == '\r':
		return true
	}
	return false
}

// Equal reports whether two answers agree: numerically (relative tolerance
// 1e-6) when both parse as numbers ("1,000", "3/4", "0.5", "$5", "-2",
// "\frac{3}{4}", "50\%"), else as strings after normalising (surrounding
// space, $ signs and inner spaces removed, case folded).
func Equal(a, b string) bool {
	x, xok := ParseNumber(a)
	y, yok := ParseNumber(b)
	if xok && yok {
		if x == y {
			return true
		}
		return math.Abs(x-y) <= 1e-6*math.Max(math.Abs(x), math.Abs(y))
	}
	return normalize(a) == normalize(b)
}

var (
	plainNumberRe = regexp.MustCompile(`^[-+]?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?$`)
	fracRe        = regexp.MustCompile(`^([-+]?)\\[dt]?frac\{([^{}]*)\}\{([^{}]*)\}$`)
	shortFracRe   = regexp.MustCompile(`^([-+]?)\\[dt]?frac(\d)(\d)$`)
)

// ParseNumber parses an answer as a number: decimals with optional thousands
// separators and exponent, fractions a/b and \frac{a}{b}, with $ signs,
// spaces, a trailing "." or "%" and \text{...} units around it ignored.
func ParseNumber(s string) (float64, bool) {
	s = clean(s)
	if s == "" {
		return 0, false
	}
	if m := fracRe.FindStringSubmatch(s); m != nil {
		return fraction(m[1], m[2], m[3])
	}
	if m := shortFracRe.FindStringSubmatch(s); m != nil {
		return fraction(m[1], m[2], m[3])
	}
	if num, den, ok := strings.Cut(s, "/"); ok {
		sign := ""
		if strings.HasPrefix(num, "-") {
			sign, num = "-", num[1:]
		}
		return fraction(sign, num, den)
	}
	return plain(s)
}

func fraction(sign, num, den string) (float64, bool) {
	n, ok := plain(num)
	if !ok {
		return 0, false
	}
	d, ok := plain(den)
	if !ok || d == 0 {
		return 0, false
	}
	v := n / d
	if sign == "-" {
		v = -v
	}
	return v, !math.IsInf(v, 0) && !math.IsNaN(v)
}

func plain(s string) (float64, bool) {
	if !plainNumberRe.MatchString(s) {
		return 0, false
	}
	v, err := strconv.ParseFloat(strings.ReplaceAll(s, ",", ""), 64)
	if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, false
	}
	return v, true
}

// latexNoise are LaTeX spacing and sizing commands that carry no meaning in
// an answer.
var latexNoise = strings.NewReplacer(`\left`, "", `\right`, "", `\!`, "", `\,`, "", `\;`, "", `\:`, "", `\ `, "", `\%`, "%", `\$`, "$")

// textRe matches \text{...}-style wrappers, whose content is a unit or word.
var textRe = regexp.MustCompile(`\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}`)

// clean strips what does not change a numeric answer.
func clean(s string) string {
	s = latexNoise.Replace(s)
	s = strings.Join(strings.Fields(s), "")
	s = strings.ReplaceAll(s, "$", "")
	// A trailing unit in \text{...} ("5\text{ cm}") is dropped when a number
	// precedes it.
	if loc := textRe.FindStringIndex(s); loc != nil && loc[0] > 0 && loc[1] == len(s) {
		s = s[:loc[0]]
	}
	s = strings.TrimSuffix(s, ".")
	s = strings.TrimSuffix(s, "%")
	return s
}

// normalize is the string form two non-numeric answers are compared in.
func normalize(s string) string {
	s = latexNoise.Replace(s)
	s = textRe.ReplaceAllString(s, "$1")
	s = strings.Join(strings.Fields(s), "")
	s = strings.ReplaceAll(s, "$", "")
	s = strings.ReplaceAll(s, `\dfrac`, `\frac`)
	s = strings.ReplaceAll(s, `\tfrac`, `\frac`)
	s = strings.TrimSuffix(s, ".")
	return strings.ToLower(s)
}

func isWordByte(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == ')'
}
