package state

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark-go/tidemark/vfs"
)

// stageOutputLines stages lines n0+1 .. n0+count of feed "f", each writing
// a 100-byte record to output name, and returns the bytes staged.
func stageOutputLines(t *testing.T, s Store, name string, n0, count int) []byte {
	t.Helper()
	var all []byte
	for n := n0 + 1; n <= n0+count; n++ {
		rec := fmt.Appendf(nil, "%099d\n", n)
		all = append(all, rec...)
		if _, err := s.Apply(context.Background(), del("f", 1, n), func(tx *Tx) error {
			_, err := tx.Output(name).Write(rec)
			return err
		}); err != nil {
			t.Fatalf("apply line %d: %v", n, err)
		}
	}
	return all
}

// TestOutputWrittenAheadWhileTheBatchFills: the bytes a batch appends to
// an output file are written to the file while the batch still takes
// lines (past the committed length, which does not move), so that its
// commit has only the rest to write before its sync; the commit then
// makes the file exactly the committed bytes, and a reopen finds nothing
// to cut.
func TestOutputWrittenAheadWhileTheBatchFills(t *testing.T) {
	forEachLocalBackend(t, func(t *testing.T, be backend) {
		dir := t.TempDir()
		s := mustOpen(t, be, dir, testOpts())
		out, err := s.Output("out.csv")
		if err != nil {
			t.Fatal(err)
		}
		// 3 chunks' worth, in a batch only Flush cuts.
		lines := 3 * aheadChunk / 100
		want := stageOutputLines(t, s, "out.csv", 0, lines)
		path := filepath.Join(dir, "out.csv")
		deadline := time.Now().Add(10 * time.Second)
		for {
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Size() >= 2*aheadChunk {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s holds %d bytes 10 s after %d bytes were staged in a batch not cut yet: want at least %d written ahead", path, fi.Size(), len(want), 2*aheadChunk)
			}
			time.Sleep(time.Millisecond)
		}
		if n := out.Committed(); n != 0 {
			t.Fatalf("committed length %d before the batch is cut; want 0", n)
		}
		if err := s.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n := out.Committed(); n != int64(len(want)) {
			t.Fatalf("committed length %d after the flush; want %d", n, len(want))
		}
		// A second batch, its bytes after the first's.
		want = append(want, stageOutputLines(t, s, "out.csv", lines, lines)...)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if got := readOutput(t, be, dir, "out.csv"); !bytes.Equal(got, want) {
			t.Fatalf("out.csv: %d bytes, want the %d staged (first difference at %d)", len(got), len(want), firstDiff(got, want))
		}
		s = mustOpen(t, be, dir, testOpts())
		out, err = s.Output("out.csv")
		if err != nil {
			t.Fatal(err)
		}
		if n := out.Committed(); n != int64(len(want)) {
			t.Fatalf("committed length %d after a reopen; want %d", n, len(want))
		}
	})
}

// TestOutputWriteAheadFails: a write ahead that fails fails the batch's
// commit with its error, which names the output file; the committed
// length stays, and a reopen cuts the bytes written after it.
func TestOutputWriteAheadFails(t *testing.T) {
	forEachLocalBackend(t, func(t *testing.T, be backend) {
		dir := t.TempDir()
		o := testOpts()
		heal, injected := outputFault(t, be, dir, o, "out.csv", vfs.OpWrite, 2, false, vfs.ErrNoSpace)
		defer heal()
		s := mustOpen(t, be, dir, o)
		out, err := s.Output("out.csv")
		if err != nil {
			t.Fatal(err)
		}
		want := stageOutputLines(t, s, "out.csv", 0, 3*aheadChunk/100)
		err = s.Flush(context.Background())
		if !errors.Is(err, ErrFailed) || !injected(err) {
			t.Fatalf("flush: %v; want ErrFailed with the injected error", err)
		}
		if path := filepath.Join(dir, "out.csv"); !bytes.Contains([]byte(err.Error()), []byte(path)) {
			t.Fatalf("flush: %v; want the output file %s named", err, path)
		}
		if n := out.Committed(); n != 0 {
			t.Fatalf("committed length %d after the failed commit; want 0", n)
		}
		_ = s.Close()
		s = mustOpen(t, be, dir, testOpts())
		out, err = s.Output("out.csv")
		if err != nil {
			t.Fatal(err)
		}
		if n := out.Committed(); n != 0 {
			t.Fatalf("committed length %d after a reopen; want 0", n)
		}
		if got := readOutput(t, be, dir, "out.csv"); len(got) != 0 {
			t.Fatalf("out.csv holds %d bytes after a reopen (%d were staged, none committed); want 0", len(got), len(want))
		}
	})
}

// firstDiff returns the first index where a and b differ.
func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestOverfullBatchSyncsItsOutputWhileTheOneBeforeCommits: a batch that
// is overfull (it waits for the batch before it to commit, and takes no
// more lines) has its output bytes written and synced while the batch
// before commits, and its own commit does not sync the output again; its
// committed length moves only with its own commit.
func TestOverfullBatchSyncsItsOutputWhileTheOneBeforeCommits(t *testing.T) {
	forEachLocalBackend(t, func(t *testing.T, be backend) {
		const lines = 20
		dir := t.TempDir()
		var syncs atomic.Int32
		o := testOpts()
		o.BatchSize, o.MaxBatchSize = lines, lines
		o.FS = vfs.Inject(vfs.Default(), func(op vfs.Op, path string) error {
			if op == vfs.OpSync && filepath.Base(path) == "out.csv" {
				syncs.Add(1)
			}
			return nil
		})
		first, entered, release := holdFirst()
		defer release()
		o.hooks = &hooks{afterOutput: first}
		s := mustOpen(t, be, dir, o)
		out, err := s.Output("out.csv")
		if err != nil {
			t.Fatal(err)
		}
		// The first batch is cut full; its commit waits after its output.
		want := stageOutputLines(t, s, "out.csv", 0, lines)
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			t.Fatal("the first batch's commit did not reach its backend transaction in 10 s")
		}
		base := syncs.Load()
		// The second batch fills up while the first commits: overfull.
		want = append(want, stageOutputLines(t, s, "out.csv", lines, lines)...)
		deadline := time.Now().Add(10 * time.Second)
		for syncs.Load() == base {
			if time.Now().After(deadline) {
				t.Fatalf("%d output syncs 10 s after the second batch filled up while the first committed; want its bytes synced meanwhile", syncs.Load()-base)
			}
			time.Sleep(time.Millisecond)
		}
		if fi, err := os.Stat(filepath.Join(dir, "out.csv")); err != nil || fi.Size() != int64(len(want)) {
			t.Fatalf("out.csv: %v, %v; want the %d bytes of both batches written", fi, err, len(want))
		}
		if n := out.Committed(); n != 0 {
			t.Fatalf("committed length %d while the first batch commits; want 0", n)
		}
		release()
		if err := s.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n := out.Committed(); n != int64(len(want)) {
			t.Fatalf("committed length %d after the flush; want %d", n, len(want))
		}
		if n := syncs.Load() - base; n != 1 {
			t.Fatalf("%d output syncs from the second batch's filling up to its commit; want 1 (its commit finds its bytes synced)", n)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if got := readOutput(t, be, dir, "out.csv"); !bytes.Equal(got, want) {
			t.Fatalf("out.csv: %d bytes, want the %d staged (first difference at %d)", len(got), len(want), firstDiff(got, want))
		}
	})
}

// holdFirst returns a hook that waits, the first time it runs, until
// release is called; entered is closed when it starts waiting. release
// may be called more than once.
func holdFirst() (hook func(), entered <-chan struct{}, release func()) {
	in, out := make(chan struct{}), make(chan struct{})
	var first, released sync.Once
	hook = func() {
		first.Do(func() {
			close(in)
			<-out
		})
	}
	return hook, in, func() { released.Do(func() { close(out) }) }
}
