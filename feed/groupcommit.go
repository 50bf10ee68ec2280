package feed

import (
	"fmt"
	"sync"
	"time"

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
	syncs  bool // each write syncs (SyncEveryCommit): the writer rests after it
	rest   syncRest

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

// newGroupWriter starts a writer of pf's records; syncs says that each
// write syncs (SyncEveryCommit).
func newGroupWriter(pf recordStore, input string, syncs bool, wrote func(pointer.Record), failed func(pointer.Record, error)) *groupWriter {
	w := &groupWriter{pf: pf, input: input, syncs: syncs, wrote: wrote, failed: failed, done: make(chan struct{})}
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
		start := time.Now()
		err := w.pf.Store(p)
		took := time.Since(start)
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
		if w.syncs && err == nil && !w.stop && w.flushing == 0 {
			w.rest.after(&w.mu, took)
		}
	}
}

// A group commit writer under SyncEveryCommit rests after each write and
// sync, restFactor times as long as they took (at most maxRest), before
// it writes the records handed meanwhile; a flush or a close ends the
// rest at once. A sync costs more than the time its caller waits: the
// kernel's journal and the disk's queue take CPU time of their own, and a
// writer that synced again as soon as one ended (the records of a busy
// feed are always there) synced all the time: a goroutine syncing without
// pause took 30 % of the work two busy goroutines did on this machine's
// two cores, and the fan-out of one feed to four groups (bench row 3)
// ran at 0.56 of one group. Resting three times as long, the writer syncs
// at most a quarter of the time: 20,000,000 lines to four no-op groups
// took 1.16 s instead of 1.42 s, to one group 0.72 s instead of 0.80 s.
// What it costs: the pointer lags the commits by one rest more (under a
// millisecond on a disk that syncs in a quarter of one), and a kill loses
// the commits of one write, sync and rest.
var (
	restFactor time.Duration = 3
	maxRest                  = 20 * time.Millisecond // tests make it longer
)

// syncRest is a writer's rest after a sync. Its fields are guarded by the
// writer's lock.
type syncRest struct {
	kick    chan struct{}
	timer   *time.Timer
	resting bool
}

// after rests restFactor times took (at most maxRest), or until wake; mu,
// the writer's lock, is held, and released during the rest.
func (r *syncRest) after(mu *sync.Mutex, took time.Duration) {
	d := min(restFactor*took, maxRest)
	if d <= 0 {
		return
	}
	if r.kick == nil {
		r.kick = make(chan struct{}, 1)
		r.timer = time.NewTimer(d)
	} else {
		select {
		case <-r.kick: // a wake that came as the last rest ended
		default:
		}
		r.timer.Reset(d)
	}
	r.resting = true
	mu.Unlock()
	select {
	case <-r.timer.C:
	case <-r.kick:
		r.timer.Stop()
	}
	mu.Lock()
	r.resting = false
}

// wake ends the rest under way, if any: a flush or a close waits for the
// writer. The writer's lock held.
func (r *syncRest) wake() {
	if r.resting {
		select {
		case r.kick <- struct{}{}:
		default:
		}
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
	w.rest.wake()
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
	w.rest.wake()
	w.cond.Broadcast()
	w.mu.Unlock()
	<-w.done
}
