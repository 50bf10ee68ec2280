package feed

import (
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark-go/tidemark/feed/pointer"
	"github.com/tidemark-go/tidemark/vfs"
)

// This file tests a file of a set renamed to another name the set's
// patterns match (issue 16's double application): the file keeps its
// epoch and position under its new name, so none of its lines is
// delivered again, in every way a rotation can meet the source.

// renameRun drives a file set and checks every line it is handed: each
// line (they are all distinct) is handed out once in the whole test, and
// by the end every line written has been.
type renameRun struct {
	t      *testing.T
	dir    string
	cfg    Config
	globs  []string
	s      *tsrc
	seen   map[string]string // line -> the file it was handed out under
	epoch  map[string]uint64 // line -> its epoch
	lines  []string          // every line written, in order
	writes int
}

func newRenameRun(t *testing.T, cfg Config, globs ...string) *renameRun {
	cfg.ScanInterval = time.Nanosecond // every Poll matches the globs again
	r := &renameRun{t: t, dir: t.TempDir(), cfg: cfg, globs: globs, seen: map[string]string{}, epoch: map[string]uint64{}}
	return r
}

func (r *renameRun) path(name string) string { return filepath.Join(r.dir, name) }

// write appends n new lines, prefixed by the file's name, to name.
func (r *renameRun) write(name string, n int) {
	r.t.Helper()
	from := len(r.lines)
	// The write's number keeps lines of files that take the same name in
	// turn distinct.
	r.writes++
	content := genLines(name+"#"+strconv.Itoa(r.writes), from, n)
	appendTo(r.t, r.path(name), content)
	r.lines = append(r.lines, strings.Split(strings.TrimSuffix(content, "\n"), "\n")...)
}

func (r *renameRun) rename(from, to string) {
	r.t.Helper()
	if err := os.Rename(r.path(from), r.path(to)); err != nil {
		r.t.Fatal(err)
	}
}

func (r *renameRun) open() {
	r.t.Helper()
	r.s = openSet(r.t, r.dir, r.cfg, slices.Clone(r.globs)...)
}

func (r *renameRun) close() {
	r.t.Helper()
	if err := r.s.Close(); err != nil {
		r.t.Fatal(err)
	}
	r.s = nil
}

// note records lines handed out, failing on a line handed out before.
func (r *renameRun) note(g []setItem) {
	r.t.Helper()
	for _, x := range g {
		if f, ok := r.seen[x.Line]; ok {
			r.t.Fatalf("line %q handed out again under %s (first under %s)\nlog:\n%s", x.Line, x.File, f, r.s.log)
		}
		r.seen[x.Line] = x.File
		r.epoch[x.Line] = x.Epoch
	}
}

// pollOnce polls once without committing.
func (r *renameRun) pollOnce() {
	r.t.Helper()
	r.note(r.s.pollSet())
}

// collect polls, committing each batch, until the set is caught up and
// several polls in a row hand out nothing (each poll matches the globs
// again, so a renamed file is seen).
func (r *renameRun) collect() {
	r.t.Helper()
	quiet := 0
	for range 100000 {
		g := r.s.pollSet()
		r.note(g)
		if len(g) > 0 {
			quiet = 0
			last := g[len(g)-1]
			if err := r.s.Commit(last.Epoch, last.Position); err != nil {
				r.t.Fatal(err)
			}
			continue
		}
		if st := r.s.Status(); st.State == StateCaughtUp || st.State == StateWaiting {
			if quiet++; quiet == 5 {
				return
			}
		}
	}
	r.t.Fatalf("the set never caught up: %+v\nlog:\n%s", r.s.Status(), r.s.log)
}

// wantAll checks that every line written was handed out.
func (r *renameRun) wantAll() {
	r.t.Helper()
	for _, l := range r.lines {
		if _, ok := r.seen[l]; !ok {
			r.t.Fatalf("line %q never handed out (%d of %d seen)\nlog:\n%s", l, len(r.seen), len(r.lines), r.s.log)
		}
	}
}

// sameEpoch checks that the lines of name's first and last generation
// written so far were handed out in one epoch (the file kept its position
// space across its renames), the last under file.
func (r *renameRun) sameEpoch(first, last string) {
	r.t.Helper()
	if r.epoch[first] == 0 || r.epoch[first] != r.epoch[last] {
		r.t.Fatalf("%q in epoch %d, %q in epoch %d: the renamed file was not read on in its epoch", first, r.epoch[first], last, r.epoch[last])
	}
}

func TestSetRenamedFileNotReadAgain(t *testing.T) {
	logrotate := func(r *renameRun) { // numbered: app.1.log -> app.2.log, app.log -> app.1.log, new app.log
		if _, err := os.Stat(r.path("app.1.log")); err == nil {
			r.rename("app.1.log", "app.2.log")
		}
		r.rename("app.log", "app.1.log")
		r.write("app.log", 20)
	}
	rows := []struct {
		name  string
		cfg   Config
		globs []string
		run   func(r *renameRun)
	}{
		{"while running", Config{}, []string{"*.log"}, func(r *renameRun) {
			r.write("app.log", 100)
			r.collect()
			r.rename("app.log", "app-20261201.log")
			r.collect()
			r.write("app-20261201.log", 10) // a writer that has not reopened
			r.collect()
			r.sameEpoch(r.lines[0], r.lines[len(r.lines)-1])
			if f := r.seen[r.lines[len(r.lines)-1]]; f != r.path("app-20261201.log") {
				r.t.Fatalf("a late write handed out under %s", f)
			}
		}},
		{"while running, a new file at the old name", Config{}, []string{"*.log"}, func(r *renameRun) {
			r.write("app.log", 100)
			r.collect()
			r.rename("app.log", "app-20261201.log")
			r.write("app.log", 30)
			r.collect()
			r.write("app-20261201.log", 10)
			r.write("app.log", 5)
			r.collect()
		}},
		{"while behind (a paused consumer)", Config{}, []string{"*.log"}, func(r *renameRun) {
			r.write("app.log", 300)
			r.pollOnce() // 64 lines handed out, not committed
			r.rename("app.log", "app-20261201.log")
			r.write("app.log", 30)
			r.write("app-20261201.log", 10)
			r.collect()
			r.sameEpoch(r.lines[0], r.lines[339])
		}},
		{"while stopped", Config{}, []string{"*.log"}, func(r *renameRun) {
			r.write("app.log", 100)
			r.collect()
			r.close()
			r.rename("app.log", "app-20261201.log")
			r.write("app-20261201.log", 10)
			r.write("app.log", 30)
			r.open()
			r.collect()
			r.sameEpoch(r.lines[0], r.lines[109])
			// Not read again either: the bytes read are those of the
			// late writes and of the new file (40 lines of 32 bytes).
			if n := r.s.Status().BytesRead; n != 40*32 {
				r.t.Fatalf("%d bytes read after the restart, want %d", n, 40*32)
			}
		}},
		{"while stopped part way", Config{}, []string{"*.log"}, func(r *renameRun) {
			r.write("app.log", 300)
			r.pollOnce()
			last := r.lines[63]
			if err := r.s.Commit(r.epoch[last], int64(64*32)); err != nil {
				r.t.Fatal(err)
			}
			r.close()
			r.rename("app.log", "app.1.log")
			r.write("app.log", 30)
			r.open()
			r.collect()
			r.sameEpoch(r.lines[0], r.lines[299])
		}},
		{"renamed twice while running", Config{}, []string{"*.log"}, func(r *renameRun) {
			r.write("app.log", 100)
			r.collect()
			logrotate(r)
			r.collect()
			r.write("app.1.log", 5)
			logrotate(r)
			r.collect()
			r.write("app.2.log", 5)
			r.write("app.1.log", 5)
			r.collect()
		}},
		{"renamed twice between two polls while behind", Config{}, []string{"*.log"}, func(r *renameRun) {
			r.write("app.log", 100)
			r.collect()
			logrotate(r) // app.log -> app.1.log
			r.write("app.1.log", 100)
			r.collect()
			r.write("app.log", 200)
			r.pollOnce()
			logrotate(r) // app.1.log -> app.2.log, app.log -> app.1.log, at once
			r.write("app.2.log", 5)
			r.write("app.1.log", 5)
			r.collect()
		}},
		{"rotated over a deleted file being read, the renamed file's reader first to see it", Config{}, []string{"*.log"}, func(r *renameRun) {
			// As above, but the reader of the file renamed (app.log) is at
			// its end and the reader of the deleted one far behind: the
			// first asks to leave first, and must wait for the other.
			r.write("app.log", 100)
			r.collect()
			logrotate(r)
			r.collect()
			r.write("app.1.log", 3000)
			if err := os.Remove(r.path("app.1.log")); err != nil {
				r.t.Fatal(err)
			}
			r.rename("app.log", "app.1.log")
			r.write("app.log", 20)
			r.write("app.1.log", 10)
			r.collect()
		}},
		{"rotated over a deleted file between two polls while behind", Config{}, []string{"*.log"}, func(r *renameRun) {
			// logrotate's rotate 1: app.1.log removed, app.log renamed to
			// app.1.log, a new app.log, with lines of both not read yet.
			r.write("app.log", 100)
			r.collect()
			logrotate(r)
			r.collect()
			r.write("app.1.log", 100)
			r.write("app.log", 200)
			r.pollOnce()
			if err := os.Remove(r.path("app.1.log")); err != nil {
				r.t.Fatal(err)
			}
			r.rename("app.log", "app.1.log")
			r.write("app.log", 20)
			r.collect()
			if len(r.s.log.find(slog.LevelInfo, "its path is left to that file")) == 0 {
				r.t.Fatalf("the reader of the deleted file did not leave its path to the renamed file:\n%s", r.s.log)
			}
		}},
		{"renamed twice while stopped", Config{}, []string{"*.log"}, func(r *renameRun) {
			r.write("app.log", 100)
			r.collect()
			r.close()
			logrotate(r)
			r.open()
			r.collect()
			r.close()
			r.write("app.1.log", 5)
			logrotate(r)
			r.write("app.2.log", 5)
			r.open()
			r.collect()
		}},
		{"renamed then compressed while running", Config{}, []string{"app*"}, func(r *renameRun) {
			r.write("app.log", 100)
			r.collect()
			r.rename("app.log", "app-20261201.log")
			r.write("app.log", 10)
			r.collect()
			compress(r.t, r.path("app-20261201.log"))
			r.collect()
		}},
		{"renamed then compressed while stopped", Config{}, []string{"app*"}, func(r *renameRun) {
			r.write("app.log", 100)
			r.collect()
			r.close()
			r.rename("app.log", "app-20261201.log")
			r.write("app.log", 10)
			compress(r.t, r.path("app-20261201.log"))
			r.open()
			r.collect()
		}},
		{"renamed to a name Exclude matches, while stopped", Config{Exclude: []string{"app-*"}}, []string{"*.log"}, func(r *renameRun) {
			r.write("app.log", 100)
			r.collect()
			r.close()
			r.rename("app.log", "app-20261201.log")
			r.write("app-20261201.log", 10)
			r.write("app.log", 10)
			r.open()
			r.collect()
		}},
		{"renamed to a name Exclude matches, while running", Config{Exclude: []string{"app-*"}}, []string{"*.log"}, func(r *renameRun) {
			r.write("app.log", 100)
			r.collect()
			r.rename("app.log", "app-20261201.log")
			r.write("app-20261201.log", 10)
			r.write("app.log", 10)
			r.collect()
		}},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			r := newRenameRun(t, row.cfg, row.globs...)
			r.open()
			row.run(r)
			r.collect()
			r.wantAll()
			// A restart hands out nothing again.
			r.close()
			r.open()
			r.collect()
			r.close()
		})
	}
}

// TestSetFileRenamedAsItsStreamStarts renames a file of a set to another
// name of the set (with a new file at the old name) between the scan that
// lists the set and the open of the file by its stream, at a restart (as
// TestFileSetModel's writer did once at load 3): the stream finds its
// entry's file under the new name, as a single file's source finds its
// input renamed away while stopped, and must not leave it before the set
// has looked for that name, else the set, finding the new name after the
// stream left the file, takes it for a new file and reads it again from 0.
func TestSetFileRenamedAsItsStreamStarts(t *testing.T) {
	for _, row := range []struct {
		name  string
		late  int           // lines written to the file before the restart, after those read
		every time.Duration // the scan interval
	}{
		{"read to its end", 0, 0},
		{"with lines after its entry", 20, 0},
		{"with lines after its entry, scans far apart", 20, time.Hour},
	} {
		t.Run(row.name, func(t *testing.T) {
			var armed atomic.Bool
			var r *renameRun
			inj := func(op vfs.Op, path string) error {
				if op == vfs.OpOpen && path == r.path("app.log") && armed.CompareAndSwap(true, false) {
					r.rename("app.log", "app-1.log")
					r.write("app.log", 30)
				}
				return nil
			}
			r = newRenameRun(t, Config{FS: vfs.Inject(vfs.Default(), inj)}, "*.log")
			if row.every > 0 {
				r.cfg.ScanInterval = row.every
			}
			r.open()
			r.write("app.log", 100)
			r.collect()
			r.close()
			if row.late > 0 {
				r.write("app.log", row.late)
			}
			armed.Store(true)
			r.open()
			r.collect()
			if armed.Load() {
				t.Fatal("the file was not opened at the restart")
			}
			if len(r.s.log.find(slog.LevelInfo, "it is read on under its new name")) == 0 {
				t.Fatalf("the renamed file was not followed to its new name:\n%s", r.s.log)
			}
			// The next restart reads the new name's file if no scan
			// did (scans far apart): nothing of it again.
			r.close()
			r.open()
			r.collect()
			r.wantAll()
			r.sameEpoch(r.lines[0], r.lines[99+row.late])
			r.close()
		})
	}
}

// TestSetDuplicateEntriesRenamedAgain: a crash between the two writes of
// an entry's move (stored under the file's new name, not yet forgotten
// under the old one) leaves two entries of one file; renamed again while
// the source is stopped, to a third name, with new files at both names of
// the entries (as TestFileSetModel's writer did once), the file is read
// once: the first scan gives the third name one of the entries and forgets
// the other, whose name's new file is read from 0 as a new file, not as
// the old one renamed away (its lines read twice, by two streams).
func TestSetDuplicateEntriesRenamedAgain(t *testing.T) {
	r := newRenameRun(t, Config{}, "*.log")
	r.open()
	r.write("app.log", 100)
	r.collect()
	r.rename("app.log", "app-1.log")
	r.collect()
	r.close()
	reg := pointer.OpenRegistry(filepath.Join(r.dir, "ptr", "files"+pointer.RegistrySuffix), pointer.Options{})
	if err := reg.Lock(); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Load(); err != nil {
		t.Fatal(err)
	}
	e, ok := reg.Entry(r.path("app-1.log"))
	if !ok {
		t.Fatalf("no entry for app-1.log: %v", reg.Entries())
	}
	if err := reg.Store(r.path("app.log"), e); err != nil { // the crash: not forgotten under the old name
		t.Fatal(err)
	}
	if err := reg.Close(); err != nil {
		t.Fatal(err)
	}
	r.rename("app-1.log", "app-2.log")
	r.write("app-2.log", 10)
	r.write("app-1.log", 20)
	r.write("app.log", 30)
	r.open()
	r.collect()
	r.wantAll()
	r.sameEpoch(r.lines[0], r.lines[109])
	r.close()
	r.open()
	r.collect()
	r.close()
}

// TestSetFileRenamedAgainWhileTheSetLooks renames a file of a set, whose
// reader asked to leave it (its path names a new file), once more between
// the scan's listing and its stat of the name the listing had: that scan
// sees the file at no name of the set, and the reader must not leave it on
// that alone (the next scan lists the new name), else the new name is
// taken for a new file and read again from 0.
func TestSetFileRenamedAgainWhileTheSetLooks(t *testing.T) {
	var armed atomic.Bool
	var r *renameRun
	inj := func(op vfs.Op, path string) error {
		if op == vfs.OpStat && path == r.path("app-1.log") && armed.CompareAndSwap(true, false) {
			r.rename("app-1.log", "app-2.log")
		}
		return nil
	}
	r = newRenameRun(t, Config{FS: vfs.Inject(vfs.Default(), inj)}, "*.log")
	r.cfg.ScanInterval = time.Hour // scans only when a reader asks
	r.open()
	r.write("app.log", 100)
	r.collect()
	r.rename("app.log", "app-1.log")
	r.write("app.log", 30)
	armed.Store(true)
	r.collect()
	if armed.Load() {
		t.Fatal("the set never looked at app-1.log")
	}
	r.write("app-2.log", 10)
	r.close()
	r.open()
	r.collect()
	r.wantAll()
	r.sameEpoch(r.lines[0], r.lines[139])
	r.close()
}
