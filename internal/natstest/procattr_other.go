//go:build !linux

package natstest

import "syscall"

// childAttr returns nil: only Linux can tie a child's life to its parent.
func childAttr() *syscall.SysProcAttr { return nil }
