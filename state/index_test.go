package state

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// The index finds every entry it holds, through collisions and growth,
// and nothing else.
func TestIndexFindsEveryKey(t *testing.T) {
	for _, hashes := range []struct {
		name string
		h    func(k []byte) uint64
	}{
		{"hashKey", hashKey},
		// Seven hashes for a thousand keys: long probe runs, equal hashes
		// with other keys.
		{"colliding", func(k []byte) uint64 { return hashKey(k) % 7 }},
	} {
		t.Run(hashes.name, func(t *testing.T) {
			ix := newIndex(0)
			ents := make([]entry, 1000)
			for i := range ents {
				k := fmt.Appendf(nil, "key-%d", i)
				ents[i] = entry{key: k, h: hashes.h(k)}
				ix.insert(&ents[i])
				for j := 0; j <= i; j += 1 + i/10 {
					if e := ix.get(ents[j].h, ents[j].key); e != &ents[j] {
						t.Fatalf("after %d inserts: key %q finds %v", i+1, ents[j].key, e)
					}
				}
			}
			if ix.n != len(ents) || 2*ix.n > len(ix.slots) {
				t.Fatalf("%d entries in %d slots", ix.n, len(ix.slots))
			}
			for i := range ents {
				if e := ix.get(ents[i].h, ents[i].key); e != &ents[i] {
					t.Fatalf("key %q finds %v", ents[i].key, e)
				}
				absent := fmt.Appendf(nil, "absent-%d", i)
				if e := ix.get(hashes.h(absent), absent); e != nil {
					t.Fatalf("absent key %q finds %q", absent, e.key)
				}
			}
		})
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
