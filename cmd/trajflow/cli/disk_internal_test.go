package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"syscall"
	"testing"

	"github.com/trajflow/trajflow/internal/durable"
)

// A full disk and an I/O error each get their message: what failed, the
// file, that committed files are whole, and what to do; other errors
// none.
func TestDiskMessage(t *testing.T) {
	part := "/out/data/.part-00003.parquet.tmp"
	for _, tc := range []struct {
		err  error
		want []string
	}{
		{fmt.Errorf("commit: parquet: close: %w", &fs.PathError{Op: "write", Path: part, Err: syscall.ENOSPC}),
			[]string{"trajflow run: the disk is full (no space left on device) at " + part + ": ", "every file committed before is whole",
				"free space on the disk of /out", "and run the same command again to resume"}},
		{fmt.Errorf("commit: parquet: %w", &durable.SpaceError{Path: part, Size: 3 << 20, Err: &fs.PathError{Op: "write", Path: part, Err: syscall.ENOSPC}}),
			[]string{"trajflow run: the disk is full (no space left on device) at " + part + ": ", "free space on the disk of /out",
				"(writing " + part + " needed at least 3.0 MiB: its 3145728 bytes, the refused write's included) and run the same command again to resume"}},
		{fmt.Errorf("commit: %w", &fs.PathError{Op: "sync", Path: part, Err: syscall.EIO}),
			[]string{"trajflow run: an I/O error of the disk (EIO) at " + part + ": ", "check the disk", "run the same command again"}},
	} {
		msg, ok := diskMessage("run", "/out", tc.err)
		if !ok {
			t.Fatalf("%v: not taken for a disk error", tc.err)
		}
		for _, w := range tc.want {
			if !strings.Contains(msg, w) {
				t.Errorf("message:\n%s\nwant %q", msg, w)
			}
		}
	}
	if msg, _ := diskMessage("run", t.TempDir(), &fs.PathError{Op: "write", Path: part, Err: syscall.ENOSPC}); !strings.Contains(msg, " free there now) and run") {
		t.Errorf("the message of a full disk does not say the free space of an existing directory:\n%s", msg)
	}
	for n, want := range map[uint64]string{0: "0 bytes", 1536: "1.5 KiB", 3 << 20: "3.0 MiB", 5 << 30: "5.0 GiB"} {
		if got := byteSize(n); got != want {
			t.Errorf("byteSize(%d) = %q, want %q", n, got, want)
		}
	}
	if _, ok := diskMessage("run", "/out", errors.New("a sink failed")); ok {
		t.Error("a plain error taken for a disk error")
	}
}
