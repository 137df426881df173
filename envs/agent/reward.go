package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
)

// RewardLineHelp says what the agent's last stdout line must be.
const RewardLineHelp = `want a JSON object like {"reward": 1.0, "metrics": {"acc": 1}} as the last line of stdout` +
	` (reward a number, metrics optional numbers), a POST of {"reward": x} to TRAJFLOW_REWARD_URL, or env.verify`

// ParseRewardLine decodes the agent's reward line: a JSON object with a
// number "reward" (required) and "metrics", an optional object of numbers.
// Other keys are ignored. Errors say which part is wrong.
func ParseRewardLine(line []byte) (reward float64, metrics map[string]float64, err error) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' {
		return 0, nil, errors.New("not a JSON object")
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(line, &obj); err != nil {
		return 0, nil, fmt.Errorf("not a JSON object: %v", jsonMessage(err))
	}
	raw, ok := obj["reward"]
	if !ok {
		return 0, nil, errors.New(`no "reward" key`)
	}
	if err := decodeNumber(raw, &reward); err != nil {
		return 0, nil, fmt.Errorf(`"reward" is %s, want a number`, kindOf(raw))
	}
	if raw, ok := obj["metrics"]; ok && !isNull(raw) {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil || m == nil {
			return 0, nil, fmt.Errorf(`"metrics" is %s, want an object of numbers`, kindOf(raw))
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		metrics = make(map[string]float64, len(m))
		for _, k := range keys {
			var v float64
			if err := decodeNumber(m[k], &v); err != nil {
				return 0, nil, fmt.Errorf(`"metrics" key %q is %s, want a number`, k, kindOf(m[k]))
			}
			metrics[k] = v
		}
	}
	return reward, metrics, nil
}

// decodeNumber decodes a JSON number that fits a finite float64.
func decodeNumber(raw json.RawMessage, v *float64) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || !(raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9')) {
		return errors.New("not a number")
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return err
	}
	if math.IsInf(*v, 0) || math.IsNaN(*v) {
		return errors.New("out of range")
	}
	return nil
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// kindOf names a JSON value's kind for an error.
func kindOf(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "empty"
	}
	switch raw[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number out of range"
	}
}

// jsonMessage is a JSON syntax error without the package's prefix.
func jsonMessage(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%s (at byte %d)", se.Error(), se.Offset)
	}
	return err.Error()
}

// lastLine returns the last non-blank line of out.
func lastLine(out []byte) []byte {
	out = bytes.TrimRight(out, " \t\r\n")
	if i := bytes.LastIndexByte(out, '\n'); i >= 0 {
		out = out[i+1:]
	}
	return bytes.TrimSpace(out)
}

// quote quotes a line for an error, cut to a readable length.
func quote(b []byte) string {
	const n = 200
	if len(b) > n {
		return fmt.Sprintf("%q... (%d bytes)", b[:n], len(b))
	}
	return fmt.Sprintf("%q", b)
}
