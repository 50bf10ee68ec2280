//go:build unix

package vfs

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

func (f osFile) Lock() error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EWOULDBLOCK):
			return &LockedError{Path: f.Name(), PID: lockHolder(f.File)}
		}
		return &os.PathError{Op: "flock", Path: f.Name(), Err: err}
	}
}
