package sim

import (
	"strconv"

	simulator "github.com/trajflow/trajflow/inference/sim"
)

// parseTrailer decodes the compact form the simulator writes (an object of
// the four known keys, no spaces, no escapes) without encoding/json, which
// cost a few microseconds and allocations on every environment step. It
// reports false for anything else; the caller then decodes with
// encoding/json, so the result is the same either way (FuzzReadTrailer
// checks).
func parseTrailer(b []byte) (simulator.Trailer, bool) {
	var tr simulator.Trailer
	if len(b) < 2 || b[0] != '{' || b[len(b)-1] != '}' {
		return tr, false
	}
	b = b[1 : len(b)-1]
	if len(b) == 0 {
		return tr, true
	}
	for {
		// "key":
		if len(b) < 3 || b[0] != '"' {
			return tr, false
		}
		end := 1
		for end < len(b) && b[end] != '"' {
			if b[end] == '\\' || b[end] < 0x20 {
				return tr, false
			}
			end++
		}
		if end+1 >= len(b) || b[end+1] != ':' {
			return tr, false
		}
		key := b[1:end]
		b = b[end+2:]
		// value, up to the next ',' or the end
		n := 0
		for n < len(b) && b[n] != ',' {
			n++
		}
		val := b[:n]
		switch string(key) {
		case "turns_left":
			v, ok := parseInt(val)
			if !ok {
				return tr, false
			}
			tr.TurnsLeft = v
		case "obs_tokens":
			v, ok := parseInt(val)
			if !ok {
				return tr, false
			}
			tr.ObsTokens = v
		case "env_delay_ms":
			if v, ok := parseInt(val); ok {
				// Exact, and rounded as ParseFloat rounds when above 2^53.
				tr.EnvDelayMs = float64(v)
				break
			}
			if !isNumber(val) {
				return tr, false
			}
			v, err := strconv.ParseFloat(string(val), 64)
			if err != nil {
				return tr, false
			}
			tr.EnvDelayMs = v
		case "correct":
			switch string(val) {
			case "true":
				tr.Correct = true
			case "false":
				tr.Correct = false
			default:
				return tr, false
			}
		default:
			return tr, false
		}
		if n == len(b) {
			return tr, true
		}
		b = b[n+1:]
	}
}

// parseInt parses a JSON integer (-?digits, no leading zero) that fits an
// int.
func parseInt(b []byte) (int, bool) {
	neg := len(b) > 0 && b[0] == '-'
	d := b
	if neg {
		d = b[1:]
	}
	if len(d) == 0 || len(d) > 18 || (d[0] == '0' && len(d) > 1) {
		return 0, false
	}
	v := 0
	for _, c := range d {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	if neg {
		v = -v
	}
	return v, true
}

// isNumber reports whether b is a JSON number.
func isNumber(b []byte) bool {
	i := 0
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i == len(b) || b[i] < '0' || b[i] > '9' {
			return false
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i == len(b) || b[i] < '0' || b[i] > '9' {
			return false
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	return i == len(b)
}
