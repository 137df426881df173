package resume

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/trajflow/trajflow/internal/crashfs"
	"github.com/trajflow/trajflow/internal/crashfs/crashfstest"
	"github.com/trajflow/trajflow/internal/durable"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/schema"
)

// TestSecretKeySurvivesAPowerCut: the key a run made is the key after a
// power cut (crashfs drops what was not synced). Before the key was
// synced before its link, it came back empty and every resume stopped
// with "is damaged".
func TestSecretKeySurvivesAPowerCut(t *testing.T) {
	fsys := crashfstest.Mount(t)
	dir := filepath.Join(fsys.Root(), "out")
	if err := durable.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	key, err := SecretKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	// The run goes on and syncs the directory (any commit there does):
	// the key's name is durable then, whatever SecretKey did.
	if err := durable.WriteFile(filepath.Join(dir, schema.MetricsFile), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := fsys.Cut(); err != nil {
		t.Fatal(err)
	}
	again, err := SecretKey(dir)
	if err != nil {
		t.Fatalf("after the cut: %v", err)
	}
	if !bytes.Equal(key, again) {
		t.Fatal("after the cut the output directory has another key: a resume would see every secret as changed")
	}
}

// TestInputsSurviveAPowerCut: the lines of inputs.jsonl written before a
// Flush (each part file's commit calls it) or a Close are there after a
// power cut; lines written after the last Flush may be lost whole, never
// torn, and a resumed run writes them again.
func TestInputsSurviveAPowerCut(t *testing.T) {
	tests := []struct {
		name string
		// close ends the writer as a run ends (Close), else as a kill -9 after
		// more lines were written than the last Flush covered.
		close bool
		want  int64 // the last task index the file holds after the cut
	}{
		{"Flush, then more lines and a kill", false, 9},
		{"Close", true, 14},
	}
	fsys := crashfstest.Mount(t)
	for i, tt := range tests {
		dir := filepath.Join(fsys.Root(), fmt.Sprint(i))
		if err := durable.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		w, err := OpenInputs(filepath.Join(dir, schema.InputsFile))
		if err != nil {
			t.Fatal(err)
		}
		write := func(from, to int64) {
			for i := from; i <= to; i++ {
				task := &pipeline.Task{Index: i, Source: fmt.Sprintf("t.jsonl:%d", i+1), Messages: []pipeline.Message{{Role: "user", Content: "1+1"}}}
				if err := w.Write(task, nil); err != nil {
					t.Fatal(err)
				}
			}
		}
		write(0, 9)
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		write(10, 14)
		if tt.close {
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
		} else {
			// A kill -9: the kernel keeps what was written, and closes the
			// file without a sync.
			if err := w.bw.Flush(); err != nil {
				t.Fatal(err)
			}
			if err := w.f.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := fsys.Cut(); err != nil {
		t.Fatal(err)
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(fsys.Root(), fmt.Sprint(i), schema.InputsFile)
			w, err := OpenInputs(path)
			if err != nil {
				t.Fatal(err)
			}
			if w.written != tt.want {
				t.Errorf("after the cut the file holds tasks up to %d, want %d", w.written, tt.want)
			}
			b, _ := os.ReadFile(path)
			if n := bytes.Count(b, []byte("\n")); int64(n) != tt.want+1 {
				t.Errorf("%d lines, want %d", n, tt.want+1)
			}
		})
	}
}

// TestLockDirAfterAPowerCut: the lock file needs no sync: the kernel's
// lock goes with the power, and the pid it holds is only for a message;
// after a cut the next run takes the lock whatever is left of the file.
func TestLockDirAfterAPowerCut(t *testing.T) {
	fsys := crashfstest.Mount(t)
	dir := filepath.Join(fsys.Root(), "out")
	if err := durable.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	release, err := LockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	if err := fsys.Cut(); err != nil {
		t.Fatal(err)
	}
	release, err = LockDir(dir)
	if err != nil {
		t.Fatalf("lock after the cut: %v", err)
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
}

// An fsync of inputs.jsonl that failed is not retried: Flush and Close
// return the first error again without syncing the descriptor (Linux
// reports a failed fsync once and the next one successful, the lines
// dropped), and writes after it fail too. Before, each Flush synced the
// same descriptor again, and the run committed its next part as if the
// lines were durable.
func TestInputsFailedSyncIsNotRetried(t *testing.T) {
	fsys := crashfstest.Mount(t)
	w, err := OpenInputs(filepath.Join(fsys.Root(), schema.InputsFile))
	if err != nil {
		t.Fatal(err)
	}
	task := func(i int64) *pipeline.Task {
		return &pipeline.Task{Index: i, Source: fmt.Sprintf("t.jsonl:%d", i+1), Messages: []pipeline.Message{{Role: "user", Content: "1+1"}}}
	}
	if err := w.Write(task(0), nil); err != nil {
		t.Fatal(err)
	}
	fsys.Inject(crashfs.Fault{Op: crashfs.Fsync, Err: syscall.EIO, Match: schema.InputsFile, Count: 1})
	if err := w.Flush(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Flush: %v, want EIO", err)
	}
	if err := w.Write(task(1), nil); !errors.Is(err, syscall.EIO) {
		t.Errorf("Write after the failed sync: %v, want the EIO again", err)
	}
	if err := w.Flush(); !errors.Is(err, syscall.EIO) {
		t.Errorf("Flush again: %v, want the EIO again", err)
	}
	if err := w.Close(); !errors.Is(err, syscall.EIO) {
		t.Errorf("Close: %v, want the EIO again", err)
	}
	if st := fsys.Stats(); st.RetriedSyncs != 0 {
		t.Errorf("%d fsyncs retried on the descriptor whose fsync failed", st.RetriedSyncs)
	}
}

// TestInputsOfAKilledRunSurviveAPowerCut: a run killed (kill -9) after it
// wrote inputs.jsonl's lines and before it synced them leaves them in the
// kernel's cache, its file's name perhaps not durable either. The resume
// reads them and writes no task again; it then commits parts of those
// tasks. OpenInputs must make what it read durable: before, a resume that
// had no new task to write never opened the file and never synced it,
// and a power cut after its commits left inputs.jsonl gone with every
// committed task's line (TestPowerCutShards found it: "inputs.jsonl holds
// tasks up to -1; task 147 is committed").
func TestInputsOfAKilledRunSurviveAPowerCut(t *testing.T) {
	fsys := crashfstest.Mount(t)
	dir := filepath.Join(fsys.Root(), "out")
	if err := durable.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, schema.InputsFile)
	var lines []byte
	for i := range 5 {
		lines = fmt.Appendf(lines, "{\"task_index\": %d}\n", i)
	}
	// The killed run's file: created and written, neither synced.
	if err := os.WriteFile(path, lines, 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := OpenInputs(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil { // no new task: nothing written
		t.Fatal(err)
	}
	if err := fsys.Cut(); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != string(lines) {
		t.Fatalf("after the cut inputs.jsonl holds %q (%v), want the %d lines the resume read", b, err, 5)
	}
}
