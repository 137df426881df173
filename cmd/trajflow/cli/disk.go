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
		todo = "free space on the disk of " + dir + " and run the same command again to resume"
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
