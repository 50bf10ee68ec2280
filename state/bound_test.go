package state

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/tidemark-go/tidemark"
)

// TestApplyNeedsABinding: a batched Apply of a feed that no checkpoint is
// bound to fails with ErrNotBound, naming the feed, the store and the fix,
// calls no function and stages nothing; a Bind lets the feed in. The Sync
// mode, Options.Unbound and a delivery without a feed need no binding.
func TestApplyNeedsABinding(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		dir := t.TempDir()
		o := testOpts()
		o.Unbound = false
		s := mustOpen(t, be, dir, o)
		ctx := context.Background()
		called := 0
		fn := func(tx *Tx) error {
			called++
			_, err := tx.AddInt64([]byte("count"), 1)
			return err
		}
		notBound := func(d tidemark.Delivery) {
			t.Helper()
			ok, err := s.Apply(ctx, d, fn)
			if ok || !errors.Is(err, ErrNotBound) {
				t.Fatalf("Apply of unbound feed %q: %v, %v; want ErrNotBound", d.Feed, ok, err)
			}
			for _, want := range []string{`"` + d.Feed + `"`, s.Dir(), "GroupConfig.Store", "Store.Bind", "Options.Unbound"} {
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("error does not say %q: %v", want, err)
				}
			}
		}
		notBound(del("f", 1, 1))
		notBound(del("f", 1, 2)) // the verdict is not cached as a success
		// A bound feed applies, and an unbound one after it still fails:
		// the way in without the lock never skips the check.
		var p progress
		if err := s.Bind("g", hold("g", &p)); err != nil {
			t.Fatal(err)
		}
		for n := 1; n <= 3; n++ {
			if ok, err := s.Apply(ctx, del("g", 1, n), fn); !ok || err != nil {
				t.Fatalf("Apply of bound feed g: %v, %v", ok, err)
			}
		}
		notBound(del("f", 1, 3))
		notBound(del("f", 1, 4))
		// The same feed in another namespace is the same feed: bound.
		if ok, err := s.Namespace("other").Apply(ctx, del("g", 1, 1), fn); !ok || err != nil {
			t.Fatalf("Apply of bound feed g in another namespace: %v, %v", ok, err)
		}
		// Epoch 0 is no exemption: the feed's pointer would still move.
		notBound(tidemark.Delivery{Feed: "f"})
		// A delivery without a feed name has no pointer to keep behind.
		if ok, err := s.Apply(ctx, tidemark.Delivery{}, fn); !ok || err != nil {
			t.Fatalf("Apply without a feed: %v, %v", ok, err)
		}
		if called != 5 {
			t.Fatalf("function called %d times, want 5 (never for an unbound feed)", called)
		}
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if _, ok := s.Applied("f"); ok {
			t.Fatal("an unbound feed's position was recorded")
		}
		if got := getInt(t, s, "count"); got != 4 {
			t.Fatalf("count = %d, want 4", got)
		}
		// Bind comes late: the feed is let in from then on.
		if err := s.Bind("f", hold("f", &p)); err != nil {
			t.Fatal(err)
		}
		if ok, err := s.Apply(ctx, del("f", 1, 5), fn); !ok || err != nil {
			t.Fatalf("Apply after Bind: %v, %v", ok, err)
		}
	})
}

func TestApplyWithoutBindingWhereNoneIsNeeded(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		for _, tc := range []struct {
			name string
			set  func(o *Options)
		}{
			{"sync", func(o *Options) { o.Sync = true }},
			{"unbound", func(o *Options) { o.Unbound = true }},
		} {
			t.Run(tc.name, func(t *testing.T) {
				o := testOpts()
				o.Unbound = false
				tc.set(o)
				s := mustOpen(t, be, t.TempDir(), o)
				for n := 1; n <= 3; n++ {
					applyLine(t, s, del("f", 1, n))
				}
				if err := s.Flush(context.Background()); err != nil {
					t.Fatal(err)
				}
				if l, _ := s.Applied("f"); l.Position != 30 {
					t.Fatalf("Applied = %+v", l)
				}
			})
		}
	})
}

// TestFileSetRecordsPerFile: the lines of a feed that follows a set of
// files (Delivery.File) are recorded per file: each file's re-deliveries
// are skipped by its own record, and AppliedAll returns one record per
// file, naming it, after a reopen too.
func TestFileSetRecordsPerFile(t *testing.T) {
	for _, backend := range []string{"bbolt", "pebble"} {
		t.Run(backend, func(t *testing.T) {
			dir := t.TempDir()
			s, err := Open(backend+":"+dir, &Options{Sync: true})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			apply := func(file string, epoch uint64, pos int64) bool {
				t.Helper()
				ok, err := s.Apply(ctx, tidemark.Delivery{Feed: "logs", File: file, Epoch: epoch, Position: pos}, func(tx *Tx) error { return nil })
				if err != nil {
					t.Fatal(err)
				}
				return ok
			}
			// Interleaved files, each its own epoch.
			if !apply("a.log", 10, 5) || !apply("b.log", 20, 7) || !apply("a.log", 10, 9) || !apply("b.log", 20, 8) {
				t.Fatal("a new line was skipped")
			}
			if apply("a.log", 10, 5) || apply("b.log", 20, 7) {
				t.Fatal("a re-delivery of a file was applied after a line of another file")
			}
			if !apply("", 30, 3) {
				t.Fatal("the feed's record of file \"\" is its own")
			}
			check := func(s Store) {
				t.Helper()
				all := s.AppliedAll("logs")
				if len(all) != 3 || all[0].File != "" || all[1].File != "a.log" || all[1].Position != 9 || all[2].File != "b.log" || all[2].Position != 8 {
					t.Fatalf("AppliedAll = %+v", all)
				}
				if l, ok := s.Applied("logs"); !ok || l.Position != 3 {
					t.Fatalf("Applied = %+v %v", l, ok)
				}
				// A transaction lists the same records, a snapshot's too.
				feeds := func(tx *Tx) error {
					fs, err := tx.Feeds()
					if err != nil {
						return err
					}
					if got := fs["logs"]; len(fs) != 1 || !slices.Equal(got, all) {
						return fmt.Errorf("Tx.Feeds = %+v, want %+v", fs, all)
					}
					return nil
				}
				if err := s.View(feeds); err != nil {
					t.Fatal(err)
				}
				if err := s.Snapshot(context.Background(), feeds); err != nil {
					t.Fatal(err)
				}
			}
			check(s)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s, err = Open(backend+":"+dir, &Options{Sync: true})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			check(s)
			if apply("a.log", 10, 9) {
				t.Fatal("a re-delivery applied after a reopen")
			}
		})
	}
}
