package framework

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/feed"
)

// FeedStatus is a feed's state at one moment: its source's own facts and
// what the server knows of its consumers and commits.
type FeedStatus struct {
	// Status is the source's own facts.
	feed.Status
	// Name is the feed's name.
	Name string
	// Policy is the overload policy in force.
	Policy OverloadPolicy
	// Consumers counts the live subscriber queues.
	Consumers int
	// PendingAcks counts lines handed to the queues and not yet committed.
	PendingAcks uint64
	// ProcessedPending counts lines that every live consumer has finished
	// (and every hold has declared durable) and that the feed has not
	// committed yet: the commit lag. The feed commits them at its next duty
	// cycle, or as soon as a consumer finishes a batch or a hold advances.
	ProcessedPending uint64
	// ReadPending counts items (lines, and status events) read from the
	// source and not yet handed to every live queue: non-zero while a full
	// queue pauses the feed, or while a batch waits for a consumer.
	ReadPending uint64
	// Settled is true when the source is caught up or done, every line
	// read was handed off and finished by every live consumer, and the
	// feed is not stalled. It does not wait for the commit: PendingAcks
	// may still be a few lines.
	Settled bool
	// Stalled is true when the feed holds its pointer for a reason that
	// waiting does not clear; StallReason says which (reasons are joined
	// by "; ").
	Stalled     bool
	StallReason string
	// LastCommitSeq, LastCommitEpoch and LastCommitPosition are the last
	// line the server committed in this run (0 before the first commit).
	// They are the server's side of the commit; the position the pointer
	// file holds is Status.CommittedPosition, which lags them while a
	// pointer write is in progress.
	LastCommitSeq      uint64
	LastCommitEpoch    uint64
	LastCommitPosition int64
	// Counters of this run. Read counts lines read from the source;
	// Delivered counts line hand-offs to queues (a line given to two
	// groups counts twice); Dropped counts lines dropped for a queue
	// (DropAfterSpin, or a removed queue of a feed that does not hold);
	// Failed counts failed handling attempts (errors and panics); Skipped
	// counts lines the failure policy skipped; Released counts holds given
	// up with Release.
	Read, Delivered, Dropped, Failed, Skipped, Released uint64
	// PollErrors and CommitErrors count failed reads and commits.
	PollErrors, CommitErrors uint64
	// Groups has one entry per live consumer queue, then one per removed
	// queue that still holds the pointer.
	Groups []QueueStatus
}

// QueueStatus is one processor group's queue on a feed.
type QueueStatus struct {
	// Group is the name of the queue's processor group.
	Group string
	// Depth counts items handed to the queue and not finished.
	Depth uint64
	// Processed counts lines finished (handled or skipped).
	Processed uint64
	// Failures and Skipped count failed attempts and skipped lines.
	Failures, Skipped uint64
	// SkippedByReason counts the skipped lines by reason ([RejectReason]);
	// nil when none was skipped.
	SkippedByReason map[string]uint64
	// Dropped counts lines dropped for this queue.
	Dropped uint64
	// Fenced is true when the group is quarantined or dead.
	Fenced bool
	// Removed is true for a removed queue that still holds the pointer.
	Removed bool
}

func queueStatus(q *queue) QueueStatus {
	return QueueStatus{
		Group:           q.g.name,
		Depth:           q.depth(),
		Processed:       q.processed(),
		Failures:        q.failures.Load(),
		Skipped:         q.skipped.Load(),
		SkippedByReason: q.skipReasons.snapshot(),
		Dropped:         q.dropped.Load(),
		Fenced:          q.g.blocked(),
		Removed:         q.removed.Load(),
	}
}

// FeedStatus returns the named feed's status.
func (s *Server) FeedStatus(name string) (FeedStatus, error) {
	f, err := s.feed(name)
	if err != nil {
		return FeedStatus{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	st := FeedStatus{
		Status:             f.src.Status(),
		Name:               f.name,
		Policy:             f.policy,
		Consumers:          len(f.live),
		LastCommitSeq:      f.committed.seq,
		LastCommitEpoch:    f.committed.epoch,
		LastCommitPosition: f.committed.pos,
		Read:               f.read.Load(),
		Delivered:          f.delivered.Load(),
		Dropped:            f.dropped.Load(),
		Failed:             f.failed.Load(),
		Skipped:            f.skipped.Load(),
		Released:           f.released.Load(),
		PollErrors:         f.pollErrors.Load(),
		CommitErrors:       f.commitErrors.Load(),
	}
	if f.lastHanded.seq > f.committed.seq {
		st.PendingAcks = f.lastHanded.seq - f.committed.seq
	}
	if t := f.targetLocked(false); t.seq > f.committed.seq {
		st.ProcessedPending = t.seq - f.committed.seq
	}
	st.ReadPending = uint64(f.pending)
	busy := f.pending > 0
	for _, q := range f.live {
		qs := queueStatus(q)
		if qs.Depth > 0 {
			busy = true
		}
		st.Groups = append(st.Groups, qs)
	}
	for _, q := range f.ghosts {
		if _, c := q.bound(); c {
			st.Groups = append(st.Groups, queueStatus(q))
		}
	}
	if r := f.stallReasonsLocked(); len(r) > 0 {
		st.Stalled = true
		st.StallReason = strings.Join(r, "; ")
	}
	atEnd := f.done || st.State == feed.StateCaughtUp || st.State == feed.StateDone
	st.Settled = atEnd && !busy && !st.Stalled
	return st, nil
}

// WaitSettled waits until the named feed is settled and returns nil. It
// returns a [*StalledError] (errors.Is(err, ErrStalled)) as soon as the
// feed is stalled, since a stalled feed never settles by waiting, and
// ctx's error, wrapped, when ctx ends first.
func (s *Server) WaitSettled(ctx context.Context, name string) error {
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for {
		st, err := s.FeedStatus(name)
		if err != nil {
			return err
		}
		if st.Stalled {
			return &StalledError{Feed: name, Reason: st.StallReason}
		}
		if st.Settled {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("framework: wait for feed %q to settle (state %s, %d lines pending): %w", name, st.State, st.PendingAcks, ctx.Err())
		case <-t.C:
		}
	}
}

// GroupState is the state of a processor group.
type GroupState string

// The states of a group.
const (
	GroupRunning GroupState = "running"
	// GroupFenced: quarantined after a failure; its feeds pause until the
	// fence lifts.
	GroupFenced GroupState = "fenced"
	// GroupDead: a restart failed; its feeds pause until it is removed.
	GroupDead GroupState = "dead"
	// GroupRemoved: removed with RemoveGroup.
	GroupRemoved GroupState = "removed"
	// GroupRestarting: RestartGroup is between its old and new
	// processors; feeds that hold wait for it.
	GroupRestarting GroupState = "restarting"
)

// GroupStatus is a processor group's state at one moment.
type GroupStatus struct {
	// Name is the group's name.
	Name string
	// State is the group's state.
	State GroupState
	// Processors are the names of its processors, in delivery order.
	Processors []string
	// Feeds are the feeds it has a live queue on.
	Feeds []string
	// Fence describes the failure that quarantined the group; nil unless
	// State is GroupFenced.
	Fence *Fence
}

// Fence is the failure that quarantined a group.
type Fence struct {
	// Processor is the processor that failed.
	Processor string
	// Delivery is the line it failed on.
	Delivery tidemark.Delivery
	// Err is its last error.
	Err error
}

// GroupStatus returns the named group's status.
func (s *Server) GroupStatus(name string) (GroupStatus, error) {
	g, err := s.group(name)
	if err != nil {
		return GroupStatus{}, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	st := GroupStatus{Name: g.name}
	switch g.state.Load() {
	case groupRunning:
		st.State = GroupRunning
	case groupFenced:
		st.State = GroupFenced
	case groupDead:
		st.State = GroupDead
	case groupRestarting:
		st.State = GroupRestarting
	default:
		st.State = GroupRemoved
	}
	for _, p := range g.procs {
		st.Processors = append(st.Processors, p.name)
	}
	if g.inc != nil {
		for _, q := range *g.inc.qsnap.Load() {
			st.Feeds = append(st.Feeds, q.f.name)
		}
	}
	if fc := g.fence; fc != nil && st.State == GroupFenced {
		st.Fence = &Fence{Processor: fc.proc.name, Delivery: fc.d, Err: fc.err}
	}
	return st, nil
}

// FeedNames returns the names of the server's feeds, in config order.
func (s *Server) FeedNames() []string {
	names := make([]string, len(s.feedOrder))
	for i, f := range s.feedOrder {
		names[i] = f.name
	}
	return names
}

// GroupNames returns the names of the server's processor groups, in config
// order.
func (s *Server) GroupNames() []string {
	names := make([]string, len(s.groupOrder))
	for i, g := range s.groupOrder {
		names[i] = g.name
	}
	return names
}
