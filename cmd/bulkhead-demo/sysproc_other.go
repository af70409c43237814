//go:build unix && !linux

package main

import "syscall"

// sysProcAttr puts a child in its own process group. Without Linux's
// parent-death signal, a child outlives a demo that is killed with SIGKILL.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
