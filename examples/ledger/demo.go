package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/tidemark-go/tidemark/feed/pointer"
)

// Scenario is one run of the demonstration.
type Scenario struct {
	// Title is printed as the heading: === Title ===.
	Title string
	// Folder is the scenario's folder under the demo's folder.
	Folder string
	// Args are the run flags that make the scenario.
	Args []string
	// Dedupe tells whether the scenario de-duplicates: its state must then
	// be exact.
	Dedupe bool
}

// Scenarios are the demonstration's four scenarios.
var Scenarios = []Scenario{
	{"bbolt, batched saves, without de-duplication", "bbolt-no-dedupe", []string{"--store", "bbolt", "--dedupe=false"}, false},
	{"bbolt, batched saves, with de-duplication", "bbolt", []string{"--store", "bbolt"}, true},
	{"Pebble, batched saves, with de-duplication", "pebble", []string{"--store", "pebble"}, true},
	{"bbolt, --sync (one durable save per line), with de-duplication", "bbolt-sync", []string{"--store", "bbolt", "--sync"}, true},
}

// DemoOptions configures the demonstration.
type DemoOptions struct {
	// Exe is the ledger program run as the server's child process.
	Exe string
	// Dir is the demo's folder; each scenario gets a folder in it.
	Dir string
	// Lines is the size of the generated ledger.
	Lines int
	// KillAfter is how many applied lines the child must have saved before
	// it kills itself (run --die-after-save).
	KillAfter int64
	// Pace slows the first (killed) run down so that the kill lands part way.
	Pace time.Duration
	// Timeout bounds each child run.
	Timeout time.Duration
	// Scenarios to run; nil means all of Scenarios.
	Scenarios []Scenario
}

func (o *DemoOptions) defaults() {
	if o.Lines == 0 {
		o.Lines = 5000
	}
	if o.KillAfter == 0 {
		o.KillAfter = 1000
	}
	if o.Pace == 0 {
		o.Pace = 200 * time.Microsecond
	}
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Minute
	}
	if o.Scenarios == nil {
		o.Scenarios = Scenarios
	}
}

// ScenarioResult is what one scenario showed.
type ScenarioResult struct {
	Scenario Scenario
	// Killed tells whether the first run was killed part way (it can finish
	// first on a very fast machine).
	Killed bool
	// KillApplied, KillSaved and KillPointer are the kill report: lines
	// applied and the position saved in the store, and the pointer file's
	// position, right after the kill.
	KillApplied           int64
	KillSaved             int64
	KillPointer           int64
	NeverAhead            bool
	AheadSeen             []string // what showed the pointer ahead, if anything
	Redelivered           int      // lines between the pointer and the saved position
	Skipped, RunsToSettle int
	Report                *Report
}

// OK reports whether the scenario kept the guarantee it claims: nothing
// missing, the pointer never ahead, the output in step with the state, and,
// with de-duplication, the state exact and no output line written twice;
// without it, the re-delivered lines applied twice.
func (r *ScenarioResult) OK() bool {
	if r.Report == nil || r.Report.Missing > 0 || !r.NeverAhead || r.Report.Unfollowed > 0 || r.Report.Stale > 0 {
		return false
	}
	if r.Scenario.Dedupe {
		return r.Report.Exact() && r.Report.Twice == 0
	}
	// Without de-duplication the scenario must show what it is for: the
	// lines re-delivered after the kill applied a second time.
	return r.Killed && r.Redelivered > 0 && r.Report.State.Applied > r.Report.Want.Applied
}

// Demo runs the scenarios and prints what each showed to w, in order. The
// scenarios run at the same time, each in its own folder, since the one
// with --sync spends most of its time waiting for the disk. It returns the
// results and an error when a scenario could not be run.
func Demo(w io.Writer, o DemoOptions) ([]*ScenarioResult, error) {
	o.defaults()
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	type outcome struct {
		out bytes.Buffer
		res *ScenarioResult
		err error
	}
	outs := make([]*outcome, len(o.Scenarios))
	done := make([]chan struct{}, len(o.Scenarios))
	for i, sc := range o.Scenarios {
		outs[i], done[i] = &outcome{}, make(chan struct{})
		go func() {
			defer close(done[i])
			outs[i].res, outs[i].err = runScenario(&outs[i].out, o, sc)
		}()
	}
	var results []*ScenarioResult
	var firstErr error
	for i, sc := range o.Scenarios {
		<-done[i]
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "=== %s ===\n", sc.Title)
		w.Write(outs[i].out.Bytes())
		if err := outs[i].err; err != nil {
			fmt.Fprintf(w, "error: %v\n", err)
			if firstErr == nil {
				firstErr = fmt.Errorf("%s: %w", sc.Title, err)
			}
			continue
		}
		results = append(results, outs[i].res)
	}
	return results, firstErr
}

func runScenario(w io.Writer, o DemoOptions, sc Scenario) (*ScenarioResult, error) {
	dir := filepath.Join(o.Dir, sc.Folder)
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	input := filepath.Join(dir, "ledger.csv")
	data := filepath.Join(dir, "data")
	if err := GenFile(input, GenOptions{Lines: o.Lines, Accounts: 20, Seed: 1}); err != nil {
		return nil, err
	}
	res := &ScenarioResult{Scenario: sc, NeverAhead: true}
	args := append([]string{"--input", input, "--data", data}, sc.Args...)

	// Run 1: paced, and killed with SIGKILL right after the durable save
	// that brings the saved lines to KillAfter: the store has made that
	// save durable and the feed's pointer has not moved past it yet, so
	// the restart re-delivers at least its lines, on any machine however
	// loaded (see --die-after-save).
	first := append(append([]string{}, args...), "--pace", o.Pace.String(), "--die-after-save", fmt.Sprint(o.KillAfter))
	c, err := startChild(o.Exe, first, filepath.Join(dir, "run1.log"))
	if err != nil {
		return nil, err
	}
	if err := c.wait(o.Timeout); c.killed() {
		res.Killed = true
	} else if err != nil {
		return nil, fmt.Errorf("run 1 ended before the kill: %w (see %s)", err, filepath.Join(dir, "run1.log"))
	}
	if ahead, err := realAhead(input, c.aheadEvents()); err != nil || ahead {
		res.NeverAhead = false
		res.AheadSeen = append(res.AheadSeen, c.aheadEvents()...)
	}
	info, err := ReadStore(data)
	if err != nil {
		return nil, fmt.Errorf("read the store after the kill: %w", err)
	}
	ptr, err := loadPointer(input)
	if err != nil {
		return nil, err
	}
	if ptr.Epoch == info.Applied.Epoch && ptr.Position > info.Applied.Position {
		if n, err := wellFormedBetween(input, info.Applied.Position, ptr.Position); err != nil || n > 0 {
			res.NeverAhead = false
			res.AheadSeen = append(res.AheadSeen, fmt.Sprintf("after the kill: pointer %d, saved position %d", ptr.Position, info.Applied.Position))
		}
	}
	res.KillApplied, res.KillSaved, res.KillPointer = info.State.Applied, info.Applied.Position, ptr.Position
	if ptr.Epoch == info.Applied.Epoch {
		res.Redelivered, err = linesBetween(input, ptr.Position, info.Applied.Position)
		if err != nil {
			return nil, err
		}
	}
	if res.Killed {
		fmt.Fprintf(w, "killed: %d lines applied, saved position %d, read pointer %d (never ahead of the state: %t)\n",
			res.KillApplied, res.KillSaved, res.KillPointer, res.NeverAhead)
	} else {
		fmt.Fprintf(w, "not killed: the run settled before %d lines were saved\n", o.KillAfter)
	}

	// Restarts, unpaced, until one settles.
	for run := 2; ; run++ {
		if run > 6 {
			return nil, fmt.Errorf("did not settle after %d restarts", run-2)
		}
		c, err := startChild(o.Exe, args, filepath.Join(dir, fmt.Sprintf("run%d.log", run)))
		if err != nil {
			return nil, err
		}
		err = c.wait(o.Timeout)
		if ahead, aerr := realAhead(input, c.aheadEvents()); aerr != nil || ahead {
			res.NeverAhead = false
			res.AheadSeen = append(res.AheadSeen, c.aheadEvents()...)
		}
		res.RunsToSettle++
		if err == nil {
			if d := c.doneEvent(); d != nil {
				res.Skipped += int(d["skipped"])
			}
			break
		}
		fmt.Fprintf(w, "run %d: %v (see %s)\n", run, err, c.logFile.Name())
	}
	if res.Killed {
		if sc.Dedupe {
			fmt.Fprintf(w, "restart: the pointer was %d lines behind the saved state; %d re-delivered lines skipped as already applied\n",
				res.Redelivered, res.Skipped)
		} else {
			fmt.Fprintf(w, "restart: the pointer was %d lines behind the saved state; without de-duplication they were applied again\n",
				res.Redelivered)
		}
	}

	res.Report, err = CheckDir(data, input)
	if err != nil {
		return nil, err
	}
	printReport(w, res.Report)
	if len(res.AheadSeen) > 0 {
		fmt.Fprintf(w, "the pointer was seen ahead of the durable state %d times, first: %s\n", len(res.AheadSeen), res.AheadSeen[0])
	}
	return res, nil
}

// printReport prints check's lines, the state line annotated when lines were
// applied twice.
func printReport(w io.Writer, r *Report) {
	fmt.Fprintf(w, "lines missing: %d, output lines written twice: %d\n", r.Missing, r.Twice)
	note := ""
	if r.State.Applied > r.Want.Applied {
		note = "  <- lines applied twice"
	}
	fmt.Fprintf(w, "state: applied %d (expected %d), total %d (expected %d)%s\n",
		r.State.Applied, r.Want.Applied, r.State.Total, r.Want.Total, note)
	if n := len(r.BalanceDiffs()); n > 0 {
		fmt.Fprintf(w, "balances that differ: %d of %d accounts\n", n, len(r.Want.Balances))
	}
}

// loadPointer reads the input's pointer file; a missing one is position 0.
// Only call it when no server runs on the input.
func loadPointer(input string) (pointer.Record, error) {
	pf := pointer.Open(input+pointer.Suffix, pointer.Options{})
	res, err := pf.Load()
	err = errors.Join(err, pf.Close())
	if err != nil {
		return pointer.Record{}, err
	}
	return res.Record, nil
}

// realAhead reports whether an ahead event shows the pointer past a line
// the state does not hold. A pointer may pass the last applied line when
// the lines between were rejected as malformed: those are finished too.
func realAhead(input string, events []string) (bool, error) {
	for _, line := range events {
		ev, ok := parseEvent(line)
		if !ok {
			return true, nil
		}
		n, err := wellFormedBetween(input, ev.fields["durable"], ev.fields["pointer"])
		if err != nil || n > 0 {
			return true, err
		}
	}
	return false, nil
}

// wellFormedBetween counts the well-formed lines of path that end after
// from and at or before to.
func wellFormedBetween(path string, from, to int64) (int, error) {
	return countLines(path, from, to, true)
}

// linesBetween counts the lines of path that end after from and at or before
// to.
func linesBetween(path string, from, to int64) (int, error) {
	return countLines(path, from, to, false)
}

func countLines(path string, from, to int64, wellFormedOnly bool) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var n int
	var size int64
	err = eachLine(f, func(payload []byte, pos int64) {
		if pos > from && pos <= to {
			if wellFormedOnly {
				if _, err := ParseLine(payload); err != nil || len(payload) > maxLineBytes {
					return
				}
			}
			n++
		}
	}, &size)
	return n, err
}

func cmdDemo(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", filepath.Join("target", "ledger-demo"), "the demo's folder")
	lines := fs.Int("lines", 5000, "lines in the generated ledger")
	killAfter := fs.Int64("kill-after", 1000, "kill the first run once this many lines are saved")
	pace := fs.Duration("pace", 200*time.Microsecond, "delay per line in the first run, so that the kill lands part way")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(stderr, "ledger demo:", err)
		return 1
	}
	start := time.Now()
	fmt.Fprintf(stdout, "The ledger demonstration: %d lines, killed with SIGKILL after at least %d are saved, restarted, checked; four scenarios, files under %s.\n\n",
		*lines, *killAfter, *dir)
	results, err := Demo(stdout, DemoOptions{Exe: exe, Dir: *dir, Lines: *lines, KillAfter: *killAfter, Pace: *pace})
	if err != nil {
		fmt.Fprintln(stderr, "ledger demo:", err)
		return 1
	}
	failed := 0
	for _, r := range results {
		if !r.OK() {
			failed++
			fmt.Fprintf(stdout, "FAILED: %s\n", r.Scenario.Title)
		}
	}
	fmt.Fprintln(stdout)
	if failed > 0 {
		fmt.Fprintf(stdout, "demo: %d of %d scenarios failed; logs under %s\n", failed, len(results), *dir)
		return 1
	}
	fmt.Fprintf(stdout, "demo: %d scenarios, no line missing, de-duplicated states exact (%.1fs); logs under %s\n",
		len(results), time.Since(start).Seconds(), *dir)
	return 0
}
