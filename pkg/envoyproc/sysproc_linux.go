package envoyproc

import "syscall"

// sysProcAttr puts Envoy in its own process group (so the group can be
// killed as a whole) and has the kernel SIGKILL it if our thread dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
