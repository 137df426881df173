package schema

import (
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"strings"
	"testing"
	"unicode"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
)

// snake turns a Go identifier into the column name it stands for:
// TaskIndex → task_index, TrajID → traj_id, PromptTokenIDs →
// prompt_token_ids, GenMS → gen_ms.
func snake(name string) string {
	r := []rune(name)
	var b strings.Builder
	for i, c := range r {
		if unicode.IsUpper(c) && i > 0 {
			prevLower := unicode.IsLower(r[i-1])
			// An upper-case letter after an acronym that is followed by a
			// lower-case letter other than the plural s starts a word.
			nextLower := i+1 < len(r) && unicode.IsLower(r[i+1]) && !(r[i+1] == 's' && i+2 == len(r))
			if prevLower || (unicode.IsUpper(r[i-1]) && nextLower) {
				b.WriteByte('_')
			}
		}
		b.WriteRune(unicode.ToLower(c))
	}
	return b.String()
}

func TestSnake(t *testing.T) {
	for in, want := range map[string]string{
		"TaskIndex": "task_index", "TrajID": "traj_id", "PromptTokenIDs": "prompt_token_ids",
		"GenMS": "gen_ms", "ToolCallID": "tool_call_id", "ImageURL": "image_url", "Env": "env",
	} {
		if got := snake(in); got != want {
			t.Errorf("snake(%s) = %s, want %s", in, got, want)
		}
	}
}

// constBlock returns the names of the const block of schema.go whose first
// name is first, in order.
func constBlock(t *testing.T, first string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "schema.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST || len(g.Specs) == 0 || g.Specs[0].(*ast.ValueSpec).Names[0].Name != first {
			continue
		}
		var names []string
		for _, s := range g.Specs {
			names = append(names, s.(*ast.ValueSpec).Names[0].Name)
		}
		return names
	}
	t.Fatalf("no const block starting with %s in schema.go", first)
	return nil
}

func structFields(t arrow.DataType) []arrow.Field {
	return t.(*arrow.ListType).Elem().(*arrow.StructType).Fields()
}

// The index constants name the columns and fields they index: ColTaskIndex
// is task_index, MsgTokenStart is messages.token_start.
func TestIndexConstantsMatchTheTable(t *testing.T) {
	names := func(fs []arrow.Field) []string {
		out := make([]string, len(fs))
		for i, f := range fs {
			out[i] = f.Name
		}
		return out
	}
	for _, tt := range []struct {
		first, prefix string
		want          []string
	}{
		{"ColRunID", "Col", append(names(fields(columns)), "num_columns")},
		{"MsgRole", "Msg", names(fields(messageFields))},
		{"PartType", "Part", names(structFields(columns[ColMessages].Type.(*arrow.ListType).Elem().(*arrow.StructType).Field(MsgParts).Type))},
		{"ToolID", "Tool", names(structFields(messageFields[MsgToolCalls].Type))},
		{"MetricName", "Metric", names(structFields(columns[ColMetrics].Type))},
		{"SpanVersion", "Span", names(structFields(columns[ColPolicyVersions].Type))},
		{"SegmentMessage", "Segment", names(structFields(columns[ColSegments].Type))},
	} {
		var got []string
		for _, n := range constBlock(t, tt.first) {
			got = append(got, snake(strings.TrimPrefix(n, tt.prefix)))
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s… constants name %v, the table %v", tt.first, got, tt.want)
		}
	}
	if NumColumns != len(columns) {
		t.Errorf("NumColumns = %d, the table has %d columns", NumColumns, len(columns))
	}
}

// Every column and field has a doc line, a unique name, a type SCHEMA.md
// can spell, and the Arrow schemas are the tables'.
func TestTables(t *testing.T) {
	for name, cols := range map[string][]Column{"columns": columns, "messageFields": messageFields, "stepColumns": stepColumns} {
		seen := map[string]bool{}
		for _, c := range cols {
			if c.Name == "" || c.Doc == "" || strings.Contains(c.Doc, "\n") || strings.Contains(c.Doc, " | ") {
				t.Errorf("%s: column %q needs a name and a one-line doc without a table separator", name, c.Name)
			}
			if seen[c.Name] {
				t.Errorf("%s: column %q appears twice", name, c.Name)
			}
			seen[c.Name] = true
			if c.ParquetType() == "" || c.ArrowType() == "" {
				t.Errorf("%s: column %q has no type", name, c.Name)
			}
		}
	}
	// Every rollout column is required but the sampling parameters, null
	// where a request did not set them, the training view's counts, null
	// where unknown, and routed_experts, null where no engine sent routes.
	nullable := map[string]bool{"temperature": true, "top_p": true, "top_k": true, "max_tokens": true,
		"env_tokens": true, "gen_tokens": true, "total_tokens": true, "routed_experts": true}
	for _, c := range columns {
		if c.Nullable != nullable[c.Name] {
			t.Errorf("rollout column %q: nullable %v; only the sampling parameters, the training view's counts and routed_experts are nullable", c.Name, c.Nullable)
		}
	}
	if !Schema().Equal(arrow.NewSchema(fields(Columns()), nil)) || !StepSchema().Equal(arrow.NewSchema(fields(StepColumns()), nil)) {
		t.Error("the Arrow schemas are not the tables'")
	}
	if got := Columns()[ColMessages].Type; !arrow.TypeEqual(got, ListOf(arrow.StructOf(fields(MessageFields())...))) {
		t.Errorf("messages is %s, not a list of MessageFields", got)
	}
	if got, want := Columns()[ColLossMask].ParquetType(), "LIST of INT32 (INT(8, signed))"; got != want {
		t.Errorf("loss_mask's Parquet type = %q, want %q", got, want)
	}
	if got, want := Columns()[ColMetrics].ArrowType(), "list<struct<name: utf8, value: float64>>"; got != want {
		t.Errorf("metrics' Arrow type = %q, want %q", got, want)
	}
}

// StepRow has one field per step column, in order, named after it, of
// the column's type; StepRows fills each field from its own column.
func TestStepRowMatchesTheTable(t *testing.T) {
	rt := reflect.TypeOf(StepRow{})
	if rt.NumField() != len(stepColumns) {
		t.Fatalf("StepRow has %d fields, the step table %d columns", rt.NumField(), len(stepColumns))
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, StepSchema())
	defer b.Release()
	for i, c := range stepColumns {
		f := rt.Field(i)
		if snake(f.Name) != c.Name {
			t.Errorf("StepRow field %d is %s, the column %s", i, f.Name, c.Name)
		}
		if (f.Type.Kind() == reflect.Pointer) != c.Nullable {
			t.Errorf("StepRow.%s is %s; column %s nullable: %v", f.Name, f.Type, c.Name, c.Nullable)
		}
		// Column i holds the value i+1 (as its type has it), so that a
		// decoder reading another column gets another value.
		v := int64(i + 1)
		switch fb := b.Field(i).(type) {
		case *array.StringBuilder:
			fb.Append(c.Name)
		case *array.Int64Builder:
			fb.Append(v)
		case *array.Int32Builder:
			fb.Append(int32(v))
		case *array.Float64Builder:
			fb.Append(float64(v))
		case *array.BooleanBuilder:
			fb.Append(true)
		case *array.ListBuilder:
			fb.Append(true)
			switch vb := fb.ValueBuilder().(type) {
			case *array.Int32Builder:
				vb.Append(int32(v))
			case *array.Int8Builder:
				vb.Append(int8(v))
			case *array.Float32Builder:
				vb.Append(float32(v))
			default:
				t.Fatalf("column %s: no test value for %T", c.Name, vb)
			}
		default:
			t.Fatalf("column %s: no test value for %T", c.Name, fb)
		}
	}
	rec := b.NewRecord()
	defer rec.Release()
	rows, err := StepRows(rec)
	if err != nil {
		t.Fatal(err)
	}
	got := reflect.ValueOf(rows[0])
	for i, c := range stepColumns {
		fv := got.Field(i)
		if fv.Kind() == reflect.Pointer {
			fv = fv.Elem()
		}
		want := reflect.New(fv.Type()).Elem()
		one := func(v reflect.Value) {
			switch v.Kind() {
			case reflect.String:
				v.SetString(c.Name)
			case reflect.Bool:
				v.SetBool(true)
			case reflect.Int8, reflect.Int32, reflect.Int64:
				v.SetInt(int64(i + 1))
			case reflect.Float32, reflect.Float64:
				v.SetFloat(float64(i + 1))
			}
		}
		if want.Kind() == reflect.Slice {
			want.Set(reflect.MakeSlice(want.Type(), 1, 1))
			one(want.Index(0))
		} else {
			one(want)
		}
		if !reflect.DeepEqual(fv.Interface(), want.Interface()) {
			t.Errorf("StepRow.%s = %v, want column %s's %v", rt.Field(i).Name, fv, c.Name, want)
		}
	}
}
