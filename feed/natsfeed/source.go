package natsfeed

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/feed"
)

// Source reads one partition of a JetStream stream for the framework: it
// implements [feed.Source] and [feed.Resumer]. See the package
// documentation for what it guarantees and what it checks.
//
// Poll, Commit, ResumeFrom and Close are called from one goroutine (the
// feed's runner); Status, Stats and the Origin's TailHash from any.
type Source struct {
	cfg Config
	js  jetstream.JetStream
	nc  *nats.Conn
	log *slog.Logger

	ctx    context.Context // canceled by Close
	cancel context.CancelFunc

	// The runner's own.
	points  []feed.ResumePoint
	resumed bool // ResumeFrom was called
	opened  bool
	closed  bool
	seq     uint64 // Item.Seq
	stream  jetstream.Stream
	cons    jetstream.Consumer
	origin  *tidemark.Origin
	waitLog bool // the wait for a missing stream was logged

	epoch     atomic.Uint64
	committed atomic.Uint64 // the last sequence the framework committed (or start-1)
	acked     atomic.Uint64 // the last sequence acknowledged
	read      atomic.Uint64 // the last sequence handed out by Poll

	buf chan entry
	// room is signalled by Poll once it took messages from buf, for the
	// pump's handler waiting for room in a full buffer.
	room chan struct{}

	// ackMu orders acknowledgements with the pump's resets: an ack sent
	// before a reset is for a sequence at or below the reset's floor, and
	// an ack sent after it is of a delivery of the reset's generation. The
	// server would otherwise let an old delivery's ack raise its delivered
	// floor and ignore the new generation's acks.
	ackMu sync.Mutex
	gen   uint64 // the consumer's delivery generation, under ackMu

	// heldMu guards held and dups, which TailHash reads from the stores'
	// committers.
	heldMu sync.Mutex
	held   []heldMsg // handed out and not committed, in sequence order
	dups   []heldMsg // re-deliveries above the commit, of the current generation, for acks

	failMu sync.Mutex
	failed error // the permanent error that stopped the source

	// mu guards the status facts the pump updates.
	mu sync.Mutex
	st status

	delivered, redelivered, resets, gapsSkipped, ackErrors, bytes atomic.Uint64
	fullWaits, fullNanos                                          atomic.Uint64 // the pump's waits for room in buf
	pending                                                       atomic.Uint64 // the partition's undelivered messages as last seen

	waker   *waker        // the listener and the ticker wake the pump
	reconn  atomic.Uint64 // reconnects seen by the listener
	workers sync.WaitGroup
}

// entry is a message accepted by the pump, waiting for Poll.
type entry struct {
	msg jetstream.Msg
	seq uint64
	ts  int64
	gen uint64
}

// heldMsg is a message handed out (or re-delivered) and not committed.
type heldMsg struct {
	seq uint64
	ts  int64
	gen uint64
	msg jetstream.Msg
}

// status holds what Status and Stats report beyond the counters. Under
// Source.mu.
type status struct {
	state      feed.State
	detail     string
	first      uint64 // the stream's first sequence, as last seen
	last       uint64 // the stream's last sequence, as last seen
	start      uint64 // the first sequence read this run
	ackFloor   uint64
	ackPending int
	leader     string
	reopens    map[string]uint64
	lastReopen string
	lastAt     time.Time
	rewinds    uint64
	lastRewind string
	lastAckErr string
}

// New returns a source of cfg's stream and partition. It does no I/O: the
// stream is looked up, the consumer created and reset at the first Poll
// (or [Source.Open]), after [Source.ResumeFrom] gave the stores' records.
func New(cfg Config) (*Source, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Source{
		cfg:    cfg,
		js:     cfg.JetStream,
		nc:     cfg.JetStream.Conn(),
		ctx:    ctx,
		cancel: cancel,
		buf:    make(chan entry, cfg.Buffer),
		room:   make(chan struct{}, 1),
	}
	s.waker = newWaker(ctx)
	s.log = cfg.Logger.With("stream", cfg.Stream, "consumer", cfg.Consumer)
	if cfg.Partition != "" {
		s.log = s.log.With("partition", cfg.Partition)
	}
	s.st.state = feed.StateStarting
	s.st.reopens = map[string]uint64{}
	s.origin = &tidemark.Origin{TailHash: s.tailHash}
	return s, nil
}

// ResumeFrom takes the stores' records of the feed ([feed.Resumer]). The
// source starts at the lowest sequence they cover: applied+1 for a record
// of the stream's current epoch, the stream's first sequence for a store
// with no record or a record of another epoch (the stream was recreated).
// It must be called before the first Poll; the records are checked when
// the source opens (a gap, a stream behind a store, a message that is not
// the one applied are errors then).
func (s *Source) ResumeFrom(points []feed.ResumePoint) error {
	if s.opened || s.closed {
		return fmt.Errorf("%w: stream %s: ResumeFrom after the first Poll", ErrStarted, s.cfg.Stream)
	}
	for _, p := range points {
		if p.Found && p.Lineage.Position < 0 {
			return fmt.Errorf("natsfeed: stream %s: record of %s has a negative position %d", s.cfg.Stream, p.Holder, p.Lineage.Position)
		}
	}
	s.points = append(s.points[:0], points...)
	s.resumed = true
	return nil
}

// Open looks up the stream, checks the stores' records against it,
// creates or updates the consumer, resets it to where the source starts
// and starts pulling. Poll calls it when it has not been called; call it
// first to fail before the framework starts. It returns nil without
// opening while the stream does not exist (status waiting), an error
// matching one of the kinds of [Error] when the records cannot be
// honoured, and other errors (the server unreachable) that a later call
// retries.
func (s *Source) Open(ctx context.Context) error {
	if s.closed {
		return ErrClosed
	}
	if err := s.failure(); err != nil {
		return err
	}
	if s.opened {
		return nil
	}
	err := s.open(ctx)
	if err != nil && permanent(err) {
		s.fail(err)
	}
	return err
}

// Poll hands out up to len(items) messages the pump has received, in
// stream order, and never blocks. Once the source has stopped on an
// [Error], Poll hands out what it had received before, then returns the
// error.
func (s *Source) Poll(ctx context.Context, items []feed.Item) (int, error) {
	if s.closed {
		return 0, ErrClosed
	}
	if !s.opened {
		if err := s.Open(ctx); err != nil || !s.opened {
			return 0, err
		}
	}
	n := 0
	var bytes uint64
	epoch := s.epoch.Load()
	s.heldMu.Lock()
fill:
	for n < len(items) {
		select {
		case e := <-s.buf:
			s.seq++
			data := e.msg.Data()
			items[n] = feed.Item{Seq: s.seq, Epoch: epoch, Position: int64(e.seq), Line: data, Origin: s.origin}
			s.held = append(s.held, heldMsg{seq: e.seq, ts: e.ts, gen: e.gen, msg: e.msg})
			bytes += uint64(len(data))
			n++
		default:
			break fill
		}
	}
	s.heldMu.Unlock()
	if n > 0 {
		select {
		case s.room <- struct{}{}:
		default:
		}
		s.read.Store(uint64(items[n-1].Position))
		s.bytes.Add(bytes)
		return n, nil
	}
	return 0, s.failure()
}

// Commit acknowledges (AckAll) the message at position, which the
// framework has committed: every message of the partition up to it is
// done. Commits of another epoch, at or below the last one, or of a
// position never handed out are ignored. The acknowledgement is sent
// without waiting for the server's reply; a failed send is returned, and
// the next Commit acknowledges again.
func (s *Source) Commit(epoch uint64, position int64) error {
	if s.closed || !s.opened || epoch != s.epoch.Load() || position <= 0 || uint64(position) <= s.committed.Load() {
		return nil
	}
	pos := uint64(position)
	locked := s.ackMu.TryLock()
	var gen uint64
	if locked {
		defer s.ackMu.Unlock()
		gen = s.gen
	}
	var ack jetstream.Msg
	var ackSeq uint64
	s.heldMu.Lock()
	i := 0
	for ; i < len(s.held) && s.held[i].seq <= pos; i++ {
		if h := s.held[i]; locked && h.gen == gen {
			ack, ackSeq = h.msg, h.seq
		}
	}
	s.held = dropFront(s.held, i)
	j := 0
	for ; j < len(s.dups) && s.dups[j].seq <= pos; j++ {
		if h := s.dups[j]; locked && h.gen == gen && h.seq > ackSeq {
			ack, ackSeq = h.msg, h.seq
		}
	}
	s.dups = dropFront(s.dups, j)
	s.heldMu.Unlock()
	// A reset in progress (not locked) resets to at most the previous
	// commit: the floor stays below this one; the next commit acks.
	s.committed.Store(pos)
	if ack == nil || ackSeq <= s.acked.Load() {
		return nil
	}
	if err := ack.Ack(); err != nil {
		n := s.ackErrors.Add(1)
		s.mu.Lock()
		s.st.lastAckErr = err.Error()
		s.mu.Unlock()
		if n == 1 || n%1000 == 0 {
			s.log.Warn("acknowledgement not sent; the next commit sends one", "epoch", epoch, "seq", ackSeq, "err", err, "errors", n)
		}
		return fmt.Errorf("natsfeed: stream %s consumer %s: ack sequence %d: %w", s.cfg.Stream, s.cfg.Consumer, ackSeq, err)
	}
	s.acked.Store(ackSeq)
	s.mu.Lock()
	s.st.lastAckErr = ""
	s.mu.Unlock()
	return nil
}

// dropFront removes the first n messages of h, in place: Poll appends to
// the same array again. (Slicing h[n:] instead made Poll's appends outgrow
// the array's rest after each commit, and allocate a new one: 2 % of a
// worker's CPU at 100,000 messages a second, with what its collection
// costs.)
func dropFront(h []heldMsg, n int) []heldMsg {
	if n == 0 {
		return h
	}
	k := copy(h, h[n:])
	clear(h[k:])
	return h[:k]
}

// Rereadable reports true: the stream keeps what was not committed.
func (s *Source) Rereadable() bool { return true }

// Close stops the pump and releases the connection's subscriptions. It
// does not commit, and does not close the connection.
func (s *Source) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	s.cancel()
	s.workers.Wait()
	if s.opened {
		st := s.Stats()
		s.log.Info("source closed", "epoch", st.Epoch, "read", st.Read, "committed", st.Committed, "delivered", st.Delivered,
			"buffer_full_waits", st.BufferFullWaits, "buffer_full_time", st.BufferFullTime)
	}
	s.heldMu.Lock()
	s.held, s.dups = nil, nil
	s.heldMu.Unlock()
	s.mu.Lock()
	s.st.state = feed.StateStopped
	s.mu.Unlock()
	return nil
}

// fail stops the source on err, once.
func (s *Source) fail(err error) {
	s.failMu.Lock()
	first := s.failed == nil
	if first {
		s.failed = err
	}
	s.failMu.Unlock()
	if first {
		s.log.Error("source stopped: reading on would lose or repeat messages", "epoch", s.epoch.Load(), "err", err)
		s.mu.Lock()
		s.st.detail = "stopped: " + err.Error()
		s.mu.Unlock()
	}
}

// failure returns the error that stopped the source, if any.
func (s *Source) failure() error {
	s.failMu.Lock()
	defer s.failMu.Unlock()
	return s.failed
}

// tailHash is the Origin's TailHash: the hash of the message at pos, when
// the source still holds it (a store asks for the last position of a
// batch before the framework commits it). n is not used: a message is
// hashed whole.
func (s *Source) tailHash(pos int64, n int) (uint64, error) {
	if pos <= 0 || n <= 0 {
		return 0, fmt.Errorf("natsfeed: no message at position %d", pos)
	}
	seq := uint64(pos)
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	lo, hi := 0, len(s.held)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if s.held[m].seq < seq {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == len(s.held) || s.held[lo].seq != seq {
		return 0, fmt.Errorf("natsfeed: stream %s: message %d is not held any more", s.cfg.Stream, seq)
	}
	h := s.held[lo]
	return msgHash(s.epoch.Load(), h.seq, h.ts, h.msg.Subject(), h.msg.Data()), nil
}

// msgHash is the tail hash of a message: FNV-1a of the epoch, the
// sequence, the time the stream stored it, the subject and the payload.
// The time makes a message published again with the same payload at a
// reused sequence (after a server lost acknowledged messages) differ.
func msgHash(epoch, seq uint64, ts int64, subject string, data []byte) uint64 {
	h := fnv.New64a()
	var b [8 * 4]byte
	binary.BigEndian.PutUint64(b[0:], epoch)
	binary.BigEndian.PutUint64(b[8:], seq)
	binary.BigEndian.PutUint64(b[16:], uint64(ts))
	binary.BigEndian.PutUint64(b[24:], uint64(len(subject)))
	h.Write(b[:])
	h.Write([]byte(subject))
	h.Write(data)
	return h.Sum64()
}

// api returns a context for one JetStream request.
func (s *Source) api(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.Timeout)
}

// errorf returns an *Error of kind at seq, with detail.
func (s *Source) errorf(kind error, seq uint64, format string, args ...any) *Error {
	return &Error{
		Kind: kind, Stream: s.cfg.Stream, Consumer: s.cfg.Consumer, Partition: s.cfg.Partition,
		Epoch: s.epoch.Load(), Seq: seq, Detail: fmt.Sprintf(format, args...),
	}
}

// reopen counts a reset of the consumer by its reason.
func (s *Source) reopen(reason string) {
	s.resets.Add(1)
	s.mu.Lock()
	s.st.reopens[reason]++
	s.st.lastReopen, s.st.lastAt = reason, time.Now()
	s.mu.Unlock()
}

// apiErrorCode returns the HTTP-like code of a JetStream API error, 0 for
// other errors (time-outs, connection errors).
func apiErrorCode(err error) int {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.Code
	}
	return 0
}
