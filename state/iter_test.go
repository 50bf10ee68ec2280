package state

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
)

// model is what a bucket holds, as a map.
type model map[string]string

func (m model) clone() model {
	c := make(model, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// span is one way of iterating a bucket, with the model's answer.
type span struct {
	name     string
	from, to []byte // nil: open
	prefix   []byte
	kind     int
	rev      bool
}

const (
	spanRange = iota
	spanFrom
	spanPrefix
	spanReverseFrom
)

// want returns the keys and values of m that s selects, in its order.
func (s span) want(m model) []string {
	var ks []string
	for k := range m {
		kb := []byte(k)
		var in bool
		switch s.kind {
		case spanRange:
			in = (s.from == nil || bytes.Compare(kb, s.from) >= 0) && (s.to == nil || bytes.Compare(kb, s.to) < 0)
		case spanFrom:
			in = bytes.Compare(kb, s.from) >= 0
		case spanPrefix:
			in = bytes.HasPrefix(kb, s.prefix)
		case spanReverseFrom:
			in = bytes.Compare(kb, s.from) <= 0
		}
		if in {
			ks = append(ks, k)
		}
	}
	sort.Strings(ks)
	if s.rev {
		slices.Reverse(ks)
	}
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = fmt.Sprintf("%q=%q", k, m[k])
	}
	return out
}

// seq returns s's sequence of b.
func (s span) seq(b *Bucket) iter.Seq2[[]byte, []byte] {
	switch {
	case s.kind == spanRange && !s.rev && s.from == nil && s.to == nil:
		return b.All()
	case s.kind == spanRange && s.rev && s.from == nil && s.to == nil:
		return b.Reverse()
	case s.kind == spanRange && !s.rev:
		return b.Range(s.from, s.to)
	case s.kind == spanRange:
		return b.ReverseRange(s.from, s.to)
	case s.kind == spanFrom:
		return b.From(s.from)
	case s.kind == spanPrefix && !s.rev:
		return b.Prefix(s.prefix)
	case s.kind == spanPrefix:
		return b.ReversePrefix(s.prefix)
	}
	return b.ReverseFrom(s.from)
}

func collect(seq iter.Seq2[[]byte, []byte]) []string {
	out := []string{}
	for k, v := range seq {
		out = append(out, fmt.Sprintf("%q=%q", k, v))
	}
	return out
}

// iterKeys are the keys the model test uses: neighbours in byte order,
// the empty key, 0x00 and 0xff bytes at the ends.
func iterKeys() []string {
	ks := []string{"", "\x00", "\xff", "\xff\xff", "k", "k\x00", "k\xff", "kk", "a", "ab"}
	for i := range 120 {
		ks = append(ks, fmt.Sprintf("k%03d", i))
	}
	return ks
}

func randomSpan(r *rand.Rand, keys []string) span {
	pick := func() []byte {
		if r.IntN(8) == 0 {
			return nil
		}
		k := keys[r.IntN(len(keys))]
		if r.IntN(3) == 0 && len(k) > 1 {
			k = k[:len(k)-1] + string(rune('0'+r.IntN(10)))
		}
		return []byte(k)
	}
	s := span{kind: r.IntN(4), rev: r.IntN(2) == 0}
	switch s.kind {
	case spanRange:
		s.from, s.to = pick(), pick()
	case spanFrom:
		s.rev = false
		if s.from = pick(); s.from == nil {
			s.from = []byte{}
		}
	case spanPrefix:
		p := pick()
		if len(p) > 2 {
			p = p[:r.IntN(3)]
		}
		s.prefix = append([]byte{}, p...)
	case spanReverseFrom:
		s.rev = true
		if s.from = pick(); s.from == nil {
			s.from = []byte("\xff\xff\xff")
		}
	}
	s.name = fmt.Sprintf("kind %d rev %v from %q to %q prefix %q", s.kind, s.rev, s.from, s.to, s.prefix)
	return s
}

// pause holds the committer before each commit while it is set.
type pause struct {
	ch      atomic.Pointer[chan struct{}]
	entered chan struct{}
}

func newPause() *pause { return &pause{entered: make(chan struct{}, 1000)} }

func (p *pause) hook() {
	if ch := p.ch.Load(); ch != nil {
		p.entered <- struct{}{}
		<-*ch
	}
}

func (p *pause) hold() { ch := make(chan struct{}); p.ch.Store(&ch) }

func (p *pause) release() {
	if ch := p.ch.Swap(nil); ch != nil {
		close(*ch)
	}
}

// A model of three buckets against every iteration of each, checked inside
// Apply (own writes included), in View and in a Snapshot, while the
// changes are durable, in a batch held committing, and staged over both:
// overwrites and deletes of keys of every layer, across pages of the
// backend's cursor.
func TestIterationMatchesAModel(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		seed := uint64(rand.Int64())
		t.Logf("seed %d", seed)
		r := rand.New(rand.NewPCG(seed, 1))
		p := newPause()
		o := testOpts()
		o.BatchSize = 6
		o.hooks = &hooks{beforeCommit: p.hook}
		s := mustOpen(t, be, t.TempDir(), o)
		t.Cleanup(p.release)
		ctx := context.Background()
		keys := iterKeys()
		buckets := []string{"", "a", "ab"}
		staged := map[string]model{}
		for _, b := range buckets {
			staged[b] = model{}
		}
		durable := map[string]model{}
		snapshotDurable := func() {
			for b, m := range staged {
				durable[b] = m.clone()
			}
		}
		snapshotDurable()
		checkAll := func(tx *Tx, ms map[string]model, where string, n int) error {
			for range 4 {
				b := buckets[r.IntN(len(buckets))]
				sp := randomSpan(r, keys)
				got, want := collect(sp.seq(tx.Bucket(b))), sp.want(ms[b])
				if !slices.Equal(got, want) {
					return fmt.Errorf("%s, bucket %q, %s:\n got  %v\n want %v", where, b, sp.name, got, want)
				}
			}
			if err := tx.Err(); err != nil {
				return fmt.Errorf("%s: %w", where, err)
			}
			_ = n
			return nil
		}
		line := 0
		applyLines := func(count int) {
			t.Helper()
			for range count {
				line++
				_, err := s.Apply(ctx, del("f", 1, line), func(tx *Tx) error {
					for range 1 + r.IntN(12) {
						b := buckets[r.IntN(len(buckets))]
						k := keys[r.IntN(len(keys))]
						if r.IntN(4) == 0 {
							if err := tx.Bucket(b).Delete([]byte(k)); err != nil {
								return err
							}
							delete(staged[b], k)
							continue
						}
						v := strings.Repeat(string(rune('a'+r.IntN(26))), r.IntN(12))
						if err := tx.Bucket(b).Put([]byte(k), []byte(v)); err != nil {
							return err
						}
						staged[b][k] = v
					}
					if r.IntN(3) == 0 {
						return checkAll(tx, staged, fmt.Sprintf("Apply of line %d", line), line)
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			}
		}
		view := func(where string) {
			t.Helper()
			if err := s.View(func(tx *Tx) error { return checkAll(tx, staged, "View "+where, line) }); err != nil {
				t.Fatal(err)
			}
			if err := s.Snapshot(ctx, func(tx *Tx) error { return checkAll(tx, durable, "Snapshot "+where, line) }); err != nil {
				t.Fatal(err)
			}
		}
		for round := range 12 {
			// Staged over durable.
			applyLines(1 + r.IntN(4))
			view(fmt.Sprintf("round %d, staged over durable", round))
			if err := s.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			snapshotDurable()
			view(fmt.Sprintf("round %d, all durable", round))
			// A batch held while it commits, and lines staged over it.
			p.hold()
			applyLines(o.BatchSize) // the last one cuts the batch
			<-p.entered
			applyLines(1 + r.IntN(o.BatchSize-1))
			view(fmt.Sprintf("round %d, staged over a batch committing", round))
			p.release()
			if err := s.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			snapshotDurable()
		}
	})
}

// A loop that writes the bucket it walks (in Apply) never sees a key
// twice, nor fails; a key it deletes ahead of it is not seen.
func TestWritesDuringIteration(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		s := mustOpen(t, be, t.TempDir(), testOpts())
		ctx := context.Background()
		_, err := s.Apply(ctx, del("f", 1, 1), func(tx *Tx) error {
			for i := range 300 {
				if err := tx.Bucket("b").Put(fmt.Appendf(nil, "k%03d", i), []byte("durable")); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		_, err = s.Apply(ctx, del("f", 1, 2), func(tx *Tx) error {
			b := tx.Bucket("b")
			for i := range 300 {
				if i%2 == 0 {
					if err := b.Put(fmt.Appendf(nil, "k%03d", i), []byte("staged")); err != nil {
						return err
					}
				}
			}
			seen := map[string]bool{}
			for k, v := range b.All() {
				if seen[string(k)] {
					return fmt.Errorf("key %s seen twice", k)
				}
				seen[string(k)] = true
				var i int
				fmt.Sscanf(string(k), "k%d", &i)
				// Change the key seen, delete the one after it, add new ones
				// before and after.
				if err := b.Put(k, []byte("changed-in-the-loop")); err != nil {
					return err
				}
				if i%3 == 0 {
					if err := b.Delete(fmt.Appendf(nil, "k%03d", i+1)); err != nil {
						return err
					}
				}
				if err := b.Put(fmt.Appendf(nil, "k%03d-new", i), []byte("x")); err != nil {
					return err
				}
				if err := b.Put(fmt.Appendf(nil, "a%03d", i), []byte("x")); err != nil {
					return err
				}
				if i%3 == 1 {
					return fmt.Errorf("key %s was deleted ahead of the loop, and seen", k)
				}
				if !bytes.Equal(v, []byte("durable")) && !bytes.Equal(v, []byte("staged")) {
					return fmt.Errorf("key %s: value %q", k, v)
				}
			}
			return tx.Err()
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// An Apply whose function iterated, wrote new keys, iterated again and
// failed leaves nothing of its writes for the next loops to see.
func TestIterationAfterARollback(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		s := mustOpen(t, be, t.TempDir(), testOpts())
		ctx := context.Background()
		keys := func(tx *Tx) []string {
			var ks []string
			for k := range tx.Bucket("b").All() {
				ks = append(ks, string(k))
			}
			return ks
		}
		if _, err := s.Apply(ctx, del("f", 1, 1), func(tx *Tx) error { return tx.Bucket("b").Put([]byte("a"), nil) }); err != nil {
			t.Fatal(err)
		}
		boom := errors.New("boom")
		for round := range 3 {
			_, err := s.Apply(ctx, del("f", 1, 2+round), func(tx *Tx) error {
				for i := range 5 + round*300 {
					if err := tx.Bucket("b").Put(fmt.Appendf(nil, "new-%d-%04d", round, i), nil); err != nil {
						return err
					}
					if i%50 == 0 {
						keys(tx)
					}
				}
				if got := len(keys(tx)); got != 1+5+round*300 {
					return fmt.Errorf("%d keys in the loop", got)
				}
				return boom
			})
			if !errors.Is(err, boom) {
				t.Fatal(err)
			}
			// The same positions of the staging batch, filled again.
			_, err = s.Apply(ctx, del("f", 1, 2+round), func(tx *Tx) error {
				if err := tx.Bucket("b").Put([]byte("b"), nil); err != nil {
					return err
				}
				if got := keys(tx); !slices.Equal(got, []string{"a", "b"}) {
					return fmt.Errorf("after a rollback the loop sees %q", got)
				}
				return tx.Bucket("b").Delete([]byte("b"))
			})
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	})
}

// failingEngine fails its cursors after a number of keys.
type failingEngine struct {
	engine
	after int
}

var errInjected = errors.New("injected read failure")

func (e *failingEngine) cursor(lo, hi []byte, rev bool) cursor {
	return &failingCursor{cursor: e.engine.cursor(lo, hi, rev), left: e.after}
}

type failingCursor struct {
	cursor
	left int
}

func (c *failingCursor) next() bool {
	if c.left == 0 {
		return false
	}
	c.left--
	return c.cursor.next()
}

func (c *failingCursor) err() error {
	if c.left == 0 {
		return errInjected
	}
	return c.cursor.err()
}

func (c *failingCursor) close() error { return errors.Join(c.cursor.close(), c.err()) }

// A read of the backend that fails during a loop ends it, and the error
// reaches the caller even when the function ignores it: Tx.Err, View's and
// Apply's error (and Apply stages nothing of the line).
func TestIterationErrorsFailTheTransaction(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		s := mustOpen(t, be, t.TempDir(), testOpts())
		ctx := context.Background()
		_, err := s.Apply(ctx, del("f", 1, 1), func(tx *Tx) error {
			for i := range 10 {
				if err := tx.Bucket("b").Put(fmt.Appendf(nil, "k%d", i), nil); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		c := s.(*nsStore).c
		c.stopPreload() // it reads through the engine swapped below
		eng := c.eng
		c.eng = &failingEngine{engine: eng, after: 3}
		defer func() { c.eng = eng }()
		n := 0
		err = s.View(func(tx *Tx) error {
			for range tx.Bucket("b").All() {
				n++
			}
			if !errors.Is(tx.Err(), errInjected) {
				return fmt.Errorf("Tx.Err = %v", tx.Err())
			}
			return nil // ignored by the function
		})
		if !errors.Is(err, errInjected) || n != 3 {
			t.Fatalf("View = %v after %d keys; want the injected error after 3", err, n)
		}
		err = s.View(func(tx *Tx) error {
			return tx.Bucket("b").ForEach(func(k, v []byte) error { return nil })
		})
		if !errors.Is(err, errInjected) {
			t.Fatalf("ForEach = %v", err)
		}
		ok, err := s.Apply(ctx, del("f", 1, 2), func(tx *Tx) error {
			if err := tx.Put([]byte("written"), nil); err != nil {
				return err
			}
			for range tx.Bucket("b").All() {
			}
			return nil
		})
		if ok || !errors.Is(err, errInjected) {
			t.Fatalf("Apply = %v, %v; want the injected error", ok, err)
		}
		c.eng = eng
		err = s.View(func(tx *Tx) error {
			if _, ok, _ := tx.Get([]byte("written")); ok {
				return errors.New("the failed Apply's write was staged")
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !applyLine(t, s, del("f", 1, 2)) {
			t.Fatal("the line of the failed Apply is skipped on re-delivery")
		}
	})
}

// A loop that stops early releases its cursor (Pebble would report a
// leaked iterator at Close), and the namespaces and buckets are listed
// from staged and durable keys.
func TestIterationStopsEarlyAndLists(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		dir := t.TempDir()
		s := mustOpen(t, be, dir, testOpts())
		ctx := context.Background()
		for i, ns := range []string{"zz", "a", ""} {
			_, err := s.Namespace(ns).Apply(ctx, del("f", 1, i+1), func(tx *Tx) error {
				for _, b := range []string{"x", "", "long-bucket-name"} {
					for j := range 100 {
						if err := tx.Bucket(b).Put(fmt.Appendf(nil, "%d", j), nil); err != nil {
							return err
						}
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				if err := s.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		err := s.Namespace("a").View(func(tx *Tx) error {
			for range 10 {
				for range tx.Bucket("x").All() {
					break
				}
				for range tx.Bucket("x").Reverse() {
					break
				}
			}
			nss, err := tx.Namespaces()
			if err != nil || !slices.Equal(nss, []string{"", "a", "zz"}) {
				return fmt.Errorf("Namespaces = %q, %v", nss, err)
			}
			bs, err := tx.Buckets()
			if err != nil || !slices.Equal(bs, []string{"", "long-bucket-name", "x"}) {
				return fmt.Errorf("Buckets = %q, %v", bs, err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	})
}
