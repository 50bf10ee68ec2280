package state

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"
)

// A line allocates nothing once its keys are staged: its Tx serves from
// the store's ring (see Tx), on every backend. Before, each line cut a
// 32-byte Tx from a slab: 320 KB for these 10,000 lines.
func TestApplyAllocatesNothingPerLine(t *testing.T) {
	// Not parallel: the process's allocations are counted.
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) {
			o := testOpts()
			o.BatchSize, o.BatchInterval = 1<<20, time.Hour // no commit while counting
			s := mustOpen(t, be, t.TempDir(), o)
			ns := s.Namespace("ledger")
			var n int
			fn := ledgerLine(newBareLedger().names, &n)
			apply := func(lines int) { applyLines(t, ns, &n, lines, fn) }
			apply(2 * txRing) // every key staged, the ring made
			const lines = 10000
			// A little for the runtime and the backend's own goroutines.
			if got := leastAllocated(nil, func() { apply(lines) }); got > 32<<10 {
				t.Fatalf("%d lines allocated %d bytes (%.1f a line), want about none", lines, got, float64(got)/lines)
			}
		})
	}
}

// leastAllocated returns the fewest bytes the process allocated while
// run ran, over allocAttempts runs, each after before (nil: nothing). The
// process's allocations are counted, so that the backend's goroutines
// (PostgreSQL's lease, the end of a commit) may add to one run; an
// allocation a line adds to every run.
func leastAllocated(before, run func()) uint64 {
	least := uint64(1<<64 - 1)
	for range allocAttempts {
		if before != nil {
			before()
		}
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		run()
		runtime.ReadMemStats(&m1)
		least = min(least, m1.TotalAlloc-m0.TotalAlloc)
	}
	return least
}

// allocAttempts is how many runs leastAllocated takes the least of.
const allocAttempts = 5

// applyLines applies lines more lines of feed f to ns with fn, *n the
// position of the last.
func applyLines(t *testing.T, ns Namespace, n *int, lines int, fn func(*Tx) error) {
	t.Helper()
	for range lines {
		*n++
		if _, err := ns.Apply(context.Background(), del("f", 1, *n), fn); err != nil {
			t.Fatal(err)
		}
	}
}

// A line that writes an output line allocates nothing either, once the
// batch's output buffer is one a committed batch left (its Tx has a
// writer of its own). Before, each line cut a 24-byte writer from a slab
// besides its Tx.
func TestApplyWithOutputAllocatesNothingPerLine(t *testing.T) {
	// Not parallel: the process's allocations are counted.
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) {
			o := testOpts()
			o.BatchSize, o.BatchInterval = 2000, time.Hour
			s := mustOpen(t, be, t.TempDir(), o)
			ns := s.Namespace("ledger")
			var n int
			key, out := []byte("account"), []byte("0123456789012345678901234567890\n")
			fn := func(tx *Tx) error {
				if _, err := tx.Bucket("balances").AddInt64(key, 1); err != nil {
					return err
				}
				_, err := tx.Output("alloc.out").Write(out)
				return err
			}
			apply := func(lines int) { applyLines(t, ns, &n, lines, fn) }
			apply(2 * txRing)
			flush := func() {
				if err := s.Flush(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			const lines = 1000 // within one batch
			if got := leastAllocated(flush, func() { apply(lines) }); got > 8<<10 {
				t.Fatalf("%d lines allocated %d bytes (%.1f a line), want about none", lines, got, float64(got)/lines)
			}
		})
	}
}

// A Tx, or a bucket handle or output writer of it, kept past its function
// and used later
// fails with ErrTxDone, and is never served to a later line, however many
// lines come: the ring it was part of is left to whoever kept it.
func TestKeptTxIsNeverServedAgain(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		s := mustOpen(t, be, t.TempDir(), testOpts())
		ctx := context.Background()
		line := 0
		apply := func(fn func(tx *Tx) error) {
			t.Helper()
			line++
			if _, err := s.Apply(ctx, del("f", 1, line), fn); err != nil {
				t.Fatal(err)
			}
		}
		var kept *Tx
		var keptB *Bucket
		var keptW *OutputWriter
		apply(func(tx *Tx) error { kept = tx; return nil })
		apply(func(tx *Tx) error { keptB = tx.Bucket("b"); return nil })
		apply(func(tx *Tx) error { keptW = tx.Output("kept.out"); return nil })
		if err := kept.Put([]byte("k"), []byte("v")); !errors.Is(err, ErrTxDone) {
			t.Fatalf("Put of a kept Tx: %v, want ErrTxDone", err)
		}
		if _, err := keptB.AddInt64([]byte("k"), 1); !errors.Is(err, ErrTxDone) {
			t.Fatalf("AddInt64 of a kept bucket handle: %v, want ErrTxDone", err)
		}
		if _, err := keptW.Write([]byte("x")); !errors.Is(err, ErrTxDone) {
			t.Fatalf("Write of a kept output writer: %v, want ErrTxDone", err)
		}
		for range 2*txRing + 10 {
			apply(func(tx *Tx) error {
				if _, err := tx.Output("kept.out").Write([]byte("y")); err != nil {
					return err
				}
				if tx == kept || tx == keptB.tx || tx == keptW.tx {
					return fmt.Errorf("line %d was served the Tx of a line before, kept and used after its function returned", line)
				}
				return nil
			})
		}
		if _, _, err := kept.Get([]byte("k")); !errors.Is(err, ErrTxDone) {
			t.Fatalf("Get of a kept Tx %d lines later: %v, want ErrTxDone", 2*txRing+10, err)
		}
		if _, err := keptB.GetInt64([]byte("k")); !errors.Is(err, ErrTxDone) {
			t.Fatalf("GetInt64 of a kept bucket handle %d lines later: %v, want ErrTxDone", 2*txRing+10, err)
		}
		if _, err := keptW.Write([]byte("x")); !errors.Is(err, ErrTxDone) {
			t.Fatalf("Write of a kept output writer %d lines later: %v, want ErrTxDone", 2*txRing+10, err)
		}
	})
}

// A Tx that serves again serves its new line only: the lines go round
// three namespaces (so a Tx of the ring serves another namespace each
// time round), each adding to a key of bucket "x" (the first bucket
// handle of its Tx), and the lines that a Tx serves first each time round
// to buckets "y" and "z" too (the transaction's other handles, which the
// lines between them leave as they were).
func TestTxServesItsNewLineOnly(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		s := mustOpen(t, be, t.TempDir(), testOpts())
		ctx := context.Background()
		names := []string{"a", "b", "c"}
		want := map[[2]string]int64{}
		lines := 2*txRing + 5
		for i := range lines {
			name := names[i%len(names)]
			buckets := []string{"x"}
			if i%txRing == 0 {
				buckets = append(buckets, "y", "z")
			}
			_, err := s.Namespace(name).Apply(ctx, del("f", 1, i+1), func(tx *Tx) error {
				for _, b := range buckets {
					if _, err := tx.Bucket(b).AddInt64([]byte("k"), 1); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range buckets {
				want[[2]string{name, b}]++
			}
		}
		for _, name := range names {
			err := s.Namespace(name).View(func(tx *Tx) error {
				for _, b := range []string{"x", "y", "z"} {
					if v, err := tx.Bucket(b).GetInt64([]byte("k")); err != nil || v != want[[2]string{name, b}] {
						return fmt.Errorf("namespace %q bucket %q holds %d (%v), want %d", name, b, v, err, want[[2]string{name, b}])
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	})
}

// A Tx whose function panicked is done too: used after the panic, it
// fails with ErrTxDone and is not served again.
func TestTxOfAPanickedFunctionIsDone(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		s := mustOpen(t, be, t.TempDir(), testOpts())
		var kept *Tx
		func() {
			defer func() { _ = recover() }()
			_, _ = s.Apply(context.Background(), del("f", 1, 1), func(tx *Tx) error {
				kept = tx
				panic("the function fails")
			})
		}()
		if err := kept.Put([]byte("k"), []byte("v")); !errors.Is(err, ErrTxDone) {
			t.Fatalf("Put of the Tx of a panicked function: %v, want ErrTxDone", err)
		}
		if _, err := s.Apply(context.Background(), del("f", 1, 2), func(tx *Tx) error {
			if tx == kept {
				return errors.New("the Tx of the panicked function served again")
			}
			return tx.Put([]byte("k"), []byte("w"))
		}); err != nil {
			t.Fatal(err)
		}
	})
}
