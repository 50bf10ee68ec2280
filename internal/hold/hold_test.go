package hold

import (
	"sync/atomic"
	"testing"
)

// counter is a fake subscriber queue: its progress is the count of items
// finished, each item at position 10·count.
type counter struct{ n atomic.Uint64 }

func (c *counter) progress() Mark {
	n := c.n.Load()
	return Mark{Count: n, Seq: n, Epoch: 1, Position: int64(10 * n)}
}

// Each Bind is a new binding: its marks, and the durable mark it starts
// with, carry a binding number of their own.
func TestBindingChangesWithEachBind(t *testing.T) {
	r := NewSet()
	c := r.Hold("orders", "g")
	var q1, q2 counter
	r.Bind("orders", "g", q1.progress)
	q1.n.Store(100)
	old := c.Mark()
	if d, _ := c.Durable(); d.Binding() != old.Binding() {
		t.Fatalf("the durable mark of a binding (%d) and its marks (%d) differ", d.Binding(), old.Binding())
	}
	r.Bind("orders", "g", q2.progress) // the group subscribed again
	if old.Binding() == c.Mark().Binding() {
		t.Fatal("a new binding keeps the old binding number")
	}
	q2.n.Store(3)
	c.DurableThrough(c.Mark())
	if d, _ := c.Durable(); d.Count != 3 || d.Binding() != c.Mark().Binding() {
		t.Fatalf("durable after a new mark: %+v", d)
	}
}

// OnAdvance's function runs once per mark that moves the durable mark
// forward, never for one that does not, and can call back into the
// checkpoint (no lock is held).
func TestOnAdvanceCalledOnlyWhenDurableMoves(t *testing.T) {
	r := NewSet()
	c := r.Hold("orders", "g")
	var q counter
	r.Bind("orders", "g", q.progress)
	calls := 0
	r.OnAdvance("orders", "g", func() {
		calls++
		c.Durable() // would deadlock if called under the checkpoint's lock
	})
	q.n.Store(3)
	m3 := c.Mark()
	q.n.Store(5)
	m5 := c.Mark()
	c.DurableThrough(m5)
	c.DurableThrough(m3) // older: ignored
	c.DurableThrough(m5) // the same: ignored
	if calls != 1 {
		t.Fatalf("calls after one advance and two stale marks: %d, want 1", calls)
	}
	r.Bind("orders", "g", q.progress) // a new subscription: m5 is stale
	c.DurableThrough(m5)
	if calls != 1 {
		t.Fatalf("a mark of an earlier binding called the function: %d calls", calls)
	}
	q.n.Store(7)
	c.DurableThrough(c.Mark())
	if calls != 2 {
		t.Fatalf("calls after a second advance: %d, want 2", calls)
	}
	r.OnAdvance("orders", "g", nil)
	q.n.Store(8)
	c.DurableThrough(c.Mark())
	if calls != 2 {
		t.Fatalf("a removed function was called: %d calls", calls)
	}
}
