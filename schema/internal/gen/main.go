// Command gen writes SCHEMA.md's column tables from schema's column tables
// (schema.Columns, schema.MessageFields, schema.StepColumns) and its
// metadata keys (schema.MetadataKeys). Each table sits between the marker
// comments
//
//	<!-- generated: NAME (go generate ./schema) -->
//	<!-- end generated: NAME -->
//
// and everything outside the markers is left as it is. Run it with
// `go generate ./schema`; TestSchemaMDIsGenerated fails when SCHEMA.md
// differs from what it would write.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/trajflow/trajflow/schema"
)

func main() {
	path := flag.String("o", "SCHEMA.md", "the Markdown file to update")
	flag.Parse()
	old, err := os.ReadFile(*path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
	out, err := render(old)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gen: %s: %v\n", *path, err)
		os.Exit(1)
	}
	if !bytes.Equal(out, old) {
		if err := os.WriteFile(*path, out, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "gen:", err)
			os.Exit(1)
		}
	}
}

// tables are the generated blocks, by name, in the order SCHEMA.md holds
// them.
func tables() []struct{ name, text string } {
	cols := schema.Columns()
	return []struct{ name, text string }{
		{"keys", rolloutTable(cols, 0, schema.ColEnv)},
		{"light", rolloutTable(cols, schema.ColEnv, schema.ColError)},
		{"heavy", rolloutTable(cols, schema.ColError, schema.NumColumns)},
		{"messages", fieldTable(schema.MessageFields())},
		{"steps", stepTable(schema.StepColumns())},
		{"metadata", metadataTable()},
	}
}

func begin(name string) string { return "<!-- generated: " + name + " (go generate ./schema) -->\n" }
func end(name string) string   { return "<!-- end generated: " + name + " -->\n" }

// render returns md with every generated block rewritten. A block whose
// markers are missing or out of order is an error.
func render(md []byte) ([]byte, error) {
	s := string(md)
	for _, tb := range tables() {
		b, e := begin(tb.name), end(tb.name)
		i := strings.Index(s, b)
		if i < 0 || strings.Count(s, b) != 1 {
			return nil, fmt.Errorf("want one line %q", strings.TrimSpace(b))
		}
		j := strings.Index(s[i:], e)
		if j < 0 || strings.Count(s, e) != 1 {
			return nil, fmt.Errorf("want one line %q after %q", strings.TrimSpace(e), strings.TrimSpace(b))
		}
		s = s[:i+len(b)] + tb.text + s[i+j:]
	}
	return []byte(s), nil
}

// arrowType is c's Arrow type as the tables spell it.
func arrowType(c schema.Column) string {
	s := c.ArrowType()
	if c.Nullable {
		s += ", **nullable**"
	}
	return s
}

func rolloutTable(cols []schema.Column, from, to int) string {
	var b strings.Builder
	b.WriteString("| column | Arrow type | Parquet type | meaning |\n|---|---|---|---|\n")
	for i, c := range cols[from:to] {
		at, pt := arrowType(c), c.ParquetType()
		if from+i == schema.ColMessages {
			// Its fields have a table of their own.
			at, pt = "list<struct<…>> (below)", "LIST of group (below)"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", c.Name, at, pt, c.Doc)
	}
	return b.String()
}

func fieldTable(cols []schema.Column) string {
	var b strings.Builder
	b.WriteString("| field | Arrow type | Parquet type | meaning |\n|---|---|---|---|\n")
	for _, c := range cols {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", c.Name, arrowType(c), c.ParquetType(), c.Doc)
	}
	return b.String()
}

// stepTable lists the step columns; consecutive columns with the same doc
// share a row, whose types are "as in the trajectory table" when they
// differ.
func stepTable(cols []schema.Column) string {
	var b strings.Builder
	b.WriteString("| column | Arrow type | Parquet type | meaning |\n|---|---|---|---|\n")
	for i := 0; i < len(cols); {
		j := i + 1
		for j < len(cols) && cols[j].Doc == cols[i].Doc {
			j++
		}
		names := make([]string, 0, j-i)
		at, pt := arrowType(cols[i]), cols[i].ParquetType()
		for _, c := range cols[i:j] {
			names = append(names, "`"+c.Name+"`")
			if arrowType(c) != at || c.ParquetType() != pt {
				at, pt = "as in the trajectory table", "as in the trajectory table"
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", strings.Join(names, ", "), at, pt, cols[i].Doc)
		i = j
	}
	return b.String()
}

func metadataTable() string {
	var b strings.Builder
	b.WriteString("| key | value |\n|---|---|\n")
	for _, k := range schema.MetadataKeys() {
		fmt.Fprintf(&b, "| `%s` | %s |\n", k.Key, k.Doc)
	}
	return b.String()
}
