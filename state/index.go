package state

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"hash/maphash"
	"math/bits"
	"slices"
	"sync"
	"unsafe"
)

// seed is the seed of every hash: random per process, so that no input can
// be made to collide on purpose.
var seed = maphash.MakeSeed()

// bkey is a key of a bucket, as a line asks for it: the bucket's prefix
// and the key, not joined (most lookups find the key staged already and
// never need the full key), and their hash.
type bkey struct {
	prefix, key []byte
	h           uint64
}

// set makes q the key of the bucket bi. Field by field: a bkey built
// aside and copied would wait for its stores.
func (q *bkey) set(bi *bucketInfo, key []byte) {
	q.prefix = bi.prefix
	q.key = key
	q.h = hashKey(bi.ph, key)
}

// isEntry reports whether e is the entry of q. An entry made from the same
// prefix (the same bucketInfo's) needs only its key compared.
func (q *bkey) isEntry(e *entry) bool {
	n := len(q.prefix)
	full := e.key
	if len(full) != n+len(q.key) || string(full[n:]) != string(q.key) {
		return false
	}
	return n == 0 || e.pfx == unsafe.SliceData(q.prefix) || string(full[:n]) == string(q.prefix)
}

// appendTo appends the full key of q to b.
func (q *bkey) appendTo(b []byte) []byte { return append(append(b, q.prefix...), q.key...) }

// hashPrefix returns the hash of a bucket's prefix, the start of the hash
// of each of its keys.
func hashPrefix(prefix []byte) uint64 { return maphash.Bytes(seed, prefix) }

const (
	m1 = 0xa0761d6478bd642f
	m2 = 0xe7037ed1a0b428db
)

// mix folds the 128-bit product of a and b.
func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// hashKey returns the hash of key in the bucket whose prefix hashes to ph:
// the same for the same full key however it is asked for. Keys are short
// (an account, a counter's name): a multiply per 8 bytes costs less than
// the runtime's hash of the joined key.
func hashKey(ph uint64, key []byte) uint64 {
	n := len(key)
	h := mix(ph^m1, uint64(n)^m2)
	var t uint64
	switch {
	case n > 8:
		k := key
		for ; len(k) > 8; k = k[8:] {
			h = mix(h^binary.LittleEndian.Uint64(k), m1)
		}
		t = binary.LittleEndian.Uint64(key[n-8:])
	case n == 8:
		t = binary.LittleEndian.Uint64(key)
	case n >= 4:
		t = uint64(binary.LittleEndian.Uint32(key))<<32 | uint64(binary.LittleEndian.Uint32(key[n-4:]))
	case n > 0:
		t = uint64(key[0])<<16 | uint64(key[n/2])<<8 | uint64(key[n-1])
	}
	return mix(h^t, m2)
}

// index finds a batch's entries by key: open addressing with linear
// probing over a power-of-two table kept at most half full. A line hashes a
// key once for every batch it looks in, and finds it without joining it
// to its bucket's prefix. Each slot holds its entry's hash beside it, so
// that a probe reads the entry (and its key) only when the hashes match:
// with thousands of keys a batch, most probes of a key the batch does not
// hold (a line looks in the staging batch, then the one committing, then
// the last committed) would otherwise cost a cache miss each.
type index struct {
	slots []slot
	n     int
}

// slot is an entry of the index and its hash; e nil for an empty one.
type slot struct {
	h uint64
	e *entry
}

// newIndex returns an index with room for n entries.
func newIndex(n int) index {
	size := 16
	for size < 2*n {
		size *= 2
	}
	return index{slots: make([]slot, size)}
}

// get returns the entry of q, or nil.
func (ix *index) get(q *bkey) *entry {
	m := uint64(len(ix.slots) - 1)
	for i := q.h & m; ; i = (i + 1) & m {
		s := &ix.slots[i]
		if s.e == nil || s.h == q.h && q.isEntry(s.e) {
			return s.e
		}
	}
}

// insert adds e, whose key is not in the index yet.
func (ix *index) insert(e *entry) {
	if 2*(ix.n+1) > len(ix.slots) {
		old := ix.slots
		ix.slots = make([]slot, 2*len(old))
		for _, o := range old {
			if o.e != nil {
				ix.place(o)
			}
		}
	}
	ix.place(slot{h: e.h, e: e})
	ix.n++
}

// remove takes e out of the index. Linear probing has no holes in a run:
// the entries after e that belong before the hole move back into it.
func (ix *index) remove(e *entry) {
	m := uint64(len(ix.slots) - 1)
	i := e.h & m
	for ix.slots[i].e != e {
		if ix.slots[i].e == nil {
			return // not in the index
		}
		i = (i + 1) & m
	}
	for j := i; ; {
		j = (j + 1) & m
		f := ix.slots[j]
		if f.e == nil {
			break
		}
		// f stays where it is when its home slot k is cyclically in (i, j].
		k := f.h & m
		if i <= j && i < k && k <= j || i > j && (i < k || k <= j) {
			continue
		}
		ix.slots[i] = f
		i = j
	}
	ix.slots[i] = slot{}
	ix.n--
}

func (ix *index) place(s slot) {
	m := uint64(len(ix.slots) - 1)
	i := s.h & m
	for ix.slots[i].e != nil {
		i = (i + 1) & m
	}
	ix.slots[i] = s
}

// writeOrder sorts the writes of a commit by key, for the backend: bbolt
// searches its B+tree from the root for each Put, and keys in order find
// the pages of the one before in the CPU's cache; Pebble's memtable
// inserts keys in order near the one before. A batch's keys share long
// prefixes (the namespace's and the bucket's, and the start of the keys:
// "account-0000"), so a sort that compares whole keys spends its time in
// the bytes every key has (with 10,000 accounts, 1.5 s of the committer's
// 8.5 s over 5,000,000 lines). writeOrder skips the bytes a group of keys
// shares and compares the next 8 as one integer: the keys that tie on
// them (and go on) are sorted again from there, and so on. Only the
// committer uses it; it keeps its scratch space from commit to commit.
type writeOrder struct {
	rk, rk2 []keyRank // rk2: sortRanks's scratch
	tmp     []write
	keys    []write // presort's keys to rank, without their values
}

// maxWriteList is the most writes a list kept for reuse has room for
// (keepWrites): 3.5 MiB, the writes of a batch of 65,536 keys. A batch
// of more keys has its lists made anew (and its other memory is of that
// size).
const maxWriteList = 1 << 16

// keepWrites returns ws emptied, its writes cleared (they hold a batch's
// keys and values, which it would keep from the collector), for reuse;
// nil if it is larger than maxWriteList.
func keepWrites(ws []write) []write {
	if cap(ws) > maxWriteList {
		return nil
	}
	clear(ws[:cap(ws)])
	return ws[:0]
}

// writeLists are lists of writes for reuse: the writes of a batch sorted
// ahead (core.presort) go back once committed. Each allocation of such
// a list (at 10,000 accounts, 350 KiB a batch) was memory the collector
// had to reclaim.
var writeLists sync.Pool // of *[]write

// getWrites returns an empty list of writes with room for n, from
// writeLists if it has one.
func getWrites(n int) []write {
	if p, ok := writeLists.Get().(*[]write); ok {
		return slices.Grow((*p)[:0], n)
	}
	return make([]write, 0, n)
}

// byteBufs are buffers for reuse: the checksummed values of a batch
// sorted ahead (core.presort) go back once committed.
var byteBufs sync.Pool // of *[]byte

// getBytes returns an empty buffer with room for n bytes, from byteBufs
// if it has one.
func getBytes(n int) []byte {
	if p, ok := byteBufs.Get().(*[]byte); ok {
		return slices.Grow((*p)[:0], n)
	}
	return make([]byte, 0, n)
}

// putBytes gives b back to byteBufs, unless it is larger than
// maxScratchBytes.
func putBytes(b []byte) {
	if b = b[:0]; cap(b) > 0 && cap(b) <= maxScratchBytes {
		byteBufs.Put(&b)
	}
}

// putWrites gives ws back to writeLists.
func putWrites(ws []write) {
	if ws = keepWrites(ws); cap(ws) > 0 {
		writeLists.Put(&ws)
	}
}

// keyRank is a key's rank from the offset a sort level starts at: the 8
// bytes there (big-endian, padded with zeros), and how many of them the
// key has (9: more than 8), so that a key sorts before the longer keys it
// is the start of.
type keyRank struct {
	a uint64
	n int32
	i int32 // the write's index
}

// sort sorts ws by key. The keys are distinct.
func (o *writeOrder) sort(ws []write) {
	if len(ws) < 2 {
		return
	}
	rk := o.ranks(ws)
	// The writes move once, to the order of their ranks.
	o.tmp = append(o.tmp[:0], ws...)
	for j, r := range rk {
		ws[j] = o.tmp[r.i]
	}
	clear(o.tmp) // they hold the batch's keys and values
	o.tmp = o.tmp[:0]
}

// order returns the indexes of ws in the order of their keys, which are
// distinct, and leaves ws as it is.
func (o *writeOrder) order(ws []write) []int32 {
	perm := make([]int32, len(ws))
	for j, r := range o.ranks(ws) {
		perm[j] = r.i
	}
	return perm
}

// ranks returns the ranks of ws sorted by key (o.rk, until the next use).
func (o *writeOrder) ranks(ws []write) []keyRank {
	rk := o.rk[:0]
	for i := range ws {
		rk = append(rk, keyRank{i: int32(i)})
	}
	o.rank(ws, rk, 0)
	o.rk = rk
	return rk
}

// mergeWrites returns the writes of ws, in key order, and those of the
// entries ents in the order perm gives (key order), with their values as
// they are now, as one list in key order, in dst's memory if it has room
// (dst shares none with ws); the keys of the two are distinct.
func mergeWrites(dst, ws []write, ents []*entry, perm []int32) []write {
	out := slices.Grow(dst[:0], len(ws)+len(perm))
	i := 0
	for _, p := range perm {
		e := ents[p]
		for i < len(ws) && bytes.Compare(ws[i].key, e.key) < 0 {
			out = append(out, ws[i])
			i++
		}
		out = append(out, write{key: e.key, val: e.val, del: e.del})
	}
	return append(out, ws[i:]...)
}

// mergePresorted returns the writes of ws and pre, each in key order, their
// keys distinct, as one list in key order, in dst's memory if it has room
// (dst shares none with ws and pre). ws is short (the records and outputs
// of a batch beside its keys, pre): each of its writes is placed by a
// binary search, and pre copied in between.
func mergePresorted(dst, ws, pre []write) []write {
	out := slices.Grow(dst[:0], len(ws)+len(pre))
	for _, w := range ws {
		i, _ := slices.BinarySearchFunc(pre, w.key, func(x write, k []byte) int { return bytes.Compare(x.key, k) })
		out = append(out, pre[:i]...)
		out = append(out, w)
		pre = pre[i:]
	}
	return append(out, pre...)
}

// rank sorts rk, ranks of writes of ws whose keys share their first off
// bytes, by those keys.
func (o *writeOrder) rank(ws []write, rk []keyRank, off int) {
	if len(rk) < 2 {
		return
	}
	// Skip what every key has from off on.
	first := ws[rk[0].i].key
	l := len(first)
	for _, r := range rk[1:] {
		k := ws[r.i].key
		j, m := off, min(l, len(k))
		for j < m && k[j] == first[j] {
			j++
		}
		if l = j; l == off {
			break
		}
	}
	for x := range rk {
		r := &rk[x]
		k := ws[r.i].key
		r.a, r.n = load8(k, l), int32(min(len(k)-l, 9))
	}
	o.sortRanks(rk)
	// The keys that tie on their 8 bytes from l and have more are sorted
	// from l+8 (keys are distinct, so a tie with fewer bytes is of one key).
	for s := 0; s < len(rk); {
		e := s + 1
		if rk[s].n > 8 {
			for e < len(rk) && rk[e].n > 8 && rk[e].a == rk[s].a {
				e++
			}
			if e-s > 1 {
				o.rank(ws, rk[s:e], l+8)
			}
		}
		s = e
	}
}

// radixMin is the number of ranks from which sortRanks sorts by radix:
// a radix pass counts and moves every rank whatever their number, which
// below this costs more than comparing them (BenchmarkWriteOrder).
const radixMin = 96

// compareRanks orders ranks by their 8 bytes, then by how many of them the
// key has.
func compareRanks(x, y keyRank) int {
	return cmp.Or(cmp.Compare(x.a, y.a), cmp.Compare(x.n, y.n))
}

// sortRanks sorts rk as compareRanks orders them. From radixMin ranks on
// it sorts by least significant digit first: a pass on n, then one on each
// byte of a from its last, each stable; a pass whose digit every rank
// shares is skipped. BenchmarkWriteOrder (6,300 keys of a ledger's
// commit): 145-154 ns a key by comparison, 55-59 by radix.
func (o *writeOrder) sortRanks(rk []keyRank) {
	if len(rk) < radixMin {
		slices.SortFunc(rk, compareRanks)
		return
	}
	o.rk2 = slices.Grow(o.rk2[:0], len(rk))[:len(rk)]
	src, dst := rk, o.rk2
	var diff uint64 // the bits of a in which some rank differs from the first
	sameN := true
	for _, r := range rk {
		diff |= r.a ^ rk[0].a
		sameN = sameN && r.n == rk[0].n
	}
	if !sameN {
		radixPassN(src, dst)
		src, dst = dst, src
	}
	for shift := uint(0); shift < 64; shift += 8 {
		if byte(diff>>shift) != 0 {
			radixPass(src, dst, shift)
			src, dst = dst, src
		}
	}
	if &src[0] != &rk[0] {
		copy(rk, src)
	}
}

// radixPass moves src to dst in the order of the byte of their a at shift,
// stably.
func radixPass(src, dst []keyRank, shift uint) {
	var at [256]int
	for _, r := range src {
		at[byte(r.a>>shift)]++
	}
	pos := 0
	for d, c := range at {
		at[d], pos = pos, pos+c
	}
	for _, r := range src {
		d := byte(r.a >> shift)
		dst[at[d]] = r
		at[d]++
	}
}

// radixPassN moves src to dst in the order of their n (0 to 9), stably.
func radixPassN(src, dst []keyRank) {
	var at [10]int
	for _, r := range src {
		at[r.n]++
	}
	pos := 0
	for d, c := range at {
		at[d], pos = pos, pos+c
	}
	for _, r := range src {
		dst[at[r.n]] = r
		at[r.n]++
	}
}

// load8 returns the 8 bytes of k from off, big-endian, padded with zeros.
func load8(k []byte, off int) uint64 {
	k = k[off:]
	if len(k) >= 8 {
		return binary.BigEndian.Uint64(k)
	}
	var a uint64
	for i, b := range k {
		a |= uint64(b) << (56 - 8*i)
	}
	return a
}
