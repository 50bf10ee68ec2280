package feed

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark-go/tidemark/vfs"
)

// stopAfter reads p with a Committed source until it has committed the
// first n lines (read further: the whole batch), then closes it without
// committing more, as a process killed mid-file leaves its pointer. It
// returns the epoch.
func stopAfter(t *testing.T, p string, n int) uint64 {
	t.Helper()
	s := open(t, p, Config{})
	g := s.waitLines(n)
	if err := s.Commit(g[n-1].Epoch, g[n-1].Position); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return g[0].Epoch
}

// takeCommit polls until n lines have arrived, committing every batch
// as a framework does, and returns them.
func (ts *tsrc) takeCommit(n int) []got {
	ts.t.Helper()
	var all []got
	end := time.Now().Add(deadline)
	for len(all) < n {
		if time.Now().After(end) {
			ts.t.Fatalf("got %d of %d lines before the deadline; status %+v\nlog:\n%s", len(all), n, ts.Status(), ts.log)
		}
		g, err := ts.poll()
		if err != nil {
			ts.t.Fatalf("poll: %v", err)
		}
		if len(g) == 0 {
			time.Sleep(time.Millisecond)
			continue
		}
		all = append(all, g...)
		last := g[len(g)-1]
		if err := ts.Commit(last.Epoch, last.Position); err != nil {
			ts.t.Fatal(err)
		}
	}
	return all
}

// wantLines checks that gs are the lines of content from byte offset from,
// with their positions, all in one epoch, and returns that epoch.
func wantLines(t *testing.T, what string, gs []got, content string, from int64) uint64 {
	t.Helper()
	rest := content[from:]
	pos := from
	for i, g := range gs {
		j := strings.IndexByte(rest, '\n')
		if j < 0 {
			t.Fatalf("%s: line %d %+v beyond the content", what, i, g)
		}
		pos += int64(j) + 1
		if g.Line != rest[:j] || g.Position != pos || g.Epoch != gs[0].Epoch {
			t.Fatalf("%s: line %d is %+v, want %q at %d in epoch %d", what, i, g, rest[:j], pos, gs[0].Epoch)
		}
		rest = rest[j+1:]
	}
	if strings.Contains(rest, "\n") {
		t.Fatalf("%s: %d lines, more were expected", what, len(gs))
	}
	return gs[0].Epoch
}

func rename(t *testing.T, from, to string) {
	t.Helper()
	if err := os.Rename(from, to); err != nil {
		t.Fatal(err)
	}
}

// TestRenamedAwayWhileStoppedIsFinished (D2): a source stopped before the
// end of its file (the tail not committed, as when killed), the file
// rotated by rename while it is stopped, a new file at the path: the
// restart finishes the renamed file from the pointer in the pointer's
// epoch, its unterminated last line dropped and reported, and only then,
// once its lines are committed, reads the new file from 0 under a new
// epoch. Every line of both generations is delivered once, in order.
func TestRenamedAwayWhileStoppedIsFinished(t *testing.T) {
	a := genLines("a", 0, 300) + "a-unterminated"
	b := genLines("b", 0, 100)
	p := input(t, a)
	epoch := stopAfter(t, p, 120)
	oldID := identityOf(t, p)
	rename(t, p, p+".1")
	write(t, p, b)

	s := open(t, p, Config{})
	// The renamed file's lines after the pointer, in the pointer's epoch.
	g := s.waitLines(180)
	if wantLines(t, "renamed file", g, a, 120*32) != epoch {
		t.Fatalf("the renamed file was not read in the pointer's epoch %d: %+v", epoch, g[0])
	}
	// Not committed yet: the source waits at the renamed file's end, and
	// the pointer still names it.
	for range 3 {
		if h, err := s.poll(); len(h) != 0 || err != nil {
			t.Fatalf("moved on before the renamed file's lines were committed: %+v %v", h, err)
		}
	}
	if st := s.Status(); st.State != StateBehind || !strings.Contains(st.Detail, "to be committed") || st.Epoch != epoch {
		t.Fatalf("status %+v", st)
	}
	if res := loadPointer(t, p); res.Record.Identity != oldID || res.Record.Epoch != epoch || res.Record.Position != 120*32 {
		t.Fatalf("pointer %+v", res.Record)
	}
	if err := s.Commit(epoch, g[len(g)-1].Position); err != nil {
		t.Fatal(err)
	}
	if res := loadPointer(t, p); res.Record.Identity != oldID || res.Record.Position != 300*32 {
		t.Fatalf("pointer %+v", res.Record)
	}
	// Then the new file, from 0, under a new epoch stored at once.
	g = s.takeCommit(100)
	if e := wantLines(t, "new file", g, b, 0); e <= epoch {
		t.Fatalf("new file in epoch %d, not above %d", e, epoch)
	}
	if h := s.drain(); len(h) != 0 {
		t.Fatalf("more lines: %+v", h)
	}
	res := loadPointer(t, p)
	if res.Record.Identity != identityOf(t, p) || res.Record.Epoch != g[0].Epoch || res.Record.Position != 100*32 {
		t.Fatalf("pointer %+v", res.Record)
	}
	st := s.Status()
	if st.Reopens[ReasonRenamedAway] != 1 || st.PartialDropped != 1 || len(s.rejects) != 1 ||
		s.rejects[0].Reason != RejectPartialDropped || s.rejects[0].Position != 300*32 || s.rejects[0].Length != int64(len("a-unterminated")) {
		t.Fatalf("status %+v, rejects %+v", st, s.rejects)
	}
	w := s.log.find(slog.LevelInfo, "renamed away while the source was stopped, with bytes after the start")
	if len(w) != 1 || attrs(w[0])["renamed"].String() != p+".1" {
		t.Fatalf("log:\n%s", s.log)
	}
}

// TestRenamedAwayTwiceWhileStopped: the file the pointer names was renamed
// twice (in.log → in.log.1 → in.log.2) while the source was stopped: it is
// found by its identity all the same.
func TestRenamedAwayTwiceWhileStopped(t *testing.T) {
	a := genLines("a", 0, 200)
	b := genLines("b", 0, 50)
	p := input(t, a)
	epoch := stopAfter(t, p, 64)
	rename(t, p, p+".1")
	rename(t, p+".1", p+".2")
	write(t, p, b)
	s := open(t, p, Config{})
	g := s.takeCommit(136 + 50)
	if wantLines(t, "renamed file", g[:136], a, 64*32) != epoch {
		t.Fatalf("epoch %d, want %d", g[0].Epoch, epoch)
	}
	if e := wantLines(t, "new file", g[136:], b, 0); e <= epoch {
		t.Fatalf("new file in epoch %d", e)
	}
	if w := s.log.find(slog.LevelInfo, "with bytes after the start"); len(w) != 1 || attrs(w[0])["renamed"].String() != p+".2" {
		t.Fatalf("log:\n%s", s.log)
	}
}

// TestRenamedAwayCrashWhileFinishing: the source is stopped again (killed)
// while it finishes the renamed file: the pointer still names that file,
// so the next start finds it again and goes on from the last commit. Once
// it has moved to the new file, the pointer names the new file: a restart
// then reads the new file on, and never the renamed one again.
func TestRenamedAwayCrashWhileFinishing(t *testing.T) {
	a := genLines("a", 0, 300)
	b := genLines("b", 0, 100)
	p := input(t, a)
	epoch := stopAfter(t, p, 100)
	rename(t, p, p+".1")
	write(t, p, b)

	s := open(t, p, Config{})
	g := s.waitLines(150)
	wantLines(t, "first restart", g[:150], a[:250*32], 100*32)
	if err := s.Commit(epoch, g[49].Position); err != nil { // 150 lines of a
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open(t, p, Config{})
	g = s.takeCommit(150)
	if wantLines(t, "second restart", g, a, 150*32) != epoch {
		t.Fatalf("epoch %d, want %d", g[0].Epoch, epoch)
	}
	g = s.waitLines(100)
	newEpoch := wantLines(t, "new file", g, b, 0)
	// Only the first 40 lines of the new file committed: the rest is
	// delivered again after the restart.
	if err := s.Commit(newEpoch, g[39].Position); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open(t, p, Config{})
	g = s.drain()
	if wantLines(t, "third restart", g, b, 40*32) != newEpoch {
		t.Fatalf("epoch %d, want %d", g[0].Epoch, newEpoch)
	}
	if len(s.log.find(slog.LevelInfo, "with bytes after the start")) != 0 {
		t.Fatalf("the renamed file was read again:\n%s", s.log)
	}
}

// TestRenamedAwayReadToItsEnd: a renamed file with nothing after the
// pointer delivers nothing again: the new file starts a new epoch at once.
func TestRenamedAwayReadToItsEnd(t *testing.T) {
	a := genLines("a", 0, 50)
	p := input(t, a)
	epoch := stopAfter(t, p, 50)
	rename(t, p, p+".1")
	write(t, p, genLines("b", 0, 10))
	s := open(t, p, Config{})
	g := s.drain()
	if len(g) != 10 || g[0].Line != "b-000000-xxxxxxxxxxxxxxxxxxxxxx" || g[0].Epoch <= epoch {
		t.Fatalf("%+v", g)
	}
	if len(s.log.find(slog.LevelInfo, "read to its end")) != 1 || s.Status().Reopens[ReasonRenamedAway] != 1 {
		t.Fatalf("log:\n%s", s.log)
	}
}

// TestRenamedAwayThenDeleted: a file rotated away and deleted while the
// source was stopped cannot be read: the new file is read from 0 under a
// new epoch, with the open table's warning.
func TestRenamedAwayThenDeleted(t *testing.T) {
	p := input(t, genLines("a", 0, 100))
	epoch := stopAfter(t, p, 30)
	rename(t, p, p+".1")
	// The new file first, so that it cannot get the old file's inode.
	write(t, p, genLines("b", 0, 10))
	if err := os.Remove(p + ".1"); err != nil {
		t.Fatal(err)
	}
	s := open(t, p, Config{})
	g := s.drain()
	if len(g) != 10 || g[0].Line != "b-000000-xxxxxxxxxxxxxxxxxxxxxx" || g[0].Epoch <= epoch {
		t.Fatalf("%+v", g)
	}
	if len(s.log.find(slog.LevelWarn, "does not match its pointer")) != 1 ||
		len(s.log.find(slog.LevelInfo, "no file in the input's folder has the identity")) != 1 {
		t.Fatalf("log:\n%s", s.log)
	}
}

// TestRenamedAwayIdentityReusedOtherContent: a file in the folder with the
// pointer's identity but other content (an inode reused, here the renamed
// file rewritten in place) is not read.
func TestRenamedAwayIdentityReusedOtherContent(t *testing.T) {
	p := input(t, genLines("a", 0, 100))
	epoch := stopAfter(t, p, 30)
	rename(t, p, p+".1")
	rewriteInPlace(t, p+".1", genLines("z", 0, 100))
	write(t, p, genLines("b", 0, 10))
	s := open(t, p, Config{})
	g := s.drain()
	if len(g) != 10 || g[0].Line != "b-000000-xxxxxxxxxxxxxxxxxxxxxx" || g[0].Epoch <= epoch {
		t.Fatalf("%+v", g)
	}
	if len(s.log.find(slog.LevelWarn, "but not its content")) != 1 {
		t.Fatalf("log:\n%s", s.log)
	}
}

// TestRenamedAwayNotOverACopy: the file at the path holds the bytes of the
// file the pointer names (a copy of it, with more lines), but that file is
// still in the folder under another name: it was renamed away, so the file
// at the path is another file, whatever it starts with. The renamed file is
// finished from the pointer in the pointer's epoch, then the file at the
// path read from 0 under a new epoch: its copied lines are delivered again
// (duplicates under a new epoch, never a gap). A writer that renames a
// copy over the path leaves the old file no name, and is read on (see
// TestCopyRenamedOverPathThenRotatedWhileStopped).
func TestRenamedAwayNotOverACopy(t *testing.T) {
	a := genLines("a", 0, 100)
	b := a + genLines("a", 100, 5)
	p := input(t, a)
	epoch := stopAfter(t, p, 30)
	rename(t, p, p+".old")
	write(t, p, b)
	s := open(t, p, Config{})
	g := s.takeCommit(70 + 105)
	if wantLines(t, "renamed file", g[:70], a, 30*32) != epoch {
		t.Fatalf("epoch %d, want %d", g[0].Epoch, epoch)
	}
	if e := wantLines(t, "file at the path", g[70:], b, 0); e <= epoch {
		t.Fatalf("the file at the path read in epoch %d, not a new one", e)
	}
	if len(s.log.find(slog.LevelInfo, "with bytes after the start")) != 1 {
		t.Fatalf("log:\n%s", s.log)
	}
}

// TestRenamedAwayScanBounded: a folder of more than maxRenamedScan entries
// (lowered to 20 here) is not scanned; the new file is read from 0 with a
// warning saying why. With 20 entries, it is.
func TestRenamedAwayScanBounded(t *testing.T) {
	p := input(t, genLines("a", 0, 100))
	stopAfter(t, p, 30)
	rename(t, p, p+".1")
	dir := filepath.Dir(p)
	for i := range 19 { // with in.log.1, in.log and the pointer: 22 entries
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("other-%05d", i)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	write(t, p, genLines("b", 0, 10))
	s := open(t, p, Config{})
	s.maxScan = 21
	if g := s.drain(); len(g) != 10 || g[0].Line != "b-000000-xxxxxxxxxxxxxxxxxxxxxx" {
		t.Fatalf("%+v", g)
	}
	if len(s.log.find(slog.LevelWarn, "too many entries")) != 1 {
		t.Fatalf("log:\n%s", s.log)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The pointer now names the new file: rotate once more, with the
	// folder one entry smaller.
	if err := os.Remove(filepath.Join(dir, "other-00000")); err != nil {
		t.Fatal(err)
	}
	stopAfter(t, p, 3)
	rename(t, p, p+".2")
	write(t, p, genLines("c", 0, 10))
	s = open(t, p, Config{})
	s.maxScan = 22
	if g := s.takeCommit(17); len(g) != 17 || g[0].Line != "b-000003-xxxxxxxxxxxxxxxxxxxxxx" || g[7].Line != "c-000000-xxxxxxxxxxxxxxxxxxxxxx" {
		t.Fatalf("%+v", g)
	}
}

// TestRenamedAwayThroughWrappedFS: through a wrapper of the operating
// system's file system (a fault injector), the renamed file is found too,
// and a failing read of it is returned by Poll and retried.
func TestRenamedAwayThroughWrappedFS(t *testing.T) {
	a := genLines("a", 0, 100)
	p := input(t, a)
	epoch := stopAfter(t, p, 30)
	rename(t, p, p+".1")
	write(t, p, genLines("b", 0, 10))
	fail := true
	fsys := vfs.Inject(vfs.Default(), func(op vfs.Op, name string) error {
		if fail && op == vfs.OpRead && name == p+".1" {
			return fmt.Errorf("injected")
		}
		return nil
	})
	s := open(t, p, Config{FS: fsys})
	if _, err := s.Poll(context.Background(), s.items); err == nil {
		t.Fatal("a failing read of the renamed file is not reported")
	}
	fail = false
	g := s.takeCommit(70 + 10)
	if wantLines(t, "renamed file", g[:70], a, 30*32) != epoch {
		t.Fatalf("epoch %d, want %d", g[0].Epoch, epoch)
	}
	wantLines(t, "new file", g[70:], genLines("b", 0, 10), 0)
}

// TestRenamedAwayPathMissingAtStart: started while the path names no file
// (rotated away, the new file not created yet), the source finishes the
// renamed file, then waits for the path; the new file is read from 0 under
// a new epoch.
func TestRenamedAwayPathMissingAtStart(t *testing.T) {
	a := genLines("a", 0, 100) + "a-partial"
	p := input(t, a)
	epoch := stopAfter(t, p, 10)
	rename(t, p, p+".1")
	s := open(t, p, Config{})
	g := s.takeCommit(90)
	if wantLines(t, "renamed file", g, a, 10*32) != epoch {
		t.Fatalf("epoch %d, want %d", g[0].Epoch, epoch)
	}
	waitUntil(t, "waiting for the path", func() bool {
		if h, err := s.poll(); len(h) != 0 || err != nil {
			t.Fatalf("%+v %v", h, err)
		}
		return s.Status().State == StateWaiting
	})
	if res := loadPointer(t, p); res.Record.Epoch != epoch || res.Record.Position != 100*32 {
		t.Fatalf("pointer %+v", res.Record)
	}
	b := genLines("b", 0, 20)
	write(t, p, b)
	g = s.takeCommit(20)
	if e := wantLines(t, "new file", g, b, 0); e <= epoch {
		t.Fatalf("new file in epoch %d", e)
	}
	if st := s.Status(); st.PartialDropped != 1 || st.Reopens[ReasonRenamedAway] != 1 {
		t.Fatalf("status %+v", st)
	}
	if len(s.log.find(slog.LevelInfo, "the path names no file")) != 1 {
		t.Fatalf("log:\n%s", s.log)
	}
}

// TestRenamedAwayPathMissingNothingLeft: started while the path names no
// file, the renamed file read to its end: the source just waits, and scans
// the folder once, not at every poll.
func TestRenamedAwayPathMissingNothingLeft(t *testing.T) {
	p := input(t, genLines("a", 0, 20))
	stopAfter(t, p, 20)
	rename(t, p, p+".1")
	var scans atomic.Int64
	fsys := vfs.Inject(vfs.Default(), func(op vfs.Op, name string) error {
		if op == vfs.OpOpen && name == filepath.Dir(p) {
			scans.Add(1)
		}
		return nil
	})
	s := open(t, p, Config{FS: fsys})
	for range 5 {
		if g := s.drain(); len(g) != 0 || s.Status().State != StateWaiting {
			t.Fatalf("%+v %+v", g, s.Status())
		}
	}
	if n := len(s.log.find(slog.LevelInfo, "with bytes after the start")) + len(s.log.find(slog.LevelInfo, "identity")); n != 0 || scans.Load() != 1 {
		t.Fatalf("%d folder scans; log:\n%s", scans.Load(), s.log)
	}
	write(t, p, genLines("b", 0, 5))
	if g := s.drain(); len(g) != 5 || g[0].Line != "b-000000-xxxxxxxxxxxxxxxxxxxxxx" {
		t.Fatalf("%+v", g)
	}
}

// TestRotationWaitsForOldLinesCommitted: a rotation noticed while running
// opens the new file (and stores its epoch) only once the lines delivered
// from the old file are committed. Killed while it waits, the pointer still
// names the old file: the restart finds it renamed and delivers its
// uncommitted lines again before the new file; nothing is skipped.
func TestRotationWaitsForOldLinesCommitted(t *testing.T) {
	a, b := genLines("a", 0, 50), genLines("b", 0, 10)
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprintf("crash=%v", crash), func(t *testing.T) {
			p := input(t, a)
			oldID := identityOf(t, p)
			s := open(t, p, Config{})
			g := s.drain()
			epoch := g[0].Epoch
			if err := s.Commit(epoch, g[19].Position); err != nil {
				t.Fatal(err)
			}
			rename(t, p, p+".1")
			write(t, p, b)
			for range 3 {
				if h, err := s.poll(); len(h) != 0 || err != nil {
					t.Fatalf("the new file was read before the old lines were committed: %+v %v", h, err)
				}
			}
			if st := s.Status(); st.State != StateBehind || !strings.Contains(st.Detail, "to be committed") {
				t.Fatalf("status %+v", st)
			}
			if res := loadPointer(t, p); res.Record.Identity != oldID || res.Record.Epoch != epoch || res.Record.Position != 20*32 {
				t.Fatalf("pointer %+v", res.Record)
			}
			if !crash {
				if err := s.Commit(epoch, g[49].Position); err != nil {
					t.Fatal(err)
				}
				if e := wantLines(t, "new file", s.takeCommit(10), b, 0); e <= epoch {
					t.Fatalf("new file in epoch %d", e)
				}
				return
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = open(t, p, Config{})
			g = s.takeCommit(30 + 10)
			if wantLines(t, "renamed file", g[:30], a, 20*32) != epoch {
				t.Fatalf("epoch %d, want %d", g[0].Epoch, epoch)
			}
			if e := wantLines(t, "new file", g[30:], b, 0); e <= epoch {
				t.Fatalf("new file in epoch %d", e)
			}
		})
	}
}
