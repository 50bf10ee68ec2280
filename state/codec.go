package state

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
)

// Codec encodes the values of a [Table]. The built-in codecs are [Int64],
// [Uint64], [String], [Bytes] and [JSON]; implement Codec for a type of
// your own.
type Codec[T any] interface {
	// Append appends the encoding of v to dst and returns the extended
	// slice. It must not keep dst.
	Append(dst []byte, v T) ([]byte, error)
	// Decode decodes a value that Append encoded. b is the store's memory,
	// valid only during the call: a T that keeps bytes of it must copy
	// them.
	Decode(b []byte) (T, error)
}

// KeyCodec encodes the keys of a [Table]. Its encoding keeps the order of
// T: when a sorts before b, the encoding of a sorts before the encoding
// of b bytewise, so that a table's iteration (All, Range, ...) returns its
// keys in T's order. Two keys must not have the same encoding.
//
// A Prefix scan selects the keys whose encoding starts with the encoding
// of the prefix given: with [String] and [Bytes], the keys that start with
// it; with a fixed-size encoding, the prefix itself.
type KeyCodec[T any] interface {
	// AppendKey appends the encoding of k to dst and returns the extended
	// slice. It must not keep dst.
	AppendKey(dst []byte, k T) ([]byte, error)
	// DecodeKey decodes a key that AppendKey encoded. b is valid only
	// during the call.
	DecodeKey(b []byte) (T, error)
}

// Int64 encodes an int64 in 8 bytes.
//
// As a value it is big-endian two's complement: the encoding of
// [Bucket.PutInt64] and [Bucket.AddInt64], so that a Table[K, int64] reads
// the values they wrote, and they read its.
//
// As a key it is big-endian with the sign bit flipped (the key of v is
// uint64(v) ^ 1<<63), so that negative keys sort before positive ones:
// -1 is 7f ff ff ff ff ff ff ff and 0 is 80 00 00 00 00 00 00 00. Keys
// written with PutInt64's encoding as raw bucket keys do not read back
// through it.
type Int64 struct{}

// Append appends v as PutInt64 writes it.
func (Int64) Append(dst []byte, v int64) ([]byte, error) {
	return binary.BigEndian.AppendUint64(dst, uint64(v)), nil
}

// Decode decodes 8 bytes written by Append, PutInt64 or AddInt64; another
// length is [ErrNotInt64].
func (Int64) Decode(b []byte) (int64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("%d bytes: %w", len(b), ErrNotInt64)
	}
	return int64(binary.BigEndian.Uint64(b)), nil
}

// AppendKey appends k big-endian with the sign bit flipped.
func (Int64) AppendKey(dst []byte, k int64) ([]byte, error) {
	return binary.BigEndian.AppendUint64(dst, uint64(k)^1<<63), nil
}

// DecodeKey decodes 8 bytes written by AppendKey.
func (Int64) DecodeKey(b []byte) (int64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("int64 key of %d bytes, want 8: %w", len(b), ErrNotInt64)
	}
	return int64(binary.BigEndian.Uint64(b) ^ 1<<63), nil
}

func (Int64) codecName() string { return "int64" }

// add adds delta to the value of key in place (see Tx.addInt64).
func (Int64) add(tx *Tx, bi *bucketInfo, key []byte, delta int64) (int64, error) {
	n, _, err := tx.addInt64(bi, key, delta)
	return n, err
}

func (Int64) addEntry(tx *Tx, bi *bucketInfo, key []byte, delta int64) (int64, *entry, error) {
	return tx.addInt64(bi, key, delta)
}

func (Int64) addAt(tx *Tx, bi *bucketInfo, key []byte, e *entry, delta int64) (int64, error) {
	return tx.addAt(bi, key, e, delta)
}

// Uint64 encodes a uint64 in 8 bytes, big-endian, as a key and as a value.
// The values of [Bucket.PutInt64] read as their two's complement bits.
type Uint64 struct{}

// Append appends v big-endian.
func (Uint64) Append(dst []byte, v uint64) ([]byte, error) {
	return binary.BigEndian.AppendUint64(dst, v), nil
}

// Decode decodes 8 bytes; another length is [ErrNotInt64].
func (Uint64) Decode(b []byte) (uint64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("%d bytes: %w", len(b), ErrNotInt64)
	}
	return binary.BigEndian.Uint64(b), nil
}

// AppendKey appends k big-endian.
func (c Uint64) AppendKey(dst []byte, k uint64) ([]byte, error) { return c.Append(dst, k) }

// DecodeKey decodes 8 bytes.
func (c Uint64) DecodeKey(b []byte) (uint64, error) { return c.Decode(b) }

func (Uint64) codecName() string { return "uint64" }

// add adds delta to the value of key in place, wrapping around as Go's
// uint64 does (the same bits as an int64 addition).
func (Uint64) add(tx *Tx, bi *bucketInfo, key []byte, delta uint64) (uint64, error) {
	n, _, err := tx.addInt64(bi, key, int64(delta))
	return uint64(n), err
}

func (Uint64) addEntry(tx *Tx, bi *bucketInfo, key []byte, delta uint64) (uint64, *entry, error) {
	n, e, err := tx.addInt64(bi, key, int64(delta))
	return uint64(n), e, err
}

func (Uint64) addAt(tx *Tx, bi *bucketInfo, key []byte, e *entry, delta uint64) (uint64, error) {
	n, err := tx.addAt(bi, key, e, int64(delta))
	return uint64(n), err
}

// String encodes a string as its bytes, as a key and as a value: the keys
// sort bytewise (for UTF-8, in code point order), and a key written as
// []byte(s) to a bucket reads back as s.
type String struct{}

// Append appends the bytes of v.
func (String) Append(dst []byte, v string) ([]byte, error) { return append(dst, v...), nil }

// Decode returns b as a string (a copy).
func (String) Decode(b []byte) (string, error) { return string(b), nil }

// AppendKey appends the bytes of k.
func (String) AppendKey(dst []byte, k string) ([]byte, error) { return append(dst, k...), nil }

// DecodeKey returns b as a string (a copy).
func (String) DecodeKey(b []byte) (string, error) { return string(b), nil }

func (String) codecName() string { return "string" }

// Bytes stores a []byte as it is, as a key and as a value. Decode returns a
// copy, which the caller may keep and change.
type Bytes struct{}

// Append appends v.
func (Bytes) Append(dst []byte, v []byte) ([]byte, error) { return append(dst, v...), nil }

// Decode returns a copy of b (empty, not nil, for an empty value).
func (Bytes) Decode(b []byte) ([]byte, error) { return append([]byte{}, b...), nil }

// AppendKey appends k.
func (Bytes) AppendKey(dst []byte, k []byte) ([]byte, error) { return append(dst, k...), nil }

// DecodeKey returns a copy of b.
func (c Bytes) DecodeKey(b []byte) ([]byte, error) { return c.Decode(b) }

func (Bytes) codecName() string { return "bytes" }

// JSON encodes a value of type T with encoding/json. It is a value codec
// only: JSON's bytes do not sort as the values they encode.
type JSON[T any] struct{}

// Append appends the JSON encoding of v (json.Marshal's, without a final
// newline).
func (JSON[T]) Append(dst []byte, v T) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return dst, err
	}
	return append(dst, b...), nil
}

// Decode decodes JSON into a new T.
func (JSON[T]) Decode(b []byte) (T, error) {
	var v T
	err := json.Unmarshal(b, &v)
	return v, err
}

func (JSON[T]) codecName() string { return "json" }

// codecName returns the name a table's schema records for c: a built-in
// codec's ("int64", "uint64", "string", "bytes", "json"), else c's Go
// type.
func codecName(c any) string {
	if n, ok := c.(interface{ codecName() string }); ok {
		return n.codecName()
	}
	return fmt.Sprintf("%T", c)
}

// adder is implemented by the value codecs whose values a Table can add to
// in place: [Int64] and [Uint64].
type adder[V any] interface {
	add(tx *Tx, bi *bucketInfo, key []byte, delta V) (V, error)
	// addEntry is add that also returns the staging batch's entry of
	// key, nil if it failed (see Counter).
	addEntry(tx *Tx, bi *bucketInfo, key []byte, delta V) (V, *entry, error)
	// addAt is add of the key whose entry in the staging batch is e.
	addAt(tx *Tx, bi *bucketInfo, key []byte, e *entry, delta V) (V, error)
}
