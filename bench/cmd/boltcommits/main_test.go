package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// TestMeasure: each size rewrites the keys asked for, of the bucket that
// holds the most, in commits of that many keys, on a copy: the file given
// is left as it was.
func TestMeasure(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.bolt")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		small, err := tx.CreateBucket([]byte("small"))
		if err != nil {
			return err
		}
		if err := small.Put([]byte("k"), []byte("v")); err != nil {
			return err
		}
		outer, err := tx.CreateBucket([]byte("outer"))
		if err != nil {
			return err
		}
		inner, err := outer.CreateBucket([]byte("inner"))
		if err != nil {
			return err
		}
		for i := range 5000 {
			if err := inner.Put(fmt.Appendf(nil, "acct%06d", i), []byte("0123456789ab")); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ per, commits int }{{100, 20}, {1000, 2}, {3000, 1}} {
		m, err := measure(path, 2000, c.per, 1)
		if err != nil {
			t.Fatal(err)
		}
		if m.keys != 2000 || m.commits != c.commits || m.pages <= int64(c.commits) || m.wall <= 0 {
			t.Errorf("commits of %d: %+v, want 2000 keys in %d commits, pages written", c.per, m, c.commits)
		}
	}
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Error("the file given was written")
	}
	if _, err := measure(path, 6000, 100, 1); err == nil {
		t.Error("6000 keys asked of a bucket of 5000: no error")
	}
}

// TestPickRewritesValues: the keys picked are the largest bucket's, each
// with a value of its own value's length, and another seed orders them
// otherwise.
func TestPickRewritesValues(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.bolt")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("b"))
		if err != nil {
			return err
		}
		for i := range 1000 {
			if err := b.Put(fmt.Appendf(nil, "k%04d", i), bytes.Repeat([]byte{1}, i%7+1)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	path1, kvs, err := pick(db, 100, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(path1) != 1 || string(path1[0]) != "b" || len(kvs) != 100 {
		t.Fatalf("bucket %q, %d keys", path1, len(kvs))
	}
	err = db.View(func(tx *bolt.Tx) error {
		for _, x := range kvs {
			if old := tx.Bucket([]byte("b")).Get(x.k); len(old) != len(x.v) || bytes.Equal(old, x.v) {
				t.Errorf("key %s: value %x, new %x", x.k, old, x.v)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	_, other, err := pick(db, 100, 2)
	if err != nil {
		t.Fatal(err)
	}
	same := true
	for i := range kvs {
		same = same && bytes.Equal(kvs[i].k, other[i].k)
	}
	if same {
		t.Error("seeds 1 and 2 gave the keys in the same order")
	}
}
