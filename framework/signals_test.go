package framework_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/framework"
)

// runSignalChild runs a server on a feed that never settles until a
// signal stops it. With TIDEMARK_STUCK set, its processor ignores its
// context on line 20, so that the drain never ends. It prints "handled N"
// as it goes and "run returned: ERR" at the end, on stdout.
func runSignalChild() int {
	src := newMemSource(20)
	stuck := os.Getenv("TIDEMARK_STUCK") != ""
	p := &recProc{feeds: []string{"orders"}, handle: func(ctx context.Context, d tidemark.Delivery, _ []byte) error {
		fmt.Printf("handled %d\n", d.Seq)
		if stuck && d.Seq == 20 {
			select {} // ignores its context
		}
		return nil
	}}
	cfg := framework.Config{
		Feeds:  []framework.FeedConfig{{Name: "orders", Source: src, Overload: framework.OverloadConfig{Policy: framework.Pause}}},
		Groups: []framework.GroupConfig{{Name: "g", Processors: []string{"p"}}},
		Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)),
	}
	s, err := framework.New(cfg, framework.Processors{"p": p})
	if err != nil {
		fmt.Println("new:", err)
		return 2
	}
	ctx, stop := s.SignalContext(context.Background())
	defer stop()
	err = s.Run(ctx)
	fmt.Printf("run returned: %v\n", err)
	if err != nil {
		return 1
	}
	return 0
}

// signalChild starts the signal child and waits until it handled 20 lines.
func signalChild(t *testing.T, stuck bool) (*exec.Cmd, *logBuf, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=signals")
	if stuck {
		cmd.Env = append(cmd.Env, "TIDEMARK_STUCK=1")
	}
	stderr := &logBuf{}
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if sc.Text() == "handled 20" {
			return cmd, stderr, sc
		}
	}
	t.Fatalf("the child never handled 20 lines; stderr:\n%s", stderr.String())
	return nil, nil, nil
}

// SIGTERM stops a server run with SignalContext cleanly: a log line says it
// is stopping and how many lines it drains, Run returns nil, exit 0.
func TestSignalStopsRunCleanly(t *testing.T) {
	cmd, stderr, sc := signalChild(t, false)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	var rest strings.Builder
	for sc.Scan() {
		rest.WriteString(sc.Text() + "\n")
	}
	err := cmd.Wait()
	require.NoError(t, err, "stdout: %s\nstderr: %s", rest.String(), stderr.String())
	require.Contains(t, rest.String(), "run returned: <nil>")
	require.Contains(t, stderr.String(), "signal received: stopping")
	require.Contains(t, stderr.String(), "draining_lines=")
	require.Contains(t, stderr.String(), "server stopped")
}

// A second signal exits at once, with 128+SIGTERM, even when a processor
// never lets the drain end.
func TestSecondSignalExitsAtOnce(t *testing.T) {
	cmd, stderr, sc := signalChild(t, true)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	// Wait for the first signal's log line before sending the second.
	deadlineAt := time.Now().Add(deadline)
	for !strings.Contains(stderr.String(), "signal received: stopping") {
		if time.Now().After(deadlineAt) {
			t.Fatalf("no stop log line; stderr:\n%s", stderr.String())
		}
		time.Sleep(time.Millisecond)
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	for sc.Scan() { // to the end of its output
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "exit: %v", err)
	require.Equal(t, 128+int(syscall.SIGTERM), ee.ExitCode())
	require.Contains(t, stderr.String(), "second signal: exiting now")
}
