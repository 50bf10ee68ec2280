package torture

import (
	"fmt"
	"path/filepath"
	"testing"
)

// TestPointerAheadUnderLoad looks for invariant 5 broken at the start of a
// fresh run: several fresh ledgers run at once (a loaded machine), each
// killed as soon as it reports the pointer ahead of the durable state, or
// once a share of its lines is durable; then the pointer file and the store
// left on disk are compared, and the ledger is run to its end and checked.
// It caught a store that told its checkpoint a batch was durable before
// writing it (a mark declared durable one batch early).
func TestPointerAheadUnderLoad(t *testing.T) {
	track(t)
	rounds := pick(2, 10)
	par := 6
	dir := tempDir(t)
	input := filepath.Join(dir, "ledger.csv")
	gen(t, input, 40_000, 11, 1, 997)
	figures.inputs.Add(1)
	for r := range rounds {
		t.Run(fmt.Sprintf("round %d", r), func(t *testing.T) {
			for i := range par {
				t.Run(fmt.Sprintf("ledger %d", i), func(t *testing.T) {
					t.Parallel() // the round waits for its six ledgers
					sub := filepath.Join(dir, fmt.Sprintf("r%d-%d", r, i))
					in := filepath.Join(sub, "ledger.csv")
					copyFile(t, input, in)
					data := filepath.Join(sub, "data")
					store := []string{"bbolt", "pebble"}[i%2]
					c := start(t, sub, runArgs(in, data, "--store", store, "--batch", "1000")...)
					if !c.waitFor(func(d map[string]int64, aheads int) bool { return d["applied"] >= 20_000 || aheads > 0 }) {
						if err := c.wait(); err != nil {
							t.Fatalf("the run ended first: %v\n%s", err, tail(c.stderr.String()))
						}
						return
					}
					c.kill()
					checkPointerOnDisk(t, in, data)
					runToEnd(t, sub, runArgs(in, data)...)
					checkExact(t, data, in)
				})
			}
		})
	}
}
