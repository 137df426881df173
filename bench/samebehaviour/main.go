// Command samebehaviour prints an output file of trajflow in a form that two
// runs of the same work can be compared in as text, with the values that
// depend on the clock taken out. bench/samebehaviour.sh runs it on every
// file of two output trees (one binary's and another's) and diffs the
// results.
//
//	samebehaviour table FILE   a Parquet file, or an Arrow IPC stream or file
//	samebehaviour json FILE    a JSON or JSONL file
//
// table reads the file with Arrow's own readers (parquet/pqarrow, arrow/ipc),
// independently of the writer trajflow uses (parquet-go), and prints the
// key-value metadata sorted by key, the schema, then one line per row, the
// lines sorted (the order of rows in a file follows the order groups
// finished in). A row prints every column as name=value; floats are printed
// to 9 significant digits; the timing columns (timingColumns) print as _.
//
// json prints the file's text with the value of each timing key
// (timingKeys) replaced by 0, wherever it occurs, and every number written
// with a fraction or an exponent outside a string printed to 9 significant
// digits, as table prints floats: metrics.json's means and standard
// deviations are sums over the rows in the order they finished in, which
// moves their last bits from run to run. Nothing else changes, so every
// other byte is compared as written.
//
// SAMEBEHAVIOUR_SKIP, a comma-separated list of names, leaves those
// columns and key-value metadata keys out of table's print (said at its
// top): for a comparison across a change meant to add a column, such as a
// schema version's, so that the rest is still compared.
//
// The rules are meant to be minimal: a column or key is blanked only
// because its value is a reading of the clock. Add to them only what a run
// of one binary against itself shows to vary.
package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/ipc"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/apache/arrow/go/v17/parquet/file"
	"github.com/apache/arrow/go/v17/parquet/pqarrow"
)

// timingColumns are the row columns that measure time (SCHEMA.md: gen_ms,
// env_ms, total_ms); they are printed as _.
var timingColumns = map[string]bool{"gen_ms": true, "env_ms": true, "total_ms": true}

// timingKeys are the JSON keys whose values are readings of the clock:
// created_at, a JSONL line's response start in Unix seconds (docs/output.md).
var timingKeys = []string{"created_at"}

// skipped are the names SAMEBEHAVIOUR_SKIP lists.
var skipped = map[string]bool{}

func main() {
	for _, name := range strings.Split(os.Getenv("SAMEBEHAVIOUR_SKIP"), ",") {
		if name = strings.TrimSpace(name); name != "" {
			skipped[name] = true
		}
	}
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: samebehaviour table|json FILE")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "table":
		err = dumpTable(os.Stdout, os.Args[2])
	case "json":
		err = dumpJSON(os.Stdout, os.Args[2])
	default:
		err = fmt.Errorf("unknown mode %q (table or json)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "samebehaviour:", err)
		os.Exit(1)
	}
}

// timingValue matches a timing key and its value (a number, a string or
// null), keeping the text around the value.
var timingValue = regexp.MustCompile(`("(?:` + strings.Join(quoteAll(timingKeys), "|") +
	`)"\s*:\s*)(-?[0-9][0-9.eE+-]*|"(?:[^"\\]|\\.)*"|null)`)

func quoteAll(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = regexp.QuoteMeta(k)
	}
	return out
}

func dumpJSON(w io.Writer, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	_, err = w.Write(roundFloats(timingValue.ReplaceAll(b, []byte("${1}0"))))
	return err
}

// roundFloats rewrites each JSON number outside a string that has a
// fraction or an exponent to 9 significant digits.
func roundFloats(b []byte) []byte {
	out := make([]byte, 0, len(b))
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case inString:
			out = append(out, c)
			if c == '\\' && i+1 < len(b) {
				i++
				out = append(out, b[i])
			} else if c == '"' {
				inString = false
			}
		case c == '"':
			inString = true
			out = append(out, c)
		case c == '-' || (c >= '0' && c <= '9'):
			j := i
			for j < len(b) && strings.IndexByte("0123456789.eE+-", b[j]) >= 0 {
				j++
			}
			num := string(b[i:j])
			if v, err := strconv.ParseFloat(num, 64); err == nil && strings.ContainsAny(num, ".eE") {
				num = float(v)
			}
			out = append(out, num...)
			i = j - 1
		default:
			out = append(out, c)
		}
	}
	return out
}

func dumpTable(w io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }() // best effort: the file was only read
	magic := make([]byte, 4)
	if _, err := io.ReadFull(f, magic); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if string(magic) == "PAR1" {
		return dumpParquet(w, f)
	}
	return dumpArrow(w, f)
}

func dumpParquet(w io.Writer, f *os.File) error {
	pf, err := file.NewParquetReader(f)
	if err != nil {
		return err
	}
	defer func() { _ = pf.Close() }() // best effort: the file was only read
	var meta []string
	kv := pf.MetaData().KeyValueMetadata()
	for i, k := range kv.Keys() {
		if !skipped[k] {
			meta = append(meta, fmt.Sprintf("meta %s=%s", k, kv.Values()[i]))
		}
	}
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 4096}, memory.DefaultAllocator)
	if err != nil {
		return err
	}
	rr, err := fr.GetRecordReader(context.Background(), nil, nil)
	if err != nil {
		return err
	}
	defer rr.Release()
	return dumpRecords(w, meta, rr)
}

func dumpArrow(w io.Writer, f *os.File) error {
	// An IPC file starts with ARROW1; anything else is read as a stream.
	head := make([]byte, 6)
	if _, err := io.ReadFull(f, head); err == nil && string(head) == "ARROW1" {
		fr, err := ipc.NewFileReader(f)
		if err != nil {
			return err
		}
		defer func() { _ = fr.Close() }() // best effort: the file was only read
		var rows []string
		for i := 0; i < fr.NumRecords(); i++ {
			rec, err := fr.Record(i)
			if err != nil {
				return err
			}
			rows = appendRows(rows, rec)
		}
		return printTable(w, schemaMeta(fr.Schema()), fr.Schema(), rows)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	sr, err := ipc.NewReader(f)
	if err != nil {
		return err
	}
	defer sr.Release()
	return dumpRecords(w, schemaMeta(sr.Schema()), sr)
}

func schemaMeta(s *arrow.Schema) []string {
	var meta []string
	md := s.Metadata()
	for i, k := range md.Keys() {
		if !skipped[k] {
			meta = append(meta, fmt.Sprintf("meta %s=%s", k, md.Values()[i]))
		}
	}
	return meta
}

type recordReader interface {
	Schema() *arrow.Schema
	Next() bool
	Record() arrow.Record
	Err() error
}

func dumpRecords(w io.Writer, meta []string, rr recordReader) error {
	var rows []string
	for rr.Next() {
		rows = appendRows(rows, rr.Record())
	}
	if err := rr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return printTable(w, meta, rr.Schema(), rows)
}

func printTable(w io.Writer, meta []string, s *arrow.Schema, rows []string) error {
	sort.Strings(meta)
	sort.Strings(rows)
	var b strings.Builder
	var skip []string
	for name := range skipped {
		skip = append(skip, name)
	}
	sort.Strings(skip)
	if len(skip) > 0 {
		fmt.Fprintf(&b, "skipped (SAMEBEHAVIOUR_SKIP) %s\n", strings.Join(skip, ","))
	}
	for _, m := range meta {
		b.WriteString(m)
		b.WriteByte('\n')
	}
	for _, fl := range s.Fields() {
		if skipped[fl.Name] {
			continue
		}
		fmt.Fprintf(&b, "column %s %s nullable=%t\n", fl.Name, fl.Type, fl.Nullable)
	}
	fmt.Fprintf(&b, "rows %d\n", len(rows))
	for _, r := range rows {
		b.WriteString(r)
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func appendRows(rows []string, rec arrow.Record) []string {
	s := rec.Schema()
	for i := 0; i < int(rec.NumRows()); i++ {
		var b strings.Builder
		for c := 0; c < int(rec.NumCols()); c++ {
			name := s.Field(c).Name
			if skipped[name] {
				continue
			}
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(name)
			b.WriteByte('=')
			if timingColumns[name] {
				b.WriteByte('_')
				continue
			}
			writeValue(&b, rec.Column(c), i)
		}
		rows = append(rows, b.String())
	}
	return rows
}

func float(v float64) string { return strconv.FormatFloat(v, 'g', 9, 64) }

// writeValue prints row i of a: lists and structs recursively, strings
// quoted, floats to 9 digits, dictionaries as their values.
func writeValue(b *strings.Builder, a arrow.Array, i int) {
	if a.IsNull(i) {
		b.WriteString("null")
		return
	}
	switch a := a.(type) {
	case *array.Float64:
		b.WriteString(float(a.Value(i)))
	case *array.Float32:
		b.WriteString(float(float64(a.Value(i))))
	case *array.String:
		b.WriteString(strconv.Quote(a.Value(i)))
	case *array.LargeString:
		b.WriteString(strconv.Quote(a.Value(i)))
	case *array.Binary:
		b.WriteString(hex.EncodeToString(a.Value(i)))
	case array.ListLike:
		start, end := a.ValueOffsets(i)
		b.WriteByte('[')
		for j := start; j < end; j++ {
			if j > start {
				b.WriteByte(',')
			}
			writeValue(b, a.ListValues(), int(j))
		}
		b.WriteByte(']')
	case *array.Struct:
		st := a.DataType().(*arrow.StructType)
		b.WriteByte('{')
		for f := 0; f < a.NumField(); f++ {
			if f > 0 {
				b.WriteByte(',')
			}
			b.WriteString(st.Field(f).Name)
			b.WriteByte(':')
			writeValue(b, a.Field(f), i)
		}
		b.WriteByte('}')
	case *array.Dictionary:
		writeValue(b, a.Dictionary(), a.GetValueIndex(i))
	default:
		b.WriteString(a.ValueStr(i))
	}
}
