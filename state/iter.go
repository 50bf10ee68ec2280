package state

import (
	"bytes"
	"iter"
	"slices"
)

// Streaming iteration.
//
// A transaction iterates a key range by merging, in key order, a cursor of
// the backend with the changes staged in memory: the staging batch (the
// running Apply's writes included), the batch that waits for the commit
// of the one before it (pending, see core.canPend), and the batch being
// committed. The staged changes are few (at most three batches), the
// backend's keys many:
// the backend is read as the loop goes, never copied, and the staged
// entries of each batch are kept sorted, lazily, for the iterations that
// ask (see stagedOrder). Of the same key, the staging batch wins over the
// pending one, which wins over the sealed one, which wins over the
// backend; a staged delete hides the key.
//
// The backend's cursor may read in pages, each from the backend as it is
// then (bbolt, PostgreSQL): inside Apply and View the token that
// serializes them is held, so no batch is cut, and the only changes the
// backend can see during the loop are the commits of the sealed batch and
// of the pending one, which the loop overlays anyway. A snapshot's cursor reads its snapshot, and
// has no staged changes to merge.

// cursor iterates the keys of a range of a backend or a snapshot.
type cursor interface {
	// next moves to the next key (the first one at the first call) and
	// reports whether there is one. After false, err tells why.
	next() bool
	// key and value are valid until the next call of next.
	key() []byte
	value() []byte
	// err returns the error that ended the iteration, if any.
	err() error
	// close releases the cursor; it returns err() or the error of closing.
	close() error
}

// reader is what a transaction reads durable state from: the backend
// (Apply, View) or a snapshot of it.
type reader interface {
	// get returns the value of key and whether it exists. The value is
	// valid until the transaction ends.
	get(key []byte) ([]byte, bool, error)
	// cursor returns a cursor over the keys k with lo <= k < hi (hi nil:
	// no upper bound), in key order, or in reverse order.
	cursor(lo, hi []byte, reverse bool) cursor
}

// stagedOrder keeps the entries of a batch sorted by key for iteration,
// brought up to date when an iteration starts (staging a line never pays
// for it). main holds b.writes[:n] but the last few, which tail holds
// (both sorted): a loop that iterates after each new key inserts that key
// into the small tail, and the tail is merged into main once it holds
// maxOrderTail keys. An iteration keeps the slices it started with; while one
// runs (active), an update makes new slices instead of changing them.
type stagedOrder struct {
	b          *batch
	main, tail []*entry
	n          int    // b.writes[:n] are in main or tail
	last       *entry // b.writes[n-1]: another entry there means a rollback
	active     int
}

// maxOrderTail is the most entries in a stagedOrder's tail.
const maxOrderTail = 256

func entryLess(a, b *entry) int { return bytes.Compare(a.key, b.key) }

// sync brings o up to date with b (nil: none). The caller holds the token.
func (o *stagedOrder) sync(b *batch) {
	if o.b != b || b != nil && (o.n > len(b.writes) || o.n > 0 && b.writes[o.n-1] != o.last) {
		// Another batch, or entries removed by a rollback since: start
		// over. Old pointers are dropped so that they keep nothing alive.
		o.b, o.n, o.last = b, 0, nil
		if o.active > 0 {
			o.main, o.tail = nil, nil
		} else {
			clear(o.main)
			clear(o.tail)
			o.main, o.tail = o.main[:0], o.tail[:0]
		}
	}
	if b == nil || o.n == len(b.writes) {
		return
	}
	added := b.writes[o.n:]
	if len(o.tail)+len(added) <= maxOrderTail {
		tail := o.tail
		if o.active > 0 {
			tail = slices.Clone(tail)
		}
		for _, e := range added {
			i, _ := slices.BinarySearchFunc(tail, e, entryLess)
			tail = slices.Insert(tail, i, e)
		}
		o.tail = tail
	} else {
		merged := make([]*entry, 0, len(o.main)+len(o.tail)+len(added))
		fresh := slices.Clone(added)
		slices.SortFunc(fresh, entryLess)
		merged = mergeSorted(merged, o.main, o.tail)
		if len(fresh) > 0 {
			old := merged
			merged = mergeSorted(make([]*entry, 0, cap(old)), old, fresh)
		}
		o.main = merged
		if o.active > 0 {
			o.tail = nil
		} else {
			clear(o.tail)
			o.tail = o.tail[:0]
		}
	}
	o.n = len(b.writes)
	o.last = b.writes[o.n-1]
}

// mergeSorted appends the merge of the sorted a and b to dst.
func mergeSorted(dst, a, b []*entry) []*entry {
	for len(a) > 0 && len(b) > 0 {
		if bytes.Compare(a[0].key, b[0].key) <= 0 {
			dst, a = append(dst, a[0]), a[1:]
		} else {
			dst, b = append(dst, b[0]), b[1:]
		}
	}
	return append(append(dst, a...), b...)
}

// run is the entries of one sorted slice within a scan's range, walked
// forward or backward.
type run struct {
	es  []*entry
	i   int // the head: es[i]
	rev bool
}

// newRun returns the entries of es (sorted) with lo <= key < hi.
func newRun(es []*entry, lo, hi []byte, rev bool) run {
	i, _ := slices.BinarySearchFunc(es, lo, func(e *entry, k []byte) int { return bytes.Compare(e.key, k) })
	j := len(es)
	if hi != nil {
		j, _ = slices.BinarySearchFunc(es, hi, func(e *entry, k []byte) int { return bytes.Compare(e.key, k) })
	}
	r := run{es: es[i:max(i, j)], rev: rev}
	if rev {
		r.i = len(r.es) - 1
	}
	return r
}

func (r *run) ok() bool     { return r.i >= 0 && r.i < len(r.es) }
func (r *run) head() *entry { return r.es[r.i] }
func (r *run) key() []byte  { return r.es[r.i].key }
func (r *run) empty() bool  { return len(r.es) == 0 }

func (r *run) advance() {
	if r.rev {
		r.i--
	} else {
		r.i++
	}
}

// orders returns the stagedOrders of the store, made at the first
// iteration. The caller holds the token.
func (ts *txState) orders() *[3]stagedOrder {
	if ts.ord == nil {
		ts.ord = new([3]stagedOrder)
	}
	return ts.ord
}

// scan returns the entries with lo <= key < hi (full keys; hi nil: no
// upper bound) as the transaction sees them, in key order or reverse. An
// error stops the loop and is recorded in the transaction (see fail). bi
// is the bucket of the range, nil for a range of several.
//
// In Apply, a key the loop writes ahead of itself is seen with its new
// value when the loop reaches it (or not at all, deleted), whichever
// layer held it before; a key the loop adds ahead of itself may or may not
// be seen.
func (tx *Tx) scan(bi *bucketInfo, lo, hi []byte, rev bool) iter.Seq2[[]byte, []byte] {
	return func(yield func(k, v []byte) bool) {
		if err := tx.check(false); err != nil {
			tx.fail(err)
			return
		}
		ts := tx.txState
		// The staged runs, the staging batch's first (it wins), then the
		// pending one's and the sealed one's. A batch gives two runs at
		// most (its stagedOrder's main and tail).
		var runs [6]run
		nr, ncur := 0, 0 // runs, and those of the staging batch
		if !ts.snap {
			ord := ts.orders()
			for i, b := range []*batch{ts.cur, ts.pending, ts.sealed} {
				if i == 1 {
					ncur = nr
				}
				o := &ord[i]
				o.sync(b)
				if b == nil {
					continue
				}
				o.active++
				defer func() { o.active-- }()
				for _, es := range [][]*entry{o.main, o.tail} {
					if r := newRun(es, lo, hi, rev); !r.empty() {
						runs[nr] = r
						nr++
					}
				}
			}
		}
		cur := tx.reader().cursor(lo, hi, rev)
		defer func() {
			if err := cur.close(); err != nil {
				tx.fail(tx.c.readErr(err))
			}
		}()
		w := ts.w
		// The staging batch's entries when the loop began: one made since
		// (by the loop, in Apply) may change a key of the backend or of the
		// pending or sealed batch, which newer returns.
		var n0 int
		if w != nil {
			n0 = len(ts.cur.writes)
		}
		newer := func(k []byte) *entry {
			if w == nil || bi == nil || len(ts.cur.writes) == n0 {
				return nil
			}
			var q bkey
			q.set(bi, k[len(bi.prefix):])
			return ts.cur.get(&q)
		}
		before := func(a, b []byte) bool {
			if rev {
				return bytes.Compare(a, b) > 0
			}
			return bytes.Compare(a, b) < 0
		}
		eok := cur.next()
		if !eok && cur.err() != nil {
			return
		}
		for {
			// The first key of all heads; of equal keys, the first run's.
			best, win := []byte(nil), -1
			for i := range runs[:nr] {
				if r := &runs[i]; r.ok() && (win < 0 || before(r.key(), best)) {
					best, win = r.key(), i
				}
			}
			if eok && (win < 0 || before(cur.key(), best)) {
				// The backend's key, staged nowhere when the loop began.
				k, v, ok := cur.key(), cur.value(), true
				if e := newer(k); e != nil {
					k, v, ok = e.key, e.val[:len(e.val):len(e.val)], !e.del
					if e.got != w.gen {
						e.got = w.gen
					}
				}
				if ok && !yield(k, v) {
					return
				}
				if eok = cur.next(); !eok && cur.err() != nil {
					return // the deferred close records it
				}
				continue
			}
			if win < 0 {
				return
			}
			e := runs[win].head()
			if win >= ncur {
				if n := newer(e.key); n != nil {
					e = n
				}
			}
			// Every head at that key moves on; the backend's is shadowed.
			for i := range runs[:nr] {
				if r := &runs[i]; r.ok() && bytes.Equal(r.key(), best) {
					r.advance()
				}
			}
			if eok && bytes.Equal(cur.key(), best) {
				if eok = cur.next(); !eok && cur.err() != nil {
					return
				}
			}
			if e.del {
				continue
			}
			if w != nil && e.got != w.gen {
				e.got = w.gen // handed out: not changed in place by this Apply
			}
			if !yield(e.key, e.val[:len(e.val):len(e.val)]) {
				return
			}
		}
	}
}

// The iteration of a bucket. Each method returns a sequence for a range
// loop:
//
//	for k, v := range tx.Bucket("balances").Prefix([]byte("acct-")) {
//		...
//	}
//
// The loop sees the transaction's state: durable, staged and its own
// writes (a snapshot's: what was durable when it was taken). k and v are
// valid only until the next step: copy what you keep, and do not modify
// them. A write to the bucket during the loop (in Apply) is allowed, and
// no key is seen twice: a key the loop changes or deletes ahead of itself
// is seen as it is when the loop reaches it (or not, deleted); a key it
// adds ahead of itself may or may not be seen.
//
// An error (a failed read of the backend) ends the loop early. It is not
// lost: [Tx.Err] returns it, and it fails the transaction, so that Apply,
// View and Snapshot return it even when the function returns nil.
//
// Ranges are half-open, as Go's slices and Pebble's bounds are: Range(from,
// to) holds the keys k with from <= k < to; a nil bound is open.

// All returns every key of the bucket, in key order.
func (b *Bucket) All() iter.Seq2[[]byte, []byte] { return b.Range(nil, nil) }

// Range returns the keys k with from <= k < to, in key order. A nil from
// starts at the first key, a nil to ends after the last.
func (b *Bucket) Range(from, to []byte) iter.Seq2[[]byte, []byte] {
	lo, hi := b.bounds(from, to)
	return b.strip(b.tx.scan(b.bucketInfo, lo, hi, false))
}

// From returns the keys k >= from, in key order.
func (b *Bucket) From(from []byte) iter.Seq2[[]byte, []byte] { return b.Range(from, nil) }

// Prefix returns the keys that start with p, in key order.
func (b *Bucket) Prefix(p []byte) iter.Seq2[[]byte, []byte] {
	lo, hi := b.prefixBounds(p)
	return b.strip(b.tx.scan(b.bucketInfo, lo, hi, false))
}

// Reverse returns every key of the bucket, in reverse key order.
func (b *Bucket) Reverse() iter.Seq2[[]byte, []byte] { return b.ReverseRange(nil, nil) }

// ReverseRange returns the keys k with from <= k < to, in reverse key
// order: the last first. Nil bounds are open.
func (b *Bucket) ReverseRange(from, to []byte) iter.Seq2[[]byte, []byte] {
	lo, hi := b.bounds(from, to)
	return b.strip(b.tx.scan(b.bucketInfo, lo, hi, true))
}

// ReverseFrom returns the keys k <= from, in reverse key order: from (if
// it exists) first.
func (b *Bucket) ReverseFrom(from []byte) iter.Seq2[[]byte, []byte] {
	lo, _ := b.bounds(nil, nil)
	return b.strip(b.tx.scan(b.bucketInfo, lo, keyAfter(b.prefix, from), true))
}

// ReversePrefix returns the keys that start with p, in reverse key order.
func (b *Bucket) ReversePrefix(p []byte) iter.Seq2[[]byte, []byte] {
	lo, hi := b.prefixBounds(p)
	return b.strip(b.tx.scan(b.bucketInfo, lo, hi, true))
}

// bounds returns the full keys of [from, to) in the bucket.
func (b *Bucket) bounds(from, to []byte) (lo, hi []byte) {
	lo = append(append([]byte{}, b.prefix...), from...)
	if to == nil {
		hi = prefixEnd(b.prefix)
	} else {
		hi = append(append([]byte{}, b.prefix...), to...)
	}
	return lo, hi
}

// prefixBounds returns the full keys of the keys that start with p.
func (b *Bucket) prefixBounds(p []byte) (lo, hi []byte) {
	lo = append(append([]byte{}, b.prefix...), p...)
	return lo, prefixEnd(lo)
}

// keyAfter returns the smallest full key after prefix+k.
func keyAfter(prefix, k []byte) []byte {
	return append(append(append([]byte{}, prefix...), k...), 0)
}

// strip returns seq with the bucket's prefix cut off its keys.
func (b *Bucket) strip(seq iter.Seq2[[]byte, []byte]) iter.Seq2[[]byte, []byte] {
	n := len(b.prefix)
	return func(yield func(k, v []byte) bool) {
		for k, v := range seq {
			if !yield(k[n:len(k):len(k)], v) {
				return
			}
		}
	}
}

// ForEach calls fn for every key of the bucket in key order, as the
// transaction sees it (durable, staged and its own writes), streaming: it
// is All as a callback. key and value are valid only during the call. It
// returns fn's error, or the error of the iteration.
func (b *Bucket) ForEach(fn func(key, value []byte) error) error {
	if err := b.tx.check(false); err != nil {
		return err
	}
	for k, v := range b.All() {
		if err := fn(k, v); err != nil {
			return err
		}
	}
	return b.tx.err
}
