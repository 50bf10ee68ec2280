package distributed

import (
	"fmt"
	"testing"
	"time"
)

// TestDistributedKills is the kill harness on the distributed path: three
// workers share six partitions of a stream while it is published; at
// moments chosen by the lines saved, a worker is killed with SIGKILL (and
// started again under its name), the NATS server is killed with SIGKILL
// and restarted, PostgreSQL is stopped at once (immediate: a crash) and
// started again, and a worker is frozen with SIGSTOP past its lease while
// the others take its partitions over, then woken with SIGCONT: its late
// commits must be refused (its partitions lost with state.ErrFenced).
// Then every worker stops on SIGTERM and `ledger check --source` sums the
// six stores against the stream and the input: 0 lines lost, 0 applied
// twice, each rejected line recorded once, every line published once.
//
// The short version runs the five faults over 16,000 lines;
// the long one (TIDEMARK_TORTURE=1) 300,000 lines and 40 faults drawn at
// random.
func TestDistributedKills(t *testing.T) {
	rng := newRand(t)
	lines := pick(int64(16_000), int64(300_000))
	h := newHarness(t, 6, lines, time.Second)
	h.extra = []string{"--batch-interval", "200ms"} // a frozen worker holds lines not saved yet
	names := []string{"w1", "w2", "w3"}
	for _, n := range names {
		h.startWorker(n)
	}
	h.waitUntil("three workers holding two partitions each", func() bool {
		for _, n := range names {
			if len(h.held[n]) != 2 {
				return false
			}
		}
		return true
	})
	h.publish(pick(500*time.Microsecond, 150*time.Microsecond))

	holder := func() string {
		h.mu.Lock()
		defer h.mu.Unlock()
		hs := h.holders()
		return hs[rng.IntN(len(hs))]
	}
	faults := []func(){
		func() { h.kill(names[rng.IntN(len(names))]) },
		func() { h.killNATS(time.Duration(100+rng.IntN(900)) * time.Millisecond) },
		func() { h.restartPG(time.Duration(100+rng.IntN(900)) * time.Millisecond) },
		func() {
			// The workers must hold every partition, so that the frozen
			// one's are taken over by the others.
			h.waitUntil("every partition held", func() bool { return h.allHeld("") })
			h.freeze(holder())
		},
	}
	var plan []int
	if long {
		for range 40 {
			plan = append(plan, rng.IntN(len(faults)))
		}
	} else {
		plan = []int{0, 1, 2, 3, 0}
	}
	for i, f := range plan {
		// Spread the faults over the first 80% of the input's lines.
		at := lines * int64(i+1) * 8 / int64(10*(len(plan)+1))
		h.waitSaved(at)
		faults[f]()
		if t.Failed() {
			return
		}
	}
	h.finish()
	fmt.Printf("distributed torture figures (%s): %d lines over 6 partitions and 3 workers; worker SIGKILLs %d, NATS SIGKILLs %d, PostgreSQL crashes %d, workers frozen past their lease %d (partitions lost fenced %d); lines lost 0, applied twice 0\n",
		pick("short", "long"), h.lines, h.kills, h.natsKills, h.pgRestarts, h.freezes, h.fencedLosses)
}
