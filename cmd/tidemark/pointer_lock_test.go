package main

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidemark-go/tidemark/feed"
	"github.com/tidemark-go/tidemark/feed/pointer"
)

// holderEnv makes the test binary a feed holding a pointer (see
// holdPointer) instead of running the tests.
const holderEnv = "TIDEMARK_CLI_HOLDER"

// holdPointer is the child: a COMMITTED file source on the input (and
// pointer folder) in arg, which prints "holding" once it holds the
// pointer's lock and keeps it until its stdin closes.
func holdPointer(arg string) {
	input, dir, _ := strings.Cut(arg, "\n")
	src, err := feed.NewFileSource(feed.Config{Path: input, PointerDir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	fmt.Println("holding")
	io.Copy(io.Discard, os.Stdin)
	src.Close()
	os.Exit(0)
}

// startHolder starts a child process that holds the pointer of input (in
// dir, "" for beside it) like a running feed, and returns its process ID;
// the child ends with the test.
func startHolder(t *testing.T, input, dir string) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holderEnv+"="+input+"\n"+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	timer := time.AfterFunc(time.Minute, func() { cmd.Process.Kill() })
	t.Cleanup(func() {
		timer.Stop()
		in.Close()
		cmd.Wait()
	})
	sc := bufio.NewScanner(out)
	require.True(t, sc.Scan(), "the holder printed nothing")
	require.Equal(t, "holding", sc.Text())
	return cmd.Process.Pid
}

// wantRefused checks that r refused a pointer that the process pid holds,
// saying a feed is running, which process, and what to do.
func wantRefused(t *testing.T, r result, pid int) {
	t.Helper()
	expect(t, r, exitFail)
	require.Contains(t, r.stderr, "a feed is running on it")
	require.Contains(t, r.stderr, "stop the feed first")
	if runtime.GOOS == "linux" {
		require.Contains(t, r.stderr, fmt.Sprintf("held by process %d", pid))
	}
}

// TestPointerSetMigrateRefuseLocked: set and migrate refuse a pointer file
// that a running feed (another process) holds, and change nothing; once
// the feed is stopped they write it. show reads it all the same.
func TestPointerSetMigrateRefuseLocked(t *testing.T) {
	ptr := pair(t, "current.bin", "hello.txt")
	input := strings.TrimSuffix(ptr, pointer.Suffix)
	before := readFile(t, ptr)
	pid := startHolder(t, input, "")
	wantRefused(t, tm("pointer", "set", ptr, "--position", "6"), pid)
	require.Equal(t, before, readFile(t, ptr), "a refused set changed the pointer")
	expect(t, tm("pointer", "show", ptr), exitOK)

	legacy := pair(t, "legacy-ascii.bin", "hello.txt")
	lbefore := readFile(t, legacy)
	pid = startHolder(t, strings.TrimSuffix(legacy, pointer.Suffix), "")
	wantRefused(t, tm("pointer", "migrate", legacy), pid)
	require.Equal(t, lbefore, readFile(t, legacy), "a refused migrate changed the pointer")
	// A dry run writes nothing, and needs no lock.
	expect(t, tm("pointer", "migrate", legacy, "--dry-run"), exitOK)
}

// TestPointerSetAfterFeedStopped: once the holder is gone the lock is
// free again.
func TestPointerSetAfterFeedStopped(t *testing.T) {
	ptr := pair(t, "current.bin", "hello.txt")
	input := strings.TrimSuffix(ptr, pointer.Suffix)
	src, err := feed.NewFileSource(feed.Config{Path: input, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	r := tm("pointer", "set", ptr, "--position", "6")
	wantRefused(t, r, os.Getpid())
	require.Contains(t, r.stderr, "(this process)")
	require.NoError(t, src.Close())
	expect(t, tm("pointer", "set", ptr, "--position", "6"), exitOK)
	_, line := resume(t, ptr)
	require.Equal(t, "world", line)
}

// TestPointerInput: --input names the input of a pointer kept in another
// folder (a feed's pointerDir); a pointer named after another input is
// refused.
func TestPointerInput(t *testing.T) {
	ptr := pair(t, "current.bin", "hello.txt")
	input := strings.TrimSuffix(ptr, pointer.Suffix)
	dir := filepath.Join(t.TempDir(), "pointers")
	require.NoError(t, os.Mkdir(dir, 0o755))
	moved := filepath.Join(dir, filepath.Base(ptr))
	require.NoError(t, os.Rename(ptr, moved))

	r := tm("pointer", "show", moved, "--input", input)
	expect(t, r, exitOK)
	require.Contains(t, r.stdout, "verdict       matches")
	pid := startHolder(t, input, dir)
	wantRefused(t, tm("pointer", "set", moved, "--input", input, "--position", "6"), pid)

	other := filepath.Join(dir, "other.log"+pointer.Suffix)
	r = tm("pointer", "set", other, "--input", input, "--position", "6")
	expect(t, r, exitUsage)
	require.Contains(t, r.stderr, "is not the pointer file of input")
}
