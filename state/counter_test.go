package state

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-go/tidemark"
)

// failingKey is a key codec that encodes no key.
type failingKey struct{}

func (failingKey) AppendKey(dst []byte, k string) ([]byte, error) {
	return dst, errors.New("no key encodes")
}
func (failingKey) DecodeKey(b []byte) (string, error) { return string(b), nil }

// TestCounterMatchesTableAdd drives counters, and the same keys through
// their tables (Add, Put, Delete, a value of the wrong length), over two
// namespaces, with Applies that fail and roll back, cuts and reopens, and
// checks every value read against a model. A counter keeps where the
// staging batch holds its key: a memo that a rollback, a cut, another
// namespace or a write through the table made stale must never be used.
func TestCounterMatchesTableAdd(t *testing.T) {
	root := NewTable("", String{}, Int64{})
	sums := NewTable("sums", String{}, Uint64{})
	type ctr struct {
		name  string
		add   func(tx *Tx, d int64) (int64, error)
		get   func(tx *Tx) (int64, error)
		table func(tx *Tx, d int64) (int64, error) // Add through the table
		put   func(tx *Tx, v int64) error
		del   func(tx *Tx) error
		raw   func(tx *Tx) *Bucket // the bucket, for a value of 3 bytes
		key   string
	}
	a, b, x := root.Counter("a"), root.Counter("b"), sums.Counter("x")
	ctrs := []ctr{
		{name: "a", key: "a", add: a.Add, get: a.Get,
			table: func(tx *Tx, d int64) (int64, error) { return root.Add(tx, "a", d) },
			put:   func(tx *Tx, v int64) error { return root.Put(tx, "a", v) },
			del:   func(tx *Tx) error { return root.Delete(tx, "a") },
			raw:   func(tx *Tx) *Bucket { return tx.Bucket("") }},
		{name: "b", key: "b", add: b.Add, get: b.Get,
			table: func(tx *Tx, d int64) (int64, error) { return root.Add(tx, "b", d) },
			put:   func(tx *Tx, v int64) error { return root.Put(tx, "b", v) },
			del:   func(tx *Tx) error { return root.Delete(tx, "b") },
			raw:   func(tx *Tx) *Bucket { return tx.Bucket("") }},
		{name: "x", key: "x",
			add: func(tx *Tx, d int64) (int64, error) { n, err := x.Add(tx, uint64(d)); return int64(n), err },
			get: func(tx *Tx) (int64, error) { n, err := x.Get(tx); return int64(n), err },
			table: func(tx *Tx, d int64) (int64, error) {
				n, err := sums.Add(tx, "x", uint64(d))
				return int64(n), err
			},
			put: func(tx *Tx, v int64) error { return sums.Put(tx, "x", uint64(v)) },
			del: func(tx *Tx) error { return sums.Delete(tx, "x") },
			raw: func(tx *Tx) *Bucket { return tx.Bucket("sums") }},
	}
	forEachBackend(t, func(t *testing.T, be backend) {
		dir := t.TempDir()
		s := mustOpen(t, be, dir, testOpts())
		ctx := context.Background()
		rng := rand.New(rand.NewPCG(1, 2))
		nss := []string{"n1", "n2"}
		// model[ns][counter]: the value, and whether the key holds a
		// value that is not 8 bytes (an Add of it fails).
		type val struct {
			n   int64
			bad bool
		}
		model := map[string]map[string]val{"n1": {}, "n2": {}}
		line := 0
		boom := errors.New("boom")
		for step := 0; step < 3000; step++ {
			var acted bool
			if s, acted = flushOrReopen(t, be, dir, s, rng.IntN(100), 4, 5, testOpts); acted {
				continue
			}
			ns := nss[rng.IntN(len(nss))]
			line++
			next := map[string]val{}
			for k, v := range model[ns] {
				next[k] = v
			}
			fail := rng.IntN(100) < 15
			_, err := s.Namespace(ns).Apply(ctx, del("f", 1, line), func(tx *Tx) error {
				for range 1 + rng.IntN(4) {
					c := ctrs[rng.IntN(len(ctrs))]
					cur := next[c.key]
					d := rng.Int64N(1000) - 300
					switch op := rng.IntN(100); {
					case op < 55, op < 75:
						add := c.add
						if op >= 55 {
							add = c.table
						}
						n, err := add(tx, d)
						if cur.bad {
							if !errors.Is(err, ErrNotInt64) {
								return fmt.Errorf("step %d: %s: Add of a 3-byte value: %v, want ErrNotInt64", step, c.name, err)
							}
							return boom // the model drops this Apply
						}
						if err != nil {
							return fmt.Errorf("step %d: %s: Add: %w", step, c.name, err)
						}
						if want := cur.n + d; n != want {
							return fmt.Errorf("step %d: %s: Add(%d) = %d, want %d", step, c.name, d, n, want)
						}
						next[c.key] = val{n: n + 0}
					case op < 82:
						if err := c.put(tx, d); err != nil {
							return err
						}
						next[c.key] = val{n: d}
					case op < 88:
						if err := c.del(tx); err != nil {
							return err
						}
						next[c.key] = val{}
					case op < 90:
						if err := c.raw(tx).Put([]byte(c.key), []byte("abc")); err != nil {
							return err
						}
						next[c.key] = val{bad: true}
					default:
						if cur.bad {
							continue
						}
						n, err := c.get(tx)
						if err != nil || n != cur.n {
							return fmt.Errorf("step %d: %s: Get = %d, %v, want %d", step, c.name, n, err, cur.n)
						}
					}
				}
				if fail {
					return boom
				}
				return nil
			})
			switch {
			case errors.Is(err, boom):
			case err != nil:
				t.Fatal(err)
			default:
				model[ns] = next
			}
		}
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		for _, ns := range nss {
			if err := s.Namespace(ns).View(func(tx *Tx) error {
				for _, c := range ctrs {
					want := model[ns][c.key]
					v, ok, err := c.raw(tx).Get([]byte(c.key))
					if err != nil {
						return err
					}
					if want.bad {
						if string(v) != "abc" {
							return fmt.Errorf("%s/%s = %q, want the 3-byte value", ns, c.name, v)
						}
						continue
					}
					n, err := c.get(tx)
					if err != nil || n != want.n || (ok && len(v) != 8) {
						return fmt.Errorf("%s/%s = %d, %v, want %d", ns, c.name, n, err, want.n)
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestCounterAfterTheApplyThatMadeItsEntryRolledBack: an Apply makes the
// staging batch's entry of a counter's key and fails, so the entry is
// dropped; the next Apply makes another entry where it was. The counter's
// next Add must find neither the dropped entry nor the other key's.
func TestCounterAfterTheApplyThatMadeItsEntryRolledBack(t *testing.T) {
	root := NewTable("", String{}, Int64{})
	c := root.Counter("c")
	forEachBackend(t, func(t *testing.T, be backend) {
		s := mustOpen(t, be, t.TempDir(), testOpts())
		ns := s.Namespace("ns")
		ctx := context.Background()
		boom := errors.New("boom")
		if _, err := ns.Apply(ctx, del("f", 1, 1), func(tx *Tx) error {
			if _, err := c.Add(tx, 5); err != nil {
				return err
			}
			return boom
		}); !errors.Is(err, boom) {
			t.Fatalf("Apply: %v, want boom", err)
		}
		if _, err := ns.Apply(ctx, del("f", 1, 2), func(tx *Tx) error {
			if _, err := root.Add(tx, "other", 100); err != nil {
				return err
			}
			if n, err := c.Add(tx, 1); err != nil || n != 1 {
				return fmt.Errorf("Add after the rollback = %d, %v, want 1", n, err)
			}
			if n, err := c.Add(tx, 1); err != nil || n != 2 {
				return fmt.Errorf("second Add = %d, %v, want 2", n, err)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		checkTable(t, ns, root, map[string]int64{"c": 2, "other": 100})
	})
}

// checkTable fails t unless table holds want in ns.
func checkTable(t *testing.T, ns Namespace, table *Table[string, int64], want map[string]int64) {
	t.Helper()
	if err := ns.View(func(tx *Tx) error {
		got := map[string]int64{}
		for k, v := range table.All(tx) {
			got[k] = v
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("table %q: %v, want %v", table.Name(), got, want)
		}
		return tx.Err()
	}); err != nil {
		t.Fatal(err)
	}
}

// TestCounterSharedByStores: one Counter, used by the groups of several
// stores at once (a package-level counter in a process that runs several
// partitions), counts each store's lines alone.
func TestCounterSharedByStores(t *testing.T) {
	root := NewTable("", String{}, Int64{})
	c := root.Counter("lines")
	const stores, lines = 3, 2000
	ss := make([]Store, stores)
	for i := range ss {
		ss[i] = mustOpen(t, backends()[i%2], t.TempDir(), &Options{Logger: quietLogger(), Unbound: true, BatchSize: 97})
	}
	var wg sync.WaitGroup
	errs := make([]error, stores)
	for i, s := range ss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 1; n <= lines; n++ {
				if _, err := s.Namespace("ns").Apply(context.Background(), del("f", 1, n), func(tx *Tx) error {
					_, err := c.Add(tx, int64(i+1))
					return err
				}); err != nil {
					errs[i] = err
					return
				}
			}
			errs[i] = s.Flush(context.Background())
		}()
	}
	wg.Wait()
	for i, s := range ss {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if err := s.Namespace("ns").View(func(tx *Tx) error {
			if n, err := c.Get(tx); err != nil || n != int64(lines*(i+1)) {
				return fmt.Errorf("store %d: %d, %v, want %d", i, n, err, lines*(i+1))
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCounterErrors: a counter's calls fail as the table's would, and with
// the error of its key when the key codec refused it.
func TestCounterErrors(t *testing.T) {
	strs := NewTable("strs", String{}, String{}).Counter("k")
	noKey := NewTable("nokey", failingKey{}, Int64{}).Counter("k")
	ok := NewTable("", String{}, Int64{}).Counter("k")
	s := mustOpen(t, backends()[0], t.TempDir(), testOpts())
	ns := s.Namespace("ns")
	ctx := context.Background()
	var kept *Tx
	if _, err := ns.Apply(ctx, del("f", 1, 1), func(tx *Tx) error {
		kept = tx
		if _, err := strs.Add(tx, "x"); !errors.Is(err, ErrNotInt64) {
			return fmt.Errorf("Add on a table of strings: %v, want ErrNotInt64", err)
		}
		if _, err := noKey.Add(tx, 1); err == nil || err.Error() != `table "nokey": counter: encode its key (state.failingKey): no key encodes` {
			return fmt.Errorf("Add of a key the codec refused: %v", err)
		}
		if _, err := noKey.Get(tx); err == nil {
			return errors.New("Get of a key the codec refused: no error")
		}
		_, err := ok.Add(tx, 3)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := ok.Add(kept, 1); !errors.Is(err, ErrTxDone) {
		t.Fatalf("Add on a done Tx: %v, want ErrTxDone", err)
	}
	if err := ns.View(func(tx *Tx) error {
		if _, err := ok.Add(tx, 1); !errors.Is(err, ErrReadOnly) {
			return fmt.Errorf("Add in View: %v, want ErrReadOnly", err)
		}
		if n, err := ok.Get(tx); err != nil || n != 3 {
			return fmt.Errorf("Get in View = %d, %v, want 3", n, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestCounterAfterACut: a counter added to in one batch and not in the
// next ones, whose memory a later batch uses again (the store reuses the
// entries of the batches it committed), must not take the entry of
// another key made where its own was.
func TestCounterAfterACut(t *testing.T) {
	root := NewTable("", String{}, Int64{})
	c := root.Counter("c")
	forEachBackend(t, func(t *testing.T, be backend) {
		s := mustOpen(t, be, t.TempDir(), testOpts())
		ns := s.Namespace("ns")
		ctx := context.Background()
		line := 0
		apply := func(fn func(tx *Tx) error) {
			t.Helper()
			line++
			if _, err := ns.Apply(ctx, del("f", 1, line), fn); err != nil {
				t.Fatal(err)
			}
		}
		flush := func() {
			t.Helper()
			if err := s.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
		want := map[string]int64{}
		for gap := 1; gap <= 4; gap++ {
			apply(func(tx *Tx) error { _, err := c.Add(tx, 1); return err })
			want["c"]++
			flush()
			for i := range gap {
				apply(func(tx *Tx) error { _, err := root.Add(tx, fmt.Sprint("gap", i), 1); return err })
				want[fmt.Sprint("gap", i)]++
				flush()
			}
			apply(func(tx *Tx) error {
				if _, err := root.Add(tx, "other", 100); err != nil {
					return err
				}
				_, err := c.Add(tx, 1)
				return err
			})
			want["other"] += 100
			want["c"]++
			flush()
		}
		checkTable(t, ns, root, want)
	})
}

// TestCounterPastTheMemos: counters past the store's memos (a program
// that made one a line) still add right, and the store keeps no memo of
// them.
func TestCounterPastTheMemos(t *testing.T) {
	root := NewTable("", String{}, Int64{})
	for counterIDs.Load() <= maxCounterMemos {
		root.Counter("filler")
	}
	c := root.Counter("late")
	s := mustOpen(t, backends()[0], t.TempDir(), testOpts())
	ns := s.Namespace("ns")
	for n := 1; n <= 3; n++ {
		if _, err := ns.Apply(context.Background(), del("f", 1, n), func(tx *Tx) error {
			v, err := c.Add(tx, 2)
			if err == nil && v != int64(2*n) {
				err = fmt.Errorf("Add = %d, want %d", v, 2*n)
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(s.(*nsStore).c.ctrs); n > maxCounterMemos {
		t.Fatalf("the store keeps %d counter memos, more than %d", n, maxCounterMemos)
	}
}

// TestCounterInRuns drives counters through ApplyEach, whose lines are
// staged together without the store's lock (see applyEach), with the same
// keys read, put, deleted and added to through their tables and buckets in
// the same lines, iterated, lines that fail and panic in the middle of a
// run, batches small enough to be cut inside a run, flushes and reopens;
// and checks every value read, and the durable values, against a model.
func TestCounterInRuns(t *testing.T) {
	root := NewTable("", String{}, Int64{})
	sums := NewTable("sums", String{}, Uint64{})
	a, b, x := root.Counter("a"), root.Counter("b"), sums.Counter("x")
	type ctr struct {
		key   string
		add   func(tx *Tx, d int64) (int64, error)
		table func(tx *Tx, d int64) (int64, error)
		get   func(tx *Tx) (int64, error)
		put   func(tx *Tx, v int64) error
		del   func(tx *Tx) error
	}
	ctrs := []ctr{
		{key: "a", add: a.Add, get: a.Get,
			table: func(tx *Tx, d int64) (int64, error) { return root.Add(tx, "a", d) },
			put:   func(tx *Tx, v int64) error { return root.Put(tx, "a", v) },
			del:   func(tx *Tx) error { return root.Delete(tx, "a") }},
		{key: "b", add: b.Add, get: b.Get,
			table: func(tx *Tx, d int64) (int64, error) { return root.Add(tx, "b", d) },
			put:   func(tx *Tx, v int64) error { return root.Put(tx, "b", v) },
			del:   func(tx *Tx) error { return root.Delete(tx, "b") }},
		{key: "x",
			add:   func(tx *Tx, d int64) (int64, error) { n, err := x.Add(tx, uint64(d)); return int64(n), err },
			get:   func(tx *Tx) (int64, error) { n, err := x.Get(tx); return int64(n), err },
			table: func(tx *Tx, d int64) (int64, error) { n, err := sums.Add(tx, "x", uint64(d)); return int64(n), err },
			put:   func(tx *Tx, v int64) error { return sums.Put(tx, "x", uint64(v)) },
			del:   func(tx *Tx) error { return sums.Delete(tx, "x") }},
	}
	forEachBackend(t, func(t *testing.T, be backend) {
		dir := t.TempDir()
		rng := rand.New(rand.NewPCG(3, 4))
		opts := func() *Options {
			o := testOpts()
			o.BatchSize = 1 + rng.IntN(12)
			o.MaxBatchSize = o.BatchSize + rng.IntN(12)
			o.BatchInterval = time.Millisecond
			return o
		}
		s := mustOpen(t, be, dir, opts())
		ctx := context.Background()
		nss := []string{"n1", "n2"}
		model := map[string]map[string]int64{"n1": {}, "n2": {}}
		boom := errors.New("boom")
		line := 0
		for step := 0; step < 600; step++ {
			var acted bool
			if s, acted = flushOrReopen(t, be, dir, s, rng.IntN(100), 5, 7, opts); acted {
				continue
			}
			ns := nss[rng.IntN(len(nss))]
			n := 1 + rng.IntN(20)
			ds := make([]tidemark.Delivery, n)
			for i := range ds {
				line++
				ds[i] = del("f-"+ns, 1, line)
			}
			// The model of each line, made as the line runs; a line that
			// fails or panics is not kept.
			vals := model[ns]
			cur := maps.Clone(vals)
			failAt, panicAt := -1, -1
			switch rng.IntN(6) {
			case 0:
				failAt = rng.IntN(n)
			case 1:
				panicAt = rng.IntN(n)
			}
			var kept map[string]int64
			lineFn := func(tx *Tx, i int) error {
				next := maps.Clone(cur)
				for range 1 + rng.IntN(4) {
					c := ctrs[rng.IntN(len(ctrs))]
					d := rng.Int64N(1000) - 300
					switch op := rng.IntN(100); {
					case op < 70:
						add := c.add
						if op >= 60 {
							add = c.table
						}
						got, err := add(tx, d)
						if err != nil {
							return err
						}
						if want := next[c.key] + d; got != want {
							return fmt.Errorf("step %d line %d: %s: Add(%d) = %d, want %d", step, i, c.key, d, got, want)
						}
						next[c.key] += d
					case op < 78:
						if err := c.put(tx, d); err != nil {
							return err
						}
						next[c.key] = d
					case op < 82:
						if err := c.del(tx); err != nil {
							return err
						}
						delete(next, c.key)
					case op < 86:
						got, err := c.get(tx)
						if err != nil || got != next[c.key] {
							return fmt.Errorf("step %d line %d: %s: Get = %d, %v, want %d", step, i, c.key, got, err, next[c.key])
						}
					case op < 90:
						bucket := ""
						if c.key == "x" {
							bucket = "sums"
						}
						got, err := tx.Bucket(bucket).GetInt64([]byte(c.key))
						if err != nil || got != next[c.key] {
							return fmt.Errorf("step %d line %d: %s: the bucket's GetInt64 = %d, %v, want %d", step, i, c.key, got, err, next[c.key])
						}
					default:
						for k, v := range root.All(tx) {
							if v != next[k] {
								return fmt.Errorf("step %d line %d: All: %s = %d, want %d", step, i, k, v, next[k])
							}
						}
						if err := tx.Err(); err != nil {
							return err
						}
					}
				}
				switch i {
				case failAt:
					return boom
				case panicAt:
					panic(boom)
				}
				cur = next
				kept = next
				return nil
			}
			var done int
			var err error
			func() {
				defer func() {
					if r := recover(); r != nil && r != boom {
						panic(r)
					}
				}()
				done, err = s.Namespace(ns).ApplyEach(ctx, n, func(i int) *tidemark.Delivery { return &ds[i] }, lineFn)
			}()
			if err != nil && !errors.Is(err, boom) {
				t.Fatal(err)
			}
			if kept != nil {
				model[ns] = kept
			}
			_ = done
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = mustOpen(t, be, dir, testOpts())
		for _, ns := range nss {
			if err := s.Namespace(ns).View(func(tx *Tx) error {
				for _, c := range ctrs {
					got, err := c.get(tx)
					if err != nil || got != model[ns][c.key] {
						return fmt.Errorf("%s/%s = %d, %v durable, want %d", ns, c.key, got, err, model[ns][c.key])
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// flushOrReopen is a step of a model test that may act on the store
// instead of applying a line: with r below flush it flushes s, below
// reopen it closes s and opens it again with opts(). It returns the store
// and whether it acted.
func flushOrReopen(t *testing.T, be backend, dir string, s Store, r, flush, reopen int, opts func() *Options) (Store, bool) {
	t.Helper()
	switch {
	case r < flush:
		if err := s.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		return s, true
	case r < reopen:
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		return mustOpen(t, be, dir, opts()), true
	}
	return s, false
}
