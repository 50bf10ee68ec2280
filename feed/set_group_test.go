package feed

import (
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tidemark-go/tidemark/feed/pointer"
	"github.com/tidemark-go/tidemark/vfs"
)

// goroutinesCreatedBy counts the goroutines whose stack says they were
// created by fn.
func goroutinesCreatedBy(fn string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "created by "+fn)
		}
		buf = make([]byte, 2*len(buf))
	}
}

// registryFaults is a file system that counts the syncs of a set's
// registry (of the file at its path, or of the temporary file renamed
// there, which it goes on writing) and fails them while failing is set.
type registryFaults struct {
	reg     string
	syncs   atomic.Int64
	failing atomic.Bool
}

func (r *registryFaults) fs() vfs.FS {
	return vfs.Inject(vfs.Default(), func(op vfs.Op, name string) error {
		if (name != r.reg && name != r.reg+pointer.TempSuffix) || op != vfs.OpSync {
			return nil
		}
		if r.failing.Load() {
			return vfs.ErrInjected
		}
		r.syncs.Add(1)
		return nil
	})
}

// TestSetGroupCommitSharesOneWriter: under GroupCommit the files of a set
// hand their records to one writer goroutine, which syncs the registry
// once for the records of every file it writes together. Before, each file
// had a writer of its own (a thousand files: a thousand goroutines, woken
// together at each sync of the registry, each syncing for itself).
func TestSetGroupCommitSharesOneWriter(t *testing.T) {
	dir := t.TempDir()
	const files = 30
	content := map[string]string{}
	for i := range files {
		p := filepath.Join(dir, fmt.Sprintf("f%02d.log", i))
		content[p] = genLines(fmt.Sprintf("f%02d", i), 0, 400) // past the fingerprint: commits only move positions
		write(t, p, content[p])
	}
	rf := &registryFaults{reg: filepath.Join(dir, "ptr", "files"+pointer.RegistrySuffix)}
	s := openSet(t, dir, Config{GroupCommit: true, FS: rf.fs()}, "*.log")
	byFile := s.collectSet()
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	for p, want := range content {
		wantLines(t, p, byFile[p], want, 0)
	}
	if n := goroutinesCreatedBy("github.com/tidemark-go/tidemark/feed.newGroupWriter"); n != 0 {
		t.Errorf("%d writers of their own for the files of a set", n)
	}
	if n := goroutinesCreatedBy("github.com/tidemark-go/tidemark/feed.(*setWriter).slot"); n != 1 {
		t.Errorf("%d writers for the set, want 1", n)
	}
	t.Logf("%d files, %d syncs of the registry", files, rf.syncs.Load())
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := goroutinesCreatedBy("github.com/tidemark-go/tidemark/feed.(*setWriter).slot"); n != 0 {
		t.Errorf("the set's writer runs on after Close")
	}
	res, err := pointer.OpenRegistry(rf.reg, pointer.Options{}).Load()
	if err != nil || len(res.Entries) != files {
		t.Fatalf("registry %+v %v", res, err)
	}
	for p, want := range content {
		if e := res.Entries[p]; e.Position != int64(len(want)) {
			t.Errorf("entry of %s: %+v, want position %d", p, e, len(want))
		}
	}
}

// TestSetGroupCommitWriteFails: a sync of the registry that fails under
// the set's writer is counted in the file's Status, returned by the next
// Commit and by Flush (naming the file and the position); once the disk is
// back, the entry reaches the position committed.
func TestSetGroupCommitWriteFails(t *testing.T) {
	dir := t.TempDir()
	paths := writeSet(t, dir, 3, 400)
	rf := &registryFaults{reg: filepath.Join(dir, "ptr", "files"+pointer.RegistrySuffix)}
	s := openSet(t, dir, Config{GroupCommit: true, FS: rf.fs()}, "*.log")
	byFile := map[string][]got{}
	for {
		g := s.pollSet()
		if len(g) == 0 {
			break
		}
		for _, x := range g {
			byFile[x.File] = append(byFile[x.File], x.got)
		}
	}
	b := byFile[paths[1]]
	e := b[0].Epoch
	if err := s.Commit(e, b[9].Position); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}

	rf.failing.Store(true)
	if err := s.Commit(e, b[19].Position); err != nil {
		t.Fatalf("the first commit handed returns before its write: %v", err)
	}
	waitUntil(t, "the failed write in Status", func() bool { return s.Status().CommitErrors >= 1 })
	if st := s.Status(); st.Files[1].CommittedPosition != b[9].Position || st.Files[1].LastCommitError == "" {
		t.Fatalf("the file's status after a failed background write: %+v", st.Files[1])
	}
	err := s.Commit(e, b[29].Position)
	if err == nil || !errors.Is(err, vfs.ErrInjected.Err) || !strings.Contains(err.Error(), paths[1]) ||
		!strings.Contains(err.Error(), fmt.Sprintf("position %d", b[19].Position)) {
		t.Fatalf("the commit after a failed background write: %v", err)
	}
	if err := s.Flush(); err == nil || !errors.Is(err, vfs.ErrInjected.Err) {
		t.Fatalf("Flush while the syncs fail: %v", err)
	}

	// The disk is back: the next commit hands its record (and returns the
	// failed write's error), which the writer writes.
	rf.failing.Store(false)
	if err := s.Commit(e, b[39].Position); err == nil {
		t.Fatal("the commit after the failed writes returns the last one's error")
	}
	waitUntil(t, "the write after the fault", func() bool { return s.Status().Files[1].CommittedPosition == b[39].Position })
	if err := s.Commit(e, b[49].Position); err != nil {
		t.Fatalf("commit after a write succeeded: %v", err)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	res, err := pointer.OpenRegistry(rf.reg, pointer.Options{}).Load()
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Entries[paths[1]].Position; got != b[49].Position {
		t.Fatalf("entry of %s at %d, want %d", paths[1], got, b[49].Position)
	}
}

// TestSetHoldsBuffersOnlyForFilesBeingRead: a file of a set takes its read
// buffer (64 KiB) when it is read, and gives it back once it has caught
// up and the Poll after has begun: a set of a thousand files read one after
// the other holds one or two, not a thousand (64 MiB).
func TestSetHoldsBuffersOnlyForFilesBeingRead(t *testing.T) {
	dir := t.TempDir()
	const files = 30
	for i := range files {
		write(t, filepath.Join(dir, fmt.Sprintf("f%02d.log", i)), genLines(fmt.Sprintf("f%02d", i), 0, 100))
	}
	s := openSet(t, dir, Config{}, "*.log")
	held := func() int {
		n := 0
		for _, m := range s.set.order {
			if m.st != nil && m.st.fr.buf != nil {
				n++
			}
		}
		return n
	}
	most := 0
	for {
		g := s.pollSet()
		most = max(most, held())
		if len(g) == 0 {
			break
		}
		last := g[len(g)-1]
		if err := s.Commit(last.Epoch, last.Position); err != nil {
			t.Fatal(err)
		}
	}
	if len(s.set.order) != files || most > 2 {
		t.Fatalf("%d files of the set held read buffers at once (of %d files); want at most 2", most, len(s.set.order))
	}
}
