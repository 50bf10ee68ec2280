package state

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pebblevfs "github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// A snapshot sees a batch only once the batch is durable. Pebble makes a
// committed batch visible to its readers before the sync of its log has
// ended, so a snapshot begun in that moment could hold a batch that a
// power cut then loses (torture TestPowerLoss/pebble found it once: the
// ledger's durable event, read from a snapshot, was ahead of what
// survived). The test holds the log's sync of the second batch, takes the
// disk as a power cut would leave it, begins a snapshot meanwhile, and
// checks that the snapshot shows no more than that disk.
func TestPebbleSnapshotWaitsForTheLogSync(t *testing.T) {
	mem := pebblevfs.NewCrashableMem()
	var armed atomic.Bool
	var once sync.Once
	syncing, release := make(chan struct{}), make(chan struct{})
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		switch op.Kind {
		case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
			if armed.Load() && strings.HasSuffix(op.Path, ".log") {
				once.Do(func() { close(syncing); <-release })
			}
		}
		return nil
	})
	dir := t.TempDir()
	o := testOpts()
	o.pebbleFS = errorfs.Wrap(mem, inj)
	s, err := OpenPebble(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	applyLine(t, s, del("f", 1, 1))
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	count := func() (int64, error) {
		var n int64
		err := s.Snapshot(ctx, func(tx *Tx) error {
			var err error
			n, err = tx.GetInt64([]byte("count"))
			return err
		})
		return n, err
	}

	armed.Store(true)
	applyLine(t, s, del("f", 1, 2))
	flushed := make(chan error, 1)
	go func() { flushed <- s.Flush(ctx) }()
	select {
	case <-syncing:
	case err := <-flushed:
		t.Fatalf("the second batch committed without syncing a log file (%v)", err)
	case <-time.After(20 * time.Second):
		t.Fatal("timed out waiting for the second batch's log sync")
	}
	// The power cut in this moment: only what was synced.
	cut := mem.CrashClone(pebblevfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	type seen struct {
		n   int64
		err error
	}
	snapped := make(chan seen, 1)
	go func() { n, err := count(); snapped <- seen{n, err} }()
	// With the rule, the snapshot waits for the sync and never returns in
	// this window; a snapshot that returns in it must show only line 1. A
	// slow machine can only make the window miss a violation, never fail a
	// correct store.
	select {
	case r := <-snapped:
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.n != 1 {
			t.Fatalf("a snapshot begun while the second batch's log was not synced shows count %d, the disk a power cut leaves holds 1", r.n)
		}
		snapped <- r
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	if r := <-snapped; r.err != nil || r.n < 1 {
		t.Fatalf("snapshot: count %d, %v", r.n, r.err)
	}
	if n, err := count(); err != nil || n != 2 {
		t.Fatalf("snapshot after the sync: count %d, %v; want 2", n, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// The premise: the disk of the cut lost the second batch.
	o = testOpts()
	o.pebbleFS = cut
	s, err = OpenPebble(dir, o)
	if err != nil {
		t.Fatalf("open the disk of the power cut: %v", err)
	}
	defer s.Close()
	if n := getInt(t, s, "count"); n != 1 {
		t.Fatalf("the disk of the power cut holds count %d; the test needs the second batch unsynced there (1)", n)
	}
}
