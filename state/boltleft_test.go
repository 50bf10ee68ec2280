package state

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// heldCheck returns options that check every bbolt file in the background
// (VerifyMaxBytes 1), with the check held until release is called or the
// store closes.
func heldCheck() (o *Options, release func()) {
	ch := make(chan struct{})
	o = testOpts()
	o.VerifyMaxBytes = 1
	o.hooks = &hooks{boltCheck: func(stop <-chan struct{}) {
		select {
		case <-ch:
		case <-stop:
		}
	}}
	return o, sync.OnceFunc(func() { close(ch) })
}

// commitsWhileHeld applies line n to s and reports whether its Flush
// returned while the check is held. A commit that waits for the check
// waits for ever: when the caller expects it to wait (wantWait), 300 ms of
// Flush still waiting is the answer; when it expects no wait, the Flush
// gets a minute, so that a loaded machine's slow fsyncs (a Flush of more
// than 300 ms at load 20) are not taken for a wait.
func commitsWhileHeld(t *testing.T, s Store, n int, wantWait bool) bool {
	t.Helper()
	patience := time.Minute
	if wantWait {
		patience = 300 * time.Millisecond
	}
	stageCount(t, s, n)
	ctx, cancel := context.WithTimeout(t.Context(), patience)
	defer cancel()
	err := s.Flush(ctx)
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(err)
	}
	return err == nil
}

// A large bbolt file that the store left checked at its last clean close is
// checked in the background at the next open without holding its commits
// back; any other file's first commit waits for the check, as before: the
// first open, a file written after the close (even a byte rewritten with
// its own value), a copy of the folder.
func TestBoltLeftCheckedCommitsWithoutWaiting(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	be := backend{name: Bolt, open: OpenBolt}
	path := filepath.Join(dir, boltFile)
	line := 0
	step := func(name string, wantWait bool) {
		t.Helper()
		o, release := heldCheck()
		s := mustOpen(t, be, dir, o)
		line++
		if got := commitsWhileHeld(t, s, line, wantWait); got == wantWait {
			t.Errorf("%s: the commit waited for the check: %v, want %v", name, !got, wantWait)
		}
		release()
		if err := s.Flush(t.Context()); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := os.Stat(filepath.Join(dir, boltLeftFile)); err != nil {
			t.Fatalf("%s: no record after a clean close: %v", name, err)
		}
	}
	step("a new store", true)
	step("the file as the store left it", false)
	step("again", false)
	// A byte written over with its own value: the file's time moves.
	rewriteByte(t, path, 5000)
	step("a byte rewritten after the close", true)
	step("left checked again", false)
	// A copy of the folder with the file's time kept: another inode.
	l := readLeft(t, dir)
	cp := t.TempDir()
	for _, name := range []string{boltFile, storeFile, boltLeftFile} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cp, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	mt := time.Unix(0, l.mtime)
	if err := os.Chtimes(filepath.Join(cp, boltFile), mt, mt); err != nil {
		t.Fatal(err)
	}
	dir = cp
	step("a copy of the folder", true)
	// A store opened without any check records nothing new and trusts
	// nothing: the record of the last close no longer matches its file.
	line++
	runWithoutChecks(t, be, dir, func(s Store) { applyCount(t, s, line) })
	step("after a run without checks", true)
}

// rewriteByte writes the byte at off of the file at path over with its own
// value.
func rewriteByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// runWithoutChecks opens the store in dir with no check at all
// (VerifyMaxBytes -1), runs fn on it, and closes it.
func runWithoutChecks(t *testing.T, be backend, dir string, fn func(Store)) {
	t.Helper()
	o := testOpts()
	o.VerifyMaxBytes = -1
	s := mustOpen(t, be, dir, o)
	fn(s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// stageCount applies line n of feed f, which adds 1 to "count", and
// leaves it staged.
func stageCount(t *testing.T, s Store, n int) {
	t.Helper()
	if _, err := s.Apply(t.Context(), del("f", 1, n), func(tx *Tx) error {
		_, err := tx.AddInt64([]byte("count"), 1)
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// applyCount is stageCount, then a Flush.
func applyCount(t *testing.T, s Store, n int) {
	t.Helper()
	stageCount(t, s, n)
	if err := s.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// Damage at rest that leaves the file's size, time and inode as recorded
// (a bit flipped by the disk) is still found by the background check: the
// store fails, and the record is removed, so the next open waits for its
// check again.
func TestBoltLeftCheckedDamageAtRestStillFails(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	be := backend{name: Bolt, open: OpenBolt}
	path := filepath.Join(dir, boltFile)
	o, release := heldCheck()
	release()
	s := mustOpen(t, be, dir, o)
	// Every key written once, in one commit: each is in one place of the
	// file.
	addKeys(t, s, 1)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	l := readLeft(t, dir)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(data, []byte("key-01500"))
	if at < 0 || bytes.Index(data[at+1:], []byte("key-01500")) >= 0 {
		t.Fatalf("key-01500 at %d of the file, and again later", at)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("X"), int64(at+4)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	mt := time.Unix(0, l.mtime)
	if err := os.Chtimes(path, mt, mt); err != nil {
		t.Fatal(err)
	}

	o, release = heldCheck()
	s = mustOpen(t, be, dir, o)
	defer s.Close()
	defer release() // before Close, which waits for the staged commit
	if !commitsWhileHeld(t, s, 2, false) {
		t.Fatal("the file as recorded: its commit waited for the check")
	}
	release()
	// The check finds the damage: the store fails (wait for it).
	deadline := time.Now().Add(time.Minute)
	for n := 3; ; n++ {
		_, err := s.Apply(t.Context(), del("f", 1, n), func(tx *Tx) error {
			_, err := tx.AddInt64([]byte("count"), 1)
			return err
		})
		if err == nil {
			err = s.Flush(t.Context())
		}
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("line %d: %v, want an error wrapping ErrCorrupt", n, err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the damage was not found in a minute")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := s.Close(); err != nil && !errors.Is(err, ErrCorrupt) {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, boltLeftFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the record is still there after the check found damage: %v", err)
	}
}

// Commits that go on while the background check of a file left checked
// reads it rewrite and free the pages the check reads: the check holds a
// read transaction, so bbolt reuses none of them, and the check passes.
func TestBoltLeftCheckedCommitsDuringTheCheck(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	be := backend{name: Bolt, open: OpenBolt}
	o, release := heldCheck()
	release()
	s := mustOpen(t, be, dir, o)
	rewrite := func(n int) {
		t.Helper()
		addKeys(t, s, n)
		if err := s.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	rewrite(1)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	o, release = heldCheck()
	var checked sync.WaitGroup
	checked.Add(1)
	hold := o.hooks.boltCheck
	o.hooks.boltCheck = func(stop <-chan struct{}) { checked.Done(); hold(stop) }
	s = mustOpen(t, be, dir, o)
	defer s.Close()
	defer release()
	checked.Wait() // the check has its meta page and waits
	// Every page of the tree rewritten, and the old ones freed, many
	// times over.
	for n := 2; n < 12; n++ {
		rewrite(n)
	}
	release()
	if err := s.(*nsStore).c.checkedFully(); err != nil {
		t.Fatalf("the check, with commits meanwhile: %v", err)
	}
	if sum := sumInt64s(t, s, "acct"); sum != 3000*11 {
		t.Errorf("sum %d, want %d", sum, 3000*11)
	}
}

// addKeys applies line n: 1 added to each of 3,000 keys of bucket acct.
func addKeys(t *testing.T, s Store, n int) {
	t.Helper()
	if _, err := s.Apply(t.Context(), del("f", 1, n), func(tx *Tx) error {
		for i := range 3000 {
			if _, err := tx.Bucket("acct").AddInt64(fmt.Appendf(nil, "key-%05d", i), 1); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// readLeft reads and parses the record a clean close of the bbolt store in
// dir left beside its file.
func readLeft(t *testing.T, dir string) boltLeft {
	t.Helper()
	rec, err := os.ReadFile(filepath.Join(dir, boltLeftFile))
	if err != nil {
		t.Fatal(err)
	}
	l, ok := parseLeft(rec)
	if !ok {
		t.Fatalf("record does not parse: %q", rec)
	}
	return l
}

// A bbolt file of at most VerifyMaxBytes that the store left checked is
// checked in the background too, with its open and its commits not
// waiting; any other such file is checked before Open returns, as before.
func TestBoltLeftCheckedSmallFileIsCheckedInTheBackground(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	be := backend{name: Bolt, open: OpenBolt}
	step := func(name string, n int, wantBackground bool) {
		t.Helper()
		hold := make(chan struct{})
		var bg sync.WaitGroup
		bg.Add(1)
		o := testOpts() // VerifyMaxBytes: the default, far above this file
		o.hooks = &hooks{boltCheck: func(stop <-chan struct{}) {
			bg.Done()
			select {
			case <-hold:
			case <-stop:
			}
		}}
		s := mustOpen(t, be, dir, o)
		e := s.(*nsStore).c.rawEngine().(*boltEngine)
		if got := e.bg != nil && e.bg.left; got != wantBackground {
			t.Fatalf("%s: checked in the background as left checked: %v, want %v", name, got, wantBackground)
		}
		if !commitsWhileHeld(t, s, n, false) {
			t.Fatalf("%s: the commit waited", name)
		}
		if wantBackground {
			bg.Wait() // the check runs, held
		}
		close(hold)
		if err := s.Close(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := os.Stat(filepath.Join(dir, boltLeftFile)); err != nil {
			t.Fatalf("%s: no record after a clean close: %v", name, err)
		}
	}
	step("a new store", 1, false)
	step("the file as the store left it", 2, true)
	rewriteByte(t, filepath.Join(dir, boltFile), 5000)
	step("a byte rewritten after the close", 3, false)
	step("left checked again", 4, true)
}
