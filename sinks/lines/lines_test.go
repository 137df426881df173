package lines_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/sinks/lines"
)

func TestWriterCreatesItsFileOnTheFirstLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "failures.jsonl")
	w := lines.New(path)
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("file exists before any line: %v", err)
	}
	r := &pipeline.Rollout{Task: &pipeline.Task{Index: 7, Source: "t.jsonl:8"}, RolloutIndex: 2}
	r.Fail("http", errors.New("HTTP 401"))
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); _ = w.Write(lines.FailureOf(r)) }()
	}
	wg.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(got) != 8 {
		t.Fatalf("%d lines, want 8:\n%s", len(got), data)
	}
	var f lines.Failure
	if err := json.Unmarshal([]byte(got[0]), &f); err != nil {
		t.Fatal(err)
	}
	if f.TaskIndex != 7 || f.RolloutIndex != 2 || f.ErrorClass != "http" || f.Error != "HTTP 401" || f.Where != "t.jsonl:8" {
		t.Fatalf("line %+v", f)
	}
}

// A line the disk has no room for fails its Write, naming the file.
func TestWriterReportsAFullDisk(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full:", err)
	}
	w := lines.New("/dev/full")
	err := w.Write(lines.Reject{Where: "t.jsonl:1", Reason: "bad"})
	if err == nil || !strings.Contains(err.Error(), "full") {
		t.Fatalf("Write: %v, want the full disk's error naming the file", err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}
