package state

import (
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
type Tx struct {
	c        *core
	ns       string
	d        dedupe.Delivery
	readOnly bool
	done     bool
	writes   map[string]entry
	outputs  map[string][]byte
}

// Delivery returns the delivery being applied; the zero Delivery in View.
func (tx *Tx) Delivery() dedupe.Delivery { return tx.d }

// Bucket returns the bucket name of the transaction's namespace: a separate
// key space. The name "" is the root bucket that the Tx methods use.
func (tx *Tx) Bucket(name string) *Bucket {
	return &Bucket{tx: tx, name: name, prefix: dataPrefix(tx.ns, name)}
}

func (tx *Tx) root() *Bucket { return tx.Bucket("") }

// Get returns the value of key in the root bucket and whether it exists. See
// [Bucket.Get].
func (tx *Tx) Get(key []byte) ([]byte, bool, error) { return tx.root().Get(key) }

// Put sets key to value in the root bucket. See [Bucket.Put].
func (tx *Tx) Put(key, value []byte) error { return tx.root().Put(key, value) }

// Delete removes key from the root bucket. See [Bucket.Delete].
func (tx *Tx) Delete(key []byte) error { return tx.root().Delete(key) }

// GetInt64 returns the int64 at key in the root bucket, 0 if absent. See
// [Bucket.GetInt64].
func (tx *Tx) GetInt64(key []byte) (int64, error) { return tx.root().GetInt64(key) }

// PutInt64 sets key in the root bucket to v. See [Bucket.PutInt64].
func (tx *Tx) PutInt64(key []byte, v int64) error { return tx.root().PutInt64(key, v) }

// AddInt64 adds delta to the int64 at key in the root bucket and returns
// the new value. See [Bucket.AddInt64].
func (tx *Tx) AddInt64(key []byte, delta int64) (int64, error) {
	return tx.root().AddInt64(key, delta)
}

// ForEach calls fn for every key of the root bucket in key order. See
// [Bucket.ForEach].
func (tx *Tx) ForEach(fn func(key, value []byte) error) error { return tx.root().ForEach(fn) }

// Output returns a writer that stages bytes for the end of the output file
// name in the store's directory (declaring it with [Store.Output] if
// needed). The bytes are appended when the transaction's batch commits,
// exactly once. Writing inside View fails with [ErrReadOnly].
func (tx *Tx) Output(name string) *OutputWriter { return &OutputWriter{tx: tx, name: name} }

func (tx *Tx) check(write bool) error {
	if tx.done {
		return ErrTxDone
	}
	if write && tx.readOnly {
		return ErrReadOnly
	}
	return nil
}

func (tx *Tx) stage(k string, e entry) {
	if tx.writes == nil {
		tx.writes = make(map[string]entry, 4)
	}
	tx.writes[k] = e
}

// Bucket is a key space of a namespace, inside one transaction.
type Bucket struct {
	tx     *Tx
	name   string
	prefix []byte
}

func (b *Bucket) key(k []byte) string { return string(b.prefix) + string(k) }

// Get returns the value of key and whether it exists. The value is valid
// only inside the transaction's function and must not be modified.
func (b *Bucket) Get(key []byte) ([]byte, bool, error) {
	if err := b.tx.check(false); err != nil {
		return nil, false, err
	}
	return b.tx.get(b.key(key))
}

func (tx *Tx) get(k string) ([]byte, bool, error) {
	if e, ok := tx.writes[k]; ok {
		return e.val, !e.del, nil
	}
	c := tx.c
	c.mu.Lock()
	e, ok := c.cur.writes[k]
	if !ok && c.sealed != nil {
		e, ok = c.sealed.writes[k]
	}
	c.mu.Unlock()
	if ok {
		return e.val, !e.del, nil
	}
	// Not staged: the durable state holds the latest value. A batch that
	// commits meanwhile held no change of k, so cannot change it.
	v, ok, err := c.eng.get([]byte(k))
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
	b.tx.stage(b.key(key), entry{val: append([]byte{}, value...)})
	return nil
}

// Delete removes key.
func (b *Bucket) Delete(key []byte) error {
	if err := b.tx.check(true); err != nil {
		return err
	}
	b.tx.stage(b.key(key), entry{del: true})
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
func (b *Bucket) PutInt64(key []byte, v int64) error { return b.Put(key, encodeInt64(v)) }

// AddInt64 adds delta to the int64 at key (0 when absent) and returns the
// new value: a counter or a balance.
func (b *Bucket) AddInt64(key []byte, delta int64) (int64, error) {
	n, err := b.GetInt64(key)
	if err != nil {
		return 0, err
	}
	n += delta
	return n, b.PutInt64(key, n)
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
	staged := []map[string]entry{c.cur.writes}
	if c.sealed != nil {
		staged = []map[string]entry{c.sealed.writes, c.cur.writes}
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
	overlay := func(ws map[string]entry) {
		for k, e := range ws {
			if len(k) < len(p) || k[:len(p)] != p {
				continue
			}
			if e.del {
				delete(all, k)
			} else {
				all[k] = e.val
			}
		}
	}
	for _, ws := range staged {
		overlay(ws)
	}
	overlay(b.tx.writes)
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
	if w.tx.outputs == nil {
		w.tx.outputs = make(map[string][]byte)
	}
	w.tx.outputs[w.name] = append(w.tx.outputs[w.name], p...)
	return len(p), nil
}

// WriteString stages s for the end of the output file.
func (w *OutputWriter) WriteString(s string) (int, error) { return w.Write([]byte(s)) }
