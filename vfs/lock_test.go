package vfs_test

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/tidemark-go/tidemark/vfs"
)

// TestLockOneHolder: two opens of one file, in one process, cannot both
// hold its lock; the error names the file and, on Linux, this process;
// Close releases the lock, and locking again on the holder succeeds.
func TestLockOneHolder(t *testing.T) {
	fsys := vfs.Default()
	name := filepath.Join(t.TempDir(), "p")
	open := func() vfs.File {
		f, err := fsys.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	a, b := open(), open()
	defer b.Close()
	if err := a.Lock(); err != nil {
		t.Fatal(err)
	}
	if err := a.Lock(); err != nil {
		t.Fatalf("locking again on the holder: %v", err)
	}
	err := b.Lock()
	var le *vfs.LockedError
	if !errors.Is(err, vfs.ErrLocked) || !errors.As(err, &le) || le.Path != name || !strings.Contains(err.Error(), name) {
		t.Fatalf("second lock: %v", err)
	}
	if runtime.GOOS == "linux" && (le.PID != os.Getpid() || !strings.Contains(err.Error(), "(this process)")) {
		t.Fatalf("holder %d (%v), want this process %d", le.PID, err, os.Getpid())
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Lock(); err != nil {
		t.Fatalf("after the holder closed: %v", err)
	}
}

// TestLockInjected: a lock can be failed by injection like any operation.
func TestLockInjected(t *testing.T) {
	c := &vfs.Counter{Match: func(op vfs.Op, _ string) bool { return op == vfs.OpLock }, FailAt: 1}
	fsys := vfs.Inject(vfs.Default(), c.Injector())
	f, err := fsys.OpenFile(filepath.Join(t.TempDir(), "p"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Lock(); !errors.Is(err, vfs.ErrInjected.Err) {
		t.Fatalf("injected lock: %v", err)
	}
	if err := f.Lock(); err != nil || c.Count() != 2 {
		t.Fatalf("second lock: %v (count %d)", err, c.Count())
	}
}

func TestLockedErrorHolder(t *testing.T) {
	for _, c := range []struct {
		pid  int
		want string
	}{{0, "p is held by another process"}, {-1, "p is held by another process"}, {os.Getpid(), "(this process)"}, {1, "p is held by process 1"}} {
		if got := (&vfs.LockedError{Path: "p", PID: c.pid}).Error(); !strings.Contains(got, c.want) {
			t.Errorf("PID %d: %q, want %q", c.pid, got, c.want)
		}
	}
}
