//go:build unix

package state

import (
	"syscall"
	"testing"
	"time"
)

// TestCloseReleasesLockHeldByACopy: Close lets the folder go even while
// another descriptor of its LOCK file's open file exists, as a child the
// program starts holds one between its fork and its exec (a store closed
// and opened again while the program starts processes was refused as
// "locked by another process"). The copy is made with dup(2), which is
// what fork does.
func TestCloseReleasesLockHeldByACopy(t *testing.T) {
	forEachLocalBackend(t, func(t *testing.T, be backend) {
		dir := t.TempDir()
		s := mustOpen(t, be, dir, testOpts())
		cp, err := syscall.Dup(int(s.(*nsStore).c.lock.f.Fd()))
		if err != nil {
			t.Fatal(err)
		}
		defer syscall.Close(cp)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		o := testOpts()
		o.LockTimeout = 20 * time.Millisecond
		s, err = be.open(dir, o)
		if err != nil {
			t.Fatalf("open after Close, while a copy of the lock's descriptor is open: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	})
}
