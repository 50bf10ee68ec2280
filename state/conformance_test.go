package state

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/vfs"
)

// The conformance suite: every test here runs against every backend of
// backends(). A new backend must pass all of it.

func TestApplySkipsRedeliveries(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		s := mustOpen(t, be, t.TempDir(), testOpts())
		for n := 1; n <= 5; n++ {
			if !applyLine(t, s, del("f", 1, n)) {
				t.Fatalf("line %d skipped", n)
			}
		}
		calls := 0
		for _, n := range []int{1, 3, 5} {
			ok, err := s.Apply(context.Background(), del("f", 1, n), func(tx *Tx) error { calls++; return nil })
			if ok || err != nil {
				t.Fatalf("re-delivery of line %d: applied=%v err=%v", n, ok, err)
			}
		}
		if calls != 0 {
			t.Fatalf("fn called %d times for re-deliveries", calls)
		}
		st := s.Stats()
		if st.Applied != 5 || st.Skipped != 3 || st.Backend != be.name {
			t.Fatalf("stats = %+v, want 5 applied, 3 skipped", st)
		}
		// Another feed, and epoch 0, are not re-deliveries.
		if !applyLine(t, s, del("g", 1, 1)) {
			t.Fatal("line of another feed skipped")
		}
		for i := 0; i < 2; i++ {
			if !applyLine(t, s, tidemark.Delivery{Feed: "f", Epoch: 0, Position: 10}) {
				t.Fatal("delivery without positions skipped")
			}
		}
		if got := getInt(t, s, "count"); got != 8 {
			t.Fatalf("count = %d, want 8", got)
		}
		if err := s.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		l, ok := s.Applied("f")
		if !ok || l.Applied != (tidemark.Applied{Epoch: 1, Position: 50}) {
			t.Fatalf("Applied(f) = %+v, %v: epoch 0 must not move it", l, ok)
		}
	})
}

func TestReadsSeeStagedWrites(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		s := mustOpen(t, be, t.TempDir(), testOpts())
		ctx := context.Background()
		for n := 1; n <= 3; n++ {
			_, err := s.Apply(ctx, del("f", 1, n), func(tx *Tx) error {
				v, ok, err := tx.Get([]byte("k"))
				if err != nil {
					return err
				}
				if n == 1 && ok {
					return fmt.Errorf("k exists before it was written: %q", v)
				}
				if n > 1 && string(v) != fmt.Sprint(n-1) {
					return fmt.Errorf("line %d reads k=%q, want the staged %d", n, v, n-1)
				}
				// A write is visible to the same transaction at once.
				if err := tx.Put([]byte("k"), []byte(fmt.Sprint(n))); err != nil {
					return err
				}
				v, _, _ = tx.Get([]byte("k"))
				if string(v) != fmt.Sprint(n) {
					return fmt.Errorf("own write not visible: %q", v)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		if c := s.Stats().Commits; c != 0 {
			t.Fatalf("%d commits: the test needs the writes staged only", c)
		}
		if _, ok := s.Applied("f"); ok {
			t.Fatal("Applied reports a position that is only staged")
		}
		err := s.View(func(tx *Tx) error {
			v, _, err := tx.Get([]byte("k"))
			if string(v) != "3" {
				return fmt.Errorf("View reads k=%q, want the staged 3", v)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		// Reads see a batch while it commits, and the durable state after.
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if got := s.Stats(); got.Commits != 1 || got.Staged != 0 {
			t.Fatalf("after flush: %+v", got)
		}
		_, err = s.Apply(ctx, del("f", 1, 4), func(tx *Tx) error {
			v, _, err := tx.Get([]byte("k"))
			if string(v) != "3" {
				return fmt.Errorf("after commit k=%q", v)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

func TestFnErrorStagesNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		dir := t.TempDir()
		s := mustOpen(t, be, dir, testOpts())
		ctx := context.Background()
		applyLine(t, s, del("f", 1, 1))
		boom := errors.New("boom")
		ok, err := s.Apply(ctx, del("f", 1, 2), func(tx *Tx) error {
			tx.AddInt64([]byte("count"), 100)
			tx.Put([]byte("junk"), []byte("x"))
			tx.Output("out.txt").Write([]byte("junk\n"))
			return boom
		})
		if ok || !errors.Is(err, boom) {
			t.Fatalf("Apply = %v, %v; want false, boom", ok, err)
		}
		if got := getInt(t, s, "count"); got != 1 {
			t.Fatalf("count = %d: the failed fn's write was staged", got)
		}
		// The position did not move: the line is applied on re-delivery.
		if !applyLine(t, s, del("f", 1, 2)) {
			t.Fatal("the line whose fn failed is skipped on re-delivery")
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = mustOpen(t, be, dir, testOpts())
		if got := getInt(t, s, "count"); got != 2 {
			t.Fatalf("after reopen count = %d, want 2", got)
		}
		err = s.View(func(tx *Tx) error {
			if _, ok, _ := tx.Get([]byte("junk")); ok {
				return errors.New("junk was committed")
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if b := readOutput(t, be, dir, "out.txt"); len(b) != 0 {
			t.Fatalf("output of a failed fn was written: %q", b)
		}
	})
}

func TestNamespacesAreSeparate(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		dir := t.TempDir()
		s := mustOpen(t, be, dir, testOpts())
		a, b := s.Namespace("a"), s.Namespace("b")
		applyLine(t, a, del("f", 1, 1))
		applyLine(t, a, del("f", 1, 2))
		// b has its own position for the same feed, and its own keys.
		if !applyLine(t, b, del("f", 1, 1)) {
			t.Fatal("namespace b skipped a line only a applied")
		}
		if applyLine(t, a, del("f", 1, 2)) {
			t.Fatal("namespace a applied a re-delivery")
		}
		if got, want := []int64{getInt(t, a, "count"), getInt(t, b, "count"), getInt(t, s, "count")}, []int64{2, 1, 0}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("counts a, b, root = %v, want %v", got, want)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = mustOpen(t, be, dir, testOpts())
		la, _ := s.Namespace("a").Applied("f")
		lb, _ := s.Namespace("b").Applied("f")
		if _, ok := s.Applied("f"); ok || la.Position != 20 || lb.Position != 10 {
			t.Fatalf("after reopen: a=%+v b=%+v", la, lb)
		}
		if getInt(t, s.Namespace("a"), "count") != 2 {
			t.Fatal("namespace a lost its state")
		}
	})
}

func TestInt64BucketsAndForEach(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		s := mustOpen(t, be, t.TempDir(), testOpts())
		ctx := context.Background()
		apply := func(n int, fn func(tx *Tx) error) {
			t.Helper()
			if _, err := s.Apply(ctx, del("f", 1, n), fn); err != nil {
				t.Fatal(err)
			}
		}
		apply(1, func(tx *Tx) error {
			bal := tx.Bucket("balances")
			for _, k := range []string{"carol", "alice", "bob"} {
				if _, err := bal.AddInt64([]byte(k), 100); err != nil {
					return err
				}
			}
			if v, err := bal.AddInt64([]byte("alice"), -30); err != nil || v != 70 {
				return fmt.Errorf("AddInt64 = %d, %v", v, err)
			}
			return tx.Put([]byte("raw"), []byte("abc"))
		})
		if err := s.Flush(ctx); err != nil { // bob and carol durable, then changed staged
			t.Fatal(err)
		}
		apply(2, func(tx *Tx) error {
			bal := tx.Bucket("balances")
			if err := bal.Delete([]byte("carol")); err != nil {
				return err
			}
			if err := bal.PutInt64([]byte("dave"), -5); err != nil {
				return err
			}
			_, err := tx.GetInt64([]byte("raw"))
			if !errors.Is(err, ErrNotInt64) {
				return fmt.Errorf("GetInt64 of a 3-byte value: %v", err)
			}
			// The root bucket does not see the balances bucket's keys.
			if _, ok, _ := tx.Get([]byte("alice")); ok {
				return errors.New("root bucket sees alice")
			}
			return nil
		})
		var got []string
		err := s.View(func(tx *Tx) error {
			return tx.Bucket("balances").ForEach(func(k, v []byte) error {
				n, _ := decodeInt64(v)
				got = append(got, fmt.Sprintf("%s=%d", k, n))
				return nil
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		if want := "[alice=70 bob=100 dave=-5]"; fmt.Sprint(got) != want {
			t.Fatalf("ForEach = %v, want %s", got, want)
		}
		var root []string
		s.View(func(tx *Tx) error {
			return tx.ForEach(func(k, v []byte) error { root = append(root, string(k)); return nil })
		})
		if fmt.Sprint(root) != "[raw]" {
			t.Fatalf("root ForEach = %v", root)
		}
	})
}

func TestViewIsReadOnlyAndTxEndsWithFn(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		s := mustOpen(t, be, t.TempDir(), testOpts())
		err := s.View(func(tx *Tx) error {
			if err := tx.Put([]byte("k"), nil); !errors.Is(err, ErrReadOnly) {
				return fmt.Errorf("Put in View: %v", err)
			}
			if _, err := tx.Output("o").Write([]byte("x")); !errors.Is(err, ErrReadOnly) {
				return fmt.Errorf("output write in View: %v", err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		var kept *Tx
		s.Apply(context.Background(), del("f", 1, 1), func(tx *Tx) error { kept = tx; return nil })
		if err := kept.Put([]byte("k"), nil); !errors.Is(err, ErrTxDone) {
			t.Fatalf("Put after fn returned: %v", err)
		}
		if _, _, err := kept.Get([]byte("k")); !errors.Is(err, ErrTxDone) {
			t.Fatalf("Get after fn returned: %v", err)
		}
	})
}

// TestDurableThroughAfterCommitWithMarkOfCut proves invariant 5: the mark
// handed to the checkpoint is the one taken when the batch was cut, and it
// is handed over only once the batch is durable.
func TestDurableThroughAfterCommitWithMarkOfCut(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		g := newGate()
		o := testOpts()
		o.BatchSize = 3
		o.hooks = &hooks{beforeCommit: g.hook}
		s := mustOpen(t, be, t.TempDir(), o)
		t.Cleanup(g.open) // runs before Close if the test fails
		var p progress
		cp := hold("f", &p)
		if err := s.Bind("f", cp); err != nil {
			t.Fatal(err)
		}
		g.arm()
		// The framework counts an item finished after its Handle (and so
		// its Apply) returned.
		for n := 1; n <= 3; n++ {
			applyLine(t, s, del("f", 1, n))
			p.finish()
		}
		<-g.entered // the third Apply cut the batch: the committer is in it
		for n := 4; n <= 5; n++ {
			applyLine(t, s, del("f", 1, n))
			p.finish()
		}
		if got := durableCount(cp); got != 0 {
			t.Fatalf("durable mark %d before the batch committed", got)
		}
		if _, ok := s.Applied("f"); ok {
			t.Fatal("Applied before the commit")
		}
		g.open()
		waitFor(t, "the first batch to commit", func() bool { return s.Stats().Commits == 1 })
		waitFor(t, "the durable mark", func() bool { return durableCount(cp) > 0 })
		// The mark was taken at the cut, inside the third Apply: it counts
		// the two items finished then, not the third, nor the later ones.
		if got := durableCount(cp); got != 2 {
			t.Fatalf("durable mark = %d, want 2 (the mark taken at the cut)", got)
		}
		if l, _ := s.Applied("f"); l.Position != 30 {
			t.Fatalf("Applied = %+v, want position 30", l)
		}
		if err := s.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := durableCount(cp); got != 5 {
			t.Fatalf("after Flush durable mark = %d, want 5", got)
		}
		if l, _ := s.Applied("f"); l.Position != 50 {
			t.Fatalf("Applied = %+v, want position 50", l)
		}
	})
}

func TestBatchSizeCutsABatch(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		o := testOpts()
		o.BatchSize = 10
		s := mustOpen(t, be, t.TempDir(), o)
		for n := 1; n <= 9; n++ {
			applyLine(t, s, del("f", 1, n))
		}
		if c := s.Stats().Commits; c != 0 {
			t.Fatalf("%d commits before the batch was full", c)
		}
		applyLine(t, s, del("f", 1, 10))
		waitFor(t, "the full batch to commit", func() bool { return s.Stats().Commits == 1 })
		if l, _ := s.Applied("f"); l.Position != 100 {
			t.Fatalf("Applied = %+v", l)
		}
	})
}

func TestIntervalCutsABatchAndMovesIdleMarks(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		o := testOpts()
		o.BatchInterval = 5 * time.Millisecond
		s := mustOpen(t, be, t.TempDir(), o)
		var p progress
		cp := hold("f", &p)
		s.Bind("f", cp)
		applyLine(t, s, del("f", 1, 1))
		p.finish()
		waitFor(t, "the interval to commit the batch", func() bool { return s.Stats().Commits == 1 })
		waitFor(t, "the mark", func() bool { return durableCount(cp) == 1 })
		// Items that change nothing (re-deliveries, lines the processor
		// does not store) still move the mark while the store is idle.
		applyLine(t, s, del("f", 1, 1))
		p.finish()
		p.finish()
		waitFor(t, "the idle mark", func() bool { return durableCount(cp) == 3 })
		if c := s.Stats().Commits; c != 1 {
			t.Fatalf("%d commits: an idle store must not write", c)
		}
	})
}

func TestBackPressureBlocksApply(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		g := newGate()
		o := testOpts()
		o.BatchSize = 2
		o.hooks = &hooks{beforeCommit: g.hook}
		s := mustOpen(t, be, t.TempDir(), o)
		t.Cleanup(g.open) // runs before Close if the test fails
		var applied bool
		returned := parkApply(t, s, g, func(ok bool, err error) {
			if err != nil {
				t.Error(err)
			}
			applied = ok
		})
		select {
		case <-returned:
			t.Fatal("Apply returned while three batches were pending")
		default:
		}
		if st := s.Stats(); st.Staged != 6 {
			t.Fatalf("staged = %d, want 6", st.Staged)
		}
		// A waiting Apply gives up with its context.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := s.Apply(ctx, del("f", 1, 8), func(tx *Tx) error { return nil }); !errors.Is(err, context.Canceled) {
			t.Fatalf("Apply with a cancelled context while blocked: %v", err)
		}
		g.open()
		<-returned
		if !applied {
			t.Fatal("line 7 not applied")
		}
		if err := s.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		if l, _ := s.Applied("f"); l.Position != 7*lineLen {
			t.Fatalf("Applied = %+v", l)
		}
	})
}

// TestParkedApplyFoldsTheCommittedBatch: the Apply parked for a batch to
// commit, woken once it committed, folds that batch into the value cache
// itself before it goes on, rather than a goroutine the committer starts:
// on two cores that goroutine took the committer's core while the Apply
// ran on the other, and the next commit waited for it.
func TestParkedApplyFoldsTheCommittedBatch(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		g := newGate()
		var (
			folded    = make(chan struct{}) // closed once the first fold began
			folder    uint64                // its goroutine
			firstWait = true                // the committer's
		)
		o := testOpts()
		o.BatchSize = 2
		o.hooks = &hooks{
			beforeCommit: g.hook,
			beforeWaitFold: func() {
				// The committer folds the last committed batch itself if
				// no one did by the time it needs it folded: the first
				// time, it waits here for the fold, so that the Apply has
				// the time to wake.
				if firstWait {
					firstWait = false
					select {
					case <-folded:
					case <-time.After(10 * time.Second):
						// No one folded it: the committer does, and the
						// test fails below.
					}
				}
			},
			beforeFold: func() {
				select {
				case <-folded: // the folds of a store run one at a time
				default:
					folder = goroutineID()
					close(folded)
				}
			},
		}
		s := mustOpen(t, be, t.TempDir(), o)
		t.Cleanup(g.open)
		var applier uint64
		returned := parkApply(t, s, g, func(_ bool, err error) {
			if err != nil {
				t.Error(err)
			}
			applier = goroutineID() // the Apply's, which calls this
		})
		g.open()
		<-returned
		<-folded
		if folder != applier {
			t.Fatalf("the first batch was folded on goroutine %d, not on the parked Apply's (%d)", folder, applier)
		}
		if err := s.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

func TestSyncModeCommitsEachApply(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		o := testOpts()
		o.Sync = true
		s := mustOpen(t, be, t.TempDir(), o)
		var p progress
		cp := hold("f", &p)
		s.Bind("f", cp)
		for n := 1; n <= 4; n++ {
			applyLine(t, s, del("f", 1, n))
			// Durable when Apply returns.
			if st := s.Stats(); st.Commits != uint64(n) || st.Staged != 0 {
				t.Fatalf("after line %d: %+v", n, st)
			}
			if l, _ := s.Applied("f"); l.Position != int64(n)*lineLen {
				t.Fatalf("after line %d Applied = %+v", n, l)
			}
			// The mark, taken inside Apply, excludes the current item.
			if got := durableCount(cp); got != uint64(n-1) {
				t.Fatalf("after line %d durable mark = %d, want %d", n, got, n-1)
			}
			p.finish()
		}
		if err := s.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := durableCount(cp); got != 4 {
			t.Fatalf("after Flush durable mark = %d, want 4", got)
		}
		if !s.Stats().Sync {
			t.Fatal("Stats.Sync not set")
		}
	})
}

func TestReopenReportsAppliedAndFindsBackend(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		dir := t.TempDir()
		s := mustOpen(t, be, dir, testOpts())
		for n := 1; n <= 3; n++ {
			applyLine(t, s, del("f", 7, n))
		}
		if err := s.Close(); err != nil { // Close flushes
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if _, err := s.Apply(context.Background(), del("f", 7, 9), func(*Tx) error { return nil }); !errors.Is(err, ErrClosed) {
			t.Fatalf("Apply after Close: %v", err)
		}
		// Open by directory alone: the backend is recorded in it. A remote
		// store is opened by its spec.
		cfgs := []string{dir, be.name + ":" + dir}
		if be.remote {
			cfgs = []string{pgSpec(t, dir)}
		}
		for _, cfg := range cfgs {
			s2, err := Open(cfg, &Options{Logger: quietLogger(), Unbound: true})
			if err != nil {
				t.Fatalf("Open(%q): %v", cfg, err)
			}
			l, ok := s2.Applied("f")
			if !ok || l.Applied != (tidemark.Applied{Epoch: 7, Position: 30}) || s2.Backend() != be.name || s2.Dir() != s.Dir() {
				t.Fatalf("Open(%q): Applied = %+v %v, backend %s", cfg, l, ok, s2.Backend())
			}
			if getInt(t, s2, "count") != 3 {
				t.Fatal("state lost")
			}
			if applyLine(t, s2, del("f", 7, 3)) {
				t.Fatal("re-delivery after reopen applied")
			}
			if err := s2.Close(); err != nil {
				t.Fatal(err)
			}
		}
		if be.remote {
			return
		}
		other := Bolt
		if be.name == Bolt {
			other = Pebble
		}
		if _, err := Open(other+":"+dir, nil); !errors.Is(err, ErrBackendMismatch) {
			t.Fatalf("open with the other backend: %v", err)
		}
	})
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := OpenDir(dir, nil); !errors.Is(err, ErrNotStore) {
		t.Fatalf("OpenDir of an empty directory: %v", err)
	}
	if _, err := Open("lmdb:"+dir, nil); !errors.Is(err, ErrUnknownBackend) {
		t.Fatalf("unknown backend: %v", err)
	}
	// A drive letter is not a backend.
	if _, err := Open(`C:\tidemark\state`, nil); !errors.Is(err, ErrNotStore) {
		t.Fatalf("Open of a Windows path: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, storeFile), []byte("tidemark state store\nbackend lmdb\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenDir(dir, nil); !errors.Is(err, ErrUnknownBackend) {
		t.Fatalf("STORE naming an unknown backend: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, storeFile), []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenDir(dir, nil); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("garbage STORE: %v", err)
	}
}

func TestStoreIsLockedByOneProcess(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		dir := t.TempDir()
		mustOpen(t, be, dir, testOpts())
		o := testOpts()
		o.LockTimeout = 50 * time.Millisecond
		_, err := be.open(dir, o)
		if !errors.Is(err, ErrLocked) {
			t.Fatalf("second open: %v", err)
		}
		// A local store's lock names the folder, and the holder where the
		// system tells: here, this very process.
		if !be.remote && (!strings.Contains(err.Error(), dir) || runtime.GOOS == "linux" && !strings.Contains(err.Error(), "this process")) {
			t.Fatalf("the lock error does not name the folder and the holder: %v", err)
		}
	})
}

func TestOutputIsCommittedWithTheState(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		dir := t.TempDir()
		s := mustOpen(t, be, dir, testOpts())
		ctx := context.Background()
		write := func(s Store, n int) {
			t.Helper()
			_, err := s.Apply(ctx, del("f", 1, n), func(tx *Tx) error {
				_, err := fmt.Fprintf(tx.Output("out.csv"), "line %d\n", n)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		for n := 1; n <= 3; n++ {
			write(s, n)
		}
		path := filepath.Join(dir, "out.csv")
		if b := readOutput(t, be, dir, "out.csv"); len(b) != 0 {
			t.Fatalf("staged output already in the file: %q", b)
		}
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		want := "line 1\nline 2\nline 3\n"
		if b := readOutput(t, be, dir, "out.csv"); string(b) != want {
			t.Fatalf("output = %q, want %q", b, want)
		}
		o, err := s.Output("out.csv")
		if be.remote {
			path = ""
		}
		if err != nil || o.Committed() != int64(len(want)) || o.Path() != path || o.Name() != "out.csv" {
			t.Fatalf("Output = %+v, %v", o, err)
		}
		var got strings.Builder
		if n, err := o.WriteTo(&got); err != nil || n != int64(len(want)) || got.String() != want {
			t.Fatalf("WriteTo = %d, %v: %q, want %q", n, err, got.String(), want)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if be.remote {
			s = mustOpen(t, be, dir, testOpts())
			write(s, 4)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if b := readOutput(t, be, dir, "out.csv"); string(b) != want+"line 4\n" {
				t.Fatalf("output = %q", b)
			}
			return // no file: the rest is about one
		}
		// Bytes past the committed length (a batch whose state never
		// committed) are cut off on open.
		f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
		f.WriteString("line 4\n")
		f.Close()
		s = mustOpen(t, be, dir, testOpts())
		if b, _ := os.ReadFile(path); string(b) != want {
			t.Fatalf("after reopen output = %q, want %q", b, want)
		}
		write(s, 4)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(path); string(b) != want+"line 4\n" {
			t.Fatalf("output = %q", b)
		}
		// A file cut shorter than its committed length is an error that
		// says so.
		os.Truncate(path, 3)
		if _, err := be.open(dir, testOpts()); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "shorter") {
			t.Fatalf("open with a short output: %v", err)
		}
	})
}

func TestOutputNames(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		s := mustOpen(t, be, t.TempDir(), testOpts())
		for _, name := range []string{"", ".", "..", "a/b", "../x", storeFile, boltFile, pebbleDir} {
			if _, err := s.Output(name); !errors.Is(err, ErrBadName) {
				t.Errorf("Output(%q): %v", name, err)
			}
		}
	})
}

// TestCommitFailureStopsDurability injects a failing sync of the output
// file: the batch fails, the store fails, nothing after is declared
// durable, and after a reopen a replay restores everything.
func TestCommitFailureStopsDurability(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		for _, errKind := range []error{nil, vfs.ErrNoSpace} {
			t.Run(fmt.Sprint(errKind), func(t *testing.T) {
				dir := t.TempDir()
				o := testOpts()
				// The first batch syncs, the second fails.
				heal, injected := outputFault(t, be, dir, o, "out.csv", vfs.OpSync, 2, true, errKind)
				s, err := be.open(dir, o)
				if err != nil {
					t.Fatal(err)
				}
				var p progress
				cp := hold("f", &p)
				s.Bind("f", cp)
				ctx := context.Background()
				apply := func(n int) error {
					_, err := s.Apply(ctx, del("f", 1, n), func(tx *Tx) error {
						tx.AddInt64([]byte("count"), 1)
						_, err := fmt.Fprintf(tx.Output("out.csv"), "%d\n", n)
						return err
					})
					if err == nil {
						p.finish()
					}
					return err
				}
				for n := 1; n <= 3; n++ {
					if err := apply(n); err != nil {
						t.Fatal(err)
					}
				}
				if err := s.Flush(ctx); err != nil {
					t.Fatal(err)
				}
				for n := 4; n <= 6; n++ {
					if err := apply(n); err != nil {
						t.Fatal(err)
					}
				}
				err = s.Flush(ctx)
				if !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), "out.csv") {
					t.Fatalf("Flush after a failed sync: %v", err)
				}
				if !injected(err) {
					t.Fatalf("error does not wrap %v: %v", errKind, err)
				}
				st := s.Stats()
				if st.FailedCommits != 1 || !st.Failed || st.LastError == "" || st.Commits != 1 {
					t.Fatalf("stats after the failure: %+v", st)
				}
				// The next Apply returns the failure; nothing more is durable.
				if err := apply(7); !errors.Is(err, ErrFailed) {
					t.Fatalf("Apply after the failure: %v", err)
				}
				p.set(100) // whatever the queue finishes from now on
				if err := s.Flush(ctx); !errors.Is(err, ErrFailed) {
					t.Fatalf("second Flush: %v", err)
				}
				if got := durableCount(cp); got != 3 {
					t.Fatalf("durable mark = %d after the failure, want 3", got)
				}
				if l, _ := s.Applied("f"); l.Position != 30 {
					t.Fatalf("Applied = %+v, want 30", l)
				}
				if err := s.Close(); !errors.Is(err, ErrFailed) {
					t.Fatalf("Close of a failed store: %v", err)
				}
				// Restart: state, position and output agree; the feed
				// re-delivers from the pointer (at most the durable mark).
				heal()
				s = mustOpen(t, be, dir, testOpts())
				if l, _ := s.Applied("f"); l.Position != 30 || getInt(t, s, "count") != 3 {
					t.Fatalf("after restart Applied = %+v count = %d", l, getInt(t, s, "count"))
				}
				if b := readOutput(t, be, dir, "out.csv"); string(b) != "1\n2\n3\n" {
					t.Fatalf("after restart output = %q", b)
				}
				for n := 1; n <= 7; n++ {
					_, err := s.Apply(ctx, del("f", 1, n), func(tx *Tx) error {
						tx.AddInt64([]byte("count"), 1)
						_, err := fmt.Fprintf(tx.Output("out.csv"), "%d\n", n)
						return err
					})
					if err != nil {
						t.Fatal(err)
					}
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				if b := readOutput(t, be, dir, "out.csv"); string(b) != "1\n2\n3\n4\n5\n6\n7\n" {
					t.Fatalf("after replay output = %q", b)
				}
			})
		}
	})
}

// TestLineage: a new epoch on the same, unchanged file (the pointer file
// was deleted) still recognises the lines applied under the old epoch.
func TestLineage(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		for _, tc := range []struct {
			name    string
			change  func(f *file) // what happens to the file between runs
			matches bool
			// fpLen, when set, is the first epoch's fingerprint length, as
			// if the file had been that short when the epoch began (-1: empty).
			fpLen int
		}{
			// An epoch begun on a short file (logrotate's create, a header
			// line) has a short fingerprint; the file grows, the pointer
			// file is lost: the new epoch must still be recognised.
			{"began short, grew", func(f *file) {}, true, 100},
			{"began empty, grew", func(f *file) {}, true, -1},
			{"began short, other leading bytes", func(f *file) { copy(f.data[:lineLen], lines(1, 'r')) }, false, 100},
			{"same file", func(f *file) {}, true, 0},
			{"same file appended", func(f *file) { f.data = append(f.data, lines(3, 'z')...) }, true, 0},
			{"rewritten with the same leading bytes", func(f *file) {
				// Same first 4 KB (the fingerprint), other bytes just
				// before the recorded position 4500.
				copy(f.data[4450:4500], lines(5, 'q'))
			}, false, 0},
			{"truncated and rewritten shorter", func(f *file) { f.data = f.data[:lineLen*3] }, false, 0},
			// A byte-identical copy (restored from a backup, moved across
			// file systems): the feed keeps its position for it, so the
			// store must recognise it too.
			{"byte-identical copy with another identity", func(f *file) { f.ident.Ino++ }, true, 0},
			{"another file with another identity", func(f *file) {
				f.ident.Ino++
				copy(f.data[:lineLen], lines(1, 'r'))
			}, false, 0},
		} {
			t.Run(tc.name, func(t *testing.T) {
				dir := t.TempDir()
				f := &file{data: lines(500, 'a'), ident: tidemark.Identity{Dev: 1, Ino: 2}}
				s := mustOpen(t, be, dir, testOpts())
				o1 := f.origin()
				switch {
				case tc.fpLen > 0:
					o1.Fingerprint = tidemark.Fingerprint{Len: tc.fpLen, Hash: fnv64(f.data[:tc.fpLen])}
				case tc.fpLen < 0:
					o1.Fingerprint = tidemark.Fingerprint{Len: 0, Hash: fnv64(nil)}
				}
				for n := 1; n <= 450; n++ {
					d := del("f", 1, n)
					d.Origin = o1
					applyLine(t, s, d)
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				l, _ := mustOpenClose(t, be, dir).Applied("f")
				if l.TailLen != maxTail || l.Identity != f.ident || l.Fingerprint != o1.Fingerprint {
					t.Fatalf("recorded lineage = %+v", l)
				}
				tc.change(f)
				s = mustOpen(t, be, dir, testOpts())
				f.reads.Store(0)
				o2 := f.origin()
				applied := 0
				for n := 1; n <= 500 && int64(n)*lineLen <= int64(len(f.data)); n++ {
					d := del("f", 2, n)
					d.Origin = o2
					if applyLine(t, s, d) {
						applied++
					}
				}
				wantApplied := 500 - 450
				if !tc.matches {
					wantApplied = min(500, len(f.data)/lineLen)
				}
				if applied != wantApplied {
					t.Fatalf("applied %d lines of the new epoch, want %d", applied, wantApplied)
				}
				st := s.Stats()
				if tc.matches && st.SkippedByLineage != 450 {
					t.Fatalf("SkippedByLineage = %d, want 450", st.SkippedByLineage)
				}
				if !tc.matches && st.SkippedByLineage != 0 {
					t.Fatalf("SkippedByLineage = %d, want 0", st.SkippedByLineage)
				}
				// The verdict is taken once per (feed, epoch): one read of
				// the tail, and one of the leading bytes when the record's
				// fingerprint is shorter than the origin's.
				if r := f.reads.Load(); r > 2 || (tc.fpLen == 0 && r > 1) {
					t.Fatalf("%d tail reads while applying: the verdict is not cached", r)
				}
				if err := s.Flush(context.Background()); err != nil {
					t.Fatal(err)
				}
				if l, _ := s.Applied("f"); l.Epoch != 2 {
					t.Fatalf("the new epoch is not recorded: %+v", l)
				}
			})
		}
	})
}

func lines(n int, tag byte) []byte {
	var b bytes.Buffer
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "%c%08d\n", tag, i)
	}
	return b.Bytes()
}

func mustOpenClose(t *testing.T, be backend, dir string) Store {
	t.Helper()
	s := mustOpen(t, be, dir, testOpts())
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return s
}

// A cancelled context only stops an Apply that has to wait: a drain at
// stop may still apply what it was given.
func TestCancelledContextDoesNotFailARunnableApply(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		s := mustOpen(t, be, t.TempDir(), testOpts())
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		for n := 1; n <= 20; n++ {
			ok, err := s.Apply(ctx, del("f", 1, n), func(tx *Tx) error { return nil })
			if !ok || err != nil {
				t.Fatalf("line %d: %v, %v", n, ok, err)
			}
		}
	})
}

// In the Sync mode the Apply whose commit fails returns the failure.
func TestSyncModeCommitFailure(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		o := testOpts()
		o.Sync = true
		dir := t.TempDir()
		heal, injected := outputFault(t, be, dir, o, "out.csv", vfs.OpWrite, 3, false, vfs.ErrNoSpace)
		s := mustOpen(t, be, dir, o)
		var p progress
		cp := hold("f", &p)
		s.Bind("f", cp)
		var errs []error
		for n := 1; n <= 4; n++ {
			ok, err := s.Apply(context.Background(), del("f", 1, n), func(tx *Tx) error {
				_, err := tx.Output("out.csv").Write([]byte(strconv.Itoa(n) + "\n"))
				return err
			})
			if ok != (err == nil) {
				t.Fatalf("line %d: applied=%v with err=%v", n, ok, err)
			}
			if err == nil {
				p.finish()
			}
			errs = append(errs, err)
		}
		if errs[0] != nil || errs[1] != nil || !errors.Is(errs[2], ErrFailed) || !injected(errs[2]) || !errors.Is(errs[3], ErrFailed) {
			t.Fatalf("errors = %v", errs)
		}
		if l, _ := s.Applied("f"); l.Position != 20 {
			t.Fatalf("Applied = %+v, want line 2", l)
		}
		if got := durableCount(cp); got > 2 {
			t.Fatalf("durable mark %d after the failure", got)
		}
		s.Close()
		heal()
		s = mustOpen(t, be, dir, testOpts())
		if b := readOutput(t, be, dir, "out.csv"); string(b) != "1\n2\n" {
			t.Fatalf("output after restart = %q", b)
		}
	})
}

// A file the store did not write is not its output: declaring the output
// of its name fails with ErrOutputExists and leaves the file as it was
// (it used to be emptied, with a warning). An empty file is taken.
func TestOutputDeclarationRefusesAFileItDidNotWrite(t *testing.T) {
	forEachLocalBackend(t, func(t *testing.T, be backend) {
		dir := t.TempDir()
		path := filepath.Join(dir, "out.csv")
		if err := os.WriteFile(path, []byte("someone's data\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		s := mustOpen(t, be, dir, testOpts())
		_, err := s.Output("out.csv")
		if !errors.Is(err, ErrOutputExists) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "move the file away") {
			t.Fatalf("Output of a foreign file: %v", err)
		}
		// Through a transaction, the line fails and nothing is staged.
		ok, err := s.Apply(context.Background(), del("f", 1, 1), func(tx *Tx) error {
			_, err := tx.Output("out.csv").Write([]byte("mine\n"))
			return err
		})
		if ok || !errors.Is(err, ErrOutputExists) {
			t.Fatalf("Apply writing to a foreign file: %v, %v", ok, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = mustOpen(t, be, dir, testOpts())
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(path); string(b) != "someone's data\n" {
			t.Fatalf("the foreign file now holds %q", b)
		}
		// An empty file of the name is taken as the output.
		empty := filepath.Join(dir, "empty.csv")
		if err := os.WriteFile(empty, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		s = mustOpen(t, be, dir, testOpts())
		if _, err := s.Apply(context.Background(), del("f", 1, 1), func(tx *Tx) error {
			_, err := tx.Output("empty.csv").Write([]byte("mine\n"))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(empty); string(b) != "mine\n" {
			t.Fatalf("the empty file taken as output holds %q", b)
		}
	})
}

// TestAppliedAll: every durable record of a feed in the whole store, one
// per namespace that holds one, in namespace order; none for a feed no
// namespace applied; never a record only staged or committing; the same
// after a reopen.
func TestAppliedAll(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		dir := t.TempDir()
		g := newGate()
		o := testOpts()
		o.hooks = &hooks{beforeCommit: g.hook}
		s := mustOpen(t, be, dir, o)
		t.Cleanup(g.open) // before Close if the test fails
		ctx := context.Background()
		positions := func(ls []tidemark.Lineage) []int64 {
			ps := make([]int64, len(ls))
			for i, l := range ls {
				ps[i] = l.Position
			}
			return ps
		}
		check := func(s Store, feed string, want ...int64) {
			t.Helper()
			got := s.AppliedAll(feed)
			if fmt.Sprint(positions(got)) != fmt.Sprint(want) && !(len(got) == 0 && len(want) == 0) {
				t.Fatalf("AppliedAll(%q) = %v, want positions %v", feed, positions(got), want)
			}
			for _, l := range got {
				if l.Epoch != 4 {
					t.Fatalf("AppliedAll(%q): epoch %d, want 4", feed, l.Epoch)
				}
			}
		}
		check(s, "f") // a new store: none
		// Namespaces applied in an order other than theirs: the result is
		// in namespace order, whichever namespace asks.
		for _, step := range []struct {
			ns   string
			feed string
			n    int
		}{{"b", "f", 2}, {"", "f", 5}, {"a", "f", 3}, {"a", "g", 7}} {
			applyLine(t, s.Namespace(step.ns), del(step.feed, 4, step.n))
		}
		check(s, "f") // only staged
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		check(s, "f", 50, 30, 20)
		check(s, "g", 70)
		check(s, "h")
		// Newer positions, staged, then committing (held in the gate):
		// AppliedAll still reports the durable ones, and a namespace with
		// nothing durable not at all.
		applyLine(t, s.Namespace("a"), del("f", 4, 9))
		applyLine(t, s.Namespace("c"), del("f", 4, 1))
		check(s, "f", 50, 30, 20)
		g.arm()
		flushed := make(chan error, 1)
		go func() { flushed <- s.Flush(ctx) }()
		<-g.entered
		check(s, "f", 50, 30, 20)
		g.open()
		if err := <-flushed; err != nil {
			t.Fatal(err)
		}
		check(s, "f", 50, 90, 20, 10)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = mustOpen(t, be, dir, testOpts())
		check(s, "f", 50, 90, 20, 10)
		check(s, "g", 70)
		check(s, "h")
	})
}
