package natstest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// childEnv holds the JSON Config of the server a re-executed test binary
// runs instead of its tests.
const childEnv = "TIDEMARK_NATSTEST_SERVER"

// readyLine is what a child server prints once it accepts connections.
const readyLine = "natstest: ready"

// Main runs the child server when the test binary was started by
// [StartProcess], else the tests: call it from TestMain.
//
//	func TestMain(m *testing.M) { natstest.Main(m) }
func Main(m *testing.M) {
	RunChild()
	os.Exit(m.Run())
}

// RunChild runs a server and never returns when the process was started
// by [StartProcess]; otherwise it returns at once. Call it first in a
// TestMain that does more than [Main].
func RunChild() {
	v := os.Getenv(childEnv)
	if v == "" {
		return
	}
	var cfg Config
	if err := json.Unmarshal([]byte(v), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "natstest: child config %q: %v\n", v, err)
		os.Exit(2)
	}
	opts := options(nopTB{}, cfg)
	srv, err := server.NewServer(&opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "natstest: child server: %v\n", err)
		os.Exit(2)
	}
	go srv.Start()
	if !srv.ReadyForConnections(readyTimeout) {
		fmt.Fprintf(os.Stderr, "natstest: child server did not accept connections within %v\n", readyTimeout)
		os.Exit(2)
	}
	fmt.Println(readyLine)
	// Until killed. SIGTERM (NoSigs is set) ends the process as usual.
	srv.WaitForShutdown()
	os.Exit(0)
}

// Process is a nats-server with JetStream running in a child process (the
// test binary, re-executed), which a test can kill with SIGKILL.
type Process struct {
	t   testing.TB
	cfg Config
	cmd *exec.Cmd
	out *strings.Builder
}

// StartProcess starts a server in a child process: the test binary,
// re-executed, which must call [Main] or [RunChild] from its TestMain. The
// child is killed when the test ends, and when the test process dies.
func StartProcess(t testing.TB, cfg Config) *Process {
	t.Helper()
	if cfg.StoreDir == "" {
		cfg.StoreDir = t.TempDir()
	}
	if cfg.Port == 0 {
		cfg.Port = FreePort(t)
	}
	p := &Process{t: t, cfg: cfg}
	p.start()
	t.Cleanup(p.Kill)
	return p
}

func (p *Process) start() {
	p.t.Helper()
	b, err := json.Marshal(p.cfg)
	if err != nil {
		p.t.Fatalf("natstest: child config: %v", err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(b))
	cmd.SysProcAttr = childAttr()
	p.out = &strings.Builder{}
	cmd.Stderr = p.out
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		p.t.Fatalf("natstest: child stdout: %v", err)
	}
	if err := cmd.Start(); err != nil {
		p.t.Fatalf("natstest: start child server: %v", err)
	}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		ok := false
		for sc.Scan() {
			if sc.Text() == readyLine && !ok {
				ok = true
				ready <- true
			}
		}
		if !ok {
			ready <- false
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case ok := <-ready:
		if !ok {
			_ = cmd.Wait()
			p.t.Fatalf("natstest: child server exited before it was ready: %s", p.out.String())
		}
	case <-time.After(readyTimeout):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		p.t.Fatalf("natstest: child server not ready within %v: %s", readyTimeout, p.out.String())
	}
	p.cmd = cmd
}

// URL is the server's client URL.
func (p *Process) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", p.cfg.Port) }

// StoreDir is the server's JetStream store folder.
func (p *Process) StoreDir() string { return p.cfg.StoreDir }

// Pid is the child's process id, 0 when it does not run.
func (p *Process) Pid() int {
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Kill kills the child with SIGKILL and waits for it to exit. It does
// nothing when the child does not run.
func (p *Process) Kill() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	_ = p.cmd.Wait()
	p.cmd = nil
}

// Restart kills the child (if it runs) and starts a new one on the same
// port and store folder.
func (p *Process) Restart() {
	p.t.Helper()
	p.Kill()
	p.start()
}

// nopTB is the testing.TB of a child server: options never fails there,
// since the parent chose the port and the folder.
type nopTB struct{ testing.TB }

func (nopTB) Helper()                      {}
func (nopTB) TempDir() string              { panic("natstest: child without a store folder") }
func (nopTB) Fatalf(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }
