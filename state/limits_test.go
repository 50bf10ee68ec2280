package state

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// permanent is how the framework recognises an error not worth a retry.
type permanent interface{ Permanent() bool }

// checkTooLarge checks that err is a TooLargeError of what, permanent,
// naming everything a user needs.
func checkTooLarge(t *testing.T, err error, what string, s Store, bucket string, feed string, pos int64) *TooLargeError {
	t.Helper()
	var te *TooLargeError
	if !errors.Is(err, ErrTooLarge) || !errors.As(err, &te) {
		t.Fatalf("error %v: want a *TooLargeError wrapping ErrTooLarge", err)
	}
	var p permanent
	if !errors.As(err, &p) || !p.Permanent() {
		t.Fatalf("error %v is not permanent", err)
	}
	if te.What != what || te.Backend != s.Backend() || te.Bucket != bucket || te.Feed != feed || te.Position != pos || te.Len <= te.Limit {
		t.Fatalf("error fields: %+v", te)
	}
	for _, want := range []string{what, fmt.Sprint(te.Len), fmt.Sprint(te.Limit), s.Backend(), fmt.Sprintf("%q", bucket), fmt.Sprintf("feed %q", feed), fmt.Sprintf("position %d", pos), s.Dir(), "failure policy"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error does not say %q: %v", want, err)
		}
	}
	return te
}

// TestWriteTooLargeForTheBackendIsRefusedInApply is the ledger line whose
// account is 40,000 bytes: bbolt cannot store the key, and the whole batch
// failed at commit on every restart. Now the Put fails, the line is refused
// (nothing of it staged, even when the function ignores the error), and the
// lines after it commit.
func TestWriteTooLargeForTheBackendIsRefusedInApply(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		dir := t.TempDir()
		s := mustOpen(t, be, dir, testOpts())
		ctx := context.Background()
		ledger := s.Namespace("ledger")
		account := bytes.Repeat([]byte{'a', 0x01}, 20000) // 40,000 bytes
		var p progress
		if err := s.Bind("in", hold("in", &p)); err != nil {
			t.Fatal(err)
		}
		post := func(n int, acct []byte, ignore bool) (bool, error) {
			return ledger.Apply(ctx, del("in", 1, n), func(tx *Tx) error {
				if _, err := tx.AddInt64([]byte("lines"), 1); err != nil {
					return err
				}
				_, err := tx.Bucket("balances").AddInt64(acct, 10)
				if ignore {
					return nil
				}
				return err
			})
		}
		for n := 1; n <= 2; n++ {
			if _, err := post(n, []byte("bob"), false); err != nil {
				t.Fatal(err)
			}
		}
		ok, err := post(3, account, false)
		if be.name == Pebble {
			// Pebble takes a key of 40,000 bytes.
			if !ok || err != nil {
				t.Fatalf("pebble: Apply of a 40,000-byte key: %v, %v", ok, err)
			}
		} else {
			if ok {
				t.Fatal("the line was applied")
			}
			te := checkTooLarge(t, err, "key", s, "balances", "in", 30)
			if !bytes.Equal(te.KeyStart, account[:32]) || te.KeyLen != len(account) || !strings.Contains(err.Error(), `"a\x01a\x01`) {
				t.Fatalf("the error does not show the key's start, escaped: %v", err)
			}
			// A function that goes on after the refusal does not save the
			// line either.
			ok, err = post(3, account, true)
			if ok {
				t.Fatal("the line was applied though its write was refused")
			}
			checkTooLarge(t, err, "key", s, "balances", "in", 30)
			// Nothing of the line is staged: its count, its position.
			if got := getInt(t, ledger, "lines"); got != 2 {
				t.Fatalf("lines = %d after the refused line, want 2", got)
			}
		}
		for n := 4; n <= 5; n++ {
			if ok, err := post(n, []byte("bob"), false); !ok || err != nil {
				t.Fatalf("line %d after the refused one: %v, %v", n, ok, err)
			}
		}
		if err := s.Flush(ctx); err != nil {
			t.Fatalf("the batch after a refused line does not commit: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = mustOpen(t, be, dir, testOpts())
		ledger = s.Namespace("ledger")
		want := int64(4)
		if be.name == Pebble {
			want = 5
		}
		if got := getInt(t, ledger, "lines"); got != want {
			t.Fatalf("after reopen lines = %d, want %d", got, want)
		}
		if l, _ := ledger.Applied("in"); l.Position != 50 {
			t.Fatalf("after reopen Applied = %+v", l)
		}
	})
}

// TestBackendLimitsAreTheBackends: the limits the store checks are the
// ones the backend really has. bbolt takes a key of exactly MaxKeySize
// bytes with the store's prefix, and refuses one byte more at commit; the
// store refuses that byte in Apply. Pebble takes a key and a value at the
// store's limits.
func TestBackendLimitsAreTheBackends(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		dir := t.TempDir()
		s := mustOpen(t, be, dir, testOpts())
		c := s.(*nsStore).c
		maxKey, maxVal := c.rawEngine().limits()
		switch be.name {
		case Bolt:
			if maxKey != bolt.MaxKeySize || maxVal != bolt.MaxValueSize {
				t.Fatalf("bbolt limits %d, %d", maxKey, maxVal)
			}
			// bbolt itself refuses the longer key: the commit would fail.
			long := bytes.Repeat([]byte("k"), maxKey+1)
			if err := c.rawEngine().commit([]write{{key: long, val: []byte("v")}}); err == nil {
				t.Fatal("bbolt took a key longer than its limit: the limit is wrong")
			}
		case Pebble:
			if maxKey != pebbleMaxKey || maxVal != pebbleMaxValue {
				t.Fatalf("pebble limits %d, %d", maxKey, maxVal)
			}
		}
		ctx := context.Background()
		bi := newBucketInfo("", "b")
		key := bytes.Repeat([]byte("k"), maxKey-len(bi.prefix))
		var val []byte
		if be.name == Pebble {
			val = bytes.Repeat([]byte("v"), maxVal)
		}
		if _, err := s.Apply(ctx, del("f", 1, 1), func(tx *Tx) error { return tx.Bucket("b").Put(key, val) }); err != nil {
			t.Fatalf("a key of %d bytes with the prefix: %v", maxKey, err)
		}
		_, err := s.Apply(ctx, del("f", 1, 2), func(tx *Tx) error { return tx.Bucket("b").Put(append(key, 'k'), nil) })
		checkTooLarge(t, err, "key", s, "b", "f", 20)
		if be.name == Pebble {
			_, err := s.Apply(ctx, del("f", 1, 2), func(tx *Tx) error { return tx.Put([]byte("v"), append(val, 'v')) })
			checkTooLarge(t, err, "value", s, "", "f", 20)
		}
		// A Delete of a key too long to be stored does nothing.
		if _, err := s.Apply(ctx, del("f", 1, 2), func(tx *Tx) error { return tx.Bucket("b").Delete(append(key, 'k')) }); err != nil {
			t.Fatalf("Delete of a key too long to exist: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("the batch at the limits does not commit: %v", err)
		}
		s = mustOpen(t, be, dir, testOpts())
		err = s.View(func(tx *Tx) error {
			v, ok, err := tx.Bucket("b").Get(key)
			if err != nil || !ok || len(v) != len(val) {
				return fmt.Errorf("the key at the limit after reopen: %d bytes, %v, %v", len(v), ok, err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if l, _ := s.Applied("f"); l.Position != 20 {
			t.Fatalf("Applied = %+v", l)
		}
	})
}

// TestValueTooLarge: a value longer than the backend takes (a store with
// small limits, to spare the test gigabytes) is refused like a key, with
// Put, PutInt64 not concerned (8 bytes).
func TestValueTooLarge(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		s := mustOpen(t, be, t.TempDir(), testOpts())
		c := s.(*nsStore).c
		c.maxVal = 100
		ctx := context.Background()
		_, err := s.Apply(ctx, del("f", 3, 7), func(tx *Tx) error {
			if err := tx.Put([]byte("ok"), make([]byte, 100)); err != nil {
				return err
			}
			return tx.Bucket("blobs").Put([]byte("big"), make([]byte, 101))
		})
		te := checkTooLarge(t, err, "value", s, "blobs", "f", 70)
		if te.Epoch != 3 || te.Len != 101 || te.Limit != 100 || !strings.Contains(err.Error(), `"big"`) {
			t.Fatalf("error: %+v", te)
		}
		if _, err := s.Apply(ctx, del("f", 3, 7), func(tx *Tx) error { return tx.Put([]byte("ok"), make([]byte, 100)) }); err != nil {
			t.Fatalf("the line again, within the limit: %v", err)
		}
	})
}

// TestFeedNameTooLongForTheBackend: the record of a feed's position is a
// key too; a feed whose name the backend cannot take fails its first
// Apply rather than every commit.
func TestFeedNameTooLongForTheBackend(t *testing.T) {
	s := mustOpen(t, backends()[0], t.TempDir(), testOpts())
	feed := strings.Repeat("f", bolt.MaxKeySize)
	_, err := s.Apply(context.Background(), del(feed, 1, 1), func(tx *Tx) error { return nil })
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Apply of a feed named with %d bytes: %v", len(feed), err)
	}
	applyLine(t, s, del("f", 1, 1))
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestBigBatchIsCut: a batch is cut once it holds maxBatchBytes (here a
// store made to cut at 1 MiB), whatever BatchSize says, so that no backend
// is given a transaction it cannot hold.
func TestBigBatchIsCut(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		o := testOpts()
		var sizes batchSizes
		o.Observer = &sizes
		s := mustOpen(t, be, t.TempDir(), o)
		s.(*nsStore).c.maxBytes = 1 << 20
		ctx := context.Background()
		val := make([]byte, 64<<10)
		for n := 1; n <= 40; n++ {
			if _, err := s.Apply(ctx, del("f", 1, n), func(tx *Tx) error {
				if err := tx.Put([]byte(fmt.Sprint("k", n)), val); err != nil {
					return err
				}
				_, err := tx.Output("out").Write(val[:1024])
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		sizes.mu.Lock()
		got := sizes.counts
		sizes.mu.Unlock()
		if len(got) < 2 || got[0] > 16 {
			t.Fatalf("batches of %v lines of 65 KiB: the first was not cut at 1 MiB", got)
		}
	})
}
