package testkit

import "syscall"

// childAttr makes a server the tests start die with the test process, so
// that a test killed before its cleanups (a panic, a time-out) leaves no
// server behind.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
