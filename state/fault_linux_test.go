package state

import (
	"os"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// TestBoltCommitFault hands bbolt its database file through
// Options.boltOpenFile and, at the chosen moment, turns that file into one
// that fails: its descriptor is replaced (dup3) by one of /dev/full, whose
// writes fail with ENOSPC (a full disk), or by a read-only descriptor of the
// same file, whose writes fail with EBADF. bbolt's next commit fails.
func TestBoltCommitFault(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func(path string) (*os.File, error)
	}{
		{"full disk", func(string) (*os.File, error) { return os.OpenFile("/dev/full", os.O_RDWR, 0) }},
		{"read-only file", func(path string) (*os.File, error) { return os.Open(path) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var f *os.File
			o := &Options{boltOpenFile: func(name string, flag int, perm os.FileMode) (*os.File, error) {
				file, err := os.OpenFile(name, flag, perm)
				mu.Lock()
				f = file
				mu.Unlock()
				return file, err
			}}
			on := func() {
				mu.Lock()
				defer mu.Unlock()
				bad, err := tc.open(f.Name())
				if err != nil {
					t.Fatal(err)
				}
				defer bad.Close()
				if err := unix.Dup3(int(bad.Fd()), int(f.Fd()), unix.O_CLOEXEC); err != nil {
					t.Fatal(err)
				}
			}
			faultRun(t, backends()[0], t.TempDir(), o, on)
		})
	}
}
