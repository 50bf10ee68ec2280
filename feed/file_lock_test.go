package feed

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark-go/tidemark/feed/pointer"
	"github.com/tidemark-go/tidemark/vfs"
)

const lockChildEnv = "TIDEMARK_LOCK_CHILD"

// lockChild is the child process of the lock tests. "hold PATH" makes a
// Committed source on PATH, prints "holding <pid>" and waits until its
// stdin closes (or it is killed); "try PATH" makes one and prints
// "locked: <error>" and exits 3 when the pointer is locked, or "started"
// and exits 0.
func lockChild(arg string) {
	mode, path, _ := strings.Cut(arg, " ")
	s, err := NewFileSource(Config{Path: path, Logger: slog.New(slog.DiscardHandler)})
	switch {
	case errors.Is(err, ErrPointerLocked):
		fmt.Printf("locked: %v\n", err)
		os.Exit(3)
	case err != nil:
		fmt.Printf("error: %v\n", err)
		os.Exit(2)
	}
	if mode == "try" {
		fmt.Println("started")
		s.Close()
		os.Exit(0)
	}
	fmt.Printf("holding %d\n", os.Getpid())
	io.Copy(io.Discard, os.Stdin)
	s.Close()
	os.Exit(0)
}

// startLockChild starts the lock test's child in mode on path.
func startLockChild(t *testing.T, mode, path string) (*exec.Cmd, *bufio.Scanner, io.WriteCloser) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestPointerLockChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), lockChildEnv+"="+mode+" "+path)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(deadline, func() { cmd.Process.Kill() })
	t.Cleanup(func() {
		timer.Stop()
		in.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd, bufio.NewScanner(out), in
}

// TestPointerLockChild is the entry point of the lock tests' child.
func TestPointerLockChild(t *testing.T) {
	if v := os.Getenv(lockChildEnv); v != "" {
		lockChild(v)
	}
}

// wantLocked checks that err says the pointer file of input is locked, by
// the process pid where the platform tells.
func wantLocked(t *testing.T, err error, input string, pid int) {
	t.Helper()
	if !errors.Is(err, ErrPointerLocked) {
		t.Fatalf("err %v, want ErrPointerLocked", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, input+pointer.Suffix) || !strings.Contains(msg, "stop the feed that holds it first") {
		t.Fatalf("error %q does not name the pointer file and what to do", msg)
	}
	if runtime.GOOS == "linux" && !strings.Contains(msg, fmt.Sprintf("held by process %d", pid)) {
		t.Fatalf("error %q does not name the holder, process %d", msg, pid)
	}
}

// TestPointerLockInProcess: a second Committed source on one pointer file,
// in the same process, fails at NewFileSource, before reading anything;
// the first one's Close releases the lock. The other strategies keep no
// pointer and take no lock.
func TestPointerLockInProcess(t *testing.T) {
	p := input(t, "a\nb\n")
	s1 := open(t, p, Config{})
	if g := s1.drain(); len(g) != 2 {
		t.Fatalf("%+v", g)
	}
	_, err := NewFileSource(Config{Path: p})
	wantLocked(t, err, p, os.Getpid())
	for _, strat := range []ReadStrategy{Earliest, OnceEarliest, Latest, OnceLatest} {
		s, err := NewFileSource(Config{Path: p, Strategy: strat})
		if err != nil {
			t.Fatalf("%v: %v", strat, err)
		}
		s.Close()
	}
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := open(t, p, Config{})
	if g := s2.drain(); len(g) != 2 {
		t.Fatalf("after the first source closed: %+v", g)
	}
}

// TestPointerLockMissingInput: sources on an input that does not exist yet
// wait for it, and two of them still conflict. A source closed before the
// input appeared leaves no pointer file behind.
func TestPointerLockMissingInput(t *testing.T) {
	p := input(t, "")
	s1 := open(t, p, Config{})
	if g, err := s1.poll(); err != nil || len(g) != 0 || s1.Status().State != StateWaiting {
		t.Fatalf("%v %v %+v", g, err, s1.Status())
	}
	_, err := NewFileSource(Config{Path: p})
	wantLocked(t, err, p, os.Getpid())
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p + pointer.Suffix); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the empty pointer file made for the lock is left behind: %v", err)
	}
	s2 := open(t, p, Config{})
	write(t, p, "a\n")
	if g := s2.drain(); len(g) != 1 {
		t.Fatalf("%+v", g)
	}
}

// TestPointerLockKeptAcrossCreate: the pointer file is created (or
// replaced) through a temporary file renamed over it; the lock moves with
// it, so that at no moment may a second source take the file at the path.
func TestPointerLockKeptAcrossCreate(t *testing.T) {
	for _, before := range []string{"missing", "legacy", "corrupt"} {
		t.Run(before, func(t *testing.T) {
			p := input(t, "a\nb\n")
			switch before {
			case "legacy":
				writeLegacy(t, p, 2)
			case "corrupt":
				write(t, p+pointer.Suffix, strings.Repeat("x", 100))
			}
			s := open(t, p, Config{})
			ino := identityOf(t, p+pointer.Suffix)
			g := s.drain()
			if err := s.Commit(g[len(g)-1].Epoch, g[len(g)-1].Position); err != nil {
				t.Fatal(err)
			}
			if res := loadPointer(t, p); !res.Found {
				t.Fatalf("pointer %+v", res)
			}
			if identityOf(t, p+pointer.Suffix) == ino {
				t.Fatal("the pointer file was not replaced: the test tests nothing")
			}
			_, err := NewFileSource(Config{Path: p})
			wantLocked(t, err, p, os.Getpid())
		})
	}
}

// TestPointerLockOtherProcess: a source in another process holds the
// pointer: this one fails at start, naming the holder's process ID; once
// the holder is killed with SIGKILL the operating system releases the
// lock and a source starts. The other way round, the child fails naming
// this process.
func TestPointerLockOtherProcess(t *testing.T) {
	p := input(t, "a\nb\n")
	cmd, out, _ := startLockChild(t, "hold", p)
	if !out.Scan() || !strings.HasPrefix(out.Text(), "holding ") {
		t.Fatalf("child: %q", out.Text())
	}
	pid, _ := strconv.Atoi(strings.TrimPrefix(out.Text(), "holding "))
	if pid != cmd.Process.Pid {
		t.Fatalf("child says pid %d, is %d", pid, cmd.Process.Pid)
	}
	_, err := NewFileSource(Config{Path: p})
	wantLocked(t, err, p, pid)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()

	s := open(t, p, Config{})
	if g := s.drain(); len(g) != 2 {
		t.Fatalf("after the holder died: %+v", g)
	}
	try, tout, _ := startLockChild(t, "try", p)
	var text []string
	for tout.Scan() {
		text = append(text, tout.Text())
	}
	err = try.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 || len(text) != 1 {
		t.Fatalf("second process: %v, output %q", err, text)
	}
	if msg := text[0]; !strings.Contains(msg, p+pointer.Suffix) || (runtime.GOOS == "linux" && !strings.Contains(msg, fmt.Sprintf("held by process %d", os.Getpid()))) {
		t.Fatalf("second process: %q does not name the pointer and the holder %d", msg, os.Getpid())
	}
}

// TestPointerLockEmptyAfterKill: a process killed after it took the lock
// (creating the pointer file empty) and before its first write leaves an
// empty pointer file: the next start reads from 0 under a new epoch with a
// note, not a warning of damage.
func TestPointerLockEmptyAfterKill(t *testing.T) {
	p := input(t, "a\nb\n")
	cmd, out, _ := startLockChild(t, "hold", p)
	if !out.Scan() || !strings.HasPrefix(out.Text(), "holding ") {
		t.Fatalf("child: %q", out.Text())
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if fi, err := os.Stat(p + pointer.Suffix); err != nil || fi.Size() != 0 {
		t.Fatalf("pointer file after the kill: %v %v", fi, err)
	}
	s := open(t, p, Config{})
	if g := s.drain(); len(g) != 2 || g[0].Position != 2 {
		t.Fatalf("%+v", g)
	}
	if n := s.log.count(slog.LevelWarn); n != 0 || len(s.log.find(slog.LevelInfo, "holds no record yet")) != 1 {
		t.Fatalf("log:\n%s", s.log)
	}
	if res := loadPointer(t, p); !res.Found || res.Record.Epoch != s.Status().Epoch {
		t.Fatalf("pointer %+v", res)
	}
}

// TestPointerLockCreateFaults: a create of the pointer file that fails
// (its temporary file cannot be locked, or the rename fails) leaves the
// lock where it was; the retry moves it to the new file. At no moment may
// a second pointer file on the path take it.
func TestPointerLockCreateFaults(t *testing.T) {
	for _, op := range []vfs.Op{vfs.OpLock, vfs.OpRename, vfs.OpSync} {
		t.Run(string(op), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "in"+pointer.Suffix)
			tmp := path + pointer.TempSuffix
			// The temporary file's lock and sync; the rename, by its target.
			c := &vfs.Counter{Match: func(o vfs.Op, name string) bool {
				return o == op && (name == tmp || o == vfs.OpRename && name == path)
			}, FailAt: 1}
			pf := pointer.Open(path, pointer.Options{FS: vfs.Inject(vfs.Default(), c.Injector()), Logger: slog.New(slog.DiscardHandler)})
			defer pf.Close()
			if err := pf.Lock(); err != nil {
				t.Fatal(err)
			}
			other := func() error {
				o := pointer.Open(path, pointer.Options{Logger: slog.New(slog.DiscardHandler)})
				defer o.Close()
				return o.Lock()
			}
			p := pointer.Record{Epoch: 5, Position: 0}
			if err := pf.Store(p); err == nil || c.Count() == 0 {
				t.Fatalf("the injected %s did not fail the create: %v", op, err)
			}
			if err := other(); !errors.Is(err, ErrPointerLocked) {
				t.Fatalf("after the failed create: %v", err)
			}
			if err := pf.Store(p); err != nil {
				t.Fatal(err)
			}
			if err := other(); !errors.Is(err, ErrPointerLocked) {
				t.Fatalf("after the create: %v", err)
			}
			if res, err := pf.Load(); err != nil || !res.Found || res.Record != p {
				t.Fatalf("%+v %v", res, err)
			}
			if err := pf.Close(); err != nil {
				t.Fatal(err)
			}
			if err := other(); err != nil {
				t.Fatalf("after Close: %v", err)
			}
		})
	}
}
