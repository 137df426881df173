package analyze

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow/memory"

	pqsink "github.com/trajflow/trajflow/sinks/parquet"
)

func TestMergeEvenFiles(t *testing.T) {
	dir := t.TempDir()
	inputs, want := shards(t, dir)
	var inBytes int64
	for _, f := range inputFiles(t, inputs) {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		inBytes += st.Size()
	}
	rows := len(want)
	for _, tc := range []struct {
		name  string
		opts  MergeOptions
		files int
	}{
		{"rows per file", MergeOptions{FileRows: 50, EvenFiles: true}, (rows + 49) / 50},
		{"target size", MergeOptions{TargetFileBytes: inBytes / 3}, 3},
		{"target size above the input", MergeOptions{TargetFileBytes: inBytes * 10}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "merged")
			res, err := Merge(context.Background(), inputs, out, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			files := parts(t, filepath.Join(out, "data"))
			if len(files) != tc.files || len(res.Files) != tc.files {
				t.Fatalf("%d files (%d in the result), want %d", len(files), len(res.Files), tc.files)
			}
			share := rows / tc.files
			total := 0
			for _, f := range files {
				rs, _ := readRollouts(t, memory.NewGoAllocator(), f)
				total += len(rs)
				// Cut at the group boundary nearest the share: off by less
				// than a group (at most 8 rows).
				if d := len(rs) - share; d < -8 || d > 8 {
					t.Errorf("%s holds %d rows, want about %d", filepath.Base(f), len(rs), share)
				}
			}
			if total != rows {
				t.Errorf("%d rows merged, want %d", total, rows)
			}
		})
	}
}

func TestMergeShardedRoot(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	var want int
	for i := range 2 {
		d := filepath.Join(root, "shards", []string{"00000-of-00002", "00001-of-00002"}[i], "data")
		want += len(writeRun(t, d, groups("run-a", int64(5*i), int64(5*i+5)), 8, pqsink.Options{}))
	}
	files, err := ResolveFiles([]string{root})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 || !strings.Contains(files[0], "00000-of-00002") || !strings.Contains(files[1], "00001-of-00002") {
		t.Fatalf("files of the root: %v", files)
	}
	sets, err := Shards([]string{root, dir})
	if err != nil || len(sets) != 1 {
		t.Fatalf("Shards: %v, %v", sets, err)
	}
	if got := sets[0].Summary(); got != "2 of 2 shards (no manifest.json), 2 incomplete (00000-of-00002, 00001-of-00002)" {
		t.Errorf("summary %q", got)
	}
	res, err := Merge(context.Background(), []string{root}, filepath.Join(dir, "out"), MergeOptions{})
	if err != nil || res.Rows != int64(want) {
		t.Fatalf("merged %v rows, %v; want %d", res, err, want)
	}
}

func TestMergeFailureLeavesNoDataset(t *testing.T) {
	dir := t.TempDir()
	inputs, _ := shards(t, dir)
	out := filepath.Join(dir, "out")
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	_, err := Merge(ctx, inputs, out, MergeOptions{FileRows: 20, OnCommit: func(path string, _ int) {
		if !strings.Contains(path, ".out.merging-") {
			t.Errorf("committed %s outside the temporary directory", path)
		}
		if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the destination is visible before the merge ends: %v", err)
		}
		if n++; n == 2 {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed merge left its destination: %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".out.merging-*")); len(left) != 0 {
		t.Errorf("a failed merge left %v", left)
	}
	// An empty destination is replaced by the dataset.
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Merge(context.Background(), inputs, out, MergeOptions{}); err != nil {
		t.Fatal(err)
	}
	if len(parts(t, filepath.Join(out, "data"))) == 0 {
		t.Error("no files in the merged dataset")
	}
}

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"256MB", 256e6, true}, {"256MiB", 256 << 20, true}, {"1.5GiB", 3 << 29, true}, {"4096", 4096, true},
		{"10 kb", 10e3, true}, {"2TB", 2e12, true}, {"1B", 1, true},
		{"", 0, false}, {"MB", 0, false}, {"-5MB", 0, false}, {"0", 0, false}, {"5XB", 0, false}, {"1e400", 0, false},
	} {
		got, err := ParseSize(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v", tc.in, got, err)
		}
	}
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"256MB", "1.5GiB", "0", "x", "9999999999TB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err == nil && n < 1 {
			t.Fatalf("ParseSize(%q) = %d without an error", s, n)
		}
	})
}
