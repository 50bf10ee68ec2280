package framework

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/checkpoint"
	"github.com/tidemark-go/tidemark/internal/hold"
)

// point names one line of a feed in this run: its sequence number (assigned
// by the feed runner, from 1, strictly increasing in read order), epoch and
// position. The zero point is "before every line".
type point struct {
	seq   uint64
	epoch uint64
	pos   int64
}

func minPoint(a, b point) point {
	if b.seq < a.seq {
		return b
	}
	return a
}

func maxPoint(a, b point) point {
	if b.seq > a.seq {
		return b
	}
	return a
}

func markPoint(m checkpoint.Mark) point {
	return point{seq: m.Seq, epoch: m.Epoch, pos: m.Position}
}

// item is one entry of a batch: a line (its payload is data[off:end]) or a
// status event. A status event carries the point of the last line read
// before it.
type item struct {
	// d is the line's delivery as every processor gets it (for a status
	// event, only Seq, Epoch and Position are set). It is built once, by
	// the feed runner, and passed from here: building it for each group
	// and line costs a fan-out that, four times over (row 3 of
	// bench/RESULTS.md).
	d        tidemark.Delivery
	off, end int
	ev       *StatusEvent
}

// batch is what the feed runner hands to the queues in one send: the lines
// read in one poll, copied once, shared read-only by every queue it is sent
// to. The last holder puts it back in the feed's pool.
type batch struct {
	items []item
	data  []byte
	lines int // items that are lines
	refs  atomic.Int32
	free  chan *batch
}

// release drops one reference; the last one recycles the batch.
func (b *batch) release() {
	if b.refs.Add(-1) == 0 {
		b.items = b.items[:0]
		b.data = b.data[:0]
		b.lines = 0
		select {
		case b.free <- b:
		default: // enough spare batches: let it go
		}
	}
}

func (b *batch) last() point {
	d := &b.items[len(b.items)-1].d
	return point{seq: d.Seq, epoch: d.Epoch, pos: d.Position}
}

// queue is one processor group's subscription to one feed: a bounded
// channel of batches, the count of items sent (written by the feed runner)
// and finished (written by the group's goroutine), and the mark of the last
// finished item.
type queue struct {
	f   *feedRunner
	g   *group
	inc *incarnation
	ch  chan *batch

	// procs are the group's processors subscribed to the feed, in order.
	procs atomic.Pointer[[]*procEntry]

	// removed is set when the queue stops being a live consumer; next is
	// the queue that replaced it (a restart of its group), set before.
	removed   atomic.Bool
	removedCh chan struct{}
	next      atomic.Pointer[queue]

	// base is the last line the feed had handed off when the queue
	// subscribed: nothing at or before it is the queue's concern.
	base point

	// sent counts items handed to the queue; the feed runner writes it.
	sent atomic.Uint64
	// lost counts lines that were in the queue when it was removed from
	// a feed that does not hold (counted as dropped).
	dropped atomic.Uint64
	// dropLogged is when the feed runner last logged lines dropped for
	// the queue, and dropUnlogged counts those dropped since; only the
	// runner touches them.
	dropLogged   time.Time
	dropUnlogged uint64
	// finished counts items finished; the group's goroutine writes it.
	finished atomic.Uint64
	// events counts the status events among the finished items.
	events   atomic.Uint64
	failures atomic.Uint64
	skipped  atomic.Uint64
	// skipReasons counts the skipped lines by reason (RejectReason).
	skipReasons skipCounts

	// mu guards the batch being processed, so that progress can turn the
	// finished count into a mark without a lock per line.
	mu      sync.Mutex
	cur     *batch
	curBase uint64
	prev    checkpoint.Mark

	// cp is the group's checkpoint on the feed and binding the binding of
	// this queue. frozenDurable/frozenHeld are the hold as it was when the
	// queue was removed, used once the checkpoint is bound to a newer
	// queue.
	cp            *checkpoint.Checkpoint
	binding       uint64
	frozen        bool
	frozenDurable checkpoint.Mark
	frozenHeld    bool
}

// freeze records the queue's hold as it is now, before its checkpoint is
// bound to another queue; under f.mu or before the queue is shared.
func (q *queue) freeze() {
	if q.frozen || q.cp == nil {
		return
	}
	q.frozen = true
	q.frozenDurable, q.frozenHeld = q.cp.Durable()
}

// progress returns the mark of the last item the queue finished.
func (q *queue) progress() checkpoint.Mark {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := q.finished.Load()
	if b := q.cur; b != nil && n > q.curBase {
		d := &b.items[n-q.curBase-1].d
		return checkpoint.Mark{Count: n, Seq: d.Seq, Epoch: d.Epoch, Position: d.Position}
	}
	m := q.prev
	m.Count = n
	return m
}

func (q *queue) beginBatch(b *batch) {
	q.mu.Lock()
	q.cur = b
	q.curBase = q.finished.Load()
	q.mu.Unlock()
}

func (q *queue) endBatch() {
	q.mu.Lock()
	n := q.finished.Load()
	if b := q.cur; b != nil && n > q.curBase {
		d := &b.items[n-q.curBase-1].d
		q.prev = checkpoint.Mark{Count: n, Seq: d.Seq, Epoch: d.Epoch, Position: d.Position}
	}
	q.cur = nil
	q.mu.Unlock()
}

// depth returns how many items were sent and not yet finished.
func (q *queue) depth() uint64 {
	f := q.finished.Load()
	s := q.sent.Load()
	if s > f {
		return s - f
	}
	return 0
}

// bound returns the last line the feed may commit for this queue, and
// whether the queue constrains the commit at all. A queue constrains when
// it has unfinished items, or when its checkpoint is held and behind what
// it finished. It reads only atomics and locked state: the feed runner
// calls it to commit, and FeedStatus (under the feed's lock) to report the
// commit lag.
func (q *queue) bound() (point, bool) {
	sent := q.sent.Load()
	m := q.progress()
	var p point
	constrained := false
	if m.Count < sent {
		p = maxPoint(q.base, markPoint(m))
		constrained = true
	}
	if q.cp != nil {
		d, held := q.cp.Durable()
		if hold.Mark(d).Binding() != q.binding {
			d, held = q.frozenDurable, q.frozenHeld
		}
		if held && d.Count < m.Count {
			dp := maxPoint(q.base, markPoint(d))
			if !constrained {
				p = dp
			} else {
				p = minPoint(p, dp)
			}
			constrained = true
		}
	}
	return p, constrained
}

// processed returns how many lines the queue finished.
func (q *queue) processed() uint64 {
	e := q.events.Load() // first: every event counted is in finished
	return q.finished.Load() - e
}

// unfinished returns how many items the queue was given and did not finish.
func (q *queue) unfinished() uint64 { return q.depth() }
