package state

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// faultRun applies lines 1..3 and flushes, turns faults on, applies lines
// 4..6 and flushes (which must fail), and checks the failed state. Then it
// reopens without faults and checks that state and position agree and a
// replay of every line restores the full state.
func faultRun(t *testing.T, be backend, dir string, faulty *Options, on func()) {
	t.Helper()
	faulty.Logger = quietLogger()
	faulty.BatchSize, faulty.BatchInterval = testOpts().BatchSize, testOpts().BatchInterval
	s, err := be.open(dir, faulty)
	if err != nil {
		t.Fatal(err)
	}
	var p progress
	cp := hold("f", &p)
	s.Bind("f", cp)
	ctx := context.Background()
	for n := 1; n <= 3; n++ {
		applyLine(t, s, del("f", 1, n))
		p.finish()
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	on()
	for n := 4; n <= 6; n++ {
		applyLine(t, s, del("f", 1, n))
		p.finish()
	}
	err = s.Flush(ctx)
	if !errors.Is(err, ErrFailed) {
		t.Fatalf("Flush with a failing %s: %v", be.name, err)
	}
	t.Logf("the failure, as reported: %v", err)
	if !strings.Contains(err.Error(), dir) {
		t.Fatalf("error does not name the store: %v", err)
	}
	// The store refuses the line before calling its function.
	called := false
	if _, err := s.Apply(ctx, del("f", 1, 7), func(*Tx) error { called = true; return nil }); !errors.Is(err, ErrFailed) || called {
		t.Fatalf("Apply after the failure: %v; function called: %v", err, called)
	}
	if st := s.Stats(); st.FailedCommits != 1 || !st.Failed || st.LastError == "" {
		t.Fatalf("stats: %+v", st)
	}
	if got := durableCount(cp); got != 3 {
		t.Fatalf("durable mark %d after the failure, want 3", got)
	}
	_ = s.Close() // may fail too: the disk is still failing

	s = mustOpen(t, be, dir, testOpts())
	l, _ := s.Applied("f")
	n := l.Position / lineLen
	if n < 3 || n > 6 || getInt(t, s, "count") != n {
		t.Fatalf("after restart: Applied line %d, count %d", n, getInt(t, s, "count"))
	}
	for m := 1; m <= 7; m++ {
		applyLine(t, s, del("f", 1, m))
	}
	if got := getInt(t, s, "count"); got != 7 {
		t.Fatalf("after replay count = %d, want 7", got)
	}
	if got := getInt(t, s, "sum"); got != 28 {
		t.Fatalf("after replay sum = %d, want 28", got)
	}
}

// TestPebbleCommitFault fails Pebble's WAL writes and syncs with its errorfs.
func TestPebbleCommitFault(t *testing.T) {
	for _, kind := range []string{"write", "sync"} {
		t.Run(kind, func(t *testing.T) {
			var on atomic.Bool
			inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
				if !on.Load() || !strings.HasSuffix(op.Path, ".log") {
					return nil
				}
				if kind == "write" && op.Kind.ReadOrWrite() == errorfs.OpIsWrite && op.Kind != errorfs.OpFileSync {
					return errorfs.ErrInjected
				}
				if kind == "sync" && (op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData) {
					return errorfs.ErrInjected
				}
				return nil
			})
			fs := errorfs.Wrap(vfs.Default, inj)
			be := backends()[1]
			faultRun(t, be, t.TempDir(), &Options{pebbleFS: fs}, func() { on.Store(true) })
		})
	}
}

// TestPebbleCloseWithAFailingFlush: Close flushes Pebble's memtable, and
// Pebble retries a failed flush for ever; on a disk that refuses the new
// table (full), Close gives up the flush with a warning and returns, and
// the batches, durable in the WAL, are all there after a reopen. (A Close
// that waited for the flush hung the ledger on a full disk.)
func TestPebbleCloseWithAFailingFlush(t *testing.T) {
	var on atomic.Bool
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if on.Load() && strings.HasSuffix(op.Path, ".sst") && op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
			return syscall.ENOSPC
		}
		return nil
	})
	dir := t.TempDir()
	var logs lockedBuffer
	o := testOpts()
	o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	o.pebbleFS = errorfs.Wrap(vfs.Default, inj)
	s, err := OpenPebble(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	for n := 1; n <= 100; n++ {
		applyLine(t, s, del("f", 1, n))
	}
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	on.Store(true)
	if err := s.Close(); err != nil {
		t.Fatalf("Close with a failing flush: %v", err)
	}
	if !strings.Contains(logs.String(), "could not flush pebble's memtable at close") {
		t.Fatalf("no warning of the failed flush:\n%s", logs.String())
	}
	s = mustOpen(t, backends()[1], dir, testOpts())
	if l, _ := s.Applied("f"); l.Position != 1000 || getInt(t, s, "count") != 100 {
		t.Fatalf("after reopen: Applied %+v, count %d", l, getInt(t, s, "count"))
	}
}
