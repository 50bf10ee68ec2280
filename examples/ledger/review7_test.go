package main

import (
	"strconv"
	"testing"
)

// TestKillWhileOverfull is TestKillAtRandomMoments with saves that cannot
// grow (--max-batch = --batch): a save that fills up while the one before
// commits waits for it, and its output bytes are written and synced ahead
// by the output's writer meanwhile (c362e96; at --batch 20, 1,996 of 2,000
// saves of 40,000 lines were). Kills at random moments, then a settle:
// output.csv and the state are exact. A kill keeps the page cache, so this
// checks where the bytes written ahead go and what a restart cuts, not the
// syncs (TestOutputSyncErrorReachesTheBatchWhoseBytesFailed in state does).
func TestKillWhileOverfull(t *testing.T) {
	exe := ledgerExe(t)
	for _, store := range []string{"bbolt", "pebble"} {
		t.Run(store, func(t *testing.T) {
			rng, dir, input, data, base := killSetup(t, store, 40_000)
			run := 0
			var prev int64
			for i := range 8 {
				threshold := int64(1000 + i*3000 + rng.IntN(2000))
				b := strconv.Itoa([]int{20, 100, 500}[rng.IntN(3)])
				args := append(append([]string{}, base...), "--batch", b, "--max-batch", b)
				run++
				info := killAfterSaved(t, exe, args, dir, run, threshold)
				if info.State.Applied < prev {
					t.Fatalf("applied went back from %d to %d", prev, info.State.Applied)
				}
				prev = info.State.Applied
			}
			settle(t, exe, append(append([]string{}, base...), "--batch", "50", "--max-batch", "50"), dir, &run)
			r := checkExact(t, data, input)
			t.Logf("%d lines applied, %d rejected", r.State.Applied, r.Rejects)
		})
	}
}
