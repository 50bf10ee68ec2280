package state

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-go/tidemark/vfs"
)

// The lock tests race real processes: the test binary re-executed as a
// child that opens a store folder with a backend when told to, and says
// what it got.

const envLockChild = "TIDEMARK_STATE_LOCK_CHILD"

// TestLockChild is the child; it does nothing in a normal run. It prints
// "pid N", waits for a line on stdin, opens LOCK_DIR as LOCK_BACKEND with
// LOCK_TIMEOUT, prints "result ok", "result locked MSG", "result mismatch
// MSG" or "result other MSG", and, when it opened the store, holds it until
// stdin ends (LOCK_HOLD=1) or closes it at once.
func TestLockChild(t *testing.T) {
	if os.Getenv(envLockChild) == "" {
		return
	}
	fmt.Println("pid", os.Getpid())
	in := bufio.NewReader(os.Stdin)
	if _, err := in.ReadString('\n'); err != nil {
		os.Exit(3)
	}
	timeout, _ := time.ParseDuration(os.Getenv("LOCK_TIMEOUT"))
	s, err := Open(os.Getenv("LOCK_BACKEND")+":"+os.Getenv("LOCK_DIR"), &Options{Logger: quietLogger(), LockTimeout: timeout})
	switch {
	case err == nil:
		fmt.Println("result ok")
	case errors.Is(err, ErrLocked):
		fmt.Println("result locked", err)
	case errors.Is(err, ErrBackendMismatch):
		fmt.Println("result mismatch", err)
	default:
		fmt.Println("result other", err)
	}
	if s != nil {
		if os.Getenv("LOCK_HOLD") == "1" {
			io.Copy(io.Discard, in) // until the parent closes stdin
		}
		if err := s.Close(); err != nil {
			fmt.Println("close", err)
		}
	}
	os.Exit(0)
}

// lockChild is a running child of TestLockChild.
type lockChild struct {
	backend string
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	lines   chan string
	pid     int
}

func startLockChild(t *testing.T, dir, backend string, timeout time.Duration, hold bool) *lockChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), envLockChild+"=1", "LOCK_DIR="+dir, "LOCK_BACKEND="+backend,
		"LOCK_TIMEOUT="+timeout.String(), "LOCK_HOLD="+map[bool]string{true: "1", false: "0"}[hold])
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &lockChild{backend: backend, cmd: cmd, stdin: stdin, lines: make(chan string, 16)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	line := c.next(t)
	if _, err := fmt.Sscanf(line, "pid %d", &c.pid); err != nil {
		t.Fatalf("child said %q", line)
	}
	return c
}

func (c *lockChild) next(t *testing.T) string {
	t.Helper()
	line, ok := <-c.lines
	if !ok {
		t.Fatalf("%s child ended early: %v", c.backend, c.cmd.Wait())
	}
	return line
}

// TestTwoProcessesCreateOneFolder: two processes create one fresh folder
// at once, one as bbolt and one as Pebble. One wins; the other gets
// ErrLocked naming the folder and the winner's pid (it gave up while the
// winner held the store), or ErrBackendMismatch (it waited, and found the
// winner's STORE). The folder holds one store, the winner's, whatever the
// round. It used to give two "successful" opens and a folder with both.
func TestTwoProcessesCreateOneFolder(t *testing.T) {
	rounds := 12
	locked, mismatched := 0, 0
	for r := 0; r < rounds; r++ {
		// Even rounds: the winner holds the store, the loser gives up
		// soon. Odd rounds: the winner closes at once, the loser waits.
		hold := r%2 == 0
		timeout := 10 * time.Second
		if hold {
			timeout = 300 * time.Millisecond
		}
		dir := filepath.Join(t.TempDir(), "store")
		children := []*lockChild{
			startLockChild(t, dir, Bolt, timeout, hold),
			startLockChild(t, dir, Pebble, timeout, hold),
		}
		for _, c := range children {
			if _, err := io.WriteString(c.stdin, "go\n"); err != nil {
				t.Fatal(err)
			}
		}
		results := map[*lockChild]string{}
		for _, c := range children {
			results[c] = c.next(t)
		}
		for _, c := range children {
			c.stdin.Close()
			for line := range c.lines {
				t.Errorf("round %d: %s child: %s", r, c.backend, line)
			}
			if err := c.cmd.Wait(); err != nil {
				t.Fatalf("round %d: %s child: %v", r, c.backend, err)
			}
		}
		var winner, loser *lockChild
		for _, c := range children {
			if results[c] == "result ok" {
				if winner != nil {
					t.Fatalf("round %d: both opened the folder: %v", r, results)
				}
				winner = c
			} else {
				loser = c
			}
		}
		if winner == nil {
			t.Fatalf("round %d: nobody opened the folder: %v", r, results)
		}
		msg := results[loser]
		switch {
		case strings.HasPrefix(msg, "result locked "):
			locked++
			if !strings.Contains(msg, dir) {
				t.Fatalf("round %d: the lock error does not name the folder: %s", r, msg)
			}
			if runtime.GOOS == "linux" && !strings.Contains(msg, "process "+strconv.Itoa(winner.pid)) {
				t.Fatalf("round %d: the lock error does not name the holder, pid %d: %s", r, winner.pid, msg)
			}
		case strings.HasPrefix(msg, "result mismatch "):
			mismatched++
			if !strings.Contains(msg, "created by "+winner.backend) {
				t.Fatalf("round %d: the mismatch does not name the winner's backend: %s", r, msg)
			}
		default:
			t.Fatalf("round %d: the loser (%s) got %s", r, loser.backend, msg)
		}
		if hold && !strings.HasPrefix(msg, "result locked ") || !hold && !strings.HasPrefix(msg, "result mismatch ") {
			t.Fatalf("round %d (winner holding: %v): the loser got %s", r, hold, msg)
		}
		// One store in the folder: the winner's, with its STORE.
		s, err := OpenDir(dir, testOpts())
		if err != nil {
			t.Fatalf("round %d: the folder after the race: %v", r, err)
		}
		if s.Backend() != winner.backend {
			t.Fatalf("round %d: the folder's store is %s, the winner was %s", r, s.Backend(), winner.backend)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if disk, err := onDisk(&Options{}, vfs.Default(), dir); err != nil || len(disk) != 1 || disk[0] != winner.backend {
			t.Fatalf("round %d: backends on disk %v (%v), winner %s", r, disk, err, winner.backend)
		}
	}
	t.Logf("%d rounds: the loser gave up locked %d times, found the winner's store %d times", rounds, locked, mismatched)
}

// TestLockIsReleasedByClose: Close lets the folder go: another Open takes
// it at once, and a process killed while it held it does not keep it (the
// kernel drops an flock with its process).
func TestLockIsReleasedByClose(t *testing.T) {
	forEachLocalBackend(t, func(t *testing.T, be backend) {
		dir := t.TempDir()
		s := mustOpen(t, be, dir, testOpts())
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		o := testOpts()
		o.LockTimeout = 20 * time.Millisecond
		s, err := be.open(dir, o)
		if err != nil {
			t.Fatalf("open after Close: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		// A child takes the folder and is killed while it holds it.
		c := startLockChild(t, dir, be.name, time.Second, true)
		io.WriteString(c.stdin, "go\n")
		if line := c.next(t); line != "result ok" {
			t.Fatalf("child: %s", line)
		}
		if _, err := be.open(dir, o); !errors.Is(err, ErrLocked) {
			t.Fatalf("open while a child holds the folder: %v", err)
		}
		if err := c.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		c.cmd.Wait()
		o.LockTimeout = 10 * time.Second
		s, err = be.open(dir, o)
		if err != nil {
			t.Fatalf("open after the holder was killed: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	})
}
