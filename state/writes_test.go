package state

import (
	"context"
	"strconv"
	"sync"
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
	r.commits = append(r.commits, ws)
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
