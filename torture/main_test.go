// Package torture proves tidemark's guarantees on the real ledger program
// (examples/ledger) run as a child process: random SIGKILLs, rotation,
// truncation, inode reuse, torn pointer files, a full disk, bad input and
// power cuts. Every test checks the contract with `ledger check`: nothing
// missing, nothing applied twice, the state exact.
//
// Short mode (the default, part of `make test`) runs a small version of each
// scenario; TIDEMARK_TORTURE=1 (`make torture`) runs the long versions. See
// RELIABILITY.md at the repository root for the scenarios, their figures and
// the known limits.
package torture

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/feed/pointer"
	"github.com/tidemark-go/tidemark/state"
	"github.com/tidemark-go/tidemark/torture/internal/rig"
)

// long reports whether the long versions run (TIDEMARK_TORTURE=1).
var long = rig.Long

// ledgerExe is the ledger program, built once by TestMain.
var ledgerExe string

// childTimeout bounds how long a child may run without saving anything: a
// safety net against a hung child, never the condition a test waits for.
// It is measured from the child's last durable event, not from its start,
// so a slow child on a loaded machine (a --batch 1 run syncs every line) is
// never taken for a hung one.
const childTimeout = 4 * time.Minute

// figures are the totals printed at the end of the run, for RELIABILITY.md.
var figures struct {
	kills, powerCuts, faults, inputs, runs atomic.Int64
	lost, twice                            atomic.Int64
}

func TestMain(m *testing.M) {
	if v := os.Getenv(feedChildEnv); v != "" {
		os.Exit(feedChild(v))
	}
	exe, cleanup, err := rig.BuildLedger("torture")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ledgerExe = exe
	code := m.Run()
	mode := "short"
	if long {
		mode = "long"
	}
	fmt.Printf("torture figures (%s): runs %d, kills survived %d, power cuts survived %d, faults injected %d, inputs tried %d, lines lost %d, lines applied twice %d\n",
		mode, figures.runs.Load(), figures.kills.Load(), figures.powerCuts.Load(), figures.faults.Load(),
		figures.inputs.Load(), figures.lost.Load(), figures.twice.Load())
	cleanup()
	os.Exit(code)
}

// The suite's knobs, shared with torture/distributed (package rig).
var (
	newRand = rig.NewRand
	tempDir = rig.TempDir
)

func pick[T any](short, long T) T { return rig.Pick(short, long) }

// ---- the child ----

// child is one `ledger run --events` in a child process, followed through
// the events it prints on stdout (see examples/ledger/child.go).
type child struct {
	t      *testing.T
	hub    *hub // told of every durable event, if set
	cmd    *exec.Cmd
	input  string
	stderr *syncBuffer

	mu      sync.Mutex
	durable map[string]int64 // fields of the last durable event
	ahead   []string
	done    map[string]int64
	changed chan struct{}

	exited chan struct{}
	err    error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
	w  io.Writer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.w.Write(p)
	if s.b.Len() < 1<<20 {
		s.b.Write(p)
	}
	return len(p), nil
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// hub carries the applied count of whichever child runs now to a writer
// that paces itself by the ledger's progress.
type hub struct {
	mu       sync.Mutex
	applied  int64
	restarts int64 // children started
	changed  chan struct{}
}

func newHub() *hub { return &hub{changed: make(chan struct{})} }

func (h *hub) set(n int64) {
	h.mu.Lock()
	h.applied = n
	close(h.changed)
	h.changed = make(chan struct{})
	h.mu.Unlock()
}

func (h *hub) started() {
	h.mu.Lock()
	h.restarts++
	close(h.changed)
	h.changed = make(chan struct{})
	h.mu.Unlock()
}

func (h *hub) startedCount() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.restarts
}

// wait waits until applied >= n, or stop is closed (false).
func (h *hub) wait(n int64, stop <-chan struct{}) bool {
	return h.waitOrRestart(n, -1, stop)
}

// waitOrRestart waits until applied >= n or more than restarts children
// were started (restarts < 0: only the first), or stop is closed (false).
func (h *hub) waitOrRestart(n, restarts int64, stop <-chan struct{}) bool {
	for {
		h.mu.Lock()
		ok, ch := h.applied >= n || (restarts >= 0 && h.restarts > restarts), h.changed
		h.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-stop:
			return false
		}
	}
}

// runArgs are the common flags of `ledger run`.
func runArgs(input, data string, extra ...string) []string {
	return append([]string{"--input", input, "--data", data, "--progress", "none"}, extra...)
}

// start starts `ledger run args... --events`; its stderr and events go to a
// log file in logDir.
func start(t *testing.T, logDir string, args ...string) *child {
	t.Helper()
	return startHub(t, logDir, nil, args...)
}

// startHub is start with a hub told of the child's progress.
func startHub(t *testing.T, logDir string, h *hub, args ...string) *child {
	t.Helper()
	figures.runs.Add(1)
	n := figures.runs.Load()
	logPath := filepath.Join(logDir, fmt.Sprintf("run%04d.log", n))
	lf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(lf, "$ ledger run %s --events\n", strings.Join(args, " "))
	c := &child{t: t, hub: h, changed: make(chan struct{}), exited: make(chan struct{})}
	for i, a := range args {
		if a == "--input" && i+1 < len(args) {
			c.input = args[i+1]
		}
	}
	lw := &syncBuffer{w: lf}
	c.stderr = lw
	c.cmd = exec.Command(ledgerExe, append(append([]string{"run"}, args...), "--events")...)
	c.cmd.Stderr = lw
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if h != nil {
		h.started()
	}
	go c.follow(stdout, lw, lf)
	t.Cleanup(func() {
		select {
		case <-c.exited:
		default:
			c.cmd.Process.Kill()
			<-c.exited
		}
	})
	return c
}

func (c *child) follow(stdout io.Reader, log io.Writer, lf *os.File) {
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(log, line)
		kind, fields, ok := parseEvent(line)
		if !ok {
			continue
		}
		c.mu.Lock()
		switch kind {
		case "durable":
			c.durable = fields
			if c.hub != nil {
				c.hub.set(fields["applied"])
			}
		case "ahead":
			c.ahead = append(c.ahead, line)
		case "done":
			c.done = fields
		}
		close(c.changed)
		c.changed = make(chan struct{})
		c.mu.Unlock()
	}
	io.Copy(io.Discard, stdout)
	err := c.cmd.Wait()
	fmt.Fprintf(log, "# exit: %v\n", err)
	lf.Close()
	c.mu.Lock()
	c.err = err
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
	close(c.exited)
}

func parseEvent(line string) (string, map[string]int64, bool) {
	parts := strings.Fields(line)
	if len(parts) == 0 {
		return "", nil, false
	}
	switch parts[0] {
	case "durable", "ahead", "done":
	default:
		return "", nil, false
	}
	fields := make(map[string]int64)
	for _, p := range parts[1:] {
		k, v, ok := strings.Cut(p, "=")
		if !ok {
			return "", nil, false
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			u, uerr := strconv.ParseUint(v, 10, 64)
			if uerr != nil {
				return "", nil, false
			}
			n = int64(u)
		}
		fields[k] = n
	}
	return parts[0], fields, true
}

// waitFor waits until cond holds for the last durable event's fields and
// the count of ahead events; false when the child exited first or the
// safety timeout passed. cond runs with c.mu held.
func (c *child) waitFor(cond func(durable map[string]int64, aheads int) bool) bool {
	deadline := time.NewTimer(childTimeout)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		ok := c.durable != nil && cond(c.durable, len(c.ahead))
		changed := c.changed
		c.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-c.exited:
			c.mu.Lock()
			ok := c.durable != nil && cond(c.durable, len(c.ahead))
			c.mu.Unlock()
			return ok
		case <-deadline.C:
			return false
		case <-changed:
			deadline.Reset(childTimeout) // progress: the child is not hung
		}
	}
}

// waitApplied waits until the store holds at least n applied lines.
func (c *child) waitApplied(n int64) bool {
	return c.waitFor(func(d map[string]int64, _ int) bool { return d["applied"] >= n })
}

// kill sends SIGKILL and waits for the exit. It reports whether the kill
// landed: a child that settled and exited 0 between the moment the caller
// chose and the signal (the threshold was near the end of its input) was
// not killed, and the scenario goes on as after a clean run. A child that
// ended any other way fails t.
func (c *child) kill() bool {
	c.t.Helper()
	c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.exited
	var ee *exec.ExitError
	if errors.As(c.err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			figures.kills.Add(1)
			return true
		}
	}
	if c.err == nil {
		c.t.Logf("the child settled and exited 0 before the kill landed: no kill this time")
		return false
	}
	c.t.Fatalf("the child was not killed: it ended first: %v\n%s", c.err, tail(c.stderr.String()))
	return false
}

// stop sends SIGTERM and waits for the exit.
func (c *child) stop() error {
	c.cmd.Process.Signal(syscall.SIGTERM)
	return c.wait()
}

// wait waits for the child to exit; one that saves nothing for
// childTimeout is killed.
func (c *child) wait() error {
	deadline := time.NewTimer(childTimeout)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		changed := c.changed
		c.mu.Unlock()
		select {
		case <-c.exited:
			return c.err
		case <-changed:
			deadline.Reset(childTimeout)
		case <-deadline.C:
			c.cmd.Process.Kill()
			<-c.exited
			return fmt.Errorf("ledger run saved nothing for %v and did not exit: killed", childTimeout)
		}
	}
}

func (c *child) lastDurable() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.durable
}

// checkNotAhead fails t when the child saw the pointer ahead of the durable
// state past a well-formed line (a pointer past rejected lines only is
// right: those are finished too).
func (c *child) checkNotAhead() {
	c.t.Helper()
	c.mu.Lock()
	ahead := append([]string(nil), c.ahead...)
	c.mu.Unlock()
	for _, line := range ahead {
		_, f, _ := parseEvent(line)
		n, err := wellFormedBetween(c.input, f["durable"], f["pointer"])
		if err != nil || n > 0 {
			c.t.Fatalf("invariant 5 broken: the pointer was ahead of the durable state by %d well-formed lines: %s (%v)", n, line, err)
		}
	}
}

func tail(s string) string {
	if len(s) > 4000 {
		return "..." + s[len(s)-4000:]
	}
	return s
}

// runToEnd runs the ledger without --follow until it settles (exit 0),
// at most a few times, and returns the stderr of the last run.
func runToEnd(t *testing.T, logDir string, args ...string) string {
	t.Helper()
	for try := 0; try < 3; try++ {
		c := start(t, logDir, args...)
		err := c.wait()
		c.checkNotAhead()
		if err == nil {
			return c.stderr.String()
		}
		t.Logf("run ended with %v:\n%s", err, tail(c.stderr.String()))
	}
	t.Fatalf("the ledger did not settle in 3 runs (a crash loop)")
	return ""
}

// ---- checking ----

// report is what `ledger check` printed.
type report struct {
	missing, twice                     int64
	applied, wantApplied, total, wantT int64
	ok                                 bool
	out                                string
}

var (
	reMissing = regexp.MustCompile(`lines missing: (\d+), output lines written twice: (\d+)`)
	reState   = regexp.MustCompile(`state: applied (-?\d+) \(expected (-?\d+)\), total (-?\d+) \(expected (-?\d+)\)`)
)

// check runs `ledger check` on data against the inputs, in order.
func check(t *testing.T, data string, inputs ...string) report {
	t.Helper()
	args := []string{"check", "--data", data}
	for _, in := range inputs {
		args = append(args, "--input", in)
	}
	cmd := exec.Command(ledgerExe, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := report{ok: err == nil, out: out.String() + errb.String()}
	m := reMissing.FindStringSubmatch(r.out)
	s := reState.FindStringSubmatch(r.out)
	if m == nil || s == nil {
		t.Fatalf("ledger check printed no report (%v):\n%s", err, r.out)
	}
	r.missing, _ = strconv.ParseInt(m[1], 10, 64)
	r.twice, _ = strconv.ParseInt(m[2], 10, 64)
	r.applied, _ = strconv.ParseInt(s[1], 10, 64)
	r.wantApplied, _ = strconv.ParseInt(s[2], 10, 64)
	r.total, _ = strconv.ParseInt(s[3], 10, 64)
	r.wantT, _ = strconv.ParseInt(s[4], 10, 64)
	return r
}

// lostAndTwice counts lines lost and applied twice from a report.
func (r report) lostAndTwice() (lost, twice int64) {
	lost, twice = r.missing, r.twice
	if d := r.applied - r.wantApplied; d > 0 && d > twice {
		twice = d
	}
	if d := r.wantApplied - r.applied; d > 0 && d > lost {
		lost = d
	}
	return lost, twice
}

// checkExact fails t unless the data folder holds exactly what the inputs
// imply, and adds what it found to the figures.
func checkExact(t *testing.T, data string, inputs ...string) report {
	t.Helper()
	r := check(t, data, inputs...)
	lost, twice := r.lostAndTwice()
	figures.lost.Add(lost)
	figures.twice.Add(twice)
	if !r.ok || lost != 0 || twice != 0 {
		t.Fatalf("not exact: %d lines lost, %d applied twice:\n%s", lost, twice, r.out)
	}
	return r
}

// ---- inputs ----

// gen writes a generated ledger to path with `ledger gen`.
func gen(t *testing.T, path string, lines int, seed uint64, firstID int64, malformedEvery int) {
	t.Helper()
	cmd := exec.Command(ledgerExe, "gen", "--lines", strconv.Itoa(lines), "--accounts", "40",
		"--seed", strconv.FormatUint(seed, 10), "--first-id", strconv.FormatInt(firstID, 10),
		"--malformed-every", strconv.Itoa(malformedEvery), "--out", path)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ledger gen: %v\n%s", err, out)
	}
}

// genBytes returns a generated ledger's bytes.
func genBytes(t *testing.T, dir string, lines int, seed uint64, firstID int64) []byte {
	t.Helper()
	p := filepath.Join(dir, fmt.Sprintf("gen-%d-%d.csv", seed, firstID))
	gen(t, p, lines, seed, firstID, 0)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(p)
	return b
}

// wellFormed mirrors the ledger's parser: `id,account,amount`.
func wellFormed(line []byte) bool {
	if len(line) > 1<<20 {
		return false
	}
	f := bytes.Split(line, []byte{','})
	if len(f) != 3 || len(f[0]) == 0 || f[0][0] == '0' || len(f[1]) == 0 || !utf8.Valid(f[1]) {
		return false
	}
	if _, err := strconv.ParseInt(string(f[0]), 10, 64); err != nil || f[0][0] == '+' || f[0][0] == '-' {
		return false
	}
	a := f[2]
	if len(a) > 0 && (a[0] == '+' || a[0] == '-') {
		a = a[1:]
	}
	if len(a) == 0 {
		return false
	}
	for _, c := range a {
		if c < '0' || c > '9' {
			return false
		}
	}
	_, err := strconv.ParseInt(string(f[2]), 10, 64)
	return err == nil
}

// wellFormedBetween counts the well-formed lines of path that end after
// from and at or before to.
func wellFormedBetween(path string, from, to int64) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	n := 0
	var pos int64
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			break
		}
		line := bytes.TrimSuffix(b[:i], []byte{'\r'})
		pos += int64(i + 1)
		b = b[i+1:]
		if pos > from && pos <= to && wellFormed(line) {
			n++
		}
	}
	return n, nil
}

// loadPointer reads the input's pointer file (no server may run on it).
func loadPointer(t *testing.T, input string) pointer.LoadResult {
	t.Helper()
	pf := pointer.Open(input+pointer.Suffix, pointer.Options{})
	res, err := pf.Load()
	pf.Close()
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// storeApplied opens the data folder's store (no server may run on it) and
// returns the last position the ledger's namespace has durably applied.
func storeApplied(t *testing.T, data string) (tidemark.Applied, bool) {
	t.Helper()
	st, err := state.OpenDir(data, &state.Options{LockTimeout: 10 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("open the store of %s: %v", data, err)
	}
	l, ok := st.Namespace("ledger").Applied("ledger")
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	return l.Applied, ok
}

// checkPointerOnDisk fails t when the pointer file on disk is past a
// well-formed line that the store on disk has not applied (invariant 5,
// checked on what a crash left).
func checkPointerOnDisk(t *testing.T, input, data string) {
	t.Helper()
	res := loadPointer(t, input)
	if !res.Found {
		return
	}
	app, ok := storeApplied(t, data)
	if !ok {
		app = tidemark.Applied{Epoch: res.Record.Epoch}
	}
	if res.Record.Epoch != app.Epoch || res.Record.Position <= app.Position {
		return
	}
	n, err := wellFormedBetween(input, app.Position, res.Record.Position)
	if err != nil || n > 0 {
		t.Fatalf("invariant 5 broken on disk after the kill: the pointer (epoch %d, position %d) is %d well-formed lines past the store's durable position %d (%v)",
			res.Record.Epoch, res.Record.Position, n, app.Position, err)
	}
}

// appendFile appends b to path, creating it.
func appendFile(t *testing.T, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// countLines counts the '\n' of b.
func countLines(b []byte) int { return bytes.Count(b, []byte{'\n'}) }

// copyFile copies src to dst, creating dst's folder.
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Error(err)
		return
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Error(err)
		return
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Error(err)
	}
}

// follow runs `ledger run --follow` until the store holds at least n
// applied lines (all runs together), then stops it with SIGTERM and
// expects a clean exit.
func follow(t *testing.T, logDir string, n int64, args ...string) {
	t.Helper()
	c := start(t, logDir, append(args, "--follow")...)
	if !c.waitApplied(n) {
		c.stop()
		t.Fatalf("the ledger did not reach %d applied lines (last durable event %v):\n%s", n, c.lastDurable(), tail(c.stderr.String()))
	}
	if err := c.stop(); err != nil {
		t.Fatalf("ledger run --follow ended with %v after SIGTERM:\n%s", err, tail(c.stderr.String()))
	}
	c.checkNotAhead()
}

// lineStats counts the complete lines of the files and the well-formed
// ones among them, framed as the feed frames them.
func lineStats(t *testing.T, paths ...string) (lines, good int) {
	t.Helper()
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for {
			i := bytes.IndexByte(b, '\n')
			if i < 0 {
				break
			}
			lines++
			if wellFormed(bytes.TrimSuffix(b[:i], []byte{'\r'})) {
				good++
			}
			b = b[i+1:]
		}
	}
	return lines, good
}

// rejects counts the records of the data folder's rejects.csv.
func rejects(t *testing.T, data string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(data, "rejects.csv"))
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(b, []byte{'\n'})
}

// appliedCount returns the count of applied lines the data folder's store
// holds (`ledger balances`).
func appliedCount(t *testing.T, data string) int64 {
	t.Helper()
	out, err := exec.Command(ledgerExe, "balances", "--data", data).CombinedOutput()
	if err != nil {
		t.Fatalf("ledger balances: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`(?m)^applied (\d+)$`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("ledger balances printed no applied count:\n%s", out)
	}
	n, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return n
}

// newRandFrom returns a random source of its own for another goroutine.
func newRandFrom(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 11)) }

// track logs the test's own figures when it ends (a line starting with
// FIGURES, for RELIABILITY.md). Call it at the top of a top-level test.
func track(t *testing.T) {
	t.Helper()
	snap := func() [7]int64 {
		return [7]int64{figures.runs.Load(), figures.kills.Load(), figures.powerCuts.Load(), figures.faults.Load(),
			figures.inputs.Load(), figures.lost.Load(), figures.twice.Load()}
	}
	before := snap()
	t.Cleanup(func() {
		after := snap()
		var d [7]int64
		for i := range d {
			d[i] = after[i] - before[i]
		}
		t.Logf("FIGURES %s: runs %d, kills survived %d, power cuts survived %d, faults injected %d, inputs tried %d, lines lost %d, lines applied twice %d",
			t.Name(), d[0], d[1], d[2], d[3], d[4], d[5], d[6])
	})
}
