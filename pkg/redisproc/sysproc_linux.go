package redisproc

import "syscall"

// sysProcAttr puts the server in its own process group and has the kernel
// SIGKILL it if the thread that started it dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
