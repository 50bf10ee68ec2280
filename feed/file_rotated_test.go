package feed

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// This file tests Config.Rotated: the source follows its input through the
// rotated files, and no number of rotations while it is behind or stopped,
// no copytruncate and no folder size loses a line.

// rotateNumbered rotates p the logrotate way with numbered suffixes:
// p.(n-1) → p.n, …, p.1 → p.2, then p → p.1. It does not create p.
func rotateNumbered(t *testing.T, p string) {
	t.Helper()
	n := 1
	for {
		if _, err := os.Stat(fmt.Sprintf("%s.%d", p, n)); err != nil {
			break
		}
		n++
	}
	for i := n - 1; i >= 1; i-- {
		rename(t, fmt.Sprintf("%s.%d", p, i), fmt.Sprintf("%s.%d", p, i+1))
	}
	rename(t, p, p+".1")
}

// copyTruncate rotates p the way logrotate's copytruncate does: it copies p
// to to, then truncates p in place (p keeps its identity).
func copyTruncate(t *testing.T, p, to string) {
	t.Helper()
	src, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	src.Close()
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, 0); err != nil {
		t.Fatal(err)
	}
}

// rotatedConfig is a Config following p's numbered rotations, with no
// RotateWait (the tests of late writes set their own).
func rotatedConfig() Config { return Config{Rotated: "in.log.*", RotateWait: -1} }

// wantGenerations checks that gs are the lines of the generations, in
// order: gens[0] from byte from, the others whole, each in its own epoch.
func wantGenerations(t *testing.T, gs []got, from int64, gens ...string) {
	t.Helper()
	i := 0
	prev := uint64(0)
	for k, gen := range gens {
		start := int64(0)
		if k == 0 {
			start = from
		}
		n := strings.Count(gen[start:], "\n")
		if i+n > len(gs) {
			t.Fatalf("generation %d: %d lines delivered in all, want %d more from line %d (%q...)", k, len(gs), n, i, gen[start:min(len(gen), int(start)+40)])
		}
		if n == 0 {
			continue
		}
		e := wantLines(t, fmt.Sprintf("generation %d", k), gs[i:i+n], gen, start)
		if e == prev {
			t.Fatalf("generation %d read in the epoch of the one before it (%d)", k, e)
		}
		prev = e
		i += n
	}
	if i != len(gs) {
		t.Fatalf("%d lines delivered, want %d: the extra ones start with %+v", len(gs), i, gs[i])
	}
}

// TestRotatedTwiceWhileStopped: two rotations (numbered, by rename) while
// the source is stopped part way through the first file. With Rotated, the
// restart reads the rest of the first file, then the middle one, then the
// file at the path. Without it, the middle file is lost (the limit the
// option lifts).
func TestRotatedTwiceWhileStopped(t *testing.T) {
	a, b, c := genLines("a", 0, 300), genLines("b", 0, 200), genLines("c", 0, 100)
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string // generations after the restart
	}{
		{"rotated", rotatedConfig(), []string{a, b, c}},
		{"rotated, group commit", Config{Rotated: "in.log.*", RotateWait: -1, GroupCommit: true}, []string{a, b, c}},
		{"without Rotated the middle file is lost", Config{}, []string{a, c}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := input(t, a)
			stopAfter(t, p, 100)
			rotateNumbered(t, p)
			write(t, p, b)
			rotateNumbered(t, p)
			write(t, p, c)
			s := open(t, p, tc.cfg)
			wantGenerations(t, s.collect(), 100*32, tc.want...)
		})
	}
}

// TestRotatedManyTimesWhileStopped: ten rotations while stopped, with the
// oldest files compressed away or deleted only once finished: every line
// after the pointer, in order.
func TestRotatedManyTimesWhileStopped(t *testing.T) {
	p := input(t, genLines("g0", 0, 50))
	stopAfter(t, p, 20)
	gens := []string{genLines("g0", 0, 50)}
	for i := 1; i <= 10; i++ {
		rotateNumbered(t, p)
		g := genLines(fmt.Sprintf("g%d", i), 0, 10+i)
		write(t, p, g)
		gens = append(gens, g)
	}
	s := open(t, p, rotatedConfig())
	wantGenerations(t, s.collect(), 20*32, gens...)
	// Restarted: nothing again.
	s.Close()
	s = open(t, p, rotatedConfig())
	if g := s.collect(); len(g) != 0 {
		t.Fatalf("delivered again: %v", lines(g))
	}
}

// TestRotatedTwiceWhileBehind: the source reads part of the file (the
// consumer slow: it has not reached the end), the file is rotated twice,
// and it goes on: the rest of the first file, the middle one, the file at
// the path. The pointer never names a file it has left with lines not
// committed.
func TestRotatedTwiceWhileBehind(t *testing.T) {
	a, b, c := genLines("a", 0, 4000), genLines("b", 0, 300), genLines("c", 0, 100)
	for _, group := range []bool{false, true} {
		p := input(t, a)
		cfg := rotatedConfig()
		cfg.GroupCommit = group
		s := open(t, p, cfg)
		first := s.takeCommit(64)
		rotateNumbered(t, p)
		write(t, p, b)
		rotateNumbered(t, p)
		write(t, p, c)
		all := append(first, s.collect()...)
		wantGenerations(t, all, 0, a, b, c)
	}
}

// TestRotatedStoppedInTheMiddleFile: stopped while reading the middle
// file of a chain (found by its identity under its new name at the
// restart): the rest of it, then the newer files.
func TestRotatedStoppedInTheMiddleFile(t *testing.T) {
	a, b, c := genLines("a", 0, 50), genLines("b", 0, 300), genLines("c", 0, 40)
	p := input(t, a)
	s := open(t, p, rotatedConfig())
	s.takeCommit(50)
	rotateNumbered(t, p)
	write(t, p, b)
	g := s.takeCommit(100) // stops somewhere in b (read in batches)
	committed := g[len(g)-1].Position
	wantLines(t, "b", g, b[:committed], 0)
	s.Close()
	rotateNumbered(t, p) // b → .1, a → .2
	write(t, p, c)
	s = open(t, p, rotatedConfig())
	wantGenerations(t, s.collect(), committed, b, c)
}

// TestRotatedDateSuffixes: dateext names (in.log-20240101), oldest first.
func TestRotatedDateSuffixes(t *testing.T) {
	a, b, c := genLines("a", 0, 60), genLines("b", 0, 70), genLines("c", 0, 80)
	p := input(t, a)
	stopAfter(t, p, 10)
	rename(t, p, p+"-20240101")
	write(t, p, b)
	rename(t, p, p+"-20240102")
	write(t, p, c)
	// The modification times disagree with the names: the names decide.
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(p+"-20240102", old, old); err != nil {
		t.Fatal(err)
	}
	s := open(t, p, Config{Rotated: "in.log-*", RotateWait: -1})
	wantGenerations(t, s.collect(), 10*32, a, b, c)
}

// TestRotatedToAnotherFolder: logrotate's olddir: the rotated files are
// moved to another folder, which the pattern names.
func TestRotatedToAnotherFolder(t *testing.T) {
	a, b, c := genLines("a", 0, 60), genLines("b", 0, 70), genLines("c", 0, 80)
	p := input(t, a)
	dir := filepath.Join(filepath.Dir(p), "old")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	stopAfter(t, p, 10)
	rename(t, p, filepath.Join(dir, "in.log.2"))
	write(t, p, b)
	rename(t, p, filepath.Join(dir, "in.log.1"))
	write(t, p, c)
	s := open(t, p, Config{Rotated: "old/in.log.*", RotateWait: -1})
	wantGenerations(t, s.collect(), 10*32, a, b, c)
}

// TestRotatedInALargeFolder: a folder of more than 4096 entries (the limit
// of the scan without Rotated) loses nothing with the pattern.
func TestRotatedInALargeFolder(t *testing.T) {
	a, b, c := genLines("a", 0, 60), genLines("b", 0, 70), genLines("c", 0, 80)
	p := input(t, a)
	stopAfter(t, p, 10)
	for i := range 4200 {
		f, err := os.Create(filepath.Join(filepath.Dir(p), fmt.Sprintf("other-%05d.log", i)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	rotateNumbered(t, p)
	write(t, p, b)
	rotateNumbered(t, p)
	write(t, p, c)
	s := open(t, p, rotatedConfig())
	wantGenerations(t, s.collect(), 10*32, a, b, c)
}

// TestCopyTruncateWhileStopped: logrotate's copytruncate while the source
// is stopped: the input keeps its identity and is truncated (and written
// to again); the lines after the pointer are in the copy. With Rotated the
// restart reads them from the copy, in the pointer's epoch, then the input
// from 0. Twice over, the older copy first.
func TestCopyTruncateWhileStopped(t *testing.T) {
	a, b, c := genLines("a", 0, 300), genLines("b", 0, 200), genLines("c", 0, 50)
	for _, twice := range []bool{false, true} {
		p := input(t, a)
		epoch := stopAfter(t, p, 100)
		copyTruncate(t, p, p+".1")
		want := []string{a, b}
		appendTo(t, p, b)
		if twice {
			rename(t, p+".1", p+".2")
			copyTruncate(t, p, p+".1")
			appendTo(t, p, c)
			want = append(want, c)
		}
		s := open(t, p, rotatedConfig())
		g := s.collect()
		wantGenerations(t, g, 100*32, want...)
		if g[0].Epoch != epoch {
			t.Fatalf("the copy read in epoch %d, not the pointer's %d", g[0].Epoch, epoch)
		}
	}
}

// TestCopyTruncateWhileRunning: copytruncate while the source is behind
// (part way through a file longer than its read buffer), and again while
// it is caught up: the lines it had not read are read from the copy, then
// the truncated input's new lines, nothing lost, nothing twice.
func TestCopyTruncateWhileRunning(t *testing.T) {
	a, b, c := genLines("a", 0, 4000), genLines("b", 0, 3000), genLines("c", 0, 100)
	for _, group := range []bool{false, true} {
		p := input(t, a)
		cfg := rotatedConfig()
		cfg.GroupCommit = group
		s := open(t, p, cfg)
		first := s.takeCommit(64)
		copyTruncate(t, p, p+".1")
		appendTo(t, p, b) // past the offset read: not growth of the old file
		all := append(first, s.collect()...)
		wantGenerations(t, all, 0, a, b)
		// Caught up now: rotate again.
		rename(t, p+".1", p+".2")
		appendTo(t, p, genLines("b", 3000, 10))
		copyTruncate(t, p, p+".1")
		appendTo(t, p, c)
		rest := s.collect()
		wantGenerations(t, rest, 3000*32, b+genLines("b", 3000, 10), c)
	}
}

// TestRotateWaitReadsLateWrites: a writer that keeps appending to the file
// after it was renamed away (it has not reopened the path yet): the
// source reads the renamed file until it has been quiet for RotateWait,
// then the new file. The clock is the source's Now, against the files'
// modification times.
func TestRotateWaitReadsLateWrites(t *testing.T) {
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	a, late, b := genLines("a", 0, 50), genLines("a", 50, 20), genLines("b", 0, 30)
	for _, rotated := range []string{"in.log.*", ""} {
		offset.Store(0)
		p := input(t, a)
		s := open(t, p, Config{Rotated: rotated, RotateWait: time.Hour, Now: now})
		g := s.collect()
		rename(t, p, p+".1")
		write(t, p, b)
		// The source notices the rotation, and stays with the renamed
		// file: it has been written to less than an hour ago.
		waitUntil(t, "the source waits for the renamed file to be quiet", func() bool {
			h, err := s.poll()
			if err != nil || len(h) != 0 {
				t.Fatalf("%v %v", h, err)
			}
			return strings.Contains(s.Status().Detail, "until it has been quiet for 1h0m0s")
		})
		appendTo(t, p+".1", late)
		g = append(g, s.takeCommit(20)...)
		// An hour later, it moves on.
		offset.Store(int64(2 * time.Hour))
		g = append(g, s.collect()...)
		wantGenerations(t, g, 0, a+late, b)
	}
}

// TestRotatedBadPattern: a malformed pattern is refused by NewFileSource.
func TestRotatedBadPattern(t *testing.T) {
	_, err := NewFileSource(Config{Path: input(t, "a\n"), Rotated: "in.log.[", Logger: slog.New(slog.DiscardHandler)})
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "in.log.[") {
		t.Fatalf("err %v, want ErrInvalidConfig naming the pattern", err)
	}
}

// TestRotatedWithoutCreateWhilePathMissing: a source caught up on a file
// that is rotated (create), whose new file is written to and rotated in
// turn without a file made at the path (logrotate's nocreate, or a writer
// that has not made its file yet), all between two polls: the lines of the
// rotated file are read while the path names no file, not only once one
// appears there; a file made at the path later is read after them.
// (Found by torture's TestRotationModel: the consumer stalled.)
func TestRotatedWithoutCreateWhilePathMissing(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "in.log")
	cfg := Config{Rotated: "in.log.*", RotateWait: time.Millisecond}
	write(t, p, genLines("first", 0, 100))
	s := open(t, p, cfg)
	s.batches(func([]got) {})
	if err := os.Rename(p, p+".1"); err != nil {
		t.Fatal(err)
	}
	write(t, p, "")
	appendTo(t, p, genLines("second", 0, 105))
	if err := os.Rename(p+".1", p+".2"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(p, p+".1"); err != nil {
		t.Fatal(err)
	}
	g := s.waitLines(105)
	if want := genLines("second", 0, 105); strings.Join(lines(g), "\n")+"\n" != want {
		t.Fatalf("while the path is missing: %d lines, first %q", len(g), g[0].Line)
	}
	if err := s.Commit(g[len(g)-1].Epoch, g[len(g)-1].Position); err != nil {
		t.Fatal(err)
	}
	write(t, p, genLines("third", 0, 3))
	g = s.waitLines(3)
	if want := genLines("third", 0, 3); strings.Join(lines(g), "\n")+"\n" != want {
		t.Fatalf("the file made at the path later: %v", lines(g))
	}
}

// TestRotatedEmptyFilesThenStoppedMidFile: while the source is caught up
// and not polling, its file is rotated, two empty files are made and
// rotated, and a file of lines is written and rotated; the source reads
// part of that file and stops; the empty file at the path is rotated with
// late writes and a new file made. The restart reads the rest of the file
// it stopped in, then the late writes: the case the rotation model test
// (torture) drives at random, reduced.
func TestRotatedEmptyFilesThenStoppedMidFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "in.log")
	cfg := Config{Rotated: "in.log.*", RotateWait: time.Millisecond}
	shift := func() {
		for i := 9; i >= 1; i-- {
			os.Rename(fmt.Sprintf("%s.%d", p, i), fmt.Sprintf("%s.%d", p, i+1))
		}
		if err := os.Rename(p, p+".1"); err != nil {
			t.Fatal(err)
		}
	}
	write(t, p, genLines("A", 0, 50))
	s := open(t, p, cfg)
	s.batches(func([]got) {})
	// paused: rotate A, E1, E2 (empty), then gen6 filled and rotated.
	shift()
	write(t, p, "")
	shift()
	write(t, p, "")
	shift()
	write(t, p, genLines("G6", 0, 267))
	shift()
	write(t, p, "")
	// resumed: reads up to 128 lines of G6
	var all []got
	for len(all) < 128 {
		g, err := s.poll()
		if err != nil {
			t.Fatal(err)
		}
		if len(g) == 0 {
			time.Sleep(time.Millisecond)
			continue
		}
		if len(all)+len(g) > 128 {
			g = g[:128-len(all)]
		}
		all = append(all, g...)
		if err := s.Commit(g[len(g)-1].Epoch, g[len(g)-1].Position); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	// rotate the empty path with late writes, new file
	shift()
	appendTo(t, p+".1", genLines("G7", 0, 18))
	write(t, p, "")
	s = open(t, p, cfg)
	var g []got
	end := time.Now().Add(5 * time.Second)
	for len(g) < 267-128+18 && time.Now().Before(end) {
		b, err := s.poll()
		if err != nil {
			t.Fatal(err)
		}
		if len(b) == 0 {
			time.Sleep(time.Millisecond)
			continue
		}
		g = append(g, b...)
		s.Commit(b[len(b)-1].Epoch, b[len(b)-1].Position)
	}
	if len(g) != 157 {
		t.Fatalf("got %d lines: %v\n%s", len(g), lines(g), s.log)
	}
	if want := genLines("G6", 128, 139) + genLines("G7", 0, 18); strings.Join(lines(g), "\n")+"\n" != want {
		t.Fatalf("after the restart: %v\n%s", lines(g), s.log)
	}
}
