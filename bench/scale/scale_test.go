package scale

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tidemark-go/tidemark/internal/natstest"
	"github.com/tidemark-go/tidemark/internal/pgtest"
)

func TestMain(m *testing.M) {
	natstest.RunChild()
	code := pgtest.Main(m).Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

var (
	buildOnce sync.Once
	buildDir  string
	ledgerBin string
	buildErr  error
)

// ledgerExe builds the ledger program once.
func ledgerExe(b *testing.B) string {
	b.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "tidemark-scale-bin-")
		if buildErr != nil {
			return
		}
		goTool, err := exec.LookPath("go")
		if err != nil {
			goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		ledgerBin = filepath.Join(buildDir, "ledger")
		out, err := exec.Command(goTool, "build", "-o", ledgerBin, "github.com/tidemark-go/tidemark/examples/ledger").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build ledger: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		b.Fatal(buildErr)
	}
	return ledgerBin
}

// env is a NATS server in a child process and a PostgreSQL schema of the
// benchmark's own.
type env struct {
	b    *testing.B
	exe  string
	dir  string
	cfg  natstest.Config
	nats *natstest.Process
	db   string
	runs int
	// serverCPU is the NATS server's CPU time during the last ledgerRate
	// (from the worker's take-over to its last save) or bareRate, or -1
	// when it could not be read; pgCPU is PostgreSQL's (every process of
	// the cluster) over the same time.
	serverCPU, pgCPU time.Duration
	// firstSave is the time from the last ledgerRate's take-over to its
	// first save that held lines: the source's open and first pull, the
	// first batch's wait and its commit; saves is that run's saves (of
	// every partition), about.
	firstSave time.Duration
	saves     int
	// allSaving is the time from the take-over to the first save of the
	// last partition to save; steady the lines a second from then on.
	allSaving time.Duration
	steady    float64
}

func newEnv(b *testing.B) *env {
	b.Helper()
	e := &env{b: b, exe: ledgerExe(b), dir: b.TempDir()}
	e.cfg = natstest.Config{StoreDir: filepath.Join(e.dir, "nats"), Port: natstest.FreePort(b)}
	if v := os.Getenv("TIDEMARK_SCALE_NATS_PPROF"); v != "" {
		port, err := strconv.Atoi(v)
		if err != nil {
			b.Fatalf("TIDEMARK_SCALE_NATS_PPROF=%q: a port number, such as 6061", v)
		}
		e.cfg.ProfPort = port
	}
	e.nats = natstest.StartProcess(b, e.cfg)
	e.db = pgtest.Shared(b).Schema(b)
	return e
}

func (e *env) url(stream string) string { return e.nats.URL() + "/" + stream }

// fill publishes lines generated lines (accounts of them) into a new
// stream of parts partitions. The publication runs under the server's
// default sync interval (a sync per message would make it last minutes);
// the server is then stopped and started again with sync_interval:
// always, as exactly once needs, for what is measured.
func (e *env) fill(streams map[string]int, lines, accounts int) {
	e.b.Helper()
	input := filepath.Join(e.dir, "ledger.csv")
	run(e.b, e.exe, "gen", "--lines", strconv.Itoa(lines), "--accounts", strconv.Itoa(accounts), "--seed", "5", "--out", input)
	for name, parts := range streams {
		run(e.b, e.exe, "publish", "--input", input, "--to", e.url(name), "--partitions", strconv.Itoa(parts), "--window", "4096")
	}
	js := natstest.JetStream(e.b, e.nats.URL())
	for name := range streams {
		// Everything published is in the store's files before the kill.
		st, err := js.Stream(context.Background(), name)
		if err != nil {
			e.b.Fatal(err)
		}
		if got := st.CachedInfo().State.Msgs; got != uint64(lines) {
			e.b.Fatalf("stream %s holds %d messages, want %d", name, got, lines)
		}
	}
	e.nats.Kill()
	e.cfg.SyncAlways = true
	e.nats = natstest.StartProcess(e.b, e.cfg)
	js = natstest.JetStream(e.b, e.nats.URL())
	for name := range streams {
		st, err := js.Stream(context.Background(), name)
		if err != nil {
			e.b.Fatal(err)
		}
		if got := st.CachedInfo().State.Msgs; got != uint64(lines) {
			e.b.Fatalf("stream %s holds %d messages after the restart, want %d", name, got, lines)
		}
	}
}

func run(b *testing.B, exe string, args ...string) {
	b.Helper()
	if out, err := exec.Command(exe, args...).CombinedOutput(); err != nil {
		b.Fatalf("ledger %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// keepLog copies a worker's log into the folder TIDEMARK_SCALE_LOGS names,
// if any, before the benchmark's temporary folder goes.
func keepLog(b *testing.B, name string) {
	dir := os.Getenv("TIDEMARK_SCALE_LOGS")
	if dir == "" {
		return
	}
	data, err := os.ReadFile(name)
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, strings.ReplaceAll(b.Name(), "/", "_")+"-"+filepath.Base(name)), data, 0o644)
	}
	if err != nil {
		b.Logf("TIDEMARK_SCALE_LOGS: %v", err)
	}
}

// worker is a `ledger run --source … --events` process, followed through
// its events.
type worker struct {
	b      *testing.B
	name   string
	cmd    *exec.Cmd
	log    *os.File
	exited chan struct{}

	mu       sync.Mutex
	changed  chan struct{}
	firstAcq time.Time
	held     map[int]int64 // partition → token
	lines    map[int]int64 // partition → lines durable, by the newest event
	// first is the lines of a partition's first durable event under a
	// token, and moved when a later event under it had more.
	first map[[2]int64]int64
	moved map[[2]int64]time.Time
	// firstSave is when the first save that held lines was durable;
	// saves counts the durable events whose lines moved: about one a
	// save of a partition (they are read every 2 ms).
	firstSave time.Time
	saves     int
	// lastFirst is when the last partition to save had its first save
	// that held lines, and atLast the lines saved then (in every
	// partition).
	lastFirst time.Time
	atLast    int64
	// acquired is when the worker took a partition under a token.
	acquired map[[2]int64]time.Time
}

func (e *env) startWorker(name, stream string, extra ...string) *worker {
	return e.startWorkerOf(e.exe, name, stream, extra...)
}

// startWorkerOf starts a worker of the ledger program exe.
func (e *env) startWorkerOf(exe, name, stream string, extra ...string) *worker {
	b := e.b
	b.Helper()
	w := &worker{b: b, name: name, exited: make(chan struct{}), changed: make(chan struct{}),
		held: map[int]int64{}, lines: map[int]int64{}, first: map[[2]int64]int64{}, moved: map[[2]int64]time.Time{}, acquired: map[[2]int64]time.Time{}}
	var err error
	if w.log, err = os.CreateTemp(e.dir, name+"-*.log"); err != nil {
		b.Fatal(err)
	}
	args := append([]string{"run", "--source", e.url(stream), "--store", e.db, "--worker", name,
		"--events", "--progress", "none", "--log-level", cmp.Or(os.Getenv("TIDEMARK_SCALE_LOG_LEVEL"), "warn")}, extra...)
	w.cmd = exec.Command(exe, args...)
	w.cmd.Stderr = w.log
	out, err := w.cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := w.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			w.event(sc.Text(), time.Now())
		}
		_ = w.cmd.Wait()
		close(w.exited)
	}()
	b.Cleanup(func() {
		_ = w.cmd.Process.Kill()
		<-w.exited
		w.log.Close()
		keepLog(b, w.log.Name())
	})
	return w
}

func (w *worker) event(line string, at time.Time) {
	parts := strings.Fields(line)
	if len(parts) == 0 {
		return
	}
	f := map[string]int64{}
	for _, kv := range parts[1:] {
		k, v, _ := strings.Cut(kv, "=")
		f[k], _ = strconv.ParseInt(v, 10, 64)
	}
	p := int(f["partition"])
	w.mu.Lock()
	defer w.mu.Unlock()
	switch parts[0] {
	case "acquired":
		if w.firstAcq.IsZero() {
			w.firstAcq = at
		}
		w.held[p] = f["token"]
		w.acquired[[2]int64{int64(p), f["token"]}] = at
	case "released", "lost":
		delete(w.held, p)
	case "durable":
		first := f["lines"] > 0 && w.lines[p] == 0
		if f["lines"] > w.lines[p] {
			w.saves++
		}
		w.lines[p] = f["lines"]
		if first {
			w.lastFirst, w.atLast = at, w.total()
		}
		if w.firstSave.IsZero() && f["lines"] > 0 {
			w.firstSave = at
		}
		k := [2]int64{int64(p), f["token"]}
		if n, ok := w.first[k]; !ok {
			w.first[k] = f["lines"]
		} else if _, ok := w.moved[k]; !ok && f["lines"] > n {
			w.moved[k] = at
		}
	default:
		return
	}
	close(w.changed)
	w.changed = make(chan struct{})
}

// waitUntil waits until cond (called with w.mu held) holds.
func (w *worker) waitUntil(what string, cond func() bool) {
	w.b.Helper()
	timeout := time.After(5 * time.Minute)
	for {
		w.mu.Lock()
		ok, ch := cond(), w.changed
		w.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-w.exited:
			w.b.Fatalf("worker %s exited while waiting for %s; its log: %s", w.name, what, w.log.Name())
		case <-timeout:
			w.b.Fatalf("worker %s: %s: not within 5 minutes; its log: %s", w.name, what, w.log.Name())
		}
	}
}

func (w *worker) total() int64 {
	var n int64
	for _, v := range w.lines {
		n += v
	}
	return n
}

// stop ends the worker with SIGTERM: a clean exit.
func (w *worker) stop() {
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-w.exited:
	case <-time.After(time.Minute):
		w.b.Fatalf("worker %s did not stop on SIGTERM; its log: %s", w.name, w.log.Name())
	}
	if !w.cmd.ProcessState.Success() {
		w.b.Fatalf("worker %s: %v; its log: %s", w.name, w.cmd.ProcessState, w.log.Name())
	}
}

// ledgerRate runs one worker over the stream until it saved lines, and
// returns the lines per second from its first take-over to its last save.
// Each run is a job of its own (new stores). cpu is the worker process's
// CPU time per line (user and system, start and stop included): what the
// machine's load does not change much.
func (e *env) ledgerRate(stream string, lines int64) (rate float64, cpu time.Duration) {
	return e.ledgerRateOf(e.exe, stream, lines)
}

// ledgerRateOf is ledgerRate with the ledger program exe.
func (e *env) ledgerRateOf(exe, stream string, lines int64) (rate float64, cpu time.Duration) {
	e.runs++
	args := []string{"--job", fmt.Sprintf("bench%d", e.runs)}
	if exe == e.exe {
		args = append(args, strings.Fields(os.Getenv("TIDEMARK_SCALE_ARGS"))...)
	}
	if dir := os.Getenv("TIDEMARK_SCALE_PROFILE"); dir != "" {
		args = append(args, "--cpuprofile", filepath.Join(dir, fmt.Sprintf("%s-%d.cpu", e.b.Name(), e.runs)))
	}
	w := e.startWorkerOf(exe, "bench", stream, args...)
	// The server's CPU from the take-over to the last save, as the rate:
	// not the worker's connect and stop.
	w.waitUntil("the partition taken", func() bool { return !w.firstAcq.IsZero() })
	srv0, pg0 := e.serverTime(), e.pgTime()
	w.waitUntil("every line saved", func() bool { return w.total() >= lines })
	w.mu.Lock()
	d := time.Since(w.firstAcq)
	e.firstSave, e.saves, e.allSaving = w.firstSave.Sub(w.firstAcq), w.saves, w.lastFirst.Sub(w.firstAcq)
	e.steady = float64(w.total()-w.atLast) / time.Since(w.lastFirst).Seconds()
	w.mu.Unlock()
	e.serverCPU, e.pgCPU = since(srv0, e.serverTime()), since(pg0, e.pgTime())
	w.stop()
	ps := w.cmd.ProcessState
	return float64(lines) / d.Seconds(), (ps.UserTime() + ps.SystemTime()) / time.Duration(lines)
}

// serverTime is the NATS server process's CPU time so far (user and
// system, /proc/PID/stat), or -1 when it cannot be read.
func (e *env) serverTime() time.Duration {
	pid := e.nats.Pid()
	if pid == 0 {
		return -1
	}
	_, self, _, ok := procStat(pid)
	if !ok {
		return -1
	}
	return self
}

// procStat reads /proc/PID/stat: the process's parent, its CPU time so far
// (user and system) and that of its children it reaped.
func procStat(pid int) (ppid int, self, reaped time.Duration, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, 0, false
	}
	// The fields after the command's closing parenthesis: state is the
	// 3rd field of the line, ppid the 4th, utime, stime, cutime and
	// cstime the 14th to 17th.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return 0, 0, 0, false
	}
	var n [5]int64
	for j, k := range []int{1, 11, 12, 13, 14} {
		if n[j], err = strconv.ParseInt(f[k], 10, 64); err != nil {
			return 0, 0, 0, false
		}
	}
	// In clock ticks of USER_HZ, 100 a second on Linux.
	tick := 10 * time.Millisecond
	return int(n[0]), time.Duration(n[1]+n[2]) * tick, time.Duration(n[3]+n[4]) * tick, true
}

// pgTime is the CPU time so far of the PostgreSQL cluster the stores are
// in (its postmaster, the processes it runs, and those that exited), or -1
// when it cannot be read (a server TIDEMARK_PG_DSN names elsewhere).
func (e *env) pgTime() time.Duration {
	pm := e.postmaster()
	if pm == 0 {
		return -1
	}
	_, self, reaped, ok := procStat(pm)
	if !ok {
		return -1
	}
	total := self + reaped
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return -1
	}
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if ppid, self, _, ok := procStat(pid); ok && ppid == pm {
			total += self
		}
	}
	return total
}

// postmaster is the pid of the PostgreSQL cluster of e's stores, from the
// postmaster.pid of the data folder beside its socket folder (pgtest's
// layout), or 0.
func (e *env) postmaster() int {
	u, err := url.Parse(e.db)
	if err != nil {
		return 0
	}
	host := u.Query().Get("host")
	if !strings.HasPrefix(host, "/") {
		return 0
	}
	b, err := os.ReadFile(filepath.Join(host, "data", "postmaster.pid"))
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	return pid
}

// since is the time from a to b, -1 when either is unknown.
func since(a, b time.Duration) time.Duration {
	if a < 0 || b < 0 {
		return -1
	}
	return b - a
}

// cpuSelf is this process's CPU time so far.
func cpuSelf() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// bareRate reads the stream through a durable pull consumer (AckAll, one
// acknowledgement every 1,000 messages, the last one included), without
// parsing or storing anything, and returns messages per second.
func (e *env) bareRate(stream string, lines int) (rate float64, cpu time.Duration) {
	ctx := context.Background()
	js := natstest.JetStream(e.b, e.nats.URL())
	cons, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable: "bare", AckPolicy: jetstream.AckAllPolicy, DeliverPolicy: jetstream.DeliverAllPolicy,
		MaxAckPending: 65536, AckWait: time.Minute, MaxDeliver: -1,
	})
	if err != nil {
		e.b.Fatal(err)
	}
	start, cpu0, srv0 := time.Now(), cpuSelf(), e.serverTime()
	it, err := cons.Messages(jetstream.PullMaxMessages(4096))
	if err != nil {
		e.b.Fatal(err)
	}
	defer it.Stop()
	for i := 1; i <= lines; i++ {
		m, err := it.Next()
		if err != nil {
			e.b.Fatal(err)
		}
		if i%1000 == 0 || i == lines {
			if err := m.DoubleAck(ctx); err != nil {
				e.b.Fatal(err)
			}
		}
	}
	rate, cpu = float64(lines)/time.Since(start).Seconds(), (cpuSelf()-cpu0)/time.Duration(lines)
	e.serverCPU = since(srv0, e.serverTime())
	return rate, cpu
}

// baselineExe is the ledger program TIDEMARK_SCALE_BASELINE names, ""
// when it names none: a build of another commit, to compare a change
// with in the same run (go build -o /tmp/ledger-base ./examples/ledger in
// a checkout of that commit).
func baselineExe(b *testing.B) string {
	exe := os.Getenv("TIDEMARK_SCALE_BASELINE")
	if exe == "" {
		return ""
	}
	if _, err := os.Stat(exe); err != nil {
		b.Fatalf("TIDEMARK_SCALE_BASELINE: %v", err)
	}
	return exe
}

// BenchmarkJetStreamToPostgres: the ledger, one worker, one partition,
// exactly once (JetStream with sync_interval: always, PostgreSQL with
// synchronous_commit on), against a bare durable pull consumer of the same
// stream. With TIDEMARK_SCALE_BASELINE, each round also runs that build of
// the ledger, and the worker's CPU a line is compared with it.
func BenchmarkJetStreamToPostgres(b *testing.B) {
	const lines = 200_000
	e := newEnv(b)
	e.fill(map[string]int{"ONE": 1}, lines, 1000)
	baseExe := baselineExe(b)
	var led, bare, ledCPU, bareCPU, base, baseCPU, ledSrv, bareSrv, ledPG, ledFirst, baseFirst []float64
	perLine := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / lines }
	var baseSrv, ledSteady []float64
	runBase := func() {
		r, c := e.ledgerRateOf(baseExe, "ONE", lines)
		base, baseCPU = append(base, r), append(baseCPU, float64(c.Nanoseconds()))
		baseFirst, baseSrv = append(baseFirst, float64(e.firstSave.Nanoseconds())), append(baseSrv, perLine(e.serverCPU))
	}
	for i := range b.N {
		// The baseline runs first in even rounds, last in odd ones.
		if baseExe != "" && i%2 == 0 {
			runBase()
		}
		// The two alternate; the bare consumer reads through a consumer
		// of its own, the ledger through its partition's.
		r, c := e.bareRate("ONE", lines)
		bare, bareCPU, bareSrv = append(bare, r), append(bareCPU, float64(c.Nanoseconds())), append(bareSrv, perLine(e.serverCPU))
		if err := natstest.JetStream(b, e.nats.URL()).DeleteConsumer(context.Background(), "ONE", "bare"); err != nil {
			b.Fatal(err)
		}
		r, c = e.ledgerRate("ONE", lines)
		led, ledCPU, ledSrv = append(led, r), append(ledCPU, float64(c.Nanoseconds())), append(ledSrv, perLine(e.serverCPU))
		ledPG, ledFirst = append(ledPG, perLine(e.pgCPU)), append(ledFirst, float64(e.firstSave.Nanoseconds()))
		ledSteady = append(ledSteady, e.steady)
		if baseExe != "" && i%2 == 1 {
			runBase()
		}
	}
	l, r := median(led), median(bare)
	lc, rc := median(ledCPU), median(bareCPU)
	b.ReportMetric(l, "lines/s")
	b.ReportMetric(r, "bare-msgs/s")
	b.ReportMetric(l/r, "ratio")
	b.ReportMetric(lc, "worker-cpu-ns/line")
	b.ReportMetric(rc, "bare-cpu-ns/msg")
	fmt.Printf("scale: JetStream → PostgreSQL, one worker, exactly once: %.0f lines/s (worker CPU %.1f µs a line); bare durable pull consumer (AckAll every 1,000): %.0f msgs/s (client CPU %.1f µs a message); ratio %.2f (%d lines, %d runs, load average %s)\n",
		l, lc/1000, r, rc/1000, l/r, lines, b.N, loadAvg())
	b.ReportMetric(median(ledFirst)/1e6, "first-save-ms")
	b.ReportMetric(median(ledSteady), "after-first-save-lines/s")
	fmt.Printf("scale: runs, lines/s: ledger %v, bare %v; the take-over to the first save %v ms; the ledger's lines/s after its first save %v\n", rounded(led), rounded(bare), millis(ledFirst), rounded(ledSteady))
	if pg := median(ledPG); pg >= 0 {
		b.ReportMetric(pg, "pg-cpu-ns/line")
		fmt.Printf("scale: PostgreSQL's CPU meanwhile: %.1f µs a line (runs %v µs)\n", pg/1000, micros(ledPG))
	}
	if ls, bs := median(ledSrv), median(bareSrv); ls >= 0 && bs >= 0 {
		b.ReportMetric(ls, "server-cpu-ns/line")
		b.ReportMetric(bs, "bare-server-cpu-ns/msg")
		fmt.Printf("scale: the NATS server's CPU meanwhile: %.1f µs a line for the worker (from its take-over to its last save), %.1f µs a message for the bare consumer (10 ms ticks)\n", ls/1000, bs/1000)
	}
	if baseExe != "" {
		bl, bc := median(base), median(baseCPU)
		b.ReportMetric(bl, "baseline-lines/s")
		b.ReportMetric(bc, "baseline-worker-cpu-ns/line")
		b.ReportMetric(lc/bc, "cpu-ratio")
		b.ReportMetric(l/bl, "rate-ratio")
		fmt.Printf("scale: baseline %s: %.0f lines/s (worker CPU %.1f µs a line); this build's CPU a line %.2f of the baseline's (runs: this %v, baseline %v µs); its rate %.2f of the baseline's (runs: this %v, baseline %v lines/s; the take-over to the first save: baseline %v ms; the NATS server's CPU a line: this %v, baseline %v µs)\n",
			baseExe, bl, bc/1000, lc/bc, micros(ledCPU), micros(baseCPU), l/bl, rounded(led), rounded(base), millis(baseFirst), micros(ledSrv), micros(baseSrv))
	}
}

// millis rounds nanoseconds to milliseconds, for the record.
func millis(ns []float64) []float64 {
	out := make([]float64, len(ns))
	for i, v := range ns {
		out[i] = float64(int(v/1e6 + 0.5))
	}
	return out
}

// micros rounds nanoseconds to tenths of microseconds, for the record.
func micros(ns []float64) []float64 {
	out := make([]float64, len(ns))
	for i, v := range ns {
		out[i] = float64(int(v/100+0.5)) / 10
	}
	return out
}

// BenchmarkHighCardinality: the ledger, one worker, one partition, over
// 1,000,000 accounts, so that nearly every line changes an account no
// earlier line did: each batch commits about as many keys as it has lines.
// keys/s is the distinct accounts made durable a second. With
// TIDEMARK_SCALE_BASELINE, each round also runs that build.
func BenchmarkHighCardinality(b *testing.B) {
	const lines, accounts = 200_000, 1_000_000
	e := newEnv(b)
	e.fill(map[string]int{"WIDE": 1}, lines, accounts)
	keys := e.distinctAccounts()
	baseExe := baselineExe(b)
	var rates, base []float64
	for range b.N {
		if baseExe != "" {
			r, _ := e.ledgerRateOf(baseExe, "WIDE", lines)
			base = append(base, r)
		}
		r, _ := e.ledgerRate("WIDE", lines)
		rates = append(rates, r)
	}
	r := median(rates)
	k := r * float64(keys) / lines
	b.ReportMetric(r, "lines/s")
	b.ReportMetric(k, "keys/s")
	fmt.Printf("scale: high cardinality, one worker, %d lines over %d accounts (%d distinct): %.0f lines/s, %.0f distinct keys/s (load average %s)\n",
		lines, accounts, keys, r, k, loadAvg())
	if baseExe != "" {
		bl := median(base)
		b.ReportMetric(bl*float64(keys)/lines, "baseline-keys/s")
		b.ReportMetric(r/bl, "ratio")
		fmt.Printf("scale: baseline %s: %.0f distinct keys/s; this build %.2f of it (runs: this %v, baseline %v lines/s)\n",
			baseExe, bl*float64(keys)/lines, r/bl, rounded(rates), rounded(base))
	}
}

// rounded rounds rates to whole numbers, for the record.
func rounded(xs []float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = float64(int(x + 0.5))
	}
	return out
}

// distinctAccounts counts the accounts of the input fill generated.
func (e *env) distinctAccounts() int {
	e.b.Helper()
	f, err := os.Open(filepath.Join(e.dir, "ledger.csv"))
	if err != nil {
		e.b.Fatal(err)
	}
	defer f.Close()
	seen := map[string]struct{}{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if _, rest, ok := strings.Cut(sc.Text(), ","); ok {
			acct, _, _ := strings.Cut(rest, ",")
			seen[acct] = struct{}{}
		}
	}
	if err := sc.Err(); err != nil {
		e.b.Fatal(err)
	}
	return len(seen)
}

// BenchmarkPartitions: one worker holding 1, 2, 4 and 8 partitions of a
// stream, each partition's store a PostgreSQL store of its own.
func BenchmarkPartitions(b *testing.B) {
	const lines = 150_000
	e := newEnv(b)
	counts := []int{1, 2, 4, 8}
	streams := map[string]int{}
	for _, n := range counts {
		streams["P"+strconv.Itoa(n)] = n
	}
	e.fill(streams, lines, 1000)
	var row, cost []string
	for _, n := range counts {
		name := "P" + strconv.Itoa(n)
		var rates, cpus, srv, pg, saves, all, steady []float64
		for range b.N {
			r, c := e.ledgerRate(name, lines)
			rates, cpus = append(rates, r), append(cpus, float64(c.Nanoseconds()))
			srv, pg = append(srv, float64(e.serverCPU.Nanoseconds())/lines), append(pg, float64(e.pgCPU.Nanoseconds())/lines)
			saves, all = append(saves, float64(e.saves)*r/lines), append(all, float64(e.allSaving.Nanoseconds()))
			steady = append(steady, e.steady)
		}
		r, c := median(rates), median(cpus)
		b.ReportMetric(r, fmt.Sprintf("lines/s-P%d", n))
		row = append(row, fmt.Sprintf("%d: %.0f (%.1f µs CPU a line)", n, r, c/1000))
		// The worker's CPU counts its start and stop too: the cores are
		// an upper bound.
		if s, p := median(srv), median(pg); s >= 0 && p >= 0 {
			cost = append(cost, fmt.Sprintf("%d: worker %.1f + NATS %.1f + PostgreSQL %.1f µs = %.2f cores, %.0f saves/s, every partition saving after %.0f ms, %.0f lines/s from then on",
				n, c/1000, s/1000, p/1000, (c+s+p)*r/1e9, median(saves), median(all)/1e6, median(steady)))
		}
	}
	fmt.Printf("scale: one worker, lines/s by partitions held: %s (%d lines, load average %s)\n", strings.Join(row, ", "), lines, loadAvg())
	if len(cost) > 0 {
		fmt.Printf("scale: CPU a line by partitions held, and the cores it takes at that rate: %s\n", strings.Join(cost, "; "))
	}
}

// BenchmarkFailover: two workers share two partitions of a stream while
// they work through it (each line paced, so that there is always more to
// read); the holder of a partition is killed with SIGKILL, and the time
// to the first save of that partition by the other worker (a line applied
// and durable) is measured; the killed worker is started again and the
// partitions balanced before the next round. Lease 1 s.
func BenchmarkFailover(b *testing.B) {
	const lease = time.Second
	rounds := max(b.N, 8)
	e := newEnv(b)
	e.fill(map[string]int{"FAIL": 2}, 300_000, 1000)
	args := []string{"--lease", lease.String(), "--pace", "200µs"}
	ws := map[string]*worker{"a": e.startWorker("a", "FAIL", args...), "b": e.startWorker("b", "FAIL", args...)}
	balanced := func() {
		for _, w := range ws {
			w.waitUntil("one partition each", func() bool { return len(w.held) == 1 })
		}
		for _, w := range ws {
			w.waitUntil("one partition each", func() bool { return len(w.held) == 1 })
		}
	}
	// took is each round's time to the successor's first save; taken, to
	// its take-over of the lease (the rest is the open and the first
	// batch).
	var took, taken []time.Duration
	for i := range rounds {
		balanced()
		victim, other := ws["a"], ws["b"]
		if i%2 == 1 {
			victim, other = other, victim
		}
		victim.mu.Lock()
		var p int
		var tok int64
		for q, t := range victim.held {
			p, tok = q, t
		}
		victim.mu.Unlock()
		t0 := time.Now()
		_ = victim.cmd.Process.Kill()
		<-victim.exited
		var at, acq time.Time
		other.waitUntil(fmt.Sprintf("partition %d saved by its successor", p), func() bool {
			for k, t := range other.moved {
				if int(k[0]) == p && k[1] > tok {
					at, acq = t, other.acquired[k]
					return true
				}
			}
			return false
		})
		took = append(took, at.Sub(t0))
		taken = append(taken, acq.Sub(t0))
		ws[victim.name] = e.startWorker(victim.name, "FAIL", args...)
	}
	rounded := func(ds []time.Duration) []time.Duration {
		out := make([]time.Duration, len(ds))
		for i, d := range ds {
			out[i] = d.Round(time.Millisecond)
		}
		return out
	}
	fmt.Printf("scale: failover rounds, SIGKILL to take-over / to first save: %v / %v\n", rounded(taken), rounded(took))
	slices.Sort(took)
	slices.Sort(taken)
	p50, worst := took[len(took)/2], took[len(took)-1]
	b.ReportMetric(float64(p50.Milliseconds()), "p50-ms")
	b.ReportMetric(float64(worst.Milliseconds()), "max-ms")
	b.ReportMetric(float64(taken[len(taken)/2].Milliseconds()), "takeover-p50-ms")
	fmt.Printf("scale: failover, SIGKILL of a worker to its successor's first save of the partition, lease %v: p50 %v, max %v over %d rounds (take-over of the lease: p50 %v, max %v; load average %s)\n",
		lease, p50.Round(time.Millisecond), worst.Round(time.Millisecond), len(took), taken[len(taken)/2].Round(time.Millisecond), taken[len(taken)-1].Round(time.Millisecond), loadAvg())
}

// loadAvg is the machine's load average over the last minute, for the
// record: the rows share the machine with whatever else runs.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
