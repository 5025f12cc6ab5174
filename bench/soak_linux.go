package bench

import "syscall"

// diesWithParent has a process of the soak killed when the process that
// started it dies, cleanup or not (a test's timeout panics past it).
func diesWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
