package harness

import "syscall"

// sysProcAttr puts a child in its own process group, so that stopping it
// stops what it forked, and has the kernel kill it if the test binary dies
// without running its cleanups (a go test -timeout panic, a killed run):
// no server outlives the tests that started it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
