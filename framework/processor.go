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
