package durable_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/trajflow/trajflow/internal/durable"
)

func TestWriteFileKeepsModeAndLeavesNoTemp(t *testing.T) {
	tests := []struct {
		name     string
		existing os.FileMode // 0: no file before
		perm     os.FileMode
		want     os.FileMode
	}{
		{"new file gets perm", 0, 0o600, 0o600},
		{"replaced file keeps its mode", 0o640, 0o600, 0o640},
		{"replaced file keeps a wider mode", 0o644, 0o600, 0o644},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "state.json")
			if tt.existing != 0 {
				if err := os.WriteFile(path, []byte("old"), tt.existing); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(path, tt.existing); err != nil {
					t.Fatal(err)
				}
			}
			if err := durable.WriteFile(path, []byte("new"), tt.perm); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(path)
			if err != nil || string(b) != "new" {
				t.Fatalf("content %q, %v", b, err)
			}
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if got := fi.Mode().Perm(); got != tt.want {
				t.Errorf("mode %v, want %v", got, tt.want)
			}
			entries, _ := os.ReadDir(dir)
			if len(entries) != 1 {
				t.Errorf("directory holds %d entries, want 1 (no temporary file left)", len(entries))
			}
		})
	}
}

func TestAbortLeavesTheOldFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "part.parquet")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := durable.CreateAs(filepath.Join(dir, ".part.parquet.tmp"), path, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("half")); err != nil {
		t.Fatal(err)
	}
	if err := f.Abort(); err != nil {
		t.Fatal(err)
	}
	if err := f.Abort(); err != nil {
		t.Fatalf("second abort: %v", err)
	}
	if err := f.Commit(); err == nil {
		t.Fatal("commit after abort succeeded")
	}
	b, _ := os.ReadFile(path)
	if string(b) != "old" {
		t.Fatalf("content %q, want old", b)
	}
	if _, err := os.Stat(filepath.Join(dir, ".part.parquet.tmp")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temporary file still there: %v", err)
	}
}

func TestCreateAsRefusesAnExistingTemp(t *testing.T) {
	dir := t.TempDir()
	tmp := filepath.Join(dir, ".x.tmp")
	if err := os.WriteFile(tmp, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := durable.CreateAs(tmp, filepath.Join(dir, "x"), 0o644); err == nil {
		t.Fatal("CreateAs over an existing temporary file succeeded")
	}
}

func TestBeforeRenameErrorAborts(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x")
	f, err := durable.Create(path, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("upload failed")
	f.BeforeRename = func(final string) error {
		if final != path {
			t.Errorf("BeforeRename got %s, want %s", final, path)
		}
		return boom
	}
	if err := f.Commit(); !errors.Is(err, boom) {
		t.Fatalf("commit: %v, want %v", err, boom)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Fatalf("directory holds %d entries, want none", len(entries))
	}
}

func TestCommitAs(t *testing.T) {
	tests := []struct {
		name     string
		existing os.FileMode // 0: no file at the name before
		want     os.FileMode
	}{
		{"new name gets perm", 0, 0o644},
		{"replaced file keeps its mode", 0o600, 0o600},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			created := filepath.Join(dir, "unnamed")
			path := filepath.Join(dir, "part-00003.parquet")
			if tt.existing != 0 {
				if err := os.WriteFile(path, []byte("old"), tt.existing); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(path, tt.existing); err != nil {
					t.Fatal(err)
				}
			}
			f, err := durable.CreateAs(filepath.Join(dir, ".steps.tmp"), created, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Write([]byte("new")); err != nil {
				t.Fatal(err)
			}
			if err := f.CommitAs(path); err != nil {
				t.Fatal(err)
			}
			if f.Final() != path {
				t.Errorf("Final %s, want %s", f.Final(), path)
			}
			b, err := os.ReadFile(path)
			if err != nil || string(b) != "new" {
				t.Fatalf("content %q, %v", b, err)
			}
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if got := fi.Mode().Perm(); got != tt.want {
				t.Errorf("mode %v, want %v", got, tt.want)
			}
			entries, _ := os.ReadDir(dir)
			if len(entries) != 1 {
				t.Errorf("directory holds %d entries, want 1 (neither the created name nor a temporary file)", len(entries))
			}
			if err := f.CommitAs(created); err == nil {
				t.Error("CommitAs after Commit succeeded")
			}
		})
	}
}

func TestTryLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), ".lock")
	l, err := durable.TryLock(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.WritePID(); err != nil {
		t.Fatal(err)
	}
	if got, want := durable.HolderPID(path), strconv.Itoa(os.Getpid()); got != want {
		t.Errorf("HolderPID %q, want %s", got, want)
	}
	if _, err := durable.TryLock(path); !errors.Is(err, durable.ErrLocked) {
		t.Fatalf("second TryLock: %v, want ErrLocked", err)
	}
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}
	l2, err := durable.TryLock(path)
	if err != nil {
		t.Fatalf("TryLock after Unlock: %v", err)
	}
	if err := l2.Unlock(); err != nil {
		t.Fatal(err)
	}
}

func ExampleWriteFile() {
	dir, _ := os.MkdirTemp("", "durable")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "state.json")
	if err := durable.WriteFile(path, []byte(`{"step":1}`), 0o644); err != nil {
		panic(err)
	}
	b, _ := os.ReadFile(path)
	os.Stdout.Write(append(b, '\n'))
	// Output: {"step":1}
}

func TestDiskErrors(t *testing.T) {
	full := fmt.Errorf("parquet: write x: %w", &fs.PathError{Op: "write", Path: "/out/data/.part-00001.parquet.tmp", Err: syscall.ENOSPC})
	eio := fmt.Errorf("commit: %w", &os.LinkError{Op: "rename", Old: "/out/.a.tmp", New: "/out/a", Err: syscall.EIO})
	quota := errors.Join(errors.New("other"), &fs.PathError{Op: "write", Path: "/q", Err: syscall.EDQUOT})
	for _, tc := range []struct {
		err      error
		full, io bool
		path     string
	}{
		{full, true, false, "/out/data/.part-00001.parquet.tmp"},
		{eio, false, true, "/out/a"},
		{quota, true, false, "/q"},
		{errors.New("plain"), false, false, ""},
	} {
		if durable.DiskFull(tc.err) != tc.full || durable.IOError(tc.err) != tc.io || durable.FailedPath(tc.err) != tc.path {
			t.Errorf("%v: DiskFull %v, IOError %v, FailedPath %q; want %v %v %q", tc.err,
				durable.DiskFull(tc.err), durable.IOError(tc.err), durable.FailedPath(tc.err), tc.full, tc.io, tc.path)
		}
	}
}
