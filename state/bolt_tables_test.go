package state

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// tablesModelKeys are keys of every kind a store of format 4 holds: records
// of the store's bucket before, between and after the data keys, and data
// keys of tables whose names are prefixes of each other, with table keys
// that are empty or start with zero bytes (see innerKey).
func tablesModelKeys() [][]byte {
	var keys [][]byte
	for _, k := range []string{"a\x00feed", "o", "out", "s\x00\x01b", "v", "O\x01x\x00"} {
		keys = append(keys, []byte(k))
	}
	for _, ns := range []string{"", "a", "ab"} {
		for _, t := range []string{"", "a", "ab", "b"} {
			for _, k := range []string{"", "\x00", "\x00\x00", "\x00a", "\x01", "a", "ab", "b", "k1", "k2", "\xff"} {
				keys = append(keys, append(dataPrefix(ns, t), k...))
			}
		}
	}
	return keys
}

// TestTableCursorMatchesFlat holds the keys of a store of format 4, kept
// in tables' buckets (tableWrites), to the same keys in one flat bucket:
// every read (tableGet) and every walk of the cursor (seeks to keys of
// every kind and to prefixes that are none, then steps either way) gives
// what bbolt's cursor gives on the flat bucket, through random puts and
// deletes that empty tables and fill them again.
func TestTableCursorMatchesFlat(t *testing.T) {
	open := func(name string) *bolt.DB {
		db, err := bolt.Open(filepath.Join(t.TempDir(), name), 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		if err := db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket(boltBucket); return err }); err != nil {
			t.Fatal(err)
		}
		return db
	}
	tables, flat := open("tables"), open("flat")
	keys := tablesModelKeys()
	seeks := append(slices.Clone(keys), nil, []byte("d"), []byte("d\x01"), []byte("d\x01a"), []byte("d\x01a\x01"),
		[]byte("d\x02ab\x00"), []byte("e"), []byte("\xff"), []byte("d\x80"), append(dataPrefix("a", "ab"), "k"...))
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 4))
	for round := range 60 {
		var ws []write
		for _, k := range keys {
			switch r.IntN(4) {
			case 0:
				ws = append(ws, write{key: k, del: true})
			case 1:
				ws = append(ws, write{key: k, val: fmt.Appendf(nil, "v%d-%s", round, k)})
			}
		}
		slices.SortFunc(ws, func(a, b write) int { return bytes.Compare(a.key, b.key) })
		if err := tables.Update(func(tx *bolt.Tx) error { return tableWrites(tx.Bucket(boltBucket), ws) }); err != nil {
			t.Fatal(err)
		}
		if err := flat.Update(func(tx *bolt.Tx) error {
			b := tx.Bucket(boltBucket)
			for _, w := range ws {
				if w.del {
					if err := b.Delete(w.key); err != nil {
						return err
					}
				} else if err := b.Put(w.key, w.val); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		ttx, err := tables.Begin(false)
		if err != nil {
			t.Fatal(err)
		}
		ftx, err := flat.Begin(false)
		if err != nil {
			_ = ttx.Rollback()
			t.Fatal(err)
		}
		// Before the databases close, should the round fail.
		rollback := func() { _, _ = ttx.Rollback(), ftx.Rollback() }
		t.Cleanup(rollback)
		tb, fb := ttx.Bucket(boltBucket), ftx.Bucket(boltBucket)
		for _, k := range keys {
			if got, want := tableGet(tb, k, true), fb.Get(k); !bytes.Equal(got, want) {
				t.Fatalf("round %d: get %q = %q, want %q", round, k, got, want)
			}
		}
		// A table without keys has no bucket.
		_ = tb.ForEachBucket(func(k []byte) error {
			if first, _ := tb.Bucket(k).Cursor().First(); first == nil {
				t.Errorf("round %d: the bucket of table %q is left empty", round, k)
			}
			return nil
		})
		for range 40 {
			tc, fc := newBoltCursor(tb, true), newBoltCursor(fb, false)
			var what string
			var gk, gv, wk, wv []byte
			switch n := r.IntN(len(seeks) + 2); n {
			case len(seeks):
				what = "First"
				gk, gv = tc.First()
				wk, wv = fc.First()
			case len(seeks) + 1:
				what = "Last"
				gk, gv = tc.Last()
				wk, wv = fc.Last()
			default:
				what = fmt.Sprintf("Seek(%q)", seeks[n])
				gk, gv = tc.Seek(seeks[n])
				wk, wv = fc.Seek(seeks[n])
			}
			for step := 0; ; step++ {
				if !bytes.Equal(gk, wk) || !bytes.Equal(gv, wv) {
					t.Fatalf("round %d, %s then %d steps: %q = %q, want %q = %q", round, what, step, gk, gv, wk, wv)
				}
				if wk == nil || step == 30 {
					break
				}
				if r.IntN(3) == 0 {
					what += ", Prev"
					gk, gv = tc.Prev()
					wk, wv = fc.Prev()
				} else {
					what += ", Next"
					gk, gv = tc.Next()
					wk, wv = fc.Next()
				}
			}
		}
		rollback()
	}
}

// TestInnerKey holds innerKey to an encoding that keeps the order of table
// keys and that appendOuter reverses, and appendOuter to refusing the
// inner keys innerKey never gives.
func TestInnerKey(t *testing.T) {
	keys := [][]byte{{}, {0}, {0, 0}, {0, 1}, {0, 0xff}, {1}, {1, 0}, []byte("a"), {0xff}}
	for i, k := range keys {
		in := innerKey(k)
		if len(in) == 0 {
			t.Fatalf("innerKey(%q) is empty", k)
		}
		if out, ok := appendOuter(nil, in); !ok || !bytes.Equal(out, k) {
			t.Fatalf("appendOuter(innerKey(%q)) = %q, %v", k, out, ok)
		}
		for _, l := range keys[i+1:] {
			if bytes.Compare(in, innerKey(l)) >= 0 {
				t.Fatalf("innerKey(%q) = %q, not before innerKey(%q) = %q", k, in, l, innerKey(l))
			}
		}
	}
	for _, bad := range [][]byte{{}, {0, 1}, {0, 'a', 0}} {
		if out, ok := appendOuter(nil, bad); ok {
			t.Fatalf("appendOuter(%q) = %q, accepted", bad, out)
		}
	}
}

// TestBoltTablesOnDisk writes keys of three tables (an empty key and keys
// starting with zero bytes among them) into a new bbolt store and into one
// of format 3, deletes every key of one table, and reopens each: every key
// reads back and iterates in order, each store keeps its format, and the
// file holds them as its format says: a store of format 4 each table's
// keys in the table's bucket, without the prefix, and no bucket for the
// table left empty; one of format 3 every key in the store's bucket.
func TestBoltTablesOnDisk(t *testing.T) {
	be := backend{name: Bolt, open: OpenBolt}
	keys := []string{"", "\x00", "\x00a", "k1", "k2"}
	for _, format := range []int{3, 4} {
		t.Run(fmt.Sprintf("format %d", format), func(t *testing.T) {
			dir := t.TempDir()
			o, record := testOpts(), formatV4
			if format == 3 {
				o, record = format3Opts(), formatVersion
			}
			s := mustOpen(t, be, dir, o)
			apply := func(n int, fn func(tx *Tx) error) {
				t.Helper()
				if _, err := s.Apply(t.Context(), del("f", 1, n), fn); err != nil {
					t.Fatal(err)
				}
			}
			apply(1, func(tx *Tx) error {
				for _, table := range []string{"", "a", "b"} {
					for i, k := range keys {
						if err := tx.Bucket(table).PutInt64([]byte(k), int64(i)); err != nil {
							return err
						}
					}
				}
				return nil
			})
			apply(2, deleteKeys("b", keys))
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = mustOpen(t, be, dir, testOpts())
			if v := formatRecord(t, s); v != record {
				t.Fatalf("format record %q after a reopen, want %q", v, record)
			}
			if err := s.View(func(tx *Tx) error {
				for _, table := range []string{"", "a", "b"} {
					var got []string
					for k, v := range tx.Bucket(table).All() {
						if n, _ := decodeInt64(v); len(got) >= len(keys) || n != int64(len(got)) {
							return fmt.Errorf("table %q: key %q = %d after %q", table, k, n, got)
						}
						got = append(got, string(k))
					}
					want := keys
					if table == "b" {
						want = nil
					}
					if !slices.Equal(got, want) {
						return fmt.Errorf("table %q iterates %q, want %q", table, got, want)
					}
					for i, k := range want {
						if n, err := tx.Bucket(table).GetInt64([]byte(k)); err != nil || n != int64(i) {
							return fmt.Errorf("table %q: get %q = %d, %v; want %d", table, k, n, err, i)
						}
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			db, err := bolt.Open(filepath.Join(dir, boltFile), 0o600, &bolt.Options{ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if err := db.View(func(tx *bolt.Tx) error {
				b := tx.Bucket(boltBucket)
				var flat, tables []string
				if err := b.ForEach(func(k, v []byte) error {
					switch {
					case v == nil:
						tables = append(tables, string(k))
					case k[0] == tagData:
						flat = append(flat, string(k))
					}
					return nil
				}); err != nil {
					return err
				}
				if format == 3 {
					if len(tables) > 0 || len(flat) != 2*len(keys) {
						return fmt.Errorf("buckets %q and %d data keys in the store's bucket, want none and %d", tables, len(flat), 2*len(keys))
					}
					return nil
				}
				if want := []string{string(dataPrefix("", "")), string(dataPrefix("", "a"))}; len(flat) > 0 || !slices.Equal(tables, want) {
					return fmt.Errorf("data keys %q and buckets %q in the store's bucket, want none and %q", flat, tables, want)
				}
				var inner []string
				if err := b.Bucket(dataPrefix("", "a")).ForEach(func(k, v []byte) error {
					inner = append(inner, string(k))
					return nil
				}); err != nil {
					return err
				}
				if want := []string{"\x00", "\x00\x00", "\x00\x00a", "k1", "k2"}; !slices.Equal(inner, want) {
					return fmt.Errorf("the bucket of table %q holds %q, want %q", "a", inner, want)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// deleteKeys returns the function of a line that deletes keys from table.
func deleteKeys(table string, keys []string) func(tx *Tx) error {
	return func(tx *Tx) error {
		for _, k := range keys {
			if err := tx.Bucket(table).Delete([]byte(k)); err != nil {
				return err
			}
		}
		return nil
	}
}

// TestBoltTablesDamageIsFound damages the layout of a bbolt file, through
// bbolt, in ways its reads would not see: a data key where the store's
// format does not keep it, a bucket where the store makes none, a key of
// a table's bucket that the store never writes. The check at open refuses
// each, naming what it found.
func TestBoltTablesDamageIsFound(t *testing.T) {
	be := backend{name: Bolt, open: OpenBolt}
	table := dataPrefix("", "acct")
	for _, tc := range []struct {
		name   string
		format int
		damage func(b *bolt.Bucket) error
		want   string
	}{
		{"a data key in the store's bucket of format 4", 4, func(b *bolt.Bucket) error {
			return b.Put(append(bytes.Clone(table), "other"...), []byte("12345678"))
		}, "outside its table's bucket"},
		{"a bucket in a table's bucket", 4, func(b *bolt.Bucket) error {
			_, err := b.Bucket(table).CreateBucket([]byte("nested"))
			return err
		}, "holds a nested bucket"},
		{"a bucket not named by a table", 4, func(b *bolt.Bucket) error {
			_, err := b.CreateBucket([]byte("dx"))
			return err
		}, "holds a nested bucket"},
		{"a key of a table's bucket never written", 4, func(b *bolt.Bucket) error {
			return b.Bucket(table).Put([]byte("\x00a"), []byte("12345678"))
		}, "is not one the store writes"},
		{"a table's bucket in a store of format 3", 3, func(b *bolt.Bucket) error {
			_, err := b.CreateBucket(dataPrefix("", "other"))
			return err
		}, "holds a nested bucket"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			o := testOpts()
			if tc.format == 3 {
				o = format3Opts()
			}
			s := mustOpen(t, be, dir, o)
			if _, err := s.Apply(t.Context(), del("f", 1, 1), func(tx *Tx) error {
				return tx.Bucket("acct").PutInt64([]byte("alice"), 1)
			}); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			db, err := bolt.Open(filepath.Join(dir, boltFile), 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = db.Update(func(tx *bolt.Tx) error { return tc.damage(tx.Bucket(boltBucket)) })
			if cerr := db.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				t.Fatal(err)
			}
			s, err = be.open(dir, testOpts())
			if err == nil {
				s.Close()
				t.Fatal("the damaged store opened")
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("open: %v; want ErrCorrupt saying %q", err, tc.want)
			}
		})
	}
}

// TestBoltTablesFillAppendedPages writes 20,000 keys into a table of a
// bbolt store in saves of 1,000, once in key order and once at random:
// keys in order (each save's keys after the table's last) fill the pages
// to about appendFill, where bbolt's default leaves them half full; keys
// at random keep bbolt's default, whose splits leave the pages about 0.7
// full (at appendFill a random key splits a page that is nine tenths
// full, and such a table ends about a third full).
func TestBoltTablesFillAppendedPages(t *testing.T) {
	be := backend{name: Bolt, open: OpenBolt}
	const n, per = 20_000, 1_000
	for _, tc := range []struct {
		order   string
		atLeast float64
		atMost  float64
	}{
		{"in order", 0.8, 1},
		{"at random", 0.6, 0.8},
	} {
		t.Run(tc.order, func(t *testing.T) {
			dir := t.TempDir()
			s := mustOpen(t, be, dir, testOpts())
			ids := make([]int, n)
			for i := range ids {
				ids[i] = i
			}
			if tc.order == "at random" {
				rand.New(rand.NewPCG(1, 2)).Shuffle(n, func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
			}
			for s0 := 0; s0 < n; s0 += per {
				applyFlush(t, s, del("f", 1, s0/per+1), func(tx *Tx) error {
					for _, id := range ids[s0 : s0+per] {
						if err := tx.Bucket("balances").PutInt64(fmt.Appendf(nil, "account-%08d", id), int64(id)); err != nil {
							return err
						}
					}
					return nil
				})
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if fill := leafFill(t, dir, dataPrefix("", "balances")); fill < tc.atLeast || fill > tc.atMost {
				t.Fatalf("keys written %s fill the table's leaf pages to %.2f, want %.2f to %.2f", tc.order, fill, tc.atLeast, tc.atMost)
			}
		})
	}
}
