package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/tidemark-go/tidemark/state"
)

// TestRunSetsMemoryLimit runs ledger run as a user does, with the runtime's
// memory limit logged: the default budget sets 64 + 32 - 8 MiB, a budget of
// 128 MiB 184 MiB; a Pebble store's run leaves out Pebble's block cache and
// memtables in a build with cgo, and 8 MiB for the C allocator (56 MiB),
// also for a data folder made before; a run without a budget sets none,
// and GOMEMLIMIT is kept.
func TestRunSetsMemoryLimit(t *testing.T) {
	exe, dir, input := ledgerWithInput(t, "1,alice,10\n2,bob,-3\n")
	// Pebble's limit leaves out its block cache and memtables in a build
	// with cgo (the ledger is built as this test is): state.MemoryLimit's.
	pebbleLimit, err := state.MemoryLimit("pebble:"+dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		name string
		args []string
		env  string
		want string
	}{
		{"default budget", nil, "", `memory limit set.* limit_bytes=92274688 cache_budget_bytes=33554432`},
		{"a budget of 128 MiB", []string{"--cache-size", "134217728"}, "", `memory limit set.* limit_bytes=192937984 cache_budget_bytes=134217728`},
		{"pebble", []string{"--store", "pebble"}, "", fmt.Sprintf(`memory limit set.* limit_bytes=%d cache_budget_bytes=33554432`, pebbleLimit)},
		{"no budget", []string{"--cache-size", "-1"}, "", `no memory limit set: the run has no cache budget`},
		{"GOMEMLIMIT", nil, "GOMEMLIMIT=200MiB", `memory limit: GOMEMLIMIT's kept.* GOMEMLIMIT=200MiB ceiling_bytes=100663296`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := filepath.Join(dir, "data", string(rune('a'+i)))
			cmd := exec.Command(exe, append([]string{"run", "--input", input, "--data", data, "--pointer-dir", data, "--progress", "none", "--log-level", "info"}, tc.args...)...)
			cmd.Env = os.Environ()
			if tc.env != "" {
				cmd.Env = append(cmd.Env, tc.env)
			}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("ledger run: %v\n%s", err, stderr.String())
			}
			if !regexp.MustCompile(tc.want).Match(stderr.Bytes()) {
				t.Fatalf("ledger run's log has no line matching %q:\n%s", tc.want, stderr.String())
			}
			if tc.name != "pebble" {
				return
			}
			// Again on the folder it made, without --store: the folder's
			// backend, not the flag's default, sets the limit.
			cmd = exec.Command(exe, "run", "--input", input, "--data", data, "--pointer-dir", data, "--progress", "none", "--log-level", "info")
			stderr.Reset()
			cmd.Stderr = &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("ledger run again: %v\n%s", err, stderr.String())
			}
			if !regexp.MustCompile(tc.want).Match(stderr.Bytes()) {
				t.Fatalf("ledger run again: its log has no line matching %q:\n%s", tc.want, stderr.String())
			}
		})
	}
}

// TestRunInProcessKeepsMemoryLimit runs Main in the test's process: the
// runtime's memory limit is the process's, and only ledger itself sets it.
func TestRunInProcessKeepsMemoryLimit(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "in.csv")
	if err := os.WriteFile(input, []byte("1,alice,10\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := debug.SetMemoryLimit(-1)
	var out, errb bytes.Buffer
	if code := Main([]string{"run", "--input", input, "--data", filepath.Join(dir, "data"), "--progress", "none"}, &out, &errb); code != exitOK {
		t.Fatalf("ledger run: exit %d\n%s", code, errb.String())
	}
	if after := debug.SetMemoryLimit(-1); after != before {
		t.Fatalf("the process's memory limit went from %d to %d in a run of Main", before, after)
	}
	if before != math.MaxInt64 && os.Getenv("GOMEMLIMIT") == "" {
		t.Logf("the test process has a memory limit of %d", before)
	}
}

// TestMemoryCeiling: 64 MiB and the budget; none without a budget.
func TestMemoryCeiling(t *testing.T) {
	for _, tc := range []struct{ cache, want int64 }{
		{0, 96 << 20},
		{1 << 30, (64 << 20) + (1 << 30)},
		{-1, 0},
	} {
		if got := memoryCeiling(tc.cache); got != tc.want {
			t.Errorf("memoryCeiling(%d) = %d, want %d", tc.cache, got, tc.want)
		}
	}
}

// TestRunDamagedStoreFileSetsNoLimit: a data folder whose STORE file is
// damaged sets no memory limit (its backend is not known before the
// open), and the run fails with the open's error, which names the damage
// and what to do.
func TestRunDamagedStoreFileSetsNoLimit(t *testing.T) {
	exe, dir, input := ledgerWithInput(t, "1,alice,10\n")
	data := filepath.Join(dir, "data")
	run := func() (string, error) {
		cmd := exec.Command(exe, "run", "--input", input, "--data", data, "--pointer-dir", data, "--progress", "none", "--log-level", "info")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		return stderr.String(), err
	}
	if out, err := run(); err != nil {
		t.Fatalf("ledger run: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(data, "STORE"), []byte("tidemark state store\nbackend bb\x7flt\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := run()
	if err == nil {
		t.Fatalf("ledger run on a damaged STORE file succeeded:\n%s", out)
	}
	for _, want := range []string{`no memory limit set: the store's backend is not known before it opens`, `it is damaged`, `restore the folder from a backup`} {
		if !strings.Contains(out, want) {
			t.Errorf("ledger run's stderr lacks %q:\n%s", want, out)
		}
	}
}

// ledgerWithInput returns the ledger's executable, a new folder, and the
// input in.csv written there with lines.
func ledgerWithInput(t *testing.T, lines string) (exe, dir, input string) {
	t.Helper()
	exe, dir = ledgerExe(t), t.TempDir()
	input = filepath.Join(dir, "in.csv")
	if err := os.WriteFile(input, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	return exe, dir, input
}
