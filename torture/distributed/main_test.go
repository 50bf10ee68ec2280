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
	"os"
	"testing"

	"github.com/tidemark-go/tidemark/internal/natstest"
	"github.com/tidemark-go/tidemark/internal/pgtest"
	"github.com/tidemark-go/tidemark/torture/internal/rig"
)

// long reports whether the long versions run (TIDEMARK_TORTURE=1).
var long = rig.Long

// ledgerExe is the ledger program, built once by TestMain.
var ledgerExe string

func TestMain(m *testing.M) {
	natstest.RunChild()
	exe, cleanup, err := rig.BuildLedger("distributed")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ledgerExe = exe
	code := pgtest.Main(m).Run()
	cleanup()
	os.Exit(code)
}

// The suite's knobs, shared with package torture (package rig).
var (
	newRand = rig.NewRand
	tempDir = rig.TempDir
)

func pick[T any](short, long T) T { return rig.Pick(short, long) }
