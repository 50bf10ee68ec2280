package main

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// env is the machine and the moment a table was measured on.
type env struct {
	start, end         time.Time
	nproc              int
	cpu                string
	goVersion          string
	kernel             string
	command            string
	loadStart, loadEnd string
	input              string
}

func readEnv(command string) env {
	e := env{start: time.Now(), nproc: runtime.NumCPU(), goVersion: runtime.Version(), command: command, loadStart: loadAvg()}
	e.cpu = "unknown"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				e.cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		e.kernel = "Linux " + strings.TrimSpace(string(b))
	}
	return e
}

// loadAvg returns the 1, 5 and 15 minute load averages.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// row is one line of the table. load is the one-minute load average at
// the start of its runs (medians), of the result and of the baseline.
type row struct {
	id, what, result, baseline, ratio, goal, met, load string
}

// ledgerPoint is one point of the ledger chart: the rates of ledger run
// and of the naive program's variants at a store and number of accounts.
type ledgerPoint struct {
	store            string
	accounts         int
	tidemark, map_   float64
	bounded          float64
	haveMap, haveBnd bool
	haveTidemark     bool
	// cached is ledger run with a cache budget for every balance, when
	// that is more than the default (set against the map).
	cached     float64
	haveCached bool
}

// table collects the rows, notes and chart points of a run.
type table struct {
	env   env
	reps  int
	rows  []row
	notes []string
	chart []ledgerPoint
}

func (t *table) add(r row) {
	if r.baseline == "" {
		r.baseline = "–"
	}
	if r.ratio == "" {
		r.ratio = "–"
	}
	if r.goal == "" {
		r.goal = "–"
	}
	if r.met == "" {
		r.met = "–"
	}
	if r.load == "" {
		r.load = "–"
	}
	t.rows = append(t.rows, r)
	fmt.Fprintf(os.Stderr, "           row %-3s %s: %s (baseline %s, ratio %s, goal %s: %s; load %s)\n", r.id, r.what, r.result, r.baseline, r.ratio, r.goal, r.met, r.load)
}

func (t *table) note(id, s string) { t.notes = append(t.notes, s) }

// sort orders the rows by their number, keeping the order of each row's
// lines.
func (t *table) sort() {
	num := func(id string) int {
		n, err := strconv.Atoi(id)
		if err != nil {
			return 1 << 30
		}
		return n
	}
	slices.SortStableFunc(t.rows, func(a, b row) int { return num(a.id) - num(b.id) })
}

// rate adds a row whose result and baseline are rates in lines/s; goal is
// the least ratio, 0 for none.
func (t *table) rate(id, what string, x, base *runs, baseName string, goal float64) {
	t.rateUnit(id, what, x, base, baseName, goal, "lines/s")
}

func (t *table) rateUnit(id, what string, x, base *runs, baseName string, goal float64, unit string) {
	r := row{id: id, what: what}
	if !x.ok() {
		r.result = notMeasured(x)
		t.add(r)
		return
	}
	r.result = fmtRateUnit(x.rate(), unit)
	r.load = x.loadText()
	if base.ok() {
		if l := base.loadText(); l != "–" {
			r.load += " / " + l
		}
		ratio := x.rate() / base.rate()
		r.baseline = baseName + ": " + fmtRateUnit(base.rate(), unit)
		r.ratio = fmtRatio(ratio)
		if goal > 0 {
			r.goal = fmt.Sprintf("≥ %.2f", goal)
			r.met = verdict(ratio >= goal)
		}
	} else {
		r.baseline = baseName + ": " + notMeasured(base)
	}
	t.add(r)
}

func (t *table) ledgerPoint(store string, accounts int, tm, tc, mp, bd *runs) {
	p := ledgerPoint{store: store, accounts: accounts}
	if tm.ok() {
		p.tidemark, p.haveTidemark = tm.rate(), true
	}
	if tc.ok() {
		p.cached, p.haveCached = tc.rate(), true
	}
	if mp.ok() {
		p.map_, p.haveMap = mp.rate(), true
	}
	if bd.ok() {
		p.bounded, p.haveBnd = bd.rate(), true
	}
	t.chart = append(t.chart, p)
}

func notMeasured(x *runs) string {
	if x == nil {
		return "not measured: its row did not run"
	}
	if x.err != nil {
		return "not measured: " + x.err.Error()
	}
	return "not measured: no result"
}

func verdict(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}

func fmtRatio(v float64) string { return fmt.Sprintf("%.2f", v) }

func fmtRate(v float64) string { return fmtRateUnit(v, "lines/s") }

func fmtRateUnit(v float64, unit string) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2f M %s", v/1e6, unit)
	case v >= 1e4:
		return fmt.Sprintf("%.0f k %s", v/1e3, unit)
	case v >= 1e3:
		return fmt.Sprintf("%.2f k %s", v/1e3, unit)
	default:
		return fmt.Sprintf("%.0f %s", v, unit)
	}
}

func fmtCount(n int64) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// text is the table for the terminal.
func (t *table) text() string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tmeasurement\tresult (median)\tbaseline (median)\tratio\tgoal\tmet\tload")
	for _, r := range t.rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.id, r.what, r.result, r.baseline, r.ratio, r.goal, strings.Trim(r.met, "*"), r.load)
	}
	tw.Flush()
	for _, n := range t.notes {
		fmt.Fprintln(&b, "- "+n)
	}
	fmt.Fprintf(&b, "\n%s; load average %s at start, %s at end; %d run(s) a row\n", t.env.machine(), t.env.loadStart, t.env.loadEnd, t.reps)
	return b.String()
}

func (e env) machine() string {
	return fmt.Sprintf("%d CPUs (%s), %s, %s", e.nproc, e.cpu, e.goVersion, e.kernel)
}

// markdown is bench/RESULTS.md.
func (t *table) markdown(chart string) string {
	var b strings.Builder
	e := t.env
	fmt.Fprintf(&b, "# tidemark benchmark results\n\n")
	fmt.Fprintf(&b, "Written by `%s` (bench/cmd/benchtable). Do not edit by hand: run `make bench` again.\n\n", e.command)
	fmt.Fprintf(&b, "| | |\n|---|---|\n")
	fmt.Fprintf(&b, "| machine | %d CPUs (`nproc`), %s |\n", e.nproc, e.cpu)
	fmt.Fprintf(&b, "| system | %s |\n", e.kernel)
	fmt.Fprintf(&b, "| Go | %s |\n", e.goVersion)
	fmt.Fprintf(&b, "| date | %s to %s |\n", e.start.UTC().Format("2006-01-02 15:04:05"), e.end.UTC().Format("15:04:05 MST"))
	fmt.Fprintf(&b, "| command | `%s` |\n", e.command)
	fmt.Fprintf(&b, "| load average (1, 5, 15 min) | %s at start, %s at end |\n", e.loadStart, e.loadEnd)
	fmt.Fprintf(&b, "| input | %s |\n", e.input)
	runs := fmt.Sprintf("%d per row", t.reps)
	if t.reps > 1 {
		runs = fmt.Sprintf("%d per row (%d for rows 1 to 3 and their baseline, a tenth of a second each)", t.reps, max(t.reps, fastReps))
	}
	fmt.Fprintf(&b, "| runs | %s, each in its own child process; results are medians, ratios are result / baseline of the same run |\n\n", runs)
	fmt.Fprintf(&b, "The load column is the one-minute load average when the runs started (median of the runs; result / baseline).\n\n")
	fmt.Fprintf(&b, "| # | measurement | result (median) | baseline (median) | ratio | goal | met | load |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range t.rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", r.id, esc(r.what), esc(r.result), esc(r.baseline), r.ratio, r.goal, r.met, r.load)
	}
	if len(t.notes) > 0 {
		fmt.Fprintf(&b, "\n## Notes\n\n")
		for _, n := range t.notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	fmt.Fprintf(&b, "\n## The ledger against the naive program, by number of accounts\n\n![ledger run and the naive program by number of accounts](%s)\n", chart)
	return b.String()
}

func esc(s string) string { return strings.ReplaceAll(s, "|", "\\|") }
