package state

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// backupLine applies line n the way the backup tests check it: a count, a
// sum and a balance per account in namespace "ledger", a count in the root
// namespace, and an output line.
func backupLine(ctx context.Context, s Store, n int) (bool, error) {
	ok, err := s.Namespace("ledger").Apply(ctx, del("f", 1, n), func(tx *Tx) error {
		if _, err := tx.AddInt64([]byte("count"), 1); err != nil {
			return err
		}
		if _, err := tx.AddInt64([]byte("sum"), int64(n)); err != nil {
			return err
		}
		if _, err := testBalances.Add(tx, fmt.Sprint("acct-", n%37), int64(n)); err != nil {
			return err
		}
		_, err := fmt.Fprintf(tx.Output("out.csv"), "line %d\n", n)
		return err
	})
	if err != nil || !ok {
		return ok, err
	}
	_, err = s.Apply(ctx, del("f", 1, n), func(tx *Tx) error {
		_, err := tx.AddInt64([]byte("lines"), 1)
		return err
	})
	return ok, err
}

// checkBackupState checks that the store of dir holds exactly lines 1..n
// of backupLine in namespace "ledger" (n: its applied position), and
// returns n.
func checkBackupState(t *testing.T, dir string) int {
	t.Helper()
	s, err := OpenDir(dir, &Options{Logger: quietLogger(), Unbound: true})
	if err != nil {
		t.Fatalf("open the backup %s: %v", dir, err)
	}
	defer s.Close()
	ns := s.Namespace("ledger")
	l, ok := ns.Applied("f")
	if !ok {
		t.Fatalf("backup %s: no applied position of feed f", dir)
	}
	n := int(l.Position / lineLen)
	err = ns.View(func(tx *Tx) error {
		count, _ := tx.GetInt64([]byte("count"))
		sum, _ := tx.GetInt64([]byte("sum"))
		var bal int64
		for _, b := range testBalances.All(tx) {
			bal += b
		}
		if count != int64(n) || sum != int64(n*(n+1)/2) || bal != sum {
			return fmt.Errorf("position of line %d, count %d, sum %d, balances %d", n, count, sum, bal)
		}
		return tx.Err()
	})
	if err != nil {
		t.Fatalf("backup %s: %v", dir, err)
	}
	// The root namespace's record is of the same moment: it is at line n,
	// or at the line before (it is applied after the ledger's).
	if l, _ := s.Applied("f"); l.Position/lineLen != int64(n) && l.Position/lineLen != int64(n-1) {
		t.Fatalf("backup %s: the root namespace is at line %d, the ledger at %d", dir, l.Position/lineLen, n)
	}
	out, err := os.ReadFile(filepath.Join(dir, "out.csv"))
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	if string(out) != want.String() {
		t.Fatalf("backup %s: output of %d bytes, want the %d bytes of lines 1..%d", dir, len(out), want.Len(), n)
	}
	return n
}

// Backups taken while lines are applied and batches commit are each the
// durable state of one moment: state, applied positions and output agree.
// Opening a backup is a restore: fed every line again, it skips what it
// holds and applies the rest, once.
func TestBackupWhileApplying(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		o := testOpts()
		o.BatchSize, o.BatchInterval = 40, time.Millisecond
		s := mustOpen(t, be, t.TempDir(), o)
		ctx := context.Background()
		stop, done := make(chan struct{}), make(chan int)
		go func() {
			n := 0
			defer func() { done <- n }()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := backupLine(ctx, s, n+1); err != nil {
					t.Error(err)
					return
				}
				n++
			}
		}()
		backups := t.TempDir()
		var dirs []string
		for i := range 4 {
			from := s.Stats().Commits
			waitFor(t, "more commits", func() bool { return s.Stats().Commits >= from+5 })
			dir := filepath.Join(backups, fmt.Sprint("b", i))
			if err := s.Backup(ctx, dir); err != nil {
				t.Fatal(err)
			}
			dirs = append(dirs, dir)
		}
		close(stop)
		total := <-done
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		last := 0
		for _, dir := range dirs {
			n := checkBackupState(t, dir)
			if n < last || n == 0 {
				t.Fatalf("backup %s at line %d, after one at line %d", dir, n, last)
			}
			last = n
		}
		es, _ := os.ReadDir(backups)
		if len(es) != len(dirs) {
			t.Fatalf("the backups' folder holds %d entries, want %d: %v", len(es), len(dirs), es)
		}
		// The oldest backup, restored and fed every line again.
		r, err := OpenDir(dirs[0], &Options{Logger: quietLogger(), Unbound: true})
		if err != nil {
			t.Fatal(err)
		}
		held := checkBackupStateOpen(t, r)
		applied := 0
		for n := 1; n <= total; n++ {
			ok, err := backupLine(ctx, r, n)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				applied++
			}
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		if applied != total-held {
			t.Fatalf("the restored store applied %d lines of %d, holding %d", applied, total, held)
		}
		if n := checkBackupState(t, dirs[0]); n != total {
			t.Fatalf("restored store at line %d, want %d", n, total)
		}
	})
}

// checkBackupStateOpen returns the ledger's applied line of an open store.
func checkBackupStateOpen(t *testing.T, s Store) int {
	t.Helper()
	l, ok := s.Namespace("ledger").Applied("f")
	if !ok {
		t.Fatal("no applied position")
	}
	return int(l.Position / lineLen)
}

// A backup never writes over anything, nor into the store, and leaves
// nothing behind when it fails.
func TestBackupRefusals(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		dir := t.TempDir()
		s := mustOpen(t, be, dir, testOpts())
		ctx := context.Background()
		if _, err := backupLine(ctx, s, 1); err != nil {
			t.Fatal(err)
		}
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		parent := t.TempDir()
		full := filepath.Join(parent, "full")
		if err := os.MkdirAll(full, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(full, "x"), []byte("mine"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := s.Backup(ctx, full); !errors.Is(err, ErrBackupExists) || !strings.Contains(err.Error(), full) {
			t.Fatalf("backup into a folder with a file: %v", err)
		}
		if b, _ := os.ReadFile(filepath.Join(full, "x")); string(b) != "mine" {
			t.Fatal("the backup touched a file of the folder")
		}
		if !be.remote {
			if err := s.Backup(ctx, filepath.Join(dir, "inside")); err == nil {
				t.Fatal("a backup into the store's own folder succeeded")
			}
		}
		empty := filepath.Join(parent, "empty")
		if err := os.MkdirAll(empty, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := s.Backup(ctx, empty); err != nil {
			t.Fatalf("backup into an empty folder: %v", err)
		}
		if n := checkBackupState(t, empty); n != 1 {
			t.Fatalf("backup at line %d", n)
		}
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		if err := s.Backup(cancelled, filepath.Join(parent, "cancelled")); !errors.Is(err, context.Canceled) {
			t.Fatalf("backup under a cancelled context: %v", err)
		}
		es, _ := os.ReadDir(parent)
		var names []string
		for _, e := range es {
			names = append(names, e.Name())
		}
		if strings.Join(names, " ") != "empty full" {
			t.Fatalf("the backups' parent holds %q", names)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.Backup(ctx, filepath.Join(parent, "closed")); !errors.Is(err, ErrClosed) {
			t.Fatalf("backup of a closed store: %v", err)
		}
	})
}
