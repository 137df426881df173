//go:build unix

package agent

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// ownGroup starts cmd in a process group of its own (its id is the
// process's), so that stopping the agent stops its children too; on
// Linux the agent is killed when trajflow dies (a kill -9 of trajflow
// leaves no agent calling a gateway that is gone: a resumed run redoes
// its rollout).
func ownGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	dieWithParent(cmd.SysProcAttr)
}

// terminate sends SIGTERM to the process group pgid.
func terminate(pgid int) { _ = syscall.Kill(-pgid, syscall.SIGTERM) } // best effort: the group may be gone

// kill sends SIGKILL to the process group pgid.
func kill(pgid int) { _ = syscall.Kill(-pgid, syscall.SIGKILL) } // best effort: the group may be gone

// groupAlive reports whether the process group pgid has a running member
// left. A zombie does not count: an orphan whose new parent does not reap
// it (a container's first process that is no init) stays one.
func groupAlive(pgid int) bool {
	if errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH) {
		return false
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return true // no /proc: the signal's answer is all there is
	}
	for _, p := range procs {
		if p.Name()[0] < '1' || p.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + p.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid pgrp ...
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(b[i+1:])
		if len(f) < 3 {
			continue
		}
		if g, err := strconv.Atoi(string(f[2])); err == nil && g == pgid && string(f[0]) != "Z" {
			return true
		}
	}
	return false
}

// stopGroup stops what is left of the group pgid once its leader was
// reaped: SIGTERM (unless termed, when it had one already), then SIGKILL
// at deadline if a member is still there.
func stopGroup(pgid int, termed bool, deadline time.Time) {
	if !groupAlive(pgid) {
		return
	}
	if !termed {
		terminate(pgid)
	}
	for time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		if !groupAlive(pgid) {
			return
		}
	}
	kill(pgid)
}
