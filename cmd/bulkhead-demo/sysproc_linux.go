package main

import "syscall"

// sysProcAttr puts a child in its own process group (Ctrl-C in the terminal
// reaches only the demo, which then stops the child in order) and has the
// kernel SIGKILL it if the demo dies first.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
