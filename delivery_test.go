package tidemark_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tidemark-go/tidemark"
)

func TestAlreadyApplied(t *testing.T) {
	last := tidemark.Applied{Epoch: 7, Position: 100}
	for _, tc := range []struct {
		name string
		d    tidemark.Delivery
		last tidemark.Applied
		want bool
	}{
		{"same epoch below", tidemark.Delivery{Epoch: 7, Position: 50}, last, true},
		{"same epoch equal position", tidemark.Delivery{Epoch: 7, Position: 100}, last, true},
		{"same epoch beyond", tidemark.Delivery{Epoch: 7, Position: 101}, last, false},
		{"other epoch below", tidemark.Delivery{Epoch: 8, Position: 50}, last, false},
		{"older epoch below", tidemark.Delivery{Epoch: 6, Position: 50}, last, false},
		{"epoch 0 delivery", tidemark.Delivery{Epoch: 0, Position: 50}, last, false},
		{"epoch 0 against nothing recorded", tidemark.Delivery{Epoch: 0, Position: 0}, tidemark.Applied{}, false},
		{"nothing recorded", tidemark.Delivery{Epoch: 1, Position: 1}, tidemark.Applied{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tidemark.AlreadyApplied(tc.d, tc.last); got != tc.want {
				t.Fatalf("AlreadyApplied(%+v, %+v) = %v, want %v", tc.d, tc.last, got, tc.want)
			}
		})
	}
}

func TestAdvance(t *testing.T) {
	last := tidemark.Applied{Epoch: 7, Position: 100}
	for _, tc := range []struct {
		name string
		d    tidemark.Delivery
		want tidemark.Applied
	}{
		{"newer position", tidemark.Delivery{Epoch: 7, Position: 120}, tidemark.Applied{Epoch: 7, Position: 120}},
		{"equal position", tidemark.Delivery{Epoch: 7, Position: 100}, last},
		{"older position", tidemark.Delivery{Epoch: 7, Position: 10}, last},
		{"other epoch, lower position", tidemark.Delivery{Epoch: 8, Position: 10}, tidemark.Applied{Epoch: 8, Position: 10}},
		{"epoch 0 records nothing", tidemark.Delivery{Epoch: 0, Position: 500}, last},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tidemark.Advance(last, tc.d); got != tc.want {
				t.Fatalf("Advance(%+v, %+v) = %+v, want %+v", last, tc.d, got, tc.want)
			}
		})
	}
}

func TestTrackerSkipsRedeliveries(t *testing.T) {
	tr := tidemark.NewTracker()
	d := func(epoch uint64, pos int64) tidemark.Delivery {
		return tidemark.Delivery{Feed: "orders", Epoch: epoch, Position: pos}
	}
	calls := 0
	apply := func(x tidemark.Delivery) bool {
		ok, err := tr.Apply(x, func() error { calls++; return nil })
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !apply(d(1, 10)) || !apply(d(1, 20)) {
		t.Fatal("new lines not applied")
	}
	if apply(d(1, 10)) || apply(d(1, 20)) {
		t.Fatal("re-delivery applied")
	}
	if calls != 2 {
		t.Fatalf("fn called %d times, want 2", calls)
	}
	if got := tr.Last("orders"); got != (tidemark.Applied{Epoch: 1, Position: 20}) {
		t.Fatalf("Last = %+v", got)
	}
	// Another epoch is a new position space.
	if !apply(d(2, 5)) {
		t.Fatal("line of a new epoch skipped")
	}
	if apply(d(2, 5)) {
		t.Fatal("re-delivery in the new epoch applied")
	}
	// Another feed has its own position.
	if !apply(tidemark.Delivery{Feed: "other", Epoch: 2, Position: 5}) {
		t.Fatal("line of another feed skipped")
	}
	// Epoch 0 is never recognised.
	if !apply(d(0, 5)) || !apply(d(0, 5)) {
		t.Fatal("delivery without positions skipped")
	}
	if got := tr.Last("orders"); got != (tidemark.Applied{Epoch: 2, Position: 5}) {
		t.Fatalf("epoch 0 moved the position: %+v", got)
	}
}

func TestTrackerFailedApplyIsNotRecorded(t *testing.T) {
	tr := tidemark.NewTracker()
	d := tidemark.Delivery{Feed: "f", Epoch: 1, Position: 10}
	boom := errors.New("boom")
	ok, err := tr.Apply(d, func() error { return boom })
	if ok || !errors.Is(err, boom) {
		t.Fatalf("Apply = %v, %v; want false, boom", ok, err)
	}
	if tr.Seen(d) {
		t.Fatal("a failed apply was recorded")
	}
	ok, err = tr.Apply(d, func() error { return nil })
	if !ok || err != nil {
		t.Fatalf("retry: Apply = %v, %v", ok, err)
	}
}

func TestTrackerSeenRecordRestore(t *testing.T) {
	var tr tidemark.Tracker // zero value is usable
	d := tidemark.Delivery{Feed: "f", Epoch: 3, Position: 10}
	if tr.Seen(d) {
		t.Fatal("seen before record")
	}
	tr.Record(d)
	if !tr.Seen(d) {
		t.Fatal("not seen after record")
	}
	var tr2 tidemark.Tracker
	tr2.Restore("f", tr.Last("f"))
	if !tr2.Seen(d) || tr2.Seen(tidemark.Delivery{Feed: "f", Epoch: 3, Position: 11}) {
		t.Fatal("restore did not carry the position")
	}
	tr2.Record(tidemark.Delivery{Feed: "f", Epoch: 0, Position: 99})
	if tr2.Last("f") != (tidemark.Applied{Epoch: 3, Position: 10}) {
		t.Fatal("epoch 0 recorded")
	}
}

func TestTrackerConcurrentDuplicatesApplyOnce(t *testing.T) {
	tr := tidemark.NewTracker()
	var applied atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for pos := int64(1); pos <= 500; pos++ {
				d := tidemark.Delivery{Feed: "f", Epoch: 1, Position: pos}
				if _, err := tr.Apply(d, func() error { applied.Add(1); return nil }); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	// Every position is applied at most once; the highest always is.
	if n := applied.Load(); n < 1 || n > 500 {
		t.Fatalf("applied %d times", n)
	}
	if tr.Last("f").Position != 500 {
		t.Fatalf("last = %+v", tr.Last("f"))
	}
}
