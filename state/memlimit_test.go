package state

import (
	"fmt"
	"math"
	"path/filepath"
	"runtime/debug"
	"testing"
)

// withMemoryLimit sets the Go runtime's soft memory limit for the test and
// restores it after. The limit is the process's: the test must not run in
// parallel with one that opens a store.
func withMemoryLimit(t *testing.T, limit int64) {
	t.Helper()
	old := debug.SetMemoryLimit(limit)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
}

// Under a runtime memory limit that holds the heap within memoryBase plus
// the part of the budget that is Go heap, the store counts the live bytes
// of its value cache and of a bbolt commit once; otherwise twice, for the
// heap the collector lets grow between collections.
func TestMemoryLimitCountsLiveBytes(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name   string
		limit  int64
		kind   string
		budget int64
		vc     int64 // the value cache's budget
		page   int64 // a bbolt commit's cost a page (bbolt only)
	}{
		{"no limit, bbolt", math.MaxInt64, Bolt, 0, 8 * mib, 12 << 10},
		{"no limit, pebble", math.MaxInt64, Pebble, 0, 8 * mib, 0},
		{"ledger's limit, bbolt", 88 * mib, Bolt, 0, 16 * mib, 6 << 10},
		{"limit at the ceiling, bbolt", 96 * mib, Bolt, 0, 16 * mib, 6 << 10},
		{"limit over the ceiling, bbolt", 96*mib + 1, Bolt, 0, 8 * mib, 12 << 10},
		{"large budget, bbolt", 64*mib + 1<<30, Bolt, 1 << 30, (1<<30 - boltCommitShareMax), 6 << 10},
		// Pebble's block cache (16 MiB of the default budget) is not Go
		// heap when Pebble allocates it with cgo: the limit holds the heap
		// only if it leaves room for it. Without cgo it is Go heap, which
		// the limit covers.
		{"bbolt's limit, pebble", 88 * mib, Pebble, 0, offHeap(8*mib, 16*mib), 0},
		{"limit less the block cache, pebble", 80 * mib, Pebble, 0, 16 * mib, 0},
		{"no budget", 64 * mib, Bolt, -1, 0, 12 << 10},
	} {
		t.Run(c.name, func(t *testing.T) {
			withMemoryLimit(t, c.limit)
			o := &Options{CacheSize: c.budget}
			if got := o.valueCacheSize(c.kind); got != c.vc {
				t.Errorf("value cache %d MiB, want %d MiB", got/mib, c.vc/mib)
			}
			if got := o.boltPageCost(); c.kind == Bolt && got != c.page {
				t.Errorf("page cost %d, want %d", got, c.page)
			}
		})
	}
}

// A bbolt store opened under the limit cuts its batches at twice the keys:
// its commit's share holds twice the pages.
func TestMemoryLimitDoublesBoltKeyCap(t *testing.T) {
	caps := make(map[bool]int64)
	for _, limited := range []bool{false, true} {
		o := testOpts()
		o.CacheSize = 512 << 10
		if limited {
			withMemoryLimit(t, memoryBase+o.CacheSize)
		}
		s := mustOpen(t, backend{name: Bolt, open: OpenBolt}, t.TempDir(), o)
		e := s.(*nsStore).c.rawEngine().(*boltEngine)
		// A tree of 20,000 keys (about 130 pages) against a share of
		// 256 KiB: 21 pages counted twice, 42 counted once.
		applyFlush(t, s, del("f", 1, 1), func(tx *Tx) error {
			for k := range 20_000 {
				if _, err := tx.Bucket("acct").AddInt64(fmt.Appendf(nil, "account-%08d", k), 1); err != nil {
					return err
				}
			}
			return nil
		})
		caps[limited] = e.keyCap.Load()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if caps[false] >= math.MaxInt64/2 || caps[true] < caps[false]*19/10 {
		t.Errorf("key cap %d under the limit, %d without: want about twice", caps[true], caps[false])
	}
}

// offHeap returns withCgo when Pebble allocates its block cache and
// memtables outside the Go heap (a build with cgo), else withoutCgo.
func offHeap(withCgo, withoutCgo int64) int64 {
	if pebbleOffHeap {
		return withCgo
	}
	return withoutCgo
}

// MemoryLimit gives the limit a process of one store sets: 64 MiB plus the
// budget, less a margin, and with Pebble built with cgo also less what
// Pebble allocates outside the Go heap (its block cache and memtables);
// none without a budget or for PostgreSQL. Under it, the store it names
// counts live bytes once, whatever the budget. make test runs it with and
// without cgo.
func TestMemoryLimit(t *testing.T) {
	const mib = 1 << 20
	dir := t.TempDir()
	s := mustOpen(t, backend{name: Pebble, open: OpenPebble}, filepath.Join(dir, "p"), testOpts())
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		config string
		budget int64
		want   int64
		kind   string // the backend whose store counts once under want
	}{
		{"bbolt, default budget", "bbolt:" + filepath.Join(dir, "b"), 0, 88 * mib, Bolt},
		{"pebble, default budget", "pebble:" + filepath.Join(dir, "new"), 0, offHeap(56*mib, 88*mib), Pebble},
		{"bbolt, 128 MiB", "bbolt:" + filepath.Join(dir, "b"), 128 * mib, 184 * mib, Bolt},
		{"pebble, 128 MiB", "pebble:" + filepath.Join(dir, "new"), 128 * mib, offHeap(104*mib, 184*mib), Pebble},
		{"pebble, 1 MiB: the block cache's least", "pebble:" + filepath.Join(dir, "new"), 1 * mib, offHeap(33*mib, 57*mib), Pebble},
		{"a folder whose STORE says pebble", filepath.Join(dir, "p"), 0, offHeap(56*mib, 88*mib), Pebble},
		{"no budget", "bbolt:" + filepath.Join(dir, "b"), -1, 0, ""},
		{"postgres", "postgres://u@localhost:5432/db", 0, 0, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := &Options{CacheSize: c.budget}
			got, err := MemoryLimit(c.config, o)
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Fatalf("MemoryLimit = %d MiB (%d), want %d MiB", got/mib, got, c.want/mib)
			}
			if c.kind == "" {
				return
			}
			withMemoryLimit(t, got)
			if f := o.heapFactor(c.kind); f != 1 {
				t.Errorf("under the limit, the store counts live bytes %d times, want once", f)
			}
		})
	}
	for _, config := range []string{filepath.Join(dir, "none"), "lmdb:" + dir} {
		if _, err := MemoryLimit(config, nil); err == nil {
			t.Errorf("MemoryLimit(%q): no error", config)
		}
	}
}
