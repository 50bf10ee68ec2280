package main

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/state"
)

// batchLine is a line of a run that a runApplier applies in one
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

// runApplier is a ledger processor's HandleBatch (the file ledger's and a
// partition's): the lines of a call are applied as Handle would apply them
// one at a time, with one state.ApplyRuns for each run of canonical lines
// (the framework hands the processor a feed's read, up to 2,048 lines, in
// one call; the store is taken once for the run instead of once a line,
// and makes one transaction of as many of its lines as its batch takes, in
// which the two counters are added to once, not once a line). A line that
// is not canonical (or malformed) goes through the processor's Handle,
// between runs. When a transaction of ApplyRuns fails (a line whose
// account the store cannot hold), nothing of it is staged: its lines go
// again through state.ApplyEach, one transaction each, which keeps the
// lines before the one that fails.
type runApplier struct {
	st state.Namespace
	// handle is the processor's Handle, for a line that is not canonical.
	handle func(ctx context.Context, d tidemark.Delivery, line []byte) error
	// tooLarge returns the processor's error for a line whose account the
	// store cannot hold (err wraps state.ErrTooLarge): it rejects the
	// line, as Handle does.
	tooLarge func(ctx context.Context, d tidemark.Delivery, line []byte, err error) error
	// stage, if set, stages what the processor records with a line (the
	// file ledger's reject records of the lines the source skipped before
	// it) in the line's transaction, and returns how many records.
	stage func(tx *state.Tx, d *tidemark.Delivery) (int, error)
	// after, if set, is called for each line an ApplyEach went through,
	// in order: applied, or skipped as a re-delivery; with the records
	// stage staged.
	after func(d *tidemark.Delivery, applied bool, staged int)
	// applied and skipped count the lines the ApplyEach calls applied
	// and skipped as re-deliveries: each is added to once per call, not
	// once a line (an atomic add a line costs as much as a counter's
	// write in the store).
	applied, skipped *atomic.Uint64

	// The run being applied: its lines, the call's Batch they are of (nil
	// between calls) from line base; the output line's buffer; and the
	// functions handed to ApplyRuns and ApplyEach, made once.
	run    []batchLine
	batch  *framework.Batch
	base   int
	buf    []byte
	at     func(i int) *tidemark.Delivery
	fn     func(tx *state.Tx, i int) error
	fnRuns func(tx *state.Tx, from, to int) error
}

// handleBatch is HandleBatch: it returns (b.Len(), nil), or the index of
// the line that failed and its error.
func (r *runApplier) handleBatch(ctx context.Context, b *framework.Batch) (int, error) {
	if r.fn == nil {
		r.at = func(k int) *tidemark.Delivery { return r.batch.Delivery(r.base + k) }
		r.fn = r.applyRunLine
		r.fnRuns = r.applyRunLines
	}
	r.batch = b
	defer func() { r.batch = nil }() // the framework's, valid only during the call
	n := b.Len()
	for i := 0; i < n; {
		run := r.run[:0]
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
		r.run, r.base = run, i
		if len(run) > 0 {
			done, err := r.apply(ctx, run, i)
			r.count(b, i, run[:done])
			if err != nil {
				if errors.Is(err, state.ErrTooLarge) {
					err = r.tooLarge(ctx, *b.Delivery(i + done), b.Line(i+done), err)
				}
				return i + done, err
			}
		}
		if j == n {
			break
		}
		// A line that is not canonical: Handle parses and explains it.
		if err := r.handle(ctx, *b.Delivery(j), b.Line(j)); err != nil {
			return j, err
		}
		i = j + 1
	}
	return n, nil
}

// apply applies run, the lines of the call's Batch from line base, with
// ApplyRuns; when one of its transactions fails, the lines from its first
// on with ApplyEach, whose error is then the line's. It returns how many
// lines went through, and the error of the line that failed.
func (r *runApplier) apply(ctx context.Context, run []batchLine, base int) (int, error) {
	done, err := r.st.ApplyRuns(ctx, len(run), r.at, r.fnRuns)
	if err == nil {
		return done, nil
	}
	// Nothing of the failed transaction is staged.
	rest := run[done:]
	for k := range rest {
		rest[k].applied, rest[k].staged = false, 0
	}
	r.run, r.base = rest, base+done
	defer func() { r.run, r.base = run, base }()
	n, err := r.st.ApplyEach(ctx, len(rest), r.at, r.fn)
	return done + n, err
}

// count counts the lines of run, from line base of b, that the store went
// through: in r.applied and r.skipped, and one by one to r.after.
func (r *runApplier) count(b *framework.Batch, base int, run []batchLine) {
	applied := 0
	for k := range run {
		if run[k].applied {
			applied++
		}
		if r.after != nil {
			r.after(b.Delivery(base+k), run[k].applied, int(run[k].staged))
		}
	}
	if applied > 0 {
		r.applied.Add(uint64(applied))
	}
	if skipped := len(run) - applied; skipped > 0 {
		r.skipped.Add(uint64(skipped))
	}
}

// applyRunLines is the function of the transaction of lines from to to-1
// of the run for ApplyRuns: each line's balance and output line, as
// Handle's function writes them, and what stage records with it; then the
// count of the lines and the sum of their amounts, added once to the
// counters Handle adds 1 and the amount to (an int64 sum wraps as the
// counter would, line by line).
func (r *runApplier) applyRunLines(tx *state.Tx, from, to int) error {
	out := tx.Output(outputFile)
	var sum int64
	for k := from; k < to; k++ {
		l := &r.run[k]
		l.applied = true
		line := r.batch.Line(r.base + k)
		bal, err := balances.AddEncoded(tx, line[l.a0:l.a1], l.amount)
		if err != nil {
			return err
		}
		sum += l.amount
		r.buf = appendOutputOf(r.buf[:0], line, bal)
		if _, err := out.Write(r.buf); err != nil {
			return err
		}
		if r.stage != nil {
			n, err := r.stage(tx, r.batch.Delivery(r.base+k))
			l.staged = int32(n)
			if err != nil {
				return err
			}
		}
	}
	if _, err := appliedCounter.Add(tx, int64(to-from)); err != nil {
		return err
	}
	_, err := totalCounter.Add(tx, sum)
	return err
}

// applyRunLine is the function of line k of the run for ApplyEach: the
// balance, counters and output line of the line, as Handle's function
// writes them, and what stage records with it.
func (r *runApplier) applyRunLine(tx *state.Tx, k int) error {
	l := &r.run[k]
	l.applied = true
	line := r.batch.Line(r.base + k)
	var err error
	if r.buf, err = applyLineOf(tx, Entry{ID: l.id, Amount: l.amount}, line[l.a0:l.a1], line, nil, false, r.buf); err != nil {
		return err
	}
	if r.stage == nil {
		return nil
	}
	n, err := r.stage(tx, r.batch.Delivery(r.base+k))
	l.staged = int32(n)
	return err
}

// HandleBatch applies the lines of b as Handle would one at a time, each
// run of canonical lines with one state.ApplyEach (see runApplier). Where
// the ledger's per-line work cannot be done for a run (a pace, a run
// without de-duplication, rejects of the source waiting for the next
// line), every line goes through Handle.
func (l *ledger) HandleBatch(ctx context.Context, b *framework.Batch) (int, error) {
	if l.pace > 0 || !l.dedupe || l.rej.npending.Load() > 0 {
		// The source's rejects are staged with the line after them, and
		// let go once that line's Apply ended (rejects.stage, done): in a
		// run, the next line's function would stage them a second time.
		// A reject the source adds while the run applies is of a line
		// after the run (the source reports a skipped line before the
		// lines after it), so none is staged by the run.
		return handleEach(ctx, b, l.Handle)
	}
	if l.runs.handle == nil {
		l.runs = runApplier{
			handle: l.Handle,
			tooLarge: func(ctx context.Context, d tidemark.Delivery, line []byte, err error) error {
				return l.reject(ctx, d, framework.ReasonTooLarge, err, line)
			},
			stage:   l.rej.stage,
			after:   func(d *tidemark.Delivery, applied bool, staged int) { l.rej.done(d, applied, staged) },
			applied: &l.applied,
			skipped: &l.skipped,
		}
	}
	l.runs.st = l.st // Start's, which a restart of the group sets again
	return l.runs.handleBatch(ctx, b)
}

// HandleBatch applies the lines of b as Handle would one at a time, each
// run of canonical lines with one state.ApplyEach (see runApplier); with a
// pace, every line goes through Handle.
func (l *partLedger) HandleBatch(ctx context.Context, b *framework.Batch) (int, error) {
	if l.pace > 0 {
		return handleEach(ctx, b, l.Handle)
	}
	if l.runs.handle == nil {
		l.runs = runApplier{
			handle: l.Handle,
			tooLarge: func(ctx context.Context, d tidemark.Delivery, line []byte, err error) error {
				// Nothing of it was staged: the line is rejected instead.
				return l.reject(ctx, d, err.Error(), line)
			},
			applied: &l.applied,
			skipped: &l.skipped,
		}
	}
	l.runs.st = l.st // Start's, which a restart of the group sets again
	return l.runs.handleBatch(ctx, b)
}

// handleEach hands the lines of b to handle one at a time, as the
// framework would: a processor's HandleBatch where its lines cannot be
// applied in runs.
func handleEach(ctx context.Context, b *framework.Batch, handle func(context.Context, tidemark.Delivery, []byte) error) (int, error) {
	for i := range b.Len() {
		if err := handle(ctx, *b.Delivery(i), b.Line(i)); err != nil {
			return i, err
		}
	}
	return b.Len(), nil
}
