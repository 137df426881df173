// Package gymcontract checks JSON bodies against NeMo Gym's request and
// rollout models, as Gym's pydantic models declare them: required fields,
// field types, and the models' policy on keys they do not declare (Gym's
// responses_create_params forbid them: a 422 extra_forbidden). The models
// are transcribed from Gym's source into testdata/models.json, with the
// revision read; tests validate every body trajflow sends to a resources
// server and every output.jsonl line with it.
package gymcontract

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

//go:embed testdata/models.json
var modelsJSON []byte

// Field is one declared field of a model.
type Field struct {
	Type     string `json:"type"`
	Required bool   `json:"required"`
}

// Model is one of Gym's pydantic models: its fields and extra policy, or
// a union of models.
type Model struct {
	Source string           `json:"source"`
	Extra  string           `json:"extra"`
	Fields map[string]Field `json:"fields"`
	Union  []string         `json:"union"`
	// TokenMetadata, on a union, is Gym's _validate_atomic_token_metadata
	// (nemo_gym/openai_utils.py): an object holding any of the token
	// fields (TokenFields) must hold the required ones (TokenFieldsRequired).
	TokenMetadata bool `json:"token_metadata"`
}

// TokenFieldsRequired are the token fields Gym requires together
// (REQUIRED_TOKEN_METADATA_FIELDS); TokenFields adds routed_experts
// (TOKEN_METADATA_FIELDS).
var (
	TokenFieldsRequired = []string{"generation_log_probs", "generation_token_ids", "prompt_token_ids"}
	TokenFields         = append([]string{"routed_experts"}, TokenFieldsRequired...)
	tokenFieldTypes     = map[string]string{
		"prompt_token_ids":     "list<int>",
		"generation_token_ids": "list<int>",
		"generation_log_probs": "list<number>",
		"routed_experts":       "string|list<list<list<int>>>|null",
	}
)

// Models are the transcribed models and the revisions they were read at.
type Models struct {
	Gym struct {
		Repo     string `json:"repo"`
		Revision string `json:"revision"`
	} `json:"gym"`
	Models map[string]*Model `json:"models"`
}

// Load reads the transcribed models and checks that every type they name
// parses and every model they name exists.
func Load() (*Models, error) {
	return Parse(modelsJSON)
}

// Parse reads a models file (the format of testdata/models.json).
func Parse(b []byte) (*Models, error) {
	var m Models
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("gymcontract: models: %w", err)
	}
	for name, md := range m.Models {
		if md == nil {
			return nil, fmt.Errorf("gymcontract: model %s: empty", name)
		}
		switch md.Extra {
		case "forbid", "ignore", "allow":
		case "":
			if len(md.Union) == 0 {
				return nil, fmt.Errorf("gymcontract: model %s: no extra policy and no union", name)
			}
		default:
			return nil, fmt.Errorf("gymcontract: model %s: extra %q is not forbid, ignore or allow", name, md.Extra)
		}
		for _, u := range md.Union {
			if m.Models[u] == nil {
				return nil, fmt.Errorf("gymcontract: model %s: union member %s is not a model", name, u)
			}
		}
		for f, fd := range md.Fields {
			t, err := ParseType(fd.Type)
			if err != nil {
				return nil, fmt.Errorf("gymcontract: model %s: field %s: %w", name, f, err)
			}
			if missing := t.models(nil); len(missing) > 0 {
				for _, mn := range missing {
					if m.Models[mn] == nil {
						return nil, fmt.Errorf("gymcontract: model %s: field %s: model %s is not declared", name, f, mn)
					}
				}
			}
		}
	}
	return &m, nil
}

// Type is a parsed field type.
type Type struct {
	// Kind is bool, int, number, string, null, any, object, list, map,
	// literal, union or model.
	Kind string
	// Name is the literal's value or the model's name.
	Name string
	// Elem is the element type of a list or map.
	Elem *Type
	// Alts are the alternatives of a union.
	Alts []*Type
}

// ParseType parses a field type: bool, int, number, string, null, any,
// object, list<T>, map<T>, =LITERAL, A|B, or a model's name.
func ParseType(s string) (*Type, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, fmt.Errorf("empty type")
	}
	// Split the union at the top level (outside <>).
	var alts []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '<':
			depth++
		case '>':
			depth--
			if depth < 0 {
				return nil, fmt.Errorf("type %q: unbalanced >", s)
			}
		case '|':
			if depth == 0 {
				alts = append(alts, s[start:i])
				start = i + 1
			}
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("type %q: unbalanced <", s)
	}
	if len(alts) > 0 {
		alts = append(alts, s[start:])
		u := &Type{Kind: "union"}
		for _, a := range alts {
			t, err := ParseType(a)
			if err != nil {
				return nil, err
			}
			u.Alts = append(u.Alts, t)
		}
		return u, nil
	}
	switch s {
	case "bool", "int", "number", "string", "null", "any", "object":
		return &Type{Kind: s}, nil
	}
	if lit, ok := strings.CutPrefix(s, "="); ok {
		if lit == "" {
			return nil, fmt.Errorf("type %q: empty literal", s)
		}
		return &Type{Kind: "literal", Name: lit}, nil
	}
	for _, k := range []string{"list", "map"} {
		if inner, ok := strings.CutPrefix(s, k+"<"); ok {
			inner, ok = strings.CutSuffix(inner, ">")
			if !ok {
				return nil, fmt.Errorf("type %q: %s< without >", s, k)
			}
			e, err := ParseType(inner)
			if err != nil {
				return nil, err
			}
			return &Type{Kind: k, Elem: e}, nil
		}
	}
	for _, c := range s {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return nil, fmt.Errorf("type %q: not a type", s)
		}
	}
	return &Type{Kind: "model", Name: s}, nil
}

// models appends the model names t refers to.
func (t *Type) models(out []string) []string {
	switch t.Kind {
	case "model":
		out = append(out, t.Name)
	case "list", "map":
		out = t.Elem.models(out)
	case "union":
		for _, a := range t.Alts {
			out = a.models(out)
		}
	}
	return out
}

// Validate checks the JSON body against the model named, as pydantic
// would validate it: an error names the path of each problem (Gym's
// 422 loc), such as body.responses_create_params.seed: extra_forbidden.
func (m *Models) Validate(model string, body []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("%s: body is not JSON: %w", model, err)
	}
	if m.Models[model] == nil {
		return fmt.Errorf("gymcontract: no model %s", model)
	}
	var problems []string
	m.check(&problems, "body", &Type{Kind: "model", Name: model}, v)
	if len(problems) > 0 {
		return fmt.Errorf("%s: %s", model, strings.Join(problems, "; "))
	}
	return nil
}

func (m *Models) check(problems *[]string, path string, t *Type, v any) {
	bad := func(what string) { *problems = append(*problems, path+": "+what) }
	switch t.Kind {
	case "any":
	case "null":
		if v != nil {
			bad("want null")
		}
	case "bool":
		if _, ok := v.(bool); !ok {
			bad("bool_type")
		}
	case "string":
		if _, ok := v.(string); !ok {
			bad("string_type")
		}
	case "int":
		n, ok := v.(json.Number)
		if !ok {
			bad("int_type")
			return
		}
		if _, err := n.Int64(); err != nil {
			bad("int_from_float: " + n.String())
		}
	case "number":
		if _, ok := v.(json.Number); !ok {
			bad("float_type")
		}
	case "object":
		if _, ok := v.(map[string]any); !ok {
			bad("dict_type")
		}
	case "literal":
		if s, ok := v.(string); !ok || s != t.Name {
			bad(fmt.Sprintf("literal_error: want %q, got %v", t.Name, v))
		}
	case "list":
		l, ok := v.([]any)
		if !ok {
			bad("list_type")
			return
		}
		for i, e := range l {
			m.check(problems, fmt.Sprintf("%s.%d", path, i), t.Elem, e)
		}
	case "map":
		o, ok := v.(map[string]any)
		if !ok {
			bad("dict_type")
			return
		}
		for _, k := range sortedKeys(o) {
			m.check(problems, path+"."+k, t.Elem, o[k])
		}
	case "union":
		var all []string
		for _, a := range t.Alts {
			var p []string
			m.check(&p, path, a, v)
			if len(p) == 0 {
				return
			}
			all = append(all, p...)
		}
		bad("no member of the union matches (" + strings.Join(all, "; ") + ")")
	case "model":
		md := m.Models[t.Name]
		if o, ok := v.(map[string]any); ok && md.TokenMetadata {
			present := false
			for _, f := range TokenFields {
				_, has := o[f]
				present = present || has
			}
			if present {
				var missing []string
				for _, f := range TokenFieldsRequired {
					if _, has := o[f]; !has {
						missing = append(missing, f)
					}
				}
				if len(missing) > 0 {
					bad("value_error: Token metadata must include all required fields; missing: " + strings.Join(missing, ", "))
					return
				}
				// TokenIDLogProbMixin.model_validate of the fields present.
				n := len(*problems)
				for _, f := range TokenFields {
					if fv, has := o[f]; has {
						ft, _ := ParseType(tokenFieldTypes[f])
						m.check(problems, path+"."+f, ft, fv)
					}
				}
				if len(*problems) > n {
					return
				}
			}
		}
		if len(md.Union) > 0 {
			alts := make([]*Type, len(md.Union))
			for i, u := range md.Union {
				alts[i] = &Type{Kind: "model", Name: u}
			}
			m.check(problems, path, &Type{Kind: "union", Alts: alts}, v)
			return
		}
		o, ok := v.(map[string]any)
		if !ok {
			bad("model_type: " + t.Name + " wants an object")
			return
		}
		for _, f := range sortedFields(md.Fields) {
			fv, present := o[f]
			if !present {
				if md.Fields[f].Required {
					bad(f + ": missing")
				}
				continue
			}
			ft, _ := ParseType(md.Fields[f].Type) // checked by Parse
			m.check(problems, path+"."+f, ft, fv)
		}
		if md.Extra == "forbid" {
			for _, k := range sortedKeys(o) {
				if _, ok := md.Fields[k]; !ok {
					*problems = append(*problems, path+"."+k+": extra_forbidden")
				}
			}
		}
	}
}

func sortedKeys(o map[string]any) []string {
	ks := make([]string, 0, len(o))
	for k := range o {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func sortedFields(f map[string]Field) []string {
	ks := make([]string, 0, len(f))
	for k := range f {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
