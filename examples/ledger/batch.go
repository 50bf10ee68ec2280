package main

import (
	"context"
	"errors"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/state"
)

// batchLine is a line of a run that HandleBatch applies in one
// state.ApplyEach: parsed, canonical (see parseCanonical), as Handle
// leaves it in the ledger's fields for applyLine.
type batchLine struct {
	e       Entry
	account []byte
	line    []byte
	d       *tidemark.Delivery
	// Set by the line's function: it ran (the line is applied, not a
	// re-delivery), and the reject records it staged.
	applied bool
	staged  int
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
		l.eachAt = func(i int) *tidemark.Delivery { return l.run[i].d }
		l.eachFn = l.applyRunLine
	}
	for i := 0; i < n; {
		run := l.run[:0]
		j := i
		for ; j < n; j++ {
			line := b.Line(j)
			id, account, amount, ok := parseCanonical(line)
			if !ok {
				break
			}
			run = append(run, batchLine{e: Entry{ID: id, Amount: amount}, account: account, line: line, d: b.Delivery(j)})
		}
		l.run = run
		if len(run) > 0 {
			done, err := l.st.ApplyEach(ctx, len(run), l.eachAt, l.eachFn)
			applied := 0
			for k := range done {
				r := &run[k]
				l.rej.done(*r.d, r.applied, r.staged)
				if r.applied {
					applied++
				}
			}
			l.applied.Add(uint64(applied))
			l.skipped.Add(uint64(done - applied))
			if err != nil {
				r := &run[done]
				if errors.Is(err, state.ErrTooLarge) {
					err = l.reject(ctx, *r.d, framework.ReasonTooLarge, err, r.line)
				}
				clear(l.run)
				return i + done, err
			}
		}
		// Let go of the lines' bytes and deliveries: they are the
		// framework's, valid only during the call.
		clear(l.run)
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
func (l *ledger) applyRunLine(tx *state.Tx, i int) error {
	r := &l.run[i]
	r.applied = true
	var err error
	if l.buf, err = applyLineOf(tx, r.e, r.account, r.line, *r.d, false, l.buf); err != nil {
		return err
	}
	r.staged, err = l.rej.stage(tx, *r.d)
	return err
}
