package state

import (
	"context"
	"fmt"

	"github.com/tidemark-go/tidemark"
)

// applyEach is ApplyEach: the lines of one call under one hold of the
// token, and most of them staged without c.mu.
//
// An Apply takes the token (an atomic compare-and-swap), then c.mu to
// stage its line, and lets both go: four atomic operations a line, each
// a full barrier that waits for the line's writes to leave the CPU's
// store buffer. applyEach takes the token once. A line that the fast way
// of Apply would take (the same feed, file and epoch as the line before,
// past it, the same origin, in a batch that holds a line already and has
// room for this one, no cut wanted, nothing changed by the committer
// since the last line staged under c.mu) is applied without c.mu: its
// function writes into the staging batch as any Apply's does, and the
// line is only counted in p, pending. The pending lines are staged (their
// count, bytes and the feed's position recorded in the batch: publish)
// under c.mu at once, before any other line, before an error or a panic
// is returned, and at the end. Nothing else can see them missing: a cut,
// the only reader of what publish writes that matters (the batch's
// positions and count go to the backend with it), needs the token, and
// the committer's reads of the staging batch's count and size under c.mu
// (is it old, or full) see fewer lines than it holds, as they would a
// moment before; statsNow counts them once they are published.
func (c *core) applyEach(ctx context.Context, ns *nsStore, n int, at func(i int) *tidemark.Delivery, fn func(tx *Tx, i int) error) (done int, err error) {
	if n <= 0 {
		return 0, nil
	}
	if err := c.hold(ctx, at(0)); err != nil {
		return 0, err
	}
	var p pending
	defer func() {
		// A panic of a line's function: its changes are undone (as by
		// exit), and the lines before it are staged before the token
		// goes, or their changes would commit without their positions
		// and apply again after a restart.
		tw := &c.tw
		if tw.open {
			tw.rollback(c.ts.cur)
			tw.open = false
			c.txs[c.txi-1].done = true
		}
		if p.k > 0 {
			c.mu.Lock()
			c.publish(&p)
			c.leave()
			c.mu.Unlock()
		}
		c.release()
	}()
	for i := range n {
		d := at(i)
		fs := c.lastFeed
		if !c.canDefer(ns, fs, d, &p) {
			if p.k > 0 {
				c.mu.Lock()
				c.publish(&p)
				c.leave()
				c.mu.Unlock()
			}
			if _, err := c.applyHeld(ctx, ns, d, nil, fn, i); err != nil {
				return i, err
			}
			continue
		}
		tx := c.newTx(ns, d, false)
		if err := c.run(tx, nil, fn, i); err != nil {
			if p.k > 0 {
				c.mu.Lock()
				c.publish(&p)
				c.leave()
				c.mu.Unlock()
			}
			return i, err
		}
		p.add(fs, d, c.tw.oadded)
		if !c.room(tx.cur, &p) {
			// The batch is full with this line, or the committer wants
			// it: staged now, and cut if it can be (publish).
			c.mu.Lock()
			c.publish(&p)
			c.leave()
			c.mu.Unlock()
		}
	}
	return n, nil
}

// hold takes the token for ApplyEach or ApplyRuns, whose first line is
// d's: at once if no other Apply holds it, or once it is released.
func (c *core) hold(ctx context.Context, d *tidemark.Delivery) error {
	if c.applyTok.CompareAndSwap(false, true) {
		return nil
	}
	if err := c.acquire(ctx); err != nil {
		return fmt.Errorf("apply feed %q epoch %d position %d: waiting for another Apply: %w", d.Feed, d.Epoch, d.Position, err)
	}
	return nil
}

// pending are the lines applyEach applied without staging them yet: how
// many, their output bytes, their feed's state, and the last one's
// position. They are of one epoch and origin, the feed's latest (see
// canDefer): the position is all of their lineage that moves.
type pending struct {
	k     int
	bytes int
	fs    *feedState
	pos   int64
}

func (p *pending) add(fs *feedState, d *tidemark.Delivery, oadded int) {
	p.k++
	p.bytes += oadded
	p.fs = fs
	p.pos = d.Position
}

// canDefer reports whether the line of d can be applied without c.mu
// (see applyEach): the fast way of apply, for a line of the same feed
// and file as the last staged or pending one, past it in the same epoch,
// of the same origin, in a batch that holds a staged line already (so
// that its start time and the feed's record in it are set) and is not
// full. The caller holds the token.
func (c *core) canDefer(ns *nsStore, fs *feedState, d *tidemark.Delivery, p *pending) bool {
	if !c.fastOK || c.fastVer != c.ver.Load() || fs == nil || d.Epoch == 0 ||
		fs.fk.feed != d.Feed || fs.fk.file != d.File || fs.fk.ns != ns.ns ||
		d.Epoch != fs.latest.Epoch || fs.origin != d.Origin {
		return false
	}
	last := fs.latest.Position
	if p.k > 0 {
		last = p.pos
	}
	b := c.ts.cur
	return d.Position > last && b == c.cur && b.count > 0 && fs.stagedIn == b.seq && c.room(b, p)
}

// room reports whether the staging batch b, with the pending lines p,
// takes another line without being staged first: it is not full (see
// core.full), or, while the batch before it commits, not overfull (as an
// Apply that finds it full then stages its line into it); and no cut is
// wanted. The bytes and keys count those of the pending lines. The
// caller holds the token, and c.ts is as leave left it (canDefer checks
// that the committer changed nothing since).
func (c *core) room(b *batch, p *pending) bool {
	n := b.count + p.k
	if n >= c.bsize && (c.ts.sealed == nil || n >= c.bmax) {
		return false
	}
	return b.size+b.grown+p.bytes < c.maxBytes && (c.keyCap == nil || int64(len(b.writes)) < c.keyCap.Load()) && !c.cutWanted.Load()
}

// publish stages the pending lines p in the staging batch, as apply
// stages one: their count, bytes and keys, and the feed's position, the
// last line's; then cuts the batch if it is full or a cut is wanted.
// c.mu held, and the token. p is emptied first: should anything below
// panic, applyEach's deferred publish must not take c.mu again.
func (c *core) publish(p *pending) {
	q := *p
	*p = pending{}
	b := c.cur
	if b.grown != 0 {
		b.size, b.grown = b.size+b.grown, 0
	}
	b.size += q.bytes
	b.count += q.k
	b.keys = len(b.writes)
	fs := q.fs
	r := &b.applied[fs.idx]
	fs.latest.Position, r.lin.Position = q.pos, q.pos
	fs.latest.TailLen, fs.latest.TailHash = 0, 0
	r.lin.TailLen, r.lin.TailHash = 0, 0
	c.stats.Applied += uint64(q.k)
	if q.bytes > 0 && !c.opts.Sync {
		c.writeAhead(b, false)
	}
	if (c.full(b) || c.cutWanted.Load()) && c.sealed == nil {
		c.cut()
	} else if c.sealed != nil && c.overfull(b) {
		if c.canPend(b) {
			c.cutPending()
		} else {
			c.syncAhead(b)
		}
	}
}
