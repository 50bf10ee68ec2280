package feed

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/tidemark-go/tidemark/vfs"
)

// This file holds the race found by the rotation model (torture): the
// input truncated and written again past the offset read after the source
// last looked at the bytes before that offset and before its next read of
// the file. The read then returns the new content's bytes at old offsets.

// beforeRead runs a function once, just before the next sequential read
// (the source's reads of new bytes, not its ReadAt checks) of the file at
// a path: a writer that acts in the window between a source's check and
// its read.
type beforeRead struct {
	vfs.FS
	path string
	mu   sync.Mutex
	hook func()
	// failCheck fails the first ReadAt after the next Read: the look at
	// the bytes before what the read returned.
	failCheck, failing bool
	// readAts counts ReadAt calls down to the one atReadAt runs before,
	// of files opened from open number fromOpen on.
	readAts  int
	atReadAt func()
	opens    int
	fromOpen int
}

// armReadAt makes fn run before the n-th ReadAt of the input from now; of
// a file opened from now on only, with newOnly.
func (b *beforeRead) armReadAt(n int, newOnly bool, fn func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.readAts, b.atReadAt, b.fromOpen = n, fn, 0
	if newOnly {
		b.fromOpen = b.opens + 1
	}
}

// arm makes fn run before the next Read of the input.
func (b *beforeRead) arm(fn func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.hook = fn
}

// readAtFired reports whether the function armReadAt armed has run.
func (b *beforeRead) readAtFired() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.atReadAt == nil
}

// fired reports whether the armed function has run.
func (b *beforeRead) fired() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.hook == nil
}

func (b *beforeRead) Open(name string) (vfs.File, error) {
	return b.OpenFile(name, os.O_RDONLY, 0)
}

func (b *beforeRead) OpenFile(name string, flag int, perm fs.FileMode) (vfs.File, error) {
	f, err := b.FS.OpenFile(name, flag, perm)
	if err != nil || name != b.path || flag&(os.O_WRONLY|os.O_RDWR) != 0 {
		return f, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.opens++
	return &beforeReadFile{File: f, b: b, open: b.opens}, nil
}

type beforeReadFile struct {
	vfs.File
	b    *beforeRead
	open int // the file's open number
}

func (f *beforeReadFile) Read(p []byte) (int, error) {
	f.b.mu.Lock()
	fn := f.b.hook
	f.b.hook = nil
	if f.b.failCheck {
		f.b.failCheck, f.b.failing = false, true
	}
	f.b.mu.Unlock()
	if fn != nil {
		fn()
	}
	return f.File.Read(p)
}

func (f *beforeReadFile) ReadAt(p []byte, off int64) (int, error) {
	f.b.mu.Lock()
	fail := f.b.failing
	f.b.failing = false
	var fn func()
	if f.b.atReadAt != nil && f.open >= f.b.fromOpen {
		if f.b.readAts--; f.b.readAts == 0 {
			fn, f.b.atReadAt = f.b.atReadAt, nil
		}
	}
	f.b.mu.Unlock()
	if fn != nil {
		fn()
	}
	if fail {
		return 0, vfs.ErrInjected
	}
	return f.File.ReadAt(p, off)
}

// TestRewrittenBetweenCheckAndRead: the input truncated (by copytruncate,
// or in place) and filled again past the offset read, in the window
// between the source's look at the bytes before its offset and its read
// of the bytes after it: mid-file, where a poll goes on after a full
// batch, and at the end of the file, where the source has found new bytes.
// No line of the new content may be delivered at an old position in the
// old epoch: the new content is read from 0 under a new epoch, after,
// with Rotated and a copy, the old content's unread lines in the old
// epoch. Before the fix, the read handed out the new content from the old
// offset: a fragment, and the new content's first lines never delivered.
func TestRewrittenBetweenCheckAndRead(t *testing.T) {
	old := genLines("a", 0, 4000)   // 128,000 bytes: twice the read buffer
	fresh := genLines("b", 0, 5000) // 160,000 bytes: past any offset read
	more := genLines("a", 4000, 20) // appended to the old content at its end
	for _, tc := range []struct {
		name   string
		atEnd  bool // the source has read the old content to its end
		copied bool // copytruncate with Rotated (else a rewrite in place)
	}{
		{"mid-file, copytruncate", false, true},
		{"mid-file, in place", false, false},
		{"at the end, copytruncate", true, true},
		{"at the end, in place", true, false},
	} {
		for _, group := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, group commit %v", tc.name, group), func(t *testing.T) {
				p := input(t, old)
				hook := &beforeRead{FS: vfs.Default(), path: p}
				cfg := Config{FS: hook, GroupCommit: group}
				if tc.copied {
					cfg = rotatedConfig()
					cfg.FS, cfg.GroupCommit = hook, group
				}
				s := open(t, p, cfg)
				var first []got
				if tc.atEnd {
					first = s.collect()
					appendTo(t, p, more)
				} else {
					first = s.takeCommit(64) // mid-file: the buffer runs out later
				}
				rotate := func() {
					if tc.copied {
						copyTruncate(t, p, p+".1")
						appendTo(t, p, fresh)
					} else {
						rewriteInPlace(t, p, fresh)
					}
				}
				hook.arm(rotate)
				all := append(first, s.collect()...)
				if !hook.fired() {
					t.Fatal("the source never read the input again")
				}
				switch {
				case tc.copied && tc.atEnd:
					wantGenerations(t, all, 0, old+more, fresh)
				case tc.copied:
					wantGenerations(t, all, 0, old, fresh)
				default:
					// In place, the old content's unread lines are gone:
					// the old epoch's lines are a prefix of it, then the
					// new content whole, from 0, in a new epoch.
					i := 0
					for i < len(all) && all[i].Epoch == all[0].Epoch {
						i++
					}
					whole := old
					if tc.atEnd {
						whole += more
					}
					if end := all[i-1].Position; end > int64(len(whole)) {
						t.Fatalf("the old epoch delivered lines up to %d, past the old content's %d bytes: the new content's lines at old positions", end, len(whole))
					}
					wantLines(t, "the old content", all[:i], whole[:all[i-1].Position], 0)
					if i == len(all) {
						t.Fatal("the new content was not read")
					}
					wantLines(t, "the new content", all[i:], fresh, 0)
				}
			})
		}
	}
}

// TestReadCheckFails: the look at the bytes before a read's bytes fails
// (an I/O error): the bytes read are taken back, not framed, and the next
// poll reads them again. Every line comes once, in order, in one epoch.
func TestReadCheckFails(t *testing.T) {
	old := genLines("a", 0, 4000) // twice the read buffer: a second read
	for _, group := range []bool{false, true} {
		t.Run(fmt.Sprintf("group commit %v", group), func(t *testing.T) {
			p := input(t, old)
			hook := &beforeRead{FS: vfs.Default(), path: p}
			s := open(t, p, Config{FS: hook, GroupCommit: group})
			all := s.takeCommit(64)
			hook.mu.Lock()
			hook.failCheck = true
			hook.mu.Unlock()
			errs := 0
			for range 10000 {
				g, err := s.poll()
				if err != nil {
					if !errors.Is(err, vfs.ErrInjected) || !strings.Contains(err.Error(), "before offset") {
						t.Fatalf("poll: %v", err)
					}
					errs++
					continue
				}
				all = append(all, g...)
				if len(g) > 0 {
					if err := s.Commit(g[len(g)-1].Epoch, g[len(g)-1].Position); err != nil {
						t.Fatal(err)
					}
				} else if st := s.Status(); st.State == StateCaughtUp {
					break
				}
			}
			hook.mu.Lock()
			armed := hook.failCheck || hook.failing
			hook.mu.Unlock()
			if armed {
				t.Fatal("the source never looked at the bytes before a read")
			}
			wantGenerations(t, all, 0, old)
			t.Logf("%d polls failed", errs)
		})
	}
}

// TestRewrittenBetweenOpenAndFirstRead: the input truncated (by
// copytruncate, or in place) and filled again after the source opened it
// and decided where to read (its first bytes fingerprinted, compared with
// the pointer) and before its first read, at 0: there are no bytes before
// the offset to look at, so the first read is checked against the first
// bytes fingerprinted at the open. The rotation model found this one: a
// consumer restarted after a kill, its pointer at 0 (the lines it had
// delivered not committed), read the new content at 0 in the old epoch,
// where a store that had applied the old lines would skip the new ones,
// and the copy's lines were never read.
func TestRewrittenBetweenOpenAndFirstRead(t *testing.T) {
	old := genLines("a", 0, 300)   // 9,600 bytes: a fingerprint of 4,096
	fresh := genLines("b", 0, 200) // 6,400 bytes
	for _, tc := range []struct {
		name    string
		resumed bool // a pointer at 0 in the old epoch (else none)
		copied  bool // copytruncate with Rotated (else a rewrite in place)
		empty   bool // nothing written after the copytruncate
	}{
		{"resumed, copytruncate", true, true, false},
		{"resumed, in place", true, false, false},
		{"first start, copytruncate", false, true, false},
		{"first start, in place", false, false, false},
		// The first read finds the end at 0, where a truncation leaves no
		// offset past the size to tell it by.
		{"resumed, copytruncate, nothing after", true, true, true},
		{"first start, copytruncate, nothing after", false, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := input(t, old)
			var epoch uint64
			if tc.resumed {
				// Delivered, never committed: the pointer stays at 0.
				s := open(t, p, Config{})
				g := s.waitLines(64)
				epoch = g[0].Epoch
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
			}
			hook := &beforeRead{FS: vfs.Default(), path: p}
			cfg := Config{FS: hook}
			if tc.copied {
				cfg = rotatedConfig()
				cfg.FS = hook
			}
			after := fresh
			if tc.empty {
				after = ""
			}
			hook.arm(func() {
				if tc.copied {
					copyTruncate(t, p, p+".1")
					appendTo(t, p, after)
				} else {
					rewriteInPlace(t, p, after)
				}
			})
			s := open(t, p, cfg)
			all := s.collect()
			if !hook.fired() {
				t.Fatal("the source never read the input")
			}
			if tc.copied {
				wantGenerations(t, all, 0, old, after)
				if tc.resumed && all[0].Epoch != epoch {
					t.Fatalf("the copy read in epoch %d, not the pointer's %d", all[0].Epoch, epoch)
				}
				return
			}
			wantLines(t, "the new content", all, fresh, 0)
			if all[0].Epoch == epoch {
				t.Fatalf("the new content read in the pointer's epoch %d, at the old content's positions", epoch)
			}
		})
	}
}

// TestRewrittenBetweenDecisionAndStart: a source resumed at its pointer,
// past 0, the input truncated and filled again (copytruncate) after the
// open compared it with the pointer (its first bytes, and the bytes before
// the pointer's position) and before the source took the bytes before its
// start as the ones it reads on from: those are the new content's, so
// neither the look after each read nor the copy's search (which compares
// them) could tell. The rest of the old content is in the copy: it must be
// read from the pointer in the pointer's epoch, then the new content.
//
// Both contents start with the same 4,096 bytes (a header): the first
// bytes fingerprinted at the open cannot tell them apart, only the bytes
// before the start can.
func TestRewrittenBetweenDecisionAndStart(t *testing.T) {
	header := genLines("h", 0, 128)         // 4,096 bytes: the fingerprint
	old := header + genLines("a", 0, 300)   // 13,696 bytes
	fresh := header + genLines("b", 0, 200) // 10,496 bytes: past the pointer
	p := input(t, old)
	epoch := stopAfter(t, p, 128+64)
	hook := &beforeRead{FS: vfs.Default(), path: p}
	cfg := rotatedConfig()
	cfg.FS = hook
	// The open's reads: its first bytes, then the bytes before the
	// pointer's position; the third is the start's.
	hook.armReadAt(3, false, func() {
		copyTruncate(t, p, p+".1")
		appendTo(t, p, fresh)
	})
	s := open(t, p, cfg)
	all := s.collect()
	if !hook.readAtFired() {
		t.Fatal("the source made fewer than three reads at its open")
	}
	wantGenerations(t, all, (128+64)*32, old, fresh)
	if all[0].Epoch != epoch {
		t.Fatalf("the copy read in epoch %d, not the pointer's %d", all[0].Epoch, epoch)
	}
}

// TestRewrittenBetweenReopenAndStart: a writer that appends by writing a
// copy and renaming it over the path, the source at the end of the file
// left: the reopen compares the new file with it (its first bytes, and the
// bytes before the end read) and goes on in the epoch; the file is
// rewritten in place before begin takes the bytes before its start. Both
// contents share a 4,096-byte header, so only those bytes can tell. The
// rewritten content must be read from 0 under a new epoch, not from the
// old offset in the old epoch.
func TestRewrittenBetweenReopenAndStart(t *testing.T) {
	header := genLines("h", 0, 128)         // 4,096 bytes: the fingerprint
	old := header + genLines("a", 0, 100)   // read to its end first
	copied := old + genLines("a", 100, 50)  // the copy renamed over the path
	fresh := header + genLines("c", 0, 300) // the rewrite: past the offset read
	p := input(t, old)
	hook := &beforeRead{FS: vfs.Default(), path: p}
	s := open(t, p, Config{FS: hook})
	first := s.collect()
	replaceByRename(t, p, copied)
	// The new file's reads: its first bytes, the bytes before the end of
	// the file left; the third is begin's.
	hook.armReadAt(3, true, func() { rewriteInPlace(t, p, fresh) })
	rest := s.collect()
	if !hook.readAtFired() {
		t.Fatal("the source made fewer than three reads of the new file")
	}
	wantLines(t, "the file left", first, old, 0)
	for i, g := range rest {
		if g.Epoch == first[0].Epoch {
			t.Fatalf("line %d after the rename, %+v, in the old epoch", i, g)
		}
	}
	wantLines(t, "the rewritten file", rest, fresh, 0)
}
