package state

import (
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark-go/tidemark/vfs"
)

// TestOutputSyncErrorReachesTheBatchWhoseBytesFailed: a write-back error
// of an output file is reported by Linux to one fdatasync of the file
// description only (errseq: the first to check sees it, a later one
// returns 0). So two syncs of an output must never race: the error of a
// batch's bytes could go to the other sync, and the batch's commit record
// a length whose bytes are not durable. The injector models that: the
// write-back of the first batch's bytes fails, and the first sync of
// out.csv to check gets EIO, the others nil. The first batch's sync is
// held a moment, as a loaded machine holds it, while the next batch fills
// up (overfull) and its bytes are written ahead.
func TestOutputSyncErrorReachesTheBatchWhoseBytesFailed(t *testing.T) {
	forEachLocalBackend(t, func(t *testing.T, be backend) {
		const lines = 20
		dir := t.TempDir()
		var armed atomic.Bool
		var mu sync.Mutex
		reported := false             // the write-back error was reported to a sync
		second := make(chan struct{}) // closed when a second sync of out.csv comes
		syncs := 0
		first := make(chan struct{}) // closed when the first sync of out.csv comes
		o := testOpts()
		o.BatchSize, o.MaxBatchSize = lines, lines
		o.FS = vfs.Inject(vfs.Default(), func(op vfs.Op, path string) error {
			if op != vfs.OpSync || filepath.Base(path) != "out.csv" || !armed.Load() {
				return nil
			}
			mu.Lock()
			syncs++
			n := syncs
			mu.Unlock()
			if n == 1 {
				// The first batch's sync, held until another sync comes
				// (or 3 s).
				close(first)
				select {
				case <-second:
				case <-time.After(3 * time.Second):
				}
			} else if n == 2 {
				close(second)
			}
			mu.Lock()
			defer mu.Unlock()
			if !reported {
				reported = true
				return syscall.EIO
			}
			return nil
		})
		s := mustOpen(t, be, dir, o)
		out, err := s.Output("out.csv")
		if err != nil {
			t.Fatal(err)
		}
		armed.Store(true)
		// The first batch is cut full; its commit's sync of out.csv waits.
		stageOutputLines(t, s, "out.csv", 0, lines)
		select {
		case <-first:
		case <-time.After(10 * time.Second):
			t.Fatal("the first batch did not sync out.csv in 10 s")
		}
		// The second fills up while the first commits: overfull. Its Applies
		// may fail once the store has failed.
		for n := lines + 1; n <= 2*lines; n++ {
			rec := []byte("x\n")
			if _, err := s.Apply(t.Context(), del("f", 1, n), func(tx *Tx) error {
				_, err := tx.Output("out.csv").Write(rec)
				return err
			}); err != nil {
				break
			}
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			mu.Lock()
			done := reported
			mu.Unlock()
			if done {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("no sync of out.csv in 10 s")
			}
			time.Sleep(time.Millisecond)
		}
		// Whatever the order, the first batch's bytes did not reach the disk.
		ferr := s.Flush(t.Context())
		if n := out.Committed(); n != 0 {
			t.Fatalf("committed length %d (flush: %v): a commit recorded output bytes whose write-back failed (the EIO went to the other batch's sync)", n, ferr)
		}
		if ferr == nil || !errors.Is(ferr, ErrFailed) {
			t.Fatalf("flush: %v; want the store failed", ferr)
		}
	})
}
