package natstest

import "syscall"

// childAttr makes a child server die with the test process.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
