//go:build unix

package vfs

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

func (f *osFile) Lock() error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		switch {
		case err == nil:
			f.locked.Store(true)
			return nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EWOULDBLOCK):
			return &LockedError{Path: f.Name(), PID: lockHolder(f.File)}
		}
		return &os.PathError{Op: "flock", Path: f.Name(), Err: err}
	}
}

// Close unlocks the file if Lock took its lock, then closes it. The flock
// belongs to the open file, not to the descriptor: a child the program is
// starting holds a copy of every descriptor between its fork and its exec
// (and a child given the file holds one for its life), so closing this
// descriptor alone would leave the lock with the copy. A file never locked
// through this File holds no lock of this open file (flock locks are per
// open file): its Close makes no flock call, which a file set of a thousand
// inputs, each opened and closed, spares a thousand times. The unlock is
// best effort (a file system without flock refuses it, and closing
// releases the lock too once no copy is left).
func (f *osFile) Close() error {
	if f.locked.Load() {
		if rc, err := f.SyscallConn(); err == nil {
			_ = rc.Control(func(fd uintptr) { _ = unix.Flock(int(fd), unix.LOCK_UN) })
		}
	}
	return f.File.Close()
}
