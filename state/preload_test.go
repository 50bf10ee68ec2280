package state

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"
)

// preloadStore makes a store of backend be in dir holding keys keys of
// table "b", key-NNNN holding NNNN, and closes it.
func preloadStore(t *testing.T, be backend, dir string, keys int) {
	t.Helper()
	s := mustOpen(t, be, dir, testOpts())
	if _, err := s.Apply(t.Context(), del("f", 1, 1), func(tx *Tx) error {
		for i := range keys {
			if err := tx.Bucket("b").PutInt64(fmt.Appendf(nil, "key-%04d", i), int64(i)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// checkMirror fails t unless every entry of the value cache of c holds
// the backend's value of its key (or its absence), and, when the cache
// says it is complete, it holds every data key of the backend. Keys of
// table "other" are skipped: the fold of the last batch may still run.
func checkMirror(t *testing.T, c *core) (held, backend int) {
	t.Helper()
	skip := dataPrefix("", "other")
	truth := map[string][]byte{}
	cur := c.eng.cursor([]byte{tagData}, []byte{tagData + 1}, false)
	for cur.next() {
		if !bytes.HasPrefix(cur.key(), skip) {
			truth[string(cur.key())] = bytes.Clone(cur.value())
		}
	}
	if err := cur.close(); err != nil {
		t.Fatal(err)
	}
	vc := c.vc
	vc.mu.Lock()
	defer vc.mu.Unlock()
	for k, v := range vc.m {
		if bytes.HasPrefix([]byte(k), skip) {
			continue
		}
		want, ok := truth[k]
		switch {
		case ok != v.ok:
			t.Errorf("the value cache holds key %q as present=%v, the backend as present=%v", k, v.ok, ok)
		case ok && !bytes.Equal(want, v.val):
			t.Errorf("the value cache holds key %q = %s, the backend %s", k, shortBytes(v.val), shortBytes(want))
		}
	}
	if vc.complete {
		for k := range truth {
			if _, ok := vc.m[k]; !ok {
				t.Errorf("the value cache says it is complete and does not hold key %q", k)
			}
		}
	}
	return len(vc.m), len(truth)
}

// TestPreloadKeepsNewerValues opens a store of 2,000 keys whose value
// cache the open fills in the background (core.preload), in chunks of 100
// keys, and holds the preload once it read key-0499 and before it puts
// it in the cache. Meanwhile a batch changes key-0499 itself, a key the
// preload put already and one it has not read yet, deletes one ahead of
// it and adds two. Once the preload ends, every value the cache holds is
// the backend's (a preload that put the value it read of key-0499 would
// have the cache serve a balance one commit old for ever), and the values
// read through the store are the new ones. With a budget that holds every
// key the cache is complete then; with one that holds half, or one that a
// fold overflows while the preload runs, it is not, and still the
// backend's mirror.
func TestPreloadKeepsNewerValues(t *testing.T) {
	for _, be := range backends()[:2] {
		for _, tc := range []struct {
			name     string
			cache    int64 // Options.CacheSize
			complete bool
			// big: key-0499 gets a value too large for the cache, which
			// the fold drops (the preload must not put the old one).
			big bool
		}{
			{"a budget for every key", 64 << 20, true, false},
			{"a budget for part of the keys", 0, false, false},
			{"a value too large for the cache", 64 << 20, false, true},
		} {
			t.Run(be.name+"/"+tc.name, func(t *testing.T) {
				dir := t.TempDir()
				preloadStore(t, be, dir, 2000)
				o := testOpts()
				cache := tc.cache
				if cache == 0 {
					// About 1,000 entries of this test's keys in the value
					// cache (see valueCacheSize).
					per := int64(len("d\x00\x01bkey-0000") + 12 + cacheEntryOverhead)
					cache = 1000 * per * 2
					cache *= 2 // half goes to bbolt's commit, or to Pebble's block cache
				}
				o.CacheSize = cache
				held, release := make(chan struct{}), make(chan struct{})
				var once sync.Once
				o.hooks = &hooks{preloadChunk: 100, preloadKey: func(n int) {
					if n == 500 {
						once.Do(func() { close(held); <-release })
					}
				}}
				s := mustOpen(t, be, dir, o)
				defer s.Close()
				c := s.(*nsStore).c
				select {
				case <-held:
				case <-c.preloaded:
					t.Fatal("the preload ended before its 500th key")
				case <-time.After(time.Minute):
					t.Fatal("no preload")
				}
				big := bytes.Repeat([]byte{7}, 3<<20) // more than an eighth of the value cache's 16 MiB
				applyFlush(t, s, del("f", 1, 2), func(tx *Tx) error {
					for _, k := range []string{"key-0499", "key-0100", "key-1500"} {
						if _, err := tx.Bucket("b").AddInt64([]byte(k), 100_000); err != nil {
							return err
						}
					}
					if tc.big {
						if err := tx.Bucket("b").Put([]byte("key-0499"), big); err != nil {
							return err
						}
					}
					if err := tx.Bucket("b").Delete([]byte("key-0600")); err != nil {
						return err
					}
					if err := tx.Bucket("b").PutInt64([]byte("key-0499a"), -1); err != nil {
						return err
					}
					return tx.Bucket("b").PutInt64([]byte("key-9999"), -2)
				})
				// The next commit waits for the fold of the one before.
				applyFlush(t, s, del("f", 1, 3), func(tx *Tx) error {
					return tx.Bucket("other").PutInt64([]byte("x"), 1)
				})
				close(release)
				select {
				case <-c.preloaded:
				case <-time.After(time.Minute):
					t.Fatal("the preload did not end")
				}
				entries, backend := checkMirror(t, c)
				c.vc.mu.Lock()
				complete := c.vc.complete
				c.vc.mu.Unlock()
				if complete != tc.complete {
					t.Errorf("the value cache holds %d entries of the backend's %d keys, complete=%v; want complete=%v", entries, backend, complete, tc.complete)
				}
				want := map[string]int64{"key-0499": 100_499, "key-0100": 100_100, "key-1500": 101_500, "key-0499a": -1, "key-9999": -2, "key-0000": 0, "key-1999": 1999}
				if tc.big {
					delete(want, "key-0499")
				}
				if err := s.View(func(tx *Tx) error {
					if tc.big {
						if v, _, err := tx.Bucket("b").Get([]byte("key-0499")); err != nil || !bytes.Equal(v, big) {
							return fmt.Errorf("key-0499 = %d bytes, %v; want the %d bytes put", len(v), err, len(big))
						}
					}
					for k, v := range want {
						if got, err := tx.Bucket("b").GetInt64([]byte(k)); err != nil || got != v {
							return fmt.Errorf("key %q = %d, %v; want %d", k, got, err, v)
						}
					}
					if _, ok, err := tx.Bucket("b").Get([]byte("key-0600")); err != nil || ok {
						return fmt.Errorf("key-0600, deleted: found=%v, %v", ok, err)
					}
					return nil
				}); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// shortBytes shows b in hex, at most its first 16 bytes, and its length.
func shortBytes(b []byte) string {
	if len(b) <= 16 {
		return fmt.Sprintf("%x", b)
	}
	return fmt.Sprintf("%x... (%d bytes)", b[:16], len(b))
}

// The preload sizes the value cache's map for the keys the backend holds,
// as it estimates them, and never for more than the budget has room for.
func TestPreloadHint(t *testing.T) {
	for _, c := range []struct{ est, budget, want int64 }{
		{0, 1 << 20, 0},
		{-5, 1 << 20, 0},
		{1000, 1 << 30, 1000},
		{10_000_000, 16 << 20, (16 << 20) / preloadEntryMin},
		{1000, 0, 0},
	} {
		if got := preloadHint(c.est, c.budget); got != c.want {
			t.Errorf("estimate %d, budget %d: hint %d, want %d", c.est, c.budget, got, c.want)
		}
	}
}

// Each local backend estimates the keys it holds within a factor of two.
func TestEstimateKeys(t *testing.T) {
	forEachLocalBackend(t, func(t *testing.T, be backend) {
		dir := t.TempDir()
		const keys = 20_000
		preloadStore(t, be, dir, keys)
		s := mustOpen(t, be, dir, testOpts())
		c := s.(*nsStore).c
		if p, ok := c.rawEngine().(*pebbleEngine); ok {
			// What the open replayed from the WAL is in the memtable,
			// which the estimate leaves out.
			if err := p.flush(); err != nil {
				t.Fatal(err)
			}
		}
		ke, ok := c.rawEngine().(keyEstimator)
		if !ok {
			t.Fatalf("the %s engine gives no estimate of its keys", be.name)
		}
		est := ke.estimateKeys()
		t.Logf("%s: estimate %d of %d keys", be.name, est, keys)
		if est < keys/2 || est > keys*2 {
			t.Errorf("estimate of %d keys: %d", keys, est)
		}
	})
}

// Presizing the value cache's map keeps what it holds, and counts the
// same bytes.
func TestValueCachePresizeKeepsEntries(t *testing.T) {
	vc := newValueCache(1 << 20)
	vc.put([]byte("a"), []byte("1"), true)
	vc.put([]byte("b"), nil, false)
	size := vc.size
	vc.startLoading()
	vc.presize(5000)
	if v, ok := vc.get([]byte("a")); !ok || !v.ok || string(v.val) != "1" {
		t.Errorf("a: %+v %v", v, ok)
	}
	if v, ok := vc.get([]byte("b")); !ok || v.ok {
		t.Errorf("b: %+v %v", v, ok)
	}
	if vc.size != size || len(vc.m) != 2 {
		t.Errorf("size %d, %d entries; want %d, 2", vc.size, len(vc.m), size)
	}
}
