package feed

import (
	"context"
	"time"

	"github.com/tidemark-go/tidemark"
)

// Item is one line read from a source.
type Item struct {
	// Seq is the line's sequence number in this run, from 1.
	Seq uint64
	// Epoch names the position space; 0 when the source has no positions.
	Epoch uint64
	// Position is the byte offset just after the line's terminator.
	Position int64
	// Line is the payload without its terminator ("\n" or "\r\n"). It is
	// only valid until the next call of Poll: copy what you keep.
	Line []byte
	// Origin describes the file the epoch was opened on; shared by every
	// item of the epoch. Nil when unknown.
	Origin *tidemark.Origin
	// File names the file of a file set (Config.Paths) the line was read
	// from: the path the set matched, the same for the whole life of the
	// file in the set, its rotations included. Epoch and Position are
	// that file's. Empty for a source of one file.
	File string
}

// Source is what the framework reads lines from and commits positions to.
// A Source is used by one goroutine at a time (the feed's runner), except
// Status, which may be called from any goroutine.
type Source interface {
	// Poll fills items with up to len(items) lines and returns how many it
	// filled. It returns 0 and a nil error when nothing is available now
	// (the caller backs off with its idle strategy), and [ErrDone] when a
	// once strategy has reached its end. Lines are valid until the next Poll.
	Poll(ctx context.Context, items []Item) (int, error)
	// Commit records that every line up to position in epoch has been
	// processed. A commit for an epoch other than the current one, or below
	// the committed position, is ignored. Sources without positions ignore
	// every commit.
	Commit(epoch uint64, position int64) error
	// Rereadable reports whether the source can deliver lines again after a
	// restart (a file with a pointer can; a pipe cannot). The framework
	// picks the default overload policy by it.
	Rereadable() bool
	// Status returns the source's own facts.
	Status() Status
	// Close releases the source's files. It does not commit.
	Close() error
}

// State is where a source is in its input.
type State int

// The states of a source.
const (
	StateStarting State = iota
	StateWaiting        // the input does not exist yet
	StateBehind         // there is more to read, or a reopen is in progress
	StateCaughtUp       // at the end of the input, tailing
	StateDone           // a once strategy reached its end
	StateStopped        // closed
)

// String returns the state's name as status shows it.
func (s State) String() string {
	switch s {
	case StateStarting:
		return "starting"
	case StateWaiting:
		return "waiting"
	case StateBehind:
		return "behind"
	case StateCaughtUp:
		return "caught up"
	case StateDone:
		return "done"
	case StateStopped:
		return "stopped"
	}
	return "unknown"
}

// Status is a source's own facts at one moment.
type Status struct {
	Path     string
	Strategy ReadStrategy
	State    State
	// Detail says more about State: "partial line pending", "waiting for
	// <path>", the reason of a reopen.
	Detail       string
	Epoch        uint64
	ReadPosition int64 // offset just after the last line read
	// CommittedPosition is the position in the pointer file for Epoch: of
	// the last pointer record written successfully (under GroupCommit, by
	// the writer goroutine, so it lags the commits while a write is in
	// progress). After a rewind below the pointer (see [Resumer]) it stays
	// at the pointer's position until the reading passes it.
	CommittedPosition int64
	// AskedPosition is the newest position of Epoch that Commit accepted.
	// It is ahead of CommittedPosition while a GroupCommit write is pending
	// and after a failed pointer write; equal to it otherwise.
	AskedPosition   int64
	FileSize        int64
	LinesRead       uint64
	BytesRead       uint64
	OversizeSkipped uint64
	PartialPending  bool
	// PartialDropped counts unterminated last lines of rotated-away files.
	PartialDropped   uint64
	Reopens          map[string]uint64 // by reason
	LastReopenReason string
	LastReopenAt     time.Time
	// CommitErrors counts failed pointer writes; LastCommitError is the
	// last one's message, empty when the last commit succeeded.
	CommitErrors    uint64
	LastCommitError string
	// Rewinds counts the starts at which a store was behind the pointer
	// (see [Resumer]) and the source read from the store's position rather
	// than the pointer's; LastRewind says why, naming the store and both
	// positions. Empty when none.
	Rewinds    uint64
	LastRewind string
	// Files has the status of each file of a file set (Config.Paths),
	// sorted by path: each is that file's own (Path names it). The fields
	// above then sum them up: Path joins the patterns, the counters and
	// positions are sums, Epoch is 0, State is behind while a file is,
	// caught up once every file is (or waits for its path). Nil for a
	// source of one file.
	Files []Status
}

// ResumePoint is what one stateful subscriber of a feed has durably
// applied: the record its store keeps for the feed, with the facts of the
// file (the lineage) that tell whether the record still describes the
// input. The framework makes one per store (and namespace) of every group
// that subscribes to the feed with a store.
type ResumePoint struct {
	// Holder names whose record it is ("group ledger-agent, store
	// bbolt:data"), for the logs and status.
	Holder string
	// Found is false when the store holds no record of the feed: it has
	// applied nothing of it, as far as it knows (a new, deleted or damaged
	// store).
	Found bool
	// Lineage is the store's durable record: epoch, position, and the file
	// facts it was applied from.
	Lineage tidemark.Lineage
}

// Resumer is implemented by a [Source] that can resume from what its
// stateful subscribers have made durable instead of from its own pointer:
// the store is the truth, the pointer a hint. The framework calls
// ResumeFrom once, before the first Poll, with one point per store of the
// groups that subscribe to the feed.
//
// The source then starts at the lowest position that every point covers,
// and never above where its own pointer would start it: a point in the
// pointer's epoch covers up to its position; a point of another epoch
// whose lineage matches the input (same leading bytes, same bytes before
// its position) covers up to its position too (the store skips those lines
// through its lineage); a point that is not found, or of an epoch the
// input no longer holds, covers nothing, so the input is read from its
// start. The pointer file itself is not moved back: commits below it are
// ignored until the reading passes it. Each start that reads from below
// the pointer is logged once at WARN (feed, epoch, the pointer's and the
// store's positions, the reason) and counted in [Status].Rewinds.
//
// An error means the points cannot be honoured (the source has started
// already, or was given its points before); the framework refuses to run
// the feed. [FileSource.ResumeFrom] details the file source's rule.
type Resumer interface {
	ResumeFrom(points []ResumePoint) error
}
