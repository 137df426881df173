package inference

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// PythonJSON re-serialises the JSON text raw as Python's
// json.dumps(json.loads(raw), ensure_ascii=False) writes it, which is how
// vLLM's hermes tool parser stores a tool call's arguments: separators
// ", " and ": ", object keys in their order (a repeated key keeps its
// first place and its last value), non-ASCII characters as they are, only
// '"', '\\' and control characters escaped ("\n", "\t", ... and "\u001f"
// with lowercase hex), integers as written ("-0" as "0"), and other
// numbers as Python's float repr (1.0, 1e-05, 1e+16; "Infinity" past the
// float range). raw must hold exactly one JSON value.
func PythonJSON(raw []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := readPy(dec)
	if err != nil {
		return "", err
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", errors.New("more than one JSON value")
	}
	var b strings.Builder
	v.write(&b)
	return b.String(), nil
}

// pyValue is a decoded JSON value that keeps its objects' key order.
type pyValue struct {
	tok  json.Token // a scalar; nil for null, an object or an array
	kind byte       // '{', '[', or 0 for a scalar
	keys []string
	vals []*pyValue
}

func readPy(dec *json.Decoder) (*pyValue, error) {
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	d, ok := t.(json.Delim)
	if !ok {
		return &pyValue{tok: t}, nil
	}
	switch d {
	case '[':
		v := &pyValue{kind: '['}
		for dec.More() {
			e, err := readPy(dec)
			if err != nil {
				return nil, err
			}
			v.vals = append(v.vals, e)
		}
		_, err := dec.Token() // ']'
		return v, err
	case '{':
		v := &pyValue{kind: '{'}
		at := map[string]int{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return nil, err
			}
			k, _ := kt.(string)
			e, err := readPy(dec)
			if err != nil {
				return nil, err
			}
			if i, ok := at[k]; ok {
				v.vals[i] = e // Python's dict: the last value, the first place
				continue
			}
			at[k] = len(v.keys)
			v.keys = append(v.keys, k)
			v.vals = append(v.vals, e)
		}
		_, err := dec.Token() // '}'
		return v, err
	}
	return nil, errors.New("unexpected " + d.String())
}

func (v *pyValue) write(b *strings.Builder) {
	switch v.kind {
	case '[':
		b.WriteByte('[')
		for i, e := range v.vals {
			if i > 0 {
				b.WriteString(", ")
			}
			e.write(b)
		}
		b.WriteByte(']')
		return
	case '{':
		b.WriteByte('{')
		for i, k := range v.keys {
			if i > 0 {
				b.WriteString(", ")
			}
			pyQuote(b, k)
			b.WriteString(": ")
			v.vals[i].write(b)
		}
		b.WriteByte('}')
		return
	}
	switch t := v.tok.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(t))
	case string:
		pyQuote(b, t)
	case json.Number:
		b.WriteString(pyNumber(string(t)))
	}
}

// pyQuote writes s as json.dumps(s, ensure_ascii=False) does.
func pyQuote(b *strings.Builder, s string) {
	const hex = "0123456789abcdef"
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			if r < 0x20 {
				b.WriteString(`\u00`)
				b.WriteByte(hex[r>>4])
				b.WriteByte(hex[r&0xf])
				continue
			}
			if r == utf8.RuneError {
				b.WriteString("\uFFFD")
				continue
			}
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
}

// pyNumber writes a JSON number as Python reads and writes it: an int
// (no '.', 'e' or 'E') as written, a float as its repr.
func pyNumber(s string) string {
	if !strings.ContainsAny(s, ".eE") {
		if s == "-0" {
			return "0"
		}
		return s
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !math.IsInf(f, 0) {
		return s
	}
	return pyFloat(f)
}

// pyFloat is Python's repr of a float: the shortest digits that read back
// to f, in positional notation when its decimal exponent is within
// [-5, 16), else as d.ddde±XX; a whole number ends with ".0".
func pyFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	case math.IsNaN(f):
		return "NaN"
	}
	sign := ""
	if math.Signbit(f) {
		sign, f = "-", -f
	}
	if f == 0 {
		return sign + "0.0"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±XX
	i := strings.IndexByte(e, 'e')
	digits := strings.Replace(e[:i], ".", "", 1)
	exp, _ := strconv.Atoi(e[i+1:])
	if exp < -4 || exp >= 16 {
		m := digits[:1]
		if len(digits) > 1 {
			m += "." + digits[1:]
		}
		es := "+"
		if exp < 0 {
			es, exp = "-", -exp
		}
		x := strconv.Itoa(exp)
		if len(x) < 2 {
			x = "0" + x
		}
		return sign + m + "e" + es + x
	}
	if exp < 0 {
		return sign + "0." + strings.Repeat("0", -exp-1) + digits
	}
	if len(digits) <= exp+1 {
		return sign + digits + strings.Repeat("0", exp+1-len(digits)) + ".0"
	}
	return sign + digits[:exp+1] + "." + digits[exp+1:]
}
