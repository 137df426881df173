package main

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/schema"
)

const schemaMD = "../../../SCHEMA.md"

// SCHEMA.md's column tables are what the generator writes from schema's
// tables: a column changed in one and not the other fails here.
func TestSchemaMDIsGenerated(t *testing.T) {
	old, err := os.ReadFile(schemaMD)
	if err != nil {
		t.Fatal(err)
	}
	want, err := render(old)
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != string(old) {
		t.Errorf("SCHEMA.md's generated tables are stale: run go generate ./schema\n%s", firstDiff(string(old), string(want)))
	}
	// Every column is in the document, in a table row of its own or shared.
	for _, c := range append(append(schema.Columns(), schema.MessageFields()...), schema.StepColumns()...) {
		if !strings.Contains(string(old), "`"+c.Name+"`") {
			t.Errorf("SCHEMA.md does not name %s", c.Name)
		}
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

// A changed doc line, a missing marker and a duplicated one are caught.
func TestRender(t *testing.T) {
	old, err := os.ReadFile(schemaMD)
	if err != nil {
		t.Fatal(err)
	}
	doc := schema.Columns()[schema.ColReward].Doc
	stale := strings.Replace(string(old), doc, "something else", 1)
	if got, err := render([]byte(stale)); err != nil || string(got) != string(old) {
		t.Errorf("render does not restore a changed doc line (err %v)", err)
	}
	for _, bad := range []string{
		strings.Replace(string(old), begin("light"), "", 1),
		strings.Replace(string(old), end("steps"), "", 1),
		string(old) + begin("keys"),
	} {
		if _, err := render([]byte(bad)); err == nil {
			t.Error("render accepts a document with a missing or repeated marker")
		}
	}
}
