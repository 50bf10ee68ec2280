package state

import "hash/maphash"

// seed is the seed of every key hash: the hash of a key is the same in
// every batch, so that a line hashes a key once for all of them.
var seed = maphash.MakeSeed()

// hashKey returns the hash of the full key k.
func hashKey(k []byte) uint64 { return maphash.Bytes(seed, k) }

// index finds a batch's entries by key: open addressing with linear
// probing over a power-of-two table kept at most half full. It costs a line
// a hash it computes once, and a probe, where a map keyed by string would
// hash again in each batch it looks in.
type index struct {
	slots []*entry
	n     int
}

// newIndex returns an index with room for n entries.
func newIndex(n int) index {
	size := 16
	for size < 2*n {
		size *= 2
	}
	return index{slots: make([]*entry, size)}
}

// get returns the entry of key k, whose hash is h, or nil.
func (ix *index) get(h uint64, k []byte) *entry {
	m := uint64(len(ix.slots) - 1)
	for i := h & m; ; i = (i + 1) & m {
		e := ix.slots[i]
		if e == nil || e.h == h && string(e.key) == string(k) {
			return e
		}
	}
}

// insert adds e, whose key is not in the index yet.
func (ix *index) insert(e *entry) {
	if 2*(ix.n+1) > len(ix.slots) {
		old := ix.slots
		ix.slots = make([]*entry, 2*len(old))
		for _, o := range old {
			if o != nil {
				ix.place(o)
			}
		}
	}
	ix.place(e)
	ix.n++
}

func (ix *index) place(e *entry) {
	m := uint64(len(ix.slots) - 1)
	i := e.h & m
	for ix.slots[i] != nil {
		i = (i + 1) & m
	}
	ix.slots[i] = e
}
