package state

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// errUndo makes a function fail after its writes.
var errUndo = errors.New("undo this line")

// A function that fails, or panics, after changing keys of the staging
// batch in place, creating keys, deleting keys and writing output leaves
// nothing of it: the next line reads what the line before wrote, and the
// store commits only that.
func TestFailedFunctionLeavesTheBatchAsItWas(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		dir := t.TempDir()
		s := mustOpen(t, be, dir, testOpts())
		out, err := s.Output("out")
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		good := func(n int) func(tx *Tx) error {
			return func(tx *Tx) error {
				if _, err := tx.AddInt64([]byte("count"), 1); err != nil {
					return err
				}
				if err := tx.Bucket("b").Put([]byte("last"), fmt.Appendf(nil, "line %d", n)); err != nil {
					return err
				}
				_, err := tx.Output("out").Write([]byte("x"))
				return err
			}
		}
		spoil := func(tx *Tx) {
			// In place (same length), with a new length, new keys, a
			// deletion, output.
			if _, err := tx.AddInt64([]byte("count"), 100); err != nil {
				t.Error(err)
			}
			if err := tx.Bucket("b").Put([]byte("last"), []byte("spoiled, and longer")); err != nil {
				t.Error(err)
			}
			for i := range 40 {
				if err := tx.Put(fmt.Appendf(nil, "new-%d", i), []byte("v")); err != nil {
					t.Error(err)
				}
			}
			if err := tx.Delete([]byte("count")); err != nil {
				t.Error(err)
			}
			if _, err := tx.Output("out").Write([]byte("never")); err != nil {
				t.Error(err)
			}
		}
		check := func(n int) {
			t.Helper()
			_, err := s.Apply(ctx, del("f", 1, n), func(tx *Tx) error {
				c, err := tx.GetInt64([]byte("count"))
				if err != nil || c != int64(n-1) {
					return fmt.Errorf("line %d: count %d, %v; want %d", n, c, err, n-1)
				}
				v, ok, err := tx.Bucket("b").Get([]byte("last"))
				if want := fmt.Sprintf("line %d", n-1); err != nil || !ok || string(v) != want {
					return fmt.Errorf("line %d: last %q, %v, %v; want %q", n, v, ok, err, want)
				}
				if _, ok, err := tx.Get([]byte("new-7")); ok || err != nil {
					return fmt.Errorf("line %d: new-7 exists (%v)", n, err)
				}
				return good(n)(tx)
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		n := 1
		if _, err := s.Apply(ctx, del("f", 1, n), good(n)); err != nil {
			t.Fatal(err)
		}
		for round := range 6 {
			// Fails, then panics.
			_, err := s.Apply(ctx, del("f", 1, n+1), func(tx *Tx) error { spoil(tx); return errUndo })
			if !errors.Is(err, errUndo) {
				t.Fatalf("failing function: %v", err)
			}
			func() {
				defer func() { _ = recover() }()
				_, _ = s.Apply(ctx, del("f", 1, n+1), func(tx *Tx) error { spoil(tx); panic("spoiled") })
			}()
			n++
			check(n)
			if round%2 == 1 {
				// Across batches too.
				if err := s.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if got := out.Committed(); got != int64(n) {
			t.Fatalf("output %d bytes, want %d", got, n)
		}
		s = mustOpen(t, be, dir, testOpts())
		if got := getInt(t, s, "count"); got != int64(n) {
			t.Fatalf("after reopening, count %d, want %d", got, n)
		}
	})
}

// An empty value deleted, or changed, by a function that fails is empty
// again, not absent.
func TestFailedFunctionKeepsAnEmptyValue(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		s := mustOpen(t, be, t.TempDir(), testOpts())
		ctx := context.Background()
		if _, err := s.Apply(ctx, del("f", 1, 1), func(tx *Tx) error { return tx.Put([]byte("e"), nil) }); err != nil {
			t.Fatal(err)
		}
		for n, spoil := range []func(tx *Tx) error{
			func(tx *Tx) error { return tx.Delete([]byte("e")) },
			func(tx *Tx) error { return tx.Put([]byte("e"), []byte("full")) },
		} {
			_, err := s.Apply(ctx, del("f", 1, 2+n), func(tx *Tx) error {
				if err := spoil(tx); err != nil {
					return err
				}
				return errUndo
			})
			if !errors.Is(err, errUndo) {
				t.Fatal(err)
			}
			err = s.View(func(tx *Tx) error {
				v, ok, err := tx.Get([]byte("e"))
				if err != nil || !ok || v == nil || len(v) != 0 {
					return fmt.Errorf("after undoing change %d: %q (nil: %v), %v, %v", n, v, v == nil, ok, err)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	})
}

// A value Get returned stays as it was while the same function writes the
// key again, with the same length.
func TestGetValueStaysWhileTheFunctionWrites(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		s := mustOpen(t, be, t.TempDir(), testOpts())
		ctx := context.Background()
		for n := 1; n <= 3; n++ {
			_, err := s.Apply(ctx, del("f", 1, n), func(tx *Tx) error {
				before, _, err := tx.Get([]byte("k"))
				if err != nil {
					return err
				}
				kept := string(before)
				if err := tx.Put([]byte("k"), fmt.Appendf(nil, "value-%d", n)); err != nil {
					return err
				}
				if _, err := tx.AddInt64([]byte("c"), 1); err != nil {
					return err
				}
				c, _, _ := tx.Get([]byte("c"))
				keptC := string(c)
				if _, err := tx.AddInt64([]byte("c"), 1); err != nil {
					return err
				}
				if string(before) != kept || string(c) != keptC {
					return fmt.Errorf("line %d: values read before the writes changed: %q, %x", n, before, c)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	})
}

// The committer does not cut the staging batch while a function writes
// into it: it leaves the cut to the end of that Apply, and the batch,
// with the function's writes and its position, commits once the Apply
// returns, without another line.
func TestCutWaitsForTheRunningFunction(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		o := testOpts()
		o.BatchInterval = time.Millisecond
		s := mustOpen(t, be, t.TempDir(), o)
		c := s.(*nsStore).c
		ctx := context.Background()
		waited := false
		n := 0
		for !waited {
			n++
			_, err := s.Apply(ctx, del("f", 1, n), func(tx *Tx) error {
				c.mu.Lock()
				staged := c.cur.count
				c.mu.Unlock()
				if staged > 0 {
					// Lines are staged: the committer's timer wants them
					// cut, and cannot while this function runs.
					waited = true
					deadline := time.Now().Add(30 * time.Second)
					for !c.cutWanted.Load() {
						if time.Now().After(deadline) {
							return errors.New("the committer never wanted a cut")
						}
						time.Sleep(time.Millisecond)
					}
					c.mu.Lock()
					cur, sealed := c.cur, c.sealed
					c.mu.Unlock()
					if cur != tx.cur || sealed != nil {
						return errors.New("the batch was cut while the function ran")
					}
				}
				_, err := tx.AddInt64([]byte("count"), 1)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			if l, ok := s.Applied("f"); ok && l.Position == int64(n)*lineLen {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("line %d did not commit after its Apply returned", n)
			}
			time.Sleep(time.Millisecond)
		}
		if got := getInt(t, s, "count"); got != int64(n) {
			t.Fatalf("count %d, want %d", got, n)
		}
	})
}

// An Apply under a cancelled context that finds the token held by the
// committer, cutting a batch, waits for it rather than failing: a drain at
// stop runs under such a context.
func TestCancelledApplyWaitsForTheCommittersCut(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		entered, leave := make(chan struct{}), make(chan struct{})
		var once sync.Once
		o := testOpts()
		o.BatchInterval = time.Millisecond
		o.hooks = &hooks{whileCutting: func() {
			once.Do(func() {
				close(entered)
				<-leave
			})
		}}
		s := mustOpen(t, be, t.TempDir(), o)
		c := s.(*nsStore).c
		if !applyLine(t, s, del("f", 1, 1)) {
			t.Fatal("line 1 not applied")
		}
		select {
		case <-entered:
		case <-time.After(30 * time.Second):
			t.Fatal("the committer never cut the line's batch")
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		done := make(chan error, 1)
		go func() {
			_, err := s.Apply(ctx, del("f", 1, 2), func(tx *Tx) error {
				_, err := tx.AddInt64([]byte("count"), 1)
				return err
			})
			done <- err
		}()
		deadline := time.Now().Add(30 * time.Second)
		for c.applyWaiters.Load() == 0 {
			select {
			case err := <-done:
				close(leave)
				t.Fatalf("Apply returned while the committer held the token: %v", err)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatal("the Apply never waited for the token")
			}
			time.Sleep(time.Millisecond)
		}
		close(leave)
		if err := <-done; err != nil {
			t.Fatalf("Apply under a cancelled context: %v", err)
		}
		if got := getInt(t, s, "count"); got != 2 {
			t.Fatalf("count %d, want 2", got)
		}
	})
}

// batchSizes records the count of every batch committed.
type batchSizes struct {
	mu     sync.Mutex
	counts []int
}

func (b *batchSizes) ObserveCommit(n int, _ time.Duration) {
	b.mu.Lock()
	b.counts = append(b.counts, n)
	b.mu.Unlock()
}

// A line that waited for a full batch to commit goes into the next batch,
// not into the full one: the committer cannot cut it while that Apply
// holds the token, so the Apply cuts it. (The first full batch after the
// one committing is cut to wait for that commit; the line waits when the
// batch after that is full too: see TestOverfullBatchIsCutWhileTheOneBeforeCommits.)
func TestLineAfterBackPressureGoesIntoTheNextBatch(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		g := newGate()
		var sizes batchSizes
		o := testOpts()
		o.BatchSize = 5
		o.hooks = &hooks{beforeCommit: g.hook}
		o.Observer = &sizes
		s := mustOpen(t, be, t.TempDir(), o)
		t.Cleanup(g.open)
		g.arm()
		// A full batch committing (held at the gate), a full one waiting
		// for that commit, a full one staged.
		for n := 1; n <= 15; n++ {
			applyLine(t, s, del("f", 1, n))
		}
		select {
		case <-g.entered:
		case <-time.After(30 * time.Second):
			t.Fatal("the first batch never went to commit")
		}
		done := make(chan error, 1)
		go func() {
			_, err := s.Apply(context.Background(), del("f", 1, 16), func(tx *Tx) error {
				_, err := tx.AddInt64([]byte("count"), 1)
				return err
			})
			done <- err
		}()
		deadline := time.Now().Add(30 * time.Second)
		for s.Stats().BackPressure == 0 {
			if time.Now().After(deadline) {
				t.Fatal("line 16 never waited for the batch to commit")
			}
			time.Sleep(time.Millisecond)
		}
		g.open()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if err := s.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		sizes.mu.Lock()
		defer sizes.mu.Unlock()
		total := 0
		for _, n := range sizes.counts {
			if n > o.BatchSize {
				t.Fatalf("batches of %v lines, BatchSize %d", sizes.counts, o.BatchSize)
			}
			total += n
		}
		if total != 16 {
			t.Fatalf("batches of %v lines, want 16 in all", sizes.counts)
		}
	})
}

// With MaxBatchSize, a batch goes on taking lines past BatchSize while
// the batch before it commits, up to MaxBatchSize; then it is cut to wait
// for that commit, and the next batch grows the same way; only then does
// an Apply wait. Once that commit is done, the grown batches commit in
// turn, and every line is durable, once, in batches of at most
// MaxBatchSize. Without it (MaxBatchSize 0) the batches are cut at
// BatchSize.
func TestBatchGrowsWhileTheOneBeforeCommits(t *testing.T) {
	for _, mx := range []int{0, 6} {
		t.Run(fmt.Sprintf("MaxBatchSize=%d", mx), func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, be backend) {
				g := newGate()
				var sizes batchSizes
				o := testOpts()
				o.BatchSize, o.MaxBatchSize = 2, mx
				o.hooks = &hooks{beforeCommit: g.hook}
				o.Observer = &sizes
				s := mustOpen(t, be, t.TempDir(), o)
				t.Cleanup(g.open)
				g.arm()
				applyLine(t, s, del("f", 1, 1))
				applyLine(t, s, del("f", 1, 2)) // cut: the committer blocks in it
				<-g.entered
				limit := max(mx, o.BatchSize)
				n := 2
				for ; n < 2+2*limit; n++ {
					// A line that waits here fails the test rather than hang it.
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					_, err := s.Apply(ctx, del("f", 1, n+1), func(tx *Tx) error {
						_, err := tx.AddInt64([]byte("count"), 1)
						return err
					})
					cancel()
					if err != nil {
						t.Fatalf("line %d with %d lines in the next batches, MaxBatchSize %d: %v", n+1, n-2, mx, err)
					}
				}
				if bp := s.Stats().BackPressure; bp != 0 {
					t.Fatalf("%d Apply calls waited with %d lines in the next batches, MaxBatchSize %d", bp, n-2, mx)
				}
				n++
				returned := make(chan error, 1)
				go func() { returned <- func() error { applyLine(t, s, del("f", 1, n)); return nil }() }()
				waitFor(t, "Apply to wait", func() bool { return s.Stats().BackPressure == 1 })
				select {
				case <-returned:
					t.Fatalf("line %d applied with two batches of %d lines waiting and one committing", n, limit)
				default:
				}
				g.open()
				<-returned
				if err := s.Flush(context.Background()); err != nil {
					t.Fatal(err)
				}
				if l, _ := s.Applied("f"); l.Position != int64(n)*lineLen {
					t.Fatalf("Applied = %+v, want position %d", l, n*lineLen)
				}
				if err := s.View(func(tx *Tx) error {
					if c, err := tx.GetInt64([]byte("count")); err != nil || c != int64(n) {
						return fmt.Errorf("count %d, %v; want %d", c, err, n)
					}
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				sizes.mu.Lock()
				defer sizes.mu.Unlock()
				total := 0
				for _, c := range sizes.counts {
					if c > limit {
						t.Fatalf("batches of %v lines, limit %d", sizes.counts, limit)
					}
					total += c
				}
				if total != n || len(sizes.counts) < 3 || sizes.counts[1] != limit || sizes.counts[2] != limit {
					t.Fatalf("batches of %v lines, want %d lines with the second and third batches of %d", sizes.counts, n, limit)
				}
			})
		})
	}
}
