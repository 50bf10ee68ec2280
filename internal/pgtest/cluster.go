package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Cluster is a throwaway PostgreSQL cluster run by this process: a data
// directory in a temporary folder, a postmaster that is this process's
// child, a unix socket in that folder and a loopback port.
//
// The postmaster is started with a parent-death signal (SIGQUIT, an
// immediate shutdown) from an OS thread that stays alive as long as the
// postmaster does, so that a test binary killed with SIGKILL takes its
// cluster with it. A cluster left behind all the same (the folder of a
// process that is gone) is removed by the next cluster started on the
// machine.
type Cluster struct {
	bin  string // the folder of PostgreSQL's programs
	dir  string // the cluster's folder: data/, the socket, the log
	port int
	cred *syscall.Credential // nil: run as this process's user

	mu      sync.Mutex
	running *postmaster
}

// postmaster is one run of the server process.
type postmaster struct {
	pid    int
	exited chan struct{} // closed when the process has been waited for
	err    error         // its exit status, once exited is closed
}

// Environment variables that steer the harness.
const (
	// EnvDSN names a server the tests use instead of starting a cluster.
	EnvDSN = "TIDEMARK_PG_DSN"
	// EnvBin names the folder of PostgreSQL's programs (initdb, postgres).
	EnvBin = "TIDEMARK_PG_BIN"
)

// minVersion is the oldest PostgreSQL the harness looks for.
const minVersion = 15

// startTimeout bounds how long a postmaster may take to accept
// connections.
const startTimeout = 90 * time.Second

// findBin returns the folder of PostgreSQL's server programs: $TIDEMARK_PG_BIN,
// else the newest /usr/lib/postgresql/N/bin (N >= 15, Debian's layout), else
// the folder of an initdb on PATH.
func findBin() (string, error) {
	var looked []string
	if b := os.Getenv(EnvBin); b != "" {
		if hasServer(b) {
			return b, nil
		}
		return "", fmt.Errorf("pgtest: $%s=%s holds no initdb and postgres", EnvBin, b)
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	type cand struct {
		v   int
		dir string
	}
	var cands []cand
	for _, m := range matches {
		v, err := strconv.Atoi(filepath.Base(filepath.Dir(m)))
		if err == nil && v >= minVersion && hasServer(m) {
			cands = append(cands, cand{v, m})
		}
	}
	looked = append(looked, "/usr/lib/postgresql/*/bin")
	if len(cands) > 0 {
		sort.Slice(cands, func(i, j int) bool { return cands[i].v > cands[j].v })
		return cands[0].dir, nil
	}
	if p, err := exec.LookPath("initdb"); err == nil && hasServer(filepath.Dir(p)) {
		return filepath.Dir(p), nil
	}
	looked = append(looked, "PATH")
	return "", fmt.Errorf("pgtest: no PostgreSQL %d or newer found (looked in %s): install it (Debian: apt-get install postgresql-15), set $%s to its bin folder, or set $%s to a server's DSN",
		minVersion, strings.Join(looked, ", "), EnvBin, EnvDSN)
}

func hasServer(dir string) bool {
	for _, p := range []string{"initdb", "postgres"} {
		if fi, err := os.Stat(filepath.Join(dir, p)); err != nil || fi.IsDir() {
			return false
		}
	}
	return true
}

// baseDir is the folder that holds every cluster of this machine's tests.
func baseDir() string { return filepath.Join(os.TempDir(), "tidemark-pgtest") }

// ownerFile, in a cluster's folder, holds the pid of the process that
// runs it.
const ownerFile = "owner.pid"

// newCluster makes a cluster's folder, with a data directory copied from
// template (made by initdb when it does not exist yet), and a free port.
// It does not start it.
func newCluster(template string) (*Cluster, error) {
	bin, err := findBin()
	if err != nil {
		return nil, err
	}
	cred, err := serverUser()
	if err != nil {
		return nil, err
	}
	base := baseDir()
	if err := os.MkdirAll(base, 0o755); err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	if err := os.Chmod(base, 0o755); err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	sweep(base)
	dir, err := os.MkdirTemp(base, strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	c := &Cluster{bin: bin, dir: dir, cred: cred}
	fail := func(err error) (*Cluster, error) {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return fail(fmt.Errorf("pgtest: %w", err))
	}
	if err := c.chown(dir); err != nil {
		return fail(err)
	}
	if template == "" {
		if err := c.initdb(c.dataDir()); err != nil {
			return fail(err)
		}
	} else if out, err := exec.Command("cp", "-a", template, c.dataDir()).CombinedOutput(); err != nil {
		return fail(fmt.Errorf("pgtest: copy the template cluster %s: %v: %s", template, err, out))
	}
	if c.port, err = freePort(); err != nil {
		return fail(err)
	}
	return c, nil
}

// serverUser returns the credential the server runs under: the postgres
// user when this process is root (PostgreSQL refuses to run as root), nil
// otherwise.
func serverUser() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgtest: running as root, PostgreSQL must run as another user, and there is no user postgres: %w", err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

// chown gives path to the server's user, when it is another one.
func (c *Cluster) chown(path string) error {
	if c.cred == nil {
		return nil
	}
	if err := os.Chown(path, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	return os.Chmod(path, 0o700)
}

func (c *Cluster) dataDir() string { return filepath.Join(c.dir, "data") }
func (c *Cluster) logFile() string { return filepath.Join(c.dir, "postgres.log") }

// command returns a command of PostgreSQL's bin folder, run as the server's
// user.
func (c *Cluster) command(prog string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(c.bin, prog), args...)
	cmd.Dir = c.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Setpgid: true}
	cmd.Env = append(os.Environ(), "LC_ALL=C", "PGTZ=UTC")
	return cmd
}

func (c *Cluster) initdb(data string) error {
	cmd := c.command("initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pgtest: initdb %s: %v: %s", data, err, out)
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgtest: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Dir returns the cluster's folder (its data directory is Dir()/data).
func (c *Cluster) Dir() string { return c.dir }

// Port returns the cluster's port, on the unix socket and on 127.0.0.1.
func (c *Cluster) Port() int { return c.port }

// DSN returns the URL of database db (as user postgres) over the unix
// socket.
func (c *Cluster) DSN(db string) string {
	return fmt.Sprintf("postgres://postgres@/%s?host=%s&port=%d&sslmode=disable", db, c.dir, c.port)
}

// TCPDSN returns the URL of database db over the loopback port.
func (c *Cluster) TCPDSN(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, db)
}

// Start starts the postmaster on the cluster's data directory and waits
// until it accepts connections. After [Cluster.StopImmediate] it runs the
// server's crash recovery. Starting a running cluster does nothing.
func (c *Cluster) Start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running != nil {
		select {
		case <-c.running.exited:
		default:
			return nil
		}
	}
	for try := 0; ; try++ {
		pm, err := c.spawn()
		if err == nil {
			err = c.waitReady(pm)
		}
		if err == nil {
			c.running = pm
			return nil
		}
		// Another process may have taken the port since it was picked:
		// take another.
		if try < 3 && strings.Contains(err.Error(), "could not bind") {
			if c.port, err = freePort(); err == nil {
				continue
			}
		}
		return err
	}
}

// spawn starts the postmaster from a goroutine locked to its OS thread for
// as long as the postmaster runs: the parent-death signal is sent when
// the thread that started the child ends, and the Go runtime may end an
// idle thread otherwise.
func (c *Cluster) spawn() (*postmaster, error) {
	logf, err := os.OpenFile(c.logFile(), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	cmd := c.command("postgres", "-D", c.dataDir(), "-p", strconv.Itoa(c.port), "-k", c.dir,
		"-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=on",
		"-c", "synchronous_commit=on",
		"-c", "full_page_writes=on",
		"-c", "max_connections=200",
		"-c", "shared_buffers=64MB",
		"-c", "unix_socket_permissions=0777",
		"-c", "logging_collector=off",
		"-c", "log_min_messages=warning",
		"-c", "log_timezone=UTC",
		"-c", "TimeZone=UTC",
	)
	cmd.SysProcAttr.Pdeathsig = syscall.SIGQUIT
	cmd.Stdout, cmd.Stderr = logf, logf
	pm := &postmaster{exited: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer logf.Close()
		if err := cmd.Start(); err != nil {
			runtime.UnlockOSThread()
			started <- fmt.Errorf("pgtest: start postgres: %w", err)
			return
		}
		pm.pid = cmd.Process.Pid
		started <- nil
		pm.err = cmd.Wait()
		runtime.UnlockOSThread()
		close(pm.exited)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return pm, nil
}

// waitReady waits until the postmaster accepts connections, or exits.
func (c *Cluster) waitReady(pm *postmaster) error {
	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, c.DSN("postgres"))
		if err == nil {
			err = conn.Ping(ctx)
			conn.Close(ctx)
		}
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-pm.exited:
			return fmt.Errorf("pgtest: postgres exited at start (%v); its log %s ends:\n%s", pm.err, c.logFile(), c.logTail())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			c.signal(pm, syscall.SIGQUIT)
			<-pm.exited
			return fmt.Errorf("pgtest: postgres did not accept connections within %v (last error %v); its log %s ends:\n%s", startTimeout, err, c.logFile(), c.logTail())
		}
	}
}

// logTail returns the end of the server's log.
func (c *Cluster) logTail() string {
	b, _ := os.ReadFile(c.logFile())
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

func (c *Cluster) signal(pm *postmaster, sig syscall.Signal) {
	select {
	case <-pm.exited:
	default:
		_ = syscall.Kill(pm.pid, sig)
	}
}

// stop sends sig to the postmaster and waits until it exited.
func (c *Cluster) stop(sig syscall.Signal, what string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	pm := c.running
	if pm == nil {
		return nil
	}
	c.signal(pm, sig)
	select {
	case <-pm.exited:
	case <-time.After(60 * time.Second):
		c.signal(pm, syscall.SIGKILL)
		<-pm.exited
		return fmt.Errorf("pgtest: postgres did not stop (%s) within 60s; killed", what)
	}
	c.running = nil
	return nil
}

// StopImmediate stops the server as `pg_ctl stop -m immediate` does (a
// SIGQUIT to the postmaster): every backend exits at once, nothing is
// checkpointed, and the next [Cluster.Start] runs crash recovery from the
// WAL. It returns once the postmaster has exited.
func (c *Cluster) StopImmediate() error { return c.stop(syscall.SIGQUIT, "immediate") }

// Stop stops the server as `pg_ctl stop -m fast` does (a SIGINT): it
// ends the sessions, checkpoints and exits.
func (c *Cluster) Stop() error { return c.stop(syscall.SIGINT, "fast") }

// Pid returns the postmaster's pid, 0 when it is not running.
func (c *Cluster) Pid() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running == nil {
		return 0
	}
	return c.running.pid
}

// Remove stops the server at once and removes the cluster's folder.
func (c *Cluster) Remove() error {
	err := c.StopImmediate()
	return errors.Join(err, os.RemoveAll(c.dir))
}

// sweep removes the clusters in base whose owner process is gone: their
// postmaster, if it still runs, is stopped first.
func sweep(base string) {
	entries, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range entries {
		dir := filepath.Join(base, e.Name())
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			// Being made right now, or not a cluster: leave it unless it
			// is old.
			if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > time.Hour {
				os.RemoveAll(dir)
			}
			continue
		}
		owner, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err == nil && alive(owner) {
			continue
		}
		if pid := postmasterPid(filepath.Join(dir, "data")); pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGQUIT)
			for i := 0; i < 500 && alive(pid); i++ {
				time.Sleep(10 * time.Millisecond)
			}
			if alive(pid) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		os.RemoveAll(dir)
	}
}

// alive reports whether a process with that pid exists.
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// postmasterPid returns the pid in data/postmaster.pid when that process
// is a postgres running on data, else 0.
func postmasterPid(data string) int {
	b, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err != nil {
		return 0
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || !alive(pid) {
		return 0
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !strings.Contains(string(cmdline), "postgres") || !strings.Contains(string(cmdline), data) {
		return 0
	}
	return pid
}
