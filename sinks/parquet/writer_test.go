package parquet_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/trajflow/trajflow/schema"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/apache/arrow/go/v17/parquet"
	"github.com/apache/arrow/go/v17/parquet/file"
	"github.com/apache/arrow/go/v17/parquet/pqarrow"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/pipeline/pipelinetest"
	"github.com/trajflow/trajflow/readback"
	pqsink "github.com/trajflow/trajflow/sinks/parquet"
	"github.com/trajflow/trajflow/stages/collate"
)

// writeGroups collates groups of groupSize rollouts for tasks 0..groups-1
// into records of batchRows rows and writes them with w. It returns the
// rollouts in write order.
func writeGroups(t testing.TB, w *pqsink.Writer, alloc memory.Allocator, groups, groupSize, batchRows, payload int) []*pipeline.Rollout {
	t.Helper()
	ctx := context.Background()
	c := collate.New(alloc, batchRows)
	defer c.Release()
	var all []*pipeline.Rollout
	write := func(rec arrow.Record) {
		if rec == nil {
			return
		}
		defer rec.Release()
		if err := w.Write(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	for g := range groups {
		grp := pipelinetest.Group(int64(g), groupSize, payload)
		all = append(all, grp.Rollouts...)
		write(c.Add(grp))
	}
	write(c.Flush())
	return all
}

// readFile reads a Parquet file with Arrow's own reader (independent of
// parquet-go). cols selects top-level columns by name; nil reads all.
func readFile(t testing.TB, path string, alloc memory.Allocator, cols []string) (arrow.Table, map[string]string) {
	t.Helper()
	f, err := file.OpenParquetFile(path, false, file.WithReadProps(parquet.NewReaderProperties(alloc)))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	meta := map[string]string{}
	for _, kv := range f.MetaData().KeyValueMetadata() {
		if kv.Value != nil {
			meta[kv.Key] = *kv.Value
		}
	}
	r, err := pqarrow.NewFileReader(f, pqarrow.ArrowReadProperties{BatchSize: 1 << 16}, alloc)
	if err != nil {
		t.Fatal(err)
	}
	var leaves []int
	for _, name := range cols {
		i := f.MetaData().Schema.ColumnIndexByName(name)
		if i < 0 {
			t.Fatalf("%s: no leaf column %q", path, name)
		}
		leaves = append(leaves, i)
	}
	var tbl arrow.Table
	if leaves == nil {
		tbl, err = r.ReadTable(context.Background())
	} else {
		rgs := make([]int, f.NumRowGroups())
		for i := range rgs {
			rgs[i] = i
		}
		tbl, err = r.ReadRowGroups(context.Background(), leaves, rgs)
	}
	if err != nil {
		t.Fatal(err)
	}
	return tbl, meta
}

// readRollouts reads every row of a file back into rollouts.
func readRollouts(t testing.TB, path string, alloc memory.Allocator) ([]*pipeline.Rollout, map[string]string) {
	t.Helper()
	tbl, meta := readFile(t, path, alloc, nil)
	defer tbl.Release()
	if err := schema.Check(tbl.Schema()); err != nil {
		t.Fatalf("%s: schema read back: %v", path, err)
	}
	tr := array.NewTableReader(tbl, 1<<20)
	defer tr.Release()
	var out []*pipeline.Rollout
	for tr.Next() {
		rs, err := schema.Rollouts(tr.Record())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rs...)
	}
	return out, meta
}

func parts(t testing.TB, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "part-*.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(m)
	return m
}

func TestRoundTrip(t *testing.T) {
	for _, compression := range []string{"zstd", "snappy", "gzip", "none"} {
		t.Run(compression, func(t *testing.T) {
			alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer alloc.AssertSize(t, 0)
			dir := t.TempDir()
			var commits []string
			w, err := pqsink.New(dir, pqsink.Options{
				Compression:  compression,
				RowGroupRows: 7,
				Metadata:     map[string]string{schema.KeyRunID: "run-test", schema.KeyConfigFingerprint: "abc"},
				CommitMetadata: func() (map[string]string, error) {
					return map[string]string{"trajflow.at_commit": fmt.Sprint(len(commits) + 1)}, nil
				},
				OnCommit: func(path string, rows int) { commits = append(commits, fmt.Sprint(filepath.Base(path), ":", rows)) },
			})
			if err != nil {
				t.Fatal(err)
			}
			want := writeGroups(t, w, alloc, 6, 4, 8, 2048)
			if err := w.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(commits, []string{"part-00000.parquet:24"}) {
				t.Errorf("commits = %v", commits)
			}
			got, meta := readRollouts(t, filepath.Join(dir, "part-00000.parquet"), alloc)
			if len(got) != len(want) {
				t.Fatalf("read %d rows, want %d", len(got), len(want))
			}
			seen := map[[2]int64]bool{}
			for i := range want {
				k := [2]int64{got[i].Task.Index, int64(got[i].RolloutIndex)}
				if seen[k] {
					t.Errorf("duplicate key %v", k)
				}
				seen[k] = true
				if !reflect.DeepEqual(got[i], want[i]) {
					t.Errorf("row %d differs:\n got %+v\nwant %+v", i, got[i], want[i])
				}
			}
			if got[1].Messages[2].ToolCalls[0].Arguments != `{"expr":"1+0"}` || got[1].Metrics["acc"] != 1 {
				t.Errorf("tool call or metric lost: %+v", got[1])
			}
			// Schema v2: token ids are stored once, in the training view;
			// messages hold spans, from which the decoder restores them.
			checkSpans(t, got, want)
			viaPQRead, err := readback.File(filepath.Join(dir, "part-00000.parquet"))
			if err != nil {
				t.Fatal(err)
			}
			checkSpans(t, viaPQRead, want)
			for k, v := range map[string]string{
				schema.MetadataKey:          schema.Version,
				schema.KeyRunID:             "run-test",
				schema.KeyConfigFingerprint: "abc",
				"trajflow.at_commit":        "1",
			} {
				if meta[k] != v {
					t.Errorf("metadata %s = %q, want %q", k, meta[k], v)
				}
			}
		})
	}
}

// checkSpans compares the messages' spans and restored token ids and
// logprobs of rows read back with those written, and checks that every
// span is in use (the fixture's spans cover each sequence).
func checkSpans(t *testing.T, got, want []*pipeline.Rollout) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("read %d rows, want %d", len(got), len(want))
	}
	for i := range want {
		if len(got[i].Messages) != len(want[i].Messages) {
			t.Fatalf("row %d: %d messages, want %d", i, len(got[i].Messages), len(want[i].Messages))
		}
		for j, w := range want[i].Messages {
			g := got[i].Messages[j]
			if g.TokenStart != w.TokenStart || g.TokenEnd != w.TokenEnd || g.TokenEnd <= g.TokenStart {
				t.Errorf("row %d message %d: span [%d, %d), want [%d, %d), not empty", i, j, g.TokenStart, g.TokenEnd, w.TokenStart, w.TokenEnd)
			}
			if !slices.Equal(g.TokenIDs, w.TokenIDs) || !slices.Equal(g.Logprobs, w.Logprobs) || len(g.TokenIDs) == 0 {
				t.Errorf("row %d message %d: ids %v logprobs %v, want %v %v", i, j, g.TokenIDs, g.Logprobs, w.TokenIDs, w.Logprobs)
			}
		}
	}
}

// The file holds each token id once: messages have spans and no token
// columns of their own.
func TestNoTokenCopies(t *testing.T) {
	dir := t.TempDir()
	w, err := pqsink.New(dir, pqsink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	writeGroups(t, w, memory.NewGoAllocator(), 2, 4, 8, 512)
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	f, err := file.OpenParquetFile(filepath.Join(dir, "part-00000.parquet"), false)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var int32Lists []string
	s := f.MetaData().Schema
	for i := range s.NumColumns() {
		c := s.Column(i)
		if strings.HasPrefix(c.Path(), "messages.") && strings.Contains(c.Path(), "token") && c.MaxRepetitionLevel() > 1 {
			t.Errorf("messages column %s repeats: want spans, not token lists", c.Path())
		}
		if c.MaxRepetitionLevel() > 0 && c.PhysicalType() == parquet.Types.Int32 && !strings.HasPrefix(c.Path(), "messages.") {
			int32Lists = append(int32Lists, c.Path())
		}
	}
	// turn_gen_tokens holds counts (one per turn), not token ids;
	// policy_versions positions; segments indices, positions and turns;
	// routed_experts expert ids (int16).
	want := []string{"turn_gen_tokens.list.element", "prompt_token_ids.list.element", "response_token_ids.list.element", "loss_mask.list.element",
		"policy_versions.list.element.start", "policy_versions.list.element.end",
		"segments.list.element.message", "segments.list.element.token", "segments.list.element.turn",
		"routed_experts.list.element"}
	if !reflect.DeepEqual(int32Lists, want) {
		t.Errorf("int32 list columns %v, want %v", int32Lists, want)
	}
	for _, name := range []string{"messages.list.element.token_start", "messages.list.element.token_end", "gen_tokens", "total_tokens"} {
		if s.ColumnIndexByName(name) < 0 {
			t.Errorf("no column %s", name)
		}
	}
}

func TestLightColumnsOnly(t *testing.T) {
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer alloc.AssertSize(t, 0)
	dir := t.TempDir()
	w, err := pqsink.New(dir, pqsink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := writeGroups(t, w, alloc, 5, 4, 6, 8192)
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	tbl, _ := readFile(t, parts(t, dir)[0], alloc, []string{"task_index", "reward"})
	defer tbl.Release()
	if tbl.NumCols() != 2 || tbl.Schema().Field(0).Name != "task_index" || tbl.Schema().Field(1).Name != "reward" {
		t.Fatalf("schema = %v", tbl.Schema())
	}
	if int(tbl.NumRows()) != len(want) {
		t.Fatalf("rows = %d, want %d", tbl.NumRows(), len(want))
	}
	tr := array.NewTableReader(tbl, 1<<20)
	defer tr.Release()
	i := 0
	for tr.Next() {
		rec := tr.Record()
		ti := rec.Column(0).(*array.Int64)
		rw := rec.Column(1).(*array.Float64)
		for j := 0; j < int(rec.NumRows()); j, i = j+1, i+1 {
			if ti.Value(j) != want[i].Task.Index || rw.Value(j) != want[i].Reward {
				t.Errorf("row %d = (%d, %v), want (%d, %v)", i, ti.Value(j), rw.Value(j), want[i].Task.Index, want[i].Reward)
			}
		}
	}
}

func TestRotation(t *testing.T) {
	tests := []struct {
		name      string
		opts      pqsink.Options
		groups    int
		wantFiles int
	}{
		// Records of 8 rows (two groups of 4); FileRows 10 → 2 records a file.
		{"file rows", pqsink.Options{FileRows: 10}, 10, 3},
		{"file rows exact", pqsink.Options{FileRows: 8}, 10, 5},
		{"file bytes", pqsink.Options{FileBytes: 1}, 6, 3},
		{"one file", pqsink.Options{}, 10, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer alloc.AssertSize(t, 0)
			dir := t.TempDir()
			committed := 0
			tt.opts.OnCommit = func(string, int) { committed++ }
			w, err := pqsink.New(dir, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			want := writeGroups(t, w, alloc, tt.groups, 4, 8, 512)
			if err := w.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			files := parts(t, dir)
			if len(files) != tt.wantFiles || committed != tt.wantFiles {
				t.Fatalf("%d files, %d commits, want %d: %v", len(files), committed, tt.wantFiles, files)
			}
			var got []*pipeline.Rollout
			for _, f := range files {
				rs, _ := readRollouts(t, f, alloc)
				perTask := map[int64]int{}
				for _, r := range rs {
					perTask[r.Task.Index]++
				}
				for ti, n := range perTask {
					if n != 4 {
						t.Errorf("%s holds %d rows of task %d, want the whole group of 4", filepath.Base(f), n, ti)
					}
				}
				got = append(got, rs...)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("rows across files differ from rows written")
			}
		})
	}
}

func TestAbortKeepsCommitted(t *testing.T) {
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer alloc.AssertSize(t, 0)
	dir := t.TempDir()
	w, err := pqsink.New(dir, pqsink.Options{FileRows: 8})
	if err != nil {
		t.Fatal(err)
	}
	writeGroups(t, w, alloc, 3, 4, 8, 256) // one full file + 4 rows open
	entries := names(t, dir)
	if !slices.Equal(entries, []string{".part-00001.parquet.tmp", "part-00000.parquet"}) {
		t.Fatalf("before Abort: %v", entries)
	}
	w.Abort()
	if entries := names(t, dir); !slices.Equal(entries, []string{"part-00000.parquet"}) {
		t.Fatalf("after Abort: %v", entries)
	}
	rs, _ := readRollouts(t, filepath.Join(dir, "part-00000.parquet"), alloc)
	if len(rs) != 8 {
		t.Errorf("committed file has %d rows, want 8", len(rs))
	}
	c := collate.New(alloc, 1)
	defer c.Release()
	rec := c.Add(pipelinetest.Group(9, 2, 10))
	defer rec.Release()
	if err := w.Write(context.Background(), rec); err == nil {
		t.Error("Write after Abort succeeded")
	}
}

func TestResumeNumbering(t *testing.T) {
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer alloc.AssertSize(t, 0)
	dir := t.TempDir()
	for _, name := range []string{"part-00000.parquet", "part-00007.parquet", "part-x.parquet", "other-00020.parquet", ".part-00008.parquet.tmp"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	w, err := pqsink.New(dir, pqsink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	writeGroups(t, w, alloc, 1, 2, 8, 64)
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []string{"other-00020.parquet", "part-00000.parquet", "part-00007.parquet", "part-00008.parquet", "part-x.parquet"}
	if got := names(t, dir); !slices.Equal(got, want) {
		t.Errorf("files = %v, want %v (stale temp file removed, numbering after 7)", got, want)
	}
	rs, _ := readRollouts(t, filepath.Join(dir, "part-00008.parquet"), alloc)
	if len(rs) != 2 {
		t.Errorf("part-00008 has %d rows, want 2", len(rs))
	}
}

func TestOptionsValidate(t *testing.T) {
	err := pqsink.Options{FileRows: -1, FileBytes: -2, RowGroupRows: -3, Compression: "lzma", Prefix: "../x"}.Validate()
	if err == nil {
		t.Fatal("Validate accepted bad options")
	}
	for _, want := range []string{"file_rows -1", "file_bytes -2", "row_group_rows -3", `compression "lzma"`, `prefix "../x"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if _, err := pqsink.New(t.TempDir(), pqsink.Options{Compression: "lzma"}); err == nil {
		t.Error("New accepted compression lzma")
	}
	if err := (pqsink.Options{Compression: "SNAPPY", Prefix: "data_1"}).Validate(); err != nil {
		t.Errorf("Validate(valid) = %v", err)
	}
}

func TestWrongSchemaRejected(t *testing.T) {
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer alloc.AssertSize(t, 0)
	dir := t.TempDir()
	w, err := pqsink.New(dir, pqsink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	b := array.NewRecordBuilder(alloc, arrow.NewSchema([]arrow.Field{{Name: "x", Type: arrow.PrimitiveTypes.Int64}}, nil))
	defer b.Release()
	b.Field(0).(*array.Int64Builder).Append(1)
	rec := b.NewRecord()
	defer rec.Release()
	if err := w.Write(context.Background(), rec); err == nil || !strings.Contains(err.Error(), "columns") {
		t.Errorf("Write(wrong schema) = %v", err)
	}
	if got := names(t, dir); len(got) != 0 {
		t.Errorf("files after rejected write: %v", got)
	}
}

func TestCancelledContext(t *testing.T) {
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer alloc.AssertSize(t, 0)
	w, err := pqsink.New(t.TempDir(), pqsink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	c := collate.New(alloc, 1)
	defer c.Release()
	rec := c.Add(pipelinetest.Group(0, 2, 10))
	defer rec.Release()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.Write(ctx, rec); !errors.Is(err, context.Canceled) {
		t.Errorf("Write(cancelled) = %v", err)
	}
}

func names(t testing.TB, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

// Rows larger than the zstd encoder's 1 MiB window (1.5 MiB, 1.1 MiB of it
// one message text) make pages longer than the window; Arrow's reader
// reads them back.
func TestZstdLargePages(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: the full suite runs it")
	}
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer alloc.AssertSize(t, 0)
	dir := t.TempDir()
	w, err := pqsink.New(dir, pqsink.Options{Compression: "zstd"})
	if err != nil {
		t.Fatal(err)
	}
	want := writeGroups(t, w, alloc, 2, 2, 4, 3<<19)
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, _ := readRollouts(t, filepath.Join(dir, "part-00000.parquet"), alloc)
	if len(got) != len(want) {
		t.Fatalf("read %d rows, want %d", len(got), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("row %d differs", i)
		}
	}
	st, err := os.Stat(filepath.Join(dir, "part-00000.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() > 4*3<<19 {
		t.Errorf("file of %d bytes for 4 rows of 1.5 MiB: not compressed", st.Size())
	}
}

// Rows of several MiB (long message text, token ids, logprobs) read back
// with Arrow's reader, every value equal. Page statistics once copied a
// row's text into its page header four times: past 1 MiB of text the
// header passed the 4 MiB Arrow accepts, and Arrow panicked.
func TestLargeRows(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: the full suite runs it")
	}
	for _, tc := range []struct {
		compression string
		payload     int
	}{
		{"zstd", 3 << 20},
		{"none", 3 << 20},
		{"zstd", 8 << 20},
	} {
		t.Run(fmt.Sprint(tc.compression, "-", tc.payload>>20, "MiB"), func(t *testing.T) {
			alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer alloc.AssertSize(t, 0)
			dir := t.TempDir()
			w, err := pqsink.New(dir, pqsink.Options{Compression: tc.compression})
			if err != nil {
				t.Fatal(err)
			}
			want := writeGroups(t, w, alloc, 1, 2, 2, tc.payload)
			if err := w.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "part-00000.parquet")
			got, _ := readRollouts(t, path, alloc)
			if len(got) != len(want) {
				t.Fatalf("read %d rows, want %d", len(got), len(want))
			}
			for i := range want {
				if len(got[i].Messages[2].Content) < tc.payload/4 {
					t.Errorf("row %d: message of %d bytes, want a long one", i, len(got[i].Messages[2].Content))
				}
				if !reflect.DeepEqual(got[i], want[i]) {
					t.Errorf("row %d differs", i)
				}
			}
			// The text column alone: Arrow read it as empty, with no error.
			tbl, _ := readFile(t, path, alloc, []string{"task"})
			defer tbl.Release()
			if tbl.NumRows() != int64(len(want)) {
				t.Errorf("task column alone: %d rows, want %d", tbl.NumRows(), len(want))
			}
			// Page headers stay small: the column chunk is its page data.
			f, err := file.OpenParquetFile(path, false)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			for c := range f.MetaData().Schema.NumColumns() {
				cc, err := f.MetaData().RowGroup(0).ColumnChunk(c)
				if err != nil {
					t.Fatal(err)
				}
				pr, err := f.RowGroup(0).GetColumnPageReader(c)
				if err != nil {
					t.Fatal(err)
				}
				var data int64
				for pr.Next() {
					data += int64(len(pr.Page().Data()))
				}
				if err := pr.Err(); err != nil {
					t.Fatalf("column %s: %v", f.MetaData().Schema.Column(c).Path(), err)
				}
				if hdr := cc.TotalCompressedSize() - data; hdr > 4<<10 {
					t.Errorf("column %s: %d bytes of page headers", f.MetaData().Schema.Column(c).Path(), hdr)
				}
			}
		})
	}
}

// TestCommitClosesOpenFile: Commit commits the open file whatever its
// size, is a no-op without one, and the next Write opens a new file.
func TestCommitClosesOpenFile(t *testing.T) {
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer alloc.AssertSize(t, 0)
	dir := t.TempDir()
	var committed []int
	w, err := pqsink.New(dir, pqsink.Options{FileRows: 1000, OnCommit: func(_ string, rows int) { committed = append(committed, rows) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := w.Commit(ctx); err != nil {
		t.Fatalf("Commit with no open file: %v", err)
	}
	writeGroups(t, w, alloc, 2, 4, 8, 64)
	if err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := names(t, dir); !slices.Equal(got, []string{"part-00000.parquet"}) {
		t.Fatalf("after Commit: %v", got)
	}
	writeGroups(t, w, alloc, 1, 4, 8, 64)
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := names(t, dir); !slices.Equal(got, []string{"part-00000.parquet", "part-00001.parquet"}) {
		t.Fatalf("after Close: %v", got)
	}
	if !slices.Equal(committed, []int{8, 4}) {
		t.Fatalf("commits of %v rows, want [8 4]", committed)
	}
	for _, p := range parts(t, dir) {
		readRollouts(t, p, alloc)
	}
	if err := w.Commit(ctx); err == nil {
		t.Fatal("Commit after Close succeeded")
	}
}

// TestRowGroupsCutByText: a record of long answers is handed to the
// Parquet writer in slices and its row groups end by text, not only by
// rows, so that the writer never buffers a copy of the whole record; the
// rows read back (with Arrow's reader) equal what was written.
func TestRowGroupsCutByText(t *testing.T) {
	defer pqsink.SetTextBounds(1<<20, 3<<20)()
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer alloc.AssertSize(t, 0)
	dir := t.TempDir()
	w, err := pqsink.New(dir, pqsink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// One record of 8 rows, each well over 1 MiB of text.
	want := writeGroups(t, w, alloc, 1, 8, 8, 6<<20)
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "part-00000.parquet")
	got, _ := readRollouts(t, path, alloc)
	if len(got) != len(want) {
		t.Fatalf("read %d rows, want %d", len(got), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("row %d differs", i)
		}
	}
	f, err := file.OpenParquetFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if n := f.NumRowGroups(); n < 3 {
		t.Fatalf("%d row groups for %d rows of long text, want one per ~3 MiB", n, len(want))
	}
}
