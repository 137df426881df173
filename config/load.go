package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"

	"github.com/trajflow/trajflow/pipeline"
	"go.yaml.in/yaml/v3"
)

// Load reads the config file at path, applies the --set overrides
// ("section.key=value", value in YAML syntax), fills defaults and validates.
// Relative paths in the config (source.path, output.dir) are taken relative
// to the working directory, as the user typed them.
func Load(path string, sets []string) (*Config, error) {
	cfg, err := Read(path, sets)
	if err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, cfg.Locate(err)
	}
	return cfg, nil
}

// Read is Load without Validate, for a caller that validates more than
// the config's own keys in one go (the runner's Check, which also checks
// the environment): it fails only when the file cannot be read or
// decoded. Unknown keys are kept as problems that Validate reports.
func Read(path string, sets []string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, invalid(fmt.Errorf("config: %w", err))
	}
	return Decode(data, path, sets)
}

// Parse is Load on bytes; name is used in errors.
func Parse(data []byte, name string, sets []string) (*Config, error) {
	cfg, err := Decode(data, name, sets)
	if err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, cfg.Locate(err)
	}
	return cfg, nil
}

// Decode is Read on bytes: it parses, applies the sets and fills
// defaults, and fails only on what stops decoding.
//
// Every problem is reported at once, as a *ValidationError whose lines
// each name where the key was set: "name: line N: key: problem", or
// "--set key=value: key: problem" for a key the command line set.
func Decode(data []byte, name string, sets []string) (*Config, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, invalid(fmt.Errorf("%s: %s", name, strings.TrimPrefix(err.Error(), "yaml: ")))
	}
	if root.Kind == 0 { // empty document
		root = yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{{Kind: yaml.MappingNode, Tag: "!!map"}}}
	}
	doc := root.Content[0]
	if doc.Kind != yaml.MappingNode {
		return nil, invalid(fmt.Errorf("%s: line %d: the config must be a mapping of sections", name, doc.Line))
	}
	cfg := &Config{File: name, where: map[string]string{}}
	locate(doc, "", name, cfg.where)
	for _, s := range sets {
		path, err := applySet(doc, s)
		if err != nil {
			return nil, invalid(err)
		}
		cfg.where[path] = "--set " + s
		// A section the flag created is the flag's too, so that an
		// unknown section names the flag, not the file.
		for p := parentKey(path); p != ""; p = parentKey(p) {
			if _, ok := cfg.where[p]; !ok {
				cfg.where[p] = "--set " + s
			}
		}
		for k := range cfg.where { // a --set of a section replaces its keys
			if strings.HasPrefix(k, path+".") || strings.HasPrefix(k, path+"[") {
				cfg.where[k] = "--set " + s
			}
		}
	}
	cfg.unknown = checkKeys(doc, reflect.TypeOf(Config{}), "")
	if err := doc.Decode(cfg); err != nil {
		var tree any
		_ = doc.Decode(&tree)
		red := newRedactor(tree)
		errs := decodeErrors(data, name, sets, err)
		for i, e := range errs {
			errs[i] = &redactedError{red.String(e.Error()), e}
		}
		return nil, invalid(errs...)
	}
	cfg.SetDefaults()
	return cfg, nil
}

// redactedError is an error whose text had its secrets removed; it still
// unwraps to the error it came from.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// decodeErrors names where each value that failed to decode was set. A
// value that a --set gave is checked alone, so that its error names the
// flag (and, where YAML read the value as a mapping or a list, shows the
// quoting that passes it as a string); the file is checked without the
// sets, so that its errors carry the file's own line numbers.
func decodeErrors(data []byte, name string, sets []string, err error) []error {
	var errs []error
	for _, s := range sets {
		doc := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		path, serr := applySet(doc, s)
		if serr != nil {
			continue
		}
		if derr := doc.Decode(&Config{}); derr != nil {
			for _, m := range pipeline.YAMLMessages(derr) {
				hint := ""
				if strings.Contains(m, "want a string, got") {
					hint = quoteHint(s)
				}
				errs = append(errs, fmt.Errorf("--set %s: %s: %s%s", s, path, pipeline.StripLine(m), hint))
			}
		}
	}
	var root yaml.Node
	if yaml.Unmarshal(data, &root) == nil && len(root.Content) > 0 {
		if derr := root.Content[0].Decode(&Config{}); derr != nil {
			keys := map[int]string{}
			valueKeys(root.Content[0], "", keys)
			// Several keys on one line ("generate: {endpoints: [..],
			// params: [..]}"): the one whose value fails alone is meant.
			failingKeys(root.Content[0], reflect.TypeOf(Config{}), "", keys)
			for _, m := range pipeline.YAMLMessages(derr) {
				if !strings.HasPrefix(m, "line ") {
					m = "line ?: " + m
				} else if n, rest, ok := strings.Cut(strings.TrimPrefix(m, "line "), ": "); ok {
					if line, err := strconv.Atoi(n); err == nil && keys[line] != "" {
						m = fmt.Sprintf("line %d: %s: %s", line, keys[line], rest)
					}
				}
				errs = append(errs, fmt.Errorf("%s: %s", name, m))
			}
		}
	}
	if len(errs) == 0 { // only the combination fails: a --set changed a section's shape
		for _, m := range pipeline.YAMLMessages(err) {
			errs = append(errs, fmt.Errorf("%s with --set %s: %s", name, strings.Join(sets, " --set "), pipeline.StripLine(m)))
		}
	}
	return errs
}

// valueKeys records, for each line where the value of a mapping key
// starts, the deepest such key: YAML's decoding errors give only the line
// of the value that failed, and the user needs the key.
func valueKeys(node *yaml.Node, path string, keys map[int]string) {
	switch node.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(node.Content); i += 2 {
			k, v := node.Content[i], node.Content[i+1]
			full := k.Value
			if path != "" {
				full = path + "." + k.Value
			}
			if len(full) > len(keys[v.Line]) {
				keys[v.Line] = full
			}
			valueKeys(v, full, keys)
		}
	case yaml.SequenceNode:
		for i, v := range node.Content {
			valueKeys(v, fmt.Sprintf("%s[%d]", path, i), keys)
		}
	}
}

// failingKeys records, for the line where its value starts, each key of
// node whose value alone fails to decode into its field of t, deepest
// last: it overrides valueKeys' guess where a line holds several keys.
func failingKeys(node *yaml.Node, t reflect.Type, path string, keys map[int]string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || node.Kind != yaml.MappingNode {
		return
	}
	fields := map[string]reflect.Type{}
	yamlFields(t, fields)
	for i := 0; i+1 < len(node.Content); i += 2 {
		k, v := node.Content[i], node.Content[i+1]
		ft, ok := fields[k.Value]
		if !ok {
			continue
		}
		full := k.Value
		if path != "" {
			full = path + "." + k.Value
		}
		if v.Decode(reflect.New(ft).Interface()) != nil {
			keys[v.Line] = full
			failingKeys(v, ft, full, keys)
		}
	}
}

// quoteHint explains, for a --set whose value YAML reads as a mapping or a
// list, how to pass it as a string: "a: b" and "{x}" are YAML.
func quoteHint(set string) string {
	path, value, _ := strings.Cut(set, "=")
	var v yaml.Node
	if yaml.Unmarshal([]byte(value), &v) != nil || len(v.Content) == 0 {
		return ""
	}
	kind := ""
	switch v.Content[0].Kind {
	case yaml.MappingNode:
		kind = "a mapping"
	case yaml.SequenceNode:
		kind = "a list"
	default:
		return ""
	}
	quoted := path + "=" + strconv.Quote(value)
	return fmt.Sprintf(" (the value is read as YAML, where %q is %s; to pass it as a string, quote it inside the shell's quotes: --set '%s')",
		value, kind, strings.ReplaceAll(quoted, "'", `'\''`))
}

// ValidationError is every problem of a config, each one a line that
// names where the key was set and what is wrong with it.
type ValidationError struct {
	Problems []error
}

func (e *ValidationError) Error() string { return errors.Join(e.Problems...).Error() }

// Unwrap returns the problems.
func (e *ValidationError) Unwrap() []error { return e.Problems }

func invalid(errs ...error) *ValidationError { return &ValidationError{Problems: errs} }

// Locate turns the problems in err (as Validate and the components'
// validators report them: "key: problem" or *pipeline.KeyError) into a
// *ValidationError whose lines name where each key was set. A key the
// config never set (a default) is located at the file.
func (c *Config) Locate(err error) error {
	if err == nil {
		return nil
	}
	red := c.Redactor()
	var out []error
	for _, e := range pipeline.Unjoin(err) {
		out = append(out, &redactedError{red.String(fmt.Sprintf("%s: %v", c.Where(keyOf(e)), e)), e})
	}
	return invalid(out...)
}

// Where names where key was set: "FILE: line N", "--set key=value", or the
// file alone for a key left to its default. A key the config did not set
// is located at its closest set parent.
func (c *Config) Where(key string) string {
	file := c.File
	if file == "" {
		file = "config"
	}
	for k := key; k != ""; k = parentKey(k) {
		if w, ok := c.where[k]; ok {
			return w
		}
	}
	return file
}

// keyOf is the config key an error names: a *pipeline.KeyError's, or the
// dotted path before the first ": " of its text.
func keyOf(err error) string {
	var ke *pipeline.KeyError
	if errors.As(err, &ke) {
		return ke.Key
	}
	k, _, ok := strings.Cut(err.Error(), ": ")
	if !ok || strings.ContainsAny(k, " \t\n") {
		return ""
	}
	return k
}

// parentKey drops the last element of a dotted key ("a.b[2]" → "a.b",
// "a.b" → "a", "a" → "").
func parentKey(k string) string {
	if i := strings.LastIndexAny(k, ".["); i > 0 {
		return k[:i]
	}
	return ""
}

// locate records the line of every key under node, as "name: line N".
func locate(node *yaml.Node, path, name string, where map[string]string) {
	switch node.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(node.Content); i += 2 {
			k, v := node.Content[i], node.Content[i+1]
			full := k.Value
			if path != "" {
				full = path + "." + k.Value
			}
			where[full] = fmt.Sprintf("%s: line %d", name, k.Line)
			locate(v, full, name, where)
		}
	case yaml.SequenceNode:
		for i, v := range node.Content {
			full := fmt.Sprintf("%s[%d]", path, i)
			where[full] = fmt.Sprintf("%s: line %d", name, v.Line)
			locate(v, full, name, where)
		}
	}
}

// applySet applies one "a.b.c=value" override to the document and
// returns the key it set.
func applySet(doc *yaml.Node, set string) (string, error) {
	path, value, ok := strings.Cut(set, "=")
	if !ok || path == "" {
		return "", fmt.Errorf("--set %q: want section.key=value", set)
	}
	var v yaml.Node
	if err := yaml.Unmarshal([]byte(value), &v); err != nil || len(v.Content) == 0 {
		// A value that is not YAML is taken as a string, unless it starts
		// like a quoted string, a list or a mapping: then a quote or a
		// bracket went missing, and taking it literally would hide that.
		if t := strings.TrimSpace(value); err != nil && t != "" && strings.ContainsRune(`"'[{`, rune(t[0])) {
			str := value
			if q := t[0]; q == '"' || q == '\'' { // an unterminated quote: what it opened
				str = strings.TrimPrefix(t, string(q))
			}
			return "", fmt.Errorf("--set %s: the value is not valid YAML (%s); to pass it as a string, quote it inside the shell's quotes: --set '%s'",
				set, strings.TrimPrefix(err.Error(), "yaml: "), strings.ReplaceAll(path+"="+strconv.Quote(str), "'", `'\''`))
		}
		v = yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{{Kind: yaml.ScalarNode, Tag: "!!str", Value: value}}}
	}
	node := doc
	keys := strings.Split(path, ".")
	for i, k := range keys {
		if node.Kind != yaml.MappingNode {
			return "", fmt.Errorf("--set %s: %s is not a section", path, strings.Join(keys[:i], "."))
		}
		var next *yaml.Node
		for j := 0; j+1 < len(node.Content); j += 2 {
			if node.Content[j].Value == k {
				next = node.Content[j+1]
				break
			}
		}
		if i == len(keys)-1 {
			if next != nil {
				*next = *v.Content[0]
			} else {
				node.Content = append(node.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k}, v.Content[0])
			}
			return path, nil
		}
		if next == nil {
			next = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			node.Content = append(node.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k}, next)
		}
		node = next
	}
	return path, nil
}

// checkKeys reports every key of node that t does not have, with its full
// path and line. Inline maps accept any key (their owner checks them).
func checkKeys(node *yaml.Node, t reflect.Type, path string) []error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || node.Kind != yaml.MappingNode {
		return nil
	}
	fields := map[string]reflect.Type{}
	inline := yamlFields(t, fields)
	var errs []error
	for i := 0; i+1 < len(node.Content); i += 2 {
		k, v := node.Content[i], node.Content[i+1]
		full := k.Value
		if path != "" {
			full = path + "." + k.Value
		}
		ft, ok := fields[k.Value]
		if !ok {
			if !inline {
				errs = append(errs, &pipeline.KeyError{Key: full, Msg: "unknown key"})
			}
			continue
		}
		errs = append(errs, checkKeys(v, ft, full)...)
	}
	return errs
}

// yamlFields adds t's yaml keys to fields, descending into inline structs,
// and reports whether t has an inline map (which takes any other key).
func yamlFields(t reflect.Type, fields map[string]reflect.Type) (inlineMap bool) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if strings.Contains(opts, "inline") {
			if f.Type.Kind() == reflect.Struct {
				inlineMap = yamlFields(f.Type, fields) || inlineMap
			} else {
				inlineMap = true
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		fields[name] = f.Type
	}
	return inlineMap
}
