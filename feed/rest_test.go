package feed

import (
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-go/tidemark/feed/pointer"
)

// timedStore is a recordStore whose Store takes d and records when each
// write started and ended.
type timedStore struct {
	d      time.Duration
	mu     sync.Mutex
	starts []time.Time
	ends   []time.Time
	stored []pointer.Record
	ended  chan struct{} // a value after each write
}

func (s *timedStore) Store(p pointer.Record) error {
	s.mu.Lock()
	s.starts = append(s.starts, time.Now())
	s.mu.Unlock()
	time.Sleep(s.d)
	s.mu.Lock()
	s.ends = append(s.ends, time.Now())
	s.stored = append(s.stored, p)
	s.mu.Unlock()
	s.ended <- struct{}{}
	return nil
}

func (s *timedStore) Load() (pointer.LoadResult, error) { return pointer.LoadResult{}, nil }
func (s *timedStore) SyncIfDue() error                  { return nil }
func (s *timedStore) Path() string                      { return "timed" }
func (s *timedStore) Close() error                      { return nil }

func newTimedWriter(d time.Duration, syncs bool) (*groupWriter, *timedStore) {
	st := &timedStore{d: d, ended: make(chan struct{}, 16)}
	return newGroupWriter(st, "input", syncs, func(pointer.Record) {}, func(pointer.Record, error) {}), st
}

// TestGroupCommitRestsAfterSync: under SyncEveryCommit the writer starts
// the next write no sooner than restFactor times the last write's time
// after it ended (timers never fire early, so the bound holds on any
// machine), and writes the newest record handed meanwhile.
func TestGroupCommitRestsAfterSync(t *testing.T) {
	w, st := newTimedWriter(4*time.Millisecond, true)
	defer w.close()
	w.hand(pointer.Record{Epoch: 1, Position: 10})
	<-st.ended
	w.hand(pointer.Record{Epoch: 1, Position: 20})
	w.hand(pointer.Record{Epoch: 1, Position: 30})
	<-st.ended
	st.mu.Lock()
	defer st.mu.Unlock()
	took := st.ends[0].Sub(st.starts[0])
	if gap, want := st.starts[1].Sub(st.ends[0]), min(3*took, maxRest); gap < want {
		t.Fatalf("the second write started %v after the first ended, which took %v: want a rest of at least %v", gap, took, want)
	}
	if len(st.stored) != 2 || st.stored[1].Position != 30 {
		t.Fatalf("wrote %+v, want position 10, then 30", st.stored)
	}
}

// TestGroupCommitFlushAndCloseEndRest: a flush, then a close, that come
// during a rest (made an hour long here) end it: the flush returns once
// the record handed during the rest is written, and the close returns.
func TestGroupCommitFlushAndCloseEndRest(t *testing.T) {
	old := maxRest
	maxRest, restFactor = time.Hour, 1_000_000
	defer func() { maxRest, restFactor = old, 3 }()
	w, st := newTimedWriter(time.Millisecond, true)
	w.hand(pointer.Record{Epoch: 1, Position: 10})
	<-st.ended
	waitResting(t, &w.mu, &w.rest)
	w.hand(pointer.Record{Epoch: 1, Position: 20})
	bounded(t, "flush during a rest", endRest(&w.mu, &w.rest), func() {
		if err := w.flush(); err != nil {
			t.Error(err)
		}
	})
	<-st.ended
	st.mu.Lock()
	n := len(st.stored)
	st.mu.Unlock()
	if n != 2 {
		t.Fatalf("%d writes after the flush, want 2", n)
	}
	// The write the flush waited for is followed by no rest; the next is.
	w.hand(pointer.Record{Epoch: 1, Position: 30})
	<-st.ended
	waitResting(t, &w.mu, &w.rest)
	w.hand(pointer.Record{Epoch: 1, Position: 40})
	bounded(t, "close during a rest", endRest(&w.mu, &w.rest), w.close)
}

// waitResting waits until the writer whose lock is mu rests (r).
func waitResting(t *testing.T, mu *sync.Mutex, r *syncRest) {
	t.Helper()
	bounded(t, "the writer's rest", nil, func() {
		for {
			mu.Lock()
			resting := r.resting
			mu.Unlock()
			if resting {
				return
			}
			time.Sleep(100 * time.Microsecond)
		}
	})
}

// endRest ends the rest of the writer whose lock is mu (r), as a flush
// should have: what a test that found one blocked calls to unblock it.
func endRest(mu *sync.Mutex, r *syncRest) func() {
	return func() {
		mu.Lock()
		r.wake()
		mu.Unlock()
	}
}

// TestSetGroupCommitFlushAndCloseEndRest is
// TestGroupCommitFlushAndCloseEndRest for the writer of a file set: it
// rests after the sync of its registry, and a flush or a close of a slot,
// then the writer's close, end the rest.
func TestSetGroupCommitFlushAndCloseEndRest(t *testing.T) {
	old := maxRest
	maxRest, restFactor = time.Hour, 1_000_000
	defer func() { maxRest, restFactor = old, 3 }()
	reg := pointer.OpenRegistry(filepath.Join(t.TempDir(), "files"+pointer.RegistrySuffix), pointer.Options{Sync: SyncEveryCommit})
	w := newSetWriter(reg, SyncEveryCommit)
	wrote := make(chan pointer.Record, 16)
	sl := w.slot(&regEntry{reg: reg, key: "a.log", now: time.Now}, "a.log", func(p pointer.Record) { wrote <- p }, func(pointer.Record, error) {})
	sl.hand(pointer.Record{Epoch: 1, Position: 10})
	<-wrote
	waitResting(t, &w.mu, &w.rest)
	sl.hand(pointer.Record{Epoch: 1, Position: 20})
	bounded(t, "flush during a rest", endRest(&w.mu, &w.rest), func() {
		if err := sl.flush(); err != nil {
			t.Error(err)
		}
	})
	if p := <-wrote; p.Position != 20 {
		t.Fatalf("wrote position %d, want 20", p.Position)
	}
	sl.hand(pointer.Record{Epoch: 1, Position: 30})
	<-wrote
	waitResting(t, &w.mu, &w.rest)
	bounded(t, "close during a rest", endRest(&w.mu, &w.rest), func() {
		sl.close()
		w.close()
	})
}
