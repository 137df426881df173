package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/bench/internal/harness"
)

func TestMain(m *testing.M) {
	harness.MaybeChild() // the test binary doubles as trajflow for child processes
	os.Exit(m.Run())
}

// TestQuick runs the command's smoke mode end to end.
func TestQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: the full suite runs it")
	}
	harness.RunQuick(t, run, []string{"-quick"}, "| 1000 | 1000 |", "| 10000 | 10000 |", "peak RSS ratio 10000/1000 tasks")
}

// TestQuickTrace runs the smoke mode with -trace: each child's RSS over
// time and its GC trace land in the directory.
func TestQuickTrace(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the benchmark's -quick mode")
	}
	dir := t.TempDir()
	var out, errs bytes.Buffer
	if code := run(context.Background(), []string{"-small", "500", "-large", "1000", "-trace", dir, "-trace-every", "5ms", "-gctrace"}, &out, &errs); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errs.String())
	}
	for _, tag := range []string{"500", "1000"} {
		csv, err := os.ReadFile(filepath.Join(dir, "rss-"+tag+".csv"))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(csv)), "\n")
		if lines[0] != "t_s,rss_mib" || len(lines) < 2 {
			t.Errorf("rss-%s.csv: %q", tag, csv)
		}
		for _, l := range lines[1:] {
			ts, rss, ok := strings.Cut(l, ",")
			if _, err := strconv.ParseFloat(ts, 64); err != nil || !ok {
				t.Errorf("rss-%s.csv: line %q", tag, l)
			}
			if v, err := strconv.ParseFloat(rss, 64); err != nil || v <= 0 {
				t.Errorf("rss-%s.csv: line %q", tag, l)
			}
		}
		log, err := os.ReadFile(filepath.Join(dir, "stderr-"+tag+".log"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(log), "gc 1 @") {
			t.Errorf("stderr-%s.log holds no GC trace:\n%s", tag, log)
		}
	}
}
