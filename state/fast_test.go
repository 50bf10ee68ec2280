package state

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// Apply and View from many goroutines, with small batches committing all
// the time: every line is applied once, each read sees every line staged
// before it (through the batches, the last committed one and the backend),
// and Apply calls whose context ends while they wait for the token give up
// without blocking the others.
func TestConcurrentApplyAndView(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		o := testOpts()
		o.BatchSize, o.BatchInterval = 7, time.Millisecond
		dir := t.TempDir()
		s := mustOpen(t, be, dir, o)
		const feeds, lines = 4, 300
		var wg sync.WaitGroup
		for f := range feeds {
			wg.Go(func() {
				feed := fmt.Sprintf("f%d", f)
				for n := 1; n <= lines; n++ {
					_, err := s.Apply(context.Background(), del(feed, 1, n), func(tx *Tx) error {
						c, err := tx.Bucket(feed).AddInt64([]byte("count"), 1)
						if err != nil {
							return err
						}
						if c != int64(n) {
							return fmt.Errorf("feed %s line %d: count was %d", feed, n, c-1)
						}
						if _, err := tx.AddInt64([]byte("all"), 1); err != nil {
							return err
						}
						return tx.Put([]byte(feed+"-last"), fmt.Appendf(nil, "%d", n))
					})
					if err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		// Apply calls that give up: a context that ends at once or soon.
		wg.Go(func() {
			for i := range 200 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%3)*time.Microsecond)
				_, _ = s.Apply(ctx, del("g", 1, i+1), func(tx *Tx) error { return nil })
				cancel()
			}
		})
		wg.Go(func() {
			for range 200 {
				err := s.View(func(tx *Tx) error {
					all, err := tx.GetInt64([]byte("all"))
					if err != nil {
						return err
					}
					var sum int64
					for f := range feeds {
						c, err := tx.Bucket(fmt.Sprintf("f%d", f)).GetInt64([]byte("count"))
						if err != nil {
							return err
						}
						sum += c
					}
					if sum != all {
						return fmt.Errorf("counts add up to %d, all is %d", sum, all)
					}
					return nil
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
		wg.Wait()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = mustOpen(t, be, dir, testOpts())
		err := s.View(func(tx *Tx) error {
			if all, err := tx.GetInt64([]byte("all")); err != nil || all != feeds*lines {
				return fmt.Errorf("all = %d, %v; want %d", all, err, feeds*lines)
			}
			for f := range feeds {
				feed := fmt.Sprintf("f%d", f)
				if c, err := tx.Bucket(feed).GetInt64([]byte("count")); err != nil || c != lines {
					return fmt.Errorf("%s count = %d, %v; want %d", feed, c, err, lines)
				}
				if v, ok, err := tx.Get([]byte(feed + "-last")); err != nil || !ok || string(v) != fmt.Sprint(lines) {
					return fmt.Errorf("%s-last = %q, %v, %v", feed, v, ok, err)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// A value changed in place within a batch, deleted, written again with
// another length, and read back across batch boundaries and the cache of
// the last committed batch.
func TestValuesAcrossBatches(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		o := testOpts()
		o.BatchSize = 3
		dir := t.TempDir()
		s := mustOpen(t, be, dir, o)
		want := map[string]string{}
		for n := 1; n <= 200; n++ {
			k := fmt.Sprintf("k%d", n%5)
			_, err := s.Apply(context.Background(), del("f", 1, n), func(tx *Tx) error {
				v, ok, err := tx.Get([]byte(k))
				if err != nil {
					return err
				}
				if w, had := want[k]; ok != had || string(v) != w {
					return fmt.Errorf("line %d: %s = %q, %v; want %q, %v", n, k, v, ok, w, had)
				}
				switch n % 7 {
				case 0:
					return tx.Delete([]byte(k))
				case 3:
					// Fails: nothing it wrote is kept.
					_ = tx.Put([]byte(k), []byte("never"))
					return errSkip
				default:
					return tx.Put([]byte(k), fmt.Appendf(nil, "%0*d", 1+n%3, n))
				}
			})
			if err != nil && err != errSkip {
				t.Fatal(err)
			}
			switch n % 7 {
			case 0:
				delete(want, k)
			case 3:
			default:
				want[k] = fmt.Sprintf("%0*d", 1+n%3, n)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = mustOpen(t, be, dir, testOpts())
		err := s.View(func(tx *Tx) error {
			for i := range 5 {
				k := fmt.Sprintf("k%d", i)
				v, ok, err := tx.Get([]byte(k))
				if w, had := want[k]; err != nil || ok != had || string(v) != w {
					return fmt.Errorf("%s = %q, %v, %v; want %q, %v", k, v, ok, err, w, had)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

var errSkip = fmt.Errorf("skip this line")
