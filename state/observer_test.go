package state

import (
	"context"
	"sync"
	"testing"
	"time"
)

type recordingObserver struct {
	mu      sync.Mutex
	batches []int
}

func (r *recordingObserver) ObserveCommit(lines int, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if d < 0 {
		panic("negative commit duration")
	}
	r.batches = append(r.batches, lines)
}

// TestCommitObserver: the observer hears of every durable batch with the
// number of deliveries it held.
func TestCommitObserver(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		obs := &recordingObserver{}
		o := testOpts()
		o.Observer = obs
		s := mustOpen(t, be, t.TempDir(), o)
		defer s.Close()
		for n := 1; n <= 7; n++ {
			applyLine(t, s, del("f", 1, n))
		}
		if err := s.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		for n := 8; n <= 10; n++ {
			applyLine(t, s, del("f", 1, n))
		}
		if err := s.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		obs.mu.Lock()
		defer obs.mu.Unlock()
		if len(obs.batches) != 2 || obs.batches[0] != 7 || obs.batches[1] != 3 {
			t.Fatalf("observed batches %v, want [7 3]", obs.batches)
		}
	})
}
