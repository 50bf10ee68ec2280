package feed

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-go/tidemark/vfs"
)

// logrotate shifts the rotated files of p one number up (.2 to .3, .1 to
// .2), renames p to .1 and makes an empty p: logrotate's create.
func logrotate(t *testing.T, p string) {
	t.Helper()
	for i := 9; i >= 1; i-- {
		from := fmt.Sprintf("%s.%d", p, i)
		if _, err := os.Stat(from); err == nil {
			if err := os.Rename(from, fmt.Sprintf("%s.%d", p, i+1)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.Rename(p, p+".1"); err != nil {
		t.Fatal(err)
	}
	write(t, p, "")
}

// rotateOnce returns an injector that runs rotate once, just before the
// first operation op on name (so, between the source's read of the
// folder's names and its stat of name, or between its listing and its
// open of name): a rotation at the worst moment, without timing.
func rotateOnce(op vfs.Op, name string, rotate func()) vfs.Injector {
	done := false
	return func(o vfs.Op, path string) error {
		if !done && o == op && filepath.Clean(path) == filepath.Clean(name) {
			done = true
			rotate()
		}
		return nil
	}
}

// TestRotatedListingRacedAtStart is the rotation model's loss (issue 16)
// as a sequence of file operations. The source stops part way through A;
// A is rotated to .2 and B, written meanwhile, to .1. At the restart the
// source lists the rotated files to find A, and logrotate shifts them at
// the worst moment:
//
//   - between the listing's read of the names and its stat of in.log.1: A
//     is in.log.3 by then, a name the listing never read, and in.log.2 is
//     B. A listing taken for the whole folder had no file with A's content;
//   - after the listing, between it and the open of in.log.2, A's name when
//     listed: the name holds B by then, which was taken for "not the
//     pointer's", and A was not looked for under its new name.
//
// Either way the source started on the empty file at the path under a new
// epoch: the rest of A and all of B were never read. Now the folder is
// listed until two listings agree, and a file renamed between the listing
// and its open makes the source list again: the rest of A, then B.
func TestRotatedListingRacedAtStart(t *testing.T) {
	for _, tc := range []struct {
		name string
		op   vfs.Op
		file string // the rotation runs before the first op on it
	}{
		{"between names and stat", vfs.OpStat, ".1"},
		{"between listing and open", vfs.OpOpen, ".2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "in.log")
			cfg := Config{Rotated: "in.log.*", RotateWait: time.Millisecond}
			write(t, p, genLines("A", 0, 100))
			s := open(t, p, cfg)
			if g := s.takeCommit(40); len(g) < 40 {
				t.Fatalf("got %d lines", len(g))
			}
			committed := s.Status().CommittedPosition
			s.Close()
			read := int(committed) / len(genLines("A", 0, 1))

			logrotate(t, p) // A is in.log.1
			appendTo(t, p, genLines("B", 0, 10))
			logrotate(t, p) // A is in.log.2, B in.log.1, in.log empty

			cfg.FS = vfs.Inject(vfs.Default(), rotateOnce(tc.op, p+tc.file, func() { logrotate(t, p) }))
			s = open(t, p, cfg)
			want := genLines("A", read, 100-read) + genLines("B", 0, 10)
			g := s.takeCommit(100 - read + 10)
			if got := strings.Join(lines(g), "\n") + "\n"; got != want {
				t.Fatalf("after the restart, got %d lines:\n%s\nwant the rest of A, then B\nlog:\n%s", len(g), got, s.log)
			}
			if more := s.collect(); len(more) != 0 {
				t.Fatalf("more lines than written: %v\nlog:\n%s", lines(more), s.log)
			}
		})
	}
}

// TestRotatedOpenRacedWhileRunning: the source is at the end of A, which
// was rotated (A in.log.1, B at the path, or rotated too). It lists the
// files, finds B next, and logrotate shifts them between that listing and
// its open of B's name: the name holds a newer file by then. Opening the
// name alone read that file instead of B, under a new epoch, and B was
// never read. The source now checks that the file it opened is the one
// listed (its identity), or that the path still names none when none was
// listed there, and lists again when it is not: A's rest, then B.
func TestRotatedOpenRacedWhileRunning(t *testing.T) {
	for _, tc := range []struct {
		name     string
		rotateB  bool   // B is rotated to .1 before the source looks
		openName string // the rotation runs before the first open of it
	}{
		{"next is a rotated file", true, ".1"},
		{"next is the path", false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "in.log")
			write(t, p, genLines("A", 0, 50))
			var inj vfs.Injector = func(vfs.Op, string) error { return nil }
			cfg := Config{Rotated: "in.log.*", RotateWait: time.Millisecond,
				FS: vfs.Inject(vfs.Default(), func(op vfs.Op, path string) error { return inj(op, path) })}
			s := open(t, p, cfg)
			if g := s.takeCommit(50); len(g) != 50 {
				t.Fatalf("got %d lines of A", len(g))
			}
			appendTo(t, p, genLines("A", 50, 5))
			logrotate(t, p) // A is in.log.1
			appendTo(t, p, genLines("B", 0, 10))
			if tc.rotateB {
				logrotate(t, p) // A is in.log.2, B in.log.1
			}
			inj = rotateOnce(vfs.OpOpen, p+tc.openName, func() { logrotate(t, p) })
			want := genLines("A", 50, 5) + genLines("B", 0, 10)
			g := s.takeCommit(15)
			if got := strings.Join(lines(g), "\n") + "\n"; got != want {
				t.Fatalf("got %d lines:\n%s\nwant the rest of A, then B\nlog:\n%s", len(g), got, s.log)
			}
			if more := s.collect(); len(more) != 0 {
				t.Fatalf("more lines than written: %v\nlog:\n%s", lines(more), s.log)
			}
		})
	}
}

// readAllOfA writes n lines of A to in.log in a new folder, reads and
// commits them all with a source following it with Rotated, and stops the
// source. It returns the path and the source's Config.
func readAllOfA(t *testing.T, n int, rotateWait time.Duration) (string, Config) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "in.log")
	cfg := Config{Rotated: "in.log.*", RotateWait: rotateWait}
	write(t, p, genLines("A", 0, n))
	s := open(t, p, cfg)
	if g := s.takeCommit(n); len(g) != n {
		t.Fatalf("got %d lines of A", len(g))
	}
	s.Close()
	return p, cfg
}

// TestRotatedNoFileAtPathKeepsTheFileOpen: the source stopped at the end
// of A, which was then rotated to .1 with no new file (nocreate). At the
// restart it finds A read to its end, and no file follows it. It waits;
// meanwhile B is made, written and rotated away, and C is made at the
// path. A source that had left A to wait for the path read C next, under a
// new epoch, and B was never read. It now keeps A open while no file
// follows it: B (found after A by A's identity), then C.
func TestRotatedNoFileAtPathKeepsTheFileOpen(t *testing.T) {
	p, cfg := readAllOfA(t, 20, time.Nanosecond)
	if err := os.Rename(p, p+".1"); err != nil { // nocreate
		t.Fatal(err)
	}
	s := open(t, p, cfg)
	for i := 0; ; i++ {
		g, err := s.poll()
		if err != nil {
			t.Fatal(err)
		}
		if len(g) != 0 {
			t.Fatalf("A again: %v", lines(g))
		}
		if st := s.Status(); st.State == StateWaiting || st.State == StateCaughtUp {
			break
		}
		if i == 1000 {
			t.Fatalf("the source does not settle: %+v\nlog:\n%s", s.Status(), s.log)
		}
	}
	write(t, p, genLines("B", 0, 10))
	logrotate(t, p) // B is in.log.1, A in.log.2, an empty file at the path
	appendTo(t, p, genLines("C", 0, 5))
	want := genLines("B", 0, 10) + genLines("C", 0, 5)
	g := s.takeCommit(15)
	if got := strings.Join(lines(g), "\n") + "\n"; got != want {
		t.Fatalf("got %d lines:\n%s\nwant B, then C\nlog:\n%s", len(g), got, s.log)
	}
	if more := s.collect(); len(more) != 0 {
		t.Fatalf("more lines than written: %v\nlog:\n%s", lines(more), s.log)
	}
}

// TestRotatedTruncatedThenRotatedWhileStopped: the source stopped at the
// end of A; while it was stopped A was truncated in place (a log reset),
// rotated away empty, and written after the rename (late writes, B), and a
// new file C was made at the path. The file the pointer names (by
// identity) no longer holds its content: it holds B. A source that found
// no file with the pointer's content read C only, and B was lost. It now
// reads the pointer's file from 0 under a new epoch (B), then C.
func TestRotatedTruncatedThenRotatedWhileStopped(t *testing.T) {
	p, cfg := readAllOfA(t, 30, time.Millisecond)
	if err := os.Truncate(p, 0); err != nil {
		t.Fatal(err)
	}
	logrotate(t, p) // the emptied A is in.log.1, C (empty) at the path
	appendTo(t, p+".1", genLines("B", 0, 10))
	appendTo(t, p, genLines("C", 0, 5))
	s := open(t, p, cfg)
	want := genLines("B", 0, 10) + genLines("C", 0, 5)
	g := s.takeCommit(15)
	if got := strings.Join(lines(g), "\n") + "\n"; got != want {
		t.Fatalf("got %d lines:\n%s\nwant B, then C\nlog:\n%s", len(g), got, s.log)
	}
	if more := s.collect(); len(more) != 0 {
		t.Fatalf("more lines than written: %v\nlog:\n%s", lines(more), s.log)
	}
}
