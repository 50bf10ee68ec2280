package natsfeed

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tidemark-go/tidemark/feed"
)

// pump pulls the consumer's messages into the source's buffer. It owns
// the delivery chain: since the last reset (a generation) every consumer
// sequence from 1 on was delivered to it, so every message of the
// partition after the reset's sequence reached it, in order. What breaks
// the chain is handled here: a reconnect or a new consumer leader (reset
// again, from the last commit), another reader (an error), re-deliveries
// (dropped), messages removed from the stream before delivery (a gap).
//
// A generation is one nats.go Consume: its handler, called on the
// subscription's goroutine for each message, checks the message and puts
// it in the buffer (handle); the pump's own goroutine (run) starts and
// ends generations, resets the consumer, and handles what the listener
// wakes it for. Consume rather than Messages().Next: Next arms a
// heartbeat timer (a time.AfterFunc) on every call, 5 % of a worker's CPU
// at 100,000 messages a second with its select; Consume keeps one timer
// for the subscription.
//
// nats.go v1.55's Consume can stop pulling: it asks for more only after
// a handled message, and skips that while its last pull request is still
// being sent, so that when the handler finishes every message asked for
// before the goroutine that sends requests marks the last one sent (a
// loaded machine, small batches), nothing asks again until its heartbeat
// timer finds the subscription silent and pulls anew. The pump sets that
// heartbeat to its minimum (pullHeartbeat): such a stall lasts at most
// two heartbeats, and costs no reset (TestPauseStopsPulling, with batches
// of 8, stalled that way for 30 s with the default heartbeat).
type pump struct {
	s      *Source
	cons   jetstream.Consumer
	stream jetstream.Stream

	// mu guards what follows between the handler and the pump's
	// goroutine (woke, refresh). The handler holds it while it checks a
	// message, and lets it go while it waits for room in the buffer.
	mu         sync.Mutex
	gen        uint64
	accepted   uint64 // the last stream sequence put in the buffer
	cseq       uint64 // the last consumer sequence received
	pending    uint64 // undelivered messages of the partition, as last seen
	pendingAt  uint64 // the consumer sequence pending was seen at
	term       term   // the consumer's leadership when the generation began
	reconnects uint64 // the connection's reconnects when the generation began
	woken      uint64 // the listener's reconnect count when the generation began
	staleTries int    // resets for a gap at a generation's first message
	lastTick   time.Time
	dropLogged time.Time
}

// generation is one Consume of the consumer, from a reset to the next.
type generation struct {
	// run is held by the handler for each message, and taken by the pump
	// once the generation is stopped, to set ended: after that, no handler
	// call of the generation changes anything, so that the reset that
	// follows sees every message the generation put in the buffer.
	run   sync.Mutex
	ended bool // under run

	// done is closed when the pump stops the generation: a handler waiting
	// for room in the buffer gives its message up (it comes again after
	// the reset).
	done chan struct{}

	// over is set, and brk closed, once the generation must end: the
	// handler found the chain broken (out, why), or nats.go reported an
	// error (err). Later messages of the generation are dropped.
	over atomic.Bool
	once sync.Once
	brk  chan struct{}
	out  outcome
	why  string
	err  error
}

// end ends the generation for out and why, or for err (nextFailed
// decides), once.
func (g *generation) end(out outcome, why string, err error) {
	g.once.Do(func() {
		g.out, g.why, g.err = out, why, err
		g.over.Store(true)
		close(g.brk)
	})
}

// pullHeartbeat is the idle heartbeat the pump asks the server for, the
// least nats.go takes: the server sends one while a pull request waits
// with nothing to deliver, and nats.go pulls anew when two are missing
// (see pump on why that matters).
const pullHeartbeat = 500 * time.Millisecond

// outcome is why consume returned.
type outcome int

const (
	outStop  outcome = iota // the source closes, or failed
	outReset                // the chain broke: reset and consume again
)

// begin starts a generation at a reset whose answer was ci, made with the
// listener's reconnect count woken. No handler runs meanwhile.
func (p *pump) begin(ci *jetstream.ConsumerInfo, woken uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cseq = 0
	p.pending, p.pendingAt = 0, 0
	if ci != nil {
		p.pending = ci.NumPending
	}
	p.term = termOf(ci)
	p.reconnects = p.s.nc.Stats().Reconnects
	p.woken = woken
	p.accepted = p.s.read.Load()
	p.s.ackMu.Lock()
	p.gen = p.s.gen
	p.s.ackMu.Unlock()
}

// run consumes until the source closes or fails.
func (p *pump) run() {
	defer p.s.workers.Done()
	p.lastTick = time.Now()
	reason := ""
	for {
		if reason != "" {
			if !p.reset(reason) {
				return
			}
		}
		out, why := p.consume()
		if out == outStop {
			return
		}
		reason = why
	}
}

// consume runs one generation until the chain breaks (it returns outReset
// and why), or the source stops.
func (p *pump) consume() (outcome, string) {
	s := p.s
	g := &generation{done: make(chan struct{}), brk: make(chan struct{})}
	cc, err := p.cons.Consume(func(msg jetstream.Msg) { p.handle(g, msg) },
		jetstream.PullMaxMessages(s.cfg.PullBatch), jetstream.PullHeartbeat(pullHeartbeat),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) { p.consumeError(g, err) }))
	if err != nil {
		if s.nc.IsClosed() {
			s.fail(s.errorf(ErrClosed, p.lastAccepted(), "the NATS connection is closed (%v): connect with nats.MaxReconnects(-1), and start the source again on a new connection", err))
			return outStop, ""
		}
		if !p.sleep(time.Second) {
			return outStop, ""
		}
		return outReset, "the pull could not start: " + err.Error()
	}
	closed := cc.Closed()
	out, why, failed := p.wait(g, closed)
	p.stop(cc, g, closed)
	if failed != nil {
		return p.nextFailed(failed)
	}
	return out, why
}

// wait waits until generation g must end: it returns why (out and why),
// or the error nats.go reported (failed). It handles the listener's wakes
// meanwhile.
func (p *pump) wait(g *generation, closed <-chan struct{}) (out outcome, why string, failed error) {
	s := p.s
	for {
		ctx := s.waker.current()
		select {
		case <-g.brk:
			return g.out, g.why, g.err
		case <-closed:
			// nats.go stopped consuming by itself: a terminal error it
			// reported (handled as that error), or the connection closed.
			select {
			case <-g.brk:
				return g.out, g.why, g.err
			default:
			}
			return 0, "", jetstream.ErrMsgIteratorClosed
		case <-ctx.Done():
		}
		if s.ctx.Err() != nil {
			return outStop, "", nil
		}
		s.waker.renew()
		p.mu.Lock()
		out, why, done := p.woke()
		p.mu.Unlock()
		if done {
			return out, why, nil
		}
	}
}

// handle is the generation's message handler: it checks msg against the
// chain and puts it in the buffer, waiting for room when the buffer is
// full (the feed pauses: nats.go pulls no more while it waits).
func (p *pump) handle(g *generation, msg jetstream.Msg) {
	g.run.Lock()
	defer g.run.Unlock()
	if g.ended || g.over.Load() {
		return // the generation ends: the message comes again after the reset
	}
	p.mu.Lock()
	out, why, done := p.accept(g, msg)
	p.mu.Unlock()
	if done {
		g.end(out, why, nil)
	}
}

// accept checks msg and puts it in the buffer; done reports that the
// generation must end, for out and why. Under p.mu, which it lets go
// while it waits for room.
func (p *pump) accept(g *generation, msg jetstream.Msg) (out outcome, why string, done bool) {
	s := p.s
	if s.failure() != nil {
		// The pump's goroutine stopped the source (a gap found by a
		// status tick, under p.mu): nothing more is handed out.
		return outStop, "", true
	}
	md, err := parseAck(msg.Reply())
	if err != nil {
		return outReset, "a message without JetStream metadata: " + err.Error(), true
	}
	sseq, cseq := md.stream, md.consumer
	if cseq != p.cseq+1 {
		out, why := p.broken(cseq, sseq)
		return out, why, true
	}
	p.cseq = cseq
	if md.delivered > 1 || sseq <= p.accepted {
		if sseq > p.accepted {
			// A re-delivery of a message this generation never gave
			// us: the chain broke before.
			out, why := p.broken(cseq, sseq)
			return out, why, true
		}
		p.dropped(msg, md)
		return 0, "", false
	}
	p.staleTries = 0
	if out, why, done := p.checkPending(md.pending, cseq, sseq); done {
		return out, why, true
	}
	e := entry{msg: msg, seq: sseq, ts: md.ts, gen: p.gen}
	for sent := false; !sent; {
		select {
		case s.buf <- e:
			sent = true
			continue
		default:
		}
		// Full: the feed pauses. Wait for Poll to make room, or for the
		// pump to stop the generation (a reconnect, a status tick that
		// found a reason to reset, Close); the pump's goroutine handles
		// its wakes meanwhile. e goes in the buffer under p.mu only, so
		// that a status tick that stops the source (a gap after the last
		// message put in the buffer) is not followed by e.
		p.mu.Unlock()
		s.fullWaits.Add(1)
		began := time.Now()
		select {
		case <-s.room:
		case <-g.done:
		}
		s.fullNanos.Add(uint64(time.Since(began)))
		p.mu.Lock()
		if g.over.Load() || isClosed(g.done) {
			return 0, "", false // e was not accepted: it comes again
		}
		if s.failure() != nil {
			return outStop, "", true
		}
	}
	p.accepted = sseq
	s.pending.Store(md.pending)
	s.delivered.Add(1)
	return 0, "", false
}

// consumeError handles an error nats.go reports while it consumes. The
// consumer gone and the connection closed end the generation (nextFailed
// says what follows). The rest are notifications that change nothing for
// the chain, which the consumer sequences guard: a status of the server
// (a new consumer leader, a limit of a pull request), a pull request not
// sent (the next one is), missing heartbeats (nats.go pulls anew by
// itself). Messages' Next ignored them too, but for missing heartbeats,
// which it reported.
func (p *pump) consumeError(g *generation, err error) {
	switch {
	case errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrConsumerNotFound),
		errors.Is(err, jetstream.ErrBadRequest), errors.Is(err, jetstream.ErrConnectionClosed),
		errors.Is(err, nats.ErrConnectionClosed):
		g.end(0, "", err)
	case errors.Is(err, jetstream.ErrNoHeartbeat):
		p.s.log.Debug("no heartbeat from the server for two heartbeats: nats.go pulls again", "heartbeat", pullHeartbeat)
	}
}

// isClosed reports whether ch is closed.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// lastAccepted is the last stream sequence put in the buffer.
func (p *pump) lastAccepted() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// stop stops a generation and waits until the server knows: the
// subscription is removed (nats.go does that in a goroutine of its own)
// and the connection flushed. A pull request the generation left waiting
// at the server would otherwise take the next generation's first
// deliveries, to a reply subject nobody reads: lost to this generation,
// they would come again only after AckWait. The server skips a waiting
// request whose reply subject has no interest, and it reads the
// unsubscription before the reset that follows, on the same connection.
// closed is the ConsumeContext's Closed channel.
func (p *pump) stop(cc jetstream.ConsumeContext, g *generation, closed <-chan struct{}) {
	s := p.s
	close(g.done)
	cc.Stop()
	// A handler call in progress returns promptly now (done is closed);
	// once it did, the generation changes nothing more.
	g.run.Lock()
	g.ended = true
	g.run.Unlock()
	t := time.NewTimer(s.cfg.Timeout)
	defer t.Stop()
	select {
	case <-closed:
	case <-t.C:
		s.log.Warn("the consumer's subscription did not stop within Timeout; a pull request it left at the server may delay the next messages until AckWait", "timeout", s.cfg.Timeout)
	case <-s.ctx.Done():
		return
	}
	if s.nc.IsConnected() {
		_ = s.nc.FlushTimeout(s.cfg.Timeout)
	}
}

// woke handles what woke the pump: a reconnect (reset), a status tick
// (refresh, which may find a gap or a recreated stream). done reports
// whether consume must return out and why.
func (p *pump) woke() (out outcome, why string, done bool) {
	s := p.s
	if s.failure() != nil {
		return outStop, "", true
	}
	if n := s.reconn.Load(); n != p.woken || s.nc.Stats().Reconnects != p.reconnects {
		return outReset, "the connection to the server was re-established", true
	}
	if s.cfg.StatusInterval > 0 && time.Since(p.lastTick) >= s.cfg.StatusInterval/2 {
		p.lastTick = time.Now()
		return p.refresh()
	}
	return 0, "", false
}

// nextFailed handles an error nats.go reported while the pump consumed.
func (p *pump) nextFailed(err error) (outcome, string) {
	s := p.s
	switch {
	case s.nc.IsClosed():
		s.fail(s.errorf(ErrClosed, p.accepted, "the NATS connection is closed (%v): connect with nats.MaxReconnects(-1), and start the source again on a new connection", err))
		return outStop, ""
	case errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrConsumerNotFound):
		if !p.consumerGone() {
			return outStop, ""
		}
		return outReset, "the consumer was missing for a moment"
	}
	if !p.sleep(100 * time.Millisecond) {
		return outStop, ""
	}
	return outReset, "consuming failed: " + err.Error()
}

// broken handles a consumer sequence that does not follow the last one
// (or a re-delivery of a message the generation never gave us). A
// reconnect or a new consumer leader explains it: reset. Otherwise
// another client reads the consumer: the source stops.
func (p *pump) broken(cseq, sseq uint64) (outcome, string) {
	s := p.s
	if s.nc.Stats().Reconnects != p.reconnects || s.reconn.Load() != p.woken {
		return outReset, fmt.Sprintf("the connection was re-established (consumer sequence %d after %d)", cseq, p.cseq)
	}
	c, cancel := context.WithTimeout(s.ctx, min(s.cfg.Timeout, time.Second))
	ci, err := p.cons.Info(c)
	cancel()
	if s.ctx.Err() != nil {
		return outStop, ""
	}
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		if !p.consumerGone() {
			return outStop, ""
		}
		return outReset, "the consumer was missing for a moment"
	case err != nil:
		return outReset, fmt.Sprintf("consumer sequence %d after %d, and the consumer's state cannot be read: %v", cseq, p.cseq, err)
	case termOf(ci) != p.term:
		return outReset, fmt.Sprintf("the consumer's leader changed from %s to %s (consumer sequence %d after %d)", p.term, termOf(ci), cseq, p.cseq)
	case p.cseq == 0 && p.staleTries < 3:
		// The first delivery of a generation: a pull request of the
		// previous one may have taken deliveries before it expired.
		p.staleTries++
		return outReset, fmt.Sprintf("the first delivery after a reset has consumer sequence %d", cseq)
	}
	what := "jumped"
	if cseq <= p.cseq {
		what = "went back"
	}
	s.fail(s.errorf(ErrSecondReader, sseq,
		"the consumer sequence %s from %d to %d (stream sequence %d, last handed out %d) on the same connection, with the same consumer leader %s: another client pulls from or reset this consumer, and two owners of one partition apply its messages twice; stop the other reader (one owner per partition), then start again",
		what, p.cseq, cseq, sseq, p.accepted, p.term))
	return outStop, ""
}

// dropped counts and logs a re-delivery of a message handed out already,
// and keeps it for acknowledgements when it is above the last commit.
func (p *pump) dropped(msg jetstream.Msg, md ackMeta) {
	s := p.s
	n := s.redelivered.Add(1)
	seq := md.stream
	if seq > s.committed.Load() {
		s.heldMu.Lock()
		if len(s.dups) == 0 || s.dups[len(s.dups)-1].seq < seq {
			s.dups = append(s.dups, heldMsg{seq: seq, ts: md.ts, gen: p.gen, msg: msg})
		}
		s.heldMu.Unlock()
	}
	if md.delivered > 1 && (n == 1 || time.Since(p.dropLogged) >= time.Second) {
		p.dropLogged = time.Now()
		s.log.Warn("re-delivery of a message handed out already: dropped (it was not committed within AckWait, or the server re-delivered after a failure)",
			"epoch", s.epoch.Load(), "seq", seq, "delivered", md.delivered, "last_handed", p.accepted, "dropped_total", n)
	}
}

// checkPending checks that the partition's undelivered messages did not
// shrink by more than what was delivered since they were last counted:
// if they did, messages were removed from the stream before delivery.
func (p *pump) checkPending(numPending, cseq, sseq uint64) (outcome, string, bool) {
	prev, at := p.pending, p.pendingAt
	p.pending, p.pendingAt = numPending, cseq
	if cseq < at || prev <= cseq-at {
		return 0, "", false
	}
	want := prev - (cseq - at)
	if numPending >= want {
		return 0, "", false
	}
	return p.removed(want-numPending, sseq)
}

// removed handles n messages of the partition removed from the stream
// before delivery. Removed from its head (purged, aged out, by a limit)
// they are a gap; deleted one by one in its middle they are logged.
func (p *pump) removed(n, next uint64) (outcome, string, bool) {
	s := p.s
	c, cancel := s.api(s.ctx)
	si, err := p.stream.Info(c)
	cancel()
	if s.ctx.Err() != nil {
		return outStop, "", true
	}
	if err != nil {
		s.log.Warn("messages of the partition may have been removed from the stream before delivery; the stream cannot be read to check", "epoch", s.epoch.Load(), "after", p.accepted, "count", n, "err", err)
		return 0, "", false
	}
	first := si.State.FirstSeq
	if first <= p.accepted+1 {
		s.log.Warn("messages of the partition were deleted from the middle of the stream before delivery (DeleteMsg, or a purge by subject)",
			"epoch", s.epoch.Load(), "after", p.accepted, "count", n, "first", first)
		return 0, "", false
	}
	to := first - 1
	if next != 0 && next <= to {
		to = next - 1
	}
	e := s.errorf(ErrGap, p.accepted,
		"%d messages of the partition after sequence %d were removed from the stream before delivery (purged, aged out or removed by a limit while the feed was behind; the stream's first sequence is now %d); set OnGap: GapSkip to accept the loss",
		n, p.accepted, first)
	e.From, e.To = p.accepted+1, to
	if s.cfg.OnGap == GapSkip {
		s.gapsSkipped.Add(1)
		s.log.Error("gap skipped (OnGap: skip)", "err", e)
		return 0, "", false
	}
	s.fail(e)
	return outStop, "", true
}

// refresh reads the stream's and the consumer's state for status, checks
// the epoch, and checks for messages removed while none arrived.
func (p *pump) refresh() (outcome, string, bool) {
	s := p.s
	c, cancel := s.api(s.ctx)
	si, serr := p.stream.Info(c)
	cancel()
	if s.ctx.Err() != nil {
		return outStop, "", true
	}
	if p.streamChanged(si, serr) {
		return outStop, "", true
	}
	c, cancel = s.api(s.ctx)
	ci, cerr := p.cons.Info(c)
	cancel()
	if s.ctx.Err() != nil {
		return outStop, "", true
	}
	s.mu.Lock()
	if serr == nil {
		s.st.first, s.st.last = si.State.FirstSeq, si.State.LastSeq
	}
	if cerr == nil {
		s.st.ackFloor, s.st.ackPending = ci.AckFloor.Stream, ci.NumAckPending
		s.st.leader = leaderOf(ci)
	}
	s.mu.Unlock()
	if cerr != nil {
		if errors.Is(cerr, jetstream.ErrConsumerNotFound) {
			if !p.consumerGone() {
				return outStop, "", true
			}
			return outReset, "the consumer was missing for a moment", true
		}
		return 0, "", false
	}
	d := ci.Delivered.Consumer
	if d < p.cseq || termOf(ci) != p.term {
		// Not this generation's view (a reset or a new leader since):
		// the next message says.
		return 0, "", false
	}
	// The server counts as pending only what it has not delivered:
	// deliveries on their way to the pump (d - p.cseq of them) are
	// behind the read position too, or the feed would look caught up
	// with messages still to come.
	s.pending.Store(ci.NumPending + (d - p.cseq))
	// Those deliveries also account for that much of a drop.
	if d >= p.pendingAt {
		return p.checkPending(ci.NumPending, d, 0)
	}
	return 0, "", false
}

// streamChanged stops the source when the stream's info (si, or err from
// reading it) says the stream was deleted or recreated, and reports
// whether it did.
func (p *pump) streamChanged(si *jetstream.StreamInfo, err error) bool {
	s := p.s
	var e *Error
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		e = s.errorf(ErrStreamChanged, p.accepted, "the stream was deleted; a new stream of that name is a new epoch: start the source again")
	case err == nil && uint64(si.Created.UnixNano()) != s.epoch.Load():
		e = s.errorf(ErrStreamChanged, p.accepted, "the stream was deleted and recreated (new epoch %d): start the source again to read the new stream from its first sequence", si.Created.UnixNano())
	default:
		return false
	}
	s.fail(e)
	return true
}

// consumerGone handles a consumer that seems not to exist any more. The
// stream deleted or recreated stops the source (ErrStreamChanged). The
// consumer deleted alone stops it too (ErrConsumer): another owner took
// the partition over (and deleted this owner's consumer), or an operator
// deleted it; making it again would leave a consumer nobody reads, which
// holds messages under interest retention. A lookup that finds it after
// all (a leader election answers "not found" for a moment) reports true:
// the caller resets and reads on.
func (p *pump) consumerGone() bool {
	s := p.s
	for attempt, missing := 0, 0; ; attempt++ {
		c, cancel := s.api(s.ctx)
		si, err := p.stream.Info(c)
		cancel()
		if s.ctx.Err() != nil {
			return false
		}
		if p.streamChanged(si, err) {
			return false
		}
		if err == nil {
			c, cancel = context.WithTimeout(s.ctx, min(s.cfg.Timeout, time.Second))
			_, cerr := p.cons.Info(c)
			cancel()
			switch {
			case cerr == nil:
				return true
			case errors.Is(cerr, jetstream.ErrConsumerNotFound):
				if missing++; missing >= 3 {
					s.fail(s.errorf(ErrConsumer, p.accepted, "the consumer was deleted while the source read it: another owner took the partition over, or an operator deleted it; start the source again (it makes the consumer and resumes from the stores)"))
					return false
				}
			}
		}
		if !p.sleep(backoff(attempt)) {
			return false
		}
	}
}

// reset resets the consumer to the sequence after the last commit, so that
// every message the framework has not committed is delivered again, in
// order, and starts a new generation. It retries until it succeeds, and
// reports false when the source stops.
func (p *pump) reset(reason string) bool {
	s := p.s
	for attempt := 0; ; attempt++ {
		if s.ctx.Err() != nil || s.failure() != nil {
			return false
		}
		woken := s.reconn.Load()
		s.ackMu.Lock()
		seq := s.committed.Load() + 1
		// A consumer electing its leader does not answer: a short wait,
		// then a retry, rather than the whole Timeout.
		c, cancel := context.WithTimeout(s.ctx, min(s.cfg.Timeout, time.Duration(attempt+1)*time.Second))
		resp, err := s.js.ResetConsumerToSequence(c, s.cfg.Stream, s.cfg.Consumer, seq)
		cancel()
		if err == nil {
			s.gen++
			s.heldMu.Lock()
			clear(s.dups)
			s.dups = s.dups[:0]
			s.heldMu.Unlock()
		}
		s.ackMu.Unlock()
		if s.ctx.Err() != nil {
			return false
		}
		if err == nil {
			accepted := p.accepted
			p.begin(resp.ConsumerInfo, woken)
			p.accepted = accepted
			s.reopen(reason)
			s.mu.Lock()
			s.st.leader = leaderOf(resp.ConsumerInfo)
			s.st.detail = ""
			s.mu.Unlock()
			s.log.Warn("consumer reset to the last commit: the messages after it come again, in order", "reason", reason,
				"epoch", s.epoch.Load(), "seq", seq, "last_handed", accepted, "leader", p.term.String(), "attempts", attempt+1)
			return true
		}
		if errors.Is(err, jetstream.ErrConsumerInvalidReset) {
			s.fail(s.errorf(ErrConsumer, seq, "reset refused: %v", err))
			return false
		}
		// The consumer may be gone (a reset of a missing consumer is not
		// answered), or its leader not elected yet.
		c, cancel = context.WithTimeout(s.ctx, min(s.cfg.Timeout, time.Second))
		_, ierr := p.cons.Info(c)
		cancel()
		if errors.Is(ierr, jetstream.ErrConsumerNotFound) && !p.consumerGone() {
			return false
		}
		s.mu.Lock()
		s.st.detail = fmt.Sprintf("resetting the consumer (%s): %v", reason, err)
		s.mu.Unlock()
		if attempt == 0 || attempt%20 == 0 {
			s.log.Warn("consumer reset failed; retrying", "reason", reason, "seq", seq, "attempt", attempt+1, "err", err)
		}
		if !p.sleep(backoff(attempt)) {
			return false
		}
	}
}

// sleep waits d, and reports false when the source closes meanwhile.
func (p *pump) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-p.s.ctx.Done():
		return false
	}
}

// backoff is the wait before retry attempt+1: 50 ms, doubling, at most 2 s.
func backoff(attempt int) time.Duration {
	d := 50 * time.Millisecond << min(attempt, 6)
	return min(d, 2*time.Second)
}

// listen wakes the pump at each reconnect of the connection and at each
// status tick.
func (s *Source) listen() {
	defer s.workers.Done()
	ch := s.nc.StatusChanged(nats.CONNECTED)
	defer s.nc.RemoveStatusListener(ch)
	var tick <-chan time.Time
	if s.cfg.StatusInterval > 0 {
		t := time.NewTicker(s.cfg.StatusInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
			s.reconn.Add(1)
		case <-tick:
		case <-s.ctx.Done():
			return
		}
		s.waker.wake()
	}
}

// waker wakes the pump where it waits (for a message, for room in the
// buffer): its context is cancelled by wake, and renewed by the pump once
// it has seen it.
type waker struct {
	mu     sync.Mutex
	parent context.Context
	ctx    context.Context
	cancel context.CancelFunc
}

func newWaker(parent context.Context) *waker {
	w := &waker{parent: parent}
	w.ctx, w.cancel = context.WithCancel(parent)
	return w
}

// current is the context to wait with.
func (w *waker) current() context.Context {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ctx
}

// wake ends the current context.
func (w *waker) wake() {
	w.mu.Lock()
	w.cancel()
	w.mu.Unlock()
}

// renew replaces an ended context. The pump checks what woke it after
// renew, so that a wake in between is not lost.
func (w *waker) renew() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ctx.Err() != nil && w.parent.Err() == nil {
		w.cancel()
		w.ctx, w.cancel = context.WithCancel(w.parent)
	}
}

var _ interface {
	feed.Source
	feed.Resumer
} = (*Source)(nil)
