package vfs_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/tidemark-go/tidemark/vfs"
)

func TestDefaultRoundTrip(t *testing.T) {
	fsys := vfs.Default()
	dir := t.TempDir()
	name := filepath.Join(dir, "a")
	f, err := fsys.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	if err := f.Datasync(); err != nil {
		t.Fatalf("datasync: %v", err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("sync: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := vfs.RenameDurable(fsys, name, filepath.Join(dir, "b")); err != nil {
		t.Fatal(err)
	}
	r, err := fsys.Open(filepath.Join(dir, "b"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil || string(b) != "hello\n" {
		t.Fatalf("read back %q, %v", b, err)
	}
	if _, err := fsys.Stat(name); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("old name still there after rename: %v", err)
	}
}

// TestCounterFailsTheNthMatchingOperation: only the chosen operation fails,
// the failed write writes nothing, and Sticky fails every later one.
func TestCounterFailsTheNthMatchingOperation(t *testing.T) {
	for _, sticky := range []bool{false, true} {
		dir := t.TempDir()
		c := &vfs.Counter{
			Match:  func(op vfs.Op, _ string) bool { return op == vfs.OpWrite },
			FailAt: 2,
			Sticky: sticky,
			Err:    vfs.ErrNoSpace,
		}
		fsys := vfs.Inject(vfs.Default(), c.Injector())
		name := filepath.Join(dir, "f")
		f, err := fsys.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		var errs []error
		for _, s := range []string{"1", "2", "3"} {
			_, err := f.Write([]byte(s))
			errs = append(errs, err)
		}
		if err := f.Datasync(); err != nil {
			t.Fatalf("a sync does not match the counter: %v", err)
		}
		f.Close()
		if errs[0] != nil || !errors.Is(errs[1], syscall.ENOSPC) {
			t.Fatalf("sticky=%v: errors %v", sticky, errs)
		}
		var pe *os.PathError
		if !errors.As(errs[1], &pe) || pe.Path != name || pe.Op != string(vfs.OpWrite) {
			t.Fatalf("the error does not name the operation and file: %v", errs[1])
		}
		want := "13"
		if sticky {
			want = "1"
			if !errors.Is(errs[2], syscall.ENOSPC) {
				t.Fatalf("sticky: third write succeeded")
			}
		} else if errs[2] != nil {
			t.Fatalf("not sticky: third write failed: %v", errs[2])
		}
		b, _ := os.ReadFile(name)
		if string(b) != want {
			t.Fatalf("sticky=%v: file holds %q, want %q", sticky, b, want)
		}
		if c.Count() != 3 {
			t.Fatalf("count %d, want 3", c.Count())
		}
	}
}

func TestInjectEveryOperation(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "f")
	if err := os.WriteFile(name, []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var fail vfs.Op
	fsys := vfs.Inject(vfs.Default(), func(op vfs.Op, _ string) error {
		if op == fail {
			return vfs.ErrInjected
		}
		return nil
	})
	f, err := fsys.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ops := map[vfs.Op]func() error{
		vfs.OpOpen:     func() error { _, err := fsys.Open(name); return err },
		vfs.OpRead:     func() error { _, err := f.ReadAt(make([]byte, 1), 0); return err },
		vfs.OpWrite:    func() error { _, err := f.WriteAt([]byte("y"), 0); return err },
		vfs.OpSync:     f.Sync,
		vfs.OpTruncate: func() error { return f.Truncate(1) },
		vfs.OpRename:   func() error { return fsys.Rename(name, name+".2") },
		vfs.OpRemove:   func() error { return fsys.Remove(name) },
		vfs.OpStat:     func() error { _, err := fsys.Stat(name); return err },
		vfs.OpMkdir:    func() error { return fsys.MkdirAll(filepath.Join(dir, "d"), 0o755) },
		vfs.OpSyncDir:  func() error { return fsys.SyncDir(dir) },
	}
	for op, call := range ops {
		fail = op
		if err := call(); !errors.Is(err, syscall.EIO) {
			t.Errorf("%s with a fault injected: %v, want EIO", op, err)
		}
	}
	if _, err := os.Stat(name); err != nil {
		t.Fatalf("a failed remove or rename changed the file: %v", err)
	}
	fail = ""
	if err := f.Datasync(); err != nil {
		t.Fatal(err)
	}
}
