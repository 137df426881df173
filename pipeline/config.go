package pipeline

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Duration is a time.Duration read from "30s"-style strings or a number of
// seconds. Component configs use it for every time key.
type Duration time.Duration

// MaxDurationSeconds bounds a duration given as a number of seconds
// (about 31 years; time.Duration holds at most 292).
const MaxDurationSeconds = 1e9

// D returns the duration as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// UnmarshalYAML reads "30s", "1m30s" or a number of seconds.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a duration like 30s", n.Line)
	}
	if secs, err := strconv.ParseFloat(n.Value, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		if err != nil || math.IsNaN(secs) || math.IsInf(secs, 0) || math.Abs(secs) > MaxDurationSeconds {
			return fmt.Errorf("line %d: %q is not a duration: a number of seconds must be finite and at most %g", n.Line, n.Value, float64(MaxDurationSeconds))
		}
		*d = Duration(secs * float64(time.Second))
		return nil
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration (like 30s)", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration as a string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// KeyError is one problem of a config: the key it concerns, as a dotted
// path relative to the config that reported it ("path", "shard.index",
// "endpoints[1]"), and what is wrong with its value. Whoever composes
// configs prefixes the key with the section's name, so the key a user reads
// is the full one ("source.shard.index").
type KeyError struct {
	Key string
	Msg string
}

func (e *KeyError) Error() string { return e.Key + ": " + e.Msg }

// Problems collects every problem of a config, so that Validate reports
// them all at once. The zero value is ready to use.
type Problems struct {
	errs []error
}

// Add records a problem with key.
func (p *Problems) Add(key, format string, args ...any) {
	p.errs = append(p.errs, &KeyError{Key: key, Msg: fmt.Sprintf(format, args...)})
}

// OneOf records a problem unless v is one of allowed.
func (p *Problems) OneOf(key, v string, allowed ...string) {
	for _, a := range allowed {
		if v == a {
			return
		}
	}
	p.Add(key, "%q is not one of %s", v, strings.Join(allowed, ", "))
}

// Section records the problems of a nested config (err from its Validate)
// under section: a KeyError's key becomes section.key, any other error is
// kept under the section's own name.
func (p *Problems) Section(section string, err error) {
	for _, e := range Unjoin(err) {
		var ke *KeyError
		switch {
		case errors.As(e, &ke):
			key := ke.Key
			if section != "" {
				key = section + "." + key
				if strings.HasPrefix(ke.Key, "[") {
					key = section + ke.Key
				}
			}
			p.errs = append(p.errs, &KeyError{Key: key, Msg: ke.Msg})
		case section == "":
			p.errs = append(p.errs, e)
		default:
			p.errs = append(p.errs, &KeyError{Key: section, Msg: e.Error()})
		}
	}
}

// Err returns every problem recorded, joined, or nil.
func (p *Problems) Err() error { return errors.Join(p.errs...) }

// Unjoin splits an error made by errors.Join into its parts; any other
// error is returned alone, and nil as none.
func Unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, Unjoin(e)...)
		}
		return out
	}
	return []error{err}
}
