package main

import (
	"log/slog"
	"os"
	"runtime/debug"

	"github.com/tidemark-go/tidemark/state"
)

// standalone is set by main: the process is ledger itself, not a test
// that calls Main. Only then does a run set the Go runtime's memory limit,
// which is the whole process's.
var standalone bool

// memoryBase is the memory a run takes beside its cache budget: the
// program, the feed's buffers and queue, the saves being staged and
// written. A run of a bbolt or Pebble store stays under memoryBase plus
// its budget (bench/RESULTS.md, row 10, at every number of accounts).
const memoryBase = 64 << 20

// memoryCeiling returns the anonymous memory a run with cache budget
// cacheSize (--cache-size: 0 the default, negative none) stays under:
// memoryBase plus the budget; 0 for a run without a budget, whose bbolt
// saves are not cut for their memory (see state.Options.CacheSize) and
// which has no ceiling to hold.
func memoryCeiling(cacheSize int64) int64 {
	switch {
	case cacheSize < 0:
		return 0
	case cacheSize == 0:
		cacheSize = state.DefaultCacheSize
	}
	return memoryBase + cacheSize
}

// setMemoryLimit sets the Go runtime's soft memory limit of a run of the
// bbolt or Pebble store that spec opens to state.MemoryLimit's: the
// ceiling less a margin, and with Pebble (built with cgo) less its block
// cache and memtables, which are not Go heap; unless GOMEMLIMIT sets one
// already. It logs the limit. The cache budget counts the bytes the store keeps live;
// Go's collector lets the heap grow to twice what is live before it
// collects (GOGC=100), which took runs of 100,000 lines on a bbolt store
// of 10,000,000 accounts to 82 to 123 MiB of anonymous memory against
// their ceiling of 96 MiB (2026-12-06, 14 runs; a live heap of 36 to 44
// MiB after each collection). With the limit the collector runs more
// often near it: 83 MiB in 3 runs alternated with 3 without, in the same
// time (3.54 to 3.92 s against 3.75 to 3.92 s). A store opened under this
// limit counts what its value cache and its commits keep live once
// instead of twice (state.Options.CacheSize): a bbolt store's saves hold
// twice the keys, in 10 % less time, and a Pebble store's value cache
// holds twice the balances. A run of a PostgreSQL store, whose read cache
// has a budget of its own (state.DefaultReadCache), sets none; nor does a
// run without a budget.
//
// A data folder whose backend cannot be told before the store opens (its
// STORE file damaged or unreadable) gets no limit: the open that follows
// fails, and its error names the damage and what to do.
func setMemoryLimit(spec string, o *state.Options, log *slog.Logger) {
	limit, err := state.MemoryLimit(spec, o)
	if err != nil {
		log.Info("no memory limit set: the store's backend is not known before it opens", "err", err)
		return
	}
	c := memoryCeiling(o.CacheSize)
	if limit == 0 {
		log.Info("no memory limit set: the run has no cache budget (--cache-size -1)")
		return
	}
	if v := os.Getenv("GOMEMLIMIT"); v != "" {
		log.Info("memory limit: GOMEMLIMIT's kept", "GOMEMLIMIT", v, "ceiling_bytes", c)
		return
	}
	debug.SetMemoryLimit(limit)
	// The limit logged is the runtime's, read back.
	log.Info("memory limit set: the cache budget and 64 MiB, less a margin and, with Pebble, its block cache and memtables (GOMEMLIMIT overrides it)", "limit_bytes", debug.SetMemoryLimit(-1), "cache_budget_bytes", c-memoryBase)
}
