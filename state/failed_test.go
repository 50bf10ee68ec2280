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

	"github.com/tidemark-go/tidemark/vfs"
)

// failedWithin waits for s.Failed to be closed, failing the test after a
// deadline that only a store that never tells would reach.
func failedWithin(t *testing.T, s Store) {
	t.Helper()
	select {
	case <-s.Failed():
	case <-time.After(time.Minute):
		t.Fatalf("Failed is not closed a minute after the store failed (Stats %+v)", s.Stats())
	}
}

// notFailed checks that s.Failed is open and s.Err nil.
func notFailed(t *testing.T, s Store, when string) {
	t.Helper()
	select {
	case <-s.Failed():
		t.Fatalf("%s: Failed is closed; Err: %v", when, s.Err())
	default:
	}
	if err := s.Err(); err != nil {
		t.Fatalf("%s: Err: %v", when, err)
	}
}

// TestFailedByACommit: a commit that fails (an output file's write, or a
// PostgreSQL row of it) closes Failed, and Err is the error every Apply
// and Flush returns from then on.
func TestFailedByACommit(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		dir := t.TempDir()
		o := testOpts()
		heal, injected := outputFault(t, be, dir, o, "out.csv", vfs.OpWrite, 2, true, vfs.ErrNoSpace)
		defer heal()
		s := mustOpen(t, be, dir, o)
		defer s.Close()
		if _, err := s.Output("out.csv"); err != nil {
			t.Fatal(err)
		}
		ch := s.Failed() // taken before the failure
		notFailed(t, s, "at open")
		ctx := context.Background()
		var flushErr error
		for n := 1; n <= 2 && flushErr == nil; n++ {
			if _, err := s.Apply(ctx, del("f", 1, n), func(tx *Tx) error {
				_, err := fmt.Fprintf(tx.Output("out.csv"), "%d\n", n)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			flushErr = s.Flush(ctx)
			if n == 1 && flushErr != nil {
				t.Fatalf("the first commit: %v", flushErr)
			}
		}
		if !errors.Is(flushErr, ErrFailed) {
			t.Fatalf("the second commit: %v; want ErrFailed", flushErr)
		}
		select {
		case <-ch:
		default:
			t.Fatal("the channel Failed returned before the failure is not closed")
		}
		failedWithin(t, s) // and a channel taken after
		err := s.Err()
		if !errors.Is(err, ErrFailed) || !injected(err) || !errors.Is(flushErr, err) {
			t.Fatalf("Err: %v; want the commit's failure, the one Flush returned (%v)", err, flushErr)
		}
		if _, aerr := s.Apply(ctx, del("f", 1, 3), func(*Tx) error { return nil }); !errors.Is(aerr, err) {
			t.Fatalf("Apply after the failure: %v; want Err's %v", aerr, err)
		}
	})
}

// TestFailedByTheBackgroundCheck: a bbolt file larger than VerifyMaxBytes
// is checked while the store serves; damage found closes Failed, with no
// Apply nor Flush to bring it to light, and Err names the damaged file and
// what to do. A healthy file's check leaves Failed open.
func TestFailedByTheBackgroundCheck(t *testing.T) {
	t.Parallel()
	orig := t.TempDir()
	makeDamageStore(t, orig)
	o := testOpts()
	o.VerifyMaxBytes = 1

	healthy, err := OpenBolt(orig, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := healthy.(*nsStore).c.checked(); err != nil {
		t.Fatalf("the check of a healthy file: %v", err)
	}
	notFailed(t, healthy, "after the check of a healthy file")
	if err := healthy.Close(); err != nil {
		t.Fatal(err)
	}
	notFailed(t, healthy, "closed")

	data, err := os.ReadFile(filepath.Join(orig, boltFile))
	if err != nil {
		t.Fatal(err)
	}
	bp := listBoltPages(t, filepath.Join(orig, boltFile))
	leaf := bp.leaves[len(bp.leaves)/2]
	le.PutUint16(data[leaf*bp.ps+10:], le.Uint16(data[leaf*bp.ps+10:])+1) // one element more
	store, err := os.ReadFile(filepath.Join(orig, storeFile))
	if err != nil {
		t.Fatal(err)
	}
	// The check may end before the open does (the open's reads then fail
	// with the damage): a fresh copy is opened until the open returns
	// first.
	var s Store
	var file string
	for attempt := 1; s == nil; attempt++ {
		dir := t.TempDir()
		file = filepath.Join(dir, boltFile)
		if err := os.WriteFile(filepath.Join(dir, storeFile), store, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, data, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err = OpenBolt(dir, o)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), file) || attempt == 20 {
				t.Fatalf("open (the file is checked in the background), attempt %d: %v", attempt, err)
			}
			s = nil
		}
	}
	defer s.Close()
	failedWithin(t, s)
	err = s.Err()
	if !errors.Is(err, ErrFailed) || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "backup") {
		t.Fatalf("Err: %v; want ErrFailed and ErrCorrupt, naming %s and what to do", err, file)
	}
	if !s.Stats().Failed {
		t.Fatal("Stats.Failed is false")
	}
	if ferr := s.Flush(context.Background()); !errors.Is(ferr, err) {
		t.Fatalf("Flush: %v; want Err's %v", ferr, err)
	}
}
