//go:build !unix

package agent

import (
	"os"
	"os/exec"
	"time"
)

// ownGroup does nothing where there are no process groups: only the
// agent's own process is stopped.
func ownGroup(cmd *exec.Cmd) {}

func terminate(pid int) { kill(pid) }

func kill(pid int) {
	if p, err := os.FindProcess(pid); err == nil {
		_ = p.Kill() // best effort: the process may be gone
	}
}

func stopGroup(pid int, termed bool, deadline time.Time) {}
