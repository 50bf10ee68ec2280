package state

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// The index finds every entry it holds, through collisions and growth,
// and nothing else.
func TestIndexFindsEveryKey(t *testing.T) {
	bi := newBucketInfo("ns", "b")
	for _, hashes := range []struct {
		name string
		h    func(k []byte) uint64
	}{
		{"hashKey", func(k []byte) uint64 { return hashKey(bi.ph, k) }},
		// Seven hashes for a thousand keys: long probe runs, equal hashes
		// with other keys.
		{"colliding", func(k []byte) uint64 { return hashKey(bi.ph, k) % 7 }},
	} {
		t.Run(hashes.name, func(t *testing.T) {
			q := func(k []byte) *bkey { return &bkey{prefix: bi.prefix, key: k, h: hashes.h(k)} }
			ix := newIndex(0)
			ents := make([]entry, 1000)
			keys := make([][]byte, len(ents))
			for i := range ents {
				keys[i] = fmt.Appendf(nil, "key-%d", i)
				ents[i] = entry{key: q(keys[i]).appendTo(nil), h: hashes.h(keys[i])}
				ix.insert(&ents[i])
				for j := 0; j <= i; j += 1 + i/10 {
					if e := ix.get(q(keys[j])); e != &ents[j] {
						t.Fatalf("after %d inserts: key %q finds %v", i+1, keys[j], e)
					}
				}
			}
			if ix.n != len(ents) || 2*ix.n > len(ix.slots) {
				t.Fatalf("%d entries in %d slots", ix.n, len(ix.slots))
			}
			for i := range ents {
				if e := ix.get(q(keys[i])); e != &ents[i] {
					t.Fatalf("key %q finds %v", keys[i], e)
				}
				absent := fmt.Appendf(nil, "absent-%d", i)
				if e := ix.get(q(absent)); e != nil {
					t.Fatalf("absent key %q finds %q", absent, e.key)
				}
			}
		})
	}
}

// A key of a bucket is its full key and no other: the same key in another
// bucket, or split elsewhere between prefix and key, is another key; an
// entry made through another bucketInfo of the same bucket is the same.
func TestBKeyIsItsFullKey(t *testing.T) {
	a, b := newBucketInfo("ns", "a"), newBucketInfo("ns", "b")
	var q bkey
	q.set(a, []byte("k1"))
	full := q.appendTo(nil)
	if string(full) != string(a.prefix)+"k1" {
		t.Fatalf("full key %q", full)
	}
	bt := newBatch(1, 0, nil)
	e := bt.add(&q)
	var again bkey
	again.set(newBucketInfo("ns", "a"), []byte("k1"))
	for _, same := range []*bkey{&q, &again} {
		if !same.isEntry(e) || !same.isEntry(&entry{key: full}) || bt.get(same) != e {
			t.Fatalf("%q is not its own entry", full)
		}
	}
	var qb bkey
	qb.set(b, []byte("k1"))
	if qb.isEntry(e) || bt.get(&qb) != nil {
		t.Fatalf("%q of bucket b is the entry of bucket a", qb.key)
	}
	for _, other := range [][]byte{
		qb.appendTo(nil),
		append(append([]byte{}, a.prefix...), "k"...),
		append(append([]byte{}, a.prefix...), "k12"...),
		[]byte("k1"),
		nil,
	} {
		if q.isEntry(&entry{key: other}) {
			t.Fatalf("%q is %q", full, other)
		}
	}
}

// Distinct keys of every length up to 40 bytes, in two buckets, hash
// apart; the same key hashes the same every time.
func TestHashKeySpreads(t *testing.T) {
	seen := make(map[uint64]string)
	for _, bi := range []*bucketInfo{newBucketInfo("", ""), newBucketInfo("", "b")} {
		for n := range 41 {
			for v := range 300 {
				k := make([]byte, n)
				for i := range k {
					k[i] = byte(v >> (8 * (i % 2)))
				}
				if n > 0 {
					k[n-1] ^= byte(v)
					k[0] ^= byte(v >> 4)
				}
				id := fmt.Sprintf("%q/%x", bi.name, k)
				h := hashKey(bi.ph, k)
				if h != hashKey(bi.ph, k) {
					t.Fatalf("key %s hashes twice differently", id)
				}
				if prev, dup := seen[h]; dup && prev != id {
					t.Fatalf("keys %s and %s hash alike: %x", prev, id, h)
				}
				seen[h] = id
			}
		}
	}
}

// A transaction that uses more buckets than it keeps in itself: each name
// gives back the same handle inside the transaction, every write lands in
// its own bucket, and a handle kept past the function is done.
func TestManyBucketsInOneTx(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		s := mustOpen(t, be, t.TempDir(), testOpts())
		names := []string{"", "a", "b", "c", "d", "e", "f"}
		var kept []*Bucket
		for n := 1; n <= 3; n++ {
			_, err := s.Apply(context.Background(), del("f", 1, n), func(tx *Tx) error {
				kept = kept[:0]
				for i, name := range names {
					b := tx.Bucket(name)
					if again := tx.Bucket(name); again != b {
						return fmt.Errorf("bucket %q: a second handle", name)
					}
					if _, err := b.AddInt64([]byte("k"), int64(i+1)); err != nil {
						return err
					}
					kept = append(kept, b)
				}
				// The handles still name their buckets after others were
				// asked for.
				for i, name := range names {
					if v, err := tx.Bucket(name).GetInt64([]byte("k")); err != nil || v != int64(n*(i+1)) {
						return fmt.Errorf("line %d: bucket %q holds %d, %v; want %d", n, name, v, err, n*(i+1))
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			for i, b := range kept {
				if _, err := b.GetInt64([]byte("k")); !errors.Is(err, ErrTxDone) {
					t.Fatalf("bucket %q read after fn returned: %v", names[i], err)
				}
			}
		}
		err := s.View(func(tx *Tx) error {
			for i, name := range names {
				if v, err := tx.Bucket(name).GetInt64([]byte("k")); err != nil || v != int64(3*(i+1)) {
					return fmt.Errorf("bucket %q holds %d, %v; want %d", name, v, err, 3*(i+1))
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// Entries taken out of the index leave every other entry findable, through
// runs of colliding hashes that wrap around the table's end.
func TestIndexRemove(t *testing.T) {
	bi := newBucketInfo("ns", "b")
	for _, mod := range []uint64{1 << 62, 5} {
		ix := newIndex(0)
		var ents []*entry
		in := map[*entry]bool{}
		q := func(e *entry) *bkey { return &bkey{key: e.key, h: e.h} }
		for i := range 600 {
			k := fmt.Appendf(nil, "%skey-%d", bi.prefix, i)
			// Hashes near the table's end: runs wrap around.
			e := &entry{key: k, h: hashKey(bi.ph, k)%mod | 0xfff0}
			ix.insert(e)
			ents = append(ents, e)
			in[e] = true
			if i%3 == 2 {
				// Take out one of the entries in, oldest and newest in turn.
				j := (i * 7) % len(ents)
				if in[ents[j]] {
					ix.remove(ents[j])
					in[ents[j]] = false
				}
			}
			for _, f := range ents {
				got := ix.get(q(f))
				if in[f] && got != f || !in[f] && got != nil {
					t.Fatalf("mod %d, after %d inserts: key %q finds %v, in the index: %v", mod, i+1, f.key, got, in[f])
				}
			}
		}
		n := 0
		for _, ok := range in {
			if ok {
				n++
			}
		}
		if ix.n != n {
			t.Fatalf("index counts %d entries, holds %d", ix.n, n)
		}
	}
}

// writeOrder sorts the writes of a commit as bytes.Compare orders their
// keys, whatever the keys share: long common prefixes, keys that are the
// start of others, zero and 0xff bytes where a padded rank would tie, and
// groups of keys that tie on 8 bytes at several depths. Each write keeps
// its value.
func TestWriteOrderSortsByKey(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	parts := [][]byte{{}, {0}, {0, 0}, {0xff}, []byte("a"), []byte("account-0000"), []byte("ledger"), {1, 2, 3, 4, 5, 6, 7, 8}, []byte("\x00\x00\x00\x00\x00\x00\x00\x00x")}
	var o writeOrder
	for round := range 2000 {
		n := rng.IntN(60)
		switch {
		case round%100 == 0:
			n = 3000
		case round%10 == 0: // about radixMin: the radix passes, or not
			n = radixMin - 5 + rng.IntN(400)
		}
		seen := map[string]bool{}
		var ws []write
		for len(ws) < n {
			var k []byte
			for range rng.IntN(6) {
				k = append(k, parts[rng.IntN(len(parts))]...)
			}
			for range rng.IntN(3) {
				k = append(k, byte(rng.IntN(4)))
			}
			if seen[string(k)] {
				continue
			}
			seen[string(k)] = true
			ws = append(ws, write{key: k, val: []byte("v" + string(k)), del: len(k)%3 == 0})
		}
		want := slices.Clone(ws)
		slices.SortFunc(want, func(a, b write) int { return bytes.Compare(a.key, b.key) })
		o.sort(ws)
		for i := range ws {
			if !bytes.Equal(ws[i].key, want[i].key) || !bytes.Equal(ws[i].val, want[i].val) || ws[i].del != want[i].del {
				t.Fatalf("round %d, %d keys: at %d got key %q, want %q", round, n, i, ws[i].key, want[i].key)
			}
		}
	}
}

// mergePresorted merges a short list of writes in key order into a long
// one, each write once, in key order, with its value and deletion: the
// short list's writes before, among and after the long one's, and either
// list empty; into the memory of the list of the round before.
func TestMergePresortedMergesInKeyOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var got []write
	for round := range 500 {
		n := rng.IntN(200)
		seen := map[string]bool{}
		var all []write
		for len(all) < n {
			k := []byte{byte(rng.IntN(8)), byte(rng.IntN(256)), byte(rng.IntN(4))}[:1+rng.IntN(3)]
			if seen[string(k)] {
				continue
			}
			seen[string(k)] = true
			all = append(all, write{key: k, val: []byte{byte(len(all))}, del: rng.IntN(5) == 0})
		}
		var short, long []write
		for _, w := range all {
			if rng.IntN(10) < round%4 {
				short = append(short, w)
			} else {
				long = append(long, w)
			}
		}
		byKey := func(a, b write) int { return bytes.Compare(a.key, b.key) }
		slices.SortFunc(short, byKey)
		slices.SortFunc(long, byKey)
		want := slices.Clone(all)
		slices.SortFunc(want, byKey)
		got = mergePresorted(got, short, long)
		if len(got) != len(want) {
			t.Fatalf("round %d: %d writes, want %d", round, len(got), len(want))
		}
		for i := range got {
			if !bytes.Equal(got[i].key, want[i].key) || !bytes.Equal(got[i].val, want[i].val) || got[i].del != want[i].del {
				t.Fatalf("round %d: at %d got %+v, want %+v", round, i, got[i], want[i])
			}
		}
	}
}

// BenchmarkWriteOrder sorts the writes of a ledger's commit: 6,300
// balances of 10,000 accounts (a batch of 10,000 lines), named as
// examples/ledger names them, in the order of their first change.
func BenchmarkWriteOrder(b *testing.B) {
	names := []string{"alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi",
		"ivan", "judy", "mallory", "niaj", "olivia", "peggy", "rupert",
		"sybil", "trent", "victor", "walter", "zoë"}
	rng := rand.New(rand.NewPCG(3, 4))
	seen := map[int]bool{}
	var ws []write
	for len(ws) < 6300 {
		a := rng.IntN(10000)
		if seen[a] {
			continue
		}
		seen[a] = true
		k := append(dataPrefix("ledger", "balances"), fmt.Sprintf("%s-%d", names[a%len(names)], a/len(names))...)
		ws = append(ws, write{key: k, val: []byte("12345678")})
	}
	in := slices.Clone(ws)
	var o writeOrder
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		copy(ws, in)
		o.sort(ws)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(ws)), "ns/key")
}
