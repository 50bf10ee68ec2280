package checkpoint_test

import (
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tidemark-go/tidemark/checkpoint"
)

// counter is a fake subscriber queue: its progress is the count of items
// finished, each item at position 10·count.
type counter struct{ n atomic.Uint64 }

func (c *counter) progress() checkpoint.Mark {
	n := c.n.Load()
	return checkpoint.Mark{Count: n, Seq: n, Epoch: 1, Position: int64(10 * n)}
}

func TestHoldIsPerFeedAndGroup(t *testing.T) {
	r := checkpoint.NewSet()
	if r.Lookup("orders", "g") != nil {
		t.Fatal("Lookup before Hold returns a checkpoint")
	}
	a := r.Hold("orders", "g")
	if a != r.Hold("orders", "g") || a != r.Lookup("orders", "g") {
		t.Fatal("Hold of the same (feed, group) returns another checkpoint")
	}
	if a == r.Hold("orders", "h") || a == r.Hold("trades", "g") {
		t.Fatal("different (feed, group) share a checkpoint")
	}
	if a.Feed() != "orders" || a.Group() != "g" {
		t.Fatalf("names: %q %q", a.Feed(), a.Group())
	}
	if _, held := a.Durable(); !held {
		t.Fatal("not held after Hold")
	}
}

func TestMarkBeforeBindIsNothing(t *testing.T) {
	r := checkpoint.NewSet()
	c := r.Hold("orders", "g")
	if m := c.Mark(); m.Count != 0 || m.Seq != 0 || m.Position != 0 {
		t.Fatalf("mark before the queue subscribed: %+v", m)
	}
}

func TestMarkReadsProgressAndDurableOnlyAdvances(t *testing.T) {
	r := checkpoint.NewSet()
	c := r.Hold("orders", "g")
	var q counter
	r.Bind("orders", "g", q.progress)
	q.n.Store(5)
	m5 := c.Mark()
	if m5.Count != 5 || m5.Position != 50 || m5.Epoch != 1 {
		t.Fatalf("mark: %+v", m5)
	}
	q.n.Store(9)
	m9 := c.Mark()
	c.DurableThrough(m9)
	c.DurableThrough(m5) // older: ignored
	d, held := c.Durable()
	if !held || d.Count != 9 || d.Position != 90 {
		t.Fatalf("durable %+v held %v, want the mark of 9", d, held)
	}
}

func TestBindIgnoresMarksOfEarlierBinding(t *testing.T) {
	r := checkpoint.NewSet()
	c := r.Hold("orders", "g")
	var q1, q2 counter
	r.Bind("orders", "g", q1.progress)
	q1.n.Store(100)
	old := c.Mark()
	r.Bind("orders", "g", q2.progress) // the group subscribed again
	if d, _ := c.Durable(); d.Count != 0 {
		t.Fatalf("a new binding starts with nothing durable: %+v", d)
	}
	c.DurableThrough(old)
	if d, _ := c.Durable(); d.Count != 0 {
		t.Fatalf("a mark of the earlier binding was accepted: %+v", d)
	}
	q2.n.Store(3)
	c.DurableThrough(c.Mark())
	if d, _ := c.Durable(); d.Count != 3 {
		t.Fatalf("durable after a new mark: %+v", d)
	}
	q2.n.Store(4)
	c.DurableThrough(c.Mark())
	if d, _ := c.Durable(); d.Count != 4 {
		t.Fatalf("durable after a second mark of the new binding: %+v", d)
	}
}

func TestBindWithoutHoldCreatesUnheldCheckpoint(t *testing.T) {
	r := checkpoint.NewSet()
	var q counter
	r.Bind("orders", "g", q.progress)
	c := r.Lookup("orders", "g")
	if c == nil {
		t.Fatal("Bind made no checkpoint")
	}
	if _, held := c.Durable(); held {
		t.Fatal("Bind took a hold")
	}
	q.n.Store(4)
	if c.Mark().Count != 4 {
		t.Fatal("a hold taken after Bind does not see the queue")
	}
	if r.Hold("orders", "g") != c {
		t.Fatal("Hold after Bind returns another checkpoint")
	}
	if c.Mark().Count != 4 {
		t.Fatal("Hold after Bind loses the queue's progress")
	}
}

func TestReleaseEndsHoldAndHoldTakesItAgain(t *testing.T) {
	r := checkpoint.NewSet()
	c := r.Hold("orders", "g")
	c.Release()
	if _, held := c.Durable(); held {
		t.Fatal("held after Release")
	}
	r.Hold("orders", "g")
	if _, held := c.Durable(); !held {
		t.Fatal("not held after a second Hold")
	}
}

// DurableThrough from many goroutines, with marks taken meanwhile: the
// durable mark ends at the highest, and never goes back (run with -race).
func TestDurableThroughConcurrent(t *testing.T) {
	r := checkpoint.NewSet()
	c := r.Hold("orders", "g")
	var q counter
	r.Bind("orders", "g", q.progress)
	var wg sync.WaitGroup
	var highest atomic.Uint64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 500 {
				m := c.Mark()
				c.DurableThrough(m)
				for {
					h := highest.Load()
					if m.Count <= h || highest.CompareAndSwap(h, m.Count) {
						break
					}
				}
				d, _ := c.Durable()
				if d.Count < m.Count {
					t.Errorf("durable %d behind a mark %d declared before", d.Count, m.Count)
					return
				}
			}
		}()
	}
	for range 2000 {
		q.n.Add(1)
	}
	wg.Wait()
	if d, _ := c.Durable(); d.Count != highest.Load() {
		t.Fatalf("durable %d, highest declared %d", d.Count, highest.Load())
	}
}

// The public surface is what a program needs to hold a feed's commits
// (Hold, Mark, DurableThrough, Release, Durable; Bind for a program that
// uses a store without the framework): the framework's plumbing (the
// function called when the durable mark moves, a mark's binding number)
// is in internal/hold.
func TestPublicSurface(t *testing.T) {
	for _, c := range []struct {
		typ  reflect.Type
		want []string
	}{
		{reflect.TypeFor[*checkpoint.Set](), []string{"Bind", "Hold", "Lookup"}},
		{reflect.TypeFor[*checkpoint.Checkpoint](), []string{"Durable", "DurableThrough", "Feed", "Group", "Mark", "Release"}},
		{reflect.TypeFor[checkpoint.Mark](), nil},
	} {
		var got []string
		for m := range c.typ.Methods() {
			got = append(got, m.Name)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("the methods of %v: %v, want %v", c.typ, got, c.want)
		}
	}
	var fields []string
	for f := range reflect.TypeFor[checkpoint.Mark]().Fields() {
		if f.IsExported() {
			fields = append(fields, f.Name)
		}
	}
	if want := []string{"Count", "Seq", "Epoch", "Position"}; !slices.Equal(fields, want) {
		t.Errorf("the fields of checkpoint.Mark: %v, want %v", fields, want)
	}
}
