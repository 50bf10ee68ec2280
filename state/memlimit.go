package state

import (
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/cockroachdb/pebble/v2"
)

// memoryBase is the anonymous memory a process of one store takes beside
// its cache budget (Options.CacheSize): the program, the feed's buffers
// and queue, the batches being staged and written. examples/ledger's run
// stays under it plus the budget at every number of accounts
// (bench/RESULTS.md, row 10).
const memoryBase = 64 << 20

// heapFactor returns how many bytes of heap the store counts for each
// byte its value cache and a bbolt commit keep live. Go's collector lets
// the heap grow to twice what is live before it collects (GOGC=100), so
// by default they count twice. Under a soft memory limit (GOMEMLIMIT,
// runtime/debug's SetMemoryLimit, read at open) of at most memoryBase
// plus the part of the budget that is Go heap, the collector holds the
// whole heap within that instead, whatever it would let grow: they count
// once. The part that is Go heap leaves out Pebble's block cache, which
// Pebble allocates outside it in a build with cgo (pebbleOffHeap); without
// cgo it is Go heap, which the limit covers. A store without a budget
// keeps no cache and does not cut its commits: 2.
//
// MemoryLimit gives such a limit, and examples/ledger's run sets it: a
// bbolt store counts once. Measured (2026-12-06): 100,000 lines of random
// accounts into a bbolt store of 10,000,000 at the default budget, runs
// alternated with the build that counted twice: 3.25 to 3.66 s (37 to 40
// saves) against 3.62 to 3.87 s (74 and 75), peak anonymous memory 85 to
// 92 MiB against 84 to 86 (the ceiling: 96 MiB). A Pebble store's value
// cache holds twice the keys. Measured (2026-12-06, runs alternated with
// the build that counted twice): 20,000 lines into a store of 100,000
// accounts, whose keys its cache then holds all, 114 to 198 ms (median
// 148) against 132 to 221 (181), 15 runs each (the program without
// tidemark that reads its misses: 95 to 152, median 121); 300,000 lines
// into one of 1,000,000, where it holds a tenth of the keys instead of a
// twentieth, as long (4.28 to 4.71 s against 4.13 to 4.49), in a peak
// anonymous memory of 89 to 94 MiB against 70 to 82 (at 10,000,000: 86
// against 73 to 75; the ceiling: 96).
func (o *Options) heapFactor(kind string) int64 {
	n := o.cacheSize()
	if n <= 0 {
		return 2
	}
	if kind == Pebble && pebbleOffHeap {
		n -= o.pebbleBlockCache()
	}
	if debug.SetMemoryLimit(-1) <= memoryBase+n {
		return 1
	}
	return 2
}

// boltPageLive is the memory a bbolt commit keeps live for each page of
// the tree it changes, as the commit's part of the cache budget counts it:
// the page's node (an element per key the page holds, read from the mapped
// page) and the buffer the page is written from. Measured: 500,000 lines
// of random accounts into a store of 1,000,000 (54,000 pages), peak
// anonymous RSS against the pages a batch changes, at batches of 2,500 and
// 10,000 lines: about twice this, the collector's headroom included. What
// a page takes depends on the elements it holds (boltPageMemory): a
// commit under the runtime's memory limit is held to that too
// (boltLimitShare).
const boltPageLive = 6 << 10

// boltPageCost returns the memory a bbolt store opened with o counts for
// each page a commit changes: boltPageLive, counted as heapFactor says.
func (o *Options) boltPageCost() int64 {
	return boltPageLive * o.heapFactor(Bolt)
}

// boltInode is the memory of an element of a page that bbolt reads into a
// node: its common.Inode (flags, page id, and slices of the key and the
// value in the mapped page).
const boltInode = 64

// boltNodeExtra is the rest of a node's memory: the node itself, its entry
// in its bucket's map of nodes, and the size class its inodes round up to.
const boltNodeExtra = 512

// boltPageMemory returns the memory a bbolt commit keeps live for each
// page of the tree it changes, in a tree of pages of pageSize bytes whose
// leaf pages hold elems elements on average: the node bbolt reads the
// page into (an inode for each element, and a tenth more for the size
// class and for branch pages, whose elements are smaller) and the buffer
// the page is written from. Measured (TestBoltPageMemoryMatchesBbolt):
// 10.4 KB a page of 88 elements (the ledger's balances, whose tree at
// 10,000,000 accounts holds 83 a leaf), 7.5 KB of 49, 5.7 KB of 15.
func boltPageMemory(pageSize, elems int64) int64 {
	return pageSize + boltNodeExtra + boltInode*elems*11/10
}

// boltHeapBase is the heap a process of one bbolt store keeps live beside
// its value cache and its commit: the feed's buffers and queue, the
// batches being staged, the outputs' buffers (examples/ledger at
// 10,000,000 accounts: 8 to 18 MB live after a collection, less the value
// cache and the commit).
const boltHeapBase = 16 << 20

// boltLimitShare returns the memory a bbolt commit may keep live under the
// runtime's soft memory limit (bytes) beside a value cache that holds
// vcLive bytes, counted as boltPageMemory counts a page: what three
// quarters of the limit leave, at most boltCommitShareMax. The collector
// needs the rest: the heap it lets grow between collections. Under the
// ledger's limit with the default budget (88 MiB) and a value cache of 8
// MiB that is 42 MiB, about 4,200 pages of the balances' tree at
// 10,000,000 accounts, more than the commit's part of the budget gives
// (24 MiB at 6 KiB a page, 4,096). With a budget of 64 MiB, whose part (48
// MiB, 8,192 pages) took 80 MB of heap, the commits of random keys into
// 10,000,000 accounts kept 103 MB live under a limit of 120 MiB, and the
// collector ran without pause: 115 collections in a run of 100,000 lines,
// 4.3 to 5.4 s, against 3.4 s and 45 collections held to this.
func boltLimitShare(limit, vcLive int64) int64 {
	return min(max(limit/4*3-boltHeapBase-vcLive, 0), boltCommitShareMax)
}

// memoryMargin is how far under its ceiling (memoryBase plus the budget)
// MemoryLimit sets the runtime's limit: the limit counts the memory the Go
// runtime manages, and the resident set holds a little more (pages freed
// and not yet returned). At 10,000,000 accounts a limit of 88 MiB held
// examples/ledger's peak anonymous resident set at 86 MiB, one of 80 MiB
// at 77 MiB (2026-12-06).
const memoryMargin = 8 << 20

// pebbleMemTables is the memory MemoryLimit leaves for Pebble's memtables
// beside its block cache, both allocated outside the Go heap in a build
// with cgo: two memtables of Pebble's default size (4 MiB). Pebble
// reserves its memtables' memory (and a large batch's, until its flush)
// in the block cache (Cache.Reserve), which evicts blocks to make room:
// larger memtables (pebbleMemTableSize) take the place of blocks, not
// memory beyond the block cache, unless what Pebble reserves passes the
// block cache's size. This margin is for that.
func pebbleMemTables() int64 {
	var po pebble.Options
	po.EnsureDefaults()
	return int64(po.MemTableSize) * int64(po.MemTableStopWritesThreshold)
}

// MemoryLimit returns the soft memory limit of the Go runtime (GOMEMLIMIT,
// runtime/debug's SetMemoryLimit) under which a process holding the one
// store that Open(config, opts) opens keeps its anonymous memory under 64
// MiB plus the cache budget (Options.CacheSize): the two less a margin of
// 8 MiB, and for a Pebble store, in a build with cgo, less Pebble's block
// cache and memtables, which Pebble then allocates outside the Go heap,
// and 8 MiB more for the C allocator's own (pebbleCMargin)
// (without cgo they are Go heap, which the limit covers: a Pebble store
// gets bbolt's limit). A store opened under it counts what its caches and
// commits keep live once instead of twice (see Options.CacheSize), so that
// its value cache holds twice the keys. It returns 0 for a store without a
// budget, whose bbolt commits are not cut for their memory, and for a
// PostgreSQL store, whose read cache has a budget of its own: no limit to
// set.
//
// config is Open's: "bbolt:DIR", "pebble:DIR", a PostgreSQL DSN, or the
// folder of an existing store, whose STORE file names its backend. Call it
// before Open, and set the limit before Open too: the store reads it at
// open. A process that holds other memory, or several stores, adds theirs.
// examples/ledger's run sets it unless GOMEMLIMIT is set.
//
// Measured (2026-12-06), 300,000 lines into a Pebble store of 1,000,000
// accounts, ledger run built without cgo, 2 rounds alternated: 4.52 and
// 4.86 s and 84 MiB of peak anonymous memory under its limit (88 MiB),
// 5.39 and 6.13 s and 60 MiB under the one of a build with cgo (64 MiB),
// whose collector worked to hold the block cache within it.
func MemoryLimit(config string, opts *Options) (int64, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	kind, dir, ok := strings.Cut(config, ":")
	if !ok || len(kind) == 1 || strings.ContainsAny(kind, `/\`) {
		var err error
		if kind, err = readStoreFile(o.fs(), config); err != nil {
			return 0, fmt.Errorf("memory limit of store %s: %w", config, err)
		}
		dir = config
	}
	switch kind {
	case Bolt, Pebble:
	case Postgres, "postgresql":
		return 0, nil
	default:
		return 0, fmt.Errorf("memory limit of store %s: backend %q (want %q, %q or %q): %w", dir, kind, Bolt, Pebble, Postgres, ErrUnknownBackend)
	}
	n := o.cacheSize()
	if n <= 0 {
		return 0, nil
	}
	limit := memoryBase + n - memoryMargin
	if kind == Pebble && pebbleOffHeap {
		limit -= o.pebbleBlockCache() + pebbleMemTables() + pebbleCMargin
	}
	return limit, nil
}

// pebbleCMargin is what MemoryLimit leaves, for a Pebble store built with
// cgo, to the C allocator beside the block cache and the memtables it
// holds for Pebble: its own bookkeeping, the freed blocks its arenas keep,
// Pebble's other C allocations. 300,000 random lines into a store of
// 1,000,000 accounts at the default budget (2026-12-07) peaked at 95 to
// 99 MiB of anonymous memory, over the ceiling of 96, with a Go heap of
// at most 54 MB: 34 to 38 MiB beside it where the block cache and
// memtables are 24.
const pebbleCMargin = 8 << 20
