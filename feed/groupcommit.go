package feed

import (
	"fmt"
	"sync"

	"github.com/tidemark-go/tidemark/feed/pointer"
)

// groupCommitAll makes every Committed source use GroupCommit; tests set
// it to run suites written for Commit's synchronous writes with it on.
var groupCommitAll = false

// groupWriter is the GroupCommit writer: a goroutine that writes the
// records the source hands it, one write (and sync, per the policy) at a
// time. A record handed during a write replaces the one handed before it:
// only the newest is written next. A failed write stays pending and is
// retried when asked (the next record handed, retry, flush), never on its
// own.
type groupWriter struct {
	pf     recordStore
	input  string // the input's path, for errors
	wrote  func(pointer.Record)
	failed func(pointer.Record, error)

	mu   sync.Mutex
	cond sync.Cond
	next pointer.Record // the newest record handed and not written yet
	has  bool           // next is set
	gen  uint64         // counts the records handed
	wake bool           // a write of next is asked for
	busy bool           // a write is in progress
	err  error          // the last write's error; nil once one succeeds
	stop bool
	// flushing counts the flushes waiting (tests look at it).
	flushing int
	done     chan struct{}
}

// newGroupWriter starts a writer of pf's records.
func newGroupWriter(pf recordStore, input string, wrote func(pointer.Record), failed func(pointer.Record, error)) *groupWriter {
	w := &groupWriter{pf: pf, input: input, wrote: wrote, failed: failed, done: make(chan struct{})}
	w.cond.L = &w.mu
	go w.run()
	return w
}

func (w *groupWriter) run() {
	defer close(w.done)
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		for !w.wake && !w.stop {
			w.cond.Wait()
		}
		if !w.wake {
			return
		}
		w.wake = false
		if !w.has {
			w.cond.Broadcast()
			continue
		}
		p, gen := w.next, w.gen
		w.busy = true
		w.mu.Unlock()
		err := w.pf.Store(p)
		w.mu.Lock()
		w.err = nil
		if err != nil {
			w.err = fmt.Errorf("feed: commit position %d of epoch %d of input %s (written by the group commit writer): %w",
				p.Position, p.Epoch, w.input, err)
		}
		w.mu.Unlock()
		// Reported after the error is set (a Commit that follows a
		// success in Status returns nil) and while still busy (a flush
		// returns after the report).
		if err != nil {
			w.failed(p, err)
		} else {
			w.wrote(p)
		}
		w.mu.Lock()
		w.busy = false
		if err == nil && w.gen == gen {
			w.has = false
		}
		w.cond.Broadcast()
	}
}

// hand makes p the next record to write, and returns the error of the last
// write when it failed.
func (w *groupWriter) hand(p pointer.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.next, w.has, w.wake = p, true, true
	w.gen++
	w.cond.Broadcast()
	return w.err
}

// retry asks for a failed pending record to be written again, and returns
// the error of the last write when it failed.
func (w *groupWriter) retry() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil && w.has && !w.busy && !w.stop {
		w.wake = true
		w.cond.Broadcast()
	}
	return w.err
}

// idle waits until the writer has no write in progress or asked for.
func (w *groupWriter) idle() {
	w.flushing++
	for w.busy || w.wake {
		w.cond.Wait()
	}
	w.flushing--
}

// waiting reports whether a flush waits for the writer.
func (w *groupWriter) waiting() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.flushing > 0
}

// flush waits until the records handed are written. A record still pending
// after that (its write failed) is tried once more; flush returns that
// write's error.
func (w *groupWriter) flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.idle()
	if !w.has {
		return nil
	}
	if !w.stop {
		w.wake = true
		w.cond.Broadcast()
		w.idle()
	}
	if w.has {
		return w.err
	}
	return nil
}

// close stops the writer and waits for its goroutine to end.
func (w *groupWriter) close() {
	w.mu.Lock()
	w.stop = true
	w.cond.Broadcast()
	w.mu.Unlock()
	<-w.done
}
