package framework

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/feed"
)

// feedRunner is one feed's reader: it runs the duty cycle (commit, poll a
// batch, hand it off to every live queue) on its own goroutine.
type feedRunner struct {
	s         *Server
	name      string
	src       feed.Source
	policy    OverloadPolicy
	explicit  bool // the policy was configured, not defaulted
	spin      time.Duration
	holds     bool // the source re-reads: removed and fenced consumers hold it
	idle      IdleStrategy
	batchSize int
	qBatches  int // queue capacity in batches
	events    bool
	log       *slog.Logger

	free  chan *batch // recycled batches
	items []feed.Item
	wake  chan struct{}
	timer *time.Timer
	seq   uint64 // last sequence number given; runner-owned
	// unsent is a batch read and handed to no queue, because every
	// consumer was removed meanwhile; the next live consumer gets it.
	unsent *batch

	// mu guards the consumers and the runner's view of its progress. The
	// runner holds it while it polls, so that status never sees lines that
	// were read and not yet counted as pending.
	mu         sync.Mutex
	live       []*queue
	ghosts     []*queue
	lastHanded point // the last line handed to every live queue
	committed  point // the last point passed to Commit
	pending    int   // items read (or made) and not yet handed off
	done       bool  // the source returned feed.ErrDone
	lastState  feed.State
	lastDetail string

	read, delivered, dropped, failed, skipped, released atomic.Uint64
	pollErrors, commitErrors                            atomic.Uint64

	exited chan struct{}
}

func newFeedRunner(s *Server, fc FeedConfig, src feed.Source) *feedRunner {
	f := &feedRunner{
		s:         s,
		name:      fc.Name,
		src:       src,
		policy:    fc.Overload.Policy,
		explicit:  fc.Overload.Policy != PolicyDefault,
		spin:      fc.Overload.Spin,
		holds:     src.Rereadable(),
		idle:      fc.Idle,
		batchSize: fc.BatchSize,
		events:    fc.StatusEvents,
		log:       s.log.With("feed", fc.Name),
		wake:      make(chan struct{}, 1),
		exited:    make(chan struct{}),
		lastState: feed.StateStarting,
	}
	if fc.AgentName != "" {
		f.log = f.log.With("agent", fc.AgentName)
	}
	if f.spin <= 0 {
		f.spin = DefaultSpin
	}
	if f.idle == nil {
		f.idle = Backoff{}
	}
	if f.batchSize <= 0 {
		f.batchSize = DefaultBatchSize
	}
	capacity := fc.QueueCapacity
	if capacity <= 0 {
		capacity = DefaultQueueCapacity
	}
	f.qBatches = max(1, (capacity+f.batchSize-1)/f.batchSize)
	if f.policy == PolicyDefault {
		if f.holds {
			f.policy = Pause
		} else {
			f.policy = DropAfterSpin
		}
	}
	f.free = make(chan *batch, 2+f.qBatches*4)
	return f
}

// logDefaultPolicy says which overload policy a feed without an explicit one
// took, and why.
func (f *feedRunner) logDefaultPolicy() {
	if f.explicit {
		return
	}
	why := "the source cannot re-read its lines after a restart, so a full queue drops lines instead of holding the source back"
	if f.holds {
		why = "the source re-reads what was not committed after a restart, so a full queue pauses the feed and nothing is dropped"
	}
	f.log.Warn("feed has no explicit overload policy: using the source's default; set overload.policy to silence this",
		"policy", f.policy.String(), "reason", why)
}

func (f *feedRunner) signal() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// sleep waits d, or until woken or stopped. It reports false when stopped.
func (f *feedRunner) sleep(stop <-chan struct{}, d time.Duration) bool {
	if f.timer == nil {
		f.timer = time.NewTimer(d)
	} else {
		f.timer.Reset(d)
	}
	select {
	case <-f.timer.C:
		return true
	case <-f.wake:
		f.timer.Stop()
		return true
	case <-stop:
		f.timer.Stop()
		return false
	}
}

// run is the feed's duty cycle: commit, then read a batch, then hand it to
// every live queue.
func (f *feedRunner) run(ctx context.Context, stop <-chan struct{}) {
	defer close(f.exited)
	defer f.log.Info("feed stopped reading")
	var snap []*queue
	defer func() {
		for _, q := range f.snapshot(snap[:0]) {
			f.reportDrops(q, "feed stopped reading")
		}
	}()
	f.items = make([]feed.Item, f.batchSize)
	idle := 0
	for {
		select {
		case <-stop:
			return
		default:
		}
		_ = f.commit() // counted and logged; retried next cycle
		snap = f.snapshot(snap[:0])
		if !f.canRead(snap) {
			if !f.sleep(stop, f.idle.Idle(idle)) {
				return
			}
			idle++
			continue
		}
		b := f.unsent
		f.unsent = nil
		if b == nil {
			b = f.poll(ctx)
		}
		if b == nil {
			if !f.sleep(stop, f.idle.Idle(idle)) {
				return
			}
			idle++
			continue
		}
		idle = 0
		if !f.handoff(b, snap, stop) {
			return
		}
	}
}

func (f *feedRunner) snapshot(dst []*queue) []*queue {
	f.mu.Lock()
	dst = append(dst, f.live...)
	f.mu.Unlock()
	return dst
}

// canRead reports whether the feed may read: it has a live consumer, is
// not done, and (when it holds) no consumer's group is fenced or dead.
func (f *feedRunner) canRead(snap []*queue) bool {
	f.mu.Lock()
	done := f.done
	f.mu.Unlock()
	if done || len(snap) == 0 {
		return false
	}
	if f.holds {
		for _, q := range snap {
			if q.g.pauses() {
				return false
			}
		}
	}
	return true
}

// getBatch returns a recycled batch, or a new one, holding one reference.
func (f *feedRunner) getBatch() *batch {
	var b *batch
	select {
	case b = <-f.free:
	default:
		b = &batch{items: make([]item, 0, f.batchSize+1), data: make([]byte, 0, 64*f.batchSize), free: f.free}
	}
	b.refs.Store(1)
	return b
}

// poll reads one batch; it returns nil when there was nothing to hand off.
func (f *feedRunner) poll(ctx context.Context) *batch {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, err := f.src.Poll(ctx, f.items)
	if err != nil {
		if errors.Is(err, feed.ErrDone) {
			if !f.done {
				f.log.Info("feed done: the source has delivered everything it will")
			}
			f.done = true
		} else if unreadable(err) {
			f.pollErrors.Add(1)
			f.s.fail(fmt.Errorf("framework: feed %q cannot read its source (a retry does not help): %w", f.name, err),
				"feed cannot read its source, and a retry does not help: the server stops without draining; fix the input (see err), then start the server again: the lines after the committed pointer are read again",
				"feed", f.name)
		} else {
			if f.pollErrors.Add(1) == 1 || f.pollErrors.Load()%1000 == 0 {
				f.log.Error("feed read failed; retrying after the idle wait", "err", err, "errors", f.pollErrors.Load())
			}
		}
	}
	var b *batch
	if n > 0 {
		b = f.getBatch()
		items := slices.Grow(b.items[:0], n+1)[:n]
		data := b.data[:0]
		seq := f.seq
		for i := range f.items[:n] {
			it := &f.items[i]
			seq++
			off := len(data)
			data = append(data, it.Line...)
			// Field by field, in place: an item{...} literal is built on
			// the stack and then copied into the batch, which made this
			// loop a quarter slower (perf of row 3 of bench/RESULTS.md).
			// TestPollWritesEveryDeliveryField fails when Delivery gets a
			// field this does not write.
			x := &items[i]
			x.d.Feed, x.d.File = f.name, it.File
			x.d.Epoch, x.d.Position, x.d.Seq, x.d.Origin = it.Epoch, it.Position, seq, it.Origin
			x.off, x.end, x.ev = off, len(data), nil
		}
		f.seq = seq
		b.items, b.data = items, data
		b.lines = n
		f.read.Add(uint64(n))
	}
	if f.events {
		st := f.src.Status()
		if st.State != f.lastState || st.Detail != f.lastDetail {
			f.lastState, f.lastDetail = st.State, st.Detail
			if b == nil {
				b = f.getBatch()
			}
			last := f.lastHanded
			if b.lines > 0 {
				last = b.last()
			}
			ev := &StatusEvent{Feed: f.name, State: st.State, Detail: st.Detail, Seq: last.seq, Epoch: last.epoch, Position: last.pos}
			b.items = append(b.items, item{d: tidemark.Delivery{Seq: last.seq, Epoch: last.epoch, Position: last.pos}, ev: ev})
		}
	}
	if b != nil {
		f.pending = len(b.items) // lines and status events
	}
	return b
}

// unreadable reports whether a source's Poll error is one that retrying
// does not fix: the server stops with it. A file source's input that is
// not a regular file or whose pointer another source holds, and any error
// a source marks permanent (a Permanent() bool method that says true, as
// natsfeed's gaps and second readers do).
func unreadable(err error) bool {
	return errors.Is(err, feed.ErrNotRegular) || errors.Is(err, feed.ErrPointerLocked) || isPermanent(err)
}

// handoff sends b to every live queue, by the overload policy. It reports
// false when the server stopped the feed meanwhile.
func (f *feedRunner) handoff(b *batch, snap []*queue, stop <-chan struct{}) bool {
	ok := true
	receivers := 0
snapshot:
	for _, q := range snap {
		for {
			// A queue replaced (its group restarted) since the snapshot,
			// or while the runner waited for room in it, hands over to
			// its successor.
			for q.removed.Load() {
				next := q.next.Load()
				if next == nil {
					break
				}
				q = next
			}
			if q.removed.Load() {
				continue snapshot
			}
			b.refs.Add(1)
			out := f.send(q, b, stop)
			if out != sentOK {
				b.refs.Add(-1) // the runner's own reference keeps it above zero
			}
			switch out {
			case sentOK, sentDropped:
				receivers++
				continue snapshot
			case sentStopped:
				ok = false
				break snapshot
			}
			// sentRemoved: try the successor, if any.
		}
	}
	if ok && receivers == 0 {
		// Every consumer went away before the batch reached one: keep it
		// for the next subscriber rather than commit lines nobody got.
		f.unsent = b
		return true
	}
	if ok {
		f.mu.Lock()
		if b.lines > 0 {
			f.lastHanded = b.last()
		}
		f.pending = 0
		f.mu.Unlock()
	}
	b.release()
	return ok
}

// The outcomes of send.
const (
	sentOK      = iota
	sentDropped // DropAfterSpin found no room in time
	sentRemoved // the queue was removed while the runner waited
	sentStopped // the server stopped the feed while the runner waited
)

// send puts b in q, by the overload policy.
func (f *feedRunner) send(q *queue, b *batch, stop <-chan struct{}) int {
	select {
	case q.ch <- b:
		return f.afterSend(q, b)
	default:
	}
	var t *time.Timer
	if f.policy == DropAfterSpin {
		t = time.NewTimer(f.spin)
	} else {
		t = time.NewTimer(f.idle.Idle(1 << 10))
	}
	defer t.Stop()
	for {
		select {
		case q.ch <- b:
			// Also when the queue was removed and drained meanwhile (a
			// select picks at random among ready cases): afterSend takes
			// the batch back for the successor.
			return f.afterSend(q, b)
		case <-q.removedCh:
			return sentRemoved
		case <-stop:
			return sentStopped
		case <-f.wake:
			// A consumer finished a batch, or a hold advanced: commit
			// what every queue has finished while still waiting.
			_ = f.commit()
		case <-t.C:
			if f.policy == DropAfterSpin {
				f.drop(q, b)
				return sentDropped
			}
			// Paused on a full queue: the others may still finish lines,
			// so keep committing while waiting.
			_ = f.commit()
			t.Reset(f.idle.Idle(1 << 10))
		}
	}
}

// afterSend completes a send of b into q's channel. A queue removed around
// the send (a restarted group's queue, replaced by its successor) is read
// by nobody, and its removal emptied its channel under f.mu: a batch found
// in the channel now is b, handed after that. It is taken back and the
// send reports sentRemoved, so that the successor gets it, whatever the
// order in which the feed saw the removal and the room it made. A batch
// the removal's drain took is held by the removed queue, as the batches
// it was given before.
func (f *feedRunner) afterSend(q *queue, b *batch) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if q.removed.Load() {
		reclaimed := false
		for drained := false; !drained; {
			select {
			case got := <-q.ch:
				if got == b {
					reclaimed = true
				} else {
					got.release() // as the removal's drain does
				}
			default:
				drained = true
			}
		}
		if reclaimed {
			return sentRemoved
		}
	}
	f.sent(q, b)
	return sentOK
}

func (f *feedRunner) sent(q *queue, b *batch) {
	q.sent.Add(uint64(len(b.items)))
	f.delivered.Add(uint64(b.lines))
	q.g.wakeUp()
	if q.dropUnlogged > 0 {
		f.reportDrops(q, "the queue has room again")
	}
}

// reportDrops logs the lines dropped for q since the last report, if any.
func (f *feedRunner) reportDrops(q *queue, why string) {
	if q.dropUnlogged == 0 {
		return
	}
	f.log.Warn(why+": lines were dropped for this group since the last report",
		"group", q.g.name, "dropped_since_last_report", q.dropUnlogged, "dropped_total", q.dropped.Load())
	q.dropLogged, q.dropUnlogged = time.Now(), 0
}

// drop gives up b for q: DropAfterSpin found no room in time.
func (f *feedRunner) drop(q *queue, b *batch) {
	n := uint64(b.lines)
	q.dropped.Add(n)
	f.dropped.Add(n)
	if n == 0 {
		return
	}
	// One report per second and queue at most: an overloaded queue drops a
	// batch every spin time, and a line each would flood the log. Status
	// and the counters have every line.
	q.dropUnlogged += n
	now := time.Now()
	if !q.dropLogged.IsZero() && now.Sub(q.dropLogged) < dropLogEvery {
		return
	}
	var first, last *item
	for i := range b.items {
		if it := &b.items[i]; it.ev == nil {
			if first == nil {
				first = it
			}
			last = it
		}
	}
	f.log.Warn("queue full after the spin time: lines dropped for this group and committed past",
		"group", q.g.name, "lines", n, "first_seq", first.d.Seq, "epoch", first.d.Epoch, "first_position", first.d.Position,
		"last_seq", last.d.Seq, "last_epoch", last.d.Epoch, "last_position", last.d.Position,
		"dropped_since_last_report", q.dropUnlogged, "dropped_total", q.dropped.Load())
	q.dropLogged, q.dropUnlogged = now, 0
}

// dropLogEvery is the least time between two reports of lines dropped for
// one queue.
const dropLogEvery = time.Second

// commit moves the pointer to the highest line that every live queue has
// finished and every hold has declared durable, and that no removed
// consumer still holds. It returns the source's error, which a later cycle
// retries.
func (f *feedRunner) commit() error {
	f.mu.Lock()
	target := f.targetLocked(true)
	if target.seq <= f.committed.seq {
		f.mu.Unlock()
		return nil
	}
	f.mu.Unlock()
	// Only the runner commits (and Stop, once the runner has exited), so
	// f.committed does not change while the source writes.
	if err := f.src.Commit(target.epoch, target.pos); err != nil {
		if n := f.commitErrors.Add(1); n == 1 || n%1000 == 0 {
			f.log.Error("commit failed; the next duty cycle tries again", "epoch", target.epoch, "position", target.pos, "err", err, "errors", n)
		}
		return fmt.Errorf("framework: feed %q: commit epoch %d position %d: %w", f.name, target.epoch, target.pos, err)
	}
	f.mu.Lock()
	f.committed = target
	f.mu.Unlock()
	return nil
}

// targetLocked returns the highest line that every live queue has finished
// and every hold has declared durable, and that no removed consumer still
// holds: what the feed may commit. With prune, removed consumers that hold
// nothing any more are forgotten. Under f.mu.
func (f *feedRunner) targetLocked(prune bool) point {
	target := f.lastHanded
	for _, q := range f.live {
		if p, c := q.bound(); c {
			target = minPoint(target, p)
		}
	}
	if !prune {
		for _, q := range f.ghosts {
			if p, c := q.bound(); c {
				target = minPoint(target, p)
			}
		}
		return target
	}
	kept := f.ghosts[:0]
	for _, q := range f.ghosts {
		if p, c := q.bound(); c {
			target = minPoint(target, p)
			kept = append(kept, q)
		} else {
			f.log.Info("removed consumer finished what it was given: its hold ends", "group", q.g.name)
		}
	}
	clear(f.ghosts[len(kept):])
	f.ghosts = kept
	return target
}

// addQueue makes q a live consumer of the feed.
func (f *feedRunner) addQueue(q *queue) {
	f.mu.Lock()
	q.base = f.lastHanded
	f.live = append(f.live, q)
	f.mu.Unlock()
	f.signal()
}

// removeQueue makes q stop being a live consumer. A feed that holds keeps
// it as a removed consumer until it no longer holds anything.
func (f *feedRunner) removeQueue(q *queue, why string) {
	f.mu.Lock()
	i := slices.Index(f.live, q)
	if i < 0 {
		f.mu.Unlock()
		return
	}
	f.live = slices.Delete(f.live, i, i+1)
	q.freeze()
	left := f.retireLocked(q)
	f.mu.Unlock()
	f.log.Info("consumer removed", "group", q.g.name, "why", why, "unfinished", left, "consumers", f.consumers())
	f.signal()
}

// replaceQueue puts q in old's place, at once: every batch is handed to
// one of them. Lines old was given and did not finish stay held.
func (f *feedRunner) replaceQueue(old, q *queue) {
	f.mu.Lock()
	i := slices.Index(f.live, old)
	if i < 0 {
		f.mu.Unlock()
		f.addQueue(q)
		return
	}
	q.base = f.lastHanded
	f.live[i] = q
	old.next.Store(q)
	left := f.retireLocked(old)
	f.mu.Unlock()
	f.log.Info("consumer replaced by its restarted group", "group", q.g.name, "unfinished", left)
	f.signal()
}

// retireLocked ends q as a live consumer, under f.mu: a feed that holds
// keeps it as a removed consumer until it no longer holds anything. It
// returns how many items q was given and did not finish.
func (f *feedRunner) retireLocked(q *queue) uint64 {
	q.removed.Store(true)
	close(q.removedCh)
	left := q.unfinished()
	// Nobody reads the queue any more: recycle the batches waiting in it
	// (they stay unfinished, and held).
	for {
		select {
		case b := <-q.ch:
			b.release()
			continue
		default:
		}
		break
	}
	if f.holds {
		f.ghosts = append(f.ghosts, q)
	} else if left > 0 {
		q.dropped.Add(left)
		f.dropped.Add(left)
	}
	return left
}

func (f *feedRunner) consumers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.live)
}

// release drops the hold of every removed queue of group.
func (f *feedRunner) release(group string) (int, uint64) {
	f.mu.Lock()
	n := 0
	var items uint64
	f.ghosts = slices.DeleteFunc(f.ghosts, func(q *queue) bool {
		if q.g.name != group {
			return false
		}
		if _, c := q.bound(); c {
			n++
			items += q.unfinished()
		}
		return true
	})
	f.mu.Unlock()
	return n, items
}

// stallReasons says why the feed holds its pointer, under f.mu.
func (f *feedRunner) stallReasonsLocked() []string {
	var r []string
	if len(f.live) == 0 {
		r = append(r, "no live consumer")
	}
	if f.holds {
		for _, q := range f.live {
			if q.g.blocked() {
				r = append(r, fmt.Sprintf("consumer %s fenced or dead", q.g.name))
			}
		}
		// One reason per group, however many of its queues were removed.
		var groups []string
		left := map[string]uint64{}
		notDurable := map[string]bool{}
		for _, q := range f.ghosts {
			if _, c := q.bound(); c {
				name := q.g.name
				if _, seen := left[name]; !seen && !notDurable[name] {
					groups = append(groups, name)
				}
				if n := q.unfinished(); n > 0 {
					left[name] += n
				} else {
					notDurable[name] = true
				}
			}
		}
		for _, name := range groups {
			if n := left[name]; n > 0 {
				r = append(r, fmt.Sprintf("a removed consumer left unprocessed items: %s (%d items); restart, or Release the hold", name, n))
			} else {
				r = append(r, fmt.Sprintf("a removed consumer's checkpoint hold was not declared durable: %s; restart, or Release the hold", name))
			}
		}
	}
	return r
}
