package feed

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tidemark-go/tidemark/feed/pointer"
)

// readOnlyFolder makes dir read-only for this process until the test ends:
// a read-only bind mount of it onto itself as root (whom permissions do not
// stop), else its permissions.
func readOnlyFolder(t *testing.T, dir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(dir, 0o755) })
		return
	}
	if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
		t.Fatalf("bind mount %s (to make it read-only as root): %v", dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	if err := syscall.Mount("", dir, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
		t.Fatalf("remount %s read-only: %v", dir, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "probe"), nil, 0o644); err == nil {
		t.Fatalf("%s is still writable: the test would test nothing", dir)
	}
}

// TestPointerDirReadOnlyInputFolder: an input in a read-only folder is
// followed with a pointer folder elsewhere; without one the source fails
// at start, saying it cannot make its pointer file and what to do.
func TestPointerDirReadOnlyInputFolder(t *testing.T) {
	in := t.TempDir()
	p := filepath.Join(in, "in.log")
	write(t, p, genLines("a", 0, 10))
	readOnlyFolder(t, in)

	_, err := NewFileSource(Config{Path: p})
	if err == nil || !strings.Contains(err.Error(), p+pointer.Suffix) || !strings.Contains(err.Error(), "PointerDir") || !errors.Is(err, syscall.EROFS) && !errors.Is(err, syscall.EACCES) {
		t.Fatalf("beside a read-only input: %v", err)
	}

	dir := filepath.Join(t.TempDir(), "pointers")
	s := open(t, p, Config{PointerDir: dir})
	g := s.drain()
	if len(g) != 10 {
		t.Fatalf("%d lines", len(g))
	}
	if err := s.Commit(g[5].Epoch, g[5].Position); err != nil {
		t.Fatal(err)
	}
	if st := s.Status(); st.CommitErrors != 0 || st.CommittedPosition != 6*32 {
		t.Fatalf("status %+v", st)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, p, Config{PointerDir: dir})
	if g := s.drain(); len(g) != 4 || g[0].Position != 7*32 {
		t.Fatalf("restart: %+v", g)
	}
}
