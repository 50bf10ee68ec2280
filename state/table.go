package state

import (
	"bytes"
	"fmt"
	"iter"
	"strings"
	"unsafe"
)

// Table is a typed bucket: keys of type K and values of type V, encoded by
// codecs. It holds no data of its own, only the bucket's name and its
// codecs: make one per bucket, once (a package-level variable is fine),
// and use it with the [Tx] of any Apply, View or Snapshot, of any store:
//
//	var balances = state.NewTable("balances", state.String{}, state.Int64{})
//
//	// in Apply:
//	bal, err := balances.Add(tx, account, amount)
//	// in View or Snapshot:
//	for account, bal := range balances.All(tx) { ... }
//
// The bytes it stores are the codecs' (see [Int64], [String], ...): a
// Table reads what the [Bucket] methods wrote with the same encoding, and
// the other way round. A table's Get, Put, Delete and Add allocate
// nothing for keys and values of a fixed size (Int64, Uint64), nor for
// String keys; a value decoded to a string, a []byte or a JSON type is a
// copy.
//
// The first write through a table in a run records its schema in the
// store (the names of its codecs, see [Bucket.Schema]), so that a tool
// (tidemark store show) decodes its keys and values.
type Table[K, V any] struct {
	bucket string
	keys   KeyCodec[K]
	vals   Codec[V]
	add    adder[V] // nil unless vals can add in place
	// raw returns the bytes of a key of the String codec (its encoding)
	// without a copy; nil for another codec.
	raw    func(K) []byte
	schema *Schema
}

// NewTable returns the table of the bucket named bucket ("" is the
// namespace's root bucket) with the given codecs.
func NewTable[K, V any](bucket string, keys KeyCodec[K], values Codec[V]) *Table[K, V] {
	t := &Table[K, V]{bucket: bucket, keys: keys, vals: values,
		schema: &Schema{Key: codecName(keys), Value: codecName(values)}}
	t.add, _ = any(values).(adder[V])
	if _, ok := any(keys).(String); ok {
		// K is string: the codec's only key type.
		t.raw, _ = any(stringBytes).(func(K) []byte)
	}
	return t
}

// Name returns the table's bucket name.
func (t *Table[K, V]) Name() string { return t.bucket }

// Schema returns the names of the table's codecs, as the store records
// them.
func (t *Table[K, V]) Schema() Schema { return *t.schema }

// Get returns the value of k and whether it exists, as the transaction
// sees it.
func (t *Table[K, V]) Get(tx *Tx, k K) (v V, ok bool, err error) {
	if err := tx.check(false); err != nil {
		return v, false, err
	}
	bi := tx.binfo(t.bucket)
	key, err := t.key(tx, k)
	if err != nil {
		return v, false, err
	}
	var q bkey
	q.set(bi, key)
	raw, ok, err := tx.peek(&q)
	if err != nil || !ok {
		return v, false, err
	}
	if v, err = t.vals.Decode(raw); err != nil {
		return v, false, t.decodeErr("value", key, err)
	}
	return v, true, nil
}

// Put sets k to v. As [Bucket.Put], a key or value longer than the
// backend takes fails with a [*TooLargeError], and so does the Apply.
func (t *Table[K, V]) Put(tx *Tx, k K, v V) error {
	if err := tx.check(true); err != nil {
		return err
	}
	bi := tx.binfo(t.bucket)
	if bi.schema != t.schema {
		tx.recordSchema(bi, t.schema)
	}
	key, err := t.key(tx, k)
	if err != nil {
		return err
	}
	val, err := t.vals.Append(tx.tv[:0], v)
	if err != nil {
		return fmt.Errorf("table %q: encode the value of key %x (%s): %w", t.bucket, key, t.schema.Value, err)
	}
	tx.tv = val
	return tx.putIn(bi, key, val)
}

// Delete removes k. Deleting a key that does not exist does nothing.
func (t *Table[K, V]) Delete(tx *Tx, k K) error {
	if err := tx.check(true); err != nil {
		return err
	}
	bi := tx.binfo(t.bucket)
	key, err := t.key(tx, k)
	if err != nil {
		return err
	}
	tx.deleteIn(bi, key)
	return nil
}

// Update sets k to what fn returns, given its value now (the zero V and
// false when it does not exist), and returns the new value. An error of
// fn is returned as is, and k is left as it was.
func (t *Table[K, V]) Update(tx *Tx, k K, fn func(v V, ok bool) (V, error)) (V, error) {
	v, ok, err := t.Get(tx, k)
	if err != nil {
		return v, err
	}
	if err := tx.check(true); err != nil {
		return v, err
	}
	if v, err = fn(v, ok); err != nil {
		return v, err
	}
	return v, t.Put(tx, k, v)
}

// Add adds delta to the value of k (0 when it does not exist) and returns
// the new value: a counter or a balance, changed in place in the staging
// batch. It is for tables of [Int64] or [Uint64] values (it wraps around
// as Go's integers do); on another table, and for a stored value that is
// not 8 bytes long, it fails with an error wrapping [ErrNotInt64]. For a
// key that every line adds to, a [Counter] costs less.
func (t *Table[K, V]) Add(tx *Tx, k K, delta V) (V, error) {
	var zero V
	if t.add == nil {
		return zero, t.notAdder()
	}
	if err := tx.check(true); err != nil {
		return zero, err
	}
	key, err := t.key(tx, k)
	if err != nil {
		return zero, err
	}
	return t.addIn(tx, key, delta)
}

// AddEncoded is [Table.Add] of the key whose encoding is key: the bytes
// the table's key codec appends for it (for a [String] key, the string's
// bytes). It is for a caller that holds a key's bytes and not the key,
// such as a parser's slice of an input line: no key is made, and no
// string allocated. key is read, never kept, and may change once
// AddEncoded returns. Bytes that the key codec does not decode (an
// [Int64] key of 5 bytes) are refused with an error, and nothing is
// written.
func (t *Table[K, V]) AddEncoded(tx *Tx, key []byte, delta V) (V, error) {
	var zero V
	if t.add == nil {
		return zero, t.notAdder()
	}
	if err := tx.check(true); err != nil {
		return zero, err
	}
	if t.raw == nil {
		// A String key decodes from any bytes; another codec checks.
		if _, err := t.keys.DecodeKey(key); err != nil {
			return zero, fmt.Errorf("table %q: AddEncoded: key %x is not an encoding of the key codec (%s): %w", t.bucket, key, t.schema.Key, err)
		}
	}
	return t.addIn(tx, key, delta)
}

// addIn is Add of the encoded key, the transaction checked.
func (t *Table[K, V]) addIn(tx *Tx, key []byte, delta V) (V, error) {
	bi := tx.binfo(t.bucket)
	if bi.schema != t.schema {
		tx.recordSchema(bi, t.schema)
	}
	return t.add.add(tx, bi, key, delta)
}

func (t *Table[K, V]) notAdder() error {
	return fmt.Errorf("table %q: Add needs a value codec of Int64 or Uint64, not %s: %w", t.bucket, t.schema.Value, ErrNotInt64)
}

// key encodes k into the transaction's scratch space; a String key is its
// own bytes (see NewTable), read and never kept: the batch and the cache
// copy the keys they keep.
func (t *Table[K, V]) key(tx *Tx, k K) ([]byte, error) {
	if t.raw != nil {
		return t.raw(k), nil
	}
	key, err := t.keys.AppendKey(tx.tk[:0], k)
	if err != nil {
		return nil, fmt.Errorf("table %q: encode a key (%s): %w", t.bucket, t.schema.Key, err)
	}
	tx.tk = key
	return key, nil
}

// encode encodes k into a slice of its own (for the bounds of a loop).
func (t *Table[K, V]) encode(k K) ([]byte, error) {
	key, err := t.keys.AppendKey(nil, k)
	if err != nil {
		return nil, fmt.Errorf("table %q: encode a key (%s): %w", t.bucket, t.schema.Key, err)
	}
	if key == nil {
		key = []byte{}
	}
	return key, nil
}

func (t *Table[K, V]) decodeErr(what string, key []byte, err error) error {
	codec := t.schema.Value
	if what == "key" {
		codec = t.schema.Key
	}
	return fmt.Errorf("table %q: key %x: decode the %s (%s): %w", t.bucket, key, what, codec, err)
}

// The iteration of a table, as the bucket's (see [Bucket.All]), with the
// keys and values decoded. A key or value that does not decode ends the
// loop, and is the transaction's error (see [Tx.Err]).

// All returns every key of the table and its value, in key order.
func (t *Table[K, V]) All(tx *Tx) iter.Seq2[K, V] { return t.decode(tx, tx.Bucket(t.bucket).All()) }

// Range returns the keys k with from <= k < to, in key order.
func (t *Table[K, V]) Range(tx *Tx, from, to K) iter.Seq2[K, V] {
	return t.bounded(tx, from, to, false)
}

// From returns the keys k >= from, in key order.
func (t *Table[K, V]) From(tx *Tx, from K) iter.Seq2[K, V] {
	f, err := t.encode(from)
	if err != nil {
		return t.failed(tx, err)
	}
	return t.decode(tx, tx.Bucket(t.bucket).From(f))
}

// Prefix returns the keys whose encoding starts with the encoding of p
// (for String and Bytes keys, the keys that start with p), in key order.
func (t *Table[K, V]) Prefix(tx *Tx, p K) iter.Seq2[K, V] {
	pb, err := t.encode(p)
	if err != nil {
		return t.failed(tx, err)
	}
	return t.decode(tx, tx.Bucket(t.bucket).Prefix(pb))
}

// Reverse returns every key of the table and its value, in reverse key
// order.
func (t *Table[K, V]) Reverse(tx *Tx) iter.Seq2[K, V] {
	return t.decode(tx, tx.Bucket(t.bucket).Reverse())
}

// ReverseRange returns the keys k with from <= k < to, in reverse key
// order.
func (t *Table[K, V]) ReverseRange(tx *Tx, from, to K) iter.Seq2[K, V] {
	return t.bounded(tx, from, to, true)
}

// ReverseFrom returns the keys k <= from, in reverse key order.
func (t *Table[K, V]) ReverseFrom(tx *Tx, from K) iter.Seq2[K, V] {
	f, err := t.encode(from)
	if err != nil {
		return t.failed(tx, err)
	}
	return t.decode(tx, tx.Bucket(t.bucket).ReverseFrom(f))
}

// ReversePrefix is Prefix in reverse key order.
func (t *Table[K, V]) ReversePrefix(tx *Tx, p K) iter.Seq2[K, V] {
	pb, err := t.encode(p)
	if err != nil {
		return t.failed(tx, err)
	}
	return t.decode(tx, tx.Bucket(t.bucket).ReversePrefix(pb))
}

func (t *Table[K, V]) bounded(tx *Tx, from, to K, rev bool) iter.Seq2[K, V] {
	f, err := t.encode(from)
	if err != nil {
		return t.failed(tx, err)
	}
	e, err := t.encode(to)
	if err != nil {
		return t.failed(tx, err)
	}
	b := tx.Bucket(t.bucket)
	if rev {
		return t.decode(tx, b.ReverseRange(f, e))
	}
	return t.decode(tx, b.Range(f, e))
}

// decode returns seq with its keys and values decoded.
func (t *Table[K, V]) decode(tx *Tx, seq iter.Seq2[[]byte, []byte]) iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		for kb, vb := range seq {
			k, err := t.keys.DecodeKey(kb)
			if err != nil {
				tx.fail(t.decodeErr("key", kb, err))
				return
			}
			v, err := t.vals.Decode(vb)
			if err != nil {
				tx.fail(t.decodeErr("value", kb, err))
				return
			}
			if !yield(k, v) {
				return
			}
		}
	}
}

// failed returns an empty sequence that records err in tx when ranged.
func (t *Table[K, V]) failed(tx *Tx, err error) iter.Seq2[K, V] {
	return func(func(K, V) bool) { tx.fail(err) }
}

// Schema is what a store records of a table: the names of the codecs of
// its keys and values. The built-in codecs are named "int64", "uint64",
// "string", "bytes" and "json"; another codec by its Go type (such as
// "main.orderCodec").
type Schema struct {
	Key, Value string
}

// schemaKey keys the schema record of bucket b of namespace ns:
// 's' uvarint(len ns) ns uvarint(len b) b.
func schemaKey(ns, b string) []byte {
	return appendName(appendName([]byte{tagSchema}, ns), b)
}

const schemaV1 = "tidemark-table 1"

func (s *Schema) encode() []byte {
	return fmt.Appendf(nil, "%s\nkey %s\nvalue %s\n", schemaV1, s.Key, s.Value)
}

func decodeSchema(b []byte) (Schema, bool) {
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != 3 || lines[0] != schemaV1 || !strings.HasPrefix(lines[1], "key ") || !strings.HasPrefix(lines[2], "value ") {
		return Schema{}, false
	}
	return Schema{Key: lines[1][4:], Value: lines[2][6:]}, true
}

// Schema returns the schema recorded for the bucket by the tables that
// wrote it, and whether there is one: a bucket written only through the
// Bucket methods has none. It is read from the durable state (in a
// snapshot, the snapshot's).
func (b *Bucket) Schema() (Schema, bool, error) {
	if err := b.tx.check(false); err != nil {
		return Schema{}, false, err
	}
	v, ok, err := b.tx.reader().get(schemaKey(b.ns, b.name))
	if err != nil || !ok {
		return Schema{}, false, err
	}
	s, ok := decodeSchema(v)
	if !ok {
		return Schema{}, false, fmt.Errorf("schema record of bucket %q of namespace %q in store %s: %q: %w", b.name, b.ns, b.tx.c.dir, v, ErrCorrupt)
	}
	return s, true, nil
}

// recordSchema records s as the schema of bucket bi, once per bucket and
// run: the first table to write a bucket in a run records its schema
// (unless the store holds it already); another table writing the same
// bucket later in the run does not. The record goes to the backend with
// the staging batch, which holds the table's first writes (a commit of
// its own cost the first line of each table of a new store two syncs with
// bbolt, inside its function); no rollback of the line takes it back. A
// failure to read the record is a warning: the schema serves tools only.
// The caller holds the token, in Apply.
func (tx *Tx) recordSchema(bi *bucketInfo, s *Schema) {
	bi.schema = s
	ts := tx.txState
	k := [2]string{bi.ns, bi.name}
	if ts.schemas[k] {
		return
	}
	if ts.schemas == nil {
		ts.schemas = make(map[[2]string]bool)
	}
	ts.schemas[k] = true
	c := tx.c
	key, val := schemaKey(bi.ns, bi.name), s.encode()
	old, ok, err := c.eng.get(key)
	if err == nil && ok && bytes.Equal(old, val) {
		return
	}
	if err != nil {
		c.log.Warn("state: could not record a table's schema (tools will show its keys and values undecoded)",
			"store", c.dir, "namespace", bi.ns, "bucket", bi.name, "err", err)
		return
	}
	tx.cur.schemas = append(tx.cur.schemas, write{key: key, val: val})
}

// stringBytes returns the bytes of s, not a copy: they must not be changed.
func stringBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }
