package pgtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(Main(m)) }

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	return conn
}

func exec1(t *testing.T, conn *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// The shared server runs with fsync and synchronous_commit on, and each
// schema is a test's own.
func TestSharedServerAndSchemas(t *testing.T) {
	s := Shared(t)
	a, b := connect(t, s.Schema(t)), connect(t, s.Schema(t))
	ctx := context.Background()
	for _, setting := range []string{"fsync", "synchronous_commit"} {
		var v string
		if err := a.QueryRow(ctx, "SHOW "+setting).Scan(&v); err != nil || v != "on" {
			t.Fatalf("%s = %q (%v), want on", setting, v, err)
		}
	}
	exec1(t, a, "CREATE TABLE kv (k text PRIMARY KEY)")
	exec1(t, a, "INSERT INTO kv VALUES ('a')")
	exec1(t, b, "CREATE TABLE kv (k text PRIMARY KEY)")
	var n int
	if err := b.QueryRow(ctx, "SELECT count(*) FROM kv").Scan(&n); err != nil || n != 0 {
		t.Fatalf("the second schema sees %d rows (%v): schemas are not separate", n, err)
	}
	if s2 := Shared(t); s2 != s {
		t.Fatal("a second shared server")
	}
}

// A row committed before an immediate stop is there after the restart's
// crash recovery; while the server is down, connections fail.
func TestClusterStopImmediateAndStart(t *testing.T) {
	c := NewCluster(t)
	ctx := context.Background()
	conn := connect(t, c.DSN("postgres"))
	exec1(t, conn, "CREATE TABLE t (n int)")
	exec1(t, conn, "INSERT INTO t SELECT generate_series(1, 1000)")
	pid := c.Pid()
	if err := c.StopImmediate(); err != nil {
		t.Fatal(err)
	}
	if alive(pid) {
		t.Fatalf("postmaster %d still runs after the immediate stop", pid)
	}
	if _, err := conn.Exec(ctx, "SELECT 1"); err == nil {
		t.Fatal("a query on a stopped server succeeded")
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	conn2 := connect(t, c.TCPDSN("postgres"))
	var n int
	if err := conn2.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil || n != 1000 {
		t.Fatalf("after the restart %d rows (%v), want 1000", n, err)
	}
	if !strings.Contains(c.logTail(), "not properly shut down") {
		t.Fatalf("the restart ran no crash recovery; log:\n%s", c.logTail())
	}
}

func TestTerminate(t *testing.T) {
	s := Shared(t)
	ctx := context.Background()
	victim := connect(t, WithParam(s.DSN(), "application_name", "pgtest-victim"))
	pids, err := Backends(ctx, s.DSN(), "pgtest-victim")
	if err != nil || len(pids) != 1 || uint32(pids[0]) != victim.PgConn().PID() {
		t.Fatalf("Backends = %v, %v; want the victim's %d", pids, err, victim.PgConn().PID())
	}
	if n, err := Terminate(ctx, s.DSN(), pids...); n != 1 || err != nil {
		t.Fatalf("Terminate = %d, %v", n, err)
	}
	if _, err := victim.Exec(ctx, "SELECT 1"); err == nil {
		t.Fatal("a terminated connection still works")
	}
}

func TestWithParam(t *testing.T) {
	for _, tc := range []struct{ dsn, want string }{
		{"postgres://u@/db?host=/tmp/x&port=5", "postgres://u@/db?host=%2Ftmp%2Fx&port=5&search_path=s"},
		{"host=/tmp/x dbname=db", "host=/tmp/x dbname=db search_path='s'"},
	} {
		if got := WithParam(tc.dsn, "search_path", "s"); got != tc.want {
			t.Errorf("WithParam(%q) = %q, want %q", tc.dsn, got, tc.want)
		}
	}
}

func TestMissingBinaries(t *testing.T) {
	t.Setenv(EnvBin, t.TempDir())
	if _, err := findBin(); err == nil || !strings.Contains(err.Error(), EnvBin) {
		t.Fatalf("findBin with an empty $%s: %v", EnvBin, err)
	}
}

const envKillChild = "PGTEST_KILL_CHILD"

// TestKillChild is the child of TestKilledBinaryLeavesNoServer: it starts a
// cluster, says where, and waits to be killed.
func TestKillChild(t *testing.T) {
	if os.Getenv(envKillChild) == "" {
		return
	}
	c := NewCluster(t)
	fmt.Printf("cluster %d %s\n", c.Pid(), c.Dir())
	select {}
}

// A test binary killed with SIGKILL takes its postmaster with it (the
// parent-death signal), and the folder it left is removed when the next
// cluster starts.
func TestKilledBinaryLeavesNoServer(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestKillChild$", "-test.count=1", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), envKillChild+"=1")
	cmd.Env = append(cmd.Env, EnvDSN+"=") // the child starts its own
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pid int
	var dir string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if _, err := fmt.Sscanf(sc.Text(), "cluster %d %s", &pid, &dir); err == nil {
			break
		}
	}
	if pid == 0 {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("the child started no cluster")
	}
	if !alive(pid) || postmasterPid(filepath.Join(dir, "data")) != pid {
		t.Fatalf("the child's postmaster %d does not run on %s", pid, dir)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	deadline := time.Now().Add(time.Minute)
	for alive(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("postmaster %d outlived its killed test binary by a minute", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the killed child's folder is gone already: %v", err)
	}
	sweep(baseDir())
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the sweep left the folder of a dead test binary: %v", err)
	}
}
