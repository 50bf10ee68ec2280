package state

import (
	"slices"
	"testing"

	"github.com/tidemark-go/tidemark"
)

// TestFileRenamedInASet: a file of a file set renamed within the set keeps
// its epoch under its new name (the feed follows it). The store recognises
// the lines it applied under the old name, whatever happened to the old
// name's record since (a new file there, recording its own epoch), and
// across a restart of the store; the record moves to the new name.
func TestFileRenamedInASet(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		for _, tc := range []struct {
			name string
			// newAtOld: a new file at the old name applies lines before the
			// renamed file is delivered under its new name; restart: the
			// store is closed and opened again before that delivery.
			newAtOld, restart bool
		}{
			{"renamed", false, false},
			{"renamed, store restarted", false, true},
			{"renamed, a new file at the old name first", true, false},
			{"renamed, a new file at the old name first, store restarted", true, true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				dir := t.TempDir()
				s := mustOpen(t, be, dir, testOpts())
				old := &file{data: lines(300, 'a'), ident: tidemark.Identity{Dev: 1, Ino: 2}}
				at := func(file string, epoch uint64, n int, o *tidemark.Origin) tidemark.Delivery {
					d := fileDel(file, epoch, n)
					d.Origin = o
					return d
				}
				o1 := old.origin()
				for n := 1; n <= 200; n++ {
					applyLine(t, s, at("app.log", 1, n, o1))
				}
				if tc.newAtOld {
					fresh := &file{data: lines(50, 'b'), ident: tidemark.Identity{Dev: 1, Ino: 3}}
					o2 := fresh.origin()
					for n := 1; n <= 50; n++ {
						if !applyLine(t, s, at("app.log", 2, n, o2)) {
							t.Fatalf("line %d of the new file at the old name skipped", n)
						}
					}
				}
				if tc.restart {
					s = reopen(t, be, dir, s)
				}
				// The renamed file, read again from 150 under its new name
				// (its pointer lagged the store), then on.
				o3 := old.origin()
				applied := 0
				for n := 150; n <= 300; n++ {
					if applyLine(t, s, at("app-20261201.log", 1, n, o3)) {
						applied++
					}
				}
				if applied != 100 {
					t.Fatalf("applied %d lines of the renamed file, want 100 (lines 201 to 300)", applied)
				}
				want := int64(300)
				if tc.newAtOld {
					want += 50
				}
				if n := getInt(t, s, "count"); n != want {
					t.Fatalf("count %d, want %d", n, want)
				}
				s = reopen(t, be, dir, s)
				all := s.AppliedAll("logs")
				i := slices.IndexFunc(all, func(l tidemark.Lineage) bool { return l.File == "app-20261201.log" })
				if i < 0 || all[i].Epoch != 1 || all[i].Position != 300*lineLen {
					t.Fatalf("records %+v: the renamed file's is not epoch 1 at %d", all, 300*lineLen)
				}
				// Delivered again after a restart of the feed: nothing applied.
				for n := 1; n <= 300; n++ {
					if applyLine(t, s, at("app-20261201.log", 1, n, o3)) {
						t.Fatalf("line %d applied again", n)
					}
				}
			})
		}
	})
}

// fileDel is line n of file of the file set "logs".
func fileDel(file string, epoch uint64, n int) tidemark.Delivery {
	d := del("logs", epoch, n)
	d.File = file
	return d
}

// reopen closes s and opens the store in dir again.
func reopen(t *testing.T, be backend, dir string, s Store) Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return mustOpen(t, be, dir, testOpts())
}

// TestEpochLeftBehindIsKept: a file of a set whose name records a new
// epoch (a new file at its name) leaves the old epoch's record under a
// name of its own, found by epoch (AppliedAll, and a delivery of that
// epoch under another file), and deleted once another file takes it.
func TestEpochLeftBehindIsKept(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		dir := t.TempDir()
		s := mustOpen(t, be, dir, testOpts())
		d := fileDel
		applyLine(t, s, d("app.log", 1, 10))
		applyLine(t, s, d("app.log", 2, 3))
		s = reopen(t, be, dir, s)
		all := s.AppliedAll("logs")
		if len(all) != 2 || all[0].Epoch != 1 || all[0].Position != 10*lineLen || all[1].File != "app.log" || all[1].Epoch != 2 {
			t.Fatalf("records %+v: want epoch 1 kept, and app.log in epoch 2", all)
		}
		// A line of the epoch left behind, then the next line of the
		// renamed file.
		skipsThenApplies(t, s, d("app.1.log", 1, 10), d("app.1.log", 1, 11))
		s = reopen(t, be, dir, s)
		all = s.AppliedAll("logs")
		if len(all) != 2 || all[0].File != "app.1.log" || all[0].Epoch != 1 || all[1].File != "app.log" {
			t.Fatalf("records %+v: want app.1.log in epoch 1 and app.log, the epoch left behind deleted", all)
		}
	})
}

// TestEpochLeftBehindAtItsHighest: a file renamed twice (app.log to
// app.1.log to app.2.log) leaves its epoch under the old names at the
// positions each had: the one kept when app.1.log records a new epoch is
// the highest, not the stale one of app.log.
func TestEpochLeftBehindAtItsHighest(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		dir := t.TempDir()
		s := mustOpen(t, be, dir, testOpts())
		d := fileDel
		applyLine(t, s, d("app.log", 1, 10))
		applyLine(t, s, d("app.1.log", 1, 20)) // renamed, read on
		applyLine(t, s, d("app.1.log", 3, 1))  // renamed on; a new file took its name
		s = reopen(t, be, dir, s)
		for n := 11; n <= 20; n++ {
			if applyLine(t, s, d("app.2.log", 1, n)) {
				t.Fatalf("line %d of the file renamed twice applied again", n)
			}
		}
		if !applyLine(t, s, d("app.2.log", 1, 21)) {
			t.Fatal("the next line of the file renamed twice not applied")
		}
	})
}
