//go:build !linux

package bench

import "syscall"

// diesWithParent is Linux's only: elsewhere the soak's cleanup stops its
// processes.
func diesWithParent() *syscall.SysProcAttr { return nil }
