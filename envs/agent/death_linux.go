package agent

import "syscall"

// dieWithParent has the kernel kill the process when trajflow's thread
// that started it ends (trajflow exiting or killed).
func dieWithParent(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
