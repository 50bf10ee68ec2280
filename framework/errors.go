package framework

import (
	"errors"
	"fmt"
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
