package state

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"

	"github.com/tidemark-go/tidemark/dedupe"
)

// Tx is the transaction given to the function of [Store.Apply] or
// [Store.View]. Its reads see the durable state, the changes staged by
// earlier Apply calls, and the transaction's own writes. Its writes are
// staged when the function returns nil, and discarded when it returns an
// error. A Tx is valid only inside the function and must not be shared
// with other goroutines. The Tx methods act on the namespace's root bucket.
//
// A Tx is a small handle, never reused, so that one kept past its function
// stays done; what it works with (*txState) is the store's, reused by every
// Apply and View (they are serialized).
type Tx struct {
	*txState
	done bool
	// The first bucket handed out, kept here so that a line that uses one
	// allocates nothing. The methods of Tx use the root bucket without a
	// handle.
	bk Bucket
}

// txState is the state of the running transaction.
type txState struct {
	c        *core
	ns       string
	nss      *nsStore
	d        dedupe.Delivery
	readOnly bool
	// w holds the transaction's writes (nil in View).
	w *txWrites
	// The batches and the last committed one as they were when the
	// transaction started; reads look there without the store's lock.
	// Nothing changes them while a transaction runs: only Apply, after its
	// function returned, stages into a batch, and Apply and View are
	// serialized. A batch that commits meanwhile holds the same values as
	// the backend.
	cur, sealed, recent *batch
	// ow is the last output writer handed out.
	ow *OutputWriter
	// bks are the last buckets handed out past Tx.bk.
	bks [4]*Bucket
}

// Delivery returns the delivery being applied; the zero Delivery in View.
func (tx *Tx) Delivery() dedupe.Delivery {
	if tx.done {
		return dedupe.Delivery{}
	}
	return tx.d
}

// Bucket returns the bucket name of the transaction's namespace: a separate
// key space. The name "" is the root bucket that the Tx methods use.
func (tx *Tx) Bucket(name string) *Bucket {
	if tx.bk.bucketInfo != nil && tx.bk.name == name {
		return &tx.bk
	}
	var bi *bucketInfo
	switch {
	case tx.done:
		// A Tx used late: its methods fail; do not touch the store.
		bi = &bucketInfo{ns: tx.ns, name: name}
	case name == "":
		bi = tx.nss.root
	default:
		if bi = tx.nss.last[0]; bi == nil || bi.name != name {
			bi = tx.c.bucket(tx.nss, name)
		}
	}
	if tx.bk.bucketInfo == nil {
		tx.bk.bucketInfo = bi // tx.bk.tx is tx already (see newTx)
		return &tx.bk
	}
	if tx.done {
		return &Bucket{tx: tx, bucketInfo: bi}
	}
	// More buckets: cut from a slab, and remembered for this transaction.
	ts := tx.txState
	for _, b := range ts.bks {
		if b != nil && b.tx == tx && b.name == name {
			return b
		}
	}
	c := tx.c
	if len(c.bks) == 0 {
		c.bks = make([]Bucket, 64)
	}
	b := &c.bks[0]
	c.bks = c.bks[1:]
	b.tx, b.bucketInfo = tx, bi
	copy(ts.bks[1:], ts.bks[:])
	ts.bks[0] = b
	return b
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
		return tx.addInt64(tx.nss.root, key, delta)
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
	if tx.done {
		return &OutputWriter{tx: tx, name: name}
	}
	// The writers of the running transaction are remembered in its
	// state, and cut from a slab: one kept past its function stays done.
	ts := tx.txState
	if w := ts.ow; w != nil && w.tx == tx && w.name == name {
		return w
	}
	c := tx.c
	if len(c.ows) == 0 {
		c.ows = make([]OutputWriter, 64)
	}
	w := &c.ows[0]
	c.ows = c.ows[1:]
	w.tx, w.name = tx, name
	ts.ow = w
	return w
}

func (tx *Tx) check(write bool) error {
	if tx.done {
		return ErrTxDone
	}
	if write && tx.readOnly {
		return ErrReadOnly
	}
	return nil
}

// txWrites is the write set of the running Apply: its keys and values in
// one arena, its output bytes in another. The store keeps one and reuses it
// for every Apply, so that a line allocates nothing for its writes.
type txWrites struct {
	// hint is the entry of the current batch that the last read found,
	// in the batch numbered hintSeq: the write that follows the read of
	// the same key (AddInt64) updates it without looking it up again.
	hint    *entry
	hintSeq uint64

	ws   []txWrite
	buf  []byte         // keys and values of ws
	idx  map[string]int // full key → index in ws, once ws is large
	kbuf []byte         // a full key being looked up in idx
	outs []txOut
	obuf []byte // output bytes of outs
}

// txWrite is one staged change: buf[v0:v1] is the value, and the key is
// e.key when e is not nil, else buf[k0:k1].
type txWrite struct {
	// e, if not nil, is the key's entry in the batch numbered seq.
	e              *entry
	seq            uint64
	h              uint64 // hashKey of the key
	k0, k1, v0, v1 int
	del            bool
}

// txOut is bytes staged for an output: obuf[o0:o1].
type txOut struct {
	name   string
	o0, o1 int
}

// indexAt is the size of a write set from which keys are found through a
// map rather than by a scan.
const indexAt = 16

func (w *txWrites) reset() {
	w.dropHint()
	w.ws = w.ws[:0]
	w.outs = w.outs[:0]
	// Do not keep the memory of an unusually large transaction.
	if cap(w.buf) > 1<<20 {
		w.buf = nil
	}
	w.buf = w.buf[:0]
	if cap(w.obuf) > 1<<20 {
		w.obuf = nil
	}
	w.obuf = w.obuf[:0]
	if len(w.idx) > 0 {
		if len(w.idx) > 4096 {
			w.idx = nil
		} else {
			clear(w.idx)
		}
	}
}

// dropHint forgets the hint. The pointer is written only if set: a write
// costs the write barrier while the garbage collector runs.
func (w *txWrites) dropHint() {
	if w.hint != nil {
		w.hint = nil
	}
}

func (w *txWrites) key(i int) []byte {
	x := &w.ws[i]
	if x.e != nil {
		return x.e.key
	}
	return w.buf[x.k0:x.k1]
}

// find returns the index of the write of q, or -1.
func (w *txWrites) find(q *bkey) int {
	if len(w.ws) >= indexAt {
		w.kbuf = q.appendTo(w.kbuf[:0])
		if i, ok := w.idx[string(w.kbuf)]; ok {
			return i
		}
		return -1
	}
	for i := len(w.ws) - 1; i >= 0; i-- {
		if w.ws[i].h == q.h && q.is(w.key(i)) {
			return i
		}
	}
	return -1
}

// get returns the value of the write of q, if any. The value is not
// changed later: a new write of the key appends its value.
func (w *txWrites) get(q *bkey) (val []byte, exists, ok bool) {
	i := w.find(q)
	if i < 0 {
		return nil, false, false
	}
	x := &w.ws[i]
	return w.buf[x.v0:x.v1:x.v1], !x.del, true
}

func (w *txWrites) set(q *bkey, v []byte, del bool) { w.setAt(w.find(q), q, v, del) }

// setAt sets the write of q, at index i of ws or a new one if i < 0.
func (w *txWrites) setAt(i int, q *bkey, v []byte, del bool) {
	if i >= 0 {
		w.dropHint()
		x := &w.ws[i]
		x.v0 = len(w.buf)
		w.buf = append(w.buf, v...)
		x.v1, x.del = len(w.buf), del
		return
	}
	var e *entry
	if w.hint != nil && w.hint.h == q.h && q.is(w.hint.key) {
		e = w.hint
	}
	x := w.add(q, e, w.hintSeq)
	x.v0 = len(w.buf)
	w.buf = append(w.buf, v...)
	x.v1, x.del = len(w.buf), del
}

// add adds a write of q, which has no write yet, and returns it; the
// caller appends its value. e, if not nil, is q's entry in the batch
// numbered seq: its key serves, q's is not copied.
func (w *txWrites) add(q *bkey, e *entry, seq uint64) *txWrite {
	w.dropHint()
	// The fields are set in place: a txWrite built aside and copied in
	// costs a stalled store per line.
	n := len(w.ws)
	if n < cap(w.ws) {
		w.ws = w.ws[:n+1]
	} else {
		w.ws = append(w.ws, txWrite{})
	}
	x := &w.ws[n]
	x.e, x.seq, x.h, x.k0, x.k1, x.del = e, seq, q.h, 0, 0, false
	if e == nil {
		x.k0 = len(w.buf)
		w.buf = q.appendTo(w.buf)
		x.k1 = len(w.buf)
	}
	switch n := len(w.ws); {
	case n == indexAt:
		if w.idx == nil {
			w.idx = make(map[string]int, 2*indexAt)
		}
		for j := range w.ws {
			w.idx[string(w.key(j))] = j
		}
	case n > indexAt:
		w.idx[string(w.key(n-1))] = n - 1
	}
	return x
}

// output records the bytes obuf[o0:] appended for the output name.
func (w *txWrites) output(name string, o0 int) {
	if n := len(w.outs); n > 0 && w.outs[n-1].name == name && w.outs[n-1].o1 == o0 {
		w.outs[n-1].o1 = len(w.obuf)
		return
	}
	w.outs = append(w.outs, txOut{name: name, o0: o0, o1: len(w.obuf)})
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
	if w := tx.w; w != nil {
		if v, exists, ok := w.get(q); ok {
			w.dropHint()
			return v, exists, nil
		}
	}
	return tx.getStaged(q)
}

// getStaged returns the value of q as staged in the batches, or durable.
func (tx *Tx) getStaged(q *bkey) ([]byte, bool, error) {
	w := tx.w
	if w != nil {
		w.dropHint()
	}
	e := tx.cur.get(q)
	if e == nil {
		return tx.getOlder(q)
	}
	if w != nil {
		w.hint, w.hintSeq = e, tx.cur.seq
	}
	return e.val[:len(e.val):len(e.val)], !e.del, nil
}

// getOlder returns the value of q, which the current batch does not
// hold, as staged in the sealed batch, or durable.
func (tx *Tx) getOlder(q *bkey) ([]byte, bool, error) {
	var e *entry
	if tx.sealed != nil {
		e = tx.sealed.get(q)
	}
	if e == nil && tx.recent != nil {
		e = tx.recent.get(q)
	}
	if e != nil {
		return e.val[:len(e.val):len(e.val)], !e.del, nil
	}
	c := tx.c
	// Not staged: the durable state holds the latest value. A batch that
	// commits meanwhile held no change of the key, so cannot change it.
	c.kbuf = q.appendTo(c.kbuf[:0])
	v, ok, err := c.eng.get(c.kbuf)
	if err != nil {
		return nil, false, fmt.Errorf("read %s store %s: %w", c.kind, c.dir, err)
	}
	return v, ok, nil
}

// Put sets key to value. Both are copied.
func (b *Bucket) Put(key, value []byte) error {
	if err := b.tx.check(true); err != nil {
		return err
	}
	var q bkey
	q.set(b.bucketInfo, key)
	b.tx.w.set(&q, value, false)
	return nil
}

// Delete removes key.
func (b *Bucket) Delete(key []byte) error {
	if err := b.tx.check(true); err != nil {
		return err
	}
	var q bkey
	q.set(b.bucketInfo, key)
	b.tx.w.set(&q, nil, true)
	return nil
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
		return tx.addInt64(b.bucketInfo, key, delta)
	}
	n, err := b.GetInt64(key)
	if err != nil {
		return 0, err
	}
	n += delta
	return n, b.PutInt64(key, n)
}

// addInt64 is AddInt64 in Apply: the key is hashed and looked up once,
// and a key the current batch holds is neither joined to its prefix nor
// copied.
func (tx *Tx) addInt64(bi *bucketInfo, key []byte, delta int64) (int64, error) {
	w := tx.w
	var q bkey
	q.set(bi, key)
	var v []byte
	var ok bool
	var e *entry
	i := w.find(&q)
	if i >= 0 {
		x := &w.ws[i]
		v, ok = w.buf[x.v0:x.v1], !x.del
	} else if e = tx.cur.get(&q); e != nil {
		v, ok = e.val, !e.del
	} else {
		var err error
		if v, ok, err = tx.getOlder(&q); err != nil {
			return 0, err
		}
	}
	var n int64
	if ok {
		if n, ok = decodeInt64(v); !ok {
			return 0, fmt.Errorf("key %q of bucket %q: %d bytes: %w", key, bi.name, len(v), ErrNotInt64)
		}
	}
	n += delta
	var x *txWrite
	if i >= 0 {
		x = &w.ws[i]
	} else {
		x = w.add(&q, e, tx.cur.seq)
	}
	// A new value, appended: a value returned by Get stays as it was.
	w.dropHint()
	x.v0 = len(w.buf)
	w.buf = binary.BigEndian.AppendUint64(w.buf, uint64(n))
	x.v1, x.del = len(w.buf), false
	return n, nil
}

// ForEach calls fn for every key of the bucket in key order, as the
// transaction sees it (durable, staged and its own writes). It reads the
// bucket's durable keys into memory first. key and value are valid only
// during the call. fn must not write to the transaction.
func (b *Bucket) ForEach(fn func(key, value []byte) error) error {
	if err := b.tx.check(false); err != nil {
		return err
	}
	c := b.tx.c
	// Take the staged batches before reading the durable state: a batch
	// that commits during the scan is then overlaid anyway, with the same
	// values. Nothing newer can reach the backend meanwhile: the caller
	// holds the token that serializes Apply, so no change is staged.
	c.mu.Lock()
	staged := [][]*entry{c.cur.writes}
	if c.sealed != nil {
		staged = [][]*entry{c.sealed.writes, c.cur.writes}
	}
	c.mu.Unlock()
	all := make(map[string][]byte)
	err := c.eng.scan(b.prefix, func(k, v []byte) error {
		all[string(k)] = append([]byte{}, v...)
		return nil
	})
	if err != nil {
		return fmt.Errorf("scan bucket %q of %s store %s: %w", b.name, c.kind, c.dir, err)
	}
	p := string(b.prefix)
	set := func(k string, val []byte, del bool) {
		if len(k) < len(p) || k[:len(p)] != p {
			return
		}
		if del {
			delete(all, k)
		} else {
			all[k] = val
		}
	}
	for _, ws := range staged {
		for _, e := range ws {
			set(string(e.key), e.val, e.del)
		}
	}
	if w := b.tx.w; w != nil {
		for i, x := range w.ws {
			set(string(w.key(i)), w.buf[x.v0:x.v1:x.v1], x.del)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(all)) {
		if err := fn([]byte(k[len(p):]), all[k]); err != nil {
			return err
		}
	}
	return nil
}

// OutputWriter stages bytes for an output file inside one transaction.
type OutputWriter struct {
	tx   *Tx
	name string
}

// Write stages p for the end of the output file. It never writes part of p.
func (w *OutputWriter) Write(p []byte) (int, error) {
	if err := w.tx.check(true); err != nil {
		return 0, err
	}
	if _, err := w.tx.c.output(w.name); err != nil {
		return 0, err
	}
	tw := w.tx.w
	o0 := len(tw.obuf)
	tw.obuf = append(tw.obuf, p...)
	tw.output(w.name, o0)
	return len(p), nil
}

// WriteString stages s for the end of the output file.
func (w *OutputWriter) WriteString(s string) (int, error) {
	if err := w.tx.check(true); err != nil {
		return 0, err
	}
	if _, err := w.tx.c.output(w.name); err != nil {
		return 0, err
	}
	tw := w.tx.w
	o0 := len(tw.obuf)
	tw.obuf = append(tw.obuf, s...)
	tw.output(w.name, o0)
	return len(s), nil
}
