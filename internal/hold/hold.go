// Package hold is the implementation of package checkpoint, with the part
// only the framework uses: [Set.OnAdvance] and [Mark.Binding]. Package
// checkpoint's types are defined on these ([checkpoint.Set] is a Set), so
// the framework converts between them (a *checkpoint.Set is a *Set, a
// checkpoint.Mark a Mark) and reaches that part without its being in
// checkpoint's public API. See package checkpoint for the documentation.
package hold

import "sync"

// Mark is checkpoint.Mark: how far a queue had finished.
type Mark struct {
	gen uint64
	// Count is how many items the queue had finished.
	Count uint64
	// Seq is the feed sequence number of the last finished line, 0 if none.
	Seq uint64
	// Epoch and Position are those of the last finished line.
	Epoch    uint64
	Position int64
}

// Binding identifies the subscription the mark was taken under: it changes
// each time a new queue of the group is bound to the checkpoint (see
// [Set.Bind]). A mark of an earlier binding is ignored by
// [Checkpoint.DurableThrough]. The framework compares bindings to tell
// whether a durable mark belongs to a queue it has removed.
func (m Mark) Binding() uint64 { return m.gen }

// Progress is checkpoint.Progress: the last item a queue has finished.
type Progress func() Mark

// Set is checkpoint.Set: the checkpoints of a server, by feed and group.
type Set struct {
	mu    sync.Mutex
	holds map[key]*Checkpoint
}

type key struct{ feed, group string }

// NewSet returns an empty set.
func NewSet() *Set {
	return &Set{holds: make(map[key]*Checkpoint)}
}

// Hold returns the checkpoint of (feed, group), creating it if needed, and
// marks it held.
func (r *Set) Hold(feed, group string) *Checkpoint {
	c := r.checkpoint(feed, group)
	c.mu.Lock()
	c.held = true
	c.mu.Unlock()
	return c
}

// Lookup returns the checkpoint of (feed, group), or nil if none was taken.
func (r *Set) Lookup(feed, group string) *Checkpoint {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.holds[key{feed, group}]
}

// Bind attaches the progress of a newly subscribed queue of group on feed:
// a new binding, which starts with nothing durable.
func (r *Set) Bind(feed, group string, progress Progress) {
	c := r.checkpoint(feed, group)
	c.mu.Lock()
	c.gen++
	c.progress = progress
	c.durable = Mark{gen: c.gen}
	c.mu.Unlock()
}

// OnAdvance sets fn to be called after each [Checkpoint.DurableThrough] of
// group on feed that moves the durable mark forward, on the goroutine that
// declared it and with no lock held; nil removes it. The framework sets one
// so that it commits as soon as a hold lets it, not at its next duty cycle.
// fn must be quick and must not block.
func (r *Set) OnAdvance(feed, group string, fn func()) {
	c := r.checkpoint(feed, group)
	c.mu.Lock()
	c.advanced = fn
	c.mu.Unlock()
}

// checkpoint returns the checkpoint of (feed, group), making it (not held)
// if there is none.
func (r *Set) checkpoint(feed, group string) *Checkpoint {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := key{feed, group}
	c := r.holds[k]
	if c == nil {
		c = &Checkpoint{feed: feed, group: group}
		r.holds[k] = c
	}
	return c
}

// Checkpoint is checkpoint.Checkpoint: the hold of one group on one feed.
type Checkpoint struct {
	feed, group string

	mu       sync.Mutex
	held     bool
	gen      uint64
	progress Progress
	durable  Mark
	advanced func()
}

// Feed returns the name of the feed the checkpoint holds.
func (c *Checkpoint) Feed() string { return c.feed }

// Group returns the name of the processor group the checkpoint holds.
func (c *Checkpoint) Group() string { return c.group }

// Mark reads how many items the group's queue has finished, under the
// current binding; a mark of nothing before the queue is bound.
func (c *Checkpoint) Mark() Mark {
	c.mu.Lock()
	p, gen := c.progress, c.gen
	c.mu.Unlock()
	if p == nil {
		return Mark{gen: gen}
	}
	m := p()
	m.gen = gen
	return m
}

// DurableThrough declares that the effects of every item up to m are
// durable. An older mark, or one of an earlier binding, is ignored.
func (c *Checkpoint) DurableThrough(m Mark) {
	c.mu.Lock()
	if m.gen != c.gen || m.Count <= c.durable.Count {
		c.mu.Unlock()
		return
	}
	c.durable = m
	fn := c.advanced
	c.mu.Unlock()
	if fn != nil {
		fn()
	}
}

// Release ends the hold.
func (c *Checkpoint) Release() {
	c.mu.Lock()
	c.held = false
	c.mu.Unlock()
}

// Durable returns the last mark declared durable and whether the checkpoint
// is held.
func (c *Checkpoint) Durable() (m Mark, held bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.durable, c.held
}
