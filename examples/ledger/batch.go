package main

import (
	"context"
	"errors"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/state"
)

// batchLine is a line of a run that HandleBatch applies in one
// state.ApplyEach: parsed, canonical (see parseCanonical), its account
// line[a0:a1]. Its line and delivery are read from the call's Batch: a
// run is as small as it can be, since each line is written by the parse
// and read back by its function.
type batchLine struct {
	id, amount int64
	a0, a1     int32
	// Set by the line's function: it ran (the line is applied, not a
	// re-delivery), and the reject records it staged.
	applied bool
	staged  int32
}

// HandleBatch applies the lines of b as Handle would one at a time, with
// one state.ApplyEach for each run of canonical lines: the framework
// hands the ledger a feed's read (up to 1,024 lines) in one call, and the
// store is taken once for the run instead of once a line. A line that is
// not canonical (or malformed) goes through Handle, between runs. Where
// the ledger's per-line work cannot be done for a run at once (a pace, a
// run without de-duplication, rejects of the source waiting for the next
// line), every line goes through Handle.
func (l *ledger) HandleBatch(ctx context.Context, b *framework.Batch) (int, error) {
	n := b.Len()
	if l.pace > 0 || !l.dedupe || l.rej.npending.Load() > 0 {
		// The source's rejects are staged with the line after them, and
		// let go once that line's Apply ended (rejects.stage, done): in a
		// run, the next line's function would stage them a second time.
		// A reject the source adds while the run applies is of a line
		// after the run (the source reports a skipped line before the
		// lines after it), so none is staged by the run.
		for i := range n {
			if err := l.Handle(ctx, *b.Delivery(i), b.Line(i)); err != nil {
				return i, err
			}
		}
		return n, nil
	}
	if l.eachFn == nil {
		l.eachAt = func(k int) *tidemark.Delivery { return l.batch.Delivery(l.base + k) }
		l.eachFn = l.applyRunLine
	}
	l.batch = b
	defer func() { l.batch = nil }() // the framework's, valid only during the call
	for i := 0; i < n; {
		run := l.run[:0]
		j := i
		for ; j < n; j++ {
			line := b.Line(j)
			id, account, amount, ok := parseCanonical(line)
			if !ok {
				break
			}
			// account is line[a0:a1], a part of line: its capacity is
			// line's from a0.
			a0 := cap(line) - cap(account)
			run = append(run, batchLine{id: id, amount: amount, a0: int32(a0), a1: int32(a0 + len(account))})
		}
		l.run, l.base = run, i
		if len(run) > 0 {
			done, err := l.st.ApplyEach(ctx, len(run), l.eachAt, l.eachFn)
			applied := 0
			for k := range done {
				r := &run[k]
				l.rej.done(*b.Delivery(i + k), r.applied, int(r.staged))
				if r.applied {
					applied++
				}
			}
			l.applied.Add(uint64(applied))
			l.skipped.Add(uint64(done - applied))
			if err != nil {
				if errors.Is(err, state.ErrTooLarge) {
					err = l.reject(ctx, *b.Delivery(i + done), framework.ReasonTooLarge, err, b.Line(i+done))
				}
				return i + done, err
			}
		}
		if j == n {
			break
		}
		// A line that is not canonical: Handle parses and explains it.
		if err := l.Handle(ctx, *b.Delivery(j), b.Line(j)); err != nil {
			return j, err
		}
		i = j + 1
	}
	return n, nil
}

// applyRunLine is the function of line i of the run for ApplyEach:
// applyLine's, for that line.
func (l *ledger) applyRunLine(tx *state.Tx, k int) error {
	r := &l.run[k]
	r.applied = true
	line := l.batch.Line(l.base + k)
	var err error
	if l.buf, err = applyLineOf(tx, Entry{ID: r.id, Amount: r.amount}, line[r.a0:r.a1], line, nil, false, l.buf); err != nil {
		return err
	}
	d := l.batch.Delivery(l.base + k)
	n, err := l.rej.stage(tx, d)
	r.staged = int32(n)
	return err
}
