package serve

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/ipc"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/trajflow/trajflow/pipeline/pipelinetest"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/sinks/parquet"
	"github.com/trajflow/trajflow/stages/collate"
	"github.com/trajflow/trajflow/stages/generate"
)

// testStep commits groups of n rollouts of about payload bytes each to a
// data file as a run does, queues it, and makes one step of all of them.
// It returns the service, the step and its groups (the caller's to
// release).
func testStep(tb testing.TB, groups, n, payload int) (*service, *stepState, []*group) {
	tb.Helper()
	return testStepHeld(tb, groups, n, payload, nil)
}

// testStepHeld is testStep with the service's holdWrite set to hold.
func testStepHeld(tb testing.TB, groups, n, payload int, hold func(int64)) (*service, *stepState, []*group) {
	tb.Helper()
	out := tb.TempDir()
	data := filepath.Join(out, schema.DataDir)
	w, err := parquet.New(data, parquet.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	ctx := context.Background()
	c := collate.New(memory.NewGoAllocator(), 64)
	defer c.Release()
	write := func(rec arrow.Record) {
		if rec == nil {
			return
		}
		defer rec.Release()
		if err := w.Write(ctx, rec); err != nil {
			tb.Fatal(err)
		}
	}
	for g := range groups {
		write(c.Add(pipelinetest.Group(int64(g), n, payload)))
	}
	write(c.Flush())
	if err := w.Close(ctx); err != nil {
		tb.Fatal(err)
	}
	served := filepath.Join(out, schema.ServedDir)
	if err := os.MkdirAll(served, 0o755); err != nil {
		tb.Fatal(err)
	}
	s, err := newService(serviceConfig{Dir: served, MaxK: groups, Parquet: parquet.Options{FileRows: 1 << 40, FileBytes: 1 << 62}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.led.close)
	s.holdWrite = hold
	if err := s.loadFile(ctx, filepath.Join(data, schema.PartName(0))); err != nil {
		tb.Fatal(err)
	}
	g := granted(tb, s.led.wait(groups, 0, 0))
	if g.err != nil || len(g.fresh) != groups {
		tb.Fatalf("grant %+v", g)
	}
	st, err := s.makeStep(ctx, g.fresh, 0, 0)
	if err != nil {
		tb.Fatal(err)
	}
	return s, st, g.fresh
}

// discard is a ResponseWriter that keeps nothing.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(int)             {}

// buffer is a ResponseWriter that keeps the body.
type buffer struct {
	discard
	bytes.Buffer
}

func (b *buffer) Write(p []byte) (int, error) { return b.Buffer.Write(p) }

// asJSONL decodes an Arrow IPC stream into JSON lines.
func asJSONL(t *testing.T, stream []byte) string {
	t.Helper()
	r, err := ipc.NewReader(bytes.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	var out bytes.Buffer
	for r.Next() {
		if err := array.RecordToJSON(r.Record(), &out); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// A new step's first answer, encoded from the records its file was
// written from, holds exactly what an answer read back from the step's
// file holds, in every format.
func TestAnswerFromRecordsEqualsFile(t *testing.T) {
	s, st, fresh := testStep(t, 6, 4, 2000)
	defer func() {
		for _, g := range fresh {
			g.release()
		}
	}()
	h := &handler{s: s, pauseMode: generate.PauseAbort, logf: t.Logf}
	ctx := context.Background()
	for _, format := range []string{FormatArrow, FormatJSONL} {
		fromRecs, fromFile := &buffer{discard: discard{http.Header{}}}, &buffer{discard: discard{http.Header{}}}
		if err := h.answerStep(ctx, fromRecs, st.Step, format, fresh, nil); err != nil {
			t.Fatal(err)
		}
		if err := h.answerStep(ctx, fromFile, st.Step, format, nil, nil); err != nil {
			t.Fatal(err)
		}
		a, b := fromRecs.String(), fromFile.String()
		if format == FormatArrow {
			a, b = asJSONL(t, fromRecs.Bytes()), asJSONL(t, fromFile.Bytes())
		}
		if a != b || len(a) == 0 {
			t.Fatalf("%s: the answer from the records (%d bytes) differs from the file's (%d bytes)", format, len(a), len(b))
		}
		if rows := bytes.Count([]byte(a), []byte("\n")); rows != st.Rows {
			t.Fatalf("%s: %d rows, want %d", format, rows, st.Rows)
		}
	}
}

// BenchmarkAnswerStep: a step's Arrow or JSONL answer encoded from the
// records in memory (a new step) or from its part file read back (a step
// served again; before, every answer), and, for scale, making the step
// (writing its part file).
func BenchmarkAnswerStep(b *testing.B) {
	s, st, fresh := testStep(b, 64, 8, 8000)
	defer func() {
		for _, g := range fresh {
			g.release()
		}
	}()
	h := &handler{s: s, pauseMode: generate.PauseAbort, logf: b.Logf}
	ctx := context.Background()
	for _, format := range []string{FormatArrow, FormatJSONL} {
		for _, src := range []struct {
			name  string
			fresh []*group
		}{{"records", fresh}, {"file", nil}} {
			b.Run(format+"/"+src.name, func(b *testing.B) {
				for b.Loop() {
					if err := h.answerStep(ctx, &discard{http.Header{}}, st.Step, format, src.fresh, nil); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
	n := int64(1000)
	b.Run("write step file", func(b *testing.B) {
		for b.Loop() {
			n++
			if err := s.writeStep(ctx, n, fresh); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// A new step is answered once the state records it, in Arrow or JSONL
// from its records, while its folder is still being written; a Parquet
// answer, or one read back from the file, waits for the folder.
func TestAnswerBeforeStepFileWritten(t *testing.T) {
	release := make(chan struct{})
	s, st, fresh := testStepHeld(t, 3, 2, 64, func(int64) { <-release })
	h := &handler{s: s, pauseMode: generate.PauseAbort, logf: t.Logf}
	ctx := context.Background()
	if !s.led.steps[st.Step].LeasedUntil.After(time.Time{}) {
		t.Fatalf("step %d is not recorded before its answer", st.Step)
	}
	for _, format := range []string{FormatArrow, FormatJSONL} {
		var b buffer
		b.h = http.Header{}
		if err := h.answerStep(ctx, &b, st.Step, format, fresh, nil); err != nil || b.Len() == 0 {
			t.Fatalf("%s: %v (%d bytes) while the folder is held", format, err, b.Len())
		}
	}
	if _, err := os.Stat(s.stepFile(st.Step)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the step's file while its write is held: %v", err)
	}
	for _, g := range fresh {
		g.release() // the write holds its own references
	}
	parquetDone := make(chan error, 1)
	var pq buffer
	pq.h = http.Header{}
	go func() { parquetDone <- h.answerStep(ctx, &pq, st.Step, FormatParquet, nil, nil) }()
	close(release)
	if err := <-parquetDone; err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(s.stepFile(st.Step))
	if err != nil || !bytes.Equal(b, pq.Bytes()) {
		t.Fatalf("the Parquet answer (%d bytes) is not the step's file (%d bytes, %v)", pq.Len(), len(b), err)
	}
	if err := s.written(ctx, st.Step); err != nil {
		t.Fatal(err)
	}
}
