package feed

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/feed/pointer"
)

// This file tests file sets (Config.Paths): every file the globs match read
// as if it were its own feed, one registry for their records.

// setItem is a line of a file set, with its file.
type setItem struct {
	got
	File string
}

// openSet returns a source on the globs of dir, its registry in dir/ptr.
func openSet(t *testing.T, dir string, cfg Config, globs ...string) *tsrc {
	t.Helper()
	for i, g := range globs {
		globs[i] = filepath.Join(dir, g)
	}
	cfg.Paths = globs
	if cfg.PointerDir == "" {
		cfg.PointerDir = filepath.Join(dir, "ptr")
	}
	ts := &tsrc{t: t, log: &logRec{}, items: make([]Item, 64)}
	cfg.Logger = slog.New(ts.log)
	s, err := NewFileSource(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts.FileSource = s
	t.Cleanup(func() { s.Close() })
	return ts
}

// pollSet polls once and copies the lines with their files.
func (ts *tsrc) pollSet() []setItem {
	ts.t.Helper()
	n, err := ts.Poll(context.Background(), ts.items)
	if err != nil {
		ts.t.Fatalf("poll: %v", err)
	}
	out := make([]setItem, n)
	for i, it := range ts.items[:n] {
		if it.File == "" {
			ts.t.Fatalf("item %d of a file set names no file", i)
		}
		out[i] = setItem{got{string(it.Line), it.Position, it.Epoch, it.Seq}, it.File}
	}
	return out
}

// collectSet polls until the set is caught up and a poll delivers nothing,
// committing every batch, and returns the lines by file.
func (ts *tsrc) collectSet() map[string][]got {
	ts.t.Helper()
	out := map[string][]got{}
	for range 100000 {
		g := ts.pollSet()
		if len(g) > 0 {
			for _, x := range g {
				out[x.File] = append(out[x.File], x.got)
			}
			last := g[len(g)-1]
			if err := ts.Commit(last.Epoch, last.Position); err != nil {
				ts.t.Fatal(err)
			}
			continue
		}
		if st := ts.Status(); st.State == StateCaughtUp {
			return out
		}
	}
	ts.t.Fatalf("the set never caught up: %+v\nlog:\n%s", ts.Status(), ts.log)
	return nil
}

// TestSetReadsEveryFile: three files, every line of each, each file its
// own epoch and positions, the items naming their file; the registry holds
// one entry per file and no pointer file is made; a restart reads nothing
// again; an append is read from where its file was.
func TestSetReadsEveryFile(t *testing.T) {
	dir := t.TempDir()
	content := map[string]string{}
	for i, n := range []string{"a.log", "b.log", "c.log"} {
		content[filepath.Join(dir, n)] = genLines(n, 0, 100*(i+1))
		write(t, filepath.Join(dir, n), content[filepath.Join(dir, n)])
	}
	write(t, filepath.Join(dir, "skip.txt"), "not matched\n")
	s := openSet(t, dir, Config{}, "*.log")
	byFile := s.collectSet()
	epochs := map[uint64]bool{}
	for path, want := range content {
		e := wantLines(t, path, byFile[path], want, 0)
		if epochs[e] {
			t.Fatalf("two files share epoch %d", e)
		}
		epochs[e] = true
	}
	if len(byFile) != 3 {
		t.Fatalf("lines of %d files", len(byFile))
	}
	st := s.Status()
	if len(st.Files) != 3 || st.LinesRead != 600 || st.Files[0].Path != filepath.Join(dir, "a.log") {
		t.Fatalf("status %+v", st)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*"+pointer.Suffix)); len(m) != 0 {
		t.Fatalf("pointer files made: %v", m)
	}
	res, err := pointer.OpenRegistry(filepath.Join(dir, "ptr", "files"+pointer.RegistrySuffix), pointer.Options{}).Load()
	if err != nil || len(res.Entries) != 3 || res.Damaged {
		t.Fatalf("registry %+v %v", res, err)
	}
	for path, want := range content {
		if e := res.Entries[path]; e.Position != int64(len(want)) {
			t.Fatalf("entry of %s: %+v", path, e)
		}
	}

	s = openSet(t, dir, Config{}, "*.log")
	if g := s.collectSet(); len(g) != 0 {
		t.Fatalf("a restart delivered again: %v", g)
	}
	b := filepath.Join(dir, "b.log")
	appendTo(t, b, genLines("b.log", 200, 10))
	g := s.collectSet()
	if len(g) != 1 || wantLines(t, "append", g[b], content[b]+genLines("b.log", 200, 10), int64(len(content[b]))) != byFile[b][0].Epoch {
		t.Fatalf("after an append: %v", g)
	}
}

// TestSetStopMidwayResumesEachFile: stopped with each file part way, the
// restart reads each from its own committed position.
func TestSetStopMidwayResumesEachFile(t *testing.T) {
	dir := t.TempDir()
	paths := writeSet(t, dir, 5, 300)
	s := openSet(t, dir, Config{}, "f*.log")
	committed := map[string]int64{}
	epochs := map[string]uint64{}
	for range 12 { // 12 batches of 64 lines: every file part way at most
		g := s.pollSet()
		if len(g) == 0 {
			break
		}
		last := g[len(g)-1]
		if err := s.Commit(last.Epoch, last.Position); err != nil {
			t.Fatal(err)
		}
		committed[last.File] = last.Position
		epochs[last.File] = last.Epoch
	}
	s.Close()
	s = openSet(t, dir, Config{}, "f*.log")
	g := s.collectSet()
	for i, p := range paths {
		want := genLines(fmt.Sprintf("f%d", i), 0, 300)
		if committed[p] == int64(len(want)) {
			if len(g[p]) != 0 {
				t.Fatalf("%s finished, read again: %d lines", p, len(g[p]))
			}
			continue
		}
		if e := wantLines(t, p, g[p], want, committed[p]); epochs[p] != 0 && e != epochs[p] {
			t.Fatalf("%s resumed in epoch %d, want %d", p, e, epochs[p])
		}
	}
}

// TestSetCommitCoversEarlierFiles: a commit of a line of one file says
// every line handed out before it, of every file, is processed.
func TestSetCommitCoversEarlierFiles(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.log"), filepath.Join(dir, "b.log")
	write(t, a, genLines("a", 0, 10))
	write(t, b, genLines("b", 0, 10))
	s := openSet(t, dir, Config{}, "*.log")
	g1 := s.pollSet()
	g2 := s.pollSet()
	if len(g1) != 10 || len(g2) != 10 || g1[0].File == g2[0].File {
		t.Fatalf("polls: %d lines of %s, %d of %s", len(g1), g1[0].File, len(g2), g2[0].File)
	}
	// Commit the fifth line of the second file only.
	if err := s.Commit(g2[4].Epoch, g2[4].Position); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	st := s.Status()
	byPath := map[string]Status{}
	for _, f := range st.Files {
		byPath[f.Path] = f
	}
	if byPath[g1[0].File].CommittedPosition != g1[9].Position || byPath[g2[0].File].CommittedPosition != g2[4].Position {
		t.Fatalf("committed %d and %d, want %d and %d", byPath[g1[0].File].CommittedPosition, byPath[g2[0].File].CommittedPosition, g1[9].Position, g2[4].Position)
	}
}

// TestSetNewFileAndExclude: a file that appears later is found at the next
// scan and read from 0; files Exclude matches are left out.
func TestSetNewFileAndExclude(t *testing.T) {
	dir := t.TempDir()
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	write(t, filepath.Join(dir, "a.log"), genLines("a", 0, 10))
	write(t, filepath.Join(dir, "debug-x.log"), genLines("d", 0, 10))
	s := openSet(t, dir, Config{Now: clock, Exclude: []string{"debug-*"}}, "*.log")
	g := s.collectSet()
	if len(g) != 1 || len(g[filepath.Join(dir, "a.log")]) != 10 {
		t.Fatalf("first: %v", g)
	}
	c := filepath.Join(dir, "c.log")
	write(t, c, genLines("c", 0, 7))
	if g := s.collectSet(); len(g) != 0 {
		t.Fatalf("found before the scan interval: %v", g)
	}
	now.Add(int64(2 * DefaultScanInterval))
	g = s.collectSet()
	wantLines(t, "new file", g[c], genLines("c", 0, 7), 0)
}

// TestSetRotatedMembers: each file of a set follows its own rotations
// ({name} in Rotated), and the rotated files are not files of the set.
func TestSetRotatedMembers(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.log"), filepath.Join(dir, "b.log")
	write(t, a, genLines("a", 0, 100))
	write(t, b, genLines("b", 0, 100))
	cfg := Config{Rotated: "{name}.*", RotateWait: -1}
	s := openSet(t, dir, cfg, "*.log*")
	first := s.collectSet()
	s.Close()
	rotateNumbered(t, a)
	write(t, a, genLines("a2", 0, 30))
	rotateNumbered(t, a)
	write(t, a, genLines("a3", 0, 20))
	s = openSet(t, dir, cfg, "*.log*")
	g := s.collectSet()
	if len(g) != 1 {
		t.Fatalf("lines of %d files (the rotated files are files of the set?): %v", len(g), slices.Collect(mapsKeys(g)))
	}
	wantGenerations(t, g[a], 0, genLines("a2", 0, 30), genLines("a3", 0, 20))
	if len(first[a]) != 100 || len(first[b]) != 100 {
		t.Fatalf("first run: %d and %d lines", len(first[a]), len(first[b]))
	}
}

func mapsKeys(m map[string][]got) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestSetMigratesSinglePointer: a feed that followed one file with its own
// pointer file, made a set over that file's folder with the same
// PointerDir: the file goes on from its pointer, in its epoch, and the
// pointer file is moved into the registry.
func TestSetMigratesSinglePointer(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.log")
	content := genLines("a", 0, 200)
	write(t, a, content)
	ptrDir := filepath.Join(dir, "ptr")
	one := open(t, a, Config{PointerDir: ptrDir})
	g := one.takeCommit(64)
	epoch, pos := g[0].Epoch, g[63].Position
	one.Close()
	s := openSet(t, dir, Config{PointerDir: ptrDir}, "*.log")
	got := s.collectSet()
	if e := wantLines(t, "migrated", got[a], content, pos); e != epoch {
		t.Fatalf("epoch %d, want %d", e, epoch)
	}
	if _, err := os.Stat(pointer.Path(a, ptrDir)); !os.IsNotExist(err) {
		t.Fatalf("the single-file pointer is still there: %v", err)
	}
	if len(s.log.find(slog.LevelInfo, "moved a single-file pointer")) != 1 {
		t.Fatalf("log:\n%s", s.log)
	}
}

// TestSetFileGone: a file read to its end and removed is marked finished,
// closed, and forgotten after ForgetAfter; a registry entry of a file gone
// while the feed was stopped, not finished, is reported.
func TestSetFileGone(t *testing.T) {
	dir := t.TempDir()
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	a, b := filepath.Join(dir, "a.log"), filepath.Join(dir, "b.log")
	write(t, a, genLines("a", 0, 10))
	write(t, b, genLines("b", 0, 200))
	cfg := Config{Now: clock, ForgetAfter: time.Hour}
	s := openSet(t, dir, cfg, "*.log")
	s.collectSet()
	if err := os.Remove(a); err != nil {
		t.Fatal(err)
	}
	now.Add(int64(2 * DefaultScanInterval))
	s.collectSet()
	now.Add(int64(2 * DefaultScanInterval))
	s.collectSet()
	if len(s.log.find(slog.LevelInfo, "finished and gone")) != 1 {
		t.Fatalf("not marked finished:\n%s", s.log)
	}
	regPath := filepath.Join(dir, "ptr", "files"+pointer.RegistrySuffix)
	// Still in the registry, marked finished.
	s.Flush()
	now.Add(int64(2 * time.Hour))
	s.collectSet()
	if len(s.log.find(slog.LevelInfo, "forgot a finished file")) != 1 {
		t.Fatalf("not forgotten:\n%s", s.log)
	}
	s.Close()
	res, err := pointer.OpenRegistry(regPath, pointer.Options{}).Load()
	if err != nil || len(res.Entries) != 1 {
		t.Fatalf("registry: %+v %v", res, err)
	}

	// b stopped part way, removed while stopped: reported at the start.
	s = openSet(t, dir, cfg, "*.log")
	appendTo(t, b, genLines("b", 200, 10))
	s.Close()
	if err := os.Remove(b); err != nil {
		t.Fatal(err)
	}
	s = openSet(t, dir, cfg, "*.log")
	s.pollSet()
	if len(s.log.find(slog.LevelWarn, "gone (removed, renamed or no longer matched while the feed was stopped)")) != 1 {
		t.Fatalf("not reported:\n%s", s.log)
	}
}

// TestSetResumeFromStores: the floor of the stores, per file: a store
// whose record of one file is behind makes that file read again from the
// store's position; a store without a record of a file makes it read
// from 0; other files start where the registry says.
func TestSetResumeFromStores(t *testing.T) {
	dir := t.TempDir()
	a, b, c := filepath.Join(dir, "a.log"), filepath.Join(dir, "b.log"), filepath.Join(dir, "c.log")
	ca, cb, cc := genLines("a", 0, 100), genLines("b", 0, 100), genLines("c", 0, 100)
	write(t, a, ca)
	write(t, b, cb)
	write(t, c, cc)
	s := openSet(t, dir, Config{}, "*.log")
	first := s.collectSet()
	s.Close()
	l := func(path string, pos int64) tidemark.Lineage {
		l := lineageOf(t, path, first[path][0].Epoch, pos)
		l.File = path
		return l
	}
	s = openSet(t, dir, Config{}, "*.log")
	err := s.ResumeFrom([]ResumePoint{
		{Holder: "store 1", Found: true, Lineage: l(a, 32*40)},
		{Holder: "store 1", Found: true, Lineage: l(b, int64(len(cb)))},
		{Holder: "store 1", Found: true, Lineage: l(c, int64(len(cc)))},
		{Holder: "store 2", Found: true, Lineage: l(a, int64(len(ca)))},
		{Holder: "store 2", Found: true, Lineage: l(c, int64(len(cc)))},
	})
	if err != nil {
		t.Fatal(err)
	}
	g := s.collectSet()
	wantLines(t, "a, from store 1's position", g[a], ca, 32*40)
	wantLines(t, "b, store 2 has no record of it", g[b], cb, 0)
	if len(g[c]) != 0 {
		t.Fatalf("c read again: %d lines", len(g[c]))
	}
	if st := s.Status(); st.Rewinds != 2 {
		t.Fatalf("rewinds %d, want 2", st.Rewinds)
	}
}

// TestSetConfigErrors: the mistakes a set's config can hold.
func TestSetConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Paths: []string{"*.log"}}, "PointerDir"},
		{Config{Paths: []string{"*.log"}, Path: "a.log", PointerDir: "p"}, "both Path"},
		{Config{Paths: []string{"[.log"}, PointerDir: "p"}, "not a valid pattern"},
		{Config{Paths: []string{"*.log"}, PointerDir: "p", Rotated: "*.1"}, "{name}"},
		{Config{Paths: []string{"*.log"}, PointerDir: "p", Name: "a/b"}, "path separator"},
	} {
		_, err := NewFileSource(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error about %s", tc.cfg, err, tc.want)
		}
	}
}

// writeSet writes n files f0.log, f1.log… in dir, each of lines lines
// (genLines with the prefix f0, f1…), and returns their paths in order.
func writeSet(t *testing.T, dir string, n, lines int) []string {
	t.Helper()
	var paths []string
	for i := range n {
		p := filepath.Join(dir, fmt.Sprintf("f%d.log", i))
		write(t, p, genLines(fmt.Sprintf("f%d", i), 0, lines))
		paths = append(paths, p)
	}
	return paths
}
