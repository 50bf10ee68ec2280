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
// pgtest.Main). Pebble (v2.1.7) keeps a reference of its file cache when
// an iterator stops on a damaged block, and its Close then panics (the
// store returns a *CorruptError) and leaves that cache's goroutines: a
// test that damages a table on purpose (TestPebbleLeftCheckedDamageAtRest
// StillFails) cannot help it. Every other goroutine of a Pebble left open
// is still caught.
func TestMain(m *testing.M) {
	if os.Getenv(envCrashChild) != "" || os.Getenv(envLockChild) != "" || os.Getenv(envWALChild) != "" {
		os.Exit(m.Run())
	}
	goleak.VerifyTestMain(pgtest.Main(m),
		goleak.IgnoreTopFunction("github.com/cockroachdb/pebble/v2/internal/genericcache.(*shard[...]).releaseLoop"))
}
