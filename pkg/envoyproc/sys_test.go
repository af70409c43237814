package envoyproc_test

import "syscall"

// syscallAlive reports nil if a process with pid exists.
func syscallAlive(pid int) error { return syscall.Kill(pid, 0) }

// syscallStop freezes the process with SIGSTOP.
func syscallStop(pid int) error { return syscall.Kill(pid, syscall.SIGSTOP) }
