package state

import (
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// countedCheck returns options that count the checks of a Pebble
// database's levels at open.
func countedCheck() (*Options, *atomic.Int32) {
	var n atomic.Int32
	o := testOpts()
	o.hooks = &hooks{pebbleCheck: func() { n.Add(1) }}
	return o, &n
}

// A Pebble database the store left checked at its last clean close is not
// checked again before the next open; any other is: a database written
// after the close (even a byte rewritten with its own value), a copy of the
// folder, a run without checks. The record is gone while the store is open,
// so a crash leaves none.
func TestPebbleLeftCheckedSkipsTheCheckAtOpen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	be := backend{name: Pebble, open: OpenPebble}
	line := 0
	step := func(name string, wantCheck bool) {
		t.Helper()
		o, checks := countedCheck()
		s := mustOpen(t, be, dir, o)
		if got := checks.Load() > 0; got != wantCheck {
			t.Errorf("%s: the levels were checked at open: %v, want %v", name, got, wantCheck)
		}
		if _, err := os.Stat(filepath.Join(dir, pebbleLeftFile)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: the record is there while the store is open: %v", name, err)
		}
		line++
		addKeys(t, s, line)
		if err := s.Close(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := os.Stat(filepath.Join(dir, pebbleLeftFile)); err != nil {
			t.Fatalf("%s: no record after a clean close: %v", name, err)
		}
	}
	step("a new store", false)
	step("the database as the store left it", false)
	step("again", false)
	// A byte of a table written over with its own value: its time moves.
	rewriteByte(t, largestTable(t, dir), 100)
	step("a byte rewritten after the close", true)
	step("left checked again", false)
	// A copy of the folder with every file's time kept: other inodes.
	cp := t.TempDir()
	if err := os.CopyFS(cp, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	if err := filepath.WalkDir(filepath.Join(dir, pebbleDir), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		return os.Chtimes(filepath.Join(cp, rel), fi.ModTime(), fi.ModTime())
	}); err != nil {
		t.Fatal(err)
	}
	dir = cp
	step("a copy of the folder", true)
	// A run without checks records nothing: the next open checks.
	line++
	runWithoutChecks(t, be, dir, func(s Store) { addKeys(t, s, line) })
	if _, err := os.Stat(filepath.Join(dir, pebbleLeftFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a record after a run without checks: %v", err)
	}
	step("after a run without checks", true)
	if sum := sumInt64s(t, mustOpen(t, be, dir, testOpts()), "acct"); sum != 3000*int64(line) {
		t.Errorf("sum %d, want %d", sum, 3000*line)
	}
}

// largestTable returns the path of the largest table of the Pebble
// database of the store in dir.
func largestTable(t *testing.T, dir string) string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, pebbleDir, "*.sst"))
	if err != nil || len(names) == 0 {
		t.Fatalf("no table in %s (%v)", filepath.Join(dir, pebbleDir), err)
	}
	best, size := "", int64(-1)
	for _, n := range names {
		fi, err := os.Stat(n)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > size {
			best, size = n, fi.Size()
		}
	}
	return best
}

// Damage at rest that leaves every file's size, time and inode as recorded
// (a bit flipped by the disk) is found by the background read of the
// database the open starts instead of the check: the store fails without a
// read of the damaged keys, and records nothing at its close, so the next
// open checks the levels and refuses the database.
func TestPebbleLeftCheckedDamageAtRestStillFails(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	be := backend{name: Pebble, open: OpenPebble}
	s := mustOpen(t, be, dir, testOpts())
	addKeys(t, s, 1)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	rec, err := os.ReadFile(filepath.Join(dir, pebbleLeftFile))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := parsePebbleLeft(rec); !ok {
		t.Fatalf("record does not parse: %q", rec)
	}
	sst := largestTable(t, dir)
	fi, err := os.Stat(sst)
	if err != nil {
		t.Fatal(err)
	}
	whole, err := os.ReadFile(sst)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(sst, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	// A table's data blocks come first: a byte a quarter into it is in one.
	at := fi.Size() / 4
	b := []byte{whole[at] ^ 0x10}
	if _, err := f.WriteAt(b, at); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(sst, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}

	o, checks := countedCheck()
	s = mustOpen(t, be, dir, o)
	if checks.Load() != 0 {
		t.Fatal("the database as recorded: its levels were checked at open")
	}
	select {
	case <-s.Failed():
	case <-time.After(time.Minute):
		t.Fatal("the damage was not found in a minute")
	}
	if err := s.Err(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("the store failed with %v, want an error wrapping ErrCorrupt", err)
	}
	if _, err := s.Apply(t.Context(), del("f", 1, 2), func(tx *Tx) error {
		_, err := tx.AddInt64([]byte("count"), 1)
		return err
	}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Apply after the damage was found: %v, want an error wrapping ErrCorrupt", err)
	}
	if err := s.Close(); err != nil && !errors.Is(err, ErrCorrupt) {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, pebbleLeftFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a record after the damage was found: %v", err)
	}
	// The byte put back (a check of the damaged levels leaks Pebble's
	// goroutines): the next open checks the levels.
	b[0] ^= 0x10
	if err := os.WriteFile(sst, append(whole[:at:at], append(b, whole[at+1:]...)...), 0o644); err != nil {
		t.Fatal(err)
	}
	o, checks = countedCheck()
	mustOpen(t, be, dir, o)
	if checks.Load() == 0 {
		t.Fatal("the next open did not check the levels")
	}
}
