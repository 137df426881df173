package pipeline

import (
	"errors"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// YAMLMessages splits a YAML decoding error into its messages (their
// "line N: " kept), each type error said in the config's words
// (PlainTypeError).
func YAMLMessages(err error) []string {
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		out := make([]string, len(te.Errors))
		for i, m := range te.Errors {
			out[i] = PlainTypeError(m)
		}
		return out
	}
	return []string{strings.TrimPrefix(err.Error(), "yaml: ")}
}

// unmarshalRe reads a YAML type error: "cannot unmarshal !!str `four` into int".
var unmarshalRe = regexp.MustCompile("cannot unmarshal (!![a-z]+)(?: `(.*)`)? into (.+)$")

// PlainTypeError says a YAML type error without YAML's tags and Go's
// types: "cannot unmarshal !!seq into map[string]interface {}" is "want a
// mapping, got a list".
func PlainTypeError(m string) string {
	sm := unmarshalRe.FindStringSubmatchIndex(m)
	if sm == nil {
		return m
	}
	tag, goType := m[sm[2]:sm[3]], m[sm[6]:sm[7]]
	value := ""
	if sm[4] >= 0 {
		value = m[sm[4]:sm[5]]
	}
	var got string
	switch tag {
	case "!!str":
		got = "the text `" + value + "`"
	case "!!int", "!!float":
		got = "the number " + value
	case "!!bool":
		got = value
	case "!!seq":
		got = "a list"
	case "!!map":
		got = "a mapping"
	case "!!null":
		got = "nothing"
	default:
		got = strings.TrimSpace(tag + " " + value)
	}
	var want string
	switch t := strings.TrimPrefix(goType, "*"); {
	case t == "string":
		want = "a string"
	case strings.HasPrefix(t, "int") || strings.HasPrefix(t, "uint"):
		want = "a whole number"
	case strings.HasPrefix(t, "float"):
		want = "a number"
	case t == "bool":
		want = "true or false"
	case strings.HasPrefix(t, "[]"):
		want = "a list"
	case strings.HasPrefix(t, "map[") || strings.Contains(t, "."):
		want = "a mapping"
	default:
		want = t
	}
	return m[:sm[0]] + "want " + want + ", got " + got
}

// StripLine drops a message's "line N: " prefix.
func StripLine(m string) string {
	if strings.HasPrefix(m, "line ") {
		if _, rest, ok := strings.Cut(m, ": "); ok {
			return rest
		}
	}
	return m
}
