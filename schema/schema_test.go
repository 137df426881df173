package schema_test

import (
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"

	"github.com/trajflow/trajflow/schema"
)

func TestFileVersion(t *testing.T) {
	v1, v2, v3, v4, v5, v6, v7 := schema.ForVersion("1"), schema.ForVersion("2"), schema.ForVersion("3"), schema.ForVersion("4"), schema.ForVersion("5"), schema.ForVersion("6"), schema.Schema()
	tests := []struct {
		name    string
		meta    map[string]string
		s       *arrow.Schema
		want    string
		wantErr string
	}{
		{"v7", map[string]string{schema.MetadataKey: "7"}, v7, "7", ""},
		{"v7 unrecorded", nil, v7, "7", ""},
		{"recorded 7, columns of 6", map[string]string{schema.MetadataKey: "7"}, v6, "", "schema has 54 columns, want 55 (schema version 7)"},
		{"recorded 6, columns of 7", map[string]string{schema.MetadataKey: "6"}, v7, "", "schema has 55 columns, want 54 (schema version 6)"},
		{"v6", map[string]string{schema.MetadataKey: "6"}, v6, "6", ""},
		{"v6 unrecorded", nil, v6, "6", ""},
		{"recorded 6, columns of 5", map[string]string{schema.MetadataKey: "6"}, v5, "", "schema has 53 columns, want 54 (schema version 6)"},
		{"recorded 5, columns of 6", map[string]string{schema.MetadataKey: "5"}, v6, "", "schema has 54 columns, want 53 (schema version 5)"},
		{"v5", map[string]string{schema.MetadataKey: "5"}, v5, "5", ""},
		{"v5 unrecorded", nil, v5, "5", ""},
		{"v4", map[string]string{schema.MetadataKey: "4"}, v4, "4", ""},
		{"v4 unrecorded", nil, v4, "4", ""},
		{"recorded 5, columns of 3", map[string]string{schema.MetadataKey: "5"}, v3, "", "schema has 46 columns, want 53 (schema version 5)"},
		{"recorded 4, columns of 3", map[string]string{schema.MetadataKey: "4"}, v3, "", "schema has 46 columns, want 53 (schema version 4)"},
		{"v3", map[string]string{schema.MetadataKey: "3"}, v3, "3", ""},
		{"v3 unrecorded", nil, v3, "3", ""},
		{"recorded 3, columns of 2", map[string]string{schema.MetadataKey: "3"}, v2, "", "schema has 44 columns, want 46 (schema version 3)"},
		{"v2", map[string]string{schema.MetadataKey: "2"}, v2, "2", ""},
		{"v1", map[string]string{schema.MetadataKey: "1"}, v1, "1", ""},
		{"v2 unrecorded", nil, v2, "2", ""},
		{"v1 unrecorded", nil, v1, "1", ""},
		{"recorded 2, columns of 1", map[string]string{schema.MetadataKey: "2"}, v1, "", "schema has 41 columns, want 44 (schema version 2)"},
		{"recorded 1, columns of 2", map[string]string{schema.MetadataKey: "1"}, v2, "", "schema has 44 columns, want 41 (schema version 1)"},
		{"unknown version", map[string]string{schema.MetadataKey: "8"}, v2, "", `schema version "8" is unknown (this trajflow reads versions 1, 2, 3, 4, 5, 6, 7)`},
		{"not ours", nil, arrow.NewSchema(v2.Fields()[:3], nil), "", "schema has 3 columns, want 55 (schema version 7)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := schema.FileVersion(tt.meta, tt.s)
			if got != tt.want || (err == nil) != (tt.wantErr == "") || (err != nil && err.Error() != tt.wantErr) {
				t.Errorf("FileVersion = %q, %v; want %q, %q", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

// Version 1's light columns are the current ones less gen_tokens,
// total_tokens, turn_gen_tokens, prompt_tokens_dropped and invalid_actions, with the same names and types: readers of light columns
// read both versions.
func TestV1LightColumns(t *testing.T) {
	v1 := schema.ForVersion(schema.VersionV1)
	for _, name := range schema.LightColumns() {
		cur := schema.Schema().Field(schema.Schema().FieldIndices(name)[0])
		idx := v1.FieldIndices(name)
		if name == "gen_tokens" || name == "total_tokens" || name == "turn_gen_tokens" || name == "prompt_tokens_dropped" || name == "invalid_actions" || v4Only[name] {
			if len(idx) != 0 {
				t.Errorf("v1 has %s", name)
			}
			continue
		}
		if len(idx) != 1 || !arrow.TypeEqual(v1.Field(idx[0]).Type, cur.Type) {
			t.Errorf("v1 column %s differs from the current one (%v)", name, idx)
		}
	}
	if err := schema.CheckVersion(schema.Schema(), schema.Version); err != nil {
		t.Error(err)
	}
	// Version 6 is the current schema less routed_experts.
	var v6 []arrow.Field
	for _, f := range schema.Schema().Fields() {
		if !v7Only[f.Name] {
			v6 = append(v6, f)
		}
	}
	if !schema.ForVersion(schema.VersionV6).Equal(arrow.NewSchema(v6, nil)) {
		t.Errorf("v6 schema is not the current one less routed_experts:\n%v", schema.ForVersion(schema.VersionV6))
	}
	// Version 5 is version 6 less segments.
	var v5 []arrow.Field
	for _, f := range v6 {
		if !v6Only[f.Name] {
			v5 = append(v5, f)
		}
	}
	if !schema.ForVersion(schema.VersionV5).Equal(arrow.NewSchema(v5, nil)) {
		t.Errorf("v5 schema is not the current one less segments:\n%v", schema.ForVersion(schema.VersionV5))
	}
	// Version 4 is version 5 with the training view's counts required.
	var v4 []arrow.Field
	for _, f := range v5 {
		switch f.Name {
		case "env_tokens", "gen_tokens", "total_tokens":
			if !f.Nullable {
				t.Errorf("%s is required in the current schema", f.Name)
			}
			f.Nullable = false
		}
		v4 = append(v4, f)
	}
	if !schema.ForVersion(schema.VersionV4).Equal(arrow.NewSchema(v4, nil)) {
		t.Errorf("v4 schema is not the current one with the counts required:\n%v", schema.ForVersion(schema.VersionV4))
	}
	// Version 3 is version 4 less the policy and sampling columns.
	var v3 []arrow.Field
	for _, f := range v4 {
		if !v4Only[f.Name] {
			v3 = append(v3, f)
		}
	}
	if !schema.ForVersion(schema.VersionV3).Equal(arrow.NewSchema(v3, nil)) {
		t.Errorf("v3 schema is not the current one less the policy and sampling columns:\n%v", schema.ForVersion(schema.VersionV3))
	}
	// Version 2 is version 3 less prompt_tokens_dropped,
	// invalid_actions and messages.parts.
	v2 := schema.ForVersion(schema.VersionV2)
	var cur []arrow.Field
	for _, f := range v3 {
		switch f.Name {
		case "prompt_tokens_dropped", "invalid_actions":
			continue
		case "messages":
			st := f.Type.(*arrow.ListType).Elem().(*arrow.StructType)
			fs := st.Fields()
			if last := fs[len(fs)-1]; last.Name != "parts" {
				t.Fatalf("the last messages field is %s", last.Name)
			}
			f.Type = schema.ListOf(arrow.StructOf(fs[:len(fs)-1]...))
		}
		cur = append(cur, f)
	}
	if !v2.Equal(arrow.NewSchema(cur, nil)) {
		t.Errorf("v2 schema is not the current one less prompt_tokens_dropped and messages.parts:\n%v", v2)
	}
	if got := strings.Join(schema.Versions(), ","); got != "1,2,3,4,5,6,7" {
		t.Errorf("Versions = %s", got)
	}
}

// v7Only are the columns version 7 added.
var v7Only = map[string]bool{"routed_experts": true}

// v6Only are the columns version 6 added.
var v6Only = map[string]bool{"segments": true}

// v4Only are the columns version 4 added.
var v4Only = map[string]bool{"admitted_version": true, "min_policy_version": true, "temperature": true,
	"top_p": true, "top_k": true, "max_tokens": true, "policy_versions": true}
