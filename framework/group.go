package framework

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/internal/hold"
	"github.com/tidemark-go/tidemark/state"
)

// The states of a group.
const (
	groupRunning int32 = iota
	groupFenced        // quarantined: waits for the fence to lift
	groupDead          // a restart failed: its queues are never read
	groupRemoved
	groupRestarting // between its old and new incarnations
)

// procEntry is one processor of a group.
type procEntry struct {
	name    string
	p       Processor
	removed atomic.Bool
	started bool // Start succeeded in the current incarnation; under g.mu
}

// fence is why a group is quarantined.
type fence struct {
	proc *procEntry
	d    tidemark.Delivery
	err  error
}

// incarnation is one run of a group's goroutine, from a start (or restart)
// to its stop. Its queues are the group's live subscriptions.
type incarnation struct {
	ctx    context.Context
	cancel context.CancelFunc
	quit   chan struct{}
	quitMu sync.Once
	drain  chan struct{}
	drainO sync.Once
	done   chan struct{}
	// busy is a semaphore held by the goroutine while it processes a
	// batch, released while it sleeps between retries or waits for a
	// fence to lift. RemoveProcessor passes through it (ctx-bounded) so
	// that a processor is never stopped while it handles a line.
	busy chan struct{}

	queues map[string]*queue // by feed name; under g.mu
	qsnap  atomic.Pointer[[]*queue]

	// skips is the log of the lines this incarnation skipped.
	skips skipLog

	// batch is the view handed to a BatchHandler, reused call after call
	// by the incarnation's goroutine (no allocation per call).
	batch Batch
}

func newIncarnation(base context.Context) *incarnation {
	ctx, cancel := context.WithCancel(base)
	inc := &incarnation{
		ctx:    ctx,
		cancel: cancel,
		quit:   make(chan struct{}),
		drain:  make(chan struct{}),
		done:   make(chan struct{}),
		busy:   make(chan struct{}, 1),
		queues: make(map[string]*queue),
	}
	inc.qsnap.Store(new([]*queue))
	return inc
}

func (inc *incarnation) stop() {
	inc.quitMu.Do(func() {
		close(inc.quit)
		inc.cancel()
	})
}

func (inc *incarnation) beginDrain() { inc.drainO.Do(func() { close(inc.drain) }) }

func (inc *incarnation) quitting() bool {
	select {
	case <-inc.quit:
		return true
	default:
		return false
	}
}

// publish refreshes the goroutine's view of the queues; under g.mu.
func (inc *incarnation) publish() {
	qs := make([]*queue, 0, len(inc.queues))
	for _, q := range inc.queues {
		qs = append(qs, q)
	}
	slices.SortFunc(qs, func(a, b *queue) int {
		if a.f.name < b.f.name {
			return -1
		}
		if a.f.name > b.f.name {
			return 1
		}
		return 0
	})
	inc.qsnap.Store(&qs)
}

// group is a processor group: its processors receive the lines of the feeds
// they subscribed to, in order, on the group's own goroutine.
type group struct {
	s      *Server
	name   string
	policy FailurePolicy
	log    *slog.Logger

	notify chan struct{} // a queue got a batch
	ctrl   chan struct{} // the fence changed
	state  atomic.Int32

	// store is the group's store (GroupConfig.Store), owned by the server;
	// nil when the group has none. storeSpec is its spec, for logs.
	store     state.Store
	storeSpec string
	resume    ResumeMode

	mu    sync.Mutex
	procs []*procEntry
	inc   *incarnation
	fence *fence
	// replacing holds, during a restart, the old incarnation's queues
	// (by feed), still live until the new incarnation subscribes.
	replacing map[string]*queue
}

// blocked reports whether the group is fenced or dead: a feed that holds
// pauses for it, and says so in its stall reason.
func (g *group) blocked() bool {
	st := g.state.Load()
	return st == groupFenced || st == groupDead
}

// pauses reports whether a feed that holds must not read for now: the group
// is blocked, or restarting (a moment: no line goes to a queue that nobody
// reads).
func (g *group) pauses() bool {
	return g.blocked() || g.state.Load() == groupRestarting
}

func (g *group) wakeUp() {
	select {
	case g.notify <- struct{}{}:
	default:
	}
}

func (g *group) poke() {
	select {
	case g.ctrl <- struct{}{}:
	default:
	}
}

// start makes a new incarnation and starts its processors. On error the
// group is left without a goroutine, its queues live: dead.
func (g *group) start(ctx context.Context) (*incarnation, error) {
	inc := newIncarnation(g.s.base)
	g.mu.Lock()
	g.inc = inc
	g.fence = nil
	procs := slices.Clone(g.procs)
	g.mu.Unlock()
	for _, p := range procs {
		fc := &Context{s: g.s, g: g, inc: inc, proc: p}
		if err := p.p.Start(ctx, fc); err != nil {
			return inc, fmt.Errorf("framework: start processor %q of group %q: %w", p.name, g.name, err)
		}
		g.mu.Lock()
		p.started = true
		g.mu.Unlock()
	}
	return inc, nil
}

// subscribe adds p to the group's queue on f, making the queue if needed.
func (g *group) subscribe(inc *incarnation, p *procEntry, f *feedRunner) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.inc != inc || inc.quitting() {
		return fmt.Errorf("framework: processor %q of group %q subscribes to feed %q after its group stopped: %w", p.name, g.name, f.name, ErrState)
	}
	q := inc.queues[f.name]
	if q == nil {
		// The processor is on the queue before the feed can send to it.
		q = &queue{f: f, g: g, inc: inc, ch: make(chan *batch, f.qBatches), removedCh: make(chan struct{})}
		q.procs.Store(&[]*procEntry{p})
		old := g.replacing[f.name]
		if old != nil {
			delete(g.replacing, f.name)
			f.mu.Lock()
			old.freeze() // before Bind moves the checkpoint to q
			f.mu.Unlock()
		}
		g.s.reg.Bind(f.name, g.name, q.progress)
		(*hold.Set)(g.s.reg).OnAdvance(f.name, g.name, f.signal)
		if g.store != nil {
			// The group's store vouches for its state: the feed's commits
			// for this group wait until the store has made it durable.
			if err := g.store.Bind(f.name, g.s.reg.Hold(f.name, g.name)); err != nil {
				return fmt.Errorf("framework: processor %q of group %q subscribes to feed %q: bind the group's store: %w", p.name, g.name, f.name, err)
			}
		}
		q.cp = g.s.reg.Lookup(f.name, g.name)
		d, _ := q.cp.Durable()
		q.binding = hold.Mark(d).Binding()
		inc.queues[f.name] = q
		inc.publish()
		if old != nil {
			f.replaceQueue(old, q)
		} else {
			f.addQueue(q)
		}
		g.log.Info("subscribed", "feed", f.name, "processor", p.name)
		return nil
	}
	ps := *q.procs.Load()
	if !slices.Contains(ps, p) {
		ps = append(slices.Clone(ps), p)
		q.procs.Store(&ps)
	}
	return nil
}

// subscribed reports whether the group has a live queue on the named feed.
func (g *group) subscribed(feedName string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.inc != nil && g.inc.queues[feedName] != nil
}

// unsubscribe takes p off the group's queue on f, removing the queue when
// no processor is left on it.
func (g *group) unsubscribe(inc *incarnation, p *procEntry, f *feedRunner) error {
	g.mu.Lock()
	q := inc.queues[f.name]
	ps := []*procEntry(nil)
	if q != nil {
		ps = *q.procs.Load()
	}
	i := slices.Index(ps, p)
	if g.inc != inc || i < 0 {
		g.mu.Unlock()
		return fmt.Errorf("framework: processor %q of group %q unsubscribes from feed %q: %w", p.name, g.name, f.name, ErrNotSubscribed)
	}
	ps = slices.Delete(slices.Clone(ps), i, i+1)
	q.procs.Store(&ps)
	if len(ps) > 0 {
		g.mu.Unlock()
		return nil
	}
	delete(inc.queues, f.name)
	inc.publish()
	g.mu.Unlock()
	f.removeQueue(q, fmt.Sprintf("processor %s unsubscribed", p.name))
	return nil
}

// run is the group's goroutine: it takes batches from its queues in turn
// and hands each line to the subscribed processors.
func (g *group) run(inc *incarnation) {
	defer close(inc.done)
	defer g.reportSkips(inc)
	for {
		did := false
		for _, q := range *inc.qsnap.Load() {
			select {
			case b := <-q.ch:
				did = true
				if !g.process(inc, q, b) {
					return
				}
			default:
			}
		}
		if inc.quitting() {
			return
		}
		if did {
			continue
		}
		select {
		case <-g.notify:
		case <-g.ctrl:
		case <-inc.quit:
			return
		case <-inc.drain:
			if g.drained(inc) {
				g.callDrained(inc)
				return
			}
		}
	}
}

// drained reports whether every queue is empty; called once the feeds
// stopped sending.
func (g *group) drained(inc *incarnation) bool {
	for _, q := range *inc.qsnap.Load() {
		if len(q.ch) > 0 {
			return false
		}
	}
	return true
}

// callDrained tells the processors that implement Drainer that the group
// has drained.
func (g *group) callDrained(inc *incarnation) {
	g.mu.Lock()
	procs := slices.Clone(g.procs)
	g.mu.Unlock()
	for _, p := range procs {
		dr, ok := p.p.(Drainer)
		if !ok || p.removed.Load() {
			continue
		}
		err := func() (err error) {
			defer func() {
				if r := recover(); r != nil {
					err = &PanicError{Value: r, Stack: debug.Stack()}
				}
			}()
			return dr.Drained(inc.ctx)
		}()
		if err != nil {
			g.log.Error("processor failed to save at the drain: what it buffered is not committed and will be read again", "processor", p.name, "err", err)
		}
	}
}

// process hands the items of b to the processors. It reports false when
// the incarnation is stopping.
//
// The hot loop is runItems, with one recover for the whole batch rather
// than one per line.
func (g *group) process(inc *incarnation, q *queue, b *batch) bool {
	inc.busy <- struct{}{}
	q.beginBatch(b)
	c := cursor{n: q.finished.Load(), ok: true}
	for {
		perr := g.runItems(inc, q, b, &c)
		if perr == nil {
			break
		}
		// Processor c.j panicked on item c.i: the panic goes through the
		// failure policy as the processor's error.
		it := &b.items[c.i]
		if !g.deliver(inc, q, c.procs[c.j], it.d, b.data[it.off:it.end:it.end], perr) {
			c.ok = false
			break
		}
		c.j++
	}
	q.endBatch()
	<-inc.busy
	b.release()
	// The feed commits what every queue finished when woken, rather than
	// at its next duty cycle or pause tick: the commit lag stays within
	// about one batch.
	q.f.signal()
	return c.ok
}

// cursor is where process is in a batch: runItems resumes from it after a
// processor's panic.
type cursor struct {
	i, j     int          // the item, and the processor of it, to run next
	procs    []*procEntry // the processors of item i
	n        uint64       // items of the queue finished
	handled  bool         // a processor took item i
	inHandle bool         // a processor's Handle is running
	start    time.Time    // when item i's handling began (with an Observer)
	ok       bool         // false once the incarnation is stopping
	// lineEnd: the items before it are handed to Handle one at a time,
	// not to HandleBatch: they are those of a HandleBatch call that
	// panicked (see runBatches).
	lineEnd int
}

// runItems runs items from c until the batch ends, and returns nil; or it
// returns the panic of processor c.j on item c.i as a *PanicError. A panic
// outside a processor's Handle (an Observer's, say) is not recovered.
func (g *group) runItems(inc *incarnation, q *queue, b *batch, c *cursor) (perr error) {
	defer func() {
		if !c.inHandle {
			return
		}
		c.inHandle = false
		r := recover()
		perr = &PanicError{Value: r, Stack: debug.Stack()}
		if r == nil {
			// panic(nil) arrives as a *runtime.PanicNilError; recover
			// never returns nil for a panic since Go 1.21.
			perr = &PanicError{Value: "panic with nil value", Stack: debug.Stack()}
		}
	}()
	obs := g.s.cfg.Observer
	ctx := inc.ctx
	items, data := b.items, b.data
	// The loop keeps its place in locals and writes it to c only before a
	// Handle, which is where the recover above reads it (and process
	// resumes from it): a write and a read back of c's fields at each
	// line made this loop the group's main cost with a cheap processor
	// (row 3 of bench/RESULTS.md, four groups).
	i, j, n, handled := c.i, c.j, c.n, c.handled
	procs := c.procs
	// pp is the processor list procs was read from; nil when resuming an
	// item after a panic (its processors are those it began with, and the
	// next item reads the list again).
	var pp *[]*procEntry
	for ; i < len(items); i, j, handled = i+1, 0, false {
		if one := q.procs.Load(); j == 0 && len(*one) == 1 && (obs == nil || batches(*one, c, i)) {
			var stop bool
			i, n, stop = g.runSingle(inc, q, b, c, i, n, obs)
			if stop {
				return nil
			}
			if i == len(items) {
				break
			}
			// Item i needs this loop: it reads the processor list again
			// (and puts it in c.procs, which runSingle set).
			pp = nil
		}
		if q.removed.Load() {
			c.i, c.j, c.n, c.handled = i, j, n, handled
			return nil
		}
		it := &items[i]
		if it.ev != nil {
			if !g.deliverStatus(inc, q, it.ev) {
				c.i, c.j, c.n, c.handled = i, j, n, handled
				return nil // no processor left: the queue is being removed
			}
		} else {
			line := data[it.off:it.end:it.end]
			if j == 0 {
				if cur := q.procs.Load(); cur != pp {
					pp = cur
					procs = *cur
					c.procs = procs
				}
				if obs != nil {
					c.start = time.Now()
				}
			}
			for ; j < len(procs); j++ {
				p := procs[j]
				if p.removed.Load() {
					continue
				}
				handled = true
				c.i, c.j, c.n, c.handled = i, j, n, true
				c.inHandle = true
				err := p.p.Handle(ctx, it.d, line)
				c.inHandle = false
				if err != nil {
					if !g.deliver(inc, q, p, it.d, line, err) {
						c.ok = false
						return nil
					}
				}
			}
			if !handled {
				// Every processor left the queue, which is being
				// removed: the line is not finished, so it stays held.
				c.i, c.j, c.n, c.handled = i, j, n, handled
				return nil
			}
			if obs != nil {
				obs.ObserveHandle(g.name, time.Since(c.start))
			}
		}
		// Every line's count is published as it finishes: a processor
		// that blocks on a line leaves the lines before it committable,
		// and a checkpoint mark taken inside Handle counts them.
		n++
		q.finished.Store(n)
		if it.ev != nil {
			q.events.Add(1) // after finished: processed never goes below 0
		}
	}
	c.i, c.j, c.n, c.handled = i, j, n, handled
	return nil
}

// runSingle is runItems' loop for the common queue: one processor, no
// Observer. It is the loop above with what a line needs only, at about
// half its cost a line (6 against 11 ns with a no-op processor, hot
// cache): from item i, with n items of the queue finished, it runs the
// lines while nothing changes, and returns at the first item that needs
// runItems' loop (a status event, the queue or its processor removed, the
// processor list changed: not one processor any more) or at the end of
// the batch, with that item and the finished count. As there, c holds the
// place during each Handle, for the recover of runItems (a panic goes
// through it) and process's resume, and the finished count is published
// at each line. stop reports that the incarnation is stopping (a line
// failed and deliver gave up): runItems returns at once.
//
// The loop itself is runLines. A processor that is a BatchHandler gets
// runs of lines instead (runBatches): the type assertion is made once a
// call of runSingle, not once a line. With an Observer (obs), runItems
// calls runSingle only for a BatchHandler (see batches): runBatches times
// its calls, runLines does not time its lines.
func (g *group) runSingle(inc *incarnation, q *queue, b *batch, c *cursor, i int, n uint64, obs HandleObserver) (int, uint64, bool) {
	pp := q.procs.Load()
	if len(*pp) != 1 {
		return i, n, false
	}
	p := (*pp)[0]
	c.procs, c.j, c.handled = *pp, 0, true
	if bh, ok := p.p.(BatchHandler); ok {
		return g.runBatches(inc, q, b, c, i, n, pp, p, bh, obs)
	}
	if obs != nil {
		return i, n, false // runLines does not time its lines: runItems' loop does
	}
	return g.runLines(inc, q, b, c, i, n, pp, p, len(b.items))
}

// batches reports whether runSingle hands item i to a BatchHandler, which
// it does with an Observer too (runBatches times each call): procs is one
// BatchHandler, and item i is not one of the lines of a call that
// panicked (those go to Handle, in runItems' loop, which times them).
func batches(procs []*procEntry, c *cursor, i int) bool {
	_, ok := procs[0].p.(BatchHandler)
	return ok && i >= c.lineEnd
}

// runLines is runSingle's loop over the lines from item i to item end
// (excluded), handed to p's Handle one at a time; pp is the processor list
// p was read from, and c.procs, c.j and c.handled are set.
func (g *group) runLines(inc *incarnation, q *queue, b *batch, c *cursor, i int, n uint64, pp *[]*procEntry, p *procEntry, end int) (int, uint64, bool) {
	h := p.p
	ctx := inc.ctx
	items, data := b.items[:end], b.data
	for ; i < len(items); i++ {
		it := &items[i]
		if it.ev != nil || q.removed.Load() || p.removed.Load() || q.procs.Load() != pp {
			break
		}
		line := data[it.off:it.end:it.end]
		c.i, c.n = i, n
		c.inHandle = true
		err := h.Handle(ctx, it.d, line)
		c.inHandle = false
		if err != nil && !g.deliver(inc, q, p, it.d, line, err) {
			c.ok = false
			return i, n, true
		}
		n++
		q.finished.Store(n)
	}
	return i, n, false
}

// runBatches is runSingle's loop for a BatchHandler: from item i it hands
// the lines up to the next status event (or the end of the batch) to
// HandleBatch in one call, checking before each call what runLines checks
// before each line, and returns as runLines does. The call's lines count
// as finished when it returns (one store of the finished count); the line
// it reports failed goes through deliver, and the next call starts after
// it. A result out of HandleBatch's contract stops the server; a panic is
// recovered here (c.inHandle stays false: runItems' recover never sees
// it) and the call's lines go to Handle, one at a time, through runLines,
// where a panic of Handle takes the usual way (runItems' recover, the
// failure policy, process's resume, and back here through runSingle,
// which c.lineEnd sends on to runLines until the call's lines are done).
func (g *group) runBatches(inc *incarnation, q *queue, b *batch, c *cursor, i int, n uint64, pp *[]*procEntry, p *procEntry, bh BatchHandler, obs HandleObserver) (int, uint64, bool) {
	ctx := inc.ctx
	items, data := b.items, b.data
	bb := &inc.batch
	var start time.Time
	for i < len(items) {
		if i < c.lineEnd {
			if obs != nil {
				return i, n, false // runItems' loop hands them to Handle, and times them
			}
			var stop bool
			if i, n, stop = g.runLines(inc, q, b, c, i, n, pp, p, c.lineEnd); stop || i < c.lineEnd {
				return i, n, stop // stopping, or runItems' loop is needed
			}
			continue
		}
		if q.removed.Load() || p.removed.Load() || q.procs.Load() != pp {
			break
		}
		end := i
		for end < len(items) && items[end].ev == nil {
			end++
		}
		if end == i {
			break // a status event: runItems' loop delivers it
		}
		c.i, c.n = i, n
		bb.items, bb.data = items[i:end], data
		if obs != nil {
			start = time.Now()
		}
		done, perr, err := callHandleBatch(ctx, bh, bb)
		bb.items, bb.data = nil, nil
		if obs != nil && perr == nil && done > 0 && done <= end-i {
			// A line's time is its share of the call's.
			per := time.Since(start) / time.Duration(done)
			for range done {
				obs.ObserveHandle(g.name, per)
			}
		}
		if perr != nil {
			q.failures.Add(1)
			q.f.failed.Add(1)
			d := &items[i].d
			g.log.Warn("processor panicked in HandleBatch: its lines go to Handle one at a time, from the call's first, and may be handled twice",
				"feed", d.Feed, "processor", p.name, "epoch", d.Epoch, "position", d.Position, "seq", d.Seq, "lines", end-i, "panic", perr.Value, "stack", string(perr.Stack))
			c.lineEnd = end
			continue
		}
		k := end - i
		if done < 0 || done > k || (err == nil) != (done == k) {
			g.badBatchResult(p, items[i:end], done, err)
			c.ok = false
			return i, n, true
		}
		// Every line before done finished: publish them, once for the call.
		if done > 0 {
			i += done
			n += uint64(done)
			q.finished.Store(n)
		}
		if err != nil {
			// Line i failed: the failure policy decides, as for Handle.
			it := &items[i]
			c.i, c.n = i, n
			if obs != nil {
				start = time.Now()
			}
			if !g.deliver(inc, q, p, it.d, data[it.off:it.end:it.end], err) {
				c.ok = false
				return i, n, true
			}
			if obs != nil {
				obs.ObserveHandle(g.name, time.Since(start))
			}
			i++
			n++
			q.finished.Store(n)
		}
	}
	return i, n, false
}

// callHandleBatch calls h.HandleBatch, and returns its panic, if any, as a
// *PanicError.
func callHandleBatch(ctx context.Context, h BatchHandler, b *Batch) (done int, perr *PanicError, err error) {
	defer func() {
		if r := recover(); r != nil {
			perr = &PanicError{Value: r, Stack: debug.Stack()}
		}
	}()
	done, err = h.HandleBatch(ctx, b)
	return done, nil, err
}

// badBatchResult stops the server for a HandleBatch call over the lines of
// run that returned (done, err), a result out of its contract. None of the
// call's lines counts as finished: the next start reads them again.
func (g *group) badBatchResult(p *procEntry, run []item, done int, err error) {
	first, last := &run[0].d, &run[len(run)-1].d
	want := fmt.Sprintf("(%d, nil) when every line finished, or (k, err) with 0 <= k < %d and err != nil when line k failed", len(run), len(run))
	var ferr error
	if err != nil {
		ferr = fmt.Errorf("framework: processor %q of group %q on feed %q, epoch %d, position %d: HandleBatch of %d lines (positions %d to %d) returned (%d, %v); it must return %s: %w",
			p.name, g.name, first.Feed, first.Epoch, first.Position, len(run), first.Position, last.Position, done, err, want, err)
	} else {
		ferr = fmt.Errorf("framework: processor %q of group %q on feed %q, epoch %d, position %d: HandleBatch of %d lines (positions %d to %d) returned (%d, nil); it must return %s",
			p.name, g.name, first.Feed, first.Epoch, first.Position, len(run), first.Position, last.Position, done, want)
	}
	g.s.fail(ferr,
		"processor's HandleBatch broke its contract, and the server stops without draining: fix the processor (see err), then start the server again: the call's lines are read again, and those after them",
		"group", g.name, "processor", p.name, "feed", first.Feed, "epoch", first.Epoch, "position", first.Position, "lines", len(run))
}

func callHandle(ctx context.Context, p Processor, d tidemark.Delivery, line []byte) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: debug.Stack()}
		}
	}()
	return p.Handle(ctx, d, line)
}

// deliver takes a line whose handling by p failed with err through the
// failure policy: retries, then Skip or Quarantine. It reports false when
// the incarnation is stopping and the line is not finished.
func (g *group) deliver(inc *incarnation, q *queue, p *procEntry, d tidemark.Delivery, line []byte, err error) bool {
	attempt := 0
	for first := true; ; first = false {
		if !first {
			err = callHandle(inc.ctx, p.p, d, line)
		}
		if err == nil {
			return true
		}
		if inc.quitting() {
			return false
		}
		q.failures.Add(1)
		q.f.failed.Add(1)
		if isFatal(err) {
			// The line stays unfinished, so nothing after it is committed
			// for this group; the server stops and the next start reads it
			// again.
			g.s.fail(fmt.Errorf("framework: processor %q of group %q on feed %q, epoch %d, position %d: %w", p.name, g.name, d.Feed, d.Epoch, d.Position, err),
				"processor failed on a line with an error that stops the server, without draining; fix the cause (see err), then start the server again: the line is read again, and those after it",
				"group", g.name, "processor", p.name, "feed", d.Feed, "epoch", d.Epoch, "position", d.Position)
			return false
		}
		if attempt < g.policy.Retries && !isPermanent(err) {
			wait := g.policy.delay(attempt)
			g.log.Warn("processor failed; retrying", "feed", d.Feed, "processor", p.name, "epoch", d.Epoch, "position", d.Position, "seq", d.Seq, "attempt", attempt+1, "wait", wait, "err", err)
			<-inc.busy
			slept := sleepCtx(inc.ctx, wait)
			inc.busy <- struct{}{}
			if !slept {
				return false
			}
			if p.removed.Load() {
				return true
			}
			attempt++
			continue
		}
		switch g.policy.Action {
		case Quarantine:
			g.mu.Lock()
			g.fence = &fence{proc: p, d: d, err: err}
			g.state.Store(groupFenced)
			g.mu.Unlock()
			g.s.wakeFeeds()
			g.log.Error("processor failed after its retries: group quarantined; its feeds pause until the fence lifts, the processor or group is removed, or the group restarts",
				"feed", d.Feed, "processor", p.name, "epoch", d.Epoch, "position", d.Position, "seq", d.Seq, "err", err)
			<-inc.busy
			lifted := g.waitFence(inc)
			inc.busy <- struct{}{}
			if !lifted {
				return false
			}
			if p.removed.Load() {
				return true
			}
			attempt = 0
			continue
		default:
			q.skipped.Add(1)
			q.f.skipped.Add(1)
			reason := RejectReason(err)
			q.skipReasons.add(reason)
			g.skipped(inc, p, d, reason, err)
			if g.policy.OnReject != nil {
				g.reject(Rejection{Group: g.name, Processor: p.name, Delivery: d, Line: slices.Clone(line), Err: err})
			}
			return true
		}
	}
}

func (g *group) reject(r Rejection) {
	defer func() {
		if v := recover(); v != nil {
			g.log.Error("reject callback panicked", "panic", v)
		}
	}()
	g.policy.OnReject(r)
}

// waitFence waits until the group is no longer fenced. It reports false
// when the incarnation is stopping.
func (g *group) waitFence(inc *incarnation) bool {
	for g.state.Load() == groupFenced {
		select {
		case <-g.ctrl:
		case <-inc.quit:
			return false
		}
	}
	return !inc.quitting()
}

// deliverStatus hands a status event to the processors that take them. It
// reports false when no processor is left on the queue.
func (g *group) deliverStatus(inc *incarnation, q *queue, ev *StatusEvent) bool {
	live := false
	for _, p := range *q.procs.Load() {
		if p.removed.Load() {
			continue
		}
		live = true
		h, ok := p.p.(StatusHandler)
		if !ok {
			continue
		}
		err := func() (err error) {
			defer func() {
				if r := recover(); r != nil {
					err = &PanicError{Value: r, Stack: debug.Stack()}
				}
			}()
			return h.HandleStatus(inc.ctx, *ev)
		}()
		if err != nil {
			q.failures.Add(1)
			q.f.failed.Add(1)
			g.log.Warn("processor failed on a status event", "feed", ev.Feed, "processor", p.name, "state", ev.State.String(), "err", err)
		}
	}
	return live
}

// liftFence ends a quarantine.
func (g *group) liftFence() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.state.CompareAndSwap(groupFenced, groupRunning) {
		return false
	}
	g.fence = nil
	g.poke()
	return true
}

// stopProcessors calls Stop on the started processors.
func (g *group) stopProcessors(ctx context.Context, procs []*procEntry) error {
	var errs []error
	for _, p := range procs {
		g.mu.Lock()
		started := p.started
		p.started = false
		g.mu.Unlock()
		if !started {
			continue
		}
		if st, ok := p.p.(Stopper); ok {
			if err := safeStop(ctx, st); err != nil {
				errs = append(errs, fmt.Errorf("framework: stop processor %q of group %q: %w", p.name, g.name, err))
			}
		}
	}
	return errors.Join(errs...)
}

func safeStop(ctx context.Context, st Stopper) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: debug.Stack()}
		}
	}()
	return st.Stop(ctx)
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// waitDone waits for an incarnation's goroutine to end.
func waitDone(ctx context.Context, inc *incarnation) error {
	select {
	case <-inc.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
