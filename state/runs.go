package state

import (
	"context"

	"github.com/tidemark-go/tidemark"
)

// applyRuns is ApplyRuns: the lines of one call under one hold of the
// token, each run of them one transaction (see Namespace.ApplyRuns).
//
// A run starts as Apply's line does (begin: the checks of its feed, and
// the re-delivery that is skipped), with the line that begins it; the
// lines after it join while they are of its feed, file, epoch and origin,
// in increasing positions: the lines that Apply would take, one after the
// other, past the position the line before recorded, without another
// check. The run's function writes into the staging batch as one line's
// does, with one record to undo each key it writes (the first write of a
// key in a transaction records it, see Tx.put), and the run is staged as
// one line is, with its count and its last line's position. The staging
// batch is cut between runs, never inside one: a run takes at most the
// lines the batch has room for, and the keys (runEnd); its bytes are
// checked after each run, as after each line.
func (c *core) applyRuns(ctx context.Context, ns *nsStore, n int, at func(i int) *tidemark.Delivery, fn func(tx *Tx, from, to int) error) (done int, err error) {
	if n <= 0 {
		return 0, nil
	}
	if err := c.hold(ctx, at(0)); err != nil {
		return 0, err
	}
	// A function that panics: its run is undone, and the token released.
	defer c.exit()
	for i := 0; i < n; {
		d := at(i)
		fs, tx, skip, err := c.begin(ctx, ns, d)
		if err != nil {
			return i, err
		}
		if skip {
			i++
			continue
		}
		j := c.runEnd(d, i, n, at, tx.cur)
		last := d
		if j > i+1 {
			// The transaction is the run's last line's (Tx.Delivery), whose
			// position it records.
			last = at(j - 1)
			c.ts.d.Position, c.ts.d.Seq = last.Position, last.Seq
		}
		c.tw.open = true
		if err := c.ran(tx, fn(tx, i, j)); err != nil {
			return i, err
		}
		if _, err := c.stage(fs, tx, last, j-i); err != nil {
			return i, err
		}
		i = j
	}
	return n, nil
}

// runEnd returns the end of the run that the line i of d begins, in the
// staging batch b: the lines after it of the same feed, file, epoch and
// origin, in increasing positions, while b has room for them (up to
// Options.BatchSize lines; MaxBatchSize while the batch before it
// commits; and no more lines than the keys the backend's commit has room
// for, as if each changed a key of its own, so that a batch is cut at
// that limit as with one transaction a line). A line without an epoch, whose position is not recorded, is a
// run of its own, and so is every line with Options.Sync. The caller
// holds the token, and c.ts is the transaction's view.
func (c *core) runEnd(d *tidemark.Delivery, i, n int, at func(i int) *tidemark.Delivery, b *batch) int {
	if d.Epoch == 0 || c.opts.Sync {
		return i + 1
	}
	room := c.bsize
	if c.ts.sealed != nil {
		room = c.bmax
	}
	room -= b.count
	if c.keyCap != nil {
		// The keys the backend's commit has memory for (bbolt's): each
		// line of a run may change a key of its own, and a run is not cut.
		room = int(min(int64(room), c.keyCap.Load()-int64(len(b.writes))))
	}
	room = max(1, room)
	pos := d.Position
	j := i + 1
	for ; j < n && j-i < room; j++ {
		e := at(j)
		if e.Epoch != d.Epoch || e.Position <= pos || e.Feed != d.Feed || e.File != d.File || e.Origin != d.Origin {
			break
		}
		pos = e.Position
	}
	return j
}
