package state

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// fakeCompactions is a database for a pebbleScheduler: it allows one
// compaction at a time, always has one waiting, and counts the grants.
type fakeCompactions struct {
	mu        sync.Mutex
	scheduled int
}

func (f *fakeCompactions) GetAllowedWithoutPermission() int { return 1 }
func (f *fakeCompactions) GetWaitingCompaction() (bool, pebble.WaitingCompaction) {
	return true, pebble.WaitingCompaction{}
}
func (f *fakeCompactions) Schedule(pebble.CompactionGrantHandle) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.scheduled++
	return true
}
func (f *fakeCompactions) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.scheduled
}

// TestPebbleSchedulerHoldsCompactionsBack: no compaction is granted before
// the delay after the open, nor once the store closes; after the delay the
// granter starts the waiting one by itself, and one ends before the next
// starts.
func TestPebbleSchedulerHoldsCompactionsBack(t *testing.T) {
	t.Parallel()
	t.Run("delay", func(t *testing.T) {
		t.Parallel()
		s := newPebbleScheduler(time.Hour)
		db := &fakeCompactions{}
		s.Register(2, db)
		defer s.Unregister()
		if ok, _ := s.TrySchedule(); ok {
			t.Fatal("a compaction granted within the delay after the open")
		}
		s.UpdateGetAllowedWithoutPermission()
		s.mu.Lock()
		s.grantLockedAndUnlock()
		if n := db.count(); n != 0 {
			t.Fatalf("%d compactions granted within the delay", n)
		}
		s.notBefore.Store(time.Now().UnixNano()) // the delay is over
		deadline := time.Now().Add(time.Minute)
		for db.count() == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the waiting compaction was not granted in a minute after the delay")
			}
			time.Sleep(time.Millisecond)
		}
		if ok, _ := s.TrySchedule(); ok {
			t.Fatal("a second compaction granted while one runs (the database allows one)")
		}
		s.Done()
		if n := db.count(); n != 2 {
			t.Fatalf("after the first compaction ended, %d granted in all, want 2", n)
		}
	})
	t.Run("closing", func(t *testing.T) {
		t.Parallel()
		s := newPebbleScheduler(0)
		db := &fakeCompactions{}
		s.Register(2, db)
		s.closing.Store(true)
		if ok, _ := s.TrySchedule(); ok {
			t.Fatal("a compaction granted while the store closes")
		}
		s.mu.Lock()
		s.grantLockedAndUnlock()
		s.Unregister()
		if n := db.count(); n != 0 {
			t.Fatalf("%d compactions granted while the store closes", n)
		}
	})
}

// pebbleL0 returns the sublevels and tables of level 0 of the store's
// database.
func pebbleL0(s Store) (sublevels int, tables int64) {
	m := s.(*nsStore).c.rawEngine().(*pebbleEngine).db.Metrics()
	return int(m.Levels[0].Sublevels), m.Levels[0].TablesCount
}

// flushLine applies one more line (line numbers them) to s and flushes
// Pebble's memtable: a table more in level 0.
func flushLine(t *testing.T, s Store, line *int) {
	t.Helper()
	*line++
	applyLine(t, s, del("f", 1, *line))
	if err := flushL0(t.Context(), s); err != nil {
		t.Fatal(err)
	}
}

// flushL0 commits what s staged and flushes Pebble's memtable.
func flushL0(ctx context.Context, s Store) error {
	if err := s.Flush(ctx); err != nil {
		return err
	}
	return s.(*nsStore).c.rawEngine().(*pebbleEngine).flush()
}

// waitL0Compacted waits until level 0 of s has fewer sublevels than a
// compaction is due at (4), and fails, saying why it waited, after a
// minute.
func waitL0Compacted(t *testing.T, s Store, why string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		sub, tables := pebbleL0(s)
		if sub < 4 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("level 0 still has %d sublevels (%d tables) a minute %s: no compaction ran", sub, tables, why)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// heldOpts returns the options of a Pebble store that starts no
// compaction in the hour after its open, however small its database.
func heldOpts() *Options {
	o := testOpts()
	o.hooks = &hooks{pebbleCompactionDelay: time.Hour, pebbleEagerBytes: -1}
	return o
}

// openHeldPebble makes a Pebble store in a new folder and opens it again
// with heldOpts; it returns the folder, the backend and the store.
func openHeldPebble(t *testing.T) (string, backend, Store) {
	t.Helper()
	dir := t.TempDir()
	be := backend{name: Pebble, open: OpenPebble}
	mustOpenClose(t, be, dir)
	return dir, be, mustOpen(t, be, dir, heldOpts())
}

// fillL0 makes n tables of level 0 of the held store s (n flushes of a
// line each), and returns its sublevels and tables; it fails if a
// compaction ran meanwhile.
func fillL0(t *testing.T, s Store, n int, line *int) (sublevels int, tables int64) {
	t.Helper()
	for range n {
		flushLine(t, s, line)
	}
	sublevels, tables = pebbleL0(s)
	if sublevels < n {
		t.Fatalf("level 0 has %d sublevels (%d tables) after %d flushes, want %d: compacted within the delay", sublevels, tables, n, n)
	}
	return sublevels, tables
}

// TestPebbleShortRunLeavesItsCompactionToALongerOne: a run shorter than
// the delay after its open starts no compaction, at its close neither (its
// close flush adds a table to level 0, compacted by nobody), so its close
// waits for none; a longer run compacts level 0 as Pebble does.
func TestPebbleShortRunLeavesItsCompactionToALongerOne(t *testing.T) {
	t.Parallel()
	dir, be, s := openHeldPebble(t)
	line := 0
	// Six flushes, each a table of level 0: a compaction is due (4).
	sub, tables := fillL0(t, s, 6, &line)
	line++
	applyLine(t, s, del("f", 1, line)) // for the close's flush
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, be, dir, heldOpts())
	if got, gotTables := pebbleL0(s); got != sub+1 || gotTables != tables+1 {
		t.Fatalf("after the close, level 0 has %d sublevels and %d tables, want %d and %d: the close's flush only", got, gotTables, sub+1, tables+1)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	o := testOpts()
	o.hooks = &hooks{pebbleCompactionDelay: time.Millisecond, pebbleEagerBytes: -1}
	s = mustOpen(t, be, dir, o)
	defer s.Close()
	waitL0Compacted(t, s, "after the delay")
	if v := getInt(t, s, "count"); v != int64(line) {
		t.Fatalf("count %d after the compaction, want %d", v, line)
	}
}

// TestPebbleWriteStallLiftsTheDelay: a write that finds level 0 at the
// stall threshold within the delay after the open does not wait for the
// delay to end: the stall lets compactions start at once. (A run of 20,000
// lines on a store whose short runs had filled level 0 stalled for the
// rest of the second, 1.1 s instead of 0.2.)
func TestPebbleWriteStallLiftsTheDelay(t *testing.T) {
	t.Parallel()
	_, _, s := openHeldPebble(t)
	defer s.Close()
	e := s.(*nsStore).c.rawEngine().(*pebbleEngine)
	line := 0
	for {
		sub, tables := pebbleL0(s)
		if sub >= pebbleL0Stop {
			break
		}
		if line > 3*pebbleL0Stop {
			t.Fatalf("level 0 has %d sublevels (%d tables) after %d flushes: compacted within the delay", sub, tables, line)
		}
		flushLine(t, s, &line)
	}
	// Level 0 at the threshold: the next flush's write stalls until a
	// compaction makes room.
	line++
	applyLine(t, s, del("f", 1, line))
	done := make(chan error, 1)
	go func() { done <- flushL0(context.Background(), s) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		// End the delay, so that the flush and the close can end.
		e.sched.notBefore.Store(0)
		e.sched.UpdateGetAllowedWithoutPermission()
		<-done
		t.Fatal("a flush that found level 0 at the stall threshold still waited a minute later: the delay held its compaction back")
	}
	if sub, tables := pebbleL0(s); sub >= pebbleL0Stop {
		t.Fatalf("level 0 has %d sublevels (%d tables) after the stall: no compaction ran", sub, tables)
	}
	if v := getInt(t, s, "count"); v != int64(line) {
		t.Fatalf("count %d after the compaction, want %d", v, line)
	}
}

// TestPebbleSmallDatabaseCompactsFromItsOpen: a database whose tables take
// at most pebbleEagerBytes compacts level 0 from its open, delay or not (a
// compaction of it costs less than what the tables of level 0 cost each
// read); a larger one waits for the delay (see the test above).
func TestPebbleSmallDatabaseCompactsFromItsOpen(t *testing.T) {
	t.Parallel()
	dir, be, s := openHeldPebble(t)
	line := 0
	fillL0(t, s, 6, &line)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	o := testOpts()
	o.hooks = &hooks{pebbleCompactionDelay: time.Hour} // the default bar: a database of a few KiB is under it
	s = mustOpen(t, be, dir, o)
	defer s.Close()
	waitL0Compacted(t, s, "after the open of a small database, within the delay")
	if v := getInt(t, s, "count"); v != int64(line) {
		t.Fatalf("count %d after the compaction, want %d", v, line)
	}
}
