package cli

import (
	"fmt"
	"strings"

	"github.com/trajflow/trajflow/internal/durable"
)

// diskMessage is what a command prints when err is a full disk or an I/O
// error of the disk (ok false otherwise): what failed and where, what is
// safe, and what to do. dir is the output directory.
func diskMessage(cmd, dir string, err error) (msg string, ok bool) {
	var what, todo string
	switch {
	case durable.DiskFull(err):
		what = "the disk is full (no space left on device)"
		free := ""
		if n, ok := freeBytes(dir); ok {
			free = fmt.Sprintf(" (%s free there now)", byteSize(n))
		}
		need := ""
		if se, ok := durable.Needed(err); ok && se.Size > 0 {
			need = fmt.Sprintf(" (writing %s needed at least %s: its %d bytes, the refused write's included)", se.Path, byteSize(uint64(se.Size)), se.Size)
		}
		todo = "free space on the disk of " + dir + free + need + " and run the same command again to resume"
	case durable.IOError(err):
		what = "an I/O error of the disk (EIO)"
		todo = "check the disk (the kernel log says more), then run the same command again: the failed commit is redone from the start"
	default:
		return "", false
	}
	where := ""
	if p := durable.FailedPath(err); p != "" {
		where = " at " + p
	}
	detail := strings.ReplaceAll(err.Error(), "\n", "\n    ")
	return fmt.Sprintf("trajflow %s: %s%s: the commit that met it is not counted, and no partial file stands under a final name; every file committed before is whole; %s\n  error: %s\n",
		cmd, what, where, todo, detail), true
}

// byteSize is n in bytes, KiB, MiB or GiB.
func byteSize(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}
