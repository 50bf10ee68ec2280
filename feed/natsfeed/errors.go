package natsfeed

import (
	"errors"
	"fmt"
	"strings"
)

// The kinds of [Error]: what the source found that reading on cannot fix.
// Each is matched with errors.Is; the *Error says where.
var (
	// ErrGap means messages the subscribers still needed are no longer in
	// the stream: purged, aged out (MaxAge) or removed by another limit
	// (MaxMsgs, MaxBytes) before they were delivered and applied.
	ErrGap = errors.New("natsfeed: messages missing from the stream")
	// ErrStreamBehind means the stream ends below a sequence a store has
	// applied: the server lost acknowledged messages (a crash with the
	// default sync interval), or the store belongs to another stream.
	// New messages would reuse sequences the store takes for applied.
	ErrStreamBehind = errors.New("natsfeed: stream ends below what a store applied")
	// ErrDiverged means the message at a store's applied sequence is not
	// the message the store applied (its tail hash differs): the stream's
	// sequences were reused, or the store belongs to another stream.
	ErrDiverged = errors.New("natsfeed: stream holds another message at the applied sequence")
	// ErrWrongPartition means the message at a store's applied sequence
	// is outside the partition's filter: the store belongs to another
	// partition.
	ErrWrongPartition = errors.New("natsfeed: store's record is of another partition")
	// ErrSecondReader means another client pulls from, or resets, the
	// source's consumer: the consumer sequence jumped or went back while
	// the connection and the consumer's leader stayed the same. Two
	// owners of one partition apply its messages twice.
	ErrSecondReader = errors.New("natsfeed: another client reads the consumer")
	// ErrStreamChanged means the stream was deleted, or deleted and
	// recreated (a new epoch), while the source read it. A new source
	// reads the new stream from its first sequence.
	ErrStreamChanged = errors.New("natsfeed: stream deleted or recreated")
	// ErrConsumer means the consumer cannot be made or used as the source
	// needs it (it exists with an incompatible configuration, the server
	// refuses it, or the server is older than 2.14 and cannot reset it).
	ErrConsumer = errors.New("natsfeed: consumer unusable")
	// ErrClosed is returned by Poll after Close, and when the NATS
	// connection was closed.
	ErrClosed = errors.New("natsfeed: source closed")
)

// ErrConfig is wrapped by every error of a Config that cannot make a
// source.
var ErrConfig = errors.New("natsfeed: invalid config")

// ErrStarted is returned by ResumeFrom once the source has started.
var ErrStarted = errors.New("natsfeed: source started already")

// Error is a problem of the stream or of the consumer that reading on
// cannot fix: the source stops (every later Poll returns it) and says
// what, on which stream, partition, epoch and sequences. Permanent reports
// true: the framework does not retry it.
type Error struct {
	// Kind is the sentinel the error matches (ErrGap, ErrStreamBehind,
	// ...).
	Kind error
	// Stream, Consumer and Partition name where.
	Stream, Consumer, Partition string
	// Epoch is the stream's epoch (its creation time, in nanoseconds).
	Epoch uint64
	// Seq is the stream sequence concerned: the store's applied sequence,
	// or the last sequence the source handed out.
	Seq uint64
	// From and To bound the missing sequences of a gap (both included);
	// zero otherwise.
	From, To uint64
	// Holder names the store whose record is concerned, when one is.
	Holder string
	// Detail says what was seen and what to do.
	Detail string
}

// Error names the kind, where, and what to do.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Kind.Error())
	fmt.Fprintf(&b, ": stream %s", e.Stream)
	if e.Partition != "" {
		fmt.Fprintf(&b, " partition %s", e.Partition)
	}
	if e.Consumer != "" {
		fmt.Fprintf(&b, " consumer %s", e.Consumer)
	}
	fmt.Fprintf(&b, " epoch %d", e.Epoch)
	if e.From != 0 || e.To != 0 {
		fmt.Fprintf(&b, " sequences %d-%d", e.From, e.To)
	}
	if e.Seq != 0 {
		fmt.Fprintf(&b, " sequence %d", e.Seq)
	}
	if e.Holder != "" {
		fmt.Fprintf(&b, " (%s)", e.Holder)
	}
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	return b.String()
}

// Unwrap returns Kind.
func (e *Error) Unwrap() error { return e.Kind }

// Permanent reports true: retrying does not help.
func (e *Error) Permanent() bool { return true }

// permanent reports whether err is one the source does not retry.
func permanent(err error) bool {
	var p interface{ Permanent() bool }
	return errors.As(err, &p) && p.Permanent()
}
