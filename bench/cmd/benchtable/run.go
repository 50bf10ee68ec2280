package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tidemark-go/tidemark/bench"
	"github.com/tidemark-go/tidemark/framework"
)

// config is the table's configuration, from the flags.
type config struct {
	short    bool
	reps     int
	lines    int
	rows     string
	accounts string
	out      string
	chart    string
	work     string
	peers    string
	setups   string
	command  string
}

// runner runs the children of one table.
type runner struct {
	cfg       config
	self      string
	work      string
	file      string // the ledger
	syncFile  string // the ledger's first lines, for the Sync mode
	bigFile   string // the restart file
	lines     int64
	syncLines int64
	// fastFile, of fastLines lines, is the input of rows 1 to 3 and 13
	// (the feed, no-op groups and the peer, ten million lines a second
	// and more): the ledger itself, but at least 1,000,000 lines in a
	// short run, whose 100,000 would last 8 ms, too short for row 3's
	// ratio of two such runs to hold still.
	fastFile  string
	fastLines int64
	batch100  int64 // lines of the batch-size-100 runs
	bigBytes  int64
	ops       int
	idleSec   float64
	timeout   time.Duration
	want      map[string]bool
	peerBin   string
	peerErr   error
	ledgerBin string // examples/ledger, built at the start
	naiveBin  string // bench/cmd/naiveledger
	buildErr  error  // of building them
	binOnce   sync.Once
	bins      string // see binDir
	warnings  []string
}

func (r *runner) wants(row string) bool { return len(r.want) == 0 || r.want[row] }

func run(cfg config) error {
	r := &runner{cfg: cfg}
	if cfg.reps <= 0 {
		cfg.reps = 3
		if cfg.short {
			cfg.reps = 1
		}
	}
	r.cfg = cfg
	r.lines = 1_000_000
	r.syncLines = 1000
	r.bigBytes = 1 << 30
	r.ops = 1000
	r.idleSec = 3
	r.timeout = 10 * time.Minute
	if cfg.short {
		r.lines = 100_000
		r.syncLines = 100
		r.bigBytes = 100 << 20
		r.ops = 200
		r.idleSec = 1
		r.timeout = 2 * time.Minute
	}
	if cfg.lines > 0 {
		r.lines = int64(cfg.lines)
	}
	r.batch100 = min(r.lines, 200_000)
	if cfg.rows != "" {
		r.want = map[string]bool{}
		for _, s := range strings.Split(cfg.rows, ",") {
			r.want[strings.TrimSpace(s)] = true
		}
	}
	var err error
	if r.self, err = os.Executable(); err != nil {
		return err
	}
	env := readEnv(cfg.command)
	if cfg.work == "" {
		if r.work, err = os.MkdirTemp("", "tidemark-bench-"); err != nil {
			return err
		}
		defer os.RemoveAll(r.work)
	} else {
		r.work = cfg.work
		if err := os.MkdirAll(r.work, 0o755); err != nil {
			return err
		}
	}
	// A short run is a quick check: its report goes to a directory of its
	// own, never over bench/RESULTS.md.
	outDir := "bench"
	if cfg.short {
		outDir = filepath.Join(os.TempDir(), "tidemark-bench-short")
		if err := os.MkdirAll(outDir, 0o755); err != nil {
			return err
		}
	}
	out, chart := reportPaths(cfg.out, cfg.chart, outDir)
	if !cfg.short && cfg.out == "" {
		if _, err := os.Stat("bench"); err != nil {
			return fmt.Errorf("run from the repository's root (bench/ not found): %w", err)
		}
	}

	logf("work directory %s; %d lines, %d runs a row; load %s", r.work, r.lines, cfg.reps, env.loadStart)
	r.file = filepath.Join(r.work, "ledger.csv")
	if err := bench.GenLedgerFile(r.file, int(r.lines), 1); err != nil {
		return fmt.Errorf("generate ledger: %w", err)
	}
	r.fastFile, r.fastLines = r.file, r.lines
	if cfg.short && cfg.lines == 0 && r.lines < fastLinesShort {
		r.fastFile, r.fastLines = filepath.Join(r.work, "ledger-fast.csv"), fastLinesShort
		if err := bench.GenLedgerFile(r.fastFile, int(r.fastLines), 1); err != nil {
			return fmt.Errorf("generate ledger: %w", err)
		}
	}
	r.syncFile = filepath.Join(r.work, "ledger-sync.csv")
	if err := bench.GenLedgerFile(r.syncFile, int(r.syncLines), 1); err != nil {
		return fmt.Errorf("generate ledger: %w", err)
	}
	fileBytes, _ := fileSize(r.file)
	env.input = fmt.Sprintf("%s lines, %.1f MB (%s)", fmtCount(r.lines), float64(fileBytes)/1e6, "id,account,amount; 100 accounts")
	if r.fastFile != r.file {
		env.input += fmt.Sprintf("; rows 1 to 3 and 13: %s lines", fmtCount(r.fastLines))
	}
	// The programs are built before anything is measured, the peer (a
	// module of its own) beside the ledger and the naive program: the
	// builds take most of a short run's time on a cold build cache.
	var built sync.WaitGroup
	if r.wants("13") {
		built.Go(r.buildPeer)
	}
	if r.wantsLedger() {
		r.buildErr = r.buildPrograms()
	}
	built.Wait()

	t := &table{env: env, reps: cfg.reps}
	steps := []func(*table) error{
		r.rows1to3, r.row4, r.ledgerRows, r.storeLag, r.row7, r.row8, r.row9and10, r.row11, r.row12, r.row13, r.row15, r.stateRows, r.checksumRow,
	}
	for _, step := range steps {
		if err := step(t); err != nil {
			return err
		}
	}
	t.sort()
	for _, w := range r.warnings {
		t.note("", "WARNING: "+w)
	}
	t.env.loadEnd = loadAvg()
	t.env.end = time.Now()
	fmt.Println()
	fmt.Print(t.text())
	if err := drawChart(chart, t.chart); err != nil {
		logf("chart: %v", err)
	}
	md := t.markdown(filepath.Base(chart)) + keptSection(out)
	if err := os.WriteFile(out, []byte(md), 0o644); err != nil {
		return err
	}
	logf("wrote %s and %s", out, chart)
	return nil
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s benchtable: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// spec is one measurement: a child case and its flags, or an external
// program.
type spec struct {
	label string
	name  string
	args  []string
	ext   string // program to run instead of a child
	// ledgerSync is the store of a ledger run --sync (row 7), run and
	// timed by runLedgerSync instead of a child.
	ledgerSync string
	// naiveSync is the store of the naive program with one transaction a
	// line (-batch 1, row 7), run and timed as ledgerSync is.
	naiveSync string
	// fast marks a measurement of a fraction of a second, whose run-to-run
	// spread on a shared machine is a large part of it: it runs fastReps
	// times (when the table runs more than one run a row).
	fast bool
}

// fastReps is how many runs a fast spec gets: their median is then as
// steady as that of three runs of a slow one.
const fastReps = 9

// fastLinesShort is the least number of lines of rows 1 to 3 and 13 in a
// short run (see runner.fastFile).
const fastLinesShort = 1_000_000

// reps is how many times s runs.
func (r *runner) reps(s spec) int {
	if s.fast && r.cfg.reps > 1 {
		return max(r.cfg.reps, fastReps)
	}
	return r.cfg.reps
}

// runs are the results of one spec, one per repetition, or its error.
type runs struct {
	spec spec
	res  []result
	err  error
}

func (x *runs) ok() bool { return x != nil && x.err == nil && len(x.res) > 0 }

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func (x *runs) each(f func(result) float64) []float64 {
	var v []float64
	for _, r := range x.res {
		v = append(v, f(r))
	}
	return v
}

func (x *runs) rate() float64    { return median(x.each(result.rate)) }
func (x *runs) seconds() float64 { return median(x.each(func(r result) float64 { return r.Seconds })) }
func (x *runs) extra(k string) float64 {
	return median(x.each(func(r result) float64 { return r.Extra[k] }))
}
func (x *runs) maxRSS() float64 {
	return slices.Max(x.each(func(r result) float64 { return float64(r.PeakRSSKiB) }))
}
func (x *runs) maxExtra(k string) float64 {
	return slices.Max(x.each(func(r result) float64 { return r.Extra[k] }))
}

// loadText is the median one-minute load average at the start of x's runs.
func (x *runs) loadText() string {
	if !x.ok() || x.res[0].Extra == nil {
		// Nothing measured, or a goal of a fixed rate (fixedRate): no run.
		return "–"
	}
	return fmt.Sprintf("%.1f", x.extra("load1"))
}

func (x *runs) allocsPerLine() float64 {
	return median(x.each(func(r result) float64 { return float64(r.Mallocs) / float64(max(r.Lines, 1)) }))
}

// measure runs every spec reps times, round robin, so that a drift of the
// machine's load touches every spec alike.
func (r *runner) measure(specs ...spec) []*runs {
	out := make([]*runs, len(specs))
	for i, s := range specs {
		out[i] = &runs{spec: s}
	}
	most := 0
	for _, x := range out {
		most = max(most, r.reps(x.spec))
	}
	for rep := range most {
		for _, x := range out {
			if x.err != nil || rep >= r.reps(x.spec) {
				continue
			}
			res, err := r.runOne(x.spec)
			if err != nil {
				x.err = err
				logf("%s: %v", x.spec.label, err)
				continue
			}
			x.res = append(x.res, res)
			if v, ok := res.Extra["pointer_at_end"]; ok && v == 0 {
				msg := fmt.Sprintf("%s, run %d: after a clean stop the pointer was at %.0f, not at the end of the input", x.spec.label, rep+1, res.Extra["committed_position"])
				logf("WARNING: %s", msg)
				r.warnings = append(r.warnings, msg)
			}
			logf("%-34s run %d: %s in %.3f s (%s)", x.spec.label, rep+1, fmtCount(res.Lines), res.Seconds, fmtRate(res.rate()))
		}
	}
	return out
}

// runOne runs one child (or the external program) and decodes its result.
func (r *runner) runOne(s spec) (result, error) {
	if s.ledgerSync != "" {
		return r.runLedgerSync(s.ledgerSync)
	}
	if s.naiveSync != "" {
		return r.runNaiveSync(s.naiveSync)
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	var cmd *exec.Cmd
	if s.ext != "" {
		cmd = exec.CommandContext(ctx, s.ext, s.args...)
	} else {
		args := append([]string{"-child", s.name, "-dir", r.work}, s.args...)
		cmd = exec.CommandContext(ctx, r.self, args...)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	load := load1()
	err := cmd.Run()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 300 {
			msg = msg[:300] + "…"
		}
		return result{}, fmt.Errorf("%w: %s", err, msg)
	}
	var res result
	if err := json.Unmarshal(lastLine(stdout.Bytes()), &res); err != nil {
		return result{}, fmt.Errorf("decode result %q: %w", stdout.String(), err)
	}
	if res.Extra == nil {
		res.Extra = map[string]float64{}
	}
	res.Extra["load1"] = load
	return res, nil
}

func lastLine(b []byte) []byte {
	b = bytes.TrimSpace(b)
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		return b[i+1:]
	}
	return b
}

// binDir returns the folder the programs are built into: one that stays
// from one run to the next (the user's cache folder, one per repository
// folder), since go build links a program again only when it changed, and
// linking takes seconds on a loaded machine; the work directory if there
// is none.
func (r *runner) binDir() string {
	r.binOnce.Do(func() {
		r.bins = filepath.Join(r.work, "bin")
		if cache, err := os.UserCacheDir(); err == nil {
			wd, _ := os.Getwd()
			dir := filepath.Join(cache, "tidemark-bench", fmt.Sprintf("%x", sha256.Sum256([]byte(wd)))[:16])
			if err := os.MkdirAll(dir, 0o755); err == nil {
				r.bins = dir
				return
			}
		}
		if err := os.MkdirAll(r.bins, 0o755); err != nil {
			logf("%v", err)
		}
	})
	return r.bins
}

func (r *runner) buildPeer() {
	bin := filepath.Join(r.binDir(), "peers")
	logf("building the peer (%s) ...", r.cfg.peers)
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = r.cfg.peers
	// The peer is a module of its own, outside the repository's go.work:
	// inside the workspace, its folder would be taken for a package of the
	// bench module.
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		r.peerErr = fmt.Errorf("build %s: %v: %s", r.cfg.peers, err, strings.TrimSpace(out.String()))
		logf("%v", r.peerErr)
		return
	}
	r.peerBin = bin
}

func (r *runner) fileArgs(file string, lines int64, extra ...string) []string {
	return append([]string{"-file", file, "-lines-child", strconv.FormatInt(lines, 10)}, extra...)
}

// pointer sync policies of the framework rows: the default (every commit
// durable) and SyncInterval.
var psyncs = []struct{ flag, label string }{
	{"every", "pointer SyncEveryCommit, group commit (the default)"},
	{"every-sync", "pointer SyncEveryCommit, SyncCommit (each commit waits for its fdatasync)"},
	{"interval", "pointer SyncInterval 100 ms"},
}

// shared results, for the rows that compare with earlier rows.
type shared struct {
	bufio   *runs
	nop1    map[string]*runs // by pointer sync policy
	store5  *runs            // the bench's ledger processor, bbolt, batch 1000 (row 9)
	restart *runs            // row 12
	peer    *runs            // row 13
}

var sh = shared{nop1: map[string]*runs{}}

func (r *runner) rows1to3(t *table) error {
	if !r.wants("1") && !r.wants("2") && !r.wants("3") && !r.wants("9") && !r.wants("10") && !r.wants("13") {
		return nil
	}
	specs := []spec{{label: "bufio.ReadSlice baseline", name: "bufio", args: r.fileArgs(r.fastFile, r.fastLines), fast: true}}
	for _, p := range psyncs {
		specs = append(specs, spec{label: "1 source, " + p.flag, name: "source", args: r.fileArgs(r.fastFile, r.fastLines, "-psync", p.flag, "-batch", strconv.Itoa(framework.DefaultBatchSize)), fast: true})
		specs = append(specs, spec{label: "2 one group, " + p.flag, name: "nop", args: r.fileArgs(r.fastFile, r.fastLines, "-psync", p.flag, "-groups", "1"), fast: true})
		if r.wants("3") {
			specs = append(specs, spec{label: "3 four groups, " + p.flag, name: "nop", args: r.fileArgs(r.fastFile, r.fastLines, "-psync", p.flag, "-groups", "4"), fast: true})
		}
	}
	res := r.measure(specs...)
	sh.bufio = res[0]
	i := 1
	for _, p := range psyncs {
		src, nop1 := res[i], res[i+1]
		i += 2
		var nop4 *runs
		if r.wants("3") {
			nop4 = res[i]
			i++
		}
		sh.nop1[p.flag] = nop1
		t.rate("1", "file source alone, Committed, commit every duty cycle of "+strconv.Itoa(framework.DefaultBatchSize)+" lines; "+p.label, src, sh.bufio, "bufio.ReadSlice loop", 0.5)
		t.rate("2", "feed → one group → no-op processor, Pause; "+p.label, nop1, sh.bufio, "bufio.ReadSlice loop", 0.25)
		if nop4 != nil {
			t.rate("3", "feed → four groups (fan-out), no-op; "+p.label, nop4, nop1, "row 2, same policy", 0.7)
			if nop1.ok() && nop4.ok() {
				t.note("3", fanoutCPU(p.label, nop1, nop4))
			}
		}
	}
	return nil
}

// cpuPerLine is the median CPU time a line of x's runs (user and system,
// the whole process), in ns.
func (x *runs) cpuPerLine() float64 {
	return median(x.each(func(r result) float64 { return r.Extra["cpu_seconds"] * 1e9 / float64(max(r.Lines, 1)) }))
}

// fanoutCPU says what the CPU time of row 3 shows: what each group past
// the first costs a line, and the ratio of rows 2 and 3's CPU times, which
// row 3's ratio comes down to when the machine has no core to spare for
// the other groups (a loaded machine: both rows then take about as long
// as their CPU time).
func fanoutCPU(label string, one, four *runs) string {
	c1, c4 := one.cpuPerLine(), four.cpuPerLine()
	return fmt.Sprintf("Row 3 CPU a line (%s; all threads, median): one group %.0f ns, four groups %.0f ns: each group past the first adds %.1f ns. On a machine without a core to spare, row 3's ratio comes down to that of the CPU times, %.2f.",
		label, c1, c4, (c4-c1)/3, c1/max(c4, 1e-9))
}

func (r *runner) row4(t *table) error {
	if !r.wants("4") {
		return nil
	}
	var specs []spec
	for _, p := range psyncs {
		specs = append(specs, spec{label: "4 ledger in memory, " + p.flag, name: "ledger-mem", args: r.fileArgs(r.file, r.lines, "-psync", p.flag)})
	}
	res := r.measure(specs...)
	for i, p := range psyncs {
		x := res[i]
		t.rate("4", "ledger processor, de-duplicated (tidemark.Tracker), state in memory; "+p.label, x, sh.nop1[p.flag], "row 2, same policy", 0)
		if x.ok() {
			parse, dd, apply, total, cpu := x.extra("parse_ns"), x.extra("dedupe_ns"), x.extra("apply_ns"), x.extra("total_ns"), x.extra("cpu_ns")
			t.note("4", fmt.Sprintf("Row 4 cost per line (%s): %.0f ns of wall time and %.0f ns of CPU time (all threads) in all; of the CPU time, parse %.1f ns + de-duplication (Tracker.Seen and Record) %.1f ns + apply to the maps %.1f ns, and the rest, %.0f ns, is reading, framing, the hand-off, the group's loop and the pointer commits. The parts are timed alone, in CPU time of one thread, over the same lines held in memory.",
				p.label, total, cpu, parse, dd, apply, cpu-parse-dd-apply))
		}
	}
	return nil
}

// storeLag is the in-process run of the store whose commit lag row 9
// reports: the bench's ledger processor over a bbolt store, batch 1000.
func (r *runner) storeLag(t *table) error {
	if !r.wants("9") {
		return nil
	}
	res := r.measure(spec{label: "9 ledger store bbolt batch 1000", name: "ledger-store", args: r.fileArgs(r.file, r.lines, "-batch", "1000", "-backend", "bbolt")})
	sh.store5 = res[0]
	return nil
}

func (r *runner) row7(t *table) error {
	if !r.wants("7") {
		return nil
	}
	ops := strconv.Itoa(int(r.syncLines))
	specs := []spec{
		{label: "7 fsync 4 KB baseline", name: "fsync4k", args: []string{"-ops", ops}},
		{label: "7 fsync 4 KB appended", name: "fsync4k-append", args: []string{"-ops", ops}},
		{label: "7 fsync 4 KB twice", name: "fsync4k-twice", args: []string{"-ops", ops}},
		{label: "7 fsync 4 KB twice, then a pointer", name: "fsync4k-twice-pointer", args: []string{"-ops", ops}},
		{label: "7 fsync 4 KB appended, then a pointer", name: "fsync4k-append-pointer", args: []string{"-ops", ops}},
		{label: "7 bbolt alone", name: "backend-sync", args: []string{"-ops", ops, "-backend", "bbolt"}},
		{label: "7 pebble alone", name: "backend-sync", args: []string{"-ops", ops, "-backend", "pebble"}},
	}
	ps := psyncs[:0:0]
	for _, p := range psyncs {
		if p.flag != "every-sync" { // a store's sync dwarfs the pointer's: two policies tell enough
			ps = append(ps, p)
		}
	}
	for _, p := range ps {
		for _, be := range []string{"bbolt", "pebble"} {
			specs = append(specs, spec{label: "7 ledger --sync " + be + ", " + p.flag, name: "ledger-store", args: r.fileArgs(r.syncFile, r.syncLines, "-sync", "-backend", be, "-psync", p.flag)})
		}
	}
	// ledger run --sync as users run it, and its baselines: the output's
	// line and its sync before the store's.
	runSpecs := []spec{
		{label: "7 fsync output, 4 KB twice", name: "fsync4k-twice-output", args: []string{"-ops", ops}},
		{label: "7 fsync output, 4 KB appended", name: "fsync4k-append-output", args: []string{"-ops", ops}},
		{label: "7 ledger run --sync bbolt", ledgerSync: "bbolt"},
		{label: "7 ledger run --sync pebble", ledgerSync: "pebble"},
		{label: "7 naive -batch 1 bbolt", naiveSync: "bbolt"},
		{label: "7 naive -batch 1 pebble", naiveSync: "pebble"},
	}
	specs = append(specs, runSpecs...)
	res := r.measure(specs...)
	runRes := res[len(res)-len(runSpecs):]
	res = res[:len(res)-len(runSpecs)]
	t.rateUnit("7", "for comparison: 4 KB appended to a growing file + fdatasync, as a log appends (each sync also commits the file's new size)", res[1], res[0], "4 KB write in place + fdatasync", 0, "writes/s")
	t.rateUnit("7", "for comparison: two 4 KB writes in place, each + fdatasync, as a bbolt commit syncs its pages then its meta page", res[2], res[0], "4 KB write in place + fdatasync", 0, "writes/s")
	t.rateUnit("7", "for comparison: two 4 KB writes in place, each + fdatasync, then 80 B written in place in another file + fdatasync, as a bbolt commit and then a feed's pointer (SyncEveryCommit) sync", res[3], res[0], "4 KB write in place + fdatasync", 0, "writes/s")
	t.rateUnit("7", "for comparison: 4 KB appended + fdatasync, then 80 B written in place in another file + fdatasync, as a Pebble commit and then a feed's pointer (SyncEveryCommit) sync", res[4], res[0], "4 KB write in place + fdatasync", 0, "writes/s")
	// The same kind of write as each backend's commit: for bbolt two
	// syncs in place, for Pebble an append to its log. Under the pointer's
	// SyncEveryCommit each line also syncs the pointer once its save is
	// durable: the same writes with the pointer's (see the note).
	base := map[string]*runs{"bbolt": res[2], "pebble": res[1]}
	baseName := map[string]string{"bbolt": "two 4 KB writes in place, each + fdatasync", "pebble": "4 KB appended + fdatasync"}
	withPtr := map[string]*runs{"bbolt": res[3], "pebble": res[4]}
	withPtrName := map[string]string{"bbolt": "the same two + the pointer's 80 B + fdatasync", "pebble": "the same append + the pointer's 80 B + fdatasync"}
	// The backend alone, a durable transaction a line as the naive
	// program makes them: how much of the gap to the writes above is the
	// backend's own (not a goal: the rows above are).
	alone := map[string]*runs{"bbolt": res[5], "pebble": res[6]}
	aloneName := map[string]string{"bbolt": "bbolt alone, one Update a line (a balance and 3 meta keys, 2 buckets)", "pebble": "Pebble alone, one batch a line committed with pebble.Sync (a balance and 3 meta keys)"}
	for _, be := range []string{"bbolt", "pebble"} {
		t.rateUnit("7", "for comparison: "+aloneName[be]+", as bench/cmd/naiveledger -batch 1 writes its store", alone[be], base[be], baseName[be], 0, "lines/s")
	}
	i := 7
	for _, p := range ps {
		for _, be := range []string{"bbolt", "pebble"} {
			what := fmt.Sprintf("ledger --sync (one durable save per line), %s, %s lines; %s", be, fmtCount(r.syncLines), p.label)
			t.rate("7", what, res[i], base[be], baseName[be], 0.8)
			if p.flag == "every" {
				t.rate("7", what+"; against the same writes with the pointer's sync", res[i], withPtr[be], withPtrName[be], 0.8)
			}
			t.rate("7", what+"; against the backend alone", res[i], alone[be], aloneName[be], 0)
			i++
		}
	}
	for i, be := range []string{"bbolt", "pebble"} {
		what := fmt.Sprintf("ledger run --sync as users run it (de-duplicated, with output.csv; its pointer synced every 100 ms), %s, %s lines, timed from the first line's durable save by the program's events", be, fmtCount(r.syncLines))
		baseName := map[string]string{"bbolt": "an output line appended + fdatasync, then two 4 KB writes in place, each + fdatasync", "pebble": "an output line appended + fdatasync, then 4 KB appended + fdatasync"}[be]
		t.rate("7", what, runRes[2+i], runRes[i], baseName, 0.8)
		t.rate("7", what+"; against the naive program at the same durability", runRes[2+i], runRes[4+i],
			"naive, one transaction a line (-batch 1), its output line synced before it", 0.8)
	}
	t.note("7", "Row 7: one durable save a line is, for bbolt, two fdatasyncs of state.bolt (its pages, then its meta page: 4 pwrites of 4 KB a line, three pages and the meta page, where the baseline writes two) and, for Pebble, one of its WAL; under the pointer's SyncEveryCommit each save that becomes durable also commits the feed's pointer, one more pwrite of 80 B and fdatasync a line, on the pointer's own goroutine while the next save runs (strace -f -c of the bbolt child, 1,000 lines: 2,984 fdatasyncs, 6,379 pwrites; under SyncInterval the pointer is written at each commit and synced every 100 ms). Each pointer commit also reads back the 64 bytes before its position (the tail hash) and stats the input: a pread and a newfstatat a line. The time runs from the first line's durable save to the last's (the store's first commit, which makes its buckets and grows its file, and the framework's start are not counted: at 100 lines under load they were up to a sixth of the run), and the commit lag is not sampled (the sampler's wake-up every 0.5 ms is about one a line here). The line after waits for its save (that is what --sync means), so nothing overlaps but the pointer's sync with the next save. What a line costs besides its syncs is CPU: 0.35 to 0.57 ms a line for bbolt against 0.20 ms an operation for the baseline's loop (perf stat task-clock, 1,000 lines, load 16 to 25), half of it the kernel's (syscalls: the Go runtime's nanosleep, futex and epoll_pwait, 12 to 13 of them a line by strace -c, the scheduler's hand-offs of the group, the store's committer and the feed; the baseline's Go loop makes about 6.5 an operation). `ledger run --sync` (as users run it, de-duplicated) differs: its pointer is synced every 100 ms (SyncInterval, the store is the truth), and it writes and syncs output.csv before each save, one more fdatasync a line than this row's processor (strace: 3,045 fdatasyncs for 1,000 lines with bbolt, 2,035 with Pebble): the rows \"ledger run --sync as users run it\" run the program itself and compare it with a loop of those writes, the output's line appended and synced before the store's writes; they are timed by the program's durable events (--events, one more write to stdout a line), so its start, the store's open and its close are not counted. Pebble's WAL is a recycled file written over, not a growing one, so its appends cost less than the baselines' appends to a growing file. The rows \"against the naive program at the same durability\" run bench/cmd/naiveledger -batch 1 -events, the program a user writes without tidemark for one durable save a line: its output line written and synced, then one bbolt Update (resp. one Pebble batch committed with pebble.Sync) a line, timed by its events the same way. The rows \"bbolt alone\" and \"Pebble alone\" are the backend without tidemark and without an output file, a durable transaction a line as that program writes its store (a balance and its three meta keys; bbolt's in two buckets): bbolt's own commit writes the pages it changed (the buckets' leaves, the root and the freelist) before its first sync, where the baseline of two syncs writes one page, and the row of bbolt alone says how close bbolt itself comes to that baseline; the rows \"against the backend alone\" are the part of a line's cost that is tidemark's (its hand-offs between the group, the store's committer and the feed, and its store's own records).")
	return nil
}

// durableEvent is ledger run --events' line for a durable save: the
// lines applied so far.
var durableEvent = regexp.MustCompile(`^durable .*applied=(\d+)`)

// runLedgerSync is row 7's ledger run --sync, as users run it: the ledger
// program, de-duplicated, with its output.csv, into a new data folder of
// store, over the Sync mode's input. It is timed from the first durable
// event the program prints (--events) to the last, as they come, and counts
// the lines saved between them: the program's start, the store's open and
// its close are not the saves'.
func (r *runner) runLedgerSync(store string) (result, error) {
	dir, err := r.syncDir()
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	return r.timeDurable("ledger run --sync", ledgerDone, 2, r.ledgerBin, "run", "--input", r.syncFile, "--data", filepath.Join(dir, "data"),
		"--pointer-dir", dir, "--store", store, "--sync", "--events", "--progress", "none")
}

// runNaiveSync is row 7's naive program at the durability of ledger run
// --sync: one transaction a line (-batch 1), its output line written and
// synced before it, into a new data folder of store, over the Sync mode's
// input, timed as runLedgerSync times ledger run (-events).
func (r *runner) runNaiveSync(store string) (result, error) {
	dir, err := r.syncDir()
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	return r.timeDurable("naiveledger -batch 1", naiveDone, 1, r.naiveBin, "-input", r.syncFile, "-data", filepath.Join(dir, "data"),
		"-store", store, "-batch", "1", "-events")
}

// syncDir builds the programs if need be and returns a new folder for one
// run of row 7's programs.
func (r *runner) syncDir() (string, error) {
	if r.ledgerBin == "" {
		if err := r.buildPrograms(); err != nil {
			return "", err
		}
	}
	return os.MkdirTemp(r.work, "ledger-sync-")
}

// timeDurable runs bin with args, which prints a durable event (see
// durableEvent) to stdout after each save, and times it from the first
// event to the last, as they come, counting the lines saved between them.
// Its summary on stderr (done; group applied of it the lines applied) must
// say it applied the Sync mode's input.
func (r *runner) timeDurable(what string, done *regexp.Regexp, applied int, bin string, args ...string) (result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return result{}, err
	}
	load := load1()
	if err := cmd.Start(); err != nil {
		return result{}, err
	}
	var first, last time.Time
	var firstN, lastN int64
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		now := time.Now()
		m := durableEvent.FindSubmatch(sc.Bytes())
		if m == nil {
			continue
		}
		n, _ := strconv.ParseInt(string(m[1]), 10, 64)
		if n > 0 && first.IsZero() {
			first, firstN = now, n
		}
		if n > lastN {
			last, lastN = now, n
		}
	}
	if err := cmd.Wait(); err != nil {
		return result{}, fmt.Errorf("%s: %w: %s", what, err, lastLines(stderr.String()))
	}
	m := done.FindStringSubmatch(stderr.String())
	if m == nil {
		return result{}, fmt.Errorf("%s: no summary in its output: %s", what, lastLines(stderr.String()))
	}
	// The program's events may skip a save's (they report the lines
	// durable when they are printed): the time runs to the last one seen.
	if n, _ := strconv.ParseInt(m[applied], 10, 64); n != r.syncLines || lastN > r.syncLines || firstN == lastN {
		return result{}, fmt.Errorf("%s applied %d lines (durable events from %d to %d), want %d: %s", what, n, firstN, lastN, r.syncLines, lastLines(stderr.String()))
	}
	ps := cmd.ProcessState
	return result{Lines: lastN - firstN, Seconds: last.Sub(first).Seconds(), Extra: map[string]float64{
		"cpu_seconds": (ps.UserTime() + ps.SystemTime()).Seconds(), "load1": load,
	}}, nil
}

func (r *runner) row8(t *table) error {
	if !r.wants("8") {
		return nil
	}
	ops := strconv.Itoa(r.ops)
	res := r.measure(spec{label: "8 pointer.File.Store and its baseline, interleaved", name: "pointer-ab", args: []string{"-ops", ops}})
	x := res[0]
	base := &runs{spec: x.spec, err: x.err}
	for _, v := range x.res {
		base.res = append(base.res, result{Lines: v.Lines, Seconds: v.Extra["base_seconds"]})
	}
	t.rateUnit("8", "pointer commits (pointer.File.Store, SyncEveryCommit; in ten rounds alternating with the baseline, in one process)", x, base, "80 B write in place + fdatasync", 0.9, "commits/s")
	return nil
}

func (r *runner) row9and10(t *table) error {
	duty := float64(framework.DefaultBatchSize)
	if r.wants("9") {
		lag := func(what string, x *runs) {
			p99 := x.extra("lag_p99")
			t.add(row{id: "9", what: what,
				result:   fmt.Sprintf("p50 %.0f, p99 %.0f, max %.0f lines", x.extra("lag_p50"), p99, x.extra("lag_max")),
				baseline: fmt.Sprintf("one duty cycle: %.0f lines", duty), ratio: fmtRatio(p99 / duty), goal: "p99 ≤ 1.00", met: verdict(p99 <= duty)})
			t.note("9", fmt.Sprintf("Row 9, %s: over %.0f samples, lines handed to the queue and not committed yet (FeedStatus.PendingAcks, the queue's contents included): p50 %.0f, p99 %.0f, max %.0f.",
				what, x.extra("lag_samples"), x.extra("handed_p50"), x.extra("handed_p99"), x.extra("handed_max")))
		}
		const sampled = " (FeedStatus.ProcessedPending, lines finished and not committed, sampled every 0.5 ms)"
		for _, p := range psyncs {
			if x := sh.nop1[p.flag]; x.ok() {
				lag("commit lag of row 2"+sampled+"; "+p.label, x)
			}
		}
		if x := sh.store5; x.ok() {
			lag("commit lag of the bench's ledger processor in a bbolt store, batch 1000 (finished = declared durable by the store)"+sampled, x)
		}
	}
	if r.wants("10") {
		mem := func(what string, x *runs, allocGoal bool) {
			if !x.ok() {
				t.add(row{id: "10", what: what, result: notMeasured(x)})
				return
			}
			rss := x.maxRSS() / 1024
			t.add(row{id: "10", what: what + ": peak RSS", result: rssText(x), baseline: "64 MiB", ratio: fmtRatio(rss / 64), goal: "< 1.00", met: verdict(rss < 64)})
			a := x.allocsPerLine()
			g, m := "–", "–"
			if allocGoal {
				g, m = "≤ 1 alloc/line", verdict(a <= 1)
			}
			t.add(row{id: "10", what: what + ": allocations per line", result: fmt.Sprintf("%.2f allocs/line", a), goal: g, met: m})
		}
		mem("row 2 (one group, no-op, default pointer sync)", sh.nop1["every"], true)
	}
	return nil
}

func (r *runner) row11(t *table) error {
	if !r.wants("11") {
		return nil
	}
	res := r.measure(spec{label: "11 idle tailing feed", name: "idle", args: r.fileArgs(r.syncFile, r.syncLines, "-seconds", strconv.FormatFloat(r.idleSec, 'f', -1, 64))})
	x := res[0]
	if !x.ok() {
		t.add(row{id: "11", what: "idle tailing feed", result: notMeasured(x)})
		return nil
	}
	pct := x.extra("cpu_pct")
	t.add(row{id: "11", what: fmt.Sprintf("an idle tailing feed (default Backoff idle strategy), CPU over %.0f s", r.idleSec),
		result: fmt.Sprintf("%.3f %% of one core", pct), baseline: "1 % of one core", ratio: fmtRatio(pct / 1), goal: "< 1.00", met: verdict(pct < 1)})
	return nil
}

func (r *runner) row12(t *table) error {
	if !r.wants("12") {
		return nil
	}
	r.bigFile = filepath.Join(r.work, "big.csv")
	logf("writing the %.0f MB restart file ...", float64(r.bigBytes)/1e6)
	if err := repeatFile(r.bigFile, r.file, r.bigBytes); err != nil {
		return err
	}
	setup, err := r.runOne(spec{label: "12 setup", name: "restart-setup", args: r.fileArgs(r.bigFile, 100_000)})
	if err != nil {
		t.add(row{id: "12", what: "restart on a big file", result: "not measured: setup: " + err.Error()})
		return nil
	}
	pos, size := setup.Extra["position"], setup.Extra["size"]
	logf("12 setup: read %s lines in %.1f s; pointer at %.0f of %.0f bytes", fmtCount(setup.Lines), setup.Seconds, pos, size)
	res := r.measure(spec{label: "12 restart", name: "restart", args: r.fileArgs(r.bigFile, 0)})
	x := res[0]
	if !x.ok() {
		t.add(row{id: "12", what: "restart on a big file", result: notMeasured(x)})
		return nil
	}
	sh.restart = x
	rss := x.maxRSS() / 1024
	t.add(row{id: "10", what: fmt.Sprintf("row 12 (restart on the %.0f MB file): peak RSS", size/1e6), result: rssText(x),
		baseline: "64 MiB", ratio: fmtRatio(rss / 64), goal: "< 1.00", met: verdict(rss < 64)})
	ms := x.extra("first_ms")
	first := x.extra("first_position")
	what := fmt.Sprintf("restart on a %.0f MB file, pointer %.1f MB before the end: Start to first delivery", size/1e6, (size-pos)/1e6)
	if first < pos {
		what += fmt.Sprintf(" (WARNING: first line delivered at %.0f, before the pointer at %.0f)", first, pos)
	}
	t.add(row{id: "12", what: what, result: fmt.Sprintf("%.1f ms", ms), baseline: "100 ms", ratio: fmtRatio(ms / 100), goal: "≤ 1.00", met: verdict(ms <= 100)})
	return nil
}

func (r *runner) row13(t *table) error {
	if !r.wants("13") {
		return nil
	}
	if r.peerBin == "" {
		t.add(row{id: "13", what: "OpenTelemetry Collector fileconsumer", result: "not measured: " + r.peerErr.Error()})
		return nil
	}
	res := r.measure(spec{label: "13 peer: otel fileconsumer", ext: r.peerBin, args: []string{"-file", r.fastFile, "-lines", strconv.FormatInt(r.fastLines, 10)}})
	peer := res[0]
	sh.peer = peer
	if peer.ok() {
		t.note("13", fmt.Sprintf("Row 13: the peer's peak RSS was %.1f MiB (row 2's is in row 10).", peer.maxRSS()/1024))
	}
	t.rate("13", "peer: OpenTelemetry Collector pkg/stanza fileconsumer v0.165.1, start_at beginning, poll_interval 10 ms, offsets in memory, counting tokens (no delivery guarantee)", peer, sh.bufio, "bufio.ReadSlice loop", 0)
	for _, p := range psyncs {
		t.rate("13", "row 2 against the peer; "+p.label, sh.nop1[p.flag], peer, "the peer", 3)
	}
	return nil
}

// globLines is the number of lines of each file of row 14's set.
const globLines = 1000

// row15 is a file set: the ledger cut into files of globLines lines (1,000
// files of the 1,000,000-line ledger), followed by one source over their
// glob, against the source over the one file, measured in the same run.
func (r *runner) row15(t *table) error {
	if !r.wants("15") {
		return nil
	}
	dir := filepath.Join(r.work, "glob")
	files, err := splitFile(r.file, dir, globLines)
	if err != nil {
		return fmt.Errorf("row 15: %w", err)
	}
	batch := strconv.Itoa(framework.DefaultBatchSize)
	res := r.measure(
		spec{label: "15 one file, every", name: "source", args: r.fileArgs(r.file, r.lines, "-psync", "every", "-batch", batch), fast: true},
		spec{label: "15 glob, every", name: "glob", args: r.fileArgs(dir, r.lines, "-psync", "every", "-batch", batch), fast: true},
	)
	t.rate("15", fmt.Sprintf("a file set: %s files of %s lines (Config.Paths, one glob), Committed, commit every duty cycle; pointer SyncEveryCommit, group commit (the default)", fmtCount(int64(files)), fmtCount(globLines)),
		res[1], res[0], "the source over one file of "+fmtCount(r.lines)+" lines (row 1's case)", 0)
	return nil
}

// splitFile cuts src into files of n lines each in dir (made again), and
// returns how many.
func splitFile(src, dir string, n int) (int, error) {
	if err := os.RemoveAll(dir); err != nil {
		return 0, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return 0, err
	}
	files := 0
	for len(data) > 0 {
		end := 0
		for i := 0; i < n && end < len(data); i++ {
			j := bytes.IndexByte(data[end:], '\n')
			if j < 0 {
				end = len(data)
				break
			}
			end += j + 1
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("part-%05d.csv", files)), data[:end], 0o644); err != nil {
			return 0, err
		}
		data = data[end:]
		files++
	}
	return files, nil
}

// rssText is a peak RSS, with the anonymous and file-backed parts of the
// resident set at the end of the run.
func rssText(x *runs) string {
	return fmt.Sprintf("%.1f MiB (at the end: %.1f MiB anonymous, %.1f MiB file-backed, mostly the program's code)",
		x.maxRSS()/1024, x.extra("rss_anon_kib")/1024, x.extra("rss_file_kib")/1024)
}

// repeatFile writes src over and over to dst until dst has at least n bytes.
func repeatFile(dst, src string, n int64) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if len(data) == 0 {
		return errors.New("empty ledger")
	}
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	var w int64
	for w < n {
		k, err := f.Write(data)
		if err != nil {
			return errors.Join(err, f.Close())
		}
		w += int64(k)
	}
	return f.Close()
}

// scaleSection heads the part of RESULTS.md that this program does not
// measure: the partitioned ledger's figures (bench/scale, which needs a
// NATS server and a PostgreSQL cluster), written by hand from its output.
const scaleSection = "\n## The partitioned ledger (bench/scale)\n"

// keptSection returns the scale section of the report at path, to be kept
// when the report is written again: from its heading to the end of the
// file ("" when there is none).
func keptSection(path string) string {
	old, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	i := strings.Index(string(old), scaleSection)
	if i < 0 {
		return ""
	}
	return string(old[i:])
}

// reportPaths returns where the report and the chart are written: out and
// chart as given, else the report in outDir and the chart beside the
// report (a report written elsewhere, of some rows only, does not draw
// over the repository's chart).
func reportPaths(out, chart, outDir string) (string, string) {
	if out == "" {
		out = filepath.Join(outDir, "RESULTS.md")
	}
	if chart == "" {
		chart = filepath.Join(filepath.Dir(out), "throughput.svg")
	}
	return out, chart
}
