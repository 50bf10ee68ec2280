// Package rig holds what the torture suites share: the long/short mode,
// a seeded random source that a failing run can be replayed with, folders
// that can be kept for a post-mortem, and the ledger program built once per
// test binary.
package rig

import (
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

// Long reports whether the long versions run (TIDEMARK_TORTURE=1).
var Long = os.Getenv("TIDEMARK_TORTURE") == "1"

// Pick returns short or long by mode.
func Pick[T any](short, long T) T {
	if Long {
		return long
	}
	return short
}

// NewRand returns a seeded random source and logs the seed.
// TIDEMARK_TORTURE_SEED replays a run; a value that is not a seed fails the
// test rather than run with another one.
func NewRand(t testing.TB) *rand.Rand {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("TIDEMARK_TORTURE_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("TIDEMARK_TORTURE_SEED=%q is not a seed (an unsigned decimal integer, as a run logs it): %v", s, err)
		}
		seed = n
	}
	t.Logf("seed %d (TIDEMARK_TORTURE_SEED=%d replays it)", seed, seed)
	return rand.New(rand.NewPCG(seed, 7))
}

// TempDir is t.TempDir, or a kept folder when TIDEMARK_TORTURE_KEEP=1 (its
// path is logged), to read the runs' logs after a failure.
func TempDir(t testing.TB) string {
	t.Helper()
	if os.Getenv("TIDEMARK_TORTURE_KEEP") != "1" {
		return t.TempDir()
	}
	d, err := os.MkdirTemp("", "torture-"+strings.ReplaceAll(t.Name(), "/", "-")+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("keeping %s", d)
	return d
}

// BuildLedger builds the ledger program (examples/ledger) into a new
// temporary folder and returns the program's path and a function that
// removes the folder. It is meant for TestMain, before any test runs.
func BuildLedger(suite string) (exe string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "tidemark-"+suite+"-bin-")
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", suite, err)
	}
	cleanup = func() { os.RemoveAll(dir) }
	exe = filepath.Join(dir, "ledger")
	cmd := exec.Command(goTool(), "build", "-o", exe, "github.com/tidemark-go/tidemark/examples/ledger")
	if out, err := cmd.CombinedOutput(); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("%s: go build ledger: %w\n%s", suite, err, out)
	}
	return exe, cleanup, nil
}

// goTool is the go command: the one on PATH, else the one of $GOROOT, else
// the usual install's.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	if r := os.Getenv("GOROOT"); r != "" {
		return filepath.Join(r, "bin", "go")
	}
	return "/usr/local/go/bin/go"
}
