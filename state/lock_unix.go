//go:build unix

package state

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// dirLock is the OS lock a process holds on a store directory's LOCK file
// while it has the store open: taken before STORE is read or written,
// released by Close. It is an flock(2) lock, so the kernel releases it
// when the process dies, however it dies.
type dirLock struct{ f *os.File }

// lockDir takes the lock of dir, waiting up to timeout for another holder
// to release it.
func lockDir(dir string, timeout time.Duration) (*dirLock, error) {
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open store %s: lock %s: %w", dir, path, err)
	}
	deadline := time.Now().Add(timeout)
	wait := time.Millisecond
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		switch {
		case err == nil:
			return &dirLock{f: f}, nil
		case errors.Is(err, unix.EINTR):
			continue
		case !errors.Is(err, unix.EWOULDBLOCK):
			f.Close()
			return nil, fmt.Errorf("open store %s: lock %s: %w", dir, path, err)
		case !time.Now().Before(deadline):
			holder := lockHolder(f)
			f.Close()
			return nil, fmt.Errorf("open store %s: %s has it open (its lock on %s, waited %v); a store belongs to one process at a time: stop that process, or give this one another folder: %w",
				dir, holder, path, timeout, ErrLocked)
		}
		time.Sleep(min(wait, time.Until(deadline)))
		wait = min(2*wait, 50*time.Millisecond)
	}
}

// release lets the lock go. A nil lock is none.
func (l *dirLock) release() error {
	if l == nil || l.f == nil {
		return nil
	}
	// Unlock before closing: the flock belongs to the open file, and a
	// child the program is starting holds a copy of every descriptor
	// between its fork and its exec, so closing ours alone can leave the
	// folder locked for a moment (long enough, on a loaded machine, for an
	// Open right after Close to be refused).
	// The unlock is best effort: closing releases the lock too, once no
	// copy is left.
	_ = unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
	err := l.f.Close()
	l.f = nil
	return err
}

// lockHolder names the process that holds the lock on f's file, as far as
// the system tells.
func lockHolder(f *os.File) string {
	pid, ok := lockHolderPID(f)
	switch {
	case !ok:
		return "another process"
	case pid == os.Getpid():
		return fmt.Sprintf("this process (pid %d: the store is open already; close it first)", pid)
	}
	return fmt.Sprintf("process %d", pid)
}
