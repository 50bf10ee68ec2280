package feed

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark-go/tidemark/feed/pointer"
	"github.com/tidemark-go/tidemark/vfs"
	"go.uber.org/goleak"
)

// pointerLog watches the pointer file of an input through an injected file
// system: it records every record at the moment it is synced (of the
// pointer file, or of the temporary file that creates it), counts the
// in-place writes, can hold an in-place write until released, and can fail
// the writes or syncs of the pointer file.
type pointerLog struct {
	ptr     string
	hold    atomic.Bool   // hold the next in-place writes
	held    chan struct{} // receives when a write is held
	release chan struct{} // closed to let held writes go on
	fail    atomic.Pointer[vfs.Op]
	writes  atomic.Int64 // in-place writes of the pointer file

	mu   sync.Mutex
	recs []pointer.Record
}

func newPointerLog(input string) *pointerLog {
	return &pointerLog{ptr: input + pointer.Suffix, held: make(chan struct{}), release: make(chan struct{})}
}

// fs returns the operating system's file system watched by l.
func (l *pointerLog) fs() vfs.FS {
	return vfs.Inject(vfs.Default(), func(op vfs.Op, name string) error {
		if name != l.ptr && name != l.ptr+pointer.TempSuffix {
			return nil
		}
		if f := l.fail.Load(); f != nil && *f == op && name == l.ptr {
			return vfs.ErrInjected
		}
		switch op {
		case vfs.OpWrite:
			if name != l.ptr {
				break
			}
			l.writes.Add(1)
			if l.hold.Load() {
				// Bounded, so that a failing test does not hang.
				select {
				case l.held <- struct{}{}:
				case <-time.After(deadline):
				}
				select {
				case <-l.release:
				case <-time.After(deadline):
				}
			}
		case vfs.OpSync:
			// Called after the write, before the sync: the file holds the
			// record being made durable.
			if b, err := os.ReadFile(name); err == nil {
				if p, ok := bestRecord(b); ok {
					l.mu.Lock()
					l.recs = append(l.recs, p)
					l.mu.Unlock()
				}
			}
		}
		return nil
	})
}

// bestRecord returns the record that Load would use from the bytes of a
// pointer file: the valid slot with the higher write sequence.
func bestRecord(b []byte) (pointer.Record, bool) {
	var best pointer.Record
	var bestSeq uint64
	found := false
	for off := 0; off+pointer.RecordSize <= len(b); off += pointer.SlotSize {
		rec := b[off : off+pointer.RecordSize]
		p, err := pointer.Decode(rec)
		if seq := binary.LittleEndian.Uint64(rec[8:16]); err == nil && (!found || seq > bestSeq) {
			best, bestSeq, found = p, seq, true
		}
	}
	return best, found
}

// failOp makes every op on the pointer file fail; "" fails nothing.
func (l *pointerLog) failOp(op vfs.Op) {
	if op == "" {
		l.fail.Store(nil)
		return
	}
	l.fail.Store(&op)
}

// waitHeld waits until a write of the pointer file is held.
func (l *pointerLog) waitHeld(t *testing.T) {
	t.Helper()
	select {
	case <-l.held:
	case <-time.After(deadline):
		t.Fatal("no pointer write was held before the deadline")
	}
}

func (l *pointerLog) records() []pointer.Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]pointer.Record(nil), l.recs...)
}

// groupInput is an input of n 32-byte lines: from 400 lines on, longer
// than the fingerprint's 4096 bytes, so that every commit after the epoch's
// first store only moves the position.
func groupInput(t *testing.T, n int) string {
	return input(t, genLines("g", 0, n))
}

// writersRunning counts the goroutines of group commit writers.
func writersRunning() int {
	return goroutinesCreatedBy("github.com/tidemark-go/tidemark/feed.newGroupWriter")
}

// TestGroupCommitCoalesces: while the writer writes one record, the commits
// handed to it return at once and coalesce: once the write ends, only the
// newest is written, and Flush returns when it is. Status tells the position
// written from the position asked.
func TestGroupCommitCoalesces(t *testing.T) {
	p := groupInput(t, 400)
	l := newPointerLog(p)
	s := open(t, p, Config{GroupCommit: true, FS: l.fs()})
	g := s.drain()
	e := g[0].Epoch
	if res := loadPointer(t, p); !res.Found || res.Record.Epoch != e || res.Record.Position != 0 {
		t.Fatalf("the epoch's first record is not stored at once: %+v", res)
	}
	before := l.writes.Load()
	l.hold.Store(true)
	if err := s.Commit(e, g[0].Position); err != nil {
		t.Fatal(err)
	}
	l.waitHeld(t)
	l.hold.Store(false)
	// The writer is held in its write of g[0]: a Commit that waited for
	// its own write would not return before the deadline.
	for _, x := range g[1:] {
		if err := s.Commit(e, x.Position); err != nil {
			t.Fatal(err)
		}
	}
	last := g[len(g)-1].Position
	if st := s.Status(); st.CommittedPosition != 0 || st.AskedPosition != last || st.CommitErrors != 0 {
		t.Fatalf("status while the first write is held: %+v", st)
	}
	close(l.release)
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if st := s.Status(); st.CommittedPosition != last || st.AskedPosition != last {
		t.Fatalf("status after Flush: %+v", st)
	}
	if res := loadPointer(t, p); res.Record.Epoch != e || res.Record.Position != last {
		t.Fatalf("pointer after Flush %+v, want epoch %d position %d", res.Record, e, last)
	}
	if n := l.writes.Load() - before; n != 2 {
		t.Fatalf("%d pointer writes for %d commits handed during one write; want 2 (the one held, then the newest)", n, len(g))
	}
	var positions []int64
	for _, r := range l.records() {
		positions = append(positions, r.Position)
	}
	if fmt.Sprint(positions) != fmt.Sprint([]int64{0, g[0].Position, last}) {
		t.Fatalf("records synced at positions %v", positions)
	}
	// Nothing pending: Flush returns at once, and Close is clean.
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Flush after Close: %v", err)
	}
}

// TestGroupCommitOff: without GroupCommit, Commit writes before it returns
// and Flush has nothing to do.
func TestGroupCommitOff(t *testing.T) {
	p := groupInput(t, 400)
	s := open(t, p, Config{})
	g := s.drain()
	for _, x := range g[:10] {
		if err := s.Commit(x.Epoch, x.Position); err != nil {
			t.Fatal(err)
		}
		if res := loadPointer(t, p); res.Record.Position != x.Position {
			t.Fatalf("pointer %+v after Commit(%d)", res.Record, x.Position)
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := writersRunning(); n != 0 {
		t.Fatalf("%d group commit writers without GroupCommit", n)
	}
	if st := s.Status(); st.CommittedPosition != g[9].Position || st.AskedPosition != g[9].Position {
		t.Fatalf("status %+v", st)
	}
}

// TestGroupCommitRotationOrder: commits handed to the writer, one of them
// still being written, then the input is rotated: the new epoch's record is
// stored only after the writer has written the old epoch's last commit, and
// no record of the old epoch follows it.
func TestGroupCommitRotationOrder(t *testing.T) {
	p := groupInput(t, 400)
	l := newPointerLog(p)
	s := open(t, p, Config{GroupCommit: true, FS: l.fs()})
	g := s.drain()
	e, last := g[0].Epoch, g[len(g)-1].Position
	l.hold.Store(true)
	if err := s.Commit(e, g[9].Position); err != nil {
		t.Fatal(err)
	}
	l.waitHeld(t)
	l.hold.Store(false)
	if err := s.Commit(e, last); err != nil { // pending behind the held write
		t.Fatal(err)
	}
	rename(t, p, p+".1")
	write(t, p, genLines("n", 0, 10))
	// Release the held write once the source waits for the writer, as
	// it must before it stores anything of the new file.
	released := make(chan error, 1)
	go func() {
		end := time.Now().Add(deadline)
		for !s.gw.waiting() {
			if time.Now().After(end) {
				close(l.release)
				released <- errors.New("the source never waited for the group commit writer before leaving the rotated file")
				return
			}
			time.Sleep(time.Millisecond)
		}
		close(l.release)
		released <- nil
	}()
	n := s.waitLines(10)
	if err := <-released; err != nil {
		t.Fatal(err)
	}
	if n[0].Epoch <= e || n[0].Line != strings.TrimSuffix(genLines("n", 0, 1), "\n") {
		t.Fatalf("first line after the rotation %+v", n[0])
	}
	recs := l.records()
	first := -1
	for i, r := range recs {
		if r.Epoch != e {
			first = i
			break
		}
	}
	if first < 1 {
		t.Fatalf("no record of the new epoch after one of the old: %+v", recs)
	}
	if r := recs[first-1]; r.Epoch != e || r.Position != last {
		t.Fatalf("the record before the new epoch's is %+v, want the old epoch %d at its last commit %d; records %+v", r, e, last, recs)
	}
	for _, r := range recs[first:] {
		if r.Epoch == e {
			t.Fatalf("a record of the old epoch after the new epoch's: %+v", recs)
		}
	}
	if res := loadPointer(t, p); res.Record.Epoch != n[0].Epoch || res.Record.Identity != identityOf(t, p) {
		t.Fatalf("pointer %+v, want the new file's epoch %d", res.Record, n[0].Epoch)
	}
}

// TestGroupCommitRotationWaitsForWrite: when the writer cannot write the
// last commits of the file left, the source does not move to a new file
// (nor store its epoch) and delivers none of its lines until they are
// written, as it waits for lines not committed.
func TestGroupCommitRotationWaitsForWrite(t *testing.T) {
	p := groupInput(t, 400)
	l := newPointerLog(p)
	s := open(t, p, Config{GroupCommit: true, FS: l.fs()})
	g := s.drain()
	e, last := g[0].Epoch, g[len(g)-1].Position
	if err := s.Commit(e, g[9].Position); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	l.failOp(vfs.OpWrite)
	if err := s.Commit(e, last); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the failed write in Status", func() bool { return s.Status().CommitErrors >= 1 })
	rename(t, p, p+".1")
	write(t, p, genLines("n", 0, 10))
	for range 3 {
		if g, err := s.poll(); len(g) != 0 || err != nil {
			t.Fatalf("poll while the old file's last commit cannot be written: %+v, %v", g, err)
		}
	}
	if st := s.Status(); st.State != StateBehind || !strings.Contains(st.Detail, "waiting for the pointer write") ||
		st.Epoch != e || st.CommittedPosition != g[9].Position || st.AskedPosition != last {
		t.Fatalf("status %+v", st)
	}
	if res := loadPointer(t, p); res.Record.Epoch != e || res.Record.Position != g[9].Position {
		t.Fatalf("pointer %+v", res.Record)
	}
	l.failOp("")
	n := s.waitLines(10)
	if n[0].Epoch <= e {
		t.Fatalf("first line after the rotation %+v", n[0])
	}
	recs := l.records()
	if len(recs) < 2 || recs[len(recs)-1].Epoch != n[0].Epoch || recs[len(recs)-2].Epoch != e || recs[len(recs)-2].Position != last {
		t.Fatalf("records %+v: want the old epoch's last commit %d, then the new epoch", recs, last)
	}
}

// TestGroupCommitSyncInterval: under SyncInterval the writer writes
// without syncing until the interval is due, and the idle polls make its
// last write durable.
func TestGroupCommitSyncInterval(t *testing.T) {
	p := groupInput(t, 400)
	l := newPointerLog(p)
	// As in TestIdleSyncsPendingCommit: 2 s is longer than the time from
	// the epoch's first store (synced) to the commit, and short enough to
	// wait for.
	s := open(t, p, Config{GroupCommit: true, Sync: SyncInterval, SyncInterval: 2 * time.Second, FS: l.fs()})
	g := s.drain()
	synced := len(l.records())
	writes := l.writes.Load()
	if err := s.Commit(g[0].Epoch, g[9].Position); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if l.writes.Load() != writes+1 || len(l.records()) != synced {
		t.Fatalf("%d writes and %d syncs for a commit within the interval, want 1 write and no sync", l.writes.Load()-writes, len(l.records())-synced)
	}
	if res := loadPointer(t, p); res.Record.Position != g[9].Position {
		t.Fatalf("pointer %+v", res.Record)
	}
	waitUntil(t, "an idle poll to sync the writer's write", func() bool {
		if g, err := s.poll(); len(g) != 0 || err != nil {
			t.Fatalf("%+v %v", g, err)
		}
		return len(l.records()) > synced
	})
	if r := l.records(); r[len(r)-1].Position != g[9].Position {
		t.Fatalf("synced %+v", r[len(r)-1])
	}
}

// TestGroupCommitWriteFails: a background write or sync that fails is
// counted in Status and logged, returned by the next Commit, and retried
// by the next Commit (even one that moves nothing), by Flush and by Close,
// until the pointer reaches the newest position; meanwhile the previous
// record stays readable and the pointer is never ahead of the commits.
func TestGroupCommitWriteFails(t *testing.T) {
	for _, op := range []vfs.Op{vfs.OpWrite, vfs.OpSync} {
		t.Run(string(op), func(t *testing.T) {
			p := groupInput(t, 400)
			l := newPointerLog(p)
			s := open(t, p, Config{GroupCommit: true, FS: l.fs()})
			g := s.drain()
			e := g[0].Epoch
			pos := func(i int) int64 { return g[i].Position }
			if err := s.Commit(e, pos(9)); err != nil {
				t.Fatal(err)
			}
			if err := s.Flush(); err != nil {
				t.Fatal(err)
			}
			readable := func(most int64) {
				t.Helper()
				res := loadPointer(t, p)
				if !res.Found || res.Record.Epoch != e || res.Record.Position < pos(9) || res.Record.Position > most ||
					(op == vfs.OpWrite && res.Record.Position != pos(9)) {
					t.Fatalf("the previous pointer must stay readable, never ahead of the commits: %+v", res)
				}
			}

			l.failOp(op)
			if err := s.Commit(e, pos(19)); err != nil {
				t.Fatalf("the first commit handed returns before its write: %v", err)
			}
			waitUntil(t, "the failed write in Status", func() bool { return s.Status().CommitErrors >= 1 })
			st := s.Status()
			if st.LastCommitError == "" || st.CommittedPosition != pos(9) || st.AskedPosition != pos(19) {
				t.Fatalf("status after a failed background write: %+v", st)
			}
			if len(s.log.find(slog.LevelWarn, "pointer write failed")) == 0 {
				t.Fatalf("log:\n%s", s.log)
			}
			readable(pos(19))
			err := s.Commit(e, pos(29))
			if err == nil || !errors.Is(err, vfs.ErrInjected.Err) || !strings.Contains(err.Error(), p) ||
				!strings.Contains(err.Error(), fmt.Sprintf("position %d", pos(19))) {
				t.Fatalf("the commit after a failed background write: %v", err)
			}
			waitUntil(t, "the write of the newest record to fail", func() bool { return s.Status().CommitErrors >= 2 })
			readable(pos(29))
			if err := s.Flush(); err == nil || !errors.Is(err, vfs.ErrInjected.Err) || !strings.Contains(err.Error(), fmt.Sprintf("position %d", pos(29))) {
				t.Fatalf("Flush while the writes fail: %v", err)
			}
			if st := s.Status(); st.CommitErrors != 3 || st.CommittedPosition != pos(9) {
				t.Fatalf("Flush retries once: %+v", st)
			}
			readable(pos(29))

			// The fault clears: a commit that moves nothing retries the
			// pending record.
			l.failOp("")
			if err := s.Commit(e, pos(29)); err == nil {
				t.Fatal("the retrying commit returns the last failed write's error")
			}
			waitUntil(t, "the retried write", func() bool { return s.Status().CommittedPosition == pos(29) })
			if st := s.Status(); st.LastCommitError != "" || st.CommitErrors != 3 {
				t.Fatalf("status after the retry: %+v", st)
			}
			if err := s.Commit(e, pos(39)); err != nil {
				t.Fatalf("commit after a write succeeded: %v", err)
			}
			if err := s.Flush(); err != nil {
				t.Fatal(err)
			}
			if res := loadPointer(t, p); res.Record.Position != pos(39) {
				t.Fatalf("pointer %+v", res.Record)
			}

			// A newer commit replaces a failed one; Close writes it.
			l.failOp(op)
			if err := s.Commit(e, pos(49)); err != nil {
				t.Fatal(err)
			}
			waitUntil(t, "the failed write in Status", func() bool { return s.Status().CommitErrors >= 4 })
			l.failOp("")
			if err := s.Commit(e, pos(59)); err == nil {
				t.Fatal("the commit after a failed background write returns nil")
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if res := loadPointer(t, p); res.Record.Position != pos(59) {
				t.Fatalf("pointer after Close %+v, want %d", res.Record, pos(59))
			}
		})
	}
}

// TestGroupCommitCloseFails: Close returns the error of a pending write it
// could not make, naming the input; the previous record stays.
func TestGroupCommitCloseFails(t *testing.T) {
	before := writersRunning()
	p := groupInput(t, 400)
	l := newPointerLog(p)
	s := open(t, p, Config{GroupCommit: true, FS: l.fs()})
	g := s.drain()
	l.failOp(vfs.OpWrite)
	if err := s.Commit(g[0].Epoch, g[5].Position); err != nil {
		t.Fatal(err)
	}
	err := s.Close()
	if err == nil || !strings.Contains(err.Error(), "close input "+p) || !errors.Is(err, vfs.ErrInjected.Err) {
		t.Fatalf("Close with a failing pending write: %v", err)
	}
	if res := loadPointer(t, p); !res.Found || res.Record.Position != 0 {
		t.Fatalf("pointer %+v", res)
	}
	// Close joined the writer: its goroutine has at most to return.
	waitUntil(t, "the writer's goroutine to end", func() bool { return writersRunning() == before })
}

// TestGroupCommitCloseJoinsWriter: the writer's goroutine starts with the
// first record handed to it and ends with Close.
func TestGroupCommitCloseJoinsWriter(t *testing.T) {
	leaks := goleak.IgnoreCurrent()
	waitUntil(t, "the writers of the tests before to end", func() bool { return writersRunning() == 0 })
	before := 0
	p := groupInput(t, 400)
	s := open(t, p, Config{GroupCommit: true})
	g := s.drain()
	if n := writersRunning(); n != before {
		t.Fatalf("%d writers before the first commit, %d before the source", n, before)
	}
	for _, x := range g {
		if err := s.Commit(x.Epoch, x.Position); err != nil {
			t.Fatal(err)
		}
	}
	if n := writersRunning(); n != before+1 {
		t.Fatalf("%d writers running once commits were handed, want %d", n, before+1)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Close joined the writer: its goroutine has at most to return.
	waitUntil(t, "the writer's goroutine to end", func() bool { return writersRunning() == before })
	goleak.VerifyNone(t, leaks)
	if res := loadPointer(t, p); res.Record.Position != g[len(g)-1].Position {
		t.Fatalf("pointer after Close %+v", res.Record)
	}
}

// TestGroupCommitStatusRace: Status from another goroutine while commits
// are handed and written; the position written only moves forward, never
// beyond the lines read.
func TestGroupCommitStatusRace(t *testing.T) {
	p := groupInput(t, 5000)
	s := open(t, p, Config{GroupCommit: true, Sync: SyncNever})
	stop := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		var prev int64
		for {
			select {
			case <-stop:
				errc <- nil
				return
			default:
			}
			st := s.Status()
			st.Reopens["x"]++ // a copy
			if st.CommittedPosition < prev || st.CommittedPosition > st.ReadPosition {
				errc <- fmt.Errorf("status %+v after committed position %d", st, prev)
				return
			}
			prev = st.CommittedPosition
		}
	}()
	var last got
	s.batches(func(g []got) { last = g[len(g)-1] })
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	close(stop)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if st := s.Status(); st.CommittedPosition != last.Position || st.AskedPosition != last.Position {
		t.Fatalf("status %+v, want committed %d", st, last.Position)
	}
}

// TestSimulationGroupCommit runs the simulation, and the tests of a copy
// renamed over the path (D5), with GroupCommit on in every source.
func TestSimulationGroupCommit(t *testing.T) {
	groupCommitAll = true
	t.Cleanup(func() { groupCommitAll = false })
	t.Run("sim", TestSimulation)
	t.Run("d5", TestCopyRenamedOverPathThenRotatedWhileStopped)
	t.Run("d5-write-fails", TestCopyRenamedOverPathPointerWriteFails)
}

const groupChildEnv = "TIDEMARK_GROUP_COMMIT_CHILD"

// groupChild is the child process of TestGroupCommitKill: it reads its input
// with a GroupCommit source (SyncEveryCommit) in batches of 7, prints
// "processed <epoch> <position>" for every line and "committing <epoch>
// <position>" before it commits the batch.
func groupChild(path string) { killChild(Config{Path: path, GroupCommit: true}, true) }

// TestGroupCommitKill kills a process reading with a GroupCommit source with
// SIGKILL, several times, at moments chosen by its progress. After each kill
// the pointer is in the child's epoch, at a line start, never ahead of the
// last commit the child started, and every line before it was processed; a
// restart delivers the line at the pointer first. Over all runs every line
// is processed: duplicates, never a gap.
func TestGroupCommitKill(t *testing.T) {
	if v := os.Getenv(groupChildEnv); v != "" {
		groupChild(v)
		return
	}
	killRounds(t, "TestGroupCommitKill", groupChildEnv, "committing", []int{1, 50, 300, 1000}, Config{GroupCommit: true},
		func(pos, last int64) bool { return pos <= last })
}
