//go:build unix

package vfs_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/tidemark-go/tidemark/vfs"
)

// TestCloseReleasesLockHeldByACopy: Close lets the lock go even while
// another descriptor of the same open file exists. A child the program
// starts (os/exec) holds such a copy between its fork and its exec, and a
// child given the file keeps one for its life; the lock must not stay with
// it. The copy is made here with dup(2), which is what fork does.
func TestCloseReleasesLockHeldByACopy(t *testing.T) {
	fsys := vfs.Default()
	name := filepath.Join(t.TempDir(), "p")
	a, err := fsys.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Lock(); err != nil {
		t.Fatal(err)
	}
	fd, ok := a.(interface{ Fd() uintptr })
	if !ok {
		t.Fatalf("%T has no Fd", a)
	}
	cp, err := syscall.Dup(int(fd.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(cp)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := fsys.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Lock(); err != nil {
		t.Fatalf("lock after Close, while a copy of the closed descriptor is open: %v", err)
	}
}
