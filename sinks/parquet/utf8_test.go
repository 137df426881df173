package parquet_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/pipeline/pipelinetest"
	"github.com/trajflow/trajflow/readback"
	pqsink "github.com/trajflow/trajflow/sinks/parquet"
	"github.com/trajflow/trajflow/stages/collate"
)

// hostile are strings readers choke on: invalid UTF-8 (lone continuation
// bytes, truncated sequences, overlong encodings, UTF-16 surrogates encoded
// as UTF-8, bytes past U+10FFFF), NULs, control characters, a BOM.
var hostile = []string{
	"\xff", "\x80abc", "caf\xe9", "\xc3", "\xe2\x82", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80",
	"\x00", "a\x00b", "\x1b[31m", "\ufeff", "\ufffd", "日本語", "\u2028", strings.Repeat("\xfe", 100),
}

// writeHostile writes one group whose every string field holds s (and the
// task's raw JSON holds it in a string) and reads it back with Arrow's
// Parquet reader.
func writeHostile(t testing.TB, ss []string) {
	t.Helper()
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer alloc.AssertSize(t, 0)
	dir := t.TempDir()
	w, err := pqsink.New(dir, pqsink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	grp := pipelinetest.Group(0, len(ss), 16)
	for i, r := range grp.Rollouts {
		s := ss[i]
		task := *r.Task
		task.Raw = json.RawMessage(`{"q": "` + s + `"}`)
		r.Task = &task
		r.Env, r.Model, r.Error, r.ErrorClass, r.FinishReason, r.FilterReason = s, s, s, s, s, s
		r.Metrics = map[string]float64{s: 1}
		r.Messages = append(r.Messages, pipeline.Message{Role: s, Content: s, ToolCallID: s, Name: s,
			ToolCalls: []pipeline.ToolCall{{ID: s, Type: s, Name: s, Arguments: s}}, Turn: 1})
	}
	c := collate.New(alloc, 64)
	defer c.Release()
	rec := c.Add(grp)
	if rec == nil {
		rec = c.Flush()
	}
	if err := w.Write(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	rec.Release()
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, err := readback.File(filepath.Join(dir, "part-00000.parquet"))
	if err != nil {
		t.Fatalf("Arrow's reader: %v", err)
	}
	for i, r := range got {
		want := strings.ToValidUTF8(ss[i], "\uFFFD")
		m := r.Messages[len(r.Messages)-1]
		fields := []string{r.Env, r.Model, r.Error, r.ErrorClass, r.FinishReason, r.FilterReason,
			m.Role, m.Content, m.ToolCallID, m.Name, m.ToolCalls[0].ID, m.ToolCalls[0].Type, m.ToolCalls[0].Name, m.ToolCalls[0].Arguments}
		for k := range r.Metrics {
			fields = append(fields, k)
		}
		for j, f := range fields {
			if f != want {
				t.Errorf("row %d field %d = %q, want %q", i, j, f, want)
			}
		}
		if raw := string(r.Task.Raw); !utf8.ValidString(raw) || raw != `{"q": "`+want+`"}` {
			t.Errorf("row %d task = %q", i, raw)
		}
	}
}

// Every string column of every file is valid UTF-8: hostile strings in
// every field come back from Arrow's reader with each run of invalid
// bytes replaced by U+FFFD, and valid ones unchanged.
func TestHostileStringsRoundTrip(t *testing.T) {
	writeHostile(t, hostile)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		ss := make([]string, 8)
		for i := range ss {
			b := make([]byte, rng.IntN(40))
			for j := range b {
				b[j] = byte(rng.IntN(256))
			}
			ss[i] = string(b)
		}
		writeHostile(t, ss)
	}
}

func FuzzHostileStrings(f *testing.F) {
	for i := 0; i+1 < len(hostile); i += 2 {
		f.Add(hostile[i], hostile[i+1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		writeHostile(t, []string{a, b, a + b})
	})
}
