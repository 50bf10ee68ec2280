package state

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// A restart should not wait for a compaction it did not need.
//
// Pebble's Close waits for every compaction running, and no compaction can
// be cut short. A run that leaves level 0 with a few tables (the flushes of
// its memtables) leaves a compaction of them for the next open: Pebble
// starts it at once, and a restart that applies one line and closes waits
// for it (1 to 4 s of the 5.2 s a restart took on a store of 10,000,000
// accounts after a run of 100,000 lines, load 7 to 17; a goroutine dump
// found it in DB.Close while compactAndWrite ran). The flush at close does
// the same to the next one.
//
// So the store schedules Pebble's compactions itself (pebbleScheduler, in
// Options.Experimental.CompactionScheduler): as Pebble's own scheduler does
// (as many at once as the database asks for, one by default, granted when
// Pebble asks and every 100 ms), except that none starts in the first
// leftCheckDelay after the open, nor once the store closes. A run longer
// than that compacts as before; a shorter one leaves the tables to the next
// longer run, unless the database is small (pebbleEagerBytes): it
// compacts from its open. Level 0 cannot grow without bound: a write that
// finds it at L0StopWritesThreshold sublevels waits for a compaction
// (Pebble's write stall), and a stall ends the delay: compactions start at
// once (stalled); a close that finds level 0 one flush short of that
// threshold lets compactions run (its flush would stall otherwise) and
// waits for them.
// Before the stall ended the delay, a run of 20,000 lines on a store of
// 100,000 accounts whose short runs had filled level 0 stalled for the rest
// of its first second: 1.1 s instead of 0.2.

// pebbleEagerBytes is the most bytes of tables a Pebble database holds
// that compacts from its open, without the delay: a compaction of a
// database this small costs less than what the tables short runs leave in
// level 0 cost the reads of the next runs (each read looks in each of
// them, the preload merges them all). Measured (2026-12-06), sequences of
// fourteen runs of 20,000 lines of ledger run, one after the other, on a
// store of 100,000 accounts (3 MB of tables): with the delay, each run
// slower than the one before as level 0 grew (124 to 142 ms for the first,
// 198 to 264 ms at 12 to 14 tables); compacting from the open, 2 to 4
// tables. Four sequences of each, alternated: medians 152 to 190 ms
// against 172 to 183, the slowest runs 215 to 231 ms against 246 to 304.
// On a store of 1,000,000 (19 MB), where every other run then waited for
// a compaction at its close (580 to 648 ms against 255 to 307), the delay
// was cheaper: 296 to 458 ms, and 635 and 696 ms at the stall.
const pebbleEagerBytes = 8 << 20

// pebbleEagerBytes returns pebbleEagerBytes, or the test's hook; negative:
// no database compacts from its open.
func (o *Options) pebbleEagerBytes() int64 {
	if o.hooks != nil && o.hooks.pebbleEagerBytes != 0 {
		return o.hooks.pebbleEagerBytes
	}
	return pebbleEagerBytes
}

// pebbleL0Stop is the database's L0StopWritesThreshold (Pebble's default):
// the sublevels of level 0 at which writes, a flush's included, wait for a
// compaction.
const pebbleL0Stop = 12

// pebbleScheduler is the compaction scheduler of a store's Pebble database
// (see above). It is the grant handle of the compactions it grants too.
type pebbleScheduler struct {
	notBefore atomic.Int64 // unix nanoseconds
	closing   atomic.Bool

	mu           sync.Mutex
	cond         *sync.Cond // of granting
	db           pebble.DBForCompaction
	running      int
	granting     bool
	unregistered bool

	poke chan struct{}
	stop chan struct{} // closed by Unregister
	done chan struct{} // closed when the granter ended
}

func newPebbleScheduler(delay time.Duration) *pebbleScheduler {
	s := &pebbleScheduler{poke: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	s.notBefore.Store(time.Now().Add(delay).UnixNano())
	s.cond = sync.NewCond(&s.mu)
	return s
}

// release ends the granter of a scheduler that registered with a database
// whose Open then failed (Pebble does not unregister it then).
func (s *pebbleScheduler) release() {
	s.mu.Lock()
	registered := s.db != nil && !s.unregistered
	s.mu.Unlock()
	if registered {
		s.Unregister()
	}
}

// allowed reports whether a compaction may start now.
func (s *pebbleScheduler) allowed() bool {
	return !s.closing.Load() && time.Now().UnixNano() >= s.notBefore.Load()
}

// stalled is the database's WriteStallBegin: a write waits for a
// compaction, so the delay ends, and the granter grants the waiting
// compactions at once. Pebble may call it with its mutex held: it only
// stores and pokes.
func (s *pebbleScheduler) stalled(pebble.WriteStallBeginInfo) {
	s.notBefore.Store(0)
	s.UpdateGetAllowedWithoutPermission()
}

// Register is called by the database's Open.
func (s *pebbleScheduler) Register(_ int, db pebble.DBForCompaction) {
	s.mu.Lock()
	s.db = db
	s.mu.Unlock()
	go s.granter()
}

// Unregister is called by the database's Close: no grant after it returns.
func (s *pebbleScheduler) Unregister() {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unregistered = true
	for s.granting {
		s.cond.Wait()
	}
}

// TrySchedule is called by the database (its mutex held) when it wants to
// run a compaction.
func (s *pebbleScheduler) TrySchedule() (bool, pebble.CompactionGrantHandle) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unregistered || !s.allowed() {
		return false, nil
	}
	if s.db.GetAllowedWithoutPermission() > s.running {
		s.running++
		return true, s
	}
	return false, nil
}

// UpdateGetAllowedWithoutPermission is called after a flush: the granter
// looks at once.
func (s *pebbleScheduler) UpdateGetAllowedWithoutPermission() {
	select {
	case s.poke <- struct{}{}:
	default:
	}
}

// Started, MeasureCPU and CumulativeStats: the grant handle keeps no
// accounts.
func (s *pebbleScheduler) Started()                                          {}
func (s *pebbleScheduler) MeasureCPU(pebble.CompactionGoroutineKind)         {}
func (s *pebbleScheduler) CumulativeStats(pebble.CompactionGrantHandleStats) {}

// Done is called when a compaction this scheduler granted ended.
func (s *pebbleScheduler) Done() {
	s.mu.Lock()
	s.running--
	s.grantLockedAndUnlock()
}

// granter grants waiting compactions every 100 ms and when poked (the
// database calls TrySchedule only when something changed: a compaction
// held back by the delay would wait for the next change otherwise).
func (s *pebbleScheduler) granter() {
	defer close(s.done)
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-s.poke:
		case <-s.stop:
			return
		}
		s.mu.Lock()
		s.grantLockedAndUnlock()
	}
}

// grantLockedAndUnlock starts as many waiting compactions as the database
// allows, one grant at a time. s.mu held; it is released.
func (s *pebbleScheduler) grantLockedAndUnlock() {
	defer s.mu.Unlock()
	for s.granting {
		s.cond.Wait()
	}
	if s.unregistered || !s.allowed() {
		return
	}
	n := s.db.GetAllowedWithoutPermission() - s.running
	if n <= 0 {
		return
	}
	s.granting = true
	s.mu.Unlock()
	for ; n > 0 && s.allowed(); n-- {
		// GetWaitingCompaction and Schedule take the database's mutex:
		// s.mu is not held.
		if waiting, _ := s.db.GetWaitingCompaction(); !waiting || !s.db.Schedule(s) {
			break
		}
		s.mu.Lock()
		s.running++
		s.mu.Unlock()
	}
	s.mu.Lock()
	s.granting = false
	s.cond.Broadcast()
}
