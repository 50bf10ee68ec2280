package main

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// childTimeout bounds one child run; it is a safety net, never the
// condition a test waits for.
const childTimeout = 3 * time.Minute

// checkNotAhead fails t when the child saw the pointer ahead of the durable
// state, or when, after it died, the pointer file is past a well-formed
// line the store does not hold. With strict (an input without malformed
// lines, possibly rotated since), any pointer seen ahead fails.
func checkNotAhead(t *testing.T, c *child, input, data string, strict bool) StoreInfo {
	t.Helper()
	if strict && len(c.aheadEvents()) > 0 {
		t.Fatalf("the pointer was ahead of the durable state while running: %v", c.aheadEvents())
	}
	if ahead, err := realAhead(input, c.aheadEvents()); err != nil || ahead {
		t.Fatalf("the pointer was ahead of the durable state while running: %v %v", c.aheadEvents(), err)
	}
	info, err := ReadStore(data)
	if err != nil {
		t.Fatal(err)
	}
	ptr, err := loadPointer(input)
	if err != nil {
		t.Fatal(err)
	}
	if ptr.Epoch == info.Applied.Epoch && ptr.Position > info.Applied.Position {
		n, err := wellFormedBetween(input, info.Applied.Position, ptr.Position)
		if err != nil || n > 0 {
			t.Fatalf("pointer %d is %d lines past the saved position %d (%v)", ptr.Position, n, info.Applied.Position, err)
		}
	}
	return info
}

// settle restarts the ledger until a run exits 0, at most a few times.
func settle(t *testing.T, exe string, args []string, dir string, run *int) {
	t.Helper()
	for try := 0; ; try++ {
		if try == 3 {
			t.Fatalf("the ledger did not settle after %d runs", try)
		}
		*run++
		c, err := startChild(exe, args, filepath.Join(dir, fmt.Sprintf("run%d.log", *run)))
		if err != nil {
			t.Fatal(err)
		}
		err = c.wait(childTimeout)
		if ahead, aerr := realAhead(args[1], c.aheadEvents()); aerr != nil || ahead {
			t.Fatalf("pointer ahead of the state: %v", c.aheadEvents())
		}
		if err == nil {
			return
		}
		t.Logf("run %d: %v", *run, err)
	}
}

// checkExact fails t unless the data folder holds exactly what the inputs
// imply: nothing missing, nothing twice, the state and the rejects exact,
// and no well-formed line rejected.
func checkExact(t *testing.T, data string, inputs ...string) *Report {
	t.Helper()
	r, err := CheckDir(data, inputs...)
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() || r.Twice != 0 || r.Unknown != 0 || r.Rejects != r.WantRejects || r.Refused != 0 || r.Unfollowed != 0 || r.Stale != 0 {
		var b strings.Builder
		r.Write(&b)
		t.Fatalf("not exact:\n%s", b.String())
	}
	return r
}

// killAfterSaved starts run number run of `ledger run args`, kills it
// with SIGKILL once it has saved threshold lines, and checks that the
// pointer was never ahead of the state.
func killAfterSaved(t *testing.T, exe string, args []string, dir string, run int, threshold int64) StoreInfo {
	t.Helper()
	c, err := startChild(exe, args, filepath.Join(dir, fmt.Sprintf("run%d.log", run)))
	if err != nil {
		t.Fatal(err)
	}
	if !c.waitApplied(threshold, childTimeout) {
		err := c.wait(childTimeout)
		t.Fatalf("run %d ended before %d lines were saved: %v", run, threshold, err)
	}
	c.kill()
	if !c.killed() {
		t.Fatalf("run %d was not killed: %v", run, c.err)
	}
	return checkNotAhead(t, c, args[1], args[3], false)
}

// TestKillAtRandomMoments kills one run of a 100,000-line ledger at 20
// random moments (random counts of saved lines), with each store (a
// PostgreSQL one too: --store postgres://, its outputs rows of the store)
// and a random batch size per run, then lets it settle: the state is
// exact, no output line is missing or written twice, every malformed line
// is rejected once, and the pointer was never ahead of the state. A
// Pebble run has the default cache budget or one of 512 MiB at random
// (Pebble's memtables then 32 MiB, not 4, and its block cache 256 MiB).
func TestKillAtRandomMoments(t *testing.T) {
	exe := ledgerExe(t)
	for _, store := range []string{"bbolt", "pebble", "postgres"} {
		t.Run(store, func(t *testing.T) {
			rng, dir, input, data, base := killSetup(t, store, 100_000)
			run, kills := 0, 0
			var prev int64
			for i := range 20 {
				threshold := int64(2000 + i*3000 + rng.IntN(2500)) // at most 61,500 of 99,900: the kill lands well before the end
				args := append(append([]string{}, base...), "--batch", strconv.Itoa([]int{50, 1000, 4000}[rng.IntN(3)]))
				if store == "pebble" && rng.IntN(2) == 0 {
					args = append(args, "--cache-size", strconv.Itoa(512<<20))
				}
				run++
				info := killAfterSaved(t, exe, args, dir, run, threshold)
				kills++
				if info.State.Applied < prev {
					t.Fatalf("applied went back from %d to %d", prev, info.State.Applied)
				}
				prev = info.State.Applied
			}
			settle(t, exe, base, dir, &run)
			r := checkExact(t, data, input)
			t.Logf("%d kills; %d lines applied, %d rejected", kills, r.State.Applied, r.Rejects)
		})
	}
}

// killSetup makes the input of a kill test, lines lines of 50 accounts
// (one in 997 malformed) from a seed it logs, and returns a generator of
// that seed, the test's folder, the input, the data folder and the
// arguments of `ledger run` on them with store ("postgres": a database of
// t's own, see pgFileDSN).
func killSetup(t *testing.T, store string, lines int) (rng *rand.Rand, dir, input, data string, base []string) {
	t.Helper()
	if store == "postgres" {
		store = pgFileDSN(t)
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng = rand.New(rand.NewPCG(seed, 1))
	dir = t.TempDir()
	input = filepath.Join(dir, "ledger.csv")
	data = filepath.Join(dir, "data")
	if err := GenFile(input, GenOptions{Lines: lines, Accounts: 50, Seed: seed, MalformedEvery: 997}); err != nil {
		t.Fatal(err)
	}
	return rng, dir, input, data, []string{"--input", input, "--data", data, "--store", store, "--progress", "none"}
}

// TestStoreFailureEndsTheRun: when the store cannot save (here: writes to
// output.csv start failing, as on a full disk), the run ends with exit 1
// instead of skipping lines, the pointer stays within what was saved, and a
// restart on a healthy disk completes the ledger exactly.
func TestStoreFailureEndsTheRun(t *testing.T) {
	exe := ledgerExe(t)
	for _, store := range []string{"bbolt", "pebble"} {
		t.Run(store, func(t *testing.T) {
			dir := t.TempDir()
			input := filepath.Join(dir, "ledger.csv")
			data := filepath.Join(dir, "data")
			GenFile(input, GenOptions{Lines: 20000, Accounts: 9, Seed: 4})
			// Batches of 100 lines exactly (no growth while one commits):
			// the fault's moment bounds what was saved.
			args := []string{"--input", input, "--data", data, "--store", store, "--batch", "100", "--max-batch", "100", "--progress", "none"}
			c, err := startChildEnv(exe, args, filepath.Join(dir, "run1.log"), []string{faultEnv + "=5"})
			if err != nil {
				t.Fatal(err)
			}
			err = c.wait(childTimeout)
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != exitFailed {
				t.Fatalf("a run whose store fails: %v, want exit %d", err, exitFailed)
			}
			log, _ := os.ReadFile(filepath.Join(dir, "run1.log"))
			if !strings.Contains(string(log), "injected fault") {
				t.Fatalf("the log does not name the failure:\n%s", log)
			}
			info := checkNotAhead(t, c, input, data, true)
			if info.State.Applied == 0 || info.State.Applied > 500 {
				t.Fatalf("%d lines saved before the failure, want 1 to 500 (5 batches of at most 100)", info.State.Applied)
			}
			run := 1
			settle(t, exe, args, dir, &run)
			checkExact(t, data, input)
		})
	}
}
