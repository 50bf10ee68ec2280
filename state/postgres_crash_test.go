package state

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark-go/tidemark/internal/pgtest"
)

// The PostgreSQL store under the faults of a database: the server stopped
// at once (pg_ctl -m immediate) and restarted while a child applies, a
// connection ended in the middle of a commit, and an owner frozen past its
// lease while another takes over. Each ends with the checks of the crash
// tests: the state, the recorded position and the output agree, the
// pointer is not ahead, and a last run applies every line exactly once.

// child is a crash child run by a test that handles its lines itself.
type child struct {
	cmd   *exec.Cmd
	lines chan string
}

func startChild(t *testing.T, cfg crashConfig, dir string) *child {
	t.Helper()
	cmd, out := startTestChild(t, "TestCrashChild", cfg.env(t, dir))
	c := &child{cmd: cmd, lines: make(chan string, 1024)}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
		for range c.lines {
		}
		cmd.Wait()
	})
	return c
}

// until reads the child's lines until one is at least line target of
// the input (false if the child ended first).
func (c *child) until(target int) bool {
	for line := range c.lines {
		var n int
		if _, err := fmt.Sscanf(line, "progress %d", &n); err == nil && n >= target {
			return true
		}
	}
	return false
}

// rest reads the child's lines to its end and returns them, and how it
// exited.
func (c *child) rest() ([]string, error) {
	var lines []string
	for line := range c.lines {
		lines = append(lines, line)
	}
	return lines, c.cmd.Wait()
}

// TestPostgresImmediateStopMidRun stops the server at once while a child
// applies (a crash of PostgreSQL: no checkpoint, recovery from the WAL at
// the next start), three times. The child's store fails and the child
// exits; after the restart nothing durable is lost and nothing is applied
// twice.
func TestPostgresImmediateStopMidRun(t *testing.T) {
	pg := pgtest.NewCluster(t)
	dir := t.TempDir()
	spec := pgtest.WithParam(pgtest.WithParam(pg.DSN("postgres"), "store", "crash"), "lease", "1s")
	cfg := crashConfig{backend: Postgres, spec: spec}
	var last int64
	for i, target := range []int{1500, 6000, 12000} {
		c := startChild(t, cfg, dir)
		if !c.until(target) {
			t.Fatalf("round %d: the child ended before line %d", i+1, target)
		}
		if err := pg.StopImmediate(); err != nil {
			t.Fatal(err)
		}
		lines, err := c.rest()
		if err == nil || !strings.Contains(strings.Join(lines, "\n"), "error") {
			t.Fatalf("round %d: the child went on without its server: exit %v, output %q", i+1, err, lines)
		}
		if err := pg.Start(); err != nil {
			t.Fatal(err)
		}
		n := checkAgreeAt(t, spec, Postgres, dir)
		t.Logf("round %d: server stopped at line >= %d: %d lines recorded, pointer at line %d", i+1, target, n, readPointer(dir)/lineLen)
		if n < last {
			t.Fatalf("recorded position went back from line %d to %d", last, n)
		}
		last = n
	}
	if !runChild(t, cfg, dir, nil) {
		t.Fatal("the last run did not finish")
	}
	if n := checkAgreeAt(t, spec, Postgres, dir); n != crashLines {
		t.Fatalf("after the last run %d lines applied, want %d", n, crashLines)
	}
}

// TestPostgresFrozenOwnerIsFenced freezes a child (SIGSTOP) past its
// lease, takes the store over and writes to it, then lets the child go on
// (SIGCONT): the child's next commit is refused (ErrFenced) and it exits;
// nothing it staged is visible; a restart finishes the input once.
func TestPostgresFrozenOwnerIsFenced(t *testing.T) {
	dir := t.TempDir()
	cfg := crashConfig{backend: Postgres}
	c := startChild(t, cfg, dir)
	if !c.until(3000) {
		t.Fatal("the child ended early")
	}
	if err := c.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitLeaseExpired(t, dir)
	// The new owner: checks what is durable, and writes.
	n0 := checkAgree(t, Postgres, dir)
	s, err := Open(crashSpec(t, Postgres, dir), &Options{Logger: quietLogger(), Unbound: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(context.Background(), del("other", 1, 1), func(tx *Tx) error { return tx.Put([]byte("taken"), []byte("yes")) }); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	lines, err := c.rest()
	out := strings.Join(lines, "\n")
	if err == nil || strings.Contains(out, "done") || !strings.Contains(out, ErrFenced.Error()) {
		t.Fatalf("the frozen owner went on after the take-over: exit %v, output %q", err, out)
	}
	n1 := checkAgree(t, Postgres, dir)
	if n1 != n0 {
		t.Fatalf("%d lines recorded at the take-over, %d after the old owner woke: its late commit landed", n0, n1)
	}
	s = mustOpen(t, backends()[2], dir, &Options{Unbound: true})
	if err := s.View(func(tx *Tx) error {
		if v, ok, err := tx.Get([]byte("taken")); err != nil || !ok || string(v) != "yes" {
			return fmt.Errorf("the new owner's write: %q %v %v", v, ok, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	t.Logf("frozen at line >= 3000 with %d lines durable; its late commit refused", n0)
	finishAndCheck(t, cfg, dir, "restart")
}

// TestPostgresConnectionEndedDuringCommit ends the server process of a
// store's commit while its transaction runs (a trigger holds it there):
// the commit fails, the store fails, and a reopen finds the state of the
// commit before; the replay applies the lost lines once.
func TestPostgresConnectionEndedDuringCommit(t *testing.T) {
	dir := t.TempDir()
	be := backends()[2]
	s := mustOpen(t, be, dir, &Options{Unbound: true, BatchSize: 1 << 20, BatchInterval: time.Hour})
	ctx := context.Background()
	for n := 1; n <= 10; n++ {
		applyLine(t, s, del("f", 1, n))
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	slowKey := append(newBucketInfo("", "").prefix, "slow"...)
	rs, _ := pgRowsOf(t, dir)
	heal := pgSlowInserts(t, dir, rs.table, fmt.Sprintf(`NEW.k = '\x%x'::bytea`, slowKey))
	for n := 11; n <= 12; n++ {
		applyLine(t, s, del("f", 1, n))
	}
	if _, err := s.Apply(ctx, del("f", 1, 13), func(tx *Tx) error { return tx.Put([]byte("slow"), []byte("x")) }); err != nil {
		t.Fatal(err)
	}
	flushed := make(chan error, 1)
	go func() { flushed <- s.Flush(ctx) }()
	// The commit's server process, asleep in the trigger.
	pgTerminateSleeper(t, dir, "the commit to reach the trigger")
	if err := <-flushed; !errors.Is(err, ErrFailed) {
		t.Fatalf("Flush whose commit lost its connection: %v", err)
	}
	if l, _ := s.Applied("f"); l.Position != 100 {
		t.Fatalf("Applied = %+v after the failed commit, want line 10", l)
	}
	if err := s.Close(); !errors.Is(err, ErrFailed) {
		t.Fatalf("Close of the failed store: %v", err)
	}
	heal()
	// The store is not held: the failed one released its lease.
	s = mustOpen(t, be, dir, &Options{Unbound: true, LockTimeout: 50 * time.Millisecond})
	if l, _ := s.Applied("f"); l.Position != 100 || getInt(t, s, "count") != 10 {
		t.Fatalf("after the reopen Applied = %+v, count %d; want line 10", l, getInt(t, s, "count"))
	}
	for n := 1; n <= 13; n++ {
		applyLine(t, s, del("f", 1, n))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, be, dir, &Options{Unbound: true})
	if c, sum := getInt(t, s, "count"), getInt(t, s, "sum"); c != 13 || sum != 13*14/2 {
		t.Fatalf("after the replay count %d sum %d, want 13 and %d", c, sum, 13*14/2)
	}
}
