package state

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// boltPageMemory is what a bbolt commit keeps live for each page it
// changes, measured: trees of 60,000 keys with small and with large
// values, 600 random keys put in one write transaction; the heap the
// transaction's nodes hold (after a collection) and a page's buffer for
// each node, which its commit allocates to write the node, a node.
// The commit's part of the cache budget counts a flat 6 KiB a page
// (boltPageLive): a commit of random keys in a tree of 83 small elements
// a page (the ledger's balances at 10,000,000 accounts) kept 10.4 KB a
// page live, and a budget of 64 MiB let its commits take more heap than
// the runtime's memory limit left room for: the collector ran without
// pause (115 collections in a run of 100,000 lines, 4.3 to 5.4 s, against
// 2.8 to 3.4 s with 128 MiB and 3.1 to 4.0 s with 32).
func TestBoltPageMemoryMatchesBbolt(t *testing.T) {
	for _, c := range []struct {
		name      string
		valueSize int
		fill      float64
	}{
		{"small values, pages filled in order", 9, appendFill},
		{"small values, bbolt's default fill", 9, bolt.DefaultFillPercent},
		{"values of 200 bytes", 200, appendFill},
	} {
		t.Run(c.name, func(t *testing.T) {
			db, err := bolt.Open(filepath.Join(t.TempDir(), "t.bolt"), 0o600, &bolt.Options{NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			const keys, puts = 60_000, 600
			key := func(i int) []byte { return fmt.Appendf(nil, "account-%08d", i) }
			val := make([]byte, c.valueSize)
			if err := db.Update(func(tx *bolt.Tx) error {
				b, err := tx.CreateBucket([]byte("t"))
				if err != nil {
					return err
				}
				b.FillPercent = c.fill
				for i := range keys {
					if err := b.Put(key(i), val); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			tx, err := db.Begin(true)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback() }()
			b := tx.Bucket([]byte("t"))
			rng := rand.New(rand.NewPCG(5, 5))
			ks := make([][]byte, puts)
			for i := range ks {
				ks[i] = key(rng.IntN(keys))
			}
			before := liveHeapNoPools()
			for _, k := range ks {
				if err := b.Put(k, val); err != nil {
					t.Fatal(err)
				}
			}
			after := liveHeapNoPools()
			runtime.KeepAlive(ks)
			st := tx.Stats()
			nodes := st.GetNodeCount()
			ps := int64(db.Info().PageSize)
			measured := (after-before)/nodes + ps
			bs := b.Stats()
			elems := int64(bs.KeyN / bs.LeafPageN)
			got := boltPageMemory(ps, elems)
			t.Logf("%d nodes, %d elements a leaf: %d bytes live a page measured, %d estimated", nodes, elems, measured, got)
			if float64(got) < 0.85*float64(measured) || float64(got) > 1.3*float64(measured) {
				t.Errorf("estimate of %d bytes live a page changed, measured %d (%d nodes for %d keys put)", got, measured, nodes, puts)
			}
		})
	}
}

// liveHeapNoPools is liveHeap once the sync.Pools hold nothing: a pool's
// objects outlive one collection (bbolt keeps the buffers of the pages it
// wrote in one).
func liveHeapNoPools() int64 {
	runtime.GC()
	return liveHeap()
}

// Under the runtime's memory limit a bbolt commit is held to what the
// limit leaves beside the value cache, its pages counted as the tree's
// leaf pages make them (boltPageMemory, from the elements a page holds,
// which each commit samples): the cap of keys a batch falls below the
// one of the budget's share where the limit leaves less, falls further as
// the value cache grows, and is the budget's where the limit leaves
// more. Without a limit the budget's share alone caps a batch.
func TestBoltCommitHeldUnderTheMemoryLimit(t *testing.T) {
	o := testOpts()
	o.CacheSize = 16 << 20 // a commit share of 8 MiB: 1,365 pages at 6 KiB, more than the tree's
	s := mustOpen(t, backend{name: Bolt, open: OpenBolt}, t.TempDir(), o)
	defer s.Close()
	e := s.(*nsStore).c.rawEngine().(*boltEngine)
	const keys = 60_000
	addAccounts(t, s, 1, 0, keys)
	rng := rand.New(rand.NewPCG(3, 3))
	for n := 2; n < 600; n++ {
		k := rng.IntN(keys)
		addAccounts(t, s, n, k, k+1)
		if n%100 == 0 {
			if err := s.Flush(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The elements of the file's leaf pages, all of them.
	var leaves, elems int64
	if err := e.db.View(func(tx *bolt.Tx) error {
		for id := 2; ; id++ {
			info, err := tx.Page(id)
			if err != nil || info == nil {
				return err
			}
			if info.Type == "leaf" {
				leaves++
				elems += int64(info.Count)
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	if want := elems / leaves; e.sampledLeaves == 0 || e.elems < want*85/100 || e.elems > want*115/100 {
		t.Errorf("sampled %d elements a leaf page (%.0f leaf pages weighed), the file's %d leaf pages hold %d on average", e.elems, e.sampledLeaves, leaves, want)
	}
	if e.limit != 0 {
		t.Fatalf("limit %d without a memory limit", e.limit)
	}
	budgetCap := boltKeyCap(e.commitShare, e.pageCost, e.pagesInUse(), e.lastWritten, e.lastKeys)
	if got := e.keyCap.Load(); got != budgetCap {
		t.Errorf("cap %d without a memory limit, want the budget share's %d", got, budgetCap)
	}
	capUnder := func(limit, vc int64) int64 {
		e.limit, e.vcLive = limit, func() int64 { return vc }
		e.updateKeyCap(0, 0)
		return e.keyCap.Load()
	}
	defer func() { e.limit, e.vcLive = 0, nil }()
	const mib = 1 << 20
	// A limit whose three quarters are the heap base and leave bytes.
	limitLeaving := func(bytes int64) int64 { return (boltHeapBase + bytes) / 3 * 4 }
	tight := capUnder(limitLeaving(7*mib), 1*mib) // 6 MiB for the commit
	tighter := capUnder(limitLeaving(7*mib), 2*mib)
	roomy := capUnder(limitLeaving(64*mib), 1*mib)
	pagesPerKey := float64(e.lastWritten) / float64(e.lastKeys)
	if want := float64(6*mib) / float64(boltPageMemory(e.pageSize, e.elems)) / pagesPerKey; float64(tight) < want*0.95 || float64(tight) > want*1.05 || tight >= budgetCap {
		t.Errorf("cap %d where the limit leaves 6 MiB, want about %.0f (%.2f pages a key, %d bytes a page), below the budget's %d", tight, want, pagesPerKey, boltPageMemory(e.pageSize, e.elems), budgetCap)
	}
	if tighter >= tight {
		t.Errorf("cap %d beside a value cache of 2 MiB, want below the cap %d beside one of 1 MiB", tighter, tight)
	}
	if roomy != budgetCap {
		t.Errorf("cap %d where the limit leaves 63 MiB, want the budget share's %d", roomy, budgetCap)
	}
	// A value cache that takes all the limit leaves: the least batch.
	if got := capUnder(limitLeaving(7*mib), 64*mib); got != minBatchKeys {
		t.Errorf("cap %d where the value cache takes all the limit leaves, want %d", got, minBatchKeys)
	}
	// A store opened under the limit MemoryLimit gives reads it; one
	// under a limit above it (the collector then lets the heap grow to
	// twice what is live, and the budget counts it) does not.
	for _, c := range []struct {
		limit int64
		want  int64
	}{{memoryBase + o.CacheSize - memoryMargin, memoryBase + o.CacheSize - memoryMargin}, {memoryBase + o.CacheSize + 1, 0}} {
		withMemoryLimit(t, c.limit)
		s2 := mustOpen(t, backend{name: Bolt, open: OpenBolt}, t.TempDir(), o)
		if got := s2.(*nsStore).c.rawEngine().(*boltEngine).limit; got != c.want {
			t.Errorf("a store opened under a limit of %d takes %d for its commits, want %d", c.limit, got, c.want)
		}
		if err := s2.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
