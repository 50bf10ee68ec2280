//go:build unix

package feed

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tidemark-go/tidemark/feed/pointer"
	"github.com/tidemark-go/tidemark/vfs"
)

// mkfifo makes a FIFO at path.
func mkfifo(t *testing.T, path string) {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Fatalf("mkfifo %s: %v", path, err)
	}
}

// releaseFIFO opens the FIFO at path for reading and writing (which never
// blocks on Linux) and closes it again, so that an open blocked on it
// returns: a regression must fail the test, not hang it.
func releaseFIFO(path string) {
	if f, err := os.OpenFile(path, os.O_RDWR, 0); err == nil {
		f.Close()
	}
}

// wantNotRegular checks that err wraps ErrNotRegular and names path and
// kind.
func wantNotRegular(t *testing.T, err error, path, kind string) {
	t.Helper()
	if !errors.Is(err, ErrNotRegular) {
		t.Fatalf("err %v, want ErrNotRegular", err)
	}
	if msg := err.Error(); !strings.Contains(msg, path) || !strings.Contains(msg, kind) || !strings.Contains(msg, "regular file") {
		t.Fatalf("error %q does not name %s and %q", msg, path, kind)
	}
}

// noPointerBeside fails the test when a pointer file (or its temporary
// file) exists for input.
func noPointerBeside(t *testing.T, input string) {
	t.Helper()
	for _, p := range []string{input + pointer.Suffix, input + pointer.Suffix + pointer.TempSuffix} {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s exists (%v): no pointer file may be made for an input that is not a regular file", p, err)
		}
	}
}

// TestNotRegularRefusedAtNew: an input path that names a FIFO, a device, a
// socket or a directory, directly or through a symbolic link, is refused by
// NewFileSource, for every strategy, without blocking and without a
// pointer file.
func TestNotRegularRefusedAtNew(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.log")
	mkfifo(t, fifo)
	link := filepath.Join(dir, "link-to-fifo.log")
	if err := os.Symlink(fifo, link); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "folder.log")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	// A socket path must be short (108 bytes on Linux).
	sdir, err := os.MkdirTemp("", "tm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sdir) })
	sock := filepath.Join(sdir, "s")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	cases := []struct{ path, kind string }{
		{fifo, "FIFO"},
		{link, "FIFO"},
		{"/dev/zero", "character device"},
		{sub, "directory"},
		{sock, "socket"},
	}
	for _, c := range cases {
		for _, strat := range []ReadStrategy{Committed, Earliest, OnceEarliest, Latest, OnceLatest} {
			var err error
			bounded(t, "NewFileSource on "+c.path, func() { releaseFIFO(fifo) }, func() {
				var s *FileSource
				s, err = NewFileSource(Config{Path: c.path, Strategy: strat})
				if s != nil {
					s.Close()
				}
			})
			wantNotRegular(t, err, c.path, c.kind)
		}
		if c.path != "/dev/zero" {
			noPointerBeside(t, c.path)
		}
	}
}

// TestNotRegularRefusedAtOpen: a path that comes to name a FIFO, or a
// directory, after the source was made is refused at the open by Poll,
// which returns at once, and again at the next Poll. Replaced by a regular
// file, the input is read.
func TestNotRegularRefusedAtOpen(t *testing.T) {
	for _, kind := range []string{"FIFO", "directory"} {
		t.Run(kind, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "in.log")
			s := open(t, p, Config{})
			if g, err := s.poll(); err != nil || len(g) != 0 || s.Status().State != StateWaiting {
				t.Fatalf("missing input: %v %v %+v", g, err, s.Status())
			}
			if kind == "FIFO" {
				mkfifo(t, p)
			} else if err := os.Mkdir(p, 0o755); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				var err error
				bounded(t, "Poll on a "+kind, func() { releaseFIFO(p) }, func() { _, err = s.poll() })
				wantNotRegular(t, err, p, kind)
			}
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			write(t, p, "a\nb\n")
			if g := s.drain(); strings.Join(lines(g), ",") != "a,b" {
				t.Fatalf("after the fix: %v", g)
			}
		})
	}
}

// TestNotRegularRaceAfterStat: a path that names a FIFO by the time it is
// opened, after a stat that did not see it, is opened without blocking and
// refused by the check of the opened file.
func TestNotRegularRaceAfterStat(t *testing.T) {
	p := filepath.Join(t.TempDir(), "in.log")
	mkfifo(t, p)
	// The stat of the path says there is no file, as if the FIFO were
	// made between the stat and the open.
	fsys := vfs.Inject(vfs.Default(), func(op vfs.Op, name string) error {
		if op == vfs.OpStat && name == p {
			return fs.ErrNotExist
		}
		return nil
	})
	s, err := NewFileSource(Config{Path: p, FS: fsys, Strategy: Earliest})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	bounded(t, "Poll on a FIFO the stat did not see", func() { releaseFIFO(p) }, func() {
		_, err = s.Poll(context.Background(), make([]Item, 4))
	})
	wantNotRegular(t, err, p, "FIFO")
}

// TestSymlinkToRegularAccepted: a symbolic link to a regular file is read
// as the file; its pointer file is named after the link.
func TestSymlinkToRegularAccepted(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "data.csv")
	write(t, target, "a\nb\n")
	link := filepath.Join(dir, "in.log")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	s := open(t, link, Config{})
	g := s.drain()
	if strings.Join(lines(g), ",") != "a,b" {
		t.Fatalf("lines %v", g)
	}
	if err := s.Commit(g[1].Epoch, g[1].Position); err != nil {
		t.Fatal(err)
	}
	if res := loadPointer(t, link); !res.Found || res.Record.Position != 4 {
		t.Fatalf("pointer of the link: %+v", res)
	}
}
