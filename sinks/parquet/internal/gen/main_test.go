package main

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"

	"github.com/trajflow/trajflow/schema"
)

const rowGen = "../../row_gen.go"

// row_gen.go is what the generator writes from schema's column tables: a
// column changed in the table and not regenerated fails here.
func TestRowsAreGenerated(t *testing.T) {
	old, err := os.ReadFile(rowGen)
	if err != nil {
		t.Fatal(err)
	}
	want, err := render()
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != string(old) {
		t.Errorf("sinks/parquet/row_gen.go is stale: run go generate ./sinks/parquet\n%s", firstDiff(string(old), string(want)))
	}
}

func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(al), len(bl)) {
		if al[i] != bl[i] {
			return "line " + strconv.Itoa(i+1) + ":\n have " + al[i] + "\n want " + bl[i]
		}
	}
	return "lengths differ"
}

func TestGoName(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"run_id", "RunID"},
		{"prompt_token_ids", "PromptTokenIDs"},
		{"gen_ms", "GenMS"},
		{"image_url", "ImageURL"},
		{"top_p", "TopP"},
		{"reward", "Reward"},
	} {
		if got := goName(tt.in); got != tt.want {
			t.Errorf("goName(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// A column of a type the row cannot hold is an error naming it, not a
// file that does not compile.
func TestUnsupportedTypes(t *testing.T) {
	for _, tt := range []struct {
		name string
		col  schema.Column
	}{
		{"nullable list of structs", schema.Column{Name: "a", Type: schema.ListOf(arrow.StructOf(arrow.Field{Name: "x", Type: arrow.PrimitiveTypes.Int32})), Nullable: true}},
		{"list of lists", schema.Column{Name: "b", Type: schema.ListOf(schema.ListOf(arrow.PrimitiveTypes.Int32))}},
		{"struct", schema.Column{Name: "c", Type: arrow.StructOf(arrow.Field{Name: "x", Type: arrow.PrimitiveTypes.Int32})}},
		{"uint16", schema.Column{Name: "d", Type: arrow.PrimitiveTypes.Uint16}},
	} {
		g := &gen{}
		if _, err := g.structType("x", "x.", "", []schema.Column{tt.col}); err == nil || !strings.Contains(err.Error(), tt.col.Name) {
			t.Errorf("%s: error %v, want one naming column %s", tt.name, err, tt.col.Name)
		}
	}
}

// A nullable string column reads through pointerAt, which the file then
// declares; without one it declares none (an unused function).
func TestNullableStringColumn(t *testing.T) {
	g := &gen{}
	cols := []schema.Column{
		{Name: "note", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "ok", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
	}
	decl, err := g.structType("x", "x.", "", cols)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(decl, "Note *string `parquet:\"note,optional\"`") || !strings.Contains(decl, "Ok *bool `parquet:\"ok,optional\"`") {
		t.Errorf("declaration:\n%s", decl)
	}
	conv, err := g.converter(cols)
	if err != nil {
		t.Fatal(err)
	}
	if !g.pointerAt || !strings.Contains(conv, "pointerAt(noteCol, noteCol.Value(i), i)") {
		t.Errorf("convert does not read the nullable string through pointerAt:\n%s", conv)
	}
	if strings.Contains(render0(t), "func pointerAt") {
		t.Error("row_gen.go declares pointerAt, which no column of the tables needs")
	}
}

func render0(t *testing.T) string {
	t.Helper()
	out, err := render()
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}
