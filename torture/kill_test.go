package torture

import (
	"path/filepath"
	"strconv"
	"testing"
)

// TestRandomKills is scenario 1: a ledger applied by runs killed with
// SIGKILL at random moments, chosen by progress (a random count of lines
// the child reported durable), with each store and random batch sizes, then
// run to the end: nothing missing, nothing applied twice, the state exact,
// and the pointer never seen ahead of the durable state.
func TestRandomKills(t *testing.T) {
	track(t)
	lines := pick(100_000, 200_000)
	kills := pick(10, 100)
	for _, store := range []string{"bbolt", "pebble"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			rng := newRand(t)
			dir := tempDir(t)
			input := filepath.Join(dir, "ledger.csv")
			data := filepath.Join(dir, "data")
			gen(t, input, lines, rng.Uint64(), 1, 997)
			figures.inputs.Add(1)
			want := int64(lines - lines/997)
			var applied int64
			done := false
			for k := 0; k < kills && !done; k++ {
				// Spread the kills over the ledger: the next one lands a
				// random distance ahead, at most twice the even share.
				share := (want - applied) / int64(kills-k+1)
				threshold := applied + 1 + rng.Int64N(max(1, 2*share))
				extra := []string{"--store", store, "--batch", strconv.Itoa([]int{1, 50, 1000, 4000}[rng.IntN(4)])}
				if rng.IntN(10) == 0 {
					extra = append(extra, "--batch-interval", "1ms")
				}
				c := start(t, dir, runArgs(input, data, extra...)...)
				if !c.waitApplied(threshold) {
					if err := c.wait(); err != nil {
						t.Fatalf("run ended before %d lines were durable: %v\n%s", threshold, err, tail(c.stderr.String()))
					}
					c.checkNotAhead()
					done = true // it settled before the kill: nothing left to kill
					break
				}
				c.kill()
				c.checkNotAhead()
				checkPointerOnDisk(t, input, data)
				d := c.lastDurable()
				if d["applied"] < applied {
					t.Fatalf("durable applied went back from %d to %d", applied, d["applied"])
				}
				applied = d["applied"]
			}
			runToEnd(t, dir, runArgs(input, data, "--store", store)...)
			r := checkExact(t, data, input)
			t.Logf("%s: %d lines, %d applied; killed until %d were durable", store, lines, r.applied, applied)
		})
	}
}
