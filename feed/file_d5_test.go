package feed

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/tidemark-go/tidemark/feed/pointer"
	"github.com/tidemark-go/tidemark/vfs"
)

// pollUntil polls until a line past byte offset after has been delivered,
// and returns the lines.
func (ts *tsrc) pollUntil(after int64) []got {
	ts.t.Helper()
	var all []got
	for range 1000 {
		g, err := ts.poll()
		if err != nil {
			ts.t.Fatalf("poll: %v", err)
		}
		all = append(all, g...)
		if len(all) > 0 && all[len(all)-1].Position > after {
			return all
		}
	}
	ts.t.Fatalf("no line past %d delivered; status %+v\nlog:\n%s", after, ts.Status(), ts.log)
	return nil
}

// TestCopyRenamedOverPathThenRotatedWhileStopped (D5): a writer appends by
// writing a copy and renaming it over the path; the source reads on from the
// copy in the same epoch, and its pointer names the copy before any of the
// copy's lines is handed out, though no commit moved the position. The
// source is stopped with lines of the copy not committed, the copy is
// rotated away and a new file created at the path: the restart finds the
// copy by the identity the pointer names, delivers every line of it after
// the committed position in the same epoch, then the new file's lines.
func TestCopyRenamedOverPathThenRotatedWhileStopped(t *testing.T) {
	// Past the first 4096 bytes, which the pointer's fingerprint covers:
	// no store lengthens the fingerprint (naming the file read) by chance.
	a := genLines("a", 0, 200)
	b := a + genLines("a", 200, 200)
	c := genLines("c", 0, 50)
	p := input(t, a)

	s := open(t, p, Config{})
	g := s.waitLines(40)
	epoch, committed := g[0].Epoch, g[29].Position
	if err := s.Commit(epoch, committed); err != nil {
		t.Fatal(err)
	}
	idA := identityOf(t, p)

	replaceByRename(t, p, b)
	idB := identityOf(t, p)
	if idA == idB {
		t.Fatal("the copy has the identity of the file it replaced")
	}
	for _, l := range s.pollUntil(int64(len(a))) {
		if l.Epoch != epoch {
			t.Fatalf("line %+v: the copy must be read on in epoch %d", l, epoch)
		}
	}
	res, err := pointer.Open(p+pointer.Suffix, pointer.Options{}).Load()
	if err != nil {
		t.Fatal(err)
	}
	if want := (pointer.Record{Epoch: epoch, Position: committed, Identity: idB}); !res.Found ||
		res.Record.Epoch != want.Epoch || res.Record.Position != want.Position || res.Record.Identity != want.Identity {
		t.Fatalf("pointer %+v once the copy's lines are handed out, want epoch %d position %d identity %+v (the copy; the first file was %+v)",
			res.Record, epoch, committed, idB, idA)
	}
	if err := s.Close(); err != nil { // killed: the rest is not committed
		t.Fatal(err)
	}

	rename(t, p, p+".1")
	write(t, p, c)
	s2 := open(t, p, Config{})
	k := int(int64(len(b))-committed) / len(genLines("a", 0, 1))
	all := s2.takeCommit(k + 50)
	if e := wantLines(t, "the copy renamed away", all[:k], b, committed); e != epoch {
		t.Fatalf("the copy renamed away was read in epoch %d, want %d", e, epoch)
	}
	if e := wantLines(t, "the new file", all[k:], c, 0); e <= epoch {
		t.Fatalf("the new file was read in epoch %d, want a new one after %d", e, epoch)
	}
}

// TestCopyRenamedOverPathPointerWriteFails (D5): while the pointer naming
// the copy cannot be stored, none of the copy's lines is handed out; the
// failure is counted in Status, and the next Poll retries.
func TestCopyRenamedOverPathPointerWriteFails(t *testing.T) {
	a := genLines("a", 0, 200)
	b := a + genLines("a", 200, 10)
	p := input(t, a)
	var fail atomic.Bool
	fsys := vfs.Inject(vfs.Default(), func(op vfs.Op, name string) error {
		if fail.Load() && op == vfs.OpWrite && name == p+pointer.Suffix {
			return errors.New("injected pointer write failure")
		}
		return nil
	})
	s := open(t, p, Config{FS: fsys})
	g := s.waitLines(200)
	epoch, committed := g[0].Epoch, g[4].Position
	if err := s.Commit(epoch, committed); err != nil {
		t.Fatal(err)
	}
	fail.Store(true)
	replaceByRename(t, p, b)
	for range 3 {
		if g, err := s.poll(); len(g) != 0 || err != nil {
			t.Fatalf("poll while the pointer naming the copy cannot be stored: %d lines, %v", len(g), err)
		}
	}
	if st := s.Status(); st.CommitErrors == 0 || st.LastCommitError == "" {
		t.Fatalf("the failed store is not in the status: %+v", st)
	}
	fail.Store(false)
	g = s.waitLines(10)
	if e := wantLines(t, "the copy", g, b, int64(len(a))); e != epoch {
		t.Fatalf("the copy was read in epoch %d, want %d", e, epoch)
	}
	res := loadPointer(t, p)
	if res.Record.Identity != identityOf(t, p) || res.Record.Epoch != epoch || res.Record.Position != committed {
		t.Fatalf("pointer %+v, want the copy's identity %+v", res.Record, identityOf(t, p))
	}
	if st := s.Status(); st.LastCommitError != "" {
		t.Fatalf("the stored pointer leaves a commit error: %+v", st)
	}
}
