package state

import (
	"bytes"
	"fmt"
	"runtime/debug"

	bolt "go.etcd.io/bbolt"
)

// A bbolt store of format 4 keeps each table's keys in a bucket of its own,
// nested in the store's bucket and named by the table's prefix (dataPrefix:
// 'd', the namespace's and the table's names): a key of the table is
// stored there without the prefix. The other records stay in the store's
// bucket, as in a store of format 3, whose data keys are there too, each
// with its prefix.
//
// bbolt compresses no prefix: with the prefix in every key (17 bytes for
// the ledger's table) the ledger's 10,000 accounts took 195 leaf pages
// and three levels, and every commit searched, copied and wrote the
// longer keys; in a table's bucket they take 146 and two (bbolt's bucket
// stats).
//
// Everything above the engine sees the keys of format 3 (the key space of
// encoding.go): the engine splits a data key into its table and the rest
// on a write or a read, and a cursor (tableCursor) joins them again. The
// order is the same: a table's prefix says its own length, so no key of
// another record or table starts with it, and in the store's bucket the
// table's bucket sorts where its keys would.
//
// bbolt refuses an empty key, which a table may hold: a key of a table is
// stored as innerKey gives it (unchanged unless it is empty or starts
// with a zero byte, which gets one in front), an encoding that keeps the
// order.

// splitTable splits a data key into its table's prefix and the key within
// the table; ok is false for a key that is not a data key.
func splitTable(k []byte) (table, key []byte, ok bool) {
	n := tablePrefixLen(k)
	if n <= 0 {
		return nil, nil, false
	}
	return k[:n], k[n:], true
}

// tablePrefixLen returns the length of the table prefix k starts with (see
// dataPrefix), or 0 when k does not start with one.
func tablePrefixLen(k []byte) int {
	if len(k) == 0 || k[0] != tagData {
		return 0
	}
	at := 1
	for range 2 {
		n, w := nameLen(k[at:])
		if w <= 0 {
			return 0
		}
		at += w + int(n)
	}
	return at
}

// innerKey returns the key under which a table's bucket stores key: key
// itself, unless it is empty or starts with a zero byte, which is stored
// after one more.
func innerKey(key []byte) []byte {
	if len(key) > 0 && key[0] != 0 {
		return key
	}
	return append([]byte{0}, key...)
}

// appendOuter appends to b the key of a table that a table's bucket
// stores as inner (the inverse of innerKey); ok is false for an inner key
// that innerKey never gives (a zero byte followed by another byte).
func appendOuter(b, inner []byte) (_ []byte, ok bool) {
	if len(inner) == 0 || inner[0] != 0 {
		return append(b, inner...), len(inner) > 0
	}
	if len(inner) > 1 && inner[1] != 0 {
		return b, false
	}
	return append(b, inner[1:]...), true
}

// tableGet returns the value of k in the store's bucket b of a store of
// format 4 (tables set) or 3; it points into bbolt's pages.
func tableGet(b *bolt.Bucket, k []byte, tables bool) []byte {
	if !tables {
		return b.Get(k)
	}
	table, key, ok := splitTable(k)
	if !ok {
		return b.Get(k)
	}
	tb := b.Bucket(table)
	if tb == nil {
		return nil
	}
	return tb.Get(innerKey(key))
}

// tableWrites applies ws, in key order, to the store's bucket b of a store
// of format 4: each table's writes go to its bucket, made by the first key
// put in it; a bucket left empty by deletes is removed. A table whose
// writes all sort at or after its last key has its new pages filled to
// appendFill (see appending).
func tableWrites(b *bolt.Bucket, ws []write) error {
	var (
		table   []byte
		tb      *bolt.Bucket
		deleted bool
	)
	// done removes the bucket of the table just written when its deletes
	// left it empty.
	done := func() error {
		if tb == nil || !deleted {
			return nil
		}
		if k, _ := tb.Cursor().First(); k != nil {
			return nil
		}
		return b.DeleteBucket(table)
	}
	for _, w := range ws {
		t, key, ok := splitTable(w.key)
		if !ok {
			if err := writeTo(b, w.key, w); err != nil {
				return err
			}
			continue
		}
		if table == nil || !bytes.Equal(t, table) {
			if err := done(); err != nil {
				return err
			}
			table, tb, deleted = t, b.Bucket(t), false
			if tb != nil && appending(tb, innerKey(key)) {
				tb.FillPercent = max(tb.FillPercent, appendFill)
			}
		}
		if tb == nil && !w.del {
			var err error
			if tb, err = b.CreateBucket(table); err != nil {
				return err
			}
			tb.FillPercent = max(tb.FillPercent, appendFill)
		}
		if tb == nil {
			continue // a delete in a table without a bucket: nothing to delete
		}
		if err := writeTo(tb, innerKey(key), w); err != nil {
			return err
		}
		deleted = deleted || w.del
	}
	return done()
}

// appending reports whether the writes of a commit to table bucket tb,
// the least of whose keys is first (as stored), all sort at or after its
// last key: keys added in order (ids, times, a first load of sorted
// balances). At bbolt's default FillPercent such keys leave every page
// they fill half full, as bbolt splits the last page in halves and no
// later key comes back to it; at appendFill nine tenths. Keys at random
// keep the default: at appendFill a key added between two others splits
// a page nine tenths full into one of nine tenths and one nearly empty,
// and such a table ends about a third full against 0.7 at the default
// (TestBoltTablesFillAppendedPages). A key equal to the last is the last
// one's new value, not a key added. The writes of a commit that change
// keys before the last and add keys after it keep the default: which of
// those keys are new, bbolt does not say.
func appending(tb *bolt.Bucket, first []byte) bool {
	last, _ := tb.Cursor().Last()
	return last == nil || bytes.Compare(first, last) >= 0
}

// appendFill is how full keys added in order fill a table's pages (see
// appending): moveFill, the fill of a move's keys, which come in order
// too. A ledger's 100,000 accounts loaded in order (the ledger rows of
// bench/cmd/benchtable set their stores up so) take 1,205 leaf pages at
// appendFill against 2,173 at bbolt's default; 20,000 lines of random
// accounts into each then make 3 saves of the commit's share of the
// default cache budget against 10, in 0.12 s against 0.22 s.
const appendFill = moveFill

// writeTo puts the value of w under key in b, or deletes key for a delete.
func writeTo(b *bolt.Bucket, key []byte, w write) error {
	if w.del {
		return b.Delete(key)
	}
	return b.Put(key, w.val)
}

// boltCursor is what the paged cursors move: a bbolt cursor over the
// store's bucket, or a tableCursor that reads the tables' buckets into it.
type boltCursor interface {
	First() (k, v []byte)
	Last() (k, v []byte)
	Seek(seek []byte) (k, v []byte)
	Next() (k, v []byte)
	Prev() (k, v []byte)
}

// newBoltCursor returns a cursor over the store's bucket b that reads the
// keys of a store of format 3 (see the top of this file).
func newBoltCursor(b *bolt.Bucket, tables bool) boltCursor {
	if !tables {
		return b.Cursor()
	}
	return &tableCursor{b: b, c: b.Cursor()}
}

// tableCursor walks the store's bucket of a store of format 4 and, where
// it holds a table's bucket, that bucket's keys, each after its table's
// prefix. The key it returns is valid until its next move.
type tableCursor struct {
	b *bolt.Bucket
	c *bolt.Cursor // over b
	// t is the cursor over the bucket of table, nil at a key of b.
	t     *bolt.Cursor
	table []byte
	key   []byte
}

func (tc *tableCursor) First() ([]byte, []byte) {
	tc.t = nil
	k, v := tc.c.First()
	return tc.settle(k, v, false)
}
func (tc *tableCursor) Last() ([]byte, []byte) {
	tc.t = nil
	k, v := tc.c.Last()
	return tc.settle(k, v, true)
}
func (tc *tableCursor) Next() ([]byte, []byte) { return tc.step(false) }
func (tc *tableCursor) Prev() ([]byte, []byte) { return tc.step(true) }

// Seek moves to the first key >= seek. A key inside a table is sought in
// the table's bucket; any other key's place in the store's bucket is its
// place among the tables too (see the top of this file).
func (tc *tableCursor) Seek(seek []byte) ([]byte, []byte) {
	tc.t = nil
	table, key, ok := splitTable(seek)
	if !ok {
		k, v := tc.c.Seek(seek)
		return tc.settle(k, v, false)
	}
	k, v := tc.c.Seek(table)
	if k == nil || !bytes.Equal(k, table) || v != nil {
		return tc.settle(k, v, false)
	}
	tb := tc.b.Bucket(k)
	if tb == nil {
		return tc.settle(k, v, false)
	}
	tc.t, tc.table = tb.Cursor(), k
	if ik, iv := tc.t.Seek(innerKey(key)); ik != nil {
		return tc.join(ik, iv)
	}
	tc.t = nil
	return tc.step(false)
}

// step moves to the next key, or (rev) the one before: within the table
// the cursor is in, else past it in the store's bucket.
func (tc *tableCursor) step(rev bool) ([]byte, []byte) {
	if tc.t != nil {
		if k, v := move(tc.t, rev); k != nil {
			return tc.join(k, v)
		}
		tc.t = nil
	}
	k, v := move(tc.c, rev)
	return tc.settle(k, v, rev)
}

// move moves c one key on, or (rev) back.
func move(c *bolt.Cursor, rev bool) ([]byte, []byte) {
	if rev {
		return c.Prev()
	}
	return c.Next()
}

// settle returns k and v of the store's bucket; where k is a table's
// bucket, its first key (its last, rev), or that of the next table that
// holds a key, moving on (back, rev).
func (tc *tableCursor) settle(k, v []byte, rev bool) ([]byte, []byte) {
	for ; k != nil; k, v = move(tc.c, rev) {
		tb := tc.bucket(k, v)
		if tb == nil {
			return k, v
		}
		var ik, iv []byte
		if rev {
			ik, iv = tb.Last()
		} else {
			ik, iv = tb.First()
		}
		if ik != nil {
			tc.t, tc.table = tb, k
			return tc.join(ik, iv)
		}
	}
	return nil, nil
}

// bucket returns a cursor over the bucket k of the store's bucket, nil
// when k holds a value (bbolt gives a bucket's key a nil value; every
// value of a store of format 4 holds at least its checksum).
func (tc *tableCursor) bucket(k, v []byte) *bolt.Cursor {
	if v != nil {
		return nil
	}
	if tb := tc.b.Bucket(k); tb != nil {
		return tb.Cursor()
	}
	return nil
}

// join returns the key of the table's key inner: the table's prefix and
// the key. An inner key that innerKey never gives is returned as it is,
// after the prefix, for the checksum of its value to refuse.
func (tc *tableCursor) join(inner, v []byte) ([]byte, []byte) {
	k, ok := appendOuter(append(tc.key[:0], tc.table...), inner)
	if !ok {
		k = append(k, inner...)
	}
	tc.key = k
	return k, v
}

// moveToTables moves data keys of a store of format 3, which keeps them in
// the store's bucket after their tables' prefixes, into their tables'
// buckets, as a store of format 4 keeps them: the keys after after (from
// the first, for nil), at most maxKeys of them or about maxBytes of keys
// and values, in one transaction that also writes the format record
// record(last, done), where last is the last key moved and done reports
// that no key is left to move. It returns last and done. The values move
// as they are: a value's checksum covers the whole key, which the store
// still reads as before. A key that starts with the data tag but no
// table's prefix, which no store writes, stays where it is (the store
// reads it there in either format).
func (e *boltEngine) moveToTables(after []byte, maxKeys, maxBytes int, record func(last []byte, done bool) []byte) (last []byte, done bool, err error) {
	if err := e.check(); err != nil {
		return nil, false, err
	}
	defer func(old bool) { e.guard(old, recover(), &err) }(debug.SetPanicOnFault(true))
	err = e.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(boltBucket)
		from := []byte{tagData}
		if after != nil {
			from = append(bytes.Clone(after), 0)
		}
		var ws []write
		size := 0
		done = true
		c := b.Cursor()
		for k, v := c.Seek(from); k != nil && k[0] == tagData; k, v = c.Next() {
			if v == nil || tablePrefixLen(k) == 0 {
				continue // a table's bucket, made by a chunk before
			}
			if len(ws) >= maxKeys || size >= maxBytes {
				done = false
				break
			}
			ws = append(ws, write{key: bytes.Clone(k), val: bytes.Clone(v)})
			size += len(k) + len(v)
		}
		// The keys leave the store's bucket before their tables' buckets
		// are made: a table's empty key is stored under the name its
		// bucket takes.
		for _, w := range ws {
			if err := b.Delete(w.key); err != nil {
				return err
			}
		}
		if err := fillTables(b, ws); err != nil {
			return err
		}
		for _, w := range ws {
			// A store moves each key once: one in both places is damage,
			// not a value to overwrite.
			t, key, _ := splitTable(w.key)
			if b.Bucket(t).Get(innerKey(key)) != nil {
				return &CorruptError{Backend: Bolt, Dir: e.dir, File: e.path, Record: "the bbolt database", Key: w.key,
					Detail: fmt.Sprintf("its key %s is both in the store's bucket and in its table's, where an upgrade to format 4 moves it: restore the store's folder from a backup", quoteKey(w.key))}
			}
		}
		if err := tableWrites(b, ws); err != nil {
			return err
		}
		if len(ws) > 0 {
			last = ws[len(ws)-1].key
		}
		return b.Put([]byte{tagVersion}, record(last, done))
	})
	if err != nil {
		return nil, false, err
	}
	return last, done, nil
}

// fillTables makes the buckets of the tables of ws, in the store's bucket
// b, fill their pages to moveFill as keys are added: the keys of a move
// come in order, and bbolt splits the pages of keys added in order at its
// default FillPercent, half full, which would leave the moved tables
// half again as large as the same keys written at random. bbolt hands out
// one handle of a bucket per transaction, so tableWrites writes through
// these.
func fillTables(b *bolt.Bucket, ws []write) error {
	var last []byte
	for _, w := range ws {
		t, _, ok := splitTable(w.key)
		if !ok || bytes.Equal(t, last) {
			continue
		}
		last = t
		tb := b.Bucket(t)
		if tb == nil {
			var err error
			if tb, err = b.CreateBucket(t); err != nil {
				return err
			}
		}
		tb.FillPercent = moveFill
	}
	return nil
}

// moveFill is how full the moved keys fill a table's pages: room for a
// tenth more before a page splits. Measured on the ledger's 950,420
// accounts moved from a store of format 3 (18,769 leaf pages), then
// 300,000 lines applied (--max-batch 10000, 3 runs each, median): at
// bbolt's default of 0.5, 18,265 leaf pages and 9.79 s, slower than the
// store of format 3 (9.20 s); at 0.9, 10,072 pages and 8.23 s; at 1.0,
// 9,068 pages and 9.54 s (a new account splits a full page); a store
// made in format 4 by the same lines, 13,063 pages and 8.55 s.
const moveFill = 0.9
