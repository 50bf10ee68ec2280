package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/feed"
	"github.com/tidemark-go/tidemark/state"
)

// The reject log, rejects.csv, is an output of the store (state.Output),
// like output.csv: a rejected line's record is staged in the transaction
// of the line's own Apply, at its epoch and position, so the store writes
// it exactly once whatever moment a crash picks, and a re-delivered
// rejected line is skipped like any other. Nothing is kept per reject: the
// store's recorded position is what tells a re-delivery.
//
// A line the file source skips (longer than maxLineBytes) never reaches
// the processor: the source reports it (feed.Config.OnReject) while it
// reads ahead, and its record waits in pending until the first Apply of a
// line after it (or, at a clean stop, an Apply of its own at its
// position), which stages it. A crash before that commit loses nothing:
// the store is behind the skipped line, so the feed reads it again.

// rejectReasonMalformed is the reason of a malformed line in the
// framework's skip counts (framework.RejectReason).
const rejectReasonMalformed = "malformed"

// lineRejected is the error Handle returns for a line it recorded in the
// reject log: permanent (no retries), counted under reason.
type lineRejected struct {
	reason string
	err    error
}

func (e *lineRejected) Error() string        { return e.err.Error() }
func (e *lineRejected) Unwrap() error        { return e.err }
func (e *lineRejected) Permanent() bool      { return true }
func (e *lineRejected) RejectReason() string { return e.reason }

// pendingReject is a line the source skipped, not yet staged.
type pendingReject struct {
	epoch  uint64
	pos    int64 // the line's end
	reason string
}

// rejects is the ledger's side of the reject log.
type rejects struct {
	// mu guards pending: the source adds to it on its goroutine, the
	// group takes from it on its own.
	mu      sync.Mutex
	pending []pendingReject
	// npending is len(pending), set under mu: a line finds out without
	// the lock that there is nothing to stage or drop.
	npending atomic.Int32
	// lastEpoch is the epoch of the last line handled (group goroutine).
	lastEpoch uint64
	// rec and cw encode one record (group goroutine).
	rec bytes.Buffer
	cw  *csv.Writer
	// written counts the records of Applies that applied.
	written atomic.Uint64
}

// skippedBySource is the file source's OnReject: a line longer than the
// maximum waits for a later Apply to record it.
func (r *rejects) skippedBySource(rj feed.Reject) {
	if rj.Reason != feed.RejectOversize {
		return // the partial last line of a replaced file is the source's to report
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending = append(r.pending, pendingReject{epoch: rj.Epoch, pos: rj.End, reason: fmt.Sprintf("%s (%d bytes)", rj.Reason, rj.Length)})
	r.npending.Store(int32(len(r.pending)))
}

// before reports whether the pending reject p comes before the line d, or
// is d: in d's epoch, at its position or lower; in the epoch of the lines
// handled before d, when d begins another (the feed reads its epochs in
// order). A reject of an epoch no line was handled in waits for the drain.
func (r *rejects) before(p pendingReject, d tidemark.Delivery) bool {
	if p.epoch == d.Epoch {
		return p.pos <= d.Position
	}
	return p.epoch == r.lastEpoch
}

// stage writes into tx the records of the pending rejects before d and
// returns how many. They stay pending until taken (done).
func (r *rejects) stage(tx *state.Tx, d *tidemark.Delivery) (int, error) {
	if r.npending.Load() == 0 {
		// A reject the source adds meanwhile is of a line after d: the
		// source reports a skipped line before it delivers the next.
		return 0, nil
	}
	r.mu.Lock()
	var ps []pendingReject
	for _, p := range r.pending {
		if r.before(p, *d) {
			ps = append(ps, p)
		}
	}
	r.mu.Unlock()
	for _, p := range ps {
		if err := r.write(tx, p.epoch, p.pos, p.reason, nil); err != nil {
			return 0, err
		}
	}
	return len(ps), nil
}

// done ends the Apply of d that staged n records: it drops the pending
// rejects before d (recorded now, or, when the store skipped d as a
// re-delivery, recorded with the line after them the first time).
func (r *rejects) done(d *tidemark.Delivery, applied bool, n int) {
	if applied && n > 0 {
		r.written.Add(uint64(n))
	}
	if r.npending.Load() == 0 {
		r.lastEpoch = d.Epoch
		return
	}
	r.mu.Lock()
	kept := r.pending[:0]
	for _, p := range r.pending {
		if !r.before(p, *d) {
			kept = append(kept, p)
		}
	}
	clear(r.pending[len(kept):])
	r.pending = kept
	r.npending.Store(int32(len(kept)))
	r.mu.Unlock()
	r.lastEpoch = d.Epoch
}

// write stages the record `epoch,position,reason,line` in tx.
func (r *rejects) write(tx *state.Tx, epoch uint64, pos int64, reason string, line []byte) error {
	if r.cw == nil {
		r.cw = csv.NewWriter(&r.rec)
	}
	r.rec.Reset()
	if err := r.cw.Write([]string{strconv.FormatUint(epoch, 10), strconv.FormatInt(pos, 10), reason, string(line)}); err != nil {
		return err
	}
	r.cw.Flush()
	if err := r.cw.Error(); err != nil {
		return err
	}
	_, err := tx.Output(rejectsFile).Write(r.rec.Bytes())
	return err
}

// rejectText is the reason of err in the log: its message without the
// program's name.
func rejectText(err error) string { return strings.TrimPrefix(err.Error(), "ledger: ") }

// applyDelivery is the delivery Apply is given for d: d itself, or, with
// de-duplication off, one without positions (the store applies it again).
func (l *ledger) applyDelivery(d tidemark.Delivery) tidemark.Delivery {
	if !l.dedupe {
		d.Epoch, d.Position, d.Origin = 0, 0, nil
	}
	return d
}

// reject records the line d, rejected for err, in the reject log, in an
// Apply of its own at d (with the skipped lines before it), and returns
// the error for the framework: permanent, counted under reason.
func (l *ledger) reject(ctx context.Context, d tidemark.Delivery, reason string, err error, line []byte) error {
	n := 0
	applied, aerr := l.st.Apply(ctx, l.applyDelivery(d), func(tx *state.Tx) error {
		var err2 error
		if n, err2 = l.rej.stage(tx, &d); err2 != nil {
			return err2
		}
		n++
		return l.rej.write(tx, d.Epoch, d.Position, rejectText(err), line)
	})
	if aerr != nil {
		return fmt.Errorf("record the rejected line at position %d (%v): %w", d.Position, err, aerr)
	}
	l.rej.done(&d, applied, n)
	return &lineRejected{reason: reason, err: err}
}

// Drained records the lines the source skipped after the last line
// handled, each in an Apply at its own position: the group has finished
// every line, and the clean stop's last commit covers them.
func (l *ledger) Drained(ctx context.Context) error {
	l.rej.mu.Lock()
	ps := append([]pendingReject(nil), l.rej.pending...)
	l.rej.mu.Unlock()
	var errs []error
	for _, p := range ps {
		d := tidemark.Delivery{Feed: feedName, Epoch: p.epoch, Position: p.pos}
		applied, err := l.st.Apply(ctx, l.applyDelivery(d), func(tx *state.Tx) error {
			return l.rej.write(tx, p.epoch, p.pos, p.reason, nil)
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("record the skipped line ending at position %d: %w", p.pos, err))
			continue
		}
		l.rej.done(&d, applied, 1)
	}
	return errors.Join(errs...)
}
