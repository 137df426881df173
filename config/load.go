package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Load reads the config file at path, applies the --set overrides
// ("section.key=value", value in YAML syntax), fills defaults and validates.
// Relative paths in the config (source.path, output.dir) are taken relative
// to the working directory, as the user typed them.
func Load(path string, sets []string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	cfg, err := Parse(data, path, sets)
	if err != nil {
		return nil, err
	}
	return cfg, nil
}

// Parse is Load on bytes; name is used in errors.
func Parse(data []byte, name string, sets []string) (*Config, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("%s: %s", name, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if root.Kind == 0 { // empty document
		root = yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{{Kind: yaml.MappingNode, Tag: "!!map"}}}
	}
	doc := root.Content[0]
	if doc.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s: line %d: the config must be a mapping of sections", name, doc.Line)
	}
	for _, s := range sets {
		if err := applySet(doc, s); err != nil {
			return nil, err
		}
	}
	if errs := checkKeys(doc, reflect.TypeOf(Config{}), ""); len(errs) > 0 {
		for i := range errs {
			errs[i] = fmt.Errorf("%s: %w", name, errs[i])
		}
		return nil, errors.Join(errs...)
	}
	cfg := &Config{File: name}
	if err := doc.Decode(cfg); err != nil {
		return nil, fmt.Errorf("%s: %s", name, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return cfg, nil
}

// applySet applies one "a.b.c=value" override to the document.
func applySet(doc *yaml.Node, set string) error {
	path, value, ok := strings.Cut(set, "=")
	if !ok || path == "" {
		return fmt.Errorf("--set %q: want section.key=value", set)
	}
	var v yaml.Node
	if err := yaml.Unmarshal([]byte(value), &v); err != nil || len(v.Content) == 0 {
		v = yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{{Kind: yaml.ScalarNode, Tag: "!!str", Value: value}}}
	}
	node := doc
	keys := strings.Split(path, ".")
	for i, k := range keys {
		if node.Kind != yaml.MappingNode {
			return fmt.Errorf("--set %s: %s is not a section", path, strings.Join(keys[:i], "."))
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
			return nil
		}
		if next == nil {
			next = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			node.Content = append(node.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k}, next)
		}
		node = next
	}
	return nil
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
				errs = append(errs, fmt.Errorf("line %d: %s: unknown key", k.Line, full))
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
