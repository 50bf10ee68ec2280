package state

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// boltKeyCap: no cap while the whole tree fits in the share; a cap that
// falls as the tree grows, and that k random keys of it change about the
// share's worth of pages.
func TestBoltKeyCap(t *testing.T) {
	withMemoryLimit(t, math.MaxInt64) // no limit: the value cache counts twice
	const share, cost = 16 << 20, 12 << 10
	for _, c := range []struct {
		pages int64
		want  int64 // 0: about the share's pages, checked below
	}{
		{0, math.MaxInt64},
		{share / cost, math.MaxInt64},
		{share/cost + 1, 0},
		{54_000, 0},
		{540_000, 0},
	} {
		got := boltKeyCap(share, cost, c.pages, 0, 0)
		if c.want != 0 {
			if got != c.want {
				t.Errorf("pages %d: cap %d, want %d", c.pages, got, c.want)
			}
			continue
		}
		if got < minBatchKeys || got == math.MaxInt64 {
			t.Errorf("pages %d: cap %d", c.pages, got)
			continue
		}
		changed := float64(c.pages) * (1 - math.Exp(-float64(got)/float64(c.pages)))
		if mem := changed * cost; mem > share*1.001 || mem < share*0.95 && got > minBatchKeys {
			t.Errorf("pages %d: cap %d changes about %.0f pages, %.1f MiB, want about the share of %d MiB", c.pages, got, changed, mem/(1<<20), share>>20)
		}
	}
	if got := boltKeyCap(0, cost, 1_000_000, 0, 0); got != math.MaxInt64 {
		t.Errorf("no share: cap %d", got)
	}
	if a, b := boltKeyCap(share, cost, 54_000, 0, 0), boltKeyCap(share, cost, 540_000, 0, 0); b > a {
		t.Errorf("cap at 540,000 pages %d, above the cap at 54,000 pages %d", b, a)
	}
	// Keys in order: a commit that wrote a page for 50 keys allows 50
	// times the keys a page; random keys (a page or more a key) keep the
	// random keys' cap.
	if r, o := boltKeyCap(share, cost, 54_000, 0, 0), boltKeyCap(share, cost, 54_000, 200, 10_000); o != int64(share*50/cost) || o <= r {
		t.Errorf("cap after a commit of 10,000 keys in 200 pages %d, want %d (random: %d)", o, int64(share*50/cost), r)
	}
	// Random keys of a deep tree: a commit writes the branch pages above
	// the leaves too (at 10,000,000 accounts, 1.25 pages a key), which the
	// random keys' estimate does not count; the cap is what the pages the
	// last commit wrote allow.
	if r, o := boltKeyCap(share, cost, 54_000, 0, 0), boltKeyCap(share, cost, 54_000, 1250, 1000); o != int64(share*1000/1250/cost) || o >= r {
		t.Errorf("cap after a commit of 1,000 random keys in 1,250 pages %d, want %d (the random keys' estimate: %d)", o, int64(share*1000/1250/cost), r)
	}
	// Half the budget, at most boltCommitShareMax; the value cache the rest.
	for _, c := range []struct{ budget, share int64 }{{DefaultCacheSize, DefaultCacheSize / 2}, {1 << 30, boltCommitShareMax}, {0, 0}} {
		if got := boltCommitShare(c.budget); got != c.share {
			t.Errorf("budget %d: commit share %d, want %d", c.budget, got, c.share)
		}
	}
	o := &Options{CacheSize: 1 << 30}
	if got, want := o.valueCacheSize(Bolt), int64(1<<30-boltCommitShareMax)/2; got != want {
		t.Errorf("value cache of a 1 GiB budget: %d, want %d", got, want)
	}
}

// A bbolt store whose tree outgrows its commit's share of the cache
// budget cuts its batches by the keys they change: each batch's commit
// stays within the share, and every line is still applied once.
func TestBoltBatchCutByCommitMemory(t *testing.T) {
	dir := t.TempDir()
	o := testOpts()
	o.BatchSize = 5000
	o.CacheSize = 512 << 10 // a commit share of 256 KiB: about 21 pages
	var sizes batchSizes
	o.Observer = &sizes
	s := mustOpen(t, backend{name: Bolt, open: OpenBolt}, dir, o)
	defer s.Close()
	e := s.(*nsStore).c.rawEngine().(*boltEngine)
	if got := e.keyCap.Load(); got != math.MaxInt64 {
		t.Fatalf("cap of a new store %d, want none", got)
	}
	// A tree of many pages: 20,000 keys in order, in one line.
	const keys = 20_000
	n := 1
	addAccounts(t, s, n, 0, keys)
	rng := rand.New(rand.NewPCG(17, 17))
	apply := func(k int) {
		n++
		addAccounts(t, s, n, k, k+1)
	}
	if err := s.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	capped := e.keyCap.Load()
	if capped == math.MaxInt64 || capped >= int64(o.BatchSize) {
		t.Fatalf("cap of a tree of %d keys (%d bytes) with a commit share of %d: %d, want below the batch size %d", keys, e.size(), e.commitShare, capped, o.BatchSize)
	}
	sizes.mu.Lock()
	sizes.counts = nil
	sizes.mu.Unlock()
	// Random keys of the tree: each batch is cut at the cap (a line
	// changes one key of the bucket).
	const lines = 6000
	for range lines {
		apply(rng.IntN(keys))
	}
	if err := s.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	sizes.mu.Lock()
	counts := append([]int(nil), sizes.counts...)
	sizes.mu.Unlock()
	// The first batches are cut at the cap the keys in order left (a
	// page for many keys); their commits show random keys, and the next
	// are cut at the random keys' cap.
	random := e.keyCap.Load()
	if random >= capped || random > 2*minBatchKeys {
		t.Errorf("cap after random keys %d, want below the cap after keys in order (%d) and near %d", random, capped, minBatchKeys)
	}
	total, over := 0, 0
	for _, c := range counts {
		total += c
		if c > int(capped)*2 {
			t.Errorf("a batch of %d lines, with a cap of %d keys", c, capped)
		}
		if c > int(random)*2 {
			over++
		}
	}
	// Batches cut before a commit of random keys told the cap: the
	// committer cuts what is staged whenever it is free, so a first
	// batch may have too few keys to tell.
	if over > 3 {
		t.Errorf("%d batches above twice the cap of %d keys: %v", over, random, counts)
	}
	if total != lines {
		t.Errorf("%d batches of %d lines in all (%v), want %d lines", len(counts), total, counts, lines)
	}
	// Every line applied once.
	if sum := sumInt64s(t, s, "acct"); sum != keys+lines {
		t.Errorf("sum of the balances %d, want %d", sum, keys+lines)
	}
}

// addAccounts applies line n of feed f, which adds 1 to the balances of
// accounts from to to-1 of bucket acct.
func addAccounts(t *testing.T, s Store, n, from, to int) {
	t.Helper()
	if _, err := s.Apply(t.Context(), del("f", 1, n), func(tx *Tx) error {
		for k := from; k < to; k++ {
			if _, err := tx.Bucket("acct").AddInt64(fmt.Appendf(nil, "account-%08d", k), 1); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// sumInt64s returns the sum of the int64 values of bucket in s's default
// namespace, read in one View.
func sumInt64s(t *testing.T, s Store, bucket string) int64 {
	t.Helper()
	var sum int64
	if err := s.View(func(tx *Tx) error {
		return tx.Bucket(bucket).ForEach(func(_, v []byte) error {
			x, _ := decodeInt64(v)
			sum += x
			return nil
		})
	}); err != nil {
		t.Fatal(err)
	}
	return sum
}

// A bbolt store whose value cache, full, finds under a quarter of the
// keys looked for in it (random keys of a tree many times the entries it
// has room for) gives three quarters of the cache budget to its commits:
// the cache shrinks within its new budget, the cap of keys a batch rises,
// and every line is still applied once. Lines that change a few hot keys
// keep the budget split in halves, and lines that turn to them give the
// cache its half back.
func TestBoltCacheBudgetGoesToTheCommitWhenTheCacheMisses(t *testing.T) {
	for _, c := range []struct {
		name   string
		phases []int // the keys each phase's lines change, 0 for every key of the tree
		shift  bool
	}{
		{"random keys", []int{0}, true},
		{"hot keys", []int{2000}, false},
		{"random keys then hot keys", []int{0, 2000}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := testOpts()
			// Commits 4 MiB (about 340 pages), the value cache the rest (2
			// MiB of live bytes, about 12,000 entries).
			o.CacheSize = 8 << 20
			s := mustOpen(t, backend{name: Bolt, open: OpenBolt}, t.TempDir(), o)
			defer s.Close()
			core := s.(*nsStore).c
			e := core.rawEngine().(*boltEngine)
			share, budget := e.commitShare, core.vc.budget
			if share != o.CacheSize/2 {
				t.Fatalf("commit share of a new store %d, want %d", share, o.CacheSize/2)
			}
			const keys = 100_000 // about 1,200 pages
			n := 1
			addAccounts(t, s, n, 0, keys)
			if err := s.Flush(t.Context()); err != nil {
				t.Fatal(err)
			}
			// The next commit waits for that batch's fold into the value
			// cache: the lines below look for their keys in the cache, not
			// in the batch.
			n++
			applyFlush(t, s, del("f", 1, n), func(*Tx) error { return nil })
			rng := rand.New(rand.NewPCG(3, 3))
			// A phase: at least two windows of lookups that reach the cache
			// (a line whose key the last batch holds, its fold not ended,
			// finds it there), and commits after them.
			const lines = 4 * cacheWindow
			shifted := false
			for _, hot := range c.phases {
				for i := range lines {
					k := rng.IntN(keys)
					if hot > 0 {
						k = rng.IntN(hot)
					}
					n++
					addAccounts(t, s, n, k, k+1)
					// Batches of 1,000 lines: a hot key is looked for in
					// the cache by the first line of each batch to change it.
					if i%1000 == 999 {
						if err := s.Flush(t.Context()); err != nil {
							t.Fatal(err)
						}
						shifted = shifted || e.commitShare != share
					}
				}
			}
			if err := s.Flush(t.Context()); err != nil {
				t.Fatal(err)
			}
			st := s.Stats()
			if looked := st.CacheHits + st.CacheMisses; looked < 2*cacheWindow*uint64(len(c.phases)) {
				t.Fatalf("%d hits and %d misses of the value cache, want at least %d lookups", st.CacheHits, st.CacheMisses, 2*cacheWindow*len(c.phases))
			}
			core.vc.mu.Lock()
			vcBudget, vcSize := core.vc.budget, core.vc.size
			core.vc.mu.Unlock()
			if vcSize > vcBudget || st.CacheBudget != vcBudget {
				t.Errorf("value cache holds %d bytes, budget %d (Stats: %d)", vcSize, vcBudget, st.CacheBudget)
			}
			if !c.shift {
				if e.commitShare != share || vcBudget != budget {
					t.Errorf("commit share %d and value cache budget %d, want them as they were: %d and %d (hits %d, misses %d)", e.commitShare, vcBudget, share, budget, st.CacheHits, st.CacheMisses)
				}
				if len(c.phases) > 1 && !shifted {
					t.Errorf("the random keys' phase did not give the commits three quarters (hits %d, misses %d)", st.CacheHits, st.CacheMisses)
				}
			} else {
				if want := o.CacheSize * 3 / 4; e.commitShare != want {
					t.Errorf("commit share %d, want three quarters of the budget, %d (hits %d, misses %d)", e.commitShare, want, st.CacheHits, st.CacheMisses)
				}
				if want := budget / 2; vcBudget != want {
					t.Errorf("value cache budget %d, want %d (a quarter of the cache budget where it had half)", vcBudget, want)
				}
				halves := boltKeyCap(share, e.pageCost, e.pagesInUse(), e.lastWritten, e.lastKeys)
				if got := e.keyCap.Load(); got <= halves {
					t.Errorf("cap of keys a batch %d, want above the cap %d of the split in halves", got, halves)
				}
			}
			// Every line applied once.
			if sum := sumInt64s(t, s, "acct"); sum != keys+int64(lines*len(c.phases)) {
				t.Errorf("sum of the balances %d, want %d", sum, keys+lines*len(c.phases))
			}
		})
	}
}
