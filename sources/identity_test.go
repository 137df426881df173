package sources

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

// A streamed file's identity covers what was read; Verify accepts the same
// file and one with rows appended, and refuses another file or the same
// path holding other bytes. A Parquet file is hashed whole.
func TestIdentity(t *testing.T) {
	var rows strings.Builder
	for i := range 20000 {
		fmt.Fprintf(&rows, `{"question": "q%d"}`+"\n", i)
	}
	path := writeFile(t, "tasks.jsonl", rows.String())
	r, err := Open(Config{Path: path, Limit: 3}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := r.Next(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	id := r.Identity()
	r.Close()
	if id.Path != path || id.Size != int64(rows.Len()) || id.Bytes == 0 || id.Bytes >= id.Size || len(id.SHA256) != 64 {
		t.Fatalf("identity after 3 rows of a large file: %+v", id)
	}
	if err := Verify(path, id); err != nil {
		t.Fatalf("same file: %v", err)
	}
	if err := os.WriteFile(path, []byte(rows.String()+`{"question": "more"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Verify(path, id); err != nil {
		t.Fatalf("appended file: %v", err)
	}
	other := writeFile(t, "other.jsonl", strings.Replace(rows.String(), "q1", "Q1", 1))
	if err := Verify(other, id); !errors.Is(err, ErrOtherInput) || !strings.Contains(err.Error(), other) {
		t.Fatalf("other file: %v", err)
	}
	short := writeFile(t, "short.jsonl", `{"question": "q0"}`+"\n")
	if err := Verify(short, id); !errors.Is(err, ErrOtherInput) {
		t.Fatalf("shorter file: %v", err)
	}

	pq := writeArrowParquet(t, 50, 10)
	pr, err := Open(Config{Path: pq}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	st, _ := os.Stat(pq)
	if pid := pr.Identity(); pid.Bytes != st.Size() || pid.Size != st.Size() || Verify(pq, pid) != nil {
		t.Fatalf("parquet identity %+v (size %d)", pid, st.Size())
	}
}

// Invalid UTF-8 in a JSONL row is replaced (each run of bad bytes by one
// U+FFFD) before the row is read, consistently in its fields and its raw
// JSON, and reported to OnInvalidUTF8.
func TestInvalidUTF8Replaced(t *testing.T) {
	path := writeFile(t, "t.jsonl", "{\"q\": \"ok\"}\n{\"q\": \"caf\xe9 \xff\xfe!\", \"x\": \"\xc3\"}\n")
	var where []string
	tasks, err := readAll(t, Config{Path: path}, Options{OnInvalidUTF8: func(w string) { where = append(where, w) }})
	if err != nil || len(tasks) != 2 {
		t.Fatalf("%d tasks, %v", len(tasks), err)
	}
	if len(where) != 1 || where[0] != path+":2" {
		t.Fatalf("reported %v", where)
	}
	got := tasks[1]
	if got.Fields["q"] != "caf\uFFFD \uFFFD!" || got.Fields["x"] != "\uFFFD" || string(got.Raw) != "{\"q\":\"caf\uFFFD \uFFFD!\",\"x\":\"\uFFFD\"}" {
		t.Fatalf("fields %q raw %q", got.Fields, got.Raw)
	}
}
