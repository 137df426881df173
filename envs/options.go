package envs

import (
	"fmt"
	"reflect"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/trajflow/trajflow/pipeline"
)

// keyError turns a failed Decode of the options into v into an error that
// names the offending key as section.key: each key is decoded alone into a
// fresh value of v's type until one fails. Unknown keys list the known ones.
func (o Options) keyError(v any, err error) error {
	t := reflect.TypeOf(v)
	if t == nil || t.Kind() != reflect.Pointer {
		return fmt.Errorf("%s: %s", o.Section, yamlMessage(err))
	}
	keys := make([]string, 0, len(o.Values))
	for k := range o.Values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		b, merr := yaml.Marshal(map[string]any{k: o.Values[k]})
		if merr != nil {
			return fmt.Errorf("%s: %s", o.keyName(k), yamlMessage(merr))
		}
		dec := yaml.NewDecoder(strings.NewReader(string(b)))
		dec.KnownFields(true)
		kerr := dec.Decode(reflect.New(t.Elem()).Interface())
		if kerr == nil {
			continue
		}
		msg := yamlMessage(kerr)
		if strings.Contains(msg, "not found in type") {
			msg = "unknown option"
			if known := yamlKeys(t.Elem()); len(known) > 0 {
				msg += " (have " + strings.Join(known, ", ") + ")"
			}
		}
		return fmt.Errorf("%s: %s", o.keyName(k), msg)
	}
	return fmt.Errorf("%s: %s", o.Section, yamlMessage(err))
}

func (o Options) keyName(k string) string {
	if o.Section == "" {
		return k
	}
	return o.Section + "." + k
}

// yamlMessage is a yaml error without its "yaml: " and "line N: " noise.
func yamlMessage(err error) string {
	msgs := pipeline.YAMLMessages(err)
	for i, m := range msgs {
		msgs[i] = pipeline.StripLine(m)
	}
	return strings.Join(msgs, "; ")
}

// yamlKeys lists the yaml keys of a struct type, sorted.
func yamlKeys(t reflect.Type) []string {
	if t.Kind() != reflect.Struct {
		return nil
	}
	var keys []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" || strings.Contains(opts, "inline") {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		keys = append(keys, name)
	}
	sort.Strings(keys)
	return keys
}
