package state

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/tidemark-go/tidemark/internal/pgtest"
)

// TestMain checks that no test leaves a goroutine behind (a committer that
// was not stopped, a Pebble that was not closed). The crash, lock and WAL
// children are exempt: they are killed, or exit themselves. The
// PostgreSQL server the tests start is removed at the end (see
// pgtest.Main).
func TestMain(m *testing.M) {
	if os.Getenv(envCrashChild) != "" || os.Getenv(envLockChild) != "" || os.Getenv(envWALChild) != "" {
		os.Exit(m.Run())
	}
	goleak.VerifyTestMain(pgtest.Main(m))
}
