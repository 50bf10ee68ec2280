package checkpoint

import "github.com/tidemark-go/tidemark/internal/hold"

// Mark is how far a processor group's queue on a feed had finished when the
// mark was taken. Its fields:
//
//	Count     uint64 // how many items (lines and status events) the queue had finished
//	Seq       uint64 // the feed sequence number of the last finished line, 0 if none
//	Epoch     uint64 // the epoch of the last finished line
//	Position  int64  // the position of the last finished line
//
// Marks are compared by Count. A mark also records, unexported, the
// binding of the queue it was taken from (see [Set.Bind]): a mark taken
// before the group subscribed again is ignored by
// [Checkpoint.DurableThrough].
type Mark hold.Mark

// Progress reports the last item a subscriber queue has finished. The
// framework binds one to a hold when the group's queue subscribes.
type Progress func() Mark

// Set holds the checkpoints of a server, by feed and processor group.
// The framework consults it when it computes what a group has processed.
// It is safe for concurrent use. Make one with [NewSet].
type Set hold.Set

// NewSet returns an empty set.
func NewSet() *Set { return (*Set)(hold.NewSet()) }

// Hold returns the checkpoint of (feed, group), creating it if needed. While
// it is held, the group's queue on the feed counts as processed only up to
// the last mark declared durable. Take the hold before the feed delivers:
// items committed before it stay committed.
func (r *Set) Hold(feed, group string) *Checkpoint {
	return (*Checkpoint)((*hold.Set)(r).Hold(feed, group))
}

// Lookup returns the checkpoint of (feed, group), or nil if none was taken.
func (r *Set) Lookup(feed, group string) *Checkpoint {
	return (*Checkpoint)((*hold.Set)(r).Lookup(feed, group))
}

// Bind attaches the progress of a newly subscribed queue of group on feed.
// Marks taken before are ignored from now on: a group that subscribes again
// starts with nothing durable. The framework calls Bind for its groups; a
// program that uses a store without the framework calls it for its own
// reader (see the package example). It creates no hold.
func (r *Set) Bind(feed, group string, progress Progress) {
	(*hold.Set)(r).Bind(feed, group, func() hold.Mark { return hold.Mark(progress()) })
}

// Checkpoint is the hold of one processor group on one feed. Its methods are
// safe for concurrent use: DurableThrough may be called from any goroutine.
type Checkpoint hold.Checkpoint

func (c *Checkpoint) h() *hold.Checkpoint { return (*hold.Checkpoint)(c) }

// Feed returns the name of the feed the checkpoint holds.
func (c *Checkpoint) Feed() string { return c.h().Feed() }

// Group returns the name of the processor group the checkpoint holds.
func (c *Checkpoint) Group() string { return c.h().Group() }

// Mark reads how many items the group's queue has finished. Inside a
// handler, that excludes the item being handled, which is therefore
// re-delivered after a crash: conservative, never lossy. Before the queue
// subscribes, Mark returns a mark of nothing.
func (c *Checkpoint) Mark() Mark { return Mark(c.h().Mark()) }

// DurableThrough declares that the effects of every item up to m are
// durable. Marks only advance: an older mark, or one taken before the group
// subscribed again, is ignored.
func (c *Checkpoint) DurableThrough(m Mark) { c.h().DurableThrough(hold.Mark(m)) }

// Release ends the hold: the group's queue counts as processed again when
// its handling returns.
func (c *Checkpoint) Release() { c.h().Release() }

// Durable returns the last mark declared durable and whether the checkpoint
// is held. The framework caps what it commits for the group by it.
func (c *Checkpoint) Durable() (m Mark, held bool) {
	d, held := c.h().Durable()
	return Mark(d), held
}
