package state

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// A value read from the backend is cached; a later batch changes it and
// is no longer the last committed one when the key is read again: the
// read must see the change, not the value cached before it.
func TestValueCacheFollowsCommits(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		dir := t.TempDir()
		ctx := context.Background()
		put := func(s Store, n int, k string, v int64) {
			t.Helper()
			_, err := s.Apply(ctx, del("f", 1, n), func(tx *Tx) error { return tx.PutInt64([]byte(k), v) })
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
		s := mustOpen(t, be, dir, testOpts())
		put(s, 1, "k", 1)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		// Reopened: k is only in the backend. Line 2 reads it there (and
		// caches it) and changes it; lines 3 and 4 commit other keys, so
		// that line 2's batch is not the last committed any more.
		s = mustOpen(t, be, dir, testOpts())
		_, err := s.Apply(ctx, del("f", 1, 2), func(tx *Tx) error {
			n, err := tx.GetInt64([]byte("k"))
			if err != nil {
				return err
			}
			if n != 1 {
				return fmt.Errorf("k = %d, want 1", n)
			}
			return tx.PutInt64([]byte("k"), 2)
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		put(s, 3, "j", 3)
		put(s, 4, "j", 4)
		if got := getInt(t, s, "k"); got != 2 {
			t.Fatalf("k = %d after its change committed two batches ago, want 2", got)
		}
	})
}

// Random reads, writes and deletes over more keys than a small cache
// holds (4 KiB: about 20 entries), in batches of a few lines, with reopens, against a model: every
// read sees the last value written.
func TestValueCacheModel(t *testing.T) {
	forEachLocalBackend(t, func(t *testing.T, be backend) {
		for _, size := range []int64{-1, 4 << 10, 1 << 20} {
			t.Run(fmt.Sprintf("cache=%d", size), func(t *testing.T) {
				dir := t.TempDir()
				ctx := context.Background()
				rng := rand.New(rand.NewPCG(uint64(size), 7))
				model := map[string][]byte{}
				o := func() *Options {
					o := testOpts()
					o.BatchSize = 1 + rng.IntN(16)
					o.CacheSize = size
					return o
				}
				s := mustOpen(t, be, dir, o())
				for n := 1; n <= 800; n++ {
					k := fmt.Sprintf("key-%03d", rng.IntN(100))
					op := rng.IntN(10)
					v := fmt.Appendf(nil, "%0*d", 1+rng.IntN(12), n)
					_, err := s.Apply(ctx, del("f", 1, n), func(tx *Tx) error {
						got, ok, err := tx.Get([]byte(k))
						if err != nil {
							return err
						}
						if want, had := model[k]; ok != had || string(got) != string(want) {
							return fmt.Errorf("line %d: %s = %q, %v; want %q, %v", n, k, got, ok, want, had)
						}
						if op == 0 {
							return tx.Delete([]byte(k))
						}
						return tx.Put([]byte(k), v)
					})
					if err != nil {
						t.Fatal(err)
					}
					if op == 0 {
						delete(model, k)
					} else {
						model[k] = v
					}
					switch rng.IntN(200) {
					case 0:
						if err := s.Close(); err != nil {
							t.Fatal(err)
						}
						s = mustOpen(t, be, dir, o())
					case 1, 2, 3:
						if err := s.Flush(ctx); err != nil {
							t.Fatal(err)
						}
					}
				}
				err := s.View(func(tx *Tx) error {
					for i := range 100 {
						k := fmt.Sprintf("key-%03d", i)
						got, ok, err := tx.Get([]byte(k))
						if err != nil {
							return err
						}
						if want, had := model[k]; ok != had || string(got) != string(want) {
							return fmt.Errorf("at the end: %s = %q, %v; want %q, %v", k, got, ok, want, had)
						}
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			})
		}
	})
}

// liveHeap returns the bytes of the Go heap that are live after a
// collection: what a cache's entries take.
func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// The value cache stays within its budget, in live heap bytes, under
// churn: keys of a store far larger than the budget go through it, as at
// 1,000,000 accounts with the default budget. A cache that dropped its
// entries one by one from the same Go map held 2.9 to 5.1 times its
// budget (the map keeps the room of deleted entries).
func TestValueCacheMemory(t *testing.T) {
	live := liveHeap
	val := make([]byte, 12) // an int64 and its checksum
	for _, budget := range []int64{1 << 20, 8 << 20} {
		t.Run(fmt.Sprintf("budget=%d", budget), func(t *testing.T) {
			h0 := live()
			vc := newValueCache(budget)
			key := []byte("\x01ledger\x00balances\x00account-00000000")
			var most int64
			for i := range 600_000 {
				key = strconv.AppendInt(key[:len(key)-8], 10_000_000+int64(i), 10)[:len(key)]
				vc.put(key, val, true)
				if _, ok := vc.get(key); !ok {
					t.Fatalf("key %d not cached right after its put", i)
				}
				if i%100_000 == 99_999 {
					most = max(most, live()-h0)
				}
			}
			if vc.size > budget {
				t.Errorf("counted %d bytes, over the budget %d", vc.size, budget)
			}
			t.Logf("budget %d: %d entries, %d bytes counted; live heap at most %d (%.2f of the budget)", budget, len(vc.m), vc.size, most, float64(most)/float64(budget))
			if most > budget {
				t.Errorf("the cache's live heap reached %d bytes, over its budget of %d", most, budget)
			}
			runtime.KeepAlive(vc)
		})
	}
}

// The fold of a committed batch into the value cache runs beside the
// commits: a Flush returns while it has not ended, and a line that reads
// a key of that batch meanwhile sees the committed value, not the one the
// cache held before (here: the key's absence, cached when the first line
// read it). The next commit waits for the fold.
func TestCommitDoesNotWaitForTheFold(t *testing.T) {
	forEachLocalBackend(t, func(t *testing.T, be backend) {
		ctx := context.Background()
		first, entered, release := holdFirst()
		defer release()
		o := testOpts()
		o.hooks = &hooks{beforeFold: first}
		s := mustOpen(t, be, t.TempDir(), o)
		add := func(n int, want int64) {
			t.Helper()
			var got int64
			if _, err := s.Apply(ctx, del("f", 1, n), func(tx *Tx) error {
				var err error
				got, err = tx.AddInt64([]byte("k"), 5)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("line %d: k = %d, want %d", n, got, want)
			}
		}
		add(1, 5)
		flushed := make(chan error, 1)
		go func() { flushed <- s.Flush(ctx) }()
		select {
		case err := <-flushed:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Flush did not return in 10 s while the fold of its batch into the value cache waited")
		}
		<-entered
		add(2, 10)
		release()
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		add(3, 15)
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if got := getInt(t, s, "k"); got != 15 {
			t.Fatalf("k = %d durable, want 15", got)
		}
	})
}

// A store that held no data when it opened knows, while its value cache
// holds every value committed since, that a key the cache and the batches
// do not hold is absent: the first line of each new key (each account of a
// new ledger) reads nothing from the backend. A store that held data
// reads it there; and a cache that dropped an entry, or refused one too
// large for it, knows nothing of the keys it does not hold any more.
func TestNewStoreReadsNoAbsentKey(t *testing.T) {
	forEachLocalBackend(t, func(t *testing.T, be backend) {
		ctx := context.Background()
		var reads atomic.Int64
		opts := func(cache int64) *Options {
			o := testOpts()
			o.CacheSize = cache
			o.hooks = &hooks{engineRead: func([]byte) { reads.Add(1) }}
			return o
		}
		// addLines adds n to key k-(n%keys) for each line n in [from, to),
		// checks each sum against want, and commits every 7 lines.
		want := map[string]int64{}
		addLines := func(s Store, from, to, keys int) {
			t.Helper()
			for n := from; n < to; n++ {
				k := fmt.Sprintf("k-%03d", n%keys)
				var got int64
				if _, err := s.Apply(ctx, del("f", 1, n), func(tx *Tx) error {
					var err error
					got, err = tx.AddInt64([]byte(k), int64(n))
					return err
				}); err != nil {
					t.Fatal(err)
				}
				want[k] += int64(n)
				if got != want[k] {
					t.Fatalf("line %d: %s = %d, want %d", n, k, got, want[k])
				}
				if n%7 == 0 {
					if err := s.Flush(ctx); err != nil {
						t.Fatal(err)
					}
				}
			}
		}

		dir := t.TempDir()
		s := mustOpen(t, be, dir, opts(0))
		addLines(s, 1, 400, 100)
		if n := reads.Load(); n != 0 {
			t.Errorf("a new store read %d keys from its backend for 100 new keys, want none", n)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}

		// Reopened, it holds data: the open reads its keys into the cache
		// in the background (core.preload). Until the preload ends, the
		// cache does not know every key: held at its first key, the store
		// reads each key from its backend, once.
		reads.Store(0)
		hold := make(chan struct{})
		o := opts(0)
		o.hooks.preloadKey = func(int) { <-hold }
		s = mustOpen(t, be, dir, o)
		addLines(s, 400, 600, 120) // 100 keys it holds, 20 new ones
		if n := reads.Load(); n != 120 {
			t.Errorf("a reopened store whose preload waits read %d keys from its backend, want 120 (each key once)", n)
		}
		close(hold)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		// Once the preload ended, the cache holds every key, and knows
		// that the others are absent.
		reads.Store(0)
		s = mustOpen(t, be, dir, opts(0))
		<-s.(*nsStore).c.preloaded
		addLines(s, 600, 800, 140) // 120 keys it holds, 20 new ones
		if n := reads.Load(); n != 0 {
			t.Errorf("a reopened store whose preload ended read %d keys from its backend, want none", n)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}

		// A new store whose cache drops entries (a budget of 8 KiB holds
		// about 25): keys it dropped are read from the backend again.
		reads.Store(0)
		clear(want)
		s = mustOpen(t, be, t.TempDir(), opts(8<<10))
		addLines(s, 1, 800, 100)
		if reads.Load() == 0 {
			t.Errorf("a new store whose cache dropped entries read no key from its backend")
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}

		// A new store whose cache refuses a value too large for it: the
		// value is read back from the backend, not taken as absent.
		reads.Store(0)
		s = mustOpen(t, be, t.TempDir(), opts(8<<10))
		big := bytes.Repeat([]byte("v"), 4<<10)
		if _, err := s.Apply(ctx, del("f", 1, 1), func(tx *Tx) error { return tx.Put([]byte("big"), big) }); err != nil {
			t.Fatal(err)
		}
		// Two more batches: the one of "big" is neither sealed nor the
		// last committed one when it is read.
		for n := 2; n <= 3; n++ {
			if err := s.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Apply(ctx, del("f", 1, n), func(tx *Tx) error { return tx.Put([]byte("small"), []byte{byte(n)}) }); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Apply(ctx, del("f", 1, 4), func(tx *Tx) error {
			v, ok, err := tx.Get([]byte("big"))
			if err != nil {
				return err
			}
			if !ok || !bytes.Equal(v, big) {
				return fmt.Errorf("big: %d bytes, found %v; want the %d bytes written", len(v), ok, len(big))
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	})
}
