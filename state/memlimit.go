package state

import "runtime/debug"

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
// Pebble allocates outside it (with cgo; without, it is heap the limit
// covers, and the rule is only stricter than it needs be). A store
// without a budget keeps no cache and does not cut its commits: 2.
//
// examples/ledger's run sets the limit to memoryBase plus the budget, less
// 8 MiB: a bbolt store counts once. Measured (2026-12-06): 100,000 lines
// of random accounts into a bbolt store of 10,000,000 at the default
// budget, runs alternated with the build that counted twice: 3.25 to 3.66
// s (37 to 40 saves) against 3.62 to 3.87 s (74 and 75), peak anonymous
// memory 85 to 92 MiB against 84 to 86 (the ceiling: 96 MiB).
func (o *Options) heapFactor(kind string) int64 {
	n := o.cacheSize()
	if n <= 0 {
		return 2
	}
	if kind == Pebble {
		n -= o.pebbleBlockCache()
	}
	if debug.SetMemoryLimit(-1) <= memoryBase+n {
		return 1
	}
	return 2
}

// boltPageLive is the memory a bbolt commit keeps live for each page of
// the tree it changes: the page's node (an element per key the page holds,
// read from the mapped page) and the buffer the page is written from.
// Measured: 500,000 lines of random accounts into a store of 1,000,000
// (54,000 pages), peak anonymous RSS against the pages a batch changes, at
// batches of 2,500 and 10,000 lines: about twice this, the collector's
// headroom included.
const boltPageLive = 6 << 10

// boltPageCost returns the memory a bbolt store opened with o counts for
// each page a commit changes: boltPageLive, counted as heapFactor says.
func (o *Options) boltPageCost() int64 {
	return boltPageLive * o.heapFactor(Bolt)
}
