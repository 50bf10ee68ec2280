package vfs

import (
	"errors"
	"os"

	"golang.org/x/sys/windows"
)

// lockOffset is where the locked byte range starts: far beyond any data,
// since Windows locks are mandatory and would otherwise stop other handles
// (this process's own included) from reading and writing the file.
const lockOffset = 1 << 62

func (f *osFile) Lock() error {
	ol := &windows.Overlapped{Offset: uint32(lockOffset & 0xffffffff), OffsetHigh: uint32(lockOffset >> 32)}
	err := windows.LockFileEx(windows.Handle(f.Fd()), windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, ol)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, windows.ERROR_LOCK_VIOLATION):
		return &LockedError{Path: f.Name()}
	}
	return &os.PathError{Op: "lock", Path: f.Name(), Err: err}
}
