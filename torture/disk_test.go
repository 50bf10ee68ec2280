package torture

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestFullDisk is scenario 6 on a real full disk: a small tmpfs is mounted
// (the tests run as root) and filled but for a little room, the ledger runs
// on it, must stop with an error that says the disk is full (never hang,
// never claim success), must leave the pointer not ahead of the store, and
// after the space is freed a restart finishes with nothing lost and
// nothing applied twice. Two layouts: the data folder on the full disk,
// and the input (so its pointer file) and the data folder on it.
//
// Injected write, sync and rename faults are covered by the package tests
// (feed/pointer_fault_test.go, feed/file_test.go, state/conformance_test.go,
// examples/ledger): see RELIABILITY.md.
func TestFullDisk(t *testing.T) {
	track(t)
	rng := newRand(t)
	rounds := pick(1, 6)
	for _, store := range []string{"bbolt", "pebble"} {
		for _, layout := range []string{"data", "input and data"} {
			t.Run(store+", "+layout+" on the full disk", func(t *testing.T) {
				for round := range rounds {
					dir := tempDir(t)
					mnt := filepath.Join(dir, "mnt")
					if !mountTmpfs(t, mnt, 16<<20) {
						return
					}
					input := filepath.Join(dir, "in.csv")
					if layout != "data" {
						input = filepath.Join(mnt, "in.csv")
					}
					data := filepath.Join(mnt, "data")
					gen(t, input, 60_000, rng.Uint64(), 1, 0)
					figures.inputs.Add(1)
					room := int64(64<<10 + rng.IntN(512<<10))
					filler := fill(t, mnt, room)
					figures.faults.Add(1)
					c := start(t, dir, runArgs(input, data, "--store", store)...)
					err := c.wait()
					c.checkNotAhead()
					if err == nil {
						t.Fatalf("round %d: the ledger settled on a full disk (%d bytes of room): it cannot have", round, room)
					}
					if !strings.Contains(c.stderr.String(), "no space left on device") {
						t.Errorf("round %d: the ledger's error does not say the disk is full:\n%s", round, tail(c.stderr.String()))
					}
					t.Logf("round %d: %d bytes of room: %v; last durable event %v", round, room, err, c.lastDurable())
					if err := os.Remove(filler); err != nil {
						t.Fatal(err)
					}
					if _, err := os.Stat(filepath.Join(data, "STORE")); err == nil {
						checkPointerOnDisk(t, input, data)
					}
					runToEnd(t, dir, runArgs(input, data, "--store", store)...)
					checkExact(t, data, input)
				}
			})
		}
	}
}

// mountTmpfs mounts a tmpfs of size bytes at dir and unmounts it at the
// end of the test. Where mounting is refused it fails the test in CI
// (CI=true) and logs loudly elsewhere, returning false.
func mountTmpfs(t *testing.T, dir string, size int) bool {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size))
	if err != nil {
		msg := fmt.Sprintf("FULL DISK NOT TESTED: cannot mount a tmpfs at %s: %v (run the tests as root on Linux)", dir, err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Log("!!!!!!!! " + msg + " !!!!!!!!")
		return false
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return true
}

// fill writes a file in dir until the disk is full, then gives room bytes
// back, and returns the file's path.
func fill(t *testing.T, dir string, room int64) string {
	t.Helper()
	p := filepath.Join(dir, "filler")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	var n int64
	for {
		w, err := f.Write(buf)
		n += int64(w)
		if errors.Is(err, syscall.ENOSPC) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Truncate(max(0, n-room)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}
