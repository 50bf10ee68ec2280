package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/tidemark-go/tidemark/internal/natstest"
	"github.com/tidemark-go/tidemark/internal/pgtest"
)

// The crash tests run the ledger as a child process and kill it with
// SIGKILL. The child is this package built once, without the race detector
// (the tests' own code runs with it), so that 100,000-line runs stay fast.
var (
	buildOnce sync.Once
	builtExe  string
	buildErr  error
	buildDir  string
)

// TestMain lets the binary run as a NATS server child (natstest), and
// removes the PostgreSQL clusters the tests started (pgtest).
func TestMain(m *testing.M) {
	natstest.RunChild()
	code := pgtest.Main(m).Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// ledgerExe returns the path of the built ledger program.
func ledgerExe(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "ledger-test-bin-")
		if buildErr != nil {
			return
		}
		goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, err := os.Stat(goTool); err != nil {
			goTool = "go"
		}
		builtExe = filepath.Join(buildDir, "ledger")
		cmd := exec.Command(goTool, "build", "-o", builtExe, ".")
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtExe
}
