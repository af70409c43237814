//go:build unix && !linux

package envoyproc

import "syscall"

// sysProcAttr puts Envoy in its own process group (so the group can be
// killed as a whole).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
