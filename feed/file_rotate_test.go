package feed

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/feed/pointer"
	"github.com/tidemark-go/tidemark/vfs"
)

// waitUntil polls cond until it holds or the deadline passes.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(deadline)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRotationRenameAwayConcurrentWriter: a writer appends generations of
// lines, renaming the file away and starting a new one at the path, while
// the source tails it. Every line of every generation is delivered once, in
// order, each generation in its own epoch, and commits of old epochs never
// land in the pointer.
func TestRotationRenameAwayConcurrentWriter(t *testing.T) {
	const gens, perGen = 5, 300
	p := input(t, "")
	// SyncNever: the test is about epochs, not durability; an fdatasync per
	// commit on a loaded CI disk would only slow it down.
	s := open(t, p, Config{Sync: SyncNever})
	var seen atomic.Int64 // lines delivered so far
	errc := make(chan error, 1)
	go func() {
		errc <- func() error {
			for g := range gens {
				f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
				if err != nil {
					return err
				}
				for i := range perGen {
					if _, err := fmt.Fprintf(f, "g%d-%d\n", g, i); err != nil {
						return err
					}
				}
				if err := f.Close(); err != nil {
					return err
				}
				if g == gens-1 {
					return nil
				}
				// Never rotate twice before the source has reached this
				// generation: a file renamed away unseen is out of reach.
				end := time.Now().Add(deadline)
				for seen.Load() <= int64(g*perGen) {
					if time.Now().After(end) {
						return fmt.Errorf("source stuck before generation %d", g)
					}
					time.Sleep(time.Millisecond)
				}
				if err := os.Rename(p, fmt.Sprintf("%s.%d", p, g)); err != nil {
					return err
				}
			}
			return nil
		}()
	}()
	var all, prev []got
	end := time.Now().Add(deadline)
	for len(all) < gens*perGen {
		if time.Now().After(end) {
			t.Fatalf("got %d of %d lines; status %+v\n%s\nlog:\n%s", len(all), gens*perGen, s.Status(), s.debug(), s.log)
		}
		g, err := s.poll()
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, g...)
		seen.Store(int64(len(all)))
		// Commit once per poll, as the framework does once per duty cycle,
		// and one poll late, as a slow subscriber would: an old epoch's
		// commits must never land in a newer epoch's pointer.
		if len(prev) > 0 {
			x := prev[len(prev)-1]
			if err := s.Commit(x.Epoch, x.Position); err != nil {
				t.Fatal(err)
			}
		}
		prev = g
		if len(g) == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	epochs := map[uint64]int{}
	for i, x := range all {
		g, n := i/perGen, i%perGen
		if want := fmt.Sprintf("g%d-%d", g, n); x.Line != want {
			t.Fatalf("line %d is %q, want %q", i, x.Line, want)
		}
		if n == 0 {
			if _, dup := epochs[x.Epoch]; dup || (g > 0 && x.Epoch <= all[i-1].Epoch) {
				t.Fatalf("generation %d does not start a new, larger epoch: %d", g, x.Epoch)
			}
		} else if x.Epoch != all[i-1].Epoch {
			t.Fatalf("epoch changed inside generation %d", g)
		}
		epochs[x.Epoch]++
	}
	if st := s.Status(); st.Reopens[ReasonReplaced] != gens-1 || st.LastReopenReason != ReasonReplaced {
		t.Fatalf("status %+v", st)
	}
	last := all[len(all)-1]
	if err := s.Commit(last.Epoch, last.Position); err != nil {
		t.Fatal(err)
	}
	for _, x := range all[:perGen] {
		s.Commit(x.Epoch, x.Position)
	}
	res := loadPointer(t, p)
	if res.Record.Epoch != last.Epoch || res.Record.Position != last.Position || res.Record.Identity != identityOf(t, p) {
		t.Fatalf("pointer %+v, want epoch %d position %d", res.Record, last.Epoch, last.Position)
	}
}

// TestRotationWriteTempAndRename: a writer that appends by writing a copy
// with the new lines to a temporary file and renaming it over the path. The
// source reads on in the same epoch: no line twice, none lost.
func TestRotationWriteTempAndRename(t *testing.T) {
	const rounds, perRound = 20, 50
	p := input(t, "")
	s := open(t, p, Config{})
	var seen atomic.Int64
	errc := make(chan error, 1)
	go func() {
		errc <- func() error {
			var content strings.Builder
			for r := range rounds {
				for i := range perRound {
					fmt.Fprintf(&content, "r%d-%d\n", r, i)
				}
				if err := os.WriteFile(p+".tmp", []byte(content.String()), 0o644); err != nil {
					return err
				}
				if err := os.Rename(p+".tmp", p); err != nil {
					return err
				}
				end := time.Now().Add(deadline)
				for seen.Load() < int64((r+1)*perRound) {
					if time.Now().After(end) {
						return fmt.Errorf("source stuck in round %d", r)
					}
					time.Sleep(time.Millisecond)
				}
			}
			return nil
		}()
	}()
	all := s.waitLinesSeen(rounds*perRound, &seen)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if g := s.drain(); len(g) != 0 {
		t.Fatalf("extra lines %+v", g)
	}
	for i, x := range all {
		if want := fmt.Sprintf("r%d-%d", i/perRound, i%perRound); x.Line != want || x.Epoch != all[0].Epoch {
			t.Fatalf("line %d is %q in epoch %d, want %q in %d", i, x.Line, x.Epoch, want, all[0].Epoch)
		}
	}
	if st := s.Status(); st.Reopens[ReasonReplaced] != rounds-1 {
		t.Fatalf("reopens %v", st.Reopens)
	}
	if n := len(s.log.find(slog.LevelInfo, "same bytes up to the position read")); n != rounds-1 {
		t.Fatalf("%d warnings:\n%s", n, s.log)
	}
}

// TestRotationReadsOldFileToItsEnd: lines the writer appended to the old
// file before the new one appeared are read first; the unterminated last
// line of the old file is dropped, counted, logged and rejected; the new
// file is opened once the old file's lines are committed; later commits of
// the old epoch are ignored.
func TestRotationReadsOldFileToItsEnd(t *testing.T) {
	p := input(t, "a\n")
	s := open(t, p, Config{})
	g := s.drain()
	old := g[0].Epoch
	if err := s.Commit(old, 2); err != nil {
		t.Fatal(err)
	}
	appendTo(t, p, "b\npart")
	if err := os.Rename(p, p+".1"); err != nil {
		t.Fatal(err)
	}
	write(t, p, "n\n")
	g = s.drain()
	if err := s.Commit(old, 4); err != nil {
		t.Fatal(err)
	}
	g = append(g, s.drain()...)
	if fmt.Sprint(lines(g)) != "[b n]" || g[0].Epoch != old || g[0].Position != 4 || g[1].Epoch <= old || g[1].Position != 2 {
		t.Fatalf("%+v", g)
	}
	st := s.Status()
	if st.PartialDropped != 1 || st.LastReopenReason != ReasonReplaced || st.Reopens[ReasonReplaced] != 1 || st.LastReopenAt.IsZero() {
		t.Fatalf("status %+v", st)
	}
	want := []Reject{{Path: p, Epoch: old, Position: 4, Length: 4, Reason: RejectPartialDropped}}
	if !slices.Equal(s.rejects, want) {
		t.Fatalf("rejects %+v", s.rejects)
	}
	if len(s.log.find(slog.LevelWarn, "dropped the unterminated last line")) != 1 {
		t.Fatalf("log:\n%s", s.log)
	}
	if err := s.Commit(old, 4); err != nil {
		t.Fatal(err)
	}
	if res := loadPointer(t, p); res.Record.Epoch != g[1].Epoch || res.Record.Position != 0 {
		t.Fatalf("old epoch's commit landed in the new pointer: %+v", res.Record)
	}
}

// TestRotationGapWithNoFile: while no file is at the path, the open file is
// read on and the source is not waiting.
func TestRotationGapWithNoFile(t *testing.T) {
	p := input(t, "a\n")
	s := open(t, p, Config{})
	old := s.drain()[0].Epoch
	if err := os.Rename(p, p+".1"); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if g := s.drain(); len(g) != 0 {
			t.Fatalf("%+v", g)
		}
	}
	appendTo(t, p+".1", "late\n")
	g := s.drain()
	if fmt.Sprint(lines(g)) != "[late]" || g[0].Epoch != old {
		t.Fatalf("%+v", g)
	}
	if st := s.Status(); st.State != StateCaughtUp || len(st.Reopens) != 0 {
		t.Fatalf("status %+v", st)
	}
	if err := s.Commit(old, g[0].Position); err != nil {
		t.Fatal(err)
	}
	write(t, p, "new\n")
	g = s.drain()
	if fmt.Sprint(lines(g)) != "[new]" || g[0].Epoch <= old {
		t.Fatalf("%+v", g)
	}
}

// TestReplacedByRenameNoticedWithinOneIdlePoll: the next poll after the
// replacement reads the new file.
func TestReplacedByRenameNoticedWithinOneIdlePoll(t *testing.T) {
	p := input(t, "one\ntwo\n")
	s := open(t, p, Config{})
	old := s.drain()[0].Epoch
	if err := s.Commit(old, 8); err != nil {
		t.Fatal(err)
	}
	replaceByRename(t, p, "three\n")
	g, err := s.poll()
	if err != nil || fmt.Sprint(lines(g)) != "[three]" || g[0].Epoch <= old || g[0].Position != 6 {
		t.Fatalf("%+v %v", g, err)
	}
	if st := s.Status(); st.Reopens[ReasonReplaced] != 1 {
		t.Fatalf("status %+v", st)
	}
}

// TestTruncatedWhileOpenDoesNotResumeAtOldOffset: a file truncated while
// open is read from 0 under a new epoch when it grows back past the old
// offset. The writer is a goroutine that waits for the source's status.
func TestTruncatedWhileOpenDoesNotResumeAtOldOffset(t *testing.T) {
	p := input(t, "aaaa\nbbbb\n")
	s := open(t, p, Config{})
	g := s.drain()
	old := g[0].Epoch
	if err := s.Commit(old, 10); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		errc <- func() error {
			if err := os.Truncate(p, 0); err != nil {
				return err
			}
			end := time.Now().Add(deadline)
			for s.Status().Reopens[ReasonTruncated] == 0 {
				if time.Now().After(end) {
					return fmt.Errorf("truncation not noticed")
				}
				time.Sleep(time.Millisecond)
			}
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			for i := range 20 {
				if _, err := fmt.Fprintf(f, "c%d\n", i); err != nil {
					return err
				}
			}
			return nil
		}()
	}()
	g = s.waitLines(20)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if g[0].Line != "c0" || g[0].Position != 3 || g[0].Epoch <= old || g[19].Line != "c19" {
		t.Fatalf("%+v", g[:2])
	}
	if res := loadPointer(t, p); res.Record.Epoch != g[0].Epoch || res.Record.Position != 0 {
		t.Fatalf("the new epoch must be stored: %+v", res.Record)
	}
	if st := s.Status(); st.LastReopenReason != ReasonTruncated {
		t.Fatalf("status %+v", st)
	}
}

// TestTruncateConcurrentWriter: a writer appends, truncates (copytruncate
// rotation) once the source has read everything, and appends again; every
// line is delivered, those after the truncation in a new epoch from 0.
func TestTruncateConcurrentWriter(t *testing.T) {
	const rounds, perRound = 4, 200
	p := input(t, "")
	write(t, p, "")
	s := open(t, p, Config{})
	var seen atomic.Int64
	errc := make(chan error, 1)
	go func() {
		errc <- func() error {
			for r := range rounds {
				f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
				if err != nil {
					return err
				}
				for i := range perRound {
					if _, err := fmt.Fprintf(f, "r%d-%d\n", r, i); err != nil {
						return err
					}
				}
				f.Close()
				end := time.Now().Add(deadline)
				for seen.Load() < int64((r+1)*perRound) {
					if time.Now().After(end) {
						return fmt.Errorf("source stuck in round %d", r)
					}
					time.Sleep(time.Millisecond)
				}
				if r == rounds-1 {
					return nil
				}
				if err := os.Truncate(p, 0); err != nil {
					return err
				}
				for s.Status().Reopens[ReasonTruncated] < uint64(r+1) {
					if time.Now().After(end) {
						return fmt.Errorf("truncation %d not noticed", r)
					}
					time.Sleep(time.Millisecond)
				}
			}
			return nil
		}()
	}()
	all := s.waitLinesSeen(rounds*perRound, &seen)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	for i, x := range all {
		r, n := i/perRound, i%perRound
		if want := fmt.Sprintf("r%d-%d", r, n); x.Line != want {
			t.Fatalf("line %d is %q, want %q", i, x.Line, want)
		}
		if n == 0 && r > 0 && (x.Epoch <= all[i-1].Epoch || x.Position != int64(len(x.Line))+1) {
			t.Fatalf("round %d does not start a new epoch at 0: %+v", r, x)
		}
	}
}

// TestIdlePollIsOneStat: an idle tailing source costs one stat per poll and
// nothing else.
func TestIdlePollIsOneStat(t *testing.T) {
	p := input(t, "a\nb\n")
	var ops atomic.Int64
	var stats atomic.Int64
	counting := false
	fsys := vfs.Inject(vfs.Default(), func(op vfs.Op, name string) error {
		if counting {
			ops.Add(1)
			if op == vfs.OpStat && name == p {
				stats.Add(1)
			}
		}
		return nil
	})
	s := open(t, p, Config{FS: fsys})
	s.drain()
	counting = true
	for range 10 {
		if n, err := s.Poll(context.Background(), s.items); n != 0 || err != nil {
			t.Fatal(n, err)
		}
	}
	if stats.Load() != 10 || ops.Load() != 10 {
		t.Fatalf("10 idle polls did %d stats and %d operations", stats.Load(), ops.Load())
	}
}

// TestReopenSameContentKeepsEpochAndOrigin: a copy renamed over the path
// keeps the epoch and its Origin, whose TailHash then reads the copy; a new
// file starts a new epoch with a new Origin, and the old one is ended.
func TestReopenSameContentKeepsEpochAndOrigin(t *testing.T) {
	p := input(t, "a\nb\n")
	s := open(t, p, Config{})
	ctx := context.Background()
	if n, err := s.Poll(ctx, s.items); n != 2 || err != nil {
		t.Fatal(n, err)
	}
	o1, e1 := s.items[0].Origin, s.items[0].Epoch
	replaceByRename(t, p, "a\nb\nc\n")
	if n, err := s.Poll(ctx, s.items); n != 1 || err != nil || string(s.items[0].Line) != "c" {
		t.Fatal(n, err)
	}
	if s.items[0].Origin != o1 || s.items[0].Epoch != e1 {
		t.Fatal("a copy must keep the epoch and its Origin")
	}
	if h, err := o1.TailHash(6, 2); err != nil || h != pointer.HashBytes([]byte("c\n")) {
		t.Fatalf("the Origin must read the copy: %x %v", h, err)
	}
	if err := s.Commit(e1, 6); err != nil {
		t.Fatal(err)
	}
	if res := loadPointer(t, p); res.Record.Identity != identityOf(t, p) || res.Record.Position != 6 {
		t.Fatalf("pointer %+v", res.Record)
	}
	replaceByRename(t, p, "new\n")
	if n, err := s.Poll(ctx, s.items); n != 1 || err != nil {
		t.Fatal(n, err)
	}
	if s.items[0].Origin == o1 || s.items[0].Epoch <= e1 {
		t.Fatal("a new file must start a new epoch with a new Origin")
	}
	if _, err := o1.TailHash(2, 2); err == nil {
		t.Fatal("an ended epoch's Origin must not read the new file")
	}
}

// TestCopyCompletesPartialLine: when a copy renamed over the path continues
// the epoch, the old file's unterminated last line is not dropped: the copy
// delivers it once it is complete. A copy made while the source was skipping
// to a line start (a Latest start inside a line) goes on skipping.
func TestCopyCompletesPartialLine(t *testing.T) {
	p := input(t, "a\nb")
	s := open(t, p, Config{})
	if g := s.drain(); fmt.Sprint(lines(g)) != "[a]" {
		t.Fatalf("%+v", g)
	}
	replaceByRename(t, p, "a\nbc\n")
	g := s.drain()
	if fmt.Sprint(lines(g)) != "[bc]" || g[0].Position != 5 {
		t.Fatalf("%+v", g)
	}
	if st := s.Status(); st.PartialDropped != 0 || len(s.rejects) != 0 || st.Reopens[ReasonReplaced] != 1 {
		t.Fatalf("status %+v rejects %+v", st, s.rejects)
	}

	p2 := input(t, "old\nhal")
	l := open(t, p2, Config{Strategy: Latest})
	l.drain()
	replaceByRename(t, p2, "old\nhalf\nnew\n")
	if g := l.drain(); fmt.Sprint(lines(g)) != "[new]" {
		t.Fatalf("Latest after a copy: %+v", g)
	}
}

// TestRotationWithoutPointer: the strategies without a pointer follow a
// rotation too, reading the new file from 0 (items keep epoch 0).
func TestRotationWithoutPointer(t *testing.T) {
	for _, st := range []ReadStrategy{Earliest, Latest} {
		t.Run(st.String(), func(t *testing.T) {
			p := input(t, "a\n")
			s := open(t, p, Config{Strategy: st, FS: noPointerFS(t, p)})
			s.drain()
			appendTo(t, p, "b\n")
			if err := os.Rename(p, p+".1"); err != nil {
				t.Fatal(err)
			}
			write(t, p, "c\n")
			g := s.drain()
			if fmt.Sprint(lines(g)) != "[b c]" || g[1].Position != 2 || g[1].Epoch != 0 {
				t.Fatalf("%+v", g)
			}
			if st := s.Status(); st.Reopens[ReasonReplaced] != 1 {
				t.Fatalf("status %+v", st)
			}
			if err := os.Truncate(p, 0); err != nil {
				t.Fatal(err)
			}
			s.drain()
			appendTo(t, p, "d\n")
			if g := s.drain(); fmt.Sprint(lines(g)) != "[d]" || g[0].Position != 2 {
				t.Fatalf("after truncation: %+v", g)
			}
		})
	}
}

// TestOriginConcurrentWithRotation: stores call an Origin's TailHash from
// their own goroutines while the source rotates and closes its files.
func TestOriginConcurrentWithRotation(t *testing.T) {
	p := input(t, "a\n")
	s := open(t, p, Config{Sync: SyncNever})
	ctx := context.Background()
	if n, err := s.Poll(ctx, s.items); n != 1 || err != nil {
		t.Fatal(n, err)
	}
	if err := s.Commit(s.items[0].Epoch, s.items[0].Position); err != nil {
		t.Fatal(err)
	}
	var origins atomic.Pointer[tidemark.Origin]
	origins.Store(s.items[0].Origin)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				origins.Load().TailHash(2, 2) // an error once the epoch ended is fine
			}
		}
	}()
	for i := range 20 {
		replaceByRename(t, p, fmt.Sprintf("%d\n", i%10))
		g, err := s.poll()
		if err != nil || len(g) != 1 {
			t.Fatalf("round %d: %+v %v", i, g, err)
		}
		if err := s.Commit(g[0].Epoch, g[0].Position); err != nil {
			t.Fatal(err)
		}
		origins.Store(s.items[0].Origin)
	}
	s.Close()
	close(stop)
	<-done
}

// TestRotationAfterOnlyPartialLine: a file opened empty that only got an
// unterminated line before it was rotated away is not continued by the new
// file (whose bytes differ): the partial line is reported dropped and the
// new file starts a new epoch.
func TestRotationAfterOnlyPartialLine(t *testing.T) {
	p := input(t, "")
	write(t, p, "")
	s := open(t, p, Config{})
	s.drain()
	old := s.Status().Epoch
	appendTo(t, p, "part")
	s.drain()
	if err := os.Rename(p, p+".1"); err != nil {
		t.Fatal(err)
	}
	write(t, p, "new\n")
	g := s.drain()
	if fmt.Sprint(lines(g)) != "[new]" || g[0].Epoch <= old {
		t.Fatalf("%+v", g)
	}
	if st := s.Status(); st.PartialDropped != 1 || len(s.rejects) != 1 || s.rejects[0].Length != 4 {
		t.Fatalf("status %+v rejects %+v", st, s.rejects)
	}
}

// TestRotationGapConcurrentWriter: a writer renames the file away, goes on
// appending to the renamed file while no file is at the path, then creates
// a new one; the source, polling all along, delivers every line, those of
// the old file in the old epoch.
func TestRotationGapConcurrentWriter(t *testing.T) {
	const rounds, perRound = 3, 100
	p := input(t, "")
	write(t, p, "")
	s := open(t, p, Config{})
	var seen atomic.Int64
	errc := make(chan error, 1)
	wait := func(n int) error {
		end := time.Now().Add(deadline)
		for seen.Load() < int64(n) {
			if time.Now().After(end) {
				return fmt.Errorf("source stuck before %d lines", n)
			}
			time.Sleep(time.Millisecond)
		}
		return nil
	}
	go func() {
		errc <- func() error {
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return err
			}
			defer func() { f.Close() }()
			n := 0
			for r := range rounds {
				for i := range perRound {
					fmt.Fprintf(f, "r%d-%d\n", r, i)
				}
				n += perRound
				if err := wait(n); err != nil {
					return err
				}
				if err := os.Rename(p, fmt.Sprintf("%s.%d", p, r)); err != nil {
					return err
				}
				// The gap: the writer still appends to the renamed file.
				for i := range perRound {
					fmt.Fprintf(f, "r%d-late-%d\n", r, i)
				}
				n += perRound
				if err := wait(n); err != nil {
					return err
				}
				f.Close()
				if f, err = os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644); err != nil {
					return err
				}
			}
			return nil
		}()
	}()
	var all []got
	end := time.Now().Add(deadline)
	for len(all) < rounds*2*perRound {
		if time.Now().After(end) {
			t.Fatalf("got %d lines; status %+v", len(all), s.Status())
		}
		g, err := s.poll()
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, g...)
		seen.Store(int64(len(all)))
		if len(g) > 0 {
			if err := s.Commit(g[len(g)-1].Epoch, g[len(g)-1].Position); err != nil {
				t.Fatal(err)
			}
		}
		if len(g) == 0 {
			if st := s.Status(); st.State == StateWaiting {
				t.Fatalf("a path with no file for a moment is not a reason to wait: %+v", st)
			}
			time.Sleep(time.Millisecond)
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	for i, x := range all {
		r, k := i/(2*perRound), i%(2*perRound)
		want := fmt.Sprintf("r%d-%d", r, k)
		if k >= perRound {
			want = fmt.Sprintf("r%d-late-%d", r, k-perRound)
		}
		if x.Line != want || x.Epoch != all[r*2*perRound].Epoch {
			t.Fatalf("line %d is %q in epoch %d, want %q in the epoch of its file", i, x.Line, x.Epoch, want)
		}
	}
	if st := s.Status(); st.Reopens[ReasonReplaced] != rounds-1 {
		t.Fatalf("reopens %v", st.Reopens)
	}
}
