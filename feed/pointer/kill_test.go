package pointer

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const pointerChildEnv = "TIDEMARK_POINTER_CHILD"

// pointerChild is the child process of TestPointerKill: it stores pointer
// i for i = 1, 2, ... and prints "stored i" after each Store returned.
func pointerChild(path string, policy SyncPolicy) {
	pf := Open(path, Options{Sync: policy, SyncInterval: time.Millisecond})
	res, err := pf.Load()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	start := 1
	if res.Found {
		start = int(res.Record.Position/100) + 1
	}
	for i := start; ; i++ {
		if err := pf.Store(testPointer(uint64(policy)+1, i)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Fprintf(os.Stdout, "stored %d\n", i) // unbuffered: one write per line
	}
}

// TestPointerKill kills a real process that stores pointers with SIGKILL at
// a moment chosen by its progress, then checks that the pointer on disk is
// the last one the process reported stored, or the one it was storing: a
// killed process loses nothing that a Store returned, under every policy.
func TestPointerKill(t *testing.T) {
	if v := os.Getenv(pointerChildEnv); v != "" {
		path, policy, _ := strings.Cut(v, "|")
		n, _ := strconv.Atoi(policy)
		pointerChild(path, SyncPolicy(n))
		return
	}
	for _, policy := range []SyncPolicy{SyncEveryCommit, SyncInterval, SyncNever} {
		t.Run(policy.String(), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "in"+Suffix)
			last := 0
			for round, killAfter := range []int{1, 40, 150} {
				got := runPointerChild(t, path, policy, last+killAfter)
				res, err := Open(path, Options{Logger: quiet}).Load()
				if err != nil {
					t.Fatal(err)
				}
				if !res.Found {
					t.Fatalf("round %d: no pointer after the kill: %s", round, res.Reason)
				}
				want, next := testPointer(uint64(policy)+1, got), testPointer(uint64(policy)+1, got+1)
				if res.Record != want && res.Record != next {
					t.Fatalf("round %d: killed after stored %d: Load = %+v; want position %d or %d",
						round, got, res.Record, want.Position, next.Position)
				}
				last = int(res.Record.Position / 100)
			}
		})
	}
}

// runPointerChild starts the child, kills it with SIGKILL once it reported
// at least until stores, and returns the last store it reported.
func runPointerChild(t *testing.T, path string, policy SyncPolicy, until int) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestPointerKill$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s|%d", pointerChildEnv, path, int(policy)))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	last, killed := 0, false
	for sc.Scan() {
		n, err := strconv.Atoi(strings.TrimPrefix(sc.Text(), "stored "))
		if err != nil {
			continue
		}
		last = n
		if !killed && n >= until {
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed = true
		}
	}
	err = cmd.Wait() // the pipe is drained: every line the child wrote was read
	if !killed {
		t.Fatalf("the child ended before it was killed: %v\n%s", err, stderr.String())
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the child was not killed by SIGKILL: %v\n%s", err, stderr.String())
	}
	return last
}
