//go:build !linux

package testkit

import "syscall"

func childAttr() *syscall.SysProcAttr { return nil }
