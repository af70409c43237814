//go:build unix

package testkit

import "syscall"

var (
	stopSignal = syscall.SIGSTOP
	contSignal = syscall.SIGCONT
)
