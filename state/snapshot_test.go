package state

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
)

// A snapshot reads what was durable when it began: not what is staged,
// nor what commits while it runs. Apply and Flush go on while it is open,
// from the function itself (a View there would wait for nothing either).
func TestSnapshotIsDurableAndStable(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		s := mustOpen(t, be, t.TempDir(), testOpts())
		ctx := context.Background()
		put := func(n int, keys ...string) {
			t.Helper()
			_, err := s.Apply(ctx, del("f", 1, n), func(tx *Tx) error {
				for _, k := range keys {
					if err := tx.Bucket("b").Put([]byte(k), fmt.Appendf(nil, "v%d", n)); err != nil {
						return err
					}
				}
				if _, err := testBalances.Add(tx, "count", 1); err != nil {
					return err
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		var keys []string
		for i := range 500 {
			keys = append(keys, fmt.Sprintf("k%03d", i))
		}
		put(1, keys...)
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		put(2, "k000", "staged-only")
		err := s.Snapshot(ctx, func(tx *Tx) error {
			b := tx.Bucket("b")
			if v, _, _ := b.Get([]byte("k000")); string(v) != "v1" {
				return fmt.Errorf("snapshot reads k000=%q, want the durable v1", v)
			}
			if _, ok, _ := b.Get([]byte("staged-only")); ok {
				return errors.New("snapshot sees a staged key")
			}
			if n, _, _ := testBalances.Get(tx, "count"); n != 1 {
				return fmt.Errorf("snapshot count = %d, want 1", n)
			}
			feeds, err := tx.Feeds()
			if err != nil || len(feeds) != 1 || len(feeds["f"]) != 1 || feeds["f"][0].Position != 1*lineLen {
				return fmt.Errorf("snapshot feeds = %+v, %v", feeds, err)
			}
			n := 0
			for k, v := range b.All() {
				if n == 100 {
					// Halfway: changes committed now are not seen.
					_, err := s.Apply(ctx, del("f", 1, 3), func(tx *Tx) error {
						for _, k := range keys {
							if err := tx.Bucket("b").Delete([]byte(k)); err != nil {
								return err
							}
						}
						return tx.Bucket("b").Put([]byte("k250x"), nil)
					})
					if err != nil {
						return err
					}
					// The processor's View, beside the snapshot, sees
					// what it staged.
					err = s.View(func(tx *Tx) error {
						got := collect(tx.Bucket("b").All())
						if want := []string{`"k250x"=""`, `"staged-only"="v2"`}; !slices.Equal(got, want) {
							return fmt.Errorf("View beside the snapshot: %v, want %v", got, want)
						}
						if n, _, _ := testBalances.Get(tx, "count"); n != 2 {
							return fmt.Errorf("View beside the snapshot: count = %d, want 2", n)
						}
						return nil
					})
					if err != nil {
						return err
					}
					if err := s.Flush(ctx); err != nil {
						return err
					}
				}
				if want := keys[n]; string(k) != want || string(v) != "v1" {
					return fmt.Errorf("key %d of the snapshot = %s=%s, want %s=v1", n, k, v, want)
				}
				n++
			}
			if n != len(keys) {
				return fmt.Errorf("the snapshot's loop saw %d keys, want %d", n, len(keys))
			}
			if feeds, _ := tx.Feeds(); len(feeds["f"]) != 1 || feeds["f"][0].Position != 1*lineLen {
				return fmt.Errorf("the snapshot's applied position moved: %+v", feeds["f"])
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// A new snapshot sees the commits.
		err = s.Snapshot(ctx, func(tx *Tx) error {
			got := collect(tx.Bucket("b").All())
			if want := []string{`"k250x"=""`, `"staged-only"="v2"`}; !slices.Equal(got, want) {
				return fmt.Errorf("new snapshot: %v, want %v", got, want)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// Snapshots are read-only, of their namespace, and refused by a closed
// store; Close waits for a running one to end.
func TestSnapshotRules(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		s := mustOpen(t, be, t.TempDir(), testOpts())
		ctx := context.Background()
		ns := s.Namespace("n")
		if _, err := ns.Apply(ctx, del("f", 1, 1), func(tx *Tx) error { return tx.Put([]byte("k"), []byte("n")) }); err != nil {
			t.Fatal(err)
		}
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		var kept *Tx
		err := ns.Snapshot(ctx, func(tx *Tx) error {
			kept = tx
			if err := tx.Put([]byte("k"), nil); !errors.Is(err, ErrReadOnly) {
				return fmt.Errorf("Put in a snapshot: %v", err)
			}
			if _, err := testBalances.Add(tx, "a", 1); !errors.Is(err, ErrReadOnly) {
				return fmt.Errorf("Add in a snapshot: %v", err)
			}
			if _, err := tx.Output("o").Write([]byte("x")); !errors.Is(err, ErrReadOnly) {
				return fmt.Errorf("output write in a snapshot: %v", err)
			}
			if v, _, _ := tx.Get([]byte("k")); string(v) != "n" {
				return fmt.Errorf("namespace n reads %q", v)
			}
			nss, err := tx.Namespaces()
			if err != nil || !slices.Equal(nss, []string{"n"}) {
				return fmt.Errorf("Namespaces = %q, %v", nss, err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := kept.Get([]byte("k")); !errors.Is(err, ErrTxDone) {
			t.Fatalf("Get after the snapshot's function returned: %v", err)
		}
		if err := s.Snapshot(ctx, func(tx *Tx) error {
			if _, ok, _ := tx.Get([]byte("k")); ok {
				return errors.New("the root namespace sees namespace n's key")
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		closed := make(chan error)
		err = s.Snapshot(ctx, func(tx *Tx) error {
			go func() { closed <- s.Close() }()
			c := s.(*nsStore).c
			waitFor(t, "Close to begin", func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.closed })
			// The backend is still open for the snapshot.
			if n := len(collect(tx.Bucket("").All())); n != 0 {
				return fmt.Errorf("%d keys in the root namespace", n)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := <-closed; err != nil {
			t.Fatal(err)
		}
		if err := s.Snapshot(ctx, func(*Tx) error { return nil }); !errors.Is(err, ErrClosed) {
			t.Fatalf("Snapshot of a closed store: %v", err)
		}
	})
}
