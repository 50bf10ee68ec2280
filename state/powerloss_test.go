package state

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	pebblevfs "github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// TestPebblePowerLossAtEveryWrite is Pebble's crash-at-every-write loop
// applied to the store: run the workload on a memory file system, take a
// copy of it as a power loss would leave it (only synced data, or synced
// data and some of the rest) at write operation k, reopen the copy, and
// check that the state and the recorded position agree, and that no mark
// handed to the checkpoint before the power loss is ahead of the recovered
// position. k = 0, 1, 2, ... until the workload finishes first.
func TestPebblePowerLossAtEveryWrite(t *testing.T) {
	const lines = 120
	for _, unsynced := range []int{0, 50} {
		rng := rand.New(rand.NewPCG(uint64(unsynced), 1))
		mem := pebblevfs.NewCrashableMem()
		var (
			mu      sync.Mutex
			crashed *pebblevfs.MemFS
			cp      = hold("f", &progress{})
			atCrash uint64 // the durable mark when the power was lost
		)
		var index atomic.Int32
		inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
			if op.Kind.ReadOrWrite() == errorfs.OpIsWrite && index.Add(-1) == -1 {
				mu.Lock()
				atCrash = durableCount(cp)
				crashed = mem.CrashClone(pebblevfs.CrashCloneCfg{UnsyncedDataPercent: unsynced, RNG: rng})
				mu.Unlock()
			}
			return nil
		})
		for k := int32(0); ; k++ {
			// dir holds the STORE file, Pebble's files are in mem: a new
			// pair for each k (a STORE without its database is refused).
			// The power is lost after the open, which made both durable.
			dir := t.TempDir()
			var p progress
			mu.Lock()
			cp = hold("f", &p)
			crashed = nil
			mu.Unlock()
			index.Store(math.MaxInt32)
			o := testOpts()
			o.BatchSize = 8
			o.pebbleFS = errorfs.Wrap(mem, inj)
			s, err := OpenPebble(dir, o)
			if err != nil {
				t.Fatal(err)
			}
			s.Bind("f", cp)
			index.Store(k)
			for n := 1; n <= lines; n++ {
				applyLine(t, s, del("f", 1, n))
				p.finish()
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			c, durable := crashed, atCrash
			mu.Unlock()
			if c == nil {
				t.Logf("unsynced %d%%: no power loss at write %d: done", unsynced, k)
				break
			}
			// Power back on: the copy is what the disk held.
			o = testOpts()
			o.pebbleFS = c
			s, err = OpenPebble(dir, o)
			if err != nil {
				t.Fatalf("k=%d: reopen after the power loss: %v", k, err)
			}
			l, _ := s.Applied("f")
			n := l.Position / lineLen
			if count := getInt(t, s, "count"); count != n {
				t.Fatalf("k=%d: count %d, recorded position is line %d", k, count, n)
			}
			if uint64(n) < durable {
				t.Fatalf("k=%d: a mark of %d lines was declared durable, %d survived", k, durable, n)
			}
			if err := s.Close(); err != nil && !errors.Is(err, context.Canceled) {
				t.Fatal(err)
			}
			mem = pebblevfs.NewCrashableMem() // a fresh disk for the next k
		}
	}
}
