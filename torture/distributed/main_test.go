// Package distributed proves the partitioned ledger's guarantee on real
// processes: worker processes of `ledger run --source nats://… --store
// postgres://…` sharing the partitions of a JetStream stream, while the
// harness SIGKILLs workers, kills the NATS server (a child process, with
// SIGKILL) and restarts it, stops PostgreSQL with `pg_ctl -m immediate`
// (SIGQUIT to the postmaster) and starts it again, and freezes a worker
// with SIGSTOP past its lease, then wakes it. `ledger check --source`
// then sums the partitions' stores against the stream and the input: 0
// lines lost, 0 applied twice, each rejected line recorded once.
//
// The short version runs in `make test`; TIDEMARK_TORTURE=1 (`make
// torture`) runs the long one. See RELIABILITY.md.
package distributed

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

	"github.com/tidemark-go/tidemark/internal/natstest"
	"github.com/tidemark-go/tidemark/internal/pgtest"
)

// long reports whether the long versions run (TIDEMARK_TORTURE=1).
var long = os.Getenv("TIDEMARK_TORTURE") == "1"

// ledgerExe is the ledger program, built once by TestMain.
var ledgerExe string

func TestMain(m *testing.M) {
	natstest.RunChild()
	dir, err := os.MkdirTemp("", "tidemark-distributed-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "distributed:", err)
		os.Exit(2)
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = "/usr/local/go/bin/go"
	}
	ledgerExe = filepath.Join(dir, "ledger")
	cmd := exec.Command(goTool, "build", "-o", ledgerExe, "github.com/tidemark-go/tidemark/examples/ledger")
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "distributed: go build ledger: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(2)
	}
	code := pgtest.Main(m).Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// pick returns short or long by mode.
func pick[T any](short, long_ T) T {
	if long {
		return long_
	}
	return short
}

// newRand returns a seeded random source and logs the seed.
// TIDEMARK_TORTURE_SEED replays a run.
func newRand(t *testing.T) *rand.Rand {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("TIDEMARK_TORTURE_SEED"); s != "" {
		if n, err := strconv.ParseUint(s, 10, 64); err == nil {
			seed = n
		}
	}
	t.Logf("seed %d (TIDEMARK_TORTURE_SEED=%d replays it)", seed, seed)
	return rand.New(rand.NewPCG(seed, 7))
}

// tempDir is t.TempDir, or a kept folder when TIDEMARK_TORTURE_KEEP=1.
func tempDir(t *testing.T) string {
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
