package config

import (
	"reflect"
	"strings"
)

// Setting returns the value of a key as written in a config file
// ("output.jsonl", "generate.params"), as an output may show it: a value
// named like a secret, and the credentials of a URL, are redacted
// (RedactValue). ok is false for a key the config does not have. It is
// how a registered sink (package sinks, PartSpec) reads its settings
// without importing this package.
func (c *Config) Setting(key string) (any, bool) {
	path := strings.Split(key, ".")
	v := reflect.ValueOf(c).Elem()
	for _, name := range path {
		var ok bool
		if v, ok = field(v, name); !ok {
			return nil, false
		}
	}
	out := v.Interface()
	if m, ok := out.(map[string]any); ok {
		// RedactValue walks map[string]any (a named map type would be a
		// leaf to it).
		out = m
	}
	return RedactValue(path, out), true
}

// field is the field of struct v whose yaml name is name, looking into
// inline fields.
func field(v reflect.Value, name string) (reflect.Value, bool) {
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return reflect.Value{}, false
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return reflect.Value{}, false
	}
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if tag == "-" {
			continue
		}
		if tag == "" && strings.Contains(","+opts+",", ",inline,") {
			if got, ok := field(v.Field(i), name); ok {
				return got, true
			}
			continue
		}
		if tag == name {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}
