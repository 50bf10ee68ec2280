package state

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"

	"github.com/tidemark-go/tidemark"
)

// Tx is the transaction given to the function of [Store.Apply] or
// [Store.View]. Its reads see the durable state, the changes staged by
// earlier Apply calls, and the transaction's own writes. Its writes are
// staged when the function returns nil, and discarded when it returns an
// error (or panics). A Tx is valid only inside the function and must not be shared
// with other goroutines. The Tx methods act on the namespace's root bucket.
//
// A Tx is a small handle (56 bytes with the handles of its first bucket
// and output);
// what it works with (*txState) is the store's, reused by every Apply and
// View (they are serialized). The handles serve in turn from a ring of
// txRing per store, so that a line allocates nothing (a Tx a line cut from
// a slab was most of the bytes it allocated, and the garbage collector's
// cycles they made were about a fifth of its CPU). A Tx kept past its
// function fails with [ErrTxDone] when it is used, and from that use on
// it is never served again (see late), so that it stays done. The one
// exception is a kept Tx whose first use after its function comes while
// it serves again, txRing (4096) lines later, during that line's
// function: it is then that line's Tx, the use is not refused and acts on
// that line's transaction, whether it comes from the function itself or
// from another goroutine (which the rule above forbids).
type Tx struct {
	*txState
	done bool
	// late is set by a use of the Tx after its function returned: the
	// ring it is part of is not served from again (see core.newTx).
	// Atomic: a goroutine that kept the Tx may set it.
	late atomic.Bool
	// bk is the first bucket handed out (bk.tx is set with the ring, see
	// core.newTx): a line that uses one bucket cuts no handle.
	bk Bucket
	// ow is the first output writer handed out (ow.tx is set with the
	// ring): a line that writes to one output cuts no writer.
	ow OutputWriter
}

// txRing is how many transactions of a store serve in turn (see Tx).
const txRing = 4096

// isDone reports whether the function of tx returned, and notes the use
// of a done Tx (see Tx.late).
func (tx *Tx) isDone() bool {
	if !tx.done {
		return false
	}
	if !tx.late.Load() {
		tx.late.Store(true)
	}
	return true
}

// txState is the state of the running transaction.
type txState struct {
	c        *core
	ns       string
	nss      *nsStore
	d        tidemark.Delivery
	readOnly bool
	// w holds the transaction's writes (nil in View).
	w *txWrites
	// The batches and the last committed one as they were when the
	// transaction started; reads look there without the store's lock.
	// Nothing but the running Apply changes them: only an Apply writes
	// into the staging batch, Apply and View are serialized, and a cut
	// needs their token. A batch that commits meanwhile holds the same
	// values as the backend.
	cur, pending, sealed, recent *batch
	// ow is the last output writer handed out; owTaken is set once the
	// Tx's own (Tx.ow) is.
	ow      *OutputWriter
	owTaken bool
	// bks are the last buckets handed out past Tx.bk; bkNext is where
	// the next one goes.
	bks    [4]*Bucket
	bkNext int
	// err is the first error of an iteration of the running transaction
	// (see fail); reset by each.
	err error

	// snap is set in a transaction of Store.Snapshot: it reads rd, has no
	// staged batches, and shares nothing with Apply and View (it runs
	// beside them): its buckets are its own, kbuf its key buffer.
	snap bool
	rd   reader
	kbuf []byte
	// tk and tv are the scratch space of the tables' keys and values.
	tk, tv []byte
	// ord keeps the staged batches sorted for iteration (see iter.go).
	ord *[3]stagedOrder
	// schemas are the buckets whose table schema this run has recorded
	// (see Table).
	schemas map[[2]string]bool
}

// reader returns what the transaction reads durable state from.
func (ts *txState) reader() reader {
	if ts.rd != nil {
		return ts.rd
	}
	return ts.c.eng
}

// Err returns the first error met by an iteration of the transaction (a
// read of the backend that failed, a key or value its table's codec cannot
// decode), or nil. Such an error ends its loop early and fails the
// transaction: Apply, View and Snapshot return it even when the function
// returns nil, and Apply stages nothing of the line.
//
// Called after the function returned, it returns [ErrTxDone].
func (tx *Tx) Err() error {
	if tx.isDone() {
		return ErrTxDone
	}
	return tx.err
}

// fail records err, the error of an iteration: it fails the transaction.
func (tx *Tx) fail(err error) {
	if tx.isDone() {
		// The state is the running transaction's now, if any: a loop of a
		// done Tx yields nothing, and its Err is ErrTxDone.
		return
	}
	if tx.err == nil {
		tx.err = err
	}
	if w := tx.w; w != nil && w.refused == nil {
		w.refused = err
	}
}

// readErr wraps an error of reading the backend.
func (c *core) readErr(err error) error {
	return fmt.Errorf("read %s store %s: %w", c.kind, c.dir, err)
}

// Delivery returns the delivery being applied; the zero Delivery in View.
func (tx *Tx) Delivery() tidemark.Delivery {
	if tx.isDone() {
		return tidemark.Delivery{}
	}
	return tx.d
}

// Bucket returns the bucket name of the transaction's namespace: a separate
// key space. The name "" is the root bucket that the Tx methods use.
func (tx *Tx) Bucket(name string) *Bucket {
	switch {
	case tx.isDone():
		// A Tx used late: its methods fail; do not touch the store.
		return &Bucket{tx: tx, bucketInfo: &bucketInfo{ns: tx.ns, name: name}}
	case tx.snap:
		// Beside Apply: nothing of the store's is touched.
		return &Bucket{tx: tx, bucketInfo: tx.binfo(name)}
	}
	if tx.bk.bucketInfo == nil {
		tx.bk.bucketInfo = tx.binfo(name)
		return &tx.bk
	}
	if tx.bk.name == name {
		return &tx.bk
	}
	// Cut from a slab, and remembered for this transaction.
	ts := tx.txState
	for _, b := range ts.bks {
		if b != nil && b.tx == tx && b.name == name {
			return b
		}
	}
	b := fromSlab(&tx.c.bks)
	b.tx, b.bucketInfo = tx, tx.binfo(name)
	ts.bks[ts.bkNext%len(ts.bks)] = b
	ts.bkNext++
	return b
}

// binfo returns the name and key prefix of the bucket name of the
// transaction's namespace, without a handle: what a Table works with. The
// transaction is not done.
func (tx *Tx) binfo(name string) *bucketInfo {
	switch {
	case name == "":
		return tx.nss.root
	case tx.snap:
		return newBucketInfo(tx.ns, name)
	}
	if bi := tx.nss.last[0]; bi != nil && bi.name == name {
		return bi
	}
	return tx.c.bucket(tx.nss, name)
}

// root returns a handle of the root bucket, to use and drop.
func (tx *Tx) root() Bucket { return Bucket{tx: tx, bucketInfo: tx.nss.root} }

// Get returns the value of key in the root bucket and whether it exists. See
// [Bucket.Get].
func (tx *Tx) Get(key []byte) ([]byte, bool, error) {
	b := tx.root()
	return b.Get(key)
}

// Put sets key to value in the root bucket. See [Bucket.Put].
func (tx *Tx) Put(key, value []byte) error {
	b := tx.root()
	return b.Put(key, value)
}

// Delete removes key from the root bucket. See [Bucket.Delete].
func (tx *Tx) Delete(key []byte) error {
	b := tx.root()
	return b.Delete(key)
}

// GetInt64 returns the int64 at key in the root bucket, 0 if absent. See
// [Bucket.GetInt64].
func (tx *Tx) GetInt64(key []byte) (int64, error) {
	b := tx.root()
	return b.GetInt64(key)
}

// PutInt64 sets key in the root bucket to v. See [Bucket.PutInt64].
func (tx *Tx) PutInt64(key []byte, v int64) error {
	b := tx.root()
	return b.PutInt64(key, v)
}

// AddInt64 adds delta to the int64 at key in the root bucket and returns
// the new value. See [Bucket.AddInt64].
func (tx *Tx) AddInt64(key []byte, delta int64) (int64, error) {
	if !tx.done && tx.w != nil {
		n, _, err := tx.addInt64(tx.nss.root, key, delta)
		return n, err
	}
	b := tx.root()
	return b.AddInt64(key, delta)
}

// ForEach calls fn for every key of the root bucket in key order. See
// [Bucket.ForEach].
func (tx *Tx) ForEach(fn func(key, value []byte) error) error {
	b := tx.root()
	return b.ForEach(fn)
}

// Output returns a writer that stages bytes for the end of the output file
// name in the store's directory (declaring it with [Store.Output] if
// needed). The bytes are appended when the transaction's batch commits,
// exactly once. Writing inside View fails with [ErrReadOnly].
func (tx *Tx) Output(name string) *OutputWriter {
	if tx.isDone() || tx.snap {
		return &OutputWriter{tx: tx, name: name}
	}
	// The last writer handed out is remembered in the transaction's
	// state; the first one is the Tx's own, the others are cut from a
	// slab: one kept past its function stays done.
	ts := tx.txState
	if w := ts.ow; w != nil && w.tx == tx && w.name == name {
		return w
	}
	if w := &tx.ow; w.name == name || !ts.owTaken {
		if w.name != name {
			w.name = name
		}
		ts.owTaken, ts.ow = true, w
		return w
	}
	w := fromSlab(&tx.c.ows)
	w.tx, w.name = tx, name
	ts.ow = w
	return w
}

func (tx *Tx) check(write bool) error {
	if tx.isDone() {
		return ErrTxDone
	}
	if write && tx.readOnly {
		return ErrReadOnly
	}
	return nil
}

// txWrites is what the running Apply changed. Its writes, and its output
// bytes, go straight into the staging batch, which nothing else touches
// while an Apply holds the token (a cut needs the token, see
// core.tryCut); what they replaced is logged (for an output, its length),
// so that a function that fails leaves the batch as it was. The store
// keeps one txWrites and reuses it for every Apply, so that a line
// allocates nothing.
type txWrites struct {
	// gen numbers the running Apply: an entry whose tx is gen has its old
	// value logged already, one whose got is gen has handed its value out
	// (Get), and must not be changed in place.
	gen  uint64
	open bool // an Apply's function is running
	undo []undoRec
	ubuf []byte // the old bytes of undo
	// omarks are the lengths of the staging batch's outputs before the
	// Apply's first write to each; oadded counts the bytes it appended;
	// olast is the index of the output it wrote last (a guess for the
	// next write).
	omarks []outMark
	oadded int
	olast  int
	// refused is the error of a write the backend cannot store: it
	// fails the Apply even if the function goes on.
	refused error
}

// undoRec is what an Apply's first change of an entry replaced: the entry
// at pos in the staging batch's writes was created by the change, or had
// the value ubuf[u0:u1] (nil if wasNil) and del. It holds no pointer, so
// that logging costs no write barrier and the log no scanning.
type undoRec struct {
	pos, u0, u1          int32
	del, wasNil, created bool
}

// outMark is the length n of the output at i in the staging batch's outs
// before the running Apply wrote to it; created if the Apply added it.
type outMark struct {
	i       int
	n       int
	created bool
}

func (w *txWrites) reset() {
	w.gen++
	if w.refused != nil {
		w.refused = nil // written only when set: no write barrier per line
	}
	w.undo = w.undo[:0]
	w.omarks = w.omarks[:0]
	w.oadded = 0
	// Do not keep the memory of an unusually large transaction.
	if cap(w.ubuf) > 1<<20 {
		w.ubuf = nil
	}
	w.ubuf = w.ubuf[:0]
	if cap(w.undo) > 1<<16 {
		w.undo = nil
	}
}

// log records what the first change of e in this Apply replaces.
func (w *txWrites) log(e *entry, created bool) {
	e.tx = w.gen
	// Set in place: a record built aside and copied in would wait for its
	// stores.
	n := len(w.undo)
	if n < cap(w.undo) {
		w.undo = w.undo[:n+1]
	} else {
		w.undo = append(w.undo, undoRec{})
	}
	r := &w.undo[n]
	r.pos, r.created = e.pos, created
	if created {
		return
	}
	r.del, r.wasNil = e.del, e.val == nil
	r.u0 = int32(len(w.ubuf))
	if len(e.val) == 8 {
		// An int64: without a call.
		w.ubuf = binary.NativeEndian.AppendUint64(w.ubuf, binary.NativeEndian.Uint64(e.val))
	} else {
		w.ubuf = append(w.ubuf, e.val...)
	}
	r.u1 = int32(len(w.ubuf))
}

// rollback undoes the changes of the running Apply to b, the staging
// batch, latest first. The caller holds the token.
func (w *txWrites) rollback(b *batch) {
	for i := len(w.undo) - 1; i >= 0; i-- {
		r := &w.undo[i]
		e := b.writes[r.pos]
		if r.created {
			// Created by this Apply, so after every entry before it:
			// the last of the writes.
			b.idx.remove(e)
			b.writes[r.pos] = nil
			b.writes = b.writes[:r.pos]
			continue
		}
		old := w.ubuf[r.u0:r.u1]
		switch {
		case r.wasNil:
			e.val = nil
		case e.val != nil && len(e.val) == len(old):
			// Changed in place, or to another value of the same length.
			copy(e.val, old)
		default:
			e.val = b.bytes(old)
		}
		e.del = r.del
	}
	w.undo = w.undo[:0]
	for i := len(w.omarks) - 1; i >= 0; i-- {
		m := w.omarks[i]
		if m.created {
			// Added by this Apply, so after every output before it.
			b.outs[m.i] = batchOut{}
			b.outs = b.outs[:m.i]
			continue
		}
		b.outs[m.i].buf = b.outs[m.i].buf[:m.n]
	}
	w.omarks = w.omarks[:0]
	w.oadded = 0
}

// Bucket is a key space of a namespace, inside one transaction.
type Bucket struct {
	tx *Tx
	*bucketInfo
}

// bucketInfo is a bucket's name and key prefix, made once per store.
type bucketInfo struct {
	ns, name string
	prefix   []byte
	ph       uint64 // hashPrefix(prefix)
	// schema is the schema of the table that wrote the bucket last in
	// this run (see Table); set by the holder of the token.
	schema *Schema
}

func newBucketInfo(ns, name string) *bucketInfo {
	p := dataPrefix(ns, name)
	return &bucketInfo{ns: ns, name: name, prefix: p, ph: hashPrefix(p)}
}

// Get returns the value of key and whether it exists. The value is valid
// only inside the transaction's function and must not be modified.
func (b *Bucket) Get(key []byte) ([]byte, bool, error) {
	if err := b.tx.check(false); err != nil {
		return nil, false, err
	}
	var q bkey
	q.set(b.bucketInfo, key)
	return b.tx.get(&q)
}

func (tx *Tx) get(q *bkey) ([]byte, bool, error) {
	if tx.snap {
		return tx.getDurable(q)
	}
	if e := tx.cur.get(q); e != nil {
		if w := tx.w; w != nil && e.got != w.gen {
			e.got = w.gen
		}
		return e.val[:len(e.val):len(e.val)], !e.del, nil
	}
	return tx.getOlder(q)
}

// peek is get for a caller that decodes the value at once and keeps none
// of its bytes (a Table): a later write of the key by the same Apply may
// change it in place.
func (tx *Tx) peek(q *bkey) ([]byte, bool, error) {
	if tx.snap {
		return tx.getDurable(q)
	}
	if e := tx.cur.get(q); e != nil {
		return e.val, !e.del, nil
	}
	return tx.getOlder(q)
}

// getDurable reads q from a snapshot.
func (tx *Tx) getDurable(q *bkey) ([]byte, bool, error) {
	tx.kbuf = q.appendTo(tx.kbuf[:0])
	v, ok, err := tx.rd.get(tx.kbuf)
	if err != nil {
		return nil, false, tx.c.readErr(err)
	}
	return v, ok, nil
}

// put changes q to v, or deletes it, in the staging batch, and returns
// q's entry there. e is that entry, nil if it has none (q is used only
// then, to make it). The caller holds the token, in Apply.
func (tx *Tx) put(q *bkey, e *entry, v []byte, del bool) *entry {
	b, w := tx.cur, tx.w
	if e == nil {
		e = b.add(q)
		w.log(e, true)
	} else if e.tx != w.gen {
		w.log(e, false)
	}
	switch {
	case del:
		e.val, e.del = nil, true
	case e.got != w.gen && e.val != nil && len(e.val) == len(v):
		// In place: the old bytes are logged, and no value handed out
		// by this Apply's Get is in use (one of an earlier Apply is
		// not valid any more).
		if len(v) == 8 {
			// An int64: one move rather than a call.
			*(*[8]byte)(e.val) = *(*[8]byte)(v)
		} else {
			copy(e.val, v)
		}
		e.del = false
	default:
		e.val, e.del = b.bytes(v), false
	}
	return e
}

// getOlder returns the value of q, which the current batch does not
// hold, as staged in the pending batch or the sealed one, or durable.
//
// The durable value is looked for in the value cache before the last
// committed batch once the batch is folded into the cache (see
// core.startFold): the cache holds that batch's values then, unless it
// dropped them for room, and no older ones. Asking the batch first cost a
// probe of its index a line (with thousands of keys a batch, cache misses)
// for a value the cache has. While the fold runs, the batch is asked
// first: the cache may hold older values of its keys.
func (tx *Tx) getOlder(q *bkey) ([]byte, bool, error) {
	if tx.pending != nil {
		if e := tx.pending.get(q); e != nil {
			return e.val[:len(e.val):len(e.val)], !e.del, nil
		}
	}
	if tx.sealed != nil {
		if e := tx.sealed.get(q); e != nil {
			return e.val[:len(e.val):len(e.val)], !e.del, nil
		}
	}
	c := tx.c
	r := tx.recent
	if r != nil && c.vc != nil && !r.folded.Load() {
		// The committer's fold of r into the cache has not ended: the
		// cache may still hold older values of r's keys.
		if e := r.get(q); e != nil {
			return e.val[:len(e.val):len(e.val)], !e.del, nil
		}
		r = nil
	}
	c.kbuf = q.appendTo(c.kbuf[:0])
	if c.vc != nil {
		v, ok, complete := c.vc.lookup(c.kbuf)
		if ok {
			return v.val, v.ok, nil
		}
		if complete {
			// The cache holds every key the backend holds, but for
			// those of r, which were looked for above if the fold of r
			// has not ended (and are in the cache if it has).
			return nil, false, nil
		}
	}
	if r != nil {
		if e := r.get(q); e != nil {
			return e.val[:len(e.val):len(e.val)], !e.del, nil
		}
	}
	// Not staged: the durable state holds the latest value. The batches
	// that commit meanwhile (the sealed one, the pending one) held no
	// change of the key, so cannot change it.
	if h := c.opts.hooks; h != nil && h.engineRead != nil {
		h.engineRead(c.kbuf)
	}
	v, ok, err := c.eng.get(c.kbuf)
	if err != nil {
		return nil, false, fmt.Errorf("read %s store %s: %w", c.kind, c.dir, err)
	}
	if c.vc != nil {
		c.vc.put(c.kbuf, v, ok)
	}
	return v, ok, nil
}

// Put sets key to value. Both are copied. A key or value longer than the
// backend takes fails with a [*TooLargeError], and so does the Apply.
func (b *Bucket) Put(key, value []byte) error {
	if err := b.tx.check(true); err != nil {
		return err
	}
	return b.tx.putIn(b.bucketInfo, key, value)
}

// putIn is Put of key in bucket bi, the transaction checked.
func (tx *Tx) putIn(bi *bucketInfo, key, value []byte) error {
	if len(value) > tx.c.maxVal {
		return tx.tooLarge(bi, key, value)
	}
	var q bkey
	q.set(bi, key)
	e := tx.cur.get(&q)
	// A key the batch holds passed the check when it was staged.
	if e == nil && len(bi.prefix)+len(key) > tx.c.maxKey {
		return tx.tooLarge(bi, key, value)
	}
	tx.put(&q, e, value, false)
	return nil
}

// Delete removes key. A key longer than the backend takes is not there:
// deleting it does nothing.
func (b *Bucket) Delete(key []byte) error {
	if err := b.tx.check(true); err != nil {
		return err
	}
	b.tx.deleteIn(b.bucketInfo, key)
	return nil
}

// deleteIn is Delete of key in bucket bi, the transaction checked.
func (tx *Tx) deleteIn(bi *bucketInfo, key []byte) {
	if len(bi.prefix)+len(key) > tx.c.maxKey {
		return
	}
	var q bkey
	q.set(bi, key)
	tx.put(&q, tx.cur.get(&q), nil, true)
}

// GetInt64 returns the int64 stored at key by PutInt64 or AddInt64, and 0
// when key is absent. A value of another length is [ErrNotInt64].
func (b *Bucket) GetInt64(key []byte) (int64, error) {
	v, ok, err := b.Get(key)
	if err != nil || !ok {
		return 0, err
	}
	n, ok := decodeInt64(v)
	if !ok {
		return 0, fmt.Errorf("key %q of bucket %q: %d bytes: %w", key, b.name, len(v), ErrNotInt64)
	}
	return n, nil
}

// PutInt64 sets key to v (8 bytes, big-endian).
func (b *Bucket) PutInt64(key []byte, v int64) error {
	var a [8]byte
	binary.BigEndian.PutUint64(a[:], uint64(v))
	return b.Put(key, a[:])
}

// AddInt64 adds delta to the int64 at key (0 when absent) and returns the
// new value: a counter or a balance.
func (b *Bucket) AddInt64(key []byte, delta int64) (int64, error) {
	if tx := b.tx; !tx.done && tx.w != nil {
		n, _, err := tx.addInt64(b.bucketInfo, key, delta)
		return n, err
	}
	n, err := b.GetInt64(key)
	if err != nil {
		return 0, err
	}
	n += delta
	return n, b.PutInt64(key, n)
}

// addInt64 is AddInt64 in Apply: the key is hashed and looked up once,
// and a key the staging batch holds is changed there in place. It returns
// the batch's entry of the key too, nil on error.
func (tx *Tx) addInt64(bi *bucketInfo, key []byte, delta int64) (int64, *entry, error) {
	var q bkey
	q.set(bi, key)
	e := tx.cur.get(&q)
	if e != nil {
		// Staged, so its length passed the check below.
		n, err := tx.addAt(bi, key, e, delta)
		if err != nil {
			return 0, nil, err
		}
		return n, e, nil
	}
	if len(bi.prefix)+len(key) > tx.c.maxKey {
		return 0, nil, tx.tooLarge(bi, key, nil)
	}
	v, ok, err := tx.getOlder(&q)
	if err != nil {
		return 0, nil, err
	}
	var n int64
	if ok {
		if n, ok = decodeInt64(v); !ok {
			return 0, nil, notInt64(bi, key, v)
		}
	}
	n += delta
	var a [8]byte
	binary.BigEndian.PutUint64(a[:], uint64(n))
	return n, tx.put(&q, nil, a[:], false), nil
}

// addAt adds delta to the value of e, the staging batch's entry of key in
// bucket bi, and returns the new value.
func (tx *Tx) addAt(bi *bucketInfo, key []byte, e *entry, delta int64) (int64, error) {
	var n int64
	if !e.del {
		var ok bool
		if n, ok = decodeInt64(e.val); !ok {
			return 0, notInt64(bi, key, e.val)
		}
	}
	n += delta
	var a [8]byte
	binary.BigEndian.PutUint64(a[:], uint64(n))
	tx.put(nil, e, a[:], false)
	return n, nil
}

// notInt64 is the error of an Add of key in bucket bi whose value v is
// not 8 bytes long.
func notInt64(bi *bucketInfo, key, v []byte) error {
	return fmt.Errorf("key %q of bucket %q: %d bytes: %w", key, bi.name, len(v), ErrNotInt64)
}

// tooLarge returns the error of a write of key and value to bucket bi
// that the backend cannot store, and records it to fail the Apply.
func (tx *Tx) tooLarge(bi *bucketInfo, key, value []byte) error {
	c := tx.c
	e := &TooLargeError{
		Backend: c.kind, Dir: c.dir, Namespace: bi.ns, Bucket: bi.name,
		What: "key", Len: len(bi.prefix) + len(key), PrefixLen: len(bi.prefix), Limit: c.maxKey,
		KeyLen: len(key), KeyStart: append([]byte(nil), key[:min(len(key), 32)]...),
		Feed: tx.d.Feed, Epoch: tx.d.Epoch, Position: tx.d.Position,
	}
	if e.Len <= c.maxKey {
		e.What, e.Len, e.Limit = "value", len(value), c.maxVal
	}
	if tx.w.refused == nil {
		tx.w.refused = e
	}
	return e
}

// OutputWriter stages bytes for an output file inside one transaction.
type OutputWriter struct {
	tx   *Tx
	name string
}

// Write stages p for the end of the output file. It never writes part of p.
func (w *OutputWriter) Write(p []byte) (int, error) { return stageOutput(w, p) }

// WriteString stages s for the end of the output file.
func (w *OutputWriter) WriteString(s string) (int, error) { return stageOutput(w, s) }

// stageOutput stages b for the end of w's output file.
func stageOutput[B []byte | string](w *OutputWriter, b B) (int, error) {
	if err := w.tx.check(true); err != nil {
		return 0, err
	}
	// The output is declared (or declared now): once it is, it stays
	// until the store closes, so the name of the last one is enough.
	if c := w.tx.c; c.lastOutput != w.name {
		if _, err := c.output(w.name); err != nil {
			return 0, err
		}
		c.lastOutput = w.name
	}
	tx := w.tx
	o := tx.c.outOf(tx.cur, w.name)
	o.buf = append(o.buf, b...)
	tx.w.oadded += len(b)
	return len(b), nil
}

// fromSlab cuts one zero value from *slab, making a new slab of 64 when it
// is used up: handles that outlive their transaction stay valid (and done)
// without an allocation each.
func fromSlab[T any](slab *[]T) *T {
	if len(*slab) == 0 {
		*slab = make([]T, 64)
	}
	v := &(*slab)[0]
	*slab = (*slab)[1:]
	return v
}
