package feed

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tidemark-go/tidemark/feed/pointer"
	"github.com/tidemark-go/tidemark/vfs"
)

// genLines returns n lines "<prefix>-<i>-xxx…\n" of 32 bytes each.
func genLines(prefix string, from, n int) string {
	var b strings.Builder
	for i := from; i < from+n; i++ {
		l := fmt.Sprintf("%s-%06d-", prefix, i)
		b.WriteString(l + strings.Repeat("x", 31-len(l)) + "\n")
	}
	return b.String()
}

// rewriteInPlace truncates path and writes content into the same file
// (one O_TRUNC open and one write, as a careless writer does).
func rewriteInPlace(t *testing.T, path, content string) {
	t.Helper()
	before := identityOf(t, path)
	write(t, path, content) // os.WriteFile: O_TRUNC on the same inode
	if identityOf(t, path) != before {
		t.Fatal("the rewrite changed the file's identity")
	}
}

// TestRewrittenInPlaceBetweenPolls (D1): a file read to its end, then
// truncated and rewritten in place between two polls to at least the
// length read, is read from 0 under a new epoch, like a truncated file,
// and not taken for growth.
func TestRewrittenInPlaceBetweenPolls(t *testing.T) {
	const oldLines = 40
	tests := []struct {
		name    string
		rewrite string // the new content
		append  string // appended after the rewrite, before the poll
	}{
		{name: "longer", rewrite: genLines("b", 0, 60)},
		{name: "same length, then appended", rewrite: genLines("b", 0, oldLines), append: genLines("b", oldLines, 5)},
		{name: "one byte longer", rewrite: genLines("b", 0, oldLines) + "c"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := input(t, genLines("a", 0, oldLines))
			s := open(t, p, Config{})
			g := s.drain()
			if len(g) != oldLines {
				t.Fatalf("first version: %d lines", len(g))
			}
			old := g[0].Epoch
			if err := s.Commit(old, g[len(g)-1].Position); err != nil {
				t.Fatal(err)
			}
			rewriteInPlace(t, p, tc.rewrite)
			if tc.append != "" {
				appendTo(t, p, tc.append)
			}
			g = s.drain()
			want := strings.Split(strings.TrimSuffix(tc.rewrite+tc.append, "\n"), "\n")
			if !strings.HasSuffix(tc.rewrite+tc.append, "\n") {
				want = want[:len(want)-1] // an unterminated last line waits
			}
			if got := lines(g); strings.Join(got, "|") != strings.Join(want, "|") {
				t.Fatalf("after the rewrite got %d lines %q..., want %d from %q\nlog:\n%s", len(got), got[:min(2, len(got))], len(want), want[0], s.log)
			}
			if g[0].Position != 32 || g[0].Epoch <= old {
				t.Fatalf("first line after the rewrite: %+v (old epoch %d)", g[0], old)
			}
			for _, x := range g {
				if x.Epoch != g[0].Epoch {
					t.Fatalf("epoch changed within the new version: %+v", x)
				}
			}
			st := s.Status()
			if st.Reopens[ReasonRewritten] != 1 || st.LastReopenReason != ReasonRewritten || len(st.Reopens) != 1 {
				t.Fatalf("status %+v", st)
			}
			if res := loadPointer(t, p); res.Record.Epoch != g[0].Epoch || res.Record.Position != 0 {
				t.Fatalf("the new epoch must be stored at once: %+v", res.Record)
			}
			if len(s.log.find(slog.LevelInfo, ReasonRewritten)) != 1 {
				t.Fatalf("log:\n%s", s.log)
			}
		})
	}
}

// TestAppendAfterIdleKeepsEpoch: growth by appending after an idle poll
// is growth: the same epoch, no reopen.
func TestAppendAfterIdleKeepsEpoch(t *testing.T) {
	p := input(t, genLines("a", 0, 10))
	s := open(t, p, Config{})
	g := s.drain()
	for i := range 5 {
		appendTo(t, p, genLines("a", 10+i, 1))
		h := s.drain()
		if len(h) != 1 || h[0].Epoch != g[0].Epoch || h[0].Position != int64(32*(11+i)) {
			t.Fatalf("append %d: %+v", i, h)
		}
	}
	if st := s.Status(); len(st.Reopens) != 0 {
		t.Fatalf("status %+v", st)
	}
}

// TestReturnFromIdleIsOneSmallRead: a poll that finds the file grown after
// an idle poll costs one stat and one read of the bytes before the offset,
// besides the reads of the new bytes, however many lines they hold.
func TestReturnFromIdleIsOneSmallRead(t *testing.T) {
	// Longer than 4096 bytes: no fingerprint extension reads its head.
	p := input(t, genLines("a", 0, 200))
	var readAts, reads, stats atomic.Int64
	var counting atomic.Bool
	fsys := vfs.Inject(vfs.Default(), func(op vfs.Op, name string) error {
		if counting.Load() && name == p {
			switch op {
			case vfs.OpRead:
				reads.Add(1)
			case vfs.OpStat:
				stats.Add(1)
			}
		}
		return nil
	})
	s := open(t, p, Config{FS: &countReadAt{FS: fsys, n: &readAts, on: &counting}})
	s.drain()
	appendTo(t, p, genLines("a", 200, 50))
	counting.Store(true)
	n, err := s.Poll(context.Background(), s.items)
	counting.Store(false)
	if n != 50 || err != nil {
		t.Fatal(n, err)
	}
	// One stat, one ReadAt (the bytes before the offset), one Read of the
	// new bytes and one that finds the end.
	if stats.Load() != 1 || readAts.Load() != 1 || reads.Load() != 3 {
		t.Fatalf("return from idle: %d stats, %d ReadAt, %d reads (ReadAt included)", stats.Load(), readAts.Load(), reads.Load())
	}
}

// countReadAt counts ReadAt calls on the files it opens.
type countReadAt struct {
	vfs.FS
	n  *atomic.Int64
	on *atomic.Bool
}

func (c *countReadAt) Open(name string) (vfs.File, error) {
	return c.OpenFile(name, os.O_RDONLY, 0)
}

func (c *countReadAt) OpenFile(name string, flag int, perm fs.FileMode) (vfs.File, error) {
	f, err := c.FS.OpenFile(name, flag, perm)
	if err != nil || flag&(os.O_WRONLY|os.O_RDWR) != 0 {
		return f, err // the pointer file's writes are not counted
	}
	return &countReadAtFile{File: f, c: c}, nil
}

type countReadAtFile struct {
	vfs.File
	c *countReadAt
}

func (f *countReadAtFile) ReadAt(b []byte, off int64) (int, error) {
	if f.c.on.Load() {
		f.c.n.Add(1)
		if len(b) > pointer.MaxTailLen {
			return 0, fmt.Errorf("a ReadAt of %d bytes on return from idle", len(b))
		}
	}
	return f.File.ReadAt(b, off)
}

// TestRewriteNotLentToPointer (D1, commit path): a commit that arrives
// after the input was rewritten in place, for a position whose bytes the
// source no longer buffers, does not store a tail hash read from the new
// content: the pointer is not moved, so a restart sees that the file
// differs from its pointer and reads it from 0 under a new epoch.
func TestRewriteNotLentToPointer(t *testing.T) {
	// The same first 4096 bytes in both versions; they differ after.
	head := genLines("h", 0, 128) // 4096 bytes
	a := head + genLines("a", 0, 6000)
	b := head + genLines("b", 0, 6000)
	p := input(t, a)
	s := open(t, p, Config{})
	g := s.drain()
	if len(g) != 6128 {
		t.Fatalf("%d lines", len(g))
	}
	epoch := g[0].Epoch
	p0, p1 := g[199].Position, g[299].Position // far behind the buffer's 64 KiB
	if err := s.Commit(epoch, p0); err != nil {
		t.Fatal(err)
	}
	rewriteInPlace(t, p, b)
	if err := s.Commit(epoch, p1); err != nil {
		t.Fatal(err)
	}
	if res := loadPointer(t, p); res.Record.Epoch != epoch || res.Record.Position != p0 {
		t.Fatalf("the pointer moved after the rewrite: %+v, want position %d", res.Record, p0)
	}
	if len(s.log.find(slog.LevelWarn, "rewritten in place since it was read")) != 1 {
		t.Fatalf("log:\n%s", s.log)
	}
	// The running source rereads the new version from 0 at once.
	h := s.drain()
	if len(h) != 6128 || h[0].Epoch <= epoch || h[0].Position != 32 || h[200].Line != "b-000072-xxxxxxxxxxxxxxxxxxxxxx" {
		t.Fatalf("after the rewrite: %d lines, first %+v", len(h), h[0])
	}
	if st := s.Status(); st.Reopens[ReasonRewritten] != 1 {
		t.Fatalf("status %+v", st)
	}
	// A crash instead (no poll after the commit): the restart does not
	// take the new version for the old one.
	rewriteInPlace(t, p, a)
	if err := s.Close(); err != nil { // one source per pointer file
		t.Fatal(err)
	}
	s2 := open(t, p, Config{})
	g = s2.drain()
	if len(g) != 6128 {
		t.Fatalf("%d lines", len(g))
	}
	epoch = g[0].Epoch
	if err := s2.Commit(epoch, g[199].Position); err != nil {
		t.Fatal(err)
	}
	rewriteInPlace(t, p, b)
	if err := s2.Commit(epoch, g[299].Position); err != nil {
		t.Fatal(err)
	}
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	s3 := open(t, p, Config{})
	g = s3.drain()
	if len(g) != 6128 || g[0].Epoch <= epoch || g[0].Position != 32 {
		t.Fatalf("restart after the rewrite: %d lines, first %+v\nlog:\n%s", len(g), g[0], s3.log)
	}
}
