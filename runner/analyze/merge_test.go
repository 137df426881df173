package analyze

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/apache/arrow/go/v17/parquet"
	"github.com/apache/arrow/go/v17/parquet/pqarrow"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/schema"
	pqsink "github.com/trajflow/trajflow/sinks/parquet"
	"github.com/trajflow/trajflow/stages/collate"
)

// writeOtherSchema writes a Parquet file with one int64 column "x".
func writeOtherSchema(t testing.TB, path string) {
	t.Helper()
	s := arrow.NewSchema([]arrow.Field{{Name: "x", Type: arrow.PrimitiveTypes.Int64}}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, s)
	defer b.Release()
	b.Field(0).(*array.Int64Builder).AppendValues([]int64{1, 2, 3}, nil)
	rec := b.NewRecord()
	defer rec.Release()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := pqarrow.NewFileWriter(s, f, nil, pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// shards writes tasks 0..29 of run "run-a" as three shard directories with
// small files, each shard with its own config fingerprint.
func shards(t testing.TB, dir string) ([]string, []*pipeline.Rollout) {
	t.Helper()
	var dirs []string
	var all []*pipeline.Rollout
	for i, fp := range []string{"fp1", "fp2", "fp1"} {
		d := filepath.Join(dir, "shard"+string(rune('0'+i)))
		rs := writeRun(t, filepath.Join(d, "data"), groups("run-a", int64(10*i), int64(10*i+10)), 8, pqsink.Options{
			FileRows: 12,
			Metadata: map[string]string{schema.KeyRunID: "run-a", schema.KeyConfigFingerprint: fp, schema.KeyModel: "sim-model"},
		})
		dirs = append(dirs, d)
		all = append(all, rs...)
	}
	return dirs, all
}

func TestMergeShards(t *testing.T) {
	dir := t.TempDir()
	inputs, want := shards(t, dir)
	var inFiles int
	for _, d := range inputs {
		inFiles += len(parts(t, filepath.Join(d, "data")))
	}
	// Read batches of 5 rows: groups of 4 and 8 rows span batches, so
	// cuts fall inside records.
	for _, batch := range []int{5, 0} {
		t.Run("", func(t *testing.T) {
			alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer alloc.AssertSize(t, 0)
			out := filepath.Join(t.TempDir(), "merged")
			var commits int
			res, err := Merge(context.Background(), inputs, out, MergeOptions{
				FileRows: 50, BatchRows: batch, Allocator: alloc,
				OnCommit: func(string, int) { commits++ },
			})
			if err != nil {
				t.Fatal(err)
			}
			files := parts(t, filepath.Join(out, "data"))
			if !reflect.DeepEqual(files, res.Files) || commits != len(files) {
				t.Errorf("result files %v, on disk %v, %d commits", res.Files, files, commits)
			}
			if len(files) >= inFiles || len(files) < 2 {
				t.Errorf("%d input files merged into %d", inFiles, len(files))
			}
			if res.Rows != int64(len(want)) || len(res.Inputs) != inFiles || res.Duplicates != 0 {
				t.Errorf("result %+v", res)
			}

			// Every column of every row, read back with Arrow's reader.
			got, metas := readRollouts(t, alloc, files...)
			if len(got) != len(want) {
				t.Fatalf("%d rows read back, want %d", len(got), len(want))
			}
			wantRows, _ := readRollouts(t, alloc, inputFiles(t, inputs)...)
			sortRollouts(got)
			sortRollouts(wantRows)
			for i := range got {
				if !reflect.DeepEqual(got[i], wantRows[i]) {
					t.Fatalf("row %d: got %+v\nwant %+v", i, got[i], wantRows[i])
				}
			}

			// Files are cut between groups, after at least FileRows rows.
			groupFile := map[pipeline.GroupKey]int{}
			for fi, f := range files {
				rs, _ := readRollouts(t, alloc, f)
				if fi < len(files)-1 && len(rs) < 50 {
					t.Errorf("%s holds %d rows, want >= 50", f, len(rs))
				}
				for _, r := range rs {
					if prev, ok := groupFile[r.GroupKey()]; ok && prev != fi {
						t.Errorf("group %v split across files %d and %d", r.GroupKey(), prev, fi)
					}
					groupFile[r.GroupKey()] = fi
				}
			}

			wantMeta := map[string]string{
				schema.MetadataKey:          schema.Version,
				schema.KeyRunID:             "run-a",
				schema.KeyModel:             "sim-model",
				schema.KeyConfigFingerprint: `["fp1","fp2"]`,
			}
			if !reflect.DeepEqual(res.Metadata, wantMeta) {
				t.Errorf("metadata %v, want %v", res.Metadata, wantMeta)
			}
			for i, m := range metas {
				if !reflect.DeepEqual(m, wantMeta) {
					t.Errorf("%s metadata %v, want %v", files[i], m, wantMeta)
				}
			}
		})
	}
}

func inputFiles(t testing.TB, dirs []string) []string {
	t.Helper()
	files, err := ResolveFiles(dirs)
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// Merged output gives the same stats as its inputs.
func TestMergeKeepsStats(t *testing.T) {
	dir := t.TempDir()
	inputs, _ := shards(t, dir)
	out := filepath.Join(dir, "merged")
	if _, err := Merge(context.Background(), inputs, out, MergeOptions{FileRows: 1000}); err != nil {
		t.Fatal(err)
	}
	before, err := Stats(context.Background(), inputs, nil, StatsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	after, err := Stats(context.Background(), []string{out}, nil, StatsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(before, after) {
		t.Errorf("stats changed by merge:\n%+v\n%+v", before, after)
	}
	if n := len(parts(t, filepath.Join(out, "data"))); n != 1 {
		t.Errorf("%d files, want 1", n)
	}
}

func TestMergeDuplicates(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a")
	rsA := writeRun(t, a, groups("run-a", 0, 4), 8, pqsink.Options{})
	b := filepath.Join(dir, "b")
	writeRun(t, b, groups("run-a", 3, 6), 8, pqsink.Options{}) // task 3 twice
	c := filepath.Join(dir, "c")
	writeRun(t, c, groups("run-c", 0, 4), 8, pqsink.Options{}) // same keys, other run

	_, err := Merge(context.Background(), []string{a, b}, filepath.Join(dir, "out1"), MergeOptions{})
	if err == nil {
		t.Fatal("duplicates merged")
	}
	for _, want := range []string{"8 duplicate rows", "task_index 3", parts(t, a)[0], parts(t, b)[0]} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "out1", "data")); !os.IsNotExist(err) {
		t.Errorf("a refused merge wrote output: %v", err)
	}

	res, err := Merge(context.Background(), []string{a, b}, filepath.Join(dir, "out2"), MergeOptions{AllowDuplicates: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Duplicates != 8 || res.Rows != int64(len(rsA))+16 {
		t.Errorf("duplicates %d rows %d", res.Duplicates, res.Rows)
	}

	res, err = Merge(context.Background(), []string{a, c}, filepath.Join(dir, "out3"), MergeOptions{})
	if err != nil {
		t.Fatalf("keys of different runs: %v", err)
	}
	if res.Duplicates != 0 || res.Metadata[schema.KeyRunID] != "" {
		t.Errorf("result %+v", res)
	}

	// The same file named twice is read once.
	if _, err := Merge(context.Background(), []string{a, parts(t, a)[0]}, filepath.Join(dir, "out4"), MergeOptions{}); err != nil {
		t.Errorf("a file named twice: %v", err)
	}
}

func TestMergeRunIDList(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a")
	writeRun(t, a, groups("run-a", 0, 2), 8, pqsink.Options{Metadata: map[string]string{schema.KeyRunID: "run-a"}})
	b := filepath.Join(dir, "b")
	writeRun(t, b, groups("run-b", 0, 2), 8, pqsink.Options{Metadata: map[string]string{schema.KeyRunID: "run-b"}})
	res, err := Merge(context.Background(), []string{b, a}, filepath.Join(dir, "out"), MergeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Metadata[schema.KeyRunID]; got != `["run-a","run-b"]` {
		t.Errorf("run id metadata %q", got)
	}
}

// A file that records a schema version trajflow does not know is refused
// by name and version.
func TestMergeSchemaVersionUnknown(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a")
	writeRun(t, a, groups("run-a", 0, 2), 8, pqsink.Options{})
	b := filepath.Join(dir, "b")
	writeRun(t, b, groups("run-a", 2, 4), 8, pqsink.Options{Metadata: map[string]string{schema.MetadataKey: "0"}})
	_, err := Merge(context.Background(), []string{a, b}, filepath.Join(dir, "out"), MergeOptions{})
	if err == nil {
		t.Fatal("merged a file of an unknown schema version")
	}
	for _, want := range []string{parts(t, b)[0], `schema version "0" is unknown`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

func TestMergeSchemaMismatch(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a")
	writeRun(t, a, groups("run-a", 0, 2), 8, pqsink.Options{})
	other := filepath.Join(a, "z.parquet")
	writeOtherSchema(t, other)
	_, err := Merge(context.Background(), []string{parts(t, a)[0], other}, filepath.Join(dir, "out"), MergeOptions{})
	if err == nil || !strings.Contains(err.Error(), other) || !strings.Contains(err.Error(), "column") {
		t.Errorf("err = %v, want a schema error naming %s", err, other)
	}
}

func TestMergeExistingOutput(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a")
	writeRun(t, a, groups("run-a", 0, 2), 8, pqsink.Options{})
	b := filepath.Join(dir, "b")
	writeRun(t, b, groups("run-a", 2, 4), 8, pqsink.Options{})
	out := filepath.Join(dir, "out")
	if _, err := Merge(context.Background(), []string{a}, out, MergeOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := Merge(context.Background(), []string{b}, out, MergeOptions{})
	if err == nil || !strings.Contains(err.Error(), out+" exists and is not empty") {
		t.Fatalf("err = %v, want a refusal naming the output", err)
	}
	res, err := Merge(context.Background(), []string{b}, out, MergeOptions{Force: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Files) != 1 || filepath.Base(res.Files[0]) != "part-00001.parquet" {
		t.Errorf("forced merge wrote %v", res.Files)
	}
	// Forced again with the same input: its keys are already there.
	if _, err := Merge(context.Background(), []string{b}, out, MergeOptions{Force: true}); err == nil || !strings.Contains(err.Error(), "duplicate") {
		t.Errorf("err = %v, want duplicates against the existing files", err)
	}
	// An input inside the output.
	_, err = Merge(context.Background(), []string{filepath.Join(out, "data", "part-00000.parquet")}, out, MergeOptions{Force: true, AllowDuplicates: true})
	if err == nil || !strings.Contains(err.Error(), "lies in the output") {
		t.Errorf("err = %v, want a refusal of an input inside the output", err)
	}
	if _, err := Merge(context.Background(), []string{b}, filepath.Join(dir, "x"), MergeOptions{FileRows: -1}); err == nil {
		t.Error("negative file rows accepted")
	}
	if _, err := Merge(context.Background(), []string{b}, filepath.Join(dir, "x"), MergeOptions{Compression: "lz9"}); err == nil {
		t.Error("unknown compression accepted")
	}
}

func TestMergeCancelled(t *testing.T) {
	dir := t.TempDir()
	inputs, _ := shards(t, dir)
	ctx, cancel := context.WithCancel(context.Background())
	out := filepath.Join(dir, "out")
	n := 0
	_, err := Merge(ctx, inputs, out, MergeOptions{FileRows: 20, OnCommit: func(string, int) {
		if n++; n == 2 {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	entries, _ := os.ReadDir(filepath.Join(out, "data"))
	if len(entries) != 0 {
		t.Errorf("a failed merge left %d entries in its output", len(entries))
	}
}

// A merge killed before its rename leaves its staging directory; the next
// merge into the same place removes it (its process is gone) and leaves
// a running merge's alone.
func TestMergeRemovesStaleStaging(t *testing.T) {
	dir := t.TempDir()
	inputs, _ := shards(t, dir)
	out := filepath.Join(dir, "merged")
	stale := filepath.Join(dir, ".merged.merging-999999999-42")
	legacy := filepath.Join(dir, ".merged.merging-123456")
	live := filepath.Join(dir, ".merged.merging-"+strconv.Itoa(os.Getpid())+"-7")
	for _, d := range []string{stale, legacy, live} {
		if err := os.MkdirAll(filepath.Join(d, "data"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Merge(context.Background(), inputs, out, MergeOptions{FileRows: 1000}); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{stale, legacy} {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s left: %v", d, err)
		}
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("a live merge's staging removed: %v", err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".merged.merging-*"))
	if len(left) != 1 {
		t.Errorf("staging directories left: %v", left)
	}
}

// Files of schema versions 6 (no routed_experts), 5 (no segments either)
// and 4 (no segments, counts required, never null), written with Arrow's
// own writer: stats reads each beside a current file; merge refuses the
// mix, naming the file and its version.
func TestOldVersionFiles(t *testing.T) {
	for _, version := range []string{schema.VersionV6, schema.VersionV5, schema.VersionV4} {
		t.Run("v"+version, func(t *testing.T) {
			dir := t.TempDir()
			a := filepath.Join(dir, "a")
			writeRun(t, a, groups("run-a", 0, 2), 8, pqsink.Options{})
			b := filepath.Join(dir, "b")
			gs := groups("run-a", 2, 4)
			for _, g := range gs {
				for _, r := range g.Rollouts {
					r.Routes = nil
					if version != schema.VersionV6 {
						r.Segments = nil
					}
					if version == schema.VersionV4 {
						r.TokenIDsMissing = false // version 4 wrote every count
					}
				}
			}
			path := writeOldVersion(t, b, gs, version)
			m, err := Stats(context.Background(), []string{a, b}, nil, StatsOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if m.Rows == 0 || m.MeanGenTokensPerSample == nil {
				t.Errorf("stats of versions %s and %s: %d rows, mean gen tokens %v", schema.Version, version, m.Rows, m.MeanGenTokensPerSample)
			}
			alone, err := Stats(context.Background(), []string{b}, nil, StatsOptions{})
			if err != nil || alone.Rows != int64(rowsOf(gs)) {
				t.Errorf("stats of version %s alone: %v rows, %v", version, alone, err)
			}
			_, err = Merge(context.Background(), []string{a, b}, filepath.Join(dir, "out"), MergeOptions{})
			if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "schema version "+version) {
				t.Errorf("merge of versions %s and %s: %v", schema.Version, version, err)
			}
		})
	}
}

func rowsOf(gs []*pipeline.Group) int {
	n := 0
	for _, g := range gs {
		n += len(g.Rollouts)
	}
	return n
}

// writeOldVersion writes gs as dir/part-00000.parquet in schema version
// 6, 5 or 4, whose columns are the current ones' first (less
// routed_experts, and segments), with Arrow's own Parquet writer, the
// version in its metadata. It returns the file's path.
func writeOldVersion(t *testing.T, dir string, gs []*pipeline.Group, version string) string {
	t.Helper()
	c := collate.New(memory.DefaultAllocator, 1<<20)
	defer c.Release()
	for _, g := range gs {
		if rec := c.Add(g); rec != nil {
			rec.Release()
			t.Fatal("collate handed out a record before Flush")
		}
	}
	rec := c.Flush()
	defer rec.Release()
	if schema.ColSegments != schema.NumColumns-2 || schema.ColRoutedExperts != schema.NumColumns-1 {
		t.Fatal("segments and routed_experts are not the last columns")
	}
	old := schema.ForVersion(version)
	cut := array.NewRecord(old, rec.Columns()[:old.NumFields()], rec.NumRows())
	defer cut.Release()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "part-00000.parquet")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	fw, err := pqarrow.NewFileWriter(old, out, parquet.NewWriterProperties(), pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	if err := fw.Write(cut); err != nil {
		t.Fatal(err)
	}
	if err := fw.AppendKeyValueMetadata(schema.MetadataKey, version); err != nil {
		t.Fatal(err)
	}
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}
