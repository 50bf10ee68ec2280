package state

import (
	"bytes"
	"context"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

// recorder wraps an engine and records the writes of each commit.
type recorder struct {
	engine
	mu      sync.Mutex
	commits [][]write
}

func (r *recorder) commit(ws []write) error {
	r.mu.Lock()
	r.commits = append(r.commits, slices.Clone(ws)) // ws is the store's again after the commit
	r.mu.Unlock()
	return r.engine.commit(ws)
}

// TestBatchWritesOnlyChangedKeys: a batch writes the keys it changed (each
// once, with its last value) and one applied position per feed, however
// many deliveries it holds and however big the state is.
func TestBatchWritesOnlyChangedKeys(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		s := mustOpen(t, be, t.TempDir(), testOpts())
		ctx := context.Background()
		n := 0
		apply := func(fn func(tx *Tx) error) {
			t.Helper()
			n++
			if _, err := s.Apply(ctx, del("f", 1, n), fn); err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; i < 500; i++ {
			apply(func(tx *Tx) error { return tx.PutInt64([]byte("k"+strconv.Itoa(i)), 1) })
		}
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		c := s.(*nsStore).c
		c.stopPreload() // it reads through the engine swapped below
		rec := &recorder{engine: c.eng}
		c.eng = rec
		for i := 0; i < 100; i++ { // 100 deliveries touching 3 keys
			apply(func(tx *Tx) error {
				_, err := tx.AddInt64([]byte("k"+strconv.Itoa(i%3)), 1)
				return err
			})
		}
		applyLine(t, s.Namespace("other"), del("g", 1, 1))
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if len(rec.commits) != 1 {
			t.Fatalf("%d commits, want 1", len(rec.commits))
		}
		// k0, k1, k2; other's count and sum; the applied positions of f and
		// of other/g.
		keys := map[string]int{}
		for _, w := range rec.commits[0] {
			keys[string(w.key)]++
		}
		if len(rec.commits[0]) != 7 || len(keys) != 7 {
			t.Fatalf("the batch wrote %d keys (%d distinct), want 7", len(rec.commits[0]), len(keys))
		}
		if got := getInt(t, s, "k0"); got != 1+34 {
			t.Fatalf("k0 = %d, want 35", got)
		}
	})
}

// A batch cut to wait for the commit of the one before (pending: full
// while that one commits) has its keys put in order meanwhile
// (core.presort); its commit writes every key once, with its value as the
// batch holds it then, all in key order.
func TestPresortedBatchCommitsInKeyOrder(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		t.Run("sorted ahead", func(t *testing.T) { testPresorted(t, be, false) })
		// The batch's entries are not where they were when the sort saw
		// them (a case no Apply makes: the check's): the commit sorts
		// them itself.
		t.Run("changed since", func(t *testing.T) { testPresorted(t, be, true) })
	})
}

func testPresorted(t *testing.T, be backend, stale bool) {
	{
		// Once armed, the first batch's commit waits until the second is
		// cut to wait for it, so that the second is sorted ahead.
		release := make(chan struct{})
		var armed atomic.Bool
		var once sync.Once
		o := testOpts()
		o.BatchSize, o.MaxBatchSize = 3000, 3000
		o.hooks = &hooks{beforeCommit: func() {
			if armed.Load() {
				once.Do(func() { <-release })
			}
		}}
		dir := t.TempDir()
		s := mustOpen(t, be, dir, o)
		var released sync.Once
		t.Cleanup(func() { released.Do(func() { close(release) }) }) // before Close
		c := s.(*nsStore).c
		c.stopPreload()
		// The output is declared before the engine is wrapped: whether
		// the engine keeps outputs (PostgreSQL) is asked of it then.
		applyFlush(t, s, del("g", 1, 1), func(tx *Tx) error {
			_, err := tx.Output("out.csv").Write([]byte("declared\n"))
			return err
		})
		// Under the checksums: it records what the backend is given,
		// and the values of a batch sorted ahead come with theirs.
		sums := c.eng.(*sumEngine)
		rec := &recorder{engine: sums.engine}
		sums.engine = rec
		armed.Store(true)
		ctx := context.Background()
		key := func(i int) []byte { return []byte("k" + strconv.Itoa((i*7919)%6000)) }
		done := make(chan error, 1)
		go func() {
			for n := 1; n <= 6001; n++ {
				if _, err := s.Apply(ctx, del("f", 1, n), func(tx *Tx) error {
					_, err := tx.AddInt64(key(n), int64(n))
					if err != nil {
						return err
					}
					_, err = tx.Output("out.csv").Write([]byte("x\n"))
					return err
				}); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
		// Wait for the second batch to be cut, to wait for the first's
		// commit (line 6000 fills it; line 6001 goes into the third).
		pending := func() *batch {
			c.mu.Lock()
			defer c.mu.Unlock()
			return c.pending
		}
		var b *batch
		var applied error
		applyDone := false
		for b == nil {
			if b = pending(); b == nil && applyDone {
				t.Fatalf("the lines were applied (%v) and no batch was cut to wait for the one before: %+v", applied, s.Stats())
			}
			select {
			case applied = <-done:
				applyDone = true
				if applied != nil {
					t.Fatal(applied)
				}
			default:
			}
			runtime.Gosched()
		}
		c.mu.Lock()
		presorted := b.sortDone != nil
		c.mu.Unlock()
		if presorted && stale {
			<-b.sortDone
			c.mu.Lock()
			b.writes[0], b.writes[1] = b.writes[1], b.writes[0]
			c.mu.Unlock()
		}
		released.Do(func() { close(release) })
		if !applyDone {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if !presorted {
			t.Fatalf("the batch that waited for the one before was not sorted ahead")
		}
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if len(rec.commits) < 2 {
			t.Fatalf("%d commits, want at least 2", len(rec.commits))
		}
		for i, ws := range rec.commits {
			for j := 1; j < len(ws); j++ {
				if bytes.Compare(ws[j-1].key, ws[j].key) >= 0 {
					t.Fatalf("commit %d: key %q at %d after %q", i, ws[j].key, j, ws[j-1].key)
				}
			}
		}
		// Every account holds the sum of its lines.
		want := map[string]int64{}
		for n := 1; n <= 6001; n++ {
			want[string(key(n))] += int64(n)
		}
		for k, v := range want {
			if got := getInt(t, s, k); got != v {
				t.Fatalf("%s = %d, want %d", k, got, v)
			}
		}
		// The values sorted ahead came with their checksums, unless
		// the batch changed since; each checksum is the one the store
		// checks: reopened without a value cache, every read is the
		// backend's, checked.
		ahead := 0
		for _, ws := range rec.commits {
			for _, w := range ws {
				if w.summed {
					ahead++
				}
			}
		}
		if stale && ahead > 0 || !stale && ahead == 0 {
			t.Fatalf("%d values were written with the checksums of the sort ahead (the batch changed since: %v)", ahead, stale)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		o = testOpts()
		o.CacheSize = -1
		s = mustOpen(t, be, dir, o)
		for k, v := range want {
			if got := getInt(t, s, k); got != v {
				t.Fatalf("reopened: %s = %d, want %d", k, got, v)
			}
		}
	}
}
