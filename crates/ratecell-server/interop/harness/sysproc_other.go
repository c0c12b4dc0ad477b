//go:build !linux

package harness

import "syscall"

// sysProcAttr puts a child in its own process group, so that stopping it
// stops what it forked.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
