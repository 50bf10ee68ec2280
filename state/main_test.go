package state

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind (a committer that
// was not stopped, a Pebble that was not closed). The crash child is
// exempt: it is killed.
func TestMain(m *testing.M) {
	if os.Getenv(envCrashChild) != "" {
		os.Exit(m.Run())
	}
	goleak.VerifyTestMain(m)
}
