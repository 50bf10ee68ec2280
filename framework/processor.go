package framework

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/checkpoint"
	"github.com/tidemark-go/tidemark/feed"
	"github.com/tidemark-go/tidemark/state"
)

// Processor handles the lines of the feeds it subscribes to. Its methods
// are called on its group's goroutine only, never concurrently.
type Processor interface {
	// Start is called once per start of the group, before any delivery.
	// The processor subscribes to feeds and takes checkpoint holds
	// through fc. An error fails the server's Start (or, on
	// [Server.RestartGroup], leaves the group dead).
	Start(ctx context.Context, fc *Context) error
	// Handle processes one line. line is only valid during the call: copy
	// what you keep. An error (or a panic) goes through the group's
	// failure policy. ctx is cancelled when the group is stopped,
	// restarted or removed, or its drain times out.
	Handle(ctx context.Context, d tidemark.Delivery, line []byte) error
}

// BatchHandler is implemented by processors that handle a run of lines in
// one call, at a cost per call rather than per line (a processor that
// applies its lines to a store with state.Namespace.ApplyEach or
// ApplyRuns, say).
//
// The group uses it on a queue where it is the only processor. With a
// Config.Observer, each line of a call is timed as its share of the
// call's time. On a queue of several processors the group calls Handle for
// each line, and so do the failure policy's retries and the fallback
// after a panic in HandleBatch: a BatchHandler's Handle must work on its
// own.
type BatchHandler interface {
	// HandleBatch handles the lines of b in order and returns how many it
	// finished. The lines of one call are consecutive lines of one feed,
	// at most those of one batch the feed read, and never span a status
	// event (FeedConfig.StatusEvents): an event reaches HandleStatus
	// between two calls, in its place among the lines.
	//
	// It must return (b.Len(), nil) when every line finished, or (k, err)
	// with 0 <= k < b.Len() and err != nil when line k failed: lines
	// before k count as finished, line k goes through the group's failure
	// policy as a Handle error would (its retries call Handle for that
	// line; an error marked [Fatal] stops the server), and the group goes
	// on from the line after k with a new call. Any other result ((k, nil)
	// with k < b.Len(), a k out of [0, b.Len()], (b.Len(), err)) is a bug
	// of the processor: the server stops with an error that says so, and
	// none of the call's lines counts as finished.
	//
	// A panic in HandleBatch is logged (Warn) and counted as a failure;
	// then each line of the call, from its first, is handed to Handle, one
	// at a time, with the failure policy for each: the line that panics
	// goes through the policy, and the lines the call had already handled
	// are handled again. Lines are delivered at least once: a processor
	// whose state is in a tidemark store skips (by epoch and position)
	// what it already applied; any other must tolerate the repeat.
	//
	// No line of the call counts as finished before the call returns: the
	// feed's pointer stays before the call's first line meanwhile, and a
	// checkpoint mark taken during the call covers only the lines before
	// it. ctx is Handle's: cancelled when the group is stopped, restarted
	// or removed, or its drain times out; return (k, ctx.Err()) then.
	// b and everything it returns are valid only during the call.
	HandleBatch(ctx context.Context, b *Batch) (done int, err error)
}

// Batch is a run of consecutive lines of one feed, in order, handed to
// [BatchHandler.HandleBatch]. It is valid only during the call: the group
// reuses it for its next call, and the memory of its lines with it. Copy
// what you keep.
type Batch struct {
	items []item // the run's items: lines only, never a status event
	data  []byte // the queue batch's data, that items' offsets point into
}

// Len returns how many lines the batch holds.
func (b *Batch) Len() int { return len(b.items) }

// Delivery returns line i's delivery (feed, epoch, position, seq), for
// 0 <= i < Len(). It points into the framework's own record of the line,
// shared with the other groups on the feed: read it, never write it. It is
// valid only during the call; copy the value to keep it.
func (b *Batch) Delivery(i int) *tidemark.Delivery { return &b.items[i].d }

// Line returns line i's payload, without its terminator, for
// 0 <= i < Len(): as Handle's line, it is valid only during the call and
// must not be written to (its capacity ends with it, so an append copies).
func (b *Batch) Line(i int) []byte {
	it := &b.items[i]
	return b.data[it.off:it.end:it.end]
}

// Stopper is implemented by processors that want to know when they stop:
// at [Server.Stop] after their group has drained, and when they or their
// group are removed or restarted.
type Stopper interface {
	Stop(ctx context.Context) error
}

// Drainer is implemented by processors that save in batches: at a clean
// [Server.Stop], once the group has finished every line in its queues and
// before the final commit, Drained is called on the group's goroutine. A
// processor that holds a checkpoint saves what it still buffers and
// declares it durable there, so that the final commit covers it. ctx ends
// with the drain timeout. An error is logged; the lines it covers stay
// uncommitted unless declared durable.
type Drainer interface {
	Drained(ctx context.Context) error
}

// StatusHandler is implemented by processors that want the feed's status
// events (see FeedConfig.StatusEvents). An error is logged and counted;
// status events are not retried.
type StatusHandler interface {
	HandleStatus(ctx context.Context, ev StatusEvent) error
}

// StatusEvent tells a processor that a feed's source changed state. It
// travels through the queue in order with the lines.
type StatusEvent struct {
	// Feed is the feed's name.
	Feed string
	// State and Detail are the source's new state and its detail.
	State  feed.State
	Detail string
	// Seq, Epoch and Position are those of the last line read before the
	// event.
	Seq      uint64
	Epoch    uint64
	Position int64
}

// Processors binds processor names used in a [Config] to processors. Each
// processor belongs to one group.
type Processors map[string]Processor

// Context is what a processor gets at Start: the way to subscribe to feeds
// and hold their commits. It stays valid while the processor runs.
type Context struct {
	s    *Server
	g    *group
	inc  *incarnation
	proc *procEntry
}

// Group returns the name of the processor's group.
func (c *Context) Group() string { return c.g.name }

// Name returns the processor's name.
func (c *Context) Name() string { return c.proc.name }

// Logger returns a logger with the group and processor attached.
func (c *Context) Logger() *slog.Logger {
	return c.s.log.With("group", c.g.name, "processor", c.proc.name)
}

// Subscribe makes the processor receive the lines of the named feed, from
// the next line the feed reads. The group gets one queue per feed, shared
// by its processors.
func (c *Context) Subscribe(feedName string) error {
	f := c.s.feeds[feedName]
	if f == nil {
		return fmt.Errorf("framework: processor %q of group %q subscribes to feed %q: %w", c.proc.name, c.g.name, feedName, ErrUnknownFeed)
	}
	return c.g.subscribe(c.inc, c.proc, f)
}

// Unsubscribe stops the processor receiving the named feed; it may be
// called from Handle (the line being handled still counts when Handle
// returns). When no processor of the group is left on the feed, the group's
// queue is removed: see [Server.Unsubscribe] for what the feed then holds.
func (c *Context) Unsubscribe(feedName string) error {
	f := c.s.feeds[feedName]
	if f == nil {
		return fmt.Errorf("framework: processor %q of group %q unsubscribes from feed %q: %w", c.proc.name, c.g.name, feedName, ErrUnknownFeed)
	}
	return c.g.unsubscribe(c.inc, c.proc, f)
}

// Store returns the group's store (GroupConfig.Store): the root namespace
// of the store the server opened for the group. The server binds it to
// every feed the group subscribes to, flushes it at a clean stop and
// closes it after the processors stopped: a processor only applies to it
// (with a namespace of its own, if the group has several processors). It
// returns an error wrapping [ErrNoStore] when the group has none.
func (c *Context) Store() (state.Store, error) {
	if c.g.store == nil {
		return nil, fmt.Errorf("%w: processor %q of group %q asks for a store: set the group's Store (YAML: store: bbolt:DIR)", ErrNoStore, c.proc.name, c.g.name)
	}
	return c.g.store, nil
}

// Checkpoint takes the hold of the processor's group on the named feed
// (see package checkpoint): while held, the group's queue counts as
// finished only up to the last mark declared durable. Take it before the
// feed delivers, in Start.
func (c *Context) Checkpoint(feedName string) *checkpoint.Checkpoint {
	return c.s.reg.Hold(feedName, c.g.name)
}

// PanicError is the error a recovered panic of a processor becomes.
type PanicError struct {
	// Value is what the processor panicked with.
	Value any
	// Stack is the goroutine's stack at the panic.
	Stack []byte
}

// Error says what the processor panicked with.
func (e *PanicError) Error() string { return fmt.Sprintf("framework: processor panicked: %v", e.Value) }
