package feed

import (
	"fmt"
	"sync"
	"time"

	"github.com/tidemark-go/tidemark/feed/pointer"
)

// pointerWriter is a stream's GroupCommit writer: a [groupWriter] of its
// own (a feed of one file), or its slot in the writer its file set shares
// ([setWriter]).
type pointerWriter interface {
	// hand makes p the next record to write, and returns the error of
	// the last write when it failed.
	hand(p pointer.Record) error
	// retry asks for a failed pending record to be written again, and
	// returns the error of the last write when it failed.
	retry() error
	// flush waits until the records handed are written; a record still
	// pending (its write failed) is tried once more, and its error
	// returned.
	flush() error
	// close ends the writing of the stream's records.
	close()
	// waiting reports whether a flush waits for the writer (tests).
	waiting() bool
}

var (
	_ pointerWriter = (*groupWriter)(nil)
	_ pointerWriter = (*setSlot)(nil)
)

// setWriter is the GroupCommit writer of a file set: one goroutine writes
// the records the set's streams hand it (each stream's newest) into the
// registry, then makes them durable with one sync. Commits that move
// several files cost one fdatasync, and a set of a thousand files has one
// writer goroutine, not a thousand woken at each sync of their registry.
// Each stream sees its slot as it would see a groupWriter of its own.
type setWriter struct {
	reg       *pointer.Registry
	syncEvery bool // the registry's policy is SyncEveryCommit: Sync after each batch

	mu      sync.Mutex
	cond    sync.Cond
	rest    syncRest   // after each sync (see restFactor)
	queue   []*setSlot // the slots with a record to write, in the order handed
	spare   []*setSlot
	started bool
	stop    bool
	done    chan struct{}
}

// setSlot is a stream's slot in its set's writer. The fields after e are
// guarded by w.mu.
type setSlot struct {
	w      *setWriter
	e      *regEntry
	input  string // the input's path, for errors
	wrote  func(pointer.Record)
	failed func(pointer.Record, error)

	next     pointer.Record // the newest record handed and not written yet
	has      bool           // next is set
	gen      uint64         // counts the records handed
	queued   bool           // in w.queue
	writing  bool           // in the batch being written
	err      error          // the last write's error; nil once one succeeds
	closed   bool
	flushing int // flushes waiting
}

func newSetWriter(reg *pointer.Registry, policy SyncPolicy) *setWriter {
	w := &setWriter{reg: reg, syncEvery: policy == SyncEveryCommit, done: make(chan struct{})}
	w.cond.L = &w.mu
	return w
}

// slot returns a new slot for the stream whose registry entry is e; the
// writer's goroutine starts with the first slot.
func (w *setWriter) slot(e *regEntry, input string, wrote func(pointer.Record), failed func(pointer.Record, error)) *setSlot {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.started {
		w.started = true
		go w.run()
	}
	return &setSlot{w: w, e: e, input: input, wrote: wrote, failed: failed}
}

// job is one slot's record in a batch.
type job struct {
	sl  *setSlot
	p   pointer.Record
	gen uint64
	err error
}

func (w *setWriter) run() {
	defer close(w.done)
	var jobs []job
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		for len(w.queue) == 0 && !w.stop {
			w.cond.Wait()
		}
		if len(w.queue) == 0 {
			return
		}
		batch := w.queue
		w.queue, w.spare = w.spare[:0], batch
		jobs = jobs[:0]
		for _, sl := range batch {
			sl.queued, sl.writing = false, true
			jobs = append(jobs, job{sl: sl, p: sl.next, gen: sl.gen})
		}
		clear(batch)
		w.mu.Unlock()
		written := false
		start := time.Now()
		for i := range jobs {
			jobs[i].err = jobs[i].sl.e.storeLater(jobs[i].p)
			written = written || jobs[i].err == nil
		}
		synced := written && w.syncEvery
		if synced {
			// One sync for every record of the batch.
			if err := w.reg.Sync(); err != nil {
				synced = false
				for i := range jobs {
					if jobs[i].err == nil {
						jobs[i].err = err
					}
				}
			}
		}
		w.mu.Lock()
		for i := range jobs {
			j := &jobs[i]
			j.sl.err = nil
			if j.err != nil {
				j.sl.err = fmt.Errorf("feed: commit position %d of epoch %d of input %s (written by the group commit writer): %w",
					j.p.Position, j.p.Epoch, j.sl.input, j.err)
			}
		}
		w.mu.Unlock()
		// Reported after the error is set (a Commit that follows a success
		// in Status returns nil) and while still writing (a flush returns
		// after the report).
		for i := range jobs {
			if j := &jobs[i]; j.err != nil {
				j.sl.failed(j.p, j.err)
			} else {
				j.sl.wrote(j.p)
			}
		}
		w.mu.Lock()
		flushing := false
		for i := range jobs {
			j := &jobs[i]
			j.sl.writing = false
			if j.err == nil && j.sl.gen == j.gen {
				j.sl.has = false
			}
			flushing = flushing || j.sl.flushing > 0
			jobs[i] = job{}
		}
		w.cond.Broadcast()
		if synced && !w.stop && !flushing && !w.flushWaits() {
			w.rest.after(&w.mu, time.Since(start))
		}
	}
}

// flushWaits reports whether a flush of a queued slot waits. w.mu held.
func (w *setWriter) flushWaits() bool {
	for _, sl := range w.queue {
		if sl.flushing > 0 {
			return true
		}
	}
	return false
}

// close stops the writer (once every stream's slot is closed) and waits
// for its goroutine to end.
func (w *setWriter) close() {
	w.mu.Lock()
	w.stop = true
	w.rest.wake()
	started := w.started
	w.cond.Broadcast()
	w.mu.Unlock()
	if started {
		<-w.done
	}
}

// enqueue asks the writer for a write of sl's record. w.mu held.
func (sl *setSlot) enqueue() {
	if sl.queued || sl.closed || sl.w.stop {
		return
	}
	sl.queued = true
	sl.w.queue = append(sl.w.queue, sl)
	sl.w.cond.Broadcast()
}

func (sl *setSlot) hand(p pointer.Record) error {
	sl.w.mu.Lock()
	defer sl.w.mu.Unlock()
	sl.next, sl.has = p, true
	sl.gen++
	sl.enqueue()
	return sl.err
}

func (sl *setSlot) retry() error {
	sl.w.mu.Lock()
	defer sl.w.mu.Unlock()
	if sl.err != nil && sl.has && !sl.writing {
		sl.enqueue()
	}
	return sl.err
}

// idle waits until the slot's record is neither asked for nor being
// written. w.mu held.
func (sl *setSlot) idle() {
	sl.flushing++
	sl.w.rest.wake()
	for sl.queued || sl.writing {
		sl.w.cond.Wait()
	}
	sl.flushing--
}

func (sl *setSlot) flush() error {
	sl.w.mu.Lock()
	defer sl.w.mu.Unlock()
	sl.idle()
	if !sl.has {
		return nil
	}
	if !sl.w.stop && !sl.closed {
		sl.enqueue()
		sl.idle()
	}
	if sl.has {
		return sl.err
	}
	return nil
}

// close takes the slot out of the writer: a record still pending (its
// write failed) is dropped, as a groupWriter's close drops it.
func (sl *setSlot) close() {
	sl.w.mu.Lock()
	defer sl.w.mu.Unlock()
	sl.closed = true
	if sl.queued {
		sl.queued = false
		q := sl.w.queue
		for i, x := range q {
			if x == sl {
				sl.w.queue = append(q[:i], q[i+1:]...)
				break
			}
		}
	}
	for sl.writing {
		sl.w.cond.Wait()
	}
}

func (sl *setSlot) waiting() bool {
	sl.w.mu.Lock()
	defer sl.w.mu.Unlock()
	return sl.flushing > 0
}
