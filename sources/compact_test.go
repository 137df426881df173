package sources

import (
	"bytes"
	"encoding/json"
	"testing"
)

// compactRow gives json.Compact's result for every valid row, whether or
// not it takes the copy-as-is path.
func FuzzCompactRow(f *testing.F) {
	for _, s := range []string{
		`{"id":1,"question":"Task 1: what is 3 + 5?","expected_answer":"8"}`,
		`{ "a" : [1, 2] }`,
		`{"s":"tab\there \"quoted\" \\ back"}`,
		"{\"a\":\"x\"}\r",
		`{"a":"\u00e9 \" "}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, row []byte) {
		if !json.Valid(row) {
			return
		}
		var want bytes.Buffer
		if err := json.Compact(&want, row); err != nil {
			t.Fatalf("json.Compact(%q): %v", row, err)
		}
		got, err := compactRow(row)
		if err != nil || !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("compactRow(%q) = %q, %v; want %q", row, got, err, want.Bytes())
		}
		if len(row) > 0 && len(got) > 0 && &got[0] == &row[0] {
			t.Fatal("compactRow returned the input's memory")
		}
	})
}

// BenchmarkParseRow is one short compact row (the overhead benchmark's
// tasks) turned into a task.
func BenchmarkParseRow(b *testing.B) {
	row := []byte(`{"expected_answer":"8","id":17,"question":"Task 17: what is 3 + 5?"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parseRow("tasks.jsonl:18", 17, row); err != nil {
			b.Fatal(err)
		}
	}
}
