package state

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/vfs"
)

// applyAside applies the line of d (applyLine's function) on a goroutine
// of its own; the channel returned is closed once Apply returned, and
// failed the test if it returned an error.
func applyAside(t *testing.T, s Store, d tidemark.Delivery) <-chan struct{} {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, err := s.Apply(context.Background(), d, func(tx *Tx) error {
			if _, err := tx.AddInt64([]byte("count"), 1); err != nil {
				return err
			}
			_, err := tx.AddInt64([]byte("sum"), d.Position/lineLen)
			return err
		}); err != nil {
			t.Errorf("apply %+v: %v", d, err)
		}
	}()
	return done
}

// returnsWithoutWaiting reports whether the Apply whose channel is done
// returned without waiting for a commit: it returned before the store
// counted a wait (Stats.BackPressure past waits).
func returnsWithoutWaiting(t *testing.T, s Store, done <-chan struct{}, waits uint64) bool {
	t.Helper()
	var returned bool
	waitFor(t, "the Apply to return or to wait", func() bool {
		select {
		case <-done:
			returned = true
			return true
		default:
			return s.Stats().BackPressure > waits
		}
	})
	return returned && s.Stats().BackPressure == waits
}

// gatedStore opens a store of be in dir with o (testOpts if nil) and
// batches of batchSize lines, whose committer waits in the gate returned
// at each commit once the test arms it, until the test opens it (or the
// test ends: the store's Close waits for its commits).
func gatedStore(t *testing.T, be backend, dir string, o *Options, batchSize int) (Store, *gate) {
	t.Helper()
	if o == nil {
		o = testOpts()
	}
	g := newGate()
	o.BatchSize = batchSize
	o.hooks = &hooks{beforeCommit: g.hook}
	s := mustOpen(t, be, dir, o)
	t.Cleanup(g.open) // runs before Close if the test fails
	return s, g
}

// TestOverfullBatchIsCutWhileTheOneBeforeCommits: a batch that fills up
// (MaxBatchSize lines) while the one before it commits is cut, and waits
// for that commit itself, rather than make the next line wait: the next
// batch fills meanwhile. Only when a third batch fills up before the
// first commit ends does a line wait. Lines read what the batches before
// theirs staged, newest first, and the batches commit in order, each
// moving the durable mark once committed.
func TestOverfullBatchIsCutWhileTheOneBeforeCommits(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		s, g := gatedStore(t, be, t.TempDir(), nil, 2)
		var p progress
		cp := hold("f", &p)
		s.Bind("f", cp)
		g.arm()
		apply := func(n int) {
			applyLine(t, s, del("f", 1, n))
			p.finish()
		}
		apply(1)
		apply(2) // cut: its commit waits in g
		<-g.entered
		apply(3)
		apply(4) // the second batch is full, the first commits
		if !returnsWithoutWaiting(t, s, applyAside(t, s, del("f", 1, 5)), 0) {
			t.Fatalf("line 5 waited for the first batch's commit (%d waits); want the full second batch cut, line 5 in a third", s.Stats().BackPressure)
		}
		p.finish()
		if st := s.Stats(); st.Staged != 5 || st.Commits != 0 {
			t.Fatalf("staged %d, committed %d batches; want 5 lines staged, none committed", st.Staged, st.Commits)
		}
		// Line 6 finds count in the second batch, not in the first.
		if _, err := s.Apply(context.Background(), del("f", 1, 6), func(tx *Tx) error {
			n, err := tx.AddInt64([]byte("count"), 1)
			if err == nil && n != 6 {
				err = fmt.Errorf("count %d after line 6's addition; want 6 (the second batch's 4 and line 5's)", n)
			}
			if err != nil {
				return err
			}
			_, err = tx.AddInt64([]byte("sum"), 6)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		p.finish()
		if got := durableCount(cp); got != 0 {
			t.Fatalf("durable mark %d while the first batch's commit waits; want 0", got)
		}
		// The third batch is full, the second waits, the first commits:
		// line 7 waits.
		seventh := applyAside(t, s, del("f", 1, 7))
		if returnsWithoutWaiting(t, s, seventh, 0) {
			t.Fatal("line 7 returned while three batches were pending; want it to wait")
		}
		g.open()
		<-seventh
		p.finish()
		if err := s.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		if st := s.Stats(); st.Commits != 4 || st.FailedCommits != 0 {
			t.Fatalf("%d commits (%d failed); want 4: lines 1-2, 3-4, 5-6, 7", st.Commits, st.FailedCommits)
		}
		if c, sum := getInt(t, s, "count"), getInt(t, s, "sum"); c != 7 || sum != 28 {
			t.Fatalf("count %d, sum %d; want 7 and 28", c, sum)
		}
		if l, _ := s.Applied("f"); l.Position != 7*lineLen {
			t.Fatalf("Applied = %+v; want line 7", l)
		}
		if got := durableCount(cp); got != 7 {
			t.Fatalf("durable mark %d after the flush; want 7", got)
		}
	})
}

// TestIterationSeesTheWaitingBatch: a loop over a bucket sees the keys of
// every staged batch, the one that waits for the commit of the one before
// included, and their latest values.
func TestIterationSeesTheWaitingBatch(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		s, g := gatedStore(t, be, t.TempDir(), nil, 2)
		g.arm()
		ctx := context.Background()
		put := func(n int, keys ...string) {
			t.Helper()
			if _, err := s.Apply(ctx, del("f", 1, n), func(tx *Tx) error {
				for _, k := range keys {
					if err := tx.Bucket("b").Put([]byte(k), fmt.Appendf(nil, "line %d", n)); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		put(1, "a")
		put(2, "c") // cut: its commit waits in g
		<-g.entered
		put(3, "b", "c")
		put(4, "e") // full: cut once line 5 comes, to wait for the first commit
		var got []string
		fifth := make(chan struct{})
		go func() {
			defer close(fifth)
			if _, err := s.Apply(ctx, del("f", 1, 5), func(tx *Tx) error {
				if err := tx.Bucket("b").Put([]byte("d"), []byte("line 5")); err != nil {
					return err
				}
				for k, v := range tx.Bucket("b").All() {
					got = append(got, string(k)+"="+string(v))
				}
				return tx.Err()
			}); err != nil {
				t.Error(err)
			}
		}()
		if !returnsWithoutWaiting(t, s, fifth, 0) {
			t.Fatal("line 5 waited for the first batch's commit; want the full second batch cut, line 5 in a third")
		}
		want := []string{"a=line 1", "b=line 3", "c=line 3", "d=line 5", "e=line 4"}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("the loop saw %q; want %q", got, want)
		}
		if st := s.Stats(); st.Staged != 5 || st.BackPressure != 0 {
			t.Fatalf("staged %d lines, %d waits; want 5 staged without a wait", st.Staged, st.BackPressure)
		}
		g.open()
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// TestBatchFullOfBytesWaits: a batch that fills up by its bytes (a limit
// of memory, maxBatchBytes) while the one before it commits is not cut to
// wait beside it: the next line waits, as before, and the memory of the
// staged batches stays that of two.
func TestBatchFullOfBytesWaits(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		s, g := gatedStore(t, be, t.TempDir(), nil, 1000)
		s.(*nsStore).c.maxBytes = 1 << 20
		g.arm()
		ctx := context.Background()
		val := make([]byte, 300<<10)
		put := func(n int) <-chan struct{} {
			done := make(chan struct{})
			go func() {
				defer close(done)
				if _, err := s.Apply(ctx, del("f", 1, n), func(tx *Tx) error {
					return tx.Put(fmt.Appendf(nil, "k%d", n), val)
				}); err != nil {
					t.Error(err)
				}
			}()
			return done
		}
		// Lines go in one at a time until one waits: the first batch is
		// cut at 1 MiB, its commit waits in g, and the second fills up.
		var n int
		var done <-chan struct{}
		for n = 1; n < 100; n++ {
			if done = put(n); !returnsWithoutWaiting(t, s, done, 0) {
				break
			}
		}
		if n == 100 {
			t.Fatal("99 lines of 300 KiB went in without a wait while the first batch's commit waited")
		}
		c := s.(*nsStore).c
		c.mu.Lock()
		made := c.seq
		c.mu.Unlock()
		if made != 2 {
			t.Fatalf("%d batches made when line %d waited; want 2: the one committing and the one full of bytes", made, n)
		}
		g.open()
		<-done
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if l, _ := s.Applied("f"); l.Position != int64(n)*lineLen {
			t.Fatalf("Applied = %+v; want line %d", l, n)
		}
	})
}

// TestWaitingBatchFailsWithTheOneBefore: when the commit of a batch fails,
// the batch cut to wait for it is not committed: Flush returns the
// failure, the durable mark and the output's committed length stay where
// the last good commit left them, and a reopen finds neither batch.
func TestWaitingBatchFailsWithTheOneBefore(t *testing.T) {
	forEachLocalBackend(t, func(t *testing.T, be backend) {
		dir := t.TempDir()
		o := testOpts()
		var failing atomic.Bool
		o.FS = vfs.Inject(vfs.Default(), func(op vfs.Op, path string) error {
			if failing.Load() && op == vfs.OpSync && filepath.Base(path) == "out.csv" {
				return vfs.ErrInjected
			}
			return nil
		})
		s, g := gatedStore(t, be, dir, o, 2)
		var p progress
		cp := hold("f", &p)
		s.Bind("f", cp)
		out, err := s.Output("out.csv")
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		apply := func(n int) error {
			_, err := s.Apply(ctx, del("f", 1, n), func(tx *Tx) error {
				if _, err := tx.AddInt64([]byte("count"), 1); err != nil {
					return err
				}
				_, err := tx.Output("out.csv").Write(fmt.Appendf(nil, "%d\n", n))
				return err
			})
			return err
		}
		line := func(n int) {
			t.Helper()
			if err := apply(n); err != nil {
				t.Fatal(err)
			}
			p.finish()
		}
		line(1)
		line(2)
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		g.arm()
		line(3)
		line(4) // cut: its commit waits in g
		<-g.entered
		line(5)
		line(6)
		// Line 7 cuts lines 5 and 6 to wait for the commit of 3 and 4.
		seventh := make(chan struct{})
		go func() {
			defer close(seventh)
			if err := apply(7); err != nil {
				t.Error(err)
			}
		}()
		if !returnsWithoutWaiting(t, s, seventh, 0) {
			t.Fatal("line 7 waited for the commit of lines 3 and 4; want the full batch of 5 and 6 cut, line 7 in the next")
		}
		p.finish()
		if st := s.Stats(); st.BackPressure != 0 || st.Staged != 5 {
			t.Fatalf("%d waits, %d lines staged; want none and 5", st.BackPressure, st.Staged)
		}
		failing.Store(true)
		g.open()
		err = s.Flush(ctx)
		if !errors.Is(err, ErrFailed) || !errors.Is(err, vfs.ErrInjected) {
			t.Fatalf("flush after a failed commit: %v; want ErrFailed with the injected error", err)
		}
		if st := s.Stats(); st.FailedCommits != 1 || st.Commits != 1 {
			t.Fatalf("%d commits, %d failed; want 1 and 1 (the batch after the failed one is not written)", st.Commits, st.FailedCommits)
		}
		if got := durableCount(cp); got != 2 {
			t.Fatalf("durable mark %d after the failed commit; want 2", got)
		}
		if n := out.Committed(); n != 4 {
			t.Fatalf("output's committed length %d; want 4 (lines 1 and 2)", n)
		}
		_ = s.Close()
		s = mustOpen(t, be, dir, testOpts())
		if l, _ := s.Applied("f"); l.Position != 2*lineLen {
			t.Fatalf("after a reopen, Applied = %+v; want line 2", l)
		}
		if c := getInt(t, s, "count"); c != 2 {
			t.Fatalf("after a reopen, count %d; want 2", c)
		}
		if got := readOutput(t, be, dir, "out.csv"); !bytes.Equal(got, []byte("1\n2\n")) {
			t.Fatalf("after a reopen, out.csv holds %q; want lines 1 and 2", got)
		}
	})
}

// TestWriteAheadWaitsForEveryBatchBefore: the output bytes of the staging
// batch are written ahead only where they go, after those of every batch
// before it that writes the output, the pending one or the sealed one:
// here the sealed batch writes out.csv, the pending one does not, and the
// staging one writes more than a chunk. While the sealed batch's bytes are
// not placed yet (its commit waits before its outputs), the staging
// batch's cannot be: given to the writer at the file's committed end, they
// went where the sealed batch's go, and a writer that ran after that
// batch's own write overwrote committed bytes (seen once in a run of
// TestKillWhileOverfull: a checksum that did not verify at the next open).
func TestWriteAheadWaitsForEveryBatchBefore(t *testing.T) {
	forEachLocalBackend(t, func(t *testing.T, be backend) {
		dir := t.TempDir()
		s, g := gatedStore(t, be, dir, nil, 2)
		if _, err := s.Output("out.csv"); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		write := func(n int, p []byte) {
			t.Helper()
			if _, err := s.Apply(ctx, del("f", 1, n), func(tx *Tx) error {
				if len(p) == 0 {
					return nil
				}
				_, err := tx.Output("out.csv").Write(p)
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}
		g.arm()
		first := []byte("line 1\nline 2\n")
		write(1, first[:7])
		write(2, first[7:]) // cut: its commit waits in g, before its outputs
		<-g.entered
		write(3, nil)
		write(4, nil) // full, without output bytes: pending once line 5 comes
		big := bytes.Repeat([]byte("5"), aheadChunk+100)
		big[len(big)-1] = '\n'
		write(5, big) // a chunk and more: given to the writer if it may
		c := s.(*nsStore).c
		o := c.outputs["out.csv"]
		o.mu.Lock()
		a := o.ah
		var base int64 = -1
		if a != nil {
			base = a.base
		}
		o.mu.Unlock()
		if a != nil && base != int64(len(first)) {
			t.Fatalf("line 5's bytes given to the output's writer at offset %d while the first batch's %d bytes, not placed yet, go at 0; want them held until those are placed", base, len(first))
		}
		g.open()
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		want := append(append([]byte(nil), first...), big...)
		if got := readOutput(t, be, dir, "out.csv"); !bytes.Equal(got, want) {
			t.Fatalf("out.csv: %d bytes, want %d (first difference at %d)", len(got), len(want), firstDiff(got, want))
		}
		mustOpenClose(t, be, dir) // its checksums verify
	})
}
