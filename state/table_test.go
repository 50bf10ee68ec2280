package state

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
)

// The codecs: each value round-trips, and a key codec's bytes sort as its
// values do.
func TestCodecs(t *testing.T) {
	ints := []int64{math.MinInt64, -1 << 40, -2, -1, 0, 1, 2, 255, 256, 1 << 40, math.MaxInt64}
	var prev []byte
	for _, v := range ints {
		k, _ := Int64{}.AppendKey(nil, v)
		if prev != nil && bytes.Compare(prev, k) >= 0 {
			t.Fatalf("Int64 key of %d (%x) does not sort after the one before (%x)", v, k, prev)
		}
		prev = k
		if got, err := (Int64{}).DecodeKey(k); err != nil || got != v {
			t.Fatalf("Int64 key %d: decoded %d, %v", v, got, err)
		}
		b, _ := Int64{}.Append(nil, v)
		if want := encodeInt64(v); !bytes.Equal(b, want) {
			t.Fatalf("Int64 value %d = %x, want PutInt64's %x", v, b, want)
		}
		if got, err := (Int64{}).Decode(b); err != nil || got != v {
			t.Fatalf("Int64 value %d: decoded %d, %v", v, got, err)
		}
	}
	if k, _ := (Int64{}).AppendKey(nil, -1); !bytes.Equal(k, []byte{0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}) {
		t.Fatalf("Int64 key of -1 = %x", k)
	}
	if _, err := (Int64{}).Decode([]byte("abc")); !errors.Is(err, ErrNotInt64) {
		t.Fatalf("Int64 decode of 3 bytes: %v", err)
	}
	if _, err := (Int64{}).DecodeKey([]byte("abc")); !errors.Is(err, ErrNotInt64) {
		t.Fatalf("Int64 key decode of 3 bytes: %v", err)
	}
	prev = nil
	for _, v := range []uint64{0, 1, 255, 256, 1 << 63, math.MaxUint64} {
		k, _ := Uint64{}.AppendKey(nil, v)
		if prev != nil && bytes.Compare(prev, k) >= 0 {
			t.Fatalf("Uint64 key of %d does not sort after the one before", v)
		}
		prev = k
		if got, err := (Uint64{}).DecodeKey(k); err != nil || got != v {
			t.Fatalf("Uint64 %d: decoded %d, %v", v, got, err)
		}
	}
	strs := []string{"", "a", "ab", "b", "é", "€"}
	prev = nil
	for _, v := range strs {
		k, _ := String{}.AppendKey(nil, v)
		if prev != nil && bytes.Compare(prev, k) >= 0 {
			t.Fatalf("String key %q does not sort after the one before", v)
		}
		prev = k
		if got, _ := (String{}).DecodeKey(k); got != v {
			t.Fatalf("String %q decoded %q", v, got)
		}
	}
	src := []byte("abc")
	got, _ := Bytes{}.Decode(src)
	got[0] = 'x'
	if string(src) != "abc" {
		t.Fatal("Bytes.Decode returned the store's memory, not a copy")
	}
	if e, _ := (Bytes{}).Decode(nil); e == nil {
		t.Fatal("Bytes.Decode of an empty value is nil")
	}
	type order struct {
		ID    string
		Items []int
	}
	j, err := JSON[order]{}.Append([]byte("x"), order{"o-1", []int{1, 2}})
	if err != nil || string(j) != `x{"ID":"o-1","Items":[1,2]}` {
		t.Fatalf("JSON append = %s, %v", j, err)
	}
	if o, err := (JSON[order]{}).Decode(j[1:]); err != nil || o.ID != "o-1" || len(o.Items) != 2 {
		t.Fatalf("JSON decode = %+v, %v", o, err)
	}
	if _, err := (JSON[order]{}).Decode([]byte("{")); err == nil {
		t.Fatal("JSON decode of a broken document succeeded")
	}
	for c, want := range map[any]string{Int64{}: "int64", Uint64{}: "uint64", String{}: "string", Bytes{}: "bytes", JSON[order]{}: "json", upperCodec{}: "state.upperCodec"} {
		if got := codecName(c); got != want {
			t.Fatalf("codecName(%T) = %q, want %q", c, got, want)
		}
	}
}

// upperCodec is a user's codec: a string stored in upper case.
type upperCodec struct{}

func (upperCodec) Append(dst []byte, v string) ([]byte, error) {
	return append(dst, bytes.ToUpper([]byte(v))...), nil
}
func (upperCodec) Decode(b []byte) (string, error) {
	if bytes.ContainsAny(b, "abcdefghijklmnopqrstuvwxyz") {
		return "", errors.New("lower case in an upper-case value")
	}
	return string(b), nil
}

type account struct {
	Owner string `json:"owner"`
	Limit int64  `json:"limit"`
}

var (
	testBalances = NewTable("balances", String{}, Int64{})
	testAccounts = NewTable("accounts", String{}, JSON[account]{})
	testByID     = NewTable("by-id", Int64{}, String{})
	testCounts   = NewTable("", String{}, Uint64{})
	testUpper    = NewTable("upper", Bytes{}, upperCodec{})
)

func TestTables(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		dir := t.TempDir()
		s := mustOpen(t, be, dir, testOpts())
		ctx := context.Background()
		apply := func(n int, fn func(tx *Tx) error) {
			t.Helper()
			if _, err := s.Apply(ctx, del("f", 1, n), fn); err != nil {
				t.Fatalf("line %d: %v", n, err)
			}
		}
		apply(1, func(tx *Tx) error {
			if _, ok, err := testBalances.Get(tx, "alice"); ok || err != nil {
				return fmt.Errorf("Get of a missing key: %v, %v", ok, err)
			}
			if v, err := testBalances.Add(tx, "alice", 100); err != nil || v != 100 {
				return fmt.Errorf("Add = %d, %v", v, err)
			}
			if v, err := testBalances.Add(tx, "alice", -130); err != nil || v != -30 {
				return fmt.Errorf("Add = %d, %v", v, err)
			}
			if err := testBalances.Put(tx, "bob", 7); err != nil {
				return err
			}
			if err := testAccounts.Put(tx, "alice", account{"Alice", 500}); err != nil {
				return err
			}
			if v, err := testCounts.Add(tx, "lines", 1); err != nil || v != 1 {
				return fmt.Errorf("uint64 Add = %d, %v", v, err)
			}
			for _, id := range []int64{5, -3, 0} {
				if err := testByID.Put(tx, id, fmt.Sprint("id", id)); err != nil {
					return err
				}
			}
			// Tables and the raw bucket see the same bytes.
			if n, err := tx.Bucket("balances").GetInt64([]byte("alice")); err != nil || n != -30 {
				return fmt.Errorf("GetInt64 of a table's value = %d, %v", n, err)
			}
			return nil
		})
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		apply(2, func(tx *Tx) error {
			// Update reads the durable value, writes a staged one.
			v, err := testBalances.Update(tx, "bob", func(v int64, ok bool) (int64, error) {
				if !ok || v != 7 {
					return 0, fmt.Errorf("Update sees bob %d, %v", v, ok)
				}
				return v * 3, nil
			})
			if err != nil || v != 21 {
				return fmt.Errorf("Update = %d, %v", v, err)
			}
			if _, err := testAccounts.Update(tx, "carol", func(a account, ok bool) (account, error) {
				if ok {
					return a, errors.New("carol exists")
				}
				return account{"Carol", 10}, nil
			}); err != nil {
				return err
			}
			// An error of Update's function leaves the key as it was.
			boom := errors.New("boom")
			if _, err := testBalances.Update(tx, "bob", func(int64, bool) (int64, error) { return 99, boom }); !errors.Is(err, boom) {
				return fmt.Errorf("Update with a failing function: %v", err)
			}
			if v, _, _ := testBalances.Get(tx, "bob"); v != 21 {
				return fmt.Errorf("bob = %d after a failed Update", v)
			}
			// An existing value written by AddInt64 reads through the table.
			if _, err := tx.Bucket("balances").AddInt64([]byte("dave"), 40); err != nil {
				return err
			}
			if v, ok, err := testBalances.Get(tx, "dave"); !ok || err != nil || v != 40 {
				return fmt.Errorf("Get of an AddInt64 value = %d, %v, %v", v, ok, err)
			}
			return testByID.Delete(tx, 0)
		})
		check := func(when string) {
			t.Helper()
			err := s.View(func(tx *Tx) error {
				var got []string
				for k, v := range testBalances.All(tx) {
					got = append(got, fmt.Sprintf("%s=%d", k, v))
				}
				if want := "[alice=-30 bob=21 dave=40]"; fmt.Sprint(got) != want {
					return fmt.Errorf("balances %v, want %s", got, want)
				}
				got = nil
				for k, v := range testByID.All(tx) {
					got = append(got, fmt.Sprintf("%d=%s", k, v))
				}
				if want := "[-3=id-3 5=id5]"; fmt.Sprint(got) != want {
					return fmt.Errorf("by-id %v, want %s (negative keys first)", got, want)
				}
				a, ok, err := testAccounts.Get(tx, "carol")
				if err != nil || !ok || a != (account{"Carol", 10}) {
					return fmt.Errorf("carol = %+v, %v, %v", a, ok, err)
				}
				if n, _, _ := testCounts.Get(tx, "lines"); n != 1 {
					return fmt.Errorf("root count = %d", n)
				}
				return tx.Err()
			})
			if err != nil {
				t.Fatalf("%s: %v", when, err)
			}
		}
		check("staged")
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = mustOpen(t, be, dir, testOpts())
		check("after reopen")

		// Mistakes: Add on a table that cannot add, writes in View, a value
		// a codec refuses.
		err := s.View(func(tx *Tx) error {
			if _, err := testAccounts.Add(tx, "alice", account{}); !errors.Is(err, ErrNotInt64) {
				return fmt.Errorf("Add on a JSON table: %v", err)
			}
			if err := testBalances.Put(tx, "x", 1); !errors.Is(err, ErrReadOnly) {
				return fmt.Errorf("Put in View: %v", err)
			}
			if _, err := testBalances.Add(tx, "x", 1); !errors.Is(err, ErrReadOnly) {
				return fmt.Errorf("Add in View: %v", err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		apply(3, func(tx *Tx) error { return tx.Bucket("upper").Put([]byte("k"), []byte("lower")) })
		err = s.View(func(tx *Tx) error {
			if _, _, err := testUpper.Get(tx, []byte("k")); err == nil {
				return errors.New("Get of a value its codec refuses succeeded")
			}
			n := 0
			for range testUpper.All(tx) {
				n++
			}
			if n != 0 || tx.Err() == nil {
				return fmt.Errorf("the loop over a value its codec refuses yielded %d, Err %v", n, tx.Err())
			}
			return nil
		})
		if err == nil {
			t.Fatal("View returned nil after its loop met a value that does not decode")
		}
		var kept *Tx
		apply(4, func(tx *Tx) error { kept = tx; return nil })
		if _, _, err := testBalances.Get(kept, "alice"); !errors.Is(err, ErrTxDone) {
			t.Fatalf("Get on a finished Tx: %v", err)
		}
		if err := testBalances.Put(kept, "alice", 1); !errors.Is(err, ErrTxDone) {
			t.Fatalf("Put on a finished Tx: %v", err)
		}
	})
}

// The first write through a table records its schema, which a tool reads
// back; a bucket written with raw bytes has none.
func TestTableSchemaIsRecorded(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		dir := t.TempDir()
		s := mustOpen(t, be, dir, testOpts())
		ns := s.Namespace("ledger")
		ctx := context.Background()
		_, err := ns.Apply(ctx, del("f", 1, 1), func(tx *Tx) error {
			if _, err := testBalances.Add(tx, "alice", 1); err != nil {
				return err
			}
			if err := testAccounts.Put(tx, "alice", account{"A", 1}); err != nil {
				return err
			}
			return tx.Bucket("raw").Put([]byte("k"), []byte("v"))
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = mustOpen(t, be, dir, testOpts())
		err = s.Namespace("ledger").Snapshot(ctx, func(tx *Tx) error {
			for _, c := range []struct {
				bucket string
				want   Schema
				ok     bool
			}{
				{"balances", Schema{"string", "int64"}, true},
				{"accounts", Schema{"string", "json"}, true},
				{"raw", Schema{}, false},
			} {
				got, ok, err := tx.Bucket(c.bucket).Schema()
				if err != nil || ok != c.ok || got != c.want {
					return fmt.Errorf("schema of %s = %+v, %v, %v; want %+v, %v", c.bucket, got, ok, err, c.want, c.ok)
				}
			}
			bs, err := tx.Buckets()
			if err != nil || !slices.Equal(bs, []string{"accounts", "balances", "raw"}) {
				return fmt.Errorf("Buckets = %q, %v", bs, err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// A table's schema is recorded with the first batch that holds the
// table's writes, not in a commit of its own: the first line of a new
// store does not wait inside its function for the backend, twice, for
// two tables. It is not in the backend before that batch, and is after
// it; a line that fails after its table's first write leaves the schema
// in the batch (it serves tools only).
func TestTableSchemaGoesWithTheBatch(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		dir := t.TempDir()
		s := mustOpen(t, be, dir, testOpts())
		c := s.(*nsStore).c
		ns := s.Namespace("ledger")
		ctx := context.Background()
		inBackend := func(bucket string) bool {
			t.Helper()
			_, ok, err := c.eng.get(schemaKey("ledger", bucket))
			if err != nil {
				t.Fatal(err)
			}
			return ok
		}
		_, err := ns.Apply(ctx, del("f", 1, 1), func(tx *Tx) error {
			if _, err := testBalances.Add(tx, "alice", 1); err != nil {
				return err
			}
			return testAccounts.Put(tx, "alice", account{"A", 1})
		})
		if err != nil {
			t.Fatal(err)
		}
		_, err = ns.Apply(ctx, del("f", 1, 2), func(tx *Tx) error {
			if _, err := NewTable("failed", String{}, Int64{}).Add(tx, "bob", 1); err != nil {
				return err
			}
			return errLine
		})
		if !errors.Is(err, errLine) {
			t.Fatalf("the failing line: %v", err)
		}
		for _, b := range []string{"balances", "accounts", "failed"} {
			if inBackend(b) {
				t.Fatalf("the schema of %s is in the backend before its batch committed", b)
			}
		}
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		for _, b := range []string{"balances", "accounts", "failed"} {
			if !inBackend(b) {
				t.Fatalf("the schema of %s is not in the backend after its batch committed", b)
			}
		}
		err = ns.View(func(tx *Tx) error {
			if n, _, err := testBalances.Get(tx, "alice"); err != nil || n != 1 {
				return fmt.Errorf("alice %d, %v; want 1", n, err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// AddEncoded adds to the key whose encoding it is given, as Add does to
// the key: the same value, staged, durable and read back through the
// table; the bytes it was given are not kept (the caller's buffer changes
// after each call); an encoding the key codec does not decode is refused
// and writes nothing; a failed Apply keeps nothing of it; a done Tx and
// View refuse it.
func TestTableAddEncoded(t *testing.T) {
	byNum := NewTable("enc-num", Int64{}, Int64{})
	forEachBackend(t, func(t *testing.T, be backend) {
		s := mustOpen(t, be, t.TempDir(), testOpts())
		ctx := context.Background()
		buf := []byte("alice")
		var kept *Tx
		if _, err := s.Apply(ctx, del("f", 1, 1), func(tx *Tx) error {
			kept = tx
			if v, err := testBalances.AddEncoded(tx, buf, 100); err != nil || v != 100 {
				return fmt.Errorf("AddEncoded = %d, %v", v, err)
			}
			copy(buf, "bobby") // the caller's buffer, reused
			if v, err := testBalances.AddEncoded(tx, buf, 7); err != nil || v != 7 {
				return fmt.Errorf("AddEncoded of another key in the same buffer = %d, %v", v, err)
			}
			if v, err := testBalances.Add(tx, "alice", 1); err != nil || v != 101 {
				return fmt.Errorf("Add after AddEncoded = %d, %v", v, err)
			}
			k, _ := Int64{}.AppendKey(nil, -5)
			if v, err := byNum.AddEncoded(tx, k, 3); err != nil || v != 3 {
				return fmt.Errorf("AddEncoded of an int64 key = %d, %v", v, err)
			}
			if _, err := byNum.AddEncoded(tx, k[:5], 3); err == nil || !errors.Is(err, ErrNotInt64) {
				return fmt.Errorf("AddEncoded of 5 bytes for an int64 key: %v, want ErrNotInt64", err)
			}
			if _, err := testByID.AddEncoded(tx, k, "x"); !errors.Is(err, ErrNotInt64) {
				return fmt.Errorf("AddEncoded on a table of strings: %v, want ErrNotInt64", err)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := testBalances.AddEncoded(kept, []byte("alice"), 1); !errors.Is(err, ErrTxDone) {
			t.Fatalf("AddEncoded on a done Tx: %v, want ErrTxDone", err)
		}
		boom := errors.New("boom")
		if _, err := s.Apply(ctx, del("f", 1, 2), func(tx *Tx) error {
			if _, err := testBalances.AddEncoded(tx, []byte("alice"), 1000); err != nil {
				return err
			}
			if _, err := testBalances.AddEncoded(tx, []byte("carol"), 1000); err != nil {
				return err
			}
			return boom
		}); !errors.Is(err, boom) {
			t.Fatalf("Apply: %v, want boom", err)
		}
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := s.View(func(tx *Tx) error {
			if _, err := testBalances.AddEncoded(tx, []byte("alice"), 1); !errors.Is(err, ErrReadOnly) {
				return fmt.Errorf("AddEncoded in View: %v, want ErrReadOnly", err)
			}
			got := map[string]int64{}
			for k, v := range testBalances.All(tx) {
				got[k] = v
			}
			if want := map[string]int64{"alice": 101, "bobby": 7}; fmt.Sprint(got) != fmt.Sprint(want) {
				return fmt.Errorf("balances %v, want %v", got, want)
			}
			n := map[int64]int64{}
			for k, v := range byNum.All(tx) {
				n[k] = v
			}
			if fmt.Sprint(n) != fmt.Sprint(map[int64]int64{-5: 3}) {
				return fmt.Errorf("int64 keys %v, want map[-5:3]", n)
			}
			return tx.Err()
		}); err != nil {
			t.Fatal(err)
		}
	})
}
