package analyze

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// removeStaleStaging removes the staging directories (prefix + PID + "-"
// + random) that a merge killed before its rename left in dir: those
// whose process is gone. One of a merge still running is left alone.
func removeStaleStaging(dir, prefix string) {
	matches, _ := filepath.Glob(filepath.Join(dir, prefix+"*"))
	for _, m := range matches {
		rest := strings.TrimPrefix(filepath.Base(m), prefix)
		pidText, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if ok && err == nil && pid > 0 && processAlive(pid) {
			continue
		}
		_ = os.RemoveAll(m)
	}
}

// processAlive reports whether a process of that id exists.
func processAlive(pid int) bool {
	if pid == os.Getpid() {
		return true
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
