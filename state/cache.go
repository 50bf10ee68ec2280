package state

import (
	"sync"
	"unsafe"
)

// DefaultCacheSize is the memory budget of a store's caches when
// [Options].CacheSize is 0: 32 MiB.
const DefaultCacheSize = 32 << 20

// cacheSize returns the budget of the caches, 0 for none.
func (o *Options) cacheSize() int64 {
	switch {
	case o.CacheSize < 0:
		return 0
	case o.CacheSize == 0:
		return DefaultCacheSize
	}
	return o.CacheSize
}

// pebbleCacheShare is the part of the budget a Pebble store gives Pebble's
// block cache (its index and filter blocks spare a read of a key that is
// not in the value cache a search of the table's index); the value cache
// gets the rest. Half: 200,000 random lines into 1,000,000 accounts with
// the default budget took 22 % less CPU than with a quarter (the index and
// filter blocks of a database of 1,000,000 keys stay in a 16 MiB cache,
// not in 8), and a database that fits either way costs the same.
const pebbleCacheShare = 2

// minPebbleBlockCache is the least block cache a Pebble store opens with:
// Pebble's own default.
const minPebbleBlockCache = 8 << 20

// pebbleBlockCache returns the size of Pebble's block cache.
func (o *Options) pebbleBlockCache() int64 {
	return max(o.cacheSize()/pebbleCacheShare, minPebbleBlockCache)
}

// A save is one Pebble batch, and Pebble writes a batch that takes more
// than half a memtable to a table of its own in level 0 at once (a large
// batch, flushed with the memtable before it). With Pebble's default
// memtables of 4 MiB that is a save of more than about 10,000 keys (an
// entry of a memtable takes the key, the value and about 150 bytes of the
// skiplist's node): each such save a table in level 0, a compaction of
// level 0 into the level below every four, and at twelve sublevels a write
// stall until one ends. So a store whose budget gives Pebble's block cache
// room makes its memtables larger: an eighth of the block cache each,
// between Pebble's default and 64 MiB. Pebble reserves the memory of its
// memtables (two at most, the one being written and the one being
// flushed) in the block cache, which then holds fewer blocks: the budget
// holds them, and a quarter of the block cache at most goes to them.
// Measured (2026-12-07): 300,000 random lines into a store of 1,000,000
// accounts with a budget for every balance (667 MiB, memtables of 42 MiB),
// 41 saves of 7,300 lines on average: 27 flushes, 4 compactions and 14 write
// stalls with memtables of 4 MiB, 2 flushes, 1 compaction and none with
// these; 6 runs of each, alternated, 1.47 to 1.64 s (median 1.56) against
// 2.29 to 2.50 s (median 2.44), the program without tidemark that keeps
// every balance in a map 2.22 to 2.55 s (median 2.40); peak anonymous
// memory 243 and 258 MiB against 268 and 272. With the default budget the
// memtables stay at 4 MiB: larger ones, reserved in its 16 MiB block
// cache, left too little of it for the index and filter blocks (3.5 and
// 3.7 s for the same lines against 5.0 and 5.1 with 8 MiB).
const (
	pebbleMemTableShare = 8
	minPebbleMemTable   = 4 << 20 // Pebble's default
	maxPebbleMemTable   = 64 << 20
)

// pebbleMemTableSize returns the size of the memtables of a Pebble store
// opened with o.
func (o *Options) pebbleMemTableSize() uint64 {
	return uint64(min(max(o.pebbleBlockCache()/pebbleMemTableShare, minPebbleMemTable), maxPebbleMemTable))
}

// valueCacheSize returns the budget of the value cache of a store of kind,
// counted in live bytes: its share of the budget, halved when the Go heap
// grows to twice its live size between collections (see heapFactor), so
// that the memory the cache takes stays within its share.
func (o *Options) valueCacheSize(kind string) int64 {
	n := o.cacheSize()
	if kind == Pebble {
		n -= n / pebbleCacheShare
	}
	if kind == Bolt {
		n -= boltCommitShare(n) // the commit's (see boltEngine.keyCap)
	}
	return n / o.heapFactor(kind)
}

// valueCache keeps durable values (and the absence of keys) that the store
// read from its backend or committed, so that reading the key again needs
// no backend read: a bbolt read transaction and a B+tree search, or a
// Pebble lookup through its memtables and tables. Without it a line whose
// key was not changed by the last batches read the backend on the
// group's goroutine (at 10,000 accounts, most lines).
//
// It holds durable values only, and stays the backend's mirror for its
// keys. Each batch committed is folded into it (fold, off the committer's
// way: see core.startFold), before the batch stops being one a
// transaction looks in first (the pending and the sealed batches, then the
// last committed until its fold ends, see Tx.getOlder): a key a
// transaction finds in no batch is either one of the cache, up to date, or
// one no commit changes while the transaction runs (only the sealed and
// the pending batches commit then, and they do not hold the key), read
// from the backend and put here. The holder
// of the token (Apply and View) reads and puts; mu serializes it with the
// folds, which take it for a few hundred keys at a time. A value handed
// out by get is one that no fold changes while its transaction runs: a
// fold changes only keys of the batch it folds, which that transaction
// finds in the batch.
//
// Memory: each entry counts its key, its value and cacheEntryOverhead
// bytes; above its budget, random entries (Go's map order) are dropped
// until it is 3/4 full, into a new map: a Go map does not give back the
// room of deleted entries, and a cache that deleted them one by one from
// the same map grew to three times its budget under churn (TestValueCacheMemory).
type valueCache struct {
	mu     sync.Mutex
	m      map[string]cachedValue
	size   int64
	budget int64
	// complete is set while the cache holds every data key the backend
	// holds: the backend of a bbolt or Pebble store held none when it
	// opened (core.load: the folder's lock keeps every other writer out),
	// and since then each batch committed was folded in whole, no entry
	// was dropped for room or refused, and no commit failed. A key that
	// it and the batches a transaction looks in do not hold is absent
	// then, and a transaction does not ask the backend (see Tx.getOlder):
	// the first line of each account of a new ledger read a missing key
	// from bbolt or Pebble, the larger part of a short run's reads at
	// 10,000 accounts. Once cleared it stays so until the store reopens.
	complete bool
	// loading is set while the preload (core.preload) puts the backend's
	// keys in. lost is set when, meanwhile, an entry was dropped (evict)
	// or refused, or the cache was told it is not complete (a failed
	// commit): the preload stops at its next key, since a key dropped may
	// hold a value newer than the one the preload read of it.
	loading, lost bool
	// hits and misses count the lookups that found their key, and those
	// that did not and went to the backend (the cache not complete),
	// since the last window (see window); allHits and allMisses those of
	// the windows before (Stats).
	hits, misses, allHits, allMisses uint64
}

// cachedValue is a durable value, or the absence of its key (ok false).
type cachedValue struct {
	val []byte
	ok  bool
}

// cacheEntryOverhead is what an entry costs besides its key and value:
// the map's slot (a string and a cachedValue, 40 bytes) and its share of
// the map's room (a map is at most 7/8 full, and doubles as it grows), and
// the allocation's rounding. Measured for 33-byte keys and 12-byte values:
// 77 to 120 bytes, depending on how far the map is from its next doubling.
const cacheEntryOverhead = 120

func newValueCache(budget int64) *valueCache {
	if budget <= 0 {
		return nil
	}
	return &valueCache{m: make(map[string]cachedValue), budget: budget}
}

// get returns the cached value of key.
func (vc *valueCache) get(key []byte) (cachedValue, bool) {
	v, ok, _ := vc.lookup(key)
	return v, ok
}

// lookup returns the cached value of key, and, when the cache does not
// hold it, whether the cache is complete (see valueCache.complete).
func (vc *valueCache) lookup(key []byte) (v cachedValue, ok, complete bool) {
	vc.mu.Lock()
	v, ok = vc.m[string(key)]
	complete = vc.complete
	if ok {
		vc.hits++
	} else if !complete {
		vc.misses++
	}
	vc.mu.Unlock()
	return v, ok, complete
}

// cacheWindow is the fewest lookups a window of the value cache's hits
// and misses counts (see core.rebalance).
const cacheWindow = 8192

// window returns the hits and misses of the lookups since the last
// window, and starts a new one, once they are at least n (ok); full says
// that the cache holds at least half its budget and not every key of the
// backend: it has dropped entries for room.
func (vc *valueCache) window(n uint64) (hits, misses uint64, full, ok bool) {
	vc.mu.Lock()
	defer vc.mu.Unlock()
	if vc.hits+vc.misses < n {
		return 0, 0, false, false
	}
	hits, misses = vc.hits, vc.misses
	vc.allHits, vc.allMisses = vc.allHits+hits, vc.allMisses+misses
	vc.hits, vc.misses = 0, 0
	return hits, misses, !vc.complete && vc.size >= vc.budget/2, true
}

// resize sets the cache's budget, and drops entries at once to stay
// within a smaller one.
func (vc *valueCache) resize(budget int64) {
	vc.mu.Lock()
	defer vc.mu.Unlock()
	vc.budget = budget
	if vc.size > budget {
		vc.evict(budget)
	}
}

// setComplete sets whether the cache holds every data key of the backend
// (see valueCache.complete).
func (vc *valueCache) setComplete(complete bool) {
	vc.mu.Lock()
	vc.complete = complete
	if !complete && vc.loading {
		vc.lost = true
	}
	vc.mu.Unlock()
}

// startLoading begins a preload (see core.preload).
func (vc *valueCache) startLoading() {
	vc.mu.Lock()
	vc.loading, vc.lost = true, false
	vc.mu.Unlock()
}

// preloadEntryMin is the least an entry of the value cache costs of its
// budget (cacheEntryOverhead and a short key and value): a map sized for
// the budget over it never holds more entries than the budget has room
// for.
const preloadEntryMin = cacheEntryOverhead + 32

// preloadHint returns how many entries the preload sizes the value cache's
// map for: the backend's estimate of its keys (est, 0 when it gives none),
// at most the entries budget bytes have room for.
func preloadHint(est, budget int64) int64 {
	return entriesHint(est, budget, preloadEntryMin)
}

// entriesHint is the entries a map of a cache is made for: est, at most
// the entries of entry bytes each that budget has room for, none for an
// estimate below zero.
func entriesHint(est, budget, entry int64) int64 {
	return max(min(est, budget/entry), 0)
}

// presize gives the cache a map sized for hint entries, with the entries
// it holds, when the one it has holds fewer than a quarter of them: the
// preload then inserts its keys without the map growing as they come.
// Measured: 300,000 lines into a Pebble store of 1,000,000 accounts with a
// budget for every balance, 3 rounds alternated (2026-12-06): 2.47 to
// 2.61 s against 2.65 to 2.97 s (1,000,000 string keys into a Go map: 0.27
// s sized, 0.54 s grown).
func (vc *valueCache) presize(hint int64) {
	vc.mu.Lock()
	defer vc.mu.Unlock()
	if hint <= int64(4*len(vc.m)) {
		return
	}
	m := make(map[string]cachedValue, hint)
	for k, v := range vc.m {
		m[k] = v
	}
	vc.m = m
}

// load puts the value val of key that the preload read, unless the cache
// holds the key: a fold or a read of the backend put it there, with a
// value at least as new as the preload's. It reports whether the preload
// goes on: not once an entry was dropped or refused since it began (see
// lost), nor when the cache has no room for this one (nothing is dropped
// for the preload).
func (vc *valueCache) load(key, val []byte) bool {
	vc.mu.Lock()
	defer vc.mu.Unlock()
	if vc.lost {
		return false
	}
	if _, had := vc.m[string(key)]; had {
		return true
	}
	n := int64(len(key) + len(val) + cacheEntryOverhead)
	if n > vc.budget/8 || vc.size+n > vc.budget {
		return false
	}
	vc.insert(key, val, true, n)
	return true
}

// endLoading ends a preload: the cache holds every data key of the
// backend if the preload read them all (fit) and no entry was dropped or
// refused meanwhile.
func (vc *valueCache) endLoading(fit bool) {
	vc.mu.Lock()
	if fit && !vc.lost {
		vc.complete = true
	}
	vc.loading = false
	vc.mu.Unlock()
}

// put records that key has the durable value val (ok), or is absent. Both
// are copied.
func (vc *valueCache) put(key, val []byte, ok bool) {
	vc.mu.Lock()
	vc.set(key, val, ok)
	vc.mu.Unlock()
}

// set is put, vc.mu held. A value handed out before keeps its bytes
// unless set replaces it with one of the same length (only a fold does).
func (vc *valueCache) set(key, val []byte, ok bool) {
	if old, had := vc.m[string(key)]; had {
		if old.ok == ok && len(old.val) == len(val) {
			copy(old.val, val)
			return
		}
		vc.size -= int64(len(key) + len(old.val) + cacheEntryOverhead)
		delete(vc.m, string(key))
	}
	n := int64(len(key) + len(val) + cacheEntryOverhead)
	if n > vc.budget/8 {
		// One entry never takes a large part of the budget; the key is
		// not held, so the cache no longer holds every key.
		vc.complete = false
		vc.lost = vc.lost || vc.loading
		return
	}
	if vc.size+n > vc.budget {
		vc.evict(vc.budget - vc.budget/4 - n)
	}
	vc.insert(key, val, ok, n)
}

// insert adds key, absent from the cache, with its value (or its absence:
// ok false), which take n bytes of the budget. vc.mu held.
func (vc *valueCache) insert(key, val []byte, ok bool, n int64) {
	// One allocation for the key and the value.
	buf := make([]byte, len(key)+len(val))
	copy(buf, key)
	copy(buf[len(key):], val)
	k := unsafe.String(unsafe.SliceData(buf), len(key))
	v := buf[len(key):len(buf):len(buf)]
	if !ok {
		v = nil
	}
	vc.m[k] = cachedValue{val: v, ok: ok}
	vc.size += n
}

// evict drops entries until the cache holds at most target bytes, and
// moves the others into a new map (their keys and values stay where they
// are): the old map, with the room of the dropped entries, is let go.
func (vc *valueCache) evict(target int64) {
	vc.complete = false
	vc.lost = vc.lost || vc.loading
	keep := len(vc.m)
	if vc.size > 0 {
		keep = int(int64(len(vc.m)) * max(target, 0) / vc.size)
	}
	m := make(map[string]cachedValue, keep)
	for k, v := range vc.m {
		if vc.size > target {
			vc.size -= int64(len(k) + len(v.val) + cacheEntryOverhead)
			continue
		}
		m[k] = v
	}
	vc.m = m
}

// foldChunk is the most keys a fold records under one hold of vc.mu: a
// transaction that reads the cache meanwhile waits for that many at most.
const foldChunk = 256

// fold records the values of a committed batch, off the committer's way
// (core.startFold) once the batch is durable and the last committed:
// until it returns, transactions look in the batch before the cache
// (batch.folded), and the next commit waits for it (core.waitFold).
func (vc *valueCache) fold(b *batch) {
	for ws := b.writes; len(ws) > 0; {
		n := min(len(ws), foldChunk)
		vc.mu.Lock()
		for _, e := range ws[:n] {
			vc.set(e.key, e.val, !e.del)
		}
		vc.mu.Unlock()
		ws = ws[n:]
	}
}
