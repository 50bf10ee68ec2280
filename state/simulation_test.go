package state

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark-go/tidemark"
)

// TestSimulation drives a store with random operations against a model in
// memory: applies to a few feeds and namespaces with random keys, deletes
// and failing functions, re-deliveries of earlier positions, flushes, and
// clean reopens. After every step the store's view must equal the model.
func TestSimulation(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		for seed := uint64(1); seed <= 3; seed++ {
			t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
				simulate(t, be, seed, 800)
			})
		}
	})
}

type simModel struct {
	data map[string]map[string]int64 // namespace → key → value
	pos  map[string]int              // namespace/feed → last line applied
}

func simulate(t *testing.T, be backend, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 7))
	dir := t.TempDir()
	o := testOpts()
	o.BatchSize = 1 + rng.IntN(20)
	o.BatchInterval = time.Duration(1+rng.IntN(5)) * time.Millisecond
	open := func() Store {
		s, err := be.open(dir, o)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open()
	defer func() { s.Close() }()
	m := simModel{data: map[string]map[string]int64{}, pos: map[string]int{}}
	namespaces := []string{"", "a", "b"}
	feeds := []string{"f", "g"}
	ctx := context.Background()
	boom := errors.New("boom")
	for step := 0; step < steps; step++ {
		ns := namespaces[rng.IntN(len(namespaces))]
		feed := feeds[rng.IntN(len(feeds))]
		pk := ns + "/" + feed
		switch r := rng.IntN(100); {
		case r < 1: // clean restart
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = open()
		case r < 5:
			if err := s.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		default:
			n := m.pos[pk] + 1
			if r < 20 && m.pos[pk] > 0 {
				n = 1 + rng.IntN(m.pos[pk]) // a re-delivery
			}
			key := "k" + strconv.Itoa(rng.IntN(8))
			delta := int64(rng.IntN(100) - 50)
			fail := rng.IntN(10) == 0
			remove := rng.IntN(10) == 0
			called := false
			ok, err := s.Namespace(ns).Apply(ctx, del(feed, 1, n), func(tx *Tx) error {
				called = true
				if remove {
					if err := tx.Delete([]byte(key)); err != nil {
						return err
					}
				} else if _, err := tx.AddInt64([]byte(key), delta); err != nil {
					return err
				}
				if fail {
					return boom
				}
				return nil
			})
			fresh := n > m.pos[pk]
			switch {
			case !fresh && (ok || called || err != nil):
				t.Fatalf("step %d: re-delivery of %s line %d (applied through %d): ok=%v called=%v err=%v", step, pk, n, m.pos[pk], ok, called, err)
			case fresh && fail && (ok || !errors.Is(err, boom)):
				t.Fatalf("step %d: failing fn: ok=%v err=%v", step, ok, err)
			case fresh && !fail && (!ok || err != nil):
				t.Fatalf("step %d: apply %s line %d: ok=%v err=%v", step, pk, n, ok, err)
			}
			if fresh && !fail {
				if m.data[ns] == nil {
					m.data[ns] = map[string]int64{}
				}
				if remove {
					delete(m.data[ns], key)
				} else {
					m.data[ns][key] += delta
				}
				m.pos[pk] = n
			}
		}
		if step%25 == 0 || step == steps-1 {
			checkModel(t, s, m, namespaces, step)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open()
	checkModel(t, s, m, namespaces, steps)
	for pk, n := range m.pos {
		var ns, feed string
		fmt.Sscanf(pk[:len(pk)-2], "%s", &ns)
		ns, feed = pk[:len(pk)-2], pk[len(pk)-1:]
		if l, _ := s.Namespace(ns).Applied(feed); l.Position != int64(n)*lineLen {
			t.Fatalf("after reopen Applied(%s) = %+v, want line %d", pk, l, n)
		}
	}
}

func checkModel(t *testing.T, s Store, m simModel, namespaces []string, step int) {
	t.Helper()
	for _, ns := range namespaces {
		got := map[string]int64{}
		err := s.Namespace(ns).View(func(tx *Tx) error {
			return tx.ForEach(func(k, v []byte) error {
				n, ok := decodeInt64(v)
				if !ok {
					return fmt.Errorf("key %s: %d bytes", k, len(v))
				}
				got[string(k)] = n
				return nil
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(nonNil(m.data[ns])) {
			t.Fatalf("step %d: namespace %q = %v, model %v", step, ns, got, m.data[ns])
		}
	}
}

func nonNil(m map[string]int64) map[string]int64 {
	if m == nil {
		return map[string]int64{}
	}
	return m
}

// TestConcurrentUse: several goroutines apply to their own feeds while
// others view, flush and read stats; the race detector watches, and every
// line is applied once.
func TestConcurrentUse(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		o := testOpts()
		o.BatchSize = 16
		o.BatchInterval = time.Millisecond
		s := mustOpen(t, be, t.TempDir(), o)
		var p progress
		cp := hold("f0", &p)
		s.Bind("f0", cp)
		const workers, lines = 4, 300
		ctx := context.Background()
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				feed := "f" + strconv.Itoa(w)
				for n := 1; n <= lines; n++ {
					for range 2 { // every line delivered twice
						if _, err := s.Apply(ctx, tidemark.Delivery{Feed: feed, Epoch: 1, Position: int64(n)}, func(tx *Tx) error {
							_, err := tx.AddInt64([]byte("count"), 1)
							return err
						}); err != nil {
							t.Error(err)
							return
						}
					}
					if w == 0 {
						p.finish()
					}
				}
			}()
		}
		stop := make(chan struct{})
		var readers sync.WaitGroup
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				s.View(func(tx *Tx) error { _, err := tx.GetInt64([]byte("count")); return err })
				s.Stats()
				s.Applied("f1")
				if err := s.Flush(ctx); err != nil {
					t.Error(err)
				}
			}
		}()
		wg.Wait()
		close(stop)
		readers.Wait()
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if got := getInt(t, s, "count"); got != workers*lines {
			t.Fatalf("count = %d, want %d", got, workers*lines)
		}
		if st := s.Stats(); st.Skipped != workers*lines {
			t.Fatalf("skipped = %d, want %d", st.Skipped, workers*lines)
		}
		if got := durableCount(cp); got != lines {
			t.Fatalf("durable mark %d, want %d", got, lines)
		}
	})
}

// TestCloseWhileApplying: every Apply that succeeded before Close returned
// is durable after Close; the others fail with ErrClosed.
func TestCloseWhileApplying(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		dir := t.TempDir()
		o := testOpts()
		o.BatchSize = 8
		s, err := be.open(dir, o)
		if err != nil {
			t.Fatal(err)
		}
		var progress atomic.Int64
		done := make(chan int) // the last line whose Apply succeeded
		go func() {
			last := 0
			defer func() { done <- last }()
			for n := 1; ; n++ {
				ok, err := s.Apply(context.Background(), del("f", 1, n), func(tx *Tx) error {
					_, err := tx.AddInt64([]byte("count"), 1)
					return err
				})
				if errors.Is(err, ErrClosed) {
					return
				}
				if err != nil || !ok {
					t.Errorf("line %d: %v %v", n, ok, err)
					return
				}
				last = n
				progress.Store(int64(n))
			}
		}()
		waitFor(t, "some lines applied", func() bool { return progress.Load() >= 200 })
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		applied := <-done
		s = mustOpen(t, be, dir, testOpts())
		if got := getInt(t, s, "count"); got != int64(applied) {
			t.Fatalf("count %d after Close, but %d Apply calls succeeded", got, applied)
		}
	})
}
