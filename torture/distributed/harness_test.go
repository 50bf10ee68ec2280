package distributed

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark-go/tidemark/internal/natstest"
	"github.com/tidemark-go/tidemark/internal/pgtest"
)

// stepTimeout bounds each wait of the harness: a safety net, never the
// condition it waits for.
const stepTimeout = 3 * time.Minute

// harness runs the partitioned ledger: a NATS server in a child process,
// a PostgreSQL cluster of the test's own, a publisher and the workers,
// and follows them through the workers' events.
type harness struct {
	t      *testing.T
	dir    string
	nats   *natstest.Process
	pg     *pgtest.Cluster
	db     string
	src    string
	input  string
	extras []string // inputs published during the run, beside input
	lines  int64    // the lines of every input
	parts  int
	lease  time.Duration
	extra  []string // more flags of the workers
	pubCmd *exec.Cmd
	pubErr chan error

	mu      sync.Mutex
	changed chan struct{}
	saved   map[int]durable            // per partition: the newest durable event
	held    map[string]map[int]int64   // worker → partition → token
	lost    map[string]map[int]lostRec // worker → partition → its last loss
	workers map[string]*worker
	started int
	// unexpected says which worker exited that was not killed or stopped.
	unexpected string

	// figures, for the log
	kills, natsKills, pgRestarts, freezes, fencedLosses int
}

// durable is a partition's newest durable event: by token, then lines.
type durable struct {
	token, pos, lines int64
	worker            string
}

type lostRec struct {
	token  int64
	fenced bool
}

// worker is one `ledger run --source` process.
type worker struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{}
	ready   chan struct{} // closed at its started event
	started bool          // under h.mu
	err     error
	ending  bool // killed or stopped by the harness; under h.mu
}

func newHarness(t *testing.T, parts int, lines int64, lease time.Duration) *harness {
	t.Helper()
	h := &harness{
		t: t, dir: tempDir(t), parts: parts, lines: lines, lease: lease,
		changed: make(chan struct{}),
		saved:   map[int]durable{}, held: map[string]map[int]int64{}, lost: map[string]map[int]lostRec{},
		workers: map[string]*worker{},
	}
	h.nats = natstest.StartProcess(t, natstest.Config{StoreDir: filepath.Join(h.dir, "nats")})
	h.pg = pgtest.NewCluster(t)
	h.db = h.pg.DSN("postgres")
	h.src = h.nats.URL() + "/LEDGER"
	h.input = filepath.Join(h.dir, "ledger.csv")
	gen := exec.Command(ledgerExe, "gen", "--lines", strconv.FormatInt(lines, 10), "--accounts", "200", "--seed", "17", "--malformed-every", "211", "--out", h.input)
	if out, err := gen.CombinedOutput(); err != nil {
		t.Fatalf("gen: %v: %s", err, out)
	}
	return h
}

// notify wakes the waiters. h.mu held.
func (h *harness) notify() {
	close(h.changed)
	h.changed = make(chan struct{})
}

// waitUntil waits until cond (called with h.mu held) is true.
func (h *harness) waitUntil(what string, cond func() bool) {
	h.t.Helper()
	timeout := time.After(stepTimeout)
	tick := time.NewTicker(50 * time.Millisecond) // a worker's exit is not an event
	defer tick.Stop()
	for {
		h.mu.Lock()
		ok, ch, bad := cond(), h.changed, h.unexpected
		h.mu.Unlock()
		if ok {
			return
		}
		if bad != "" {
			h.t.Fatalf("%s: %s\n%s", what, bad, h.report())
		}
		select {
		case <-ch:
		case <-tick.C:
		case <-timeout:
			h.t.Fatalf("%s: not within %v\n%s", what, stepTimeout, h.report())
		}
	}
}

// publish starts the publisher, pacing itself so that the run lasts.
func (h *harness) publish(pace time.Duration) {
	h.t.Helper()
	f, err := os.Create(filepath.Join(h.dir, "publish.log"))
	if err != nil {
		h.t.Fatal(err)
	}
	h.pubCmd = exec.Command(ledgerExe, "publish", "--input", h.input, "--to", h.src, "--partitions", strconv.Itoa(h.parts), "--pace", pace.String())
	h.pubCmd.Stdout, h.pubCmd.Stderr = f, f
	if err := h.pubCmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	h.pubErr = make(chan error, 1)
	go func() {
		h.pubErr <- h.pubCmd.Wait()
		f.Close()
	}()
	h.t.Cleanup(func() { _ = h.pubCmd.Process.Kill() })
}

// startWorker starts worker name.
func (h *harness) startWorker(name string) *worker {
	h.t.Helper()
	h.mu.Lock()
	h.started++
	n := h.started
	h.mu.Unlock()
	w := &worker{name: name, logPath: filepath.Join(h.dir, fmt.Sprintf("%s-%d.log", name, n)), exited: make(chan struct{}), ready: make(chan struct{})}
	logf, err := os.Create(w.logPath)
	if err != nil {
		h.t.Fatal(err)
	}
	args := append([]string{"run", "--source", h.src, "--store", h.db, "--partitions", strconv.Itoa(h.parts), "--worker", name, "--lease", h.lease.String(),
		"--events", "--progress", "none", "--log-level", "info"}, h.extra...)
	fmt.Fprintf(logf, "$ ledger %s\n", strings.Join(args, " "))
	w.cmd = exec.Command(ledgerExe, args...)
	w.cmd.Stderr = logf
	out, err := w.cmd.StdoutPipe()
	if err != nil {
		h.t.Fatal(err)
	}
	if err := w.cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	h.mu.Lock()
	h.workers[name] = w
	h.held[name] = map[int]int64{}
	h.notify()
	h.mu.Unlock()
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			fmt.Fprintln(logf, "event:", sc.Text())
			h.event(name, sc.Text())
		}
		w.err = w.cmd.Wait()
		logf.Close()
		h.mu.Lock()
		if h.workers[name] == w {
			delete(h.held, name)
		}
		if !w.ending && h.unexpected == "" {
			h.unexpected = fmt.Sprintf("worker %s exited by itself: %v (%s)", name, w.err, w.logPath)
		}
		h.notify()
		h.mu.Unlock()
		close(w.exited)
	}()
	h.t.Cleanup(func() {
		_ = w.cmd.Process.Signal(syscall.SIGCONT)
		_ = w.cmd.Process.Kill()
		<-w.exited
	})
	return w
}

// event records one event line of worker name.
func (h *harness) event(name, line string) {
	parts := strings.Fields(line)
	if len(parts) == 0 {
		return
	}
	f := map[string]int64{}
	for _, kv := range parts[1:] {
		k, v, _ := strings.Cut(kv, "=")
		n, _ := strconv.ParseInt(v, 10, 64)
		f[k] = n
	}
	p := int(f["partition"])
	h.mu.Lock()
	defer h.mu.Unlock()
	switch parts[0] {
	case "started":
		if w := h.workers[name]; w != nil && !w.started {
			w.started = true
			close(w.ready)
		}
	case "acquired":
		h.held[name][p] = f["token"]
	case "released":
		delete(h.held[name], p)
	case "lost":
		delete(h.held[name], p)
		if h.lost[name] == nil {
			h.lost[name] = map[int]lostRec{}
		}
		h.lost[name][p] = lostRec{token: f["token"], fenced: f["fenced"] == 1}
		if f["fenced"] == 1 {
			h.fencedLosses++
		}
	case "durable":
		d := durable{token: f["token"], pos: f["position"], lines: f["lines"], worker: name}
		if old, ok := h.saved[p]; !ok || d.token > old.token || d.token == old.token && d.lines >= old.lines {
			h.saved[p] = d
		}
	default:
		return
	}
	h.notify()
}

// savedLines is the lines every partition's newest owner reports durable.
// h.mu held.
func (h *harness) savedLines() int64 {
	var n int64
	for _, d := range h.saved {
		n += d.lines
	}
	return n
}

// waitSaved waits until at least n lines are durable.
func (h *harness) waitSaved(n int64) {
	h.t.Helper()
	h.waitUntil(fmt.Sprintf("%d lines saved", n), func() bool { return h.savedLines() >= n })
}

// holders returns the running workers that hold a partition, in name
// order. h.mu held.
func (h *harness) holders() []string {
	var out []string
	for name, ps := range h.held {
		if len(ps) > 0 {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// allHeld reports whether every partition is held by one worker, and
// none by two. h.mu held.
func (h *harness) allHeld(except string) bool {
	seen := map[int]bool{}
	for name, ps := range h.held {
		if name == except {
			continue
		}
		for p := range ps {
			if seen[p] {
				return false
			}
			seen[p] = true
		}
	}
	return len(seen) == h.parts
}

// kill kills worker name with SIGKILL and starts it again: the process
// before it is dead, its leases run out, its successor (of the same name)
// joins once the dead one's heartbeat ran out.
func (h *harness) kill(name string) {
	h.t.Helper()
	h.mu.Lock()
	w := h.workers[name]
	had := len(h.held[name])
	w.ending = true
	h.mu.Unlock()
	_ = w.cmd.Process.Kill()
	<-w.exited
	h.kills++
	h.t.Logf("SIGKILL worker %s holding %d partitions, at %d lines saved", name, had, h.saved1())
	h.startWorker(name)
}

// killNATS kills the NATS server with SIGKILL and starts it again after
// down.
func (h *harness) killNATS(down time.Duration) {
	h.t.Helper()
	h.t.Logf("SIGKILL the NATS server at %d lines saved; %v down", h.saved1(), down)
	h.nats.Kill()
	h.natsKills++
	time.Sleep(down) // the fault's length
	h.nats.Restart()
}

// restartPG stops PostgreSQL at once (SIGQUIT: pg_ctl -m immediate, a
// crash: recovery from its WAL at the start) and starts it after down.
func (h *harness) restartPG(down time.Duration) {
	h.t.Helper()
	h.t.Logf("PostgreSQL immediate stop at %d lines saved; %v down", h.saved1(), down)
	if err := h.pg.StopImmediate(); err != nil {
		h.t.Fatal(err)
	}
	h.pgRestarts++
	time.Sleep(down) // the fault's length
	if err := h.pg.Start(); err != nil {
		h.t.Fatal(err)
	}
}

// freeze stops worker name with SIGSTOP until every partition it held is
// held by the others and saved by them past where it was, then wakes it
// with SIGCONT: each partition it held must be lost with fenced=1 (its
// late commits refused), and its log must say so.
func (h *harness) freeze(name string) {
	h.t.Helper()
	h.mu.Lock()
	w := h.workers[name]
	frozen := map[int]int64{}
	for p, tok := range h.held[name] {
		frozen[p] = tok
	}
	before := map[int]durable{}
	for p := range frozen {
		before[p] = h.saved[p]
	}
	h.mu.Unlock()
	if len(frozen) == 0 {
		h.t.Fatalf("freeze %s: it holds no partition", name)
	}
	if err := w.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		h.t.Fatal(err)
	}
	h.freezes++
	// The others must save lines of the frozen partitions after they take
	// them, whether the publisher is done or not: a few lines more.
	h.publishExtra(300)
	h.t.Logf("SIGSTOP worker %s holding partitions %v, at %d lines saved", name, keys(frozen), h.saved1())
	h.waitUntil(fmt.Sprintf("the others to take %s's partitions %v over and save them on", name, keys(frozen)), func() bool {
		for p, tok := range frozen {
			d := h.saved[p]
			if d.token <= tok || d.lines <= before[p].lines || d.worker == name {
				return false
			}
		}
		return true
	})
	if err := w.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		h.t.Fatal(err)
	}
	// The woken worker loses every frozen partition: refused at its next
	// commit (state.ErrFenced) when it had lines staged, or told by its
	// next heartbeat that the lease is gone when it had none. That no late
	// commit got through is what the final check proves: a line of it
	// would be applied twice.
	h.waitUntil(fmt.Sprintf("the woken %s to lose partitions %v", name, keys(frozen)), func() bool {
		for p, tok := range frozen {
			if l, ok := h.lost[name][p]; !ok || l.token != tok {
				return false
			}
		}
		return true
	})
	h.mu.Lock()
	var fenced []int
	for p := range frozen {
		if h.lost[name][p].fenced {
			fenced = append(fenced, p)
		}
	}
	h.mu.Unlock()
	slices.Sort(fenced)
	if len(fenced) > 0 {
		b, _ := os.ReadFile(w.logPath)
		if !strings.Contains(string(b), "taken over by another owner") {
			h.t.Errorf("the woken worker's log does not say its store was taken over: %s", w.logPath)
		}
	}
	h.t.Logf("SIGCONT worker %s: partitions %v lost, late commits refused (state.ErrFenced) on %v", name, keys(frozen), fenced)
}

// publishExtra publishes n more lines (ids after every other input's),
// over the same accounts, from a file of their own, and waits for it.
func (h *harness) publishExtra(n int) {
	h.t.Helper()
	path := filepath.Join(h.dir, fmt.Sprintf("extra-%d.csv", len(h.extras)+1))
	first := h.lines + 1 + int64(len(h.extras))*1_000_000
	for _, args := range [][]string{
		{"gen", "--lines", strconv.Itoa(n), "--accounts", "200", "--seed", strconv.Itoa(100 + len(h.extras)), "--first-id", strconv.FormatInt(first, 10), "--out", path},
		{"publish", "--input", path, "--to", h.src},
	} {
		if out, err := exec.Command(ledgerExe, args...).CombinedOutput(); err != nil {
			h.t.Fatalf("ledger %s: %v\n%s", args[0], err, out)
		}
	}
	h.extras = append(h.extras, path)
	h.lines += int64(n)
}

// saved1 is savedLines under the lock.
func (h *harness) saved1() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.savedLines()
}

// finish waits for the publisher and for every line saved, stops the
// workers with SIGTERM (each must exit 0), and checks the stores against
// the stream and the input.
func (h *harness) finish() {
	h.t.Helper()
	select {
	case err := <-h.pubErr:
		if err != nil {
			b, _ := os.ReadFile(filepath.Join(h.dir, "publish.log"))
			h.t.Fatalf("publish: %v\n%s", err, b)
		}
	case <-time.After(stepTimeout):
		h.t.Fatalf("the publisher did not finish")
	}
	h.waitSaved(h.lines)
	h.mu.Lock()
	var ws []*worker
	for _, w := range h.workers {
		ws = append(ws, w)
		w.ending = true
	}
	h.mu.Unlock()
	for _, w := range ws {
		// A worker stops cleanly on SIGTERM once it has started; before
		// its signal handler is in place, the signal would kill it.
		select {
		case <-w.ready:
		case <-w.exited:
		case <-time.After(stepTimeout):
			h.t.Fatalf("worker %s did not start", w.name)
		}
		_ = w.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, w := range ws {
		select {
		case <-w.exited:
		case <-time.After(stepTimeout):
			h.t.Fatalf("worker %s did not stop on SIGTERM", w.name)
		}
		if w.err != nil {
			b, _ := os.ReadFile(w.logPath)
			h.t.Fatalf("worker %s: %v\n%s", w.name, w.err, tail(string(b)))
		}
	}
	args := []string{"check", "--source", h.src, "--store", h.db, "--input", h.input}
	for _, x := range h.extras {
		args = append(args, "--input", x)
	}
	out, err := exec.Command(ledgerExe, args...).CombinedOutput()
	h.t.Logf("ledger check:\n%s", out)
	if err != nil {
		h.t.Fatalf("ledger check: %v\n%s", err, h.report())
	}
	if !strings.Contains(string(out), "lines missing: 0, output lines written twice: 0") {
		h.t.Fatalf("ledger check's report is not exact")
	}
	h.t.Logf("figures: %d lines, %d partitions, worker SIGKILLs %d, NATS SIGKILLs %d, PostgreSQL immediate stops %d, freezes %d (partitions lost fenced: %d)",
		h.lines, h.parts, h.kills, h.natsKills, h.pgRestarts, h.freezes, h.fencedLosses)
}

// report describes where the run is, for a failure.
func (h *harness) report() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "saved %d of %d lines; folder %s (TIDEMARK_TORTURE_KEEP=1 keeps it)\n", h.savedLines(), h.lines, h.dir)
	for p := range h.parts {
		d := h.saved[p]
		fmt.Fprintf(&b, "  partition %d: token %d position %d lines %d (by %s)\n", p, d.token, d.pos, d.lines, d.worker)
	}
	for name, ps := range h.held {
		fmt.Fprintf(&b, "  worker %s holds %v\n", name, ps)
	}
	for name, w := range h.workers {
		data, _ := os.ReadFile(w.logPath)
		fmt.Fprintf(&b, "--- %s (%s):\n%s\n", name, w.logPath, tail(string(data)))
	}
	return b.String()
}

func keys(m map[int]int64) []int {
	var out []int
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func tail(s string) string {
	if len(s) > 6000 {
		return "…" + s[len(s)-6000:]
	}
	return s
}
