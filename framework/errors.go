package framework

import (
	"errors"
	"fmt"

	"github.com/tidemark-go/tidemark/state"
)

// Errors of configuration and of operator calls.
var (
	// ErrInvalidConfig is wrapped by every error of a config that cannot
	// make a server.
	ErrInvalidConfig = errors.New("framework: invalid config")
	// ErrUnknownFeed is returned for a feed name the server does not have.
	ErrUnknownFeed = errors.New("framework: unknown feed")
	// ErrUnknownGroup is returned for a group name the server does not have.
	ErrUnknownGroup = errors.New("framework: unknown processor group")
	// ErrUnknownProcessor is returned for a processor name that is not in
	// the group (or, at New, not in the registry).
	ErrUnknownProcessor = errors.New("framework: unknown processor")
	// ErrNotSubscribed is returned by Unsubscribe when the group has no
	// queue on the feed.
	ErrNotSubscribed = errors.New("framework: group not subscribed to feed")
	// ErrNoHold is returned by Release when no removed consumer holds the
	// feed.
	ErrNoHold = errors.New("framework: no removed consumer holds the feed")
	// ErrNotFenced is returned by LiftFence for a group that is not fenced.
	ErrNotFenced = errors.New("framework: group not fenced")
	// ErrState is returned by Start and Stop when called out of order.
	ErrState = errors.New("framework: server not in the right state")
	// ErrNoStore is returned by [Context.Store] and [Server.Store] for a
	// group that has no store (GroupConfig.Store is empty).
	ErrNoStore = errors.New("framework: the processor group has no store")
	// ErrInputMissing is wrapped by the error of a run until settled
	// (Config.UntilSettled) whose feed's input does not exist: a wrong
	// path, most likely; waiting would never settle.
	ErrInputMissing = errors.New("framework: the feed's input does not exist")
)

// ErrStalled is matched (errors.Is) by every [*StalledError].
var ErrStalled = errors.New("framework: feed stalled")

// StalledError is returned by [Server.WaitSettled] when the feed is
// stalled: it holds its pointer for a reason that waiting will not clear.
type StalledError struct {
	// Feed is the stalled feed's name.
	Feed string
	// Reason is FeedStatus.StallReason.
	Reason string
}

// Error names the feed and the stall reason.
func (e *StalledError) Error() string {
	return fmt.Sprintf("framework: feed %q stalled: %s", e.Feed, e.Reason)
}

// Is reports whether target is ErrStalled.
func (e *StalledError) Is(target error) bool { return target == ErrStalled }

// Permanent marks err as one that retrying cannot fix (a line that can
// never be applied): the group's failure policy takes its Action at once,
// without the retries. Any error whose chain holds a value with a method
// Permanent() bool that returns true is treated the same (a
// state.ErrTooLarge error is one). Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string   { return e.err.Error() }
func (e *permanentError) Unwrap() error   { return e.err }
func (e *permanentError) Permanent() bool { return true }

// isPermanent reports whether err is marked permanent.
func isPermanent(err error) bool {
	var p interface{ Permanent() bool }
	return errors.As(err, &p) && p.Permanent()
}

// Fatal marks err as one that the server cannot go on after (a database
// that is gone, a broken invariant): the group stops at the line, which
// stays unfinished and is read again at the next start, and the server
// stops (without draining) and reports err from [Server.Run] and
// [Server.Err]. A store's failed commit (state.ErrFailed), a batched
// Apply on a store no checkpoint is bound to (state.ErrNotBound) and a
// damaged store (state.ErrCorrupt: no retry heals it, and skipping the
// line would lose it) are fatal without being marked. Fatal(nil) is nil.
func Fatal(err error) error {
	if err == nil {
		return nil
	}
	return &fatalError{err}
}

type fatalError struct{ err error }

func (e *fatalError) Error() string { return e.err.Error() }
func (e *fatalError) Unwrap() error { return e.err }

// isFatal reports whether a processor's err must stop the server.
func isFatal(err error) bool {
	var f *fatalError
	return errors.As(err, &f) || errors.Is(err, state.ErrFailed) || errors.Is(err, state.ErrNotBound) ||
		errors.Is(err, state.ErrCorrupt)
}
