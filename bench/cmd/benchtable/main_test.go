package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-go/tidemark/bench"
)

// TestCases runs every measurement once on a small ledger and checks what
// it counted, never how fast: speed is for the table.
func TestCases(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "ledger.csv")
	const lines = 3000
	if err := bench.GenLedgerFile(file, lines, 1); err != nil {
		t.Fatal(err)
	}
	small := filepath.Join(dir, "small.csv")
	if err := bench.GenLedgerFile(small, 20, 1); err != nil {
		t.Fatal(err)
	}
	base := childArgs{file: file, lines: lines, batch: 256, backend: "bbolt", work: dir, psync: "never", groups: 1, seconds: 0.05, ops: 3}
	for _, tc := range []struct {
		name  string
		edit  func(*childArgs)
		lines int64
	}{
		{name: "bufio"},
		{name: "source", lines: lines},
		{name: "source", edit: func(a *childArgs) { a.psync = "every" }, lines: lines},
		{name: "source", edit: func(a *childArgs) { a.psync = "every-sync" }, lines: lines},
		{name: "nop", lines: lines},
		{name: "nop", edit: func(a *childArgs) { a.psync = "every" }, lines: lines},
		{name: "nop", edit: func(a *childArgs) { a.groups = 4 }, lines: lines},
		{name: "nop", edit: func(a *childArgs) { a.qcap = 256; a.psync = "interval" }, lines: lines},
		{name: "ledger-mem", lines: lines},
		{name: "ledger-store", edit: func(a *childArgs) { a.batch = 500 }, lines: lines},
		{name: "ledger-store", edit: func(a *childArgs) { a.backend = "pebble"; a.batch = 500 }, lines: lines},
		// Sync mode counts the lines after the first, from its save on.
		{name: "ledger-store", edit: func(a *childArgs) { a.sync = true; a.file, a.lines = small, 20 }, lines: 19},
		{name: "fsync4k", lines: 3},
		{name: "fsync4k-append", lines: 3},
		{name: "fsync4k-twice", lines: 3},
		{name: "fsync4k-twice-output", lines: 3},
		{name: "fsync4k-append-output", lines: 3},
		{name: "backend-sync", lines: 3},
		{name: "backend-sync", edit: func(a *childArgs) { a.backend = "pebble" }, lines: 3},
		{name: "pointer-ab", lines: 10}, // ten rounds of at least one
		{name: "idle"},
		{name: "restart-setup", edit: func(a *childArgs) { a.lines = 1000 }},
		{name: "restart", lines: 1},
	} {
		a := base
		if tc.edit != nil {
			tc.edit(&a)
		}
		r, err := measureCase(tc.name, a)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if tc.lines > 0 && r.Lines != tc.lines {
			t.Errorf("%s: counted %d, want %d", tc.name, r.Lines, tc.lines)
		}
		if v, ok := r.Extra["pointer_at_end"]; ok && v != 1 {
			t.Errorf("%s: after a clean stop the pointer is at %v, not at the end", tc.name, r.Extra["committed_position"])
		}
		if tc.name == "pointer-ab" && (r.Seconds <= 0 || r.Extra["base_seconds"] <= 0) {
			t.Errorf("pointer-ab: %v s against a baseline of %v s", r.Seconds, r.Extra["base_seconds"])
		}
		if a.sync && !(r.Seconds > 0 && r.Seconds < r.Extra["all_seconds"]) {
			t.Errorf("ledger-store in Sync mode: %v s from the first save, %v s in all", r.Seconds, r.Extra["all_seconds"])
		}
		if tc.name == "restart" && r.Extra["first_position"] < 1 {
			t.Errorf("restart: first delivery at %v", r.Extra["first_position"])
		}
	}
}

func TestMedianAndFormats(t *testing.T) {
	if m := median([]float64{3, 1, 2}); m != 2 {
		t.Errorf("median of 3 values: %v", m)
	}
	if m := median([]float64{4, 1, 2, 3}); m != 2.5 {
		t.Errorf("median of 4 values: %v", m)
	}
	for v, want := range map[float64]string{2.5e6: "2.50 M lines/s", 45_000: "45 k lines/s", 1500: "1.50 k lines/s", 12: "12 lines/s"} {
		if got := fmtRate(v); got != want {
			t.Errorf("fmtRate(%v) = %q, want %q", v, got, want)
		}
	}
	if got := fmtCount(1234567); got != "1,234,567" {
		t.Errorf("fmtCount = %q", got)
	}
	x := &runs{err: nil}
	if !strings.HasPrefix(notMeasured(x), "not measured") {
		t.Errorf("notMeasured = %q", notMeasured(x))
	}
}

// runProc times a program, samples its memory, and returns its output;
// runLedger checks the count of lines its summary gives.
func TestRunProcAndLedgerSummary(t *testing.T) {
	r := &runner{timeout: time.Minute}
	res, out, err := r.runProc("/bin/sh", []string{"-c", "sleep 0.05; echo 'naiveledger: 42 lines in 1s' >&2"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Seconds < 0.05 || res.PeakRSSKiB <= 0 || res.Extra["anon_peak_kib"] <= 0 || !strings.Contains(out, "42 lines") {
		t.Fatalf("result %+v, output %q", res, out)
	}
	if _, _, err := r.runProc("/bin/sh", []string{"-c", "echo boom >&2; exit 3"}); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("a failing program: %v", err)
	}
	// The naive program's summary, checked against the lines wanted.
	dir := t.TempDir()
	script := filepath.Join(dir, "naive")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho 'naiveledger: 7 lines in 1ms' >&2\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r.naiveBin = script
	l := &ledgerLine{input: filepath.Join(dir, "in.csv"), data: filepath.Join(dir, "d")}
	if res, err := r.runLedger(variantMap, "bbolt", l, 7, 0, 0); err != nil || res.Lines != 7 {
		t.Fatalf("7 lines: %+v, %v", res, err)
	}
	if _, err := r.runLedger(variantMap, "bbolt", l, 8, 0, 0); err == nil {
		t.Fatal("7 lines read taken for the 8 wanted")
	}
	// The naive program at ledger run's save size: its -batch given, its
	// saves counted by it.
	batched := filepath.Join(dir, "batched")
	if err := os.WriteFile(batched, []byte("#!/bin/sh\ncase \"$*\" in *'-mode bounded -batch 3') echo 'naiveledger: 7 lines in 1ms' >&2;; esac\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r.naiveBin = batched
	if res, err := r.runLedger(variantBoundedSaves, "bbolt", l, 7, 0, 3); err != nil || res.Lines != 7 || res.Extra["saves"] != 3 {
		t.Fatalf("-batch 3, 7 lines: %+v, %v; want 3 saves", res, err)
	}
	r.ledgerBin = script
	if _, err := r.runLedger(variantTidemark, "bbolt", l, 7, 0, 0); err == nil {
		t.Fatal("ledger run without its summary taken for a run")
	}
}

// TestLedgerSyncTimedFromTheFirstSave: row 7's ledger run --sync counts
// the lines after the first durable save, in the time from it to the last.
func TestLedgerSyncTimedFromTheFirstSave(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "ledger")
	body := "#!/bin/sh\necho 'durable epoch=0 position=0 applied=0'\nsleep 0.2\necho 'durable epoch=1 position=9 applied=1'\nsleep 0.05\n" +
		"echo 'durable epoch=1 position=30 applied=3'\nsleep 0.2\necho 'ledger: settled: 3 lines read, 3 applied' >&2\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	r := &runner{timeout: time.Minute, work: dir, ledgerBin: script, syncLines: 3, syncFile: filepath.Join(dir, "in.csv")}
	res, err := r.runLedgerSync("bbolt")
	if err != nil {
		t.Fatal(err)
	}
	if res.Lines != 2 || res.Seconds < 0.05 || res.Seconds > 0.2 {
		t.Fatalf("%d lines in %.3f s, want 2 in 0.05 to 0.2 s", res.Lines, res.Seconds)
	}
	r.syncLines = 4
	if _, err := r.runLedgerSync("bbolt"); err == nil {
		t.Fatal("3 lines applied taken for the 4 wanted")
	}
	// The events may skip the last save's: the time runs to the last seen.
	body = strings.Replace(body, "applied=3", "applied=2", 1)
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	r.syncLines = 3
	if res, err := r.runLedgerSync("bbolt"); err != nil || res.Lines != 1 {
		t.Fatalf("events to 2 of 3 lines: %+v, %v", res, err)
	}
}

// TestKeptSection: the scale section written by hand at the end of a
// report is carried into the next one; a report without one adds nothing.
func TestKeptSection(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "RESULTS.md")
	if got := keptSection(path); got != "" {
		t.Fatalf("no report: kept %q", got)
	}
	section := scaleSection + "\n| row | figure |\n|---|---|\n| failover | 1.2 s |\n"
	if err := os.WriteFile(path, []byte("# tidemark benchmark results\n\n| a | b |\n"+section), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := keptSection(path); got != section {
		t.Fatalf("kept %q, want %q", got, section)
	}
	if err := os.WriteFile(path, []byte("# tidemark benchmark results\n\n## Notes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := keptSection(path); got != "" {
		t.Fatalf("a report without the section: kept %q", got)
	}
}

// TestVariantsTakeTurnsFirst: each rep runs every program once, and over
// as many reps as programs each one runs first once (a run right after
// another pays for what that one left: ledger run, first in every rep,
// paid it in every rep).
func TestVariantsTakeTurnsFirst(t *testing.T) {
	vs := []ledgerVariant{variantTidemark, variantMap, variantBounded, variantTidemarkGrow}
	first := map[string]int{}
	for rep := range len(vs) {
		got := inTurn(vs, rep)
		seen := map[string]bool{}
		for _, v := range got {
			seen[v.key] = true
		}
		if len(got) != len(vs) || len(seen) != len(vs) {
			t.Fatalf("rep %d runs %v, want each of %v once", rep, got, vs)
		}
		first[got[0].key]++
	}
	for _, v := range vs {
		if first[v.key] != 1 {
			t.Errorf("%s ran first in %d of %d reps, want 1", v.key, first[v.key], len(vs))
		}
	}
}

// TestSaveSizeOfLedgerRun: the naive program runs at ledger run's save
// size where ledger run's saves were smaller than the naive program's
// transactions by more than a tenth, and only there.
func TestSaveSizeOfLedgerRun(t *testing.T) {
	saves := func(n float64) result { return result{Lines: 100_000, Extra: map[string]float64{"saves": n}} }
	for _, c := range []struct {
		res  result
		want int64
	}{
		{saves(34), 2942}, // 100,000 lines in 34 saves: 2,941.2 a save
		{saves(10), 0},    // the naive program's own size
		{saves(11), 0},    // 9,091: within a tenth of it (a run's last, partial save)
		{saves(12), 8334},
		{saves(8), 0}, // larger saves
		{saves(100_000), 1},
		{saves(0), 0}, // no count
		{result{Lines: 100_000, Extra: map[string]float64{}}, 0},
		{result{Lines: 0, Extra: map[string]float64{"saves": 3}}, 0},
	} {
		if got := saveSize(c.res); got != c.want {
			t.Errorf("%d lines in %v saves: %d, want %d", c.res.Lines, c.res.Extra["saves"], got, c.want)
		}
	}
}

// TestRepsByVariant: from 1,000,000 accounts on, the programs that load
// every balance run once, those whose ratio the row is for (the default
// budget, the bounded program) as many times as asked; below, every one.
func TestRepsByVariant(t *testing.T) {
	big, small := ledgerScale{accounts: 10_000_000, preload: true}, ledgerScale{accounts: 10_000}
	for _, c := range []struct {
		sc   ledgerScale
		v    ledgerVariant
		want int
	}{
		{big, variantMap, 1}, {big, variantTidemarkCache, 1},
		{big, variantTidemark, 3}, {big, variantBounded, 3}, {big, variantBoundedSaves, 3},
		{small, variantMap, 3}, {small, variantTidemarkCache, 3}, {small, variantTidemarkGrow, 3},
	} {
		if got := c.sc.reps(c.v, 3); got != c.want {
			t.Errorf("%d accounts, %s: %d runs, want %d", c.sc.accounts, c.v.key, got, c.want)
		}
	}
	if got := big.reps(variantTidemark, 1); got != 1 {
		t.Errorf("one run asked: %d", got)
	}
}

// TestFixedGoalHasNoLoad: a goal of a fixed rate (fixedRate) ran nothing,
// so its row gives no load average for it, not 0.0.
func TestFixedGoalHasNoLoad(t *testing.T) {
	if got := fixedRate(1e6).loadText(); got != "–" {
		t.Errorf("the load of a fixed goal: %q, want –", got)
	}
	run := &runs{res: []result{{Lines: 10, Seconds: 1, Extra: map[string]float64{"load1": 1.25}}}}
	if got := run.loadText(); got != "1.2" && got != "1.3" {
		t.Errorf("the load of a run at 1.25: %q", got)
	}
}
