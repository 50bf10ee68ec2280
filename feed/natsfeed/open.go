package natsfeed

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tidemark-go/tidemark/feed"
)

// minServer is the oldest nats-server that can reset a consumer to a
// sequence (ResetConsumerToSequence).
var minServer = [3]int{2, 14, 0}

// open looks the stream up, decides where to start, makes and resets the
// consumer, and starts the pump. While the stream does not exist it
// returns nil with s.opened false.
func (s *Source) open(ctx context.Context) error {
	if v := s.nc.ConnectedServerVersion(); v != "" && !versionAtLeast(v, minServer) {
		return s.errorf(ErrConsumer, 0, "the server runs nats-server %s; the source needs 2.14 or later to reset its consumer to the stores' position", v)
	}
	c, cancel := s.api(ctx)
	stream, err := s.js.Stream(c, s.cfg.Stream)
	cancel()
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if !s.waitLog {
			s.waitLog = true
			s.log.Warn("waiting for the stream to be created")
		}
		s.mu.Lock()
		s.st.state, s.st.detail = feed.StateWaiting, "waiting for stream "+s.cfg.Stream
		s.mu.Unlock()
		return nil
	}
	if err != nil {
		return fmt.Errorf("natsfeed: stream %s: look up: %w", s.cfg.Stream, err)
	}
	info := stream.CachedInfo()
	epoch := uint64(info.Created.UnixNano())
	s.epoch.Store(epoch)
	first, last := max(info.State.FirstSeq, 1), info.State.LastSeq

	c, cancel = s.api(ctx)
	old, err := stream.Consumer(c, s.cfg.Consumer)
	cancel()
	var floor uint64
	existed := err == nil
	switch {
	case existed:
		oi := old.CachedInfo()
		floor = oi.AckFloor.Stream
		if oi.Config.FilterSubject != s.cfg.FilterSubject {
			s.log.Warn("the consumer exists with another filter: it is updated", "filter", oi.Config.FilterSubject, "new_filter", s.cfg.FilterSubject)
		}
	case errors.Is(err, jetstream.ErrConsumerNotFound):
	default:
		return fmt.Errorf("natsfeed: stream %s consumer %s: look up: %w", s.cfg.Stream, s.cfg.Consumer, err)
	}

	start, applied, err := s.plan(ctx, stream, epoch, first, last, floor, existed)
	if err != nil {
		return err
	}

	c, cancel = s.api(ctx)
	cons, err := stream.CreateOrUpdateConsumer(c, s.cfg.consumerConfig())
	cancel()
	if err != nil {
		if code := apiErrorCode(err); code >= 400 && code < 500 {
			return s.errorf(ErrConsumer, 0, "create or update: %v; delete the consumer or give the source another Consumer name", err)
		}
		return fmt.Errorf("natsfeed: stream %s consumer %s: create: %w", s.cfg.Stream, s.cfg.Consumer, err)
	}
	c, cancel = s.api(ctx)
	resp, err := s.js.ResetConsumerToSequence(c, s.cfg.Stream, s.cfg.Consumer, start)
	cancel()
	if err != nil {
		if errors.Is(err, jetstream.ErrConsumerInvalidReset) || apiErrorCode(err) == 400 {
			return s.errorf(ErrConsumer, start, "reset to the start refused: %v", err)
		}
		return fmt.Errorf("natsfeed: stream %s consumer %s: reset to sequence %d: %w", s.cfg.Stream, s.cfg.Consumer, start, err)
	}
	if resp.ResetSeq != start {
		return s.errorf(ErrConsumer, start, "the server reset the consumer to sequence %d instead", resp.ResetSeq)
	}
	// The stream recreated meanwhile would be read under the old epoch.
	c, cancel = s.api(ctx)
	now, err := stream.Info(c)
	cancel()
	if err != nil {
		return fmt.Errorf("natsfeed: stream %s: look up again after the reset: %w", s.cfg.Stream, err)
	}
	if !now.Created.Equal(info.Created) {
		return fmt.Errorf("natsfeed: stream %s was recreated while the source opened it: opening again", s.cfg.Stream)
	}

	s.stream, s.cons = stream, cons
	s.committed.Store(start - 1)
	s.acked.Store(0)
	s.read.Store(start - 1)
	s.mu.Lock()
	s.st.first, s.st.last, s.st.start = now.State.FirstSeq, now.State.LastSeq, start
	s.st.ackFloor, s.st.ackPending = resp.AckFloor.Stream, resp.NumAckPending
	s.st.leader = leaderOf(resp.ConsumerInfo)
	s.st.state, s.st.detail = feed.StateBehind, ""
	s.mu.Unlock()
	s.pending.Store(resp.NumPending)
	s.opened = true
	s.log.Info("source open", "epoch", epoch, "start", start, "applied", applied, "ack_floor_was", floor,
		"stream_first", now.State.FirstSeq, "stream_last", now.State.LastSeq, "filter", s.cfg.FilterSubject, "pending", resp.NumPending)

	p := &pump{s: s, cons: cons, stream: stream}
	p.begin(resp.ConsumerInfo, 0)
	s.workers.Add(2)
	go p.run()
	go s.listen()
	return nil
}

// plan decides where the source starts: at the lowest sequence the
// stores' records cover, and never above where the consumer's ack floor
// would resume subscribers without a store. It checks each record of the
// current epoch against the stream. applied is the lowest applied
// sequence of the current epoch's records (0 when none).
func (s *Source) plan(ctx context.Context, stream jetstream.Stream, epoch, first, last, floor uint64, existed bool) (start, applied uint64, err error) {
	fromFirst := false
	cover := uint64(0) // lowest applied+1 of the current epoch's records
	checked := map[uint64]bool{}
	for _, p := range s.points {
		switch {
		case !p.Found:
			fromFirst = true
			s.log.Info("a store holds no record of the feed: reading from the stream's first sequence", "holder", p.Holder, "epoch", epoch, "first", first)
		case p.Lineage.Epoch != epoch:
			fromFirst = true
			s.log.Warn("new epoch: a store's record is of another epoch of the stream (deleted and recreated since): reading the stream from its first sequence",
				"holder", p.Holder, "epoch", epoch, "record_epoch", p.Lineage.Epoch, "record_position", p.Lineage.Position, "first", first)
		default:
			a := uint64(p.Lineage.Position)
			if a > last {
				return 0, 0, &Error{Kind: ErrStreamBehind, Stream: s.cfg.Stream, Consumer: s.cfg.Consumer, Partition: s.cfg.Partition,
					Epoch: epoch, Seq: a, Holder: p.Holder,
					Detail: fmt.Sprintf("the stream's last sequence is %d: the server lost acknowledged messages (a crash with the default sync interval: run it with sync_interval: always, or R3 streams), or the store belongs to another stream; new messages would reuse sequences the store takes for applied", last)}
			}
			if a > 0 && !checked[a] {
				checked[a] = true
				if err := s.checkApplied(ctx, stream, epoch, first, p); err != nil {
					return 0, 0, err
				}
			}
			if cover == 0 || a+1 < cover {
				cover = a + 1
			}
		}
	}
	switch {
	case len(s.points) == 0 && existed:
		// No store: the consumer's ack floor is what the subscribers
		// finished, the only record there is.
		start = floor + 1
		if floor > last {
			// The server lost messages it had delivered: the sequences
			// after its end will be reused by new messages, which
			// must not be skipped.
			s.log.Warn("the consumer's ack floor is past the stream's end: the server lost acknowledged messages (see sync_interval); reading from the stream's end",
				"epoch", epoch, "ack_floor", floor, "last", last)
			start = last + 1
		}
		if start < first {
			if err := s.gapAtStart(start, first, "the consumer's ack floor", 0); err != nil {
				return 0, 0, err
			}
			start = first
		}
		return start, 0, nil
	case len(s.points) == 0:
		return first, 0, nil
	case fromFirst || cover == 0:
		start = first
	default:
		start = cover
		if start < first {
			if err := s.gapAtStart(start, first, "the stores' records", cover-1); err != nil {
				return 0, 0, err
			}
			start = first
		}
	}
	if cover > 0 {
		applied = cover - 1
	}
	if existed {
		fl := max(floor+1, first)
		switch {
		case floor+1 < start:
			if floor+1 < first {
				s.log.Warn("the consumer's ack floor is below the stream's first sequence: messages were removed before every subscriber finished them; subscribers without a store may have missed them",
					"epoch", epoch, "ack_floor", floor, "first", first)
			}
			if fl < start {
				s.log.Info("reading from the consumer's ack floor, below the stores' records: subscribers without a store get what they did not finish; the stores skip what they applied",
					"epoch", epoch, "start", fl, "stores_start", start)
				start = fl
			}
		case floor+1 > start && floor > 0:
			why := fmt.Sprintf("a store is behind the consumer's ack floor: reading from sequence %d, the floor is %d (a restored or damaged store, or another process acknowledged for this consumer)", start, floor)
			s.log.Warn("reading from below the consumer's ack floor: "+why, "epoch", epoch, "start", start, "ack_floor", floor)
			s.mu.Lock()
			s.st.rewinds++
			s.st.lastRewind = why
			s.mu.Unlock()
		}
	}
	return start, applied, nil
}

// gapAtStart handles messages start..first-1 that are gone when the source
// opens: an error by default, a logged skip under GapSkip.
func (s *Source) gapAtStart(start, first uint64, what string, applied uint64) error {
	e := s.errorf(ErrGap, 0, "%s need the stream from sequence %d, its first sequence is %d: messages were purged, aged out (MaxAge) or removed by a limit before they were applied, and any of this partition among them are lost; if that is accepted (or the partition had none there), set OnGap: GapSkip for one start", what, start, first)
	e.Seq, e.From, e.To = applied, start, first-1
	if s.cfg.OnGap == GapSkip {
		s.gapsSkipped.Add(1)
		s.log.Error("gap skipped (OnGap: skip): reading from the stream's first sequence", "err", e)
		return nil
	}
	return e
}

// checkApplied checks the message at the sequence a store applied: it must
// match the partition's filter and, when the store recorded its tail hash,
// be the message the store applied.
func (s *Source) checkApplied(ctx context.Context, stream jetstream.Stream, epoch, first uint64, p feed.ResumePoint) error {
	a := uint64(p.Lineage.Position)
	c, cancel := s.api(ctx)
	m, err := stream.GetMsg(c, a)
	cancel()
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		if a >= first {
			s.log.Warn("the message at a store's applied sequence was deleted from the stream: it cannot be checked", "holder", p.Holder, "epoch", epoch, "seq", a)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("natsfeed: stream %s: read message %d to check the record of %s: %w", s.cfg.Stream, a, p.Holder, err)
	}
	// The hash first: a store that recorded it tells a lost and reused
	// sequence from a store of another partition.
	if p.Lineage.TailLen > 0 {
		if h := msgHash(epoch, a, m.Time.UnixNano(), m.Subject, m.Data); h != p.Lineage.TailHash {
			return &Error{Kind: ErrDiverged, Stream: s.cfg.Stream, Consumer: s.cfg.Consumer, Partition: s.cfg.Partition,
				Epoch: epoch, Seq: a, Holder: p.Holder,
				Detail: fmt.Sprintf("the message there (subject %s) hashes to %#x, the store recorded %#x: the server lost acknowledged messages and reused their sequences (run it with sync_interval: always, or R3 streams), or the store belongs to another stream", m.Subject, h, p.Lineage.TailHash)}
		}
	}
	if !subjectMatches(s.cfg.FilterSubject, m.Subject) {
		return &Error{Kind: ErrWrongPartition, Stream: s.cfg.Stream, Consumer: s.cfg.Consumer, Partition: s.cfg.Partition,
			Epoch: epoch, Seq: a, Holder: p.Holder,
			Detail: fmt.Sprintf("the message there is on subject %s, outside the filter %q: give this partition its own store (or, if the store recorded no tail hash, the server may have lost messages and reused the sequence)", m.Subject, s.cfg.FilterSubject)}
	}
	return nil
}

// leaderOf returns the consumer's leader as info names it ("" when it has
// no cluster information).
func leaderOf(ci *jetstream.ConsumerInfo) string {
	if ci == nil || ci.Cluster == nil {
		return ""
	}
	return ci.Cluster.Leader
}

// term identifies a consumer's leadership: the leader and when it was
// elected. A leader elected again, even the same server, is another term
// (a fail-over and back between two looks is still seen).
type term struct {
	leader string
	since  time.Time
}

// termOf returns the leadership info describes (zero without cluster
// information).
func termOf(ci *jetstream.ConsumerInfo) term {
	if ci == nil || ci.Cluster == nil {
		return term{}
	}
	t := term{leader: ci.Cluster.Leader}
	if ci.Cluster.LeaderSince != nil {
		t.since = *ci.Cluster.LeaderSince
	}
	return t
}

// String names the term for logs and errors.
func (t term) String() string {
	if t.since.IsZero() {
		return fmt.Sprintf("%q", t.leader)
	}
	return fmt.Sprintf("%q since %s", t.leader, t.since.Format(time.RFC3339Nano))
}

// versionAtLeast reports whether the server version v ("2.15.2",
// "2.14.0-beta.1") is at least min.
func versionAtLeast(v string, min [3]int) bool {
	v, _, _ = strings.Cut(strings.TrimPrefix(v, "v"), "-")
	parts := strings.SplitN(v, ".", 3)
	for i := range 3 {
		n := 0
		if i < len(parts) {
			var err error
			if n, err = strconv.Atoi(parts[i]); err != nil {
				return true // not a version we can read: let the server answer
			}
		}
		if n != min[i] {
			return n > min[i]
		}
	}
	return true
}
