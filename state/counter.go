package state

import (
	"fmt"
	"sync/atomic"
)

// Counter is one key of a [Table] of [Int64] or [Uint64] values that many
// Applies add to: a count of lines, a sum of amounts. Its Add is the
// table's [Table.Add] of that key, with the same effect on the store, the
// transaction and its rollback; it costs less: the key is encoded once,
// when the counter is made, and the store remembers where its staging
// batch holds the key, so that each Add after the first of a batch
// changes the value there without hashing the key or looking it up.
//
// Like a Table, a Counter holds no data of its own: make one per key,
// once (a package-level variable is fine), and use it with the [Tx] of
// any Apply, of any store, from any goroutine (a program that makes more
// than 4,096 counters gets no memo for the later ones, only their Add):
//
//	var counters = state.NewTable("", state.String{}, state.Int64{})
//	var lines = counters.Counter("lines")
//
//	// in Apply:
//	n, err := lines.Add(tx, 1)
//
// The value is the table's: counters.Get(tx, "lines") reads it, in the
// same Apply or later, and a Put or Add of the table changes it.
type Counter[K, V any] struct {
	t   *Table[K, V]
	key []byte // the key's encoding
	err error  // of encoding the key, returned by each call
	id  int    // the counter's memo in each store (core.ctrs)
}

// counterIDs numbers the counters made, so that each store keeps a memo
// a counter (see core.counterAt).
var counterIDs atomic.Int64

// Counter returns the counter of key k of t. A key the table's key codec
// cannot encode makes a counter whose calls fail with that error; a table
// whose values are not [Int64] or [Uint64] makes one whose calls fail
// with an error wrapping [ErrNotInt64].
func (t *Table[K, V]) Counter(k K) *Counter[K, V] {
	c := &Counter[K, V]{t: t, id: int(counterIDs.Add(1) - 1)}
	key, err := t.keys.AppendKey(nil, k)
	if err != nil {
		c.err = fmt.Errorf("table %q: counter: encode its key (%s): %w", t.bucket, t.schema.Key, err)
	}
	if key == nil {
		key = []byte{}
	}
	c.key = key
	return c
}

// Add adds delta to the counter's value (0 when its key does not exist)
// and returns the new value, as [Table.Add] of its key.
func (c *Counter[K, V]) Add(tx *Tx, delta V) (V, error) {
	var zero V
	t := c.t
	switch {
	case c.err != nil:
		return zero, c.err
	case t.add == nil:
		return zero, t.notAdder()
	}
	if err := tx.check(true); err != nil {
		return zero, err
	}
	bi := tx.binfo(t.bucket)
	if bi.schema != t.schema {
		tx.recordSchema(bi, t.schema)
	}
	if e := tx.c.counterAt(c.id, tx); e != nil {
		return t.add.addAt(tx, bi, c.key, e, delta)
	}
	n, e, err := t.add.addEntry(tx, bi, c.key, delta)
	if e != nil {
		tx.c.setCounter(c.id, tx, e)
	}
	return n, err
}

// Get returns the counter's value, 0 when its key does not exist, as the
// transaction sees it: [Table.Get] of its key.
func (c *Counter[K, V]) Get(tx *Tx) (V, error) {
	var zero V
	if c.err != nil {
		return zero, c.err
	}
	k, err := c.t.keys.DecodeKey(c.key)
	if err != nil {
		return zero, fmt.Errorf("table %q: counter: decode its key: %w", c.t.bucket, err)
	}
	v, _, err := c.t.Get(tx, k)
	return v, err
}

// counterSlot is where a store's staging batch holds a counter's key: the
// namespace and the batch (by its seq: a cut starts a new one) of the
// entry.
type counterSlot struct {
	nss *nsStore
	seq uint64
	e   *entry
}

// counterAt returns the entry of counter id in the staging batch of tx,
// if the store's memo has it, else nil. The caller holds the token.
func (c *core) counterAt(id int, tx *Tx) *entry {
	if id >= len(c.ctrs) {
		return nil
	}
	s := &c.ctrs[id]
	b := tx.cur
	if s.nss != tx.nss || s.seq != b.seq {
		return nil
	}
	// Still the batch's: an Apply that made the entry and rolled back
	// dropped it from the batch's writes (txWrites.rollback), and the
	// batch never makes another entry at its address.
	e := s.e
	if int(e.pos) >= len(b.writes) || b.writes[e.pos] != e {
		return nil
	}
	return e
}

// maxCounterMemos is the most counters a store keeps memos of (by
// Counter.id): a program that makes a counter for each line, against the
// advice of the doc, gets Table.Add's cost for those past it, and a store
// no slice of millions.
const maxCounterMemos = 4096

// setCounter records that e is the entry of counter id in the staging
// batch of tx. The caller holds the token.
func (c *core) setCounter(id int, tx *Tx, e *entry) {
	if id >= maxCounterMemos {
		return
	}
	if id >= len(c.ctrs) {
		c.ctrs = append(c.ctrs, make([]counterSlot, id+1-len(c.ctrs))...)
	}
	c.ctrs[id] = counterSlot{nss: tx.nss, seq: tx.cur.seq, e: e}
}
