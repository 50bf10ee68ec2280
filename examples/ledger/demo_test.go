package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestDemo runs the demonstration as make run does, and checks what it
// shows: every scenario killed part way with the pointer never ahead of the
// state, nothing missing, and with de-duplication an exact state with no
// output line written twice.
func TestDemo(t *testing.T) {
	var out bytes.Buffer
	results, err := Demo(&out, DemoOptions{Exe: ledgerExe(t), Dir: t.TempDir()})
	t.Logf("demo output:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != len(Scenarios) {
		t.Fatalf("%d results, want %d", len(results), len(Scenarios))
	}
	for _, r := range results {
		sc := r.Scenario
		if !strings.Contains(out.String(), "=== "+sc.Title+" ===\n") {
			t.Errorf("no heading for %q", sc.Title)
		}
		if !r.OK() {
			t.Errorf("%s: not OK: %+v", sc.Title, r.Report)
		}
		if !r.Killed {
			t.Errorf("%s: the first run was not killed part way", sc.Title)
		}
		if r.KillApplied < 1000 || r.KillApplied >= 5000 {
			t.Errorf("%s: killed with %d lines applied, want at least 1000 and not all", sc.Title, r.KillApplied)
		}
		if !r.NeverAhead {
			t.Errorf("%s: the pointer was ahead of the state", sc.Title)
		}
		if r.KillPointer > r.KillSaved {
			t.Errorf("%s: read pointer %d ahead of saved position %d", sc.Title, r.KillPointer, r.KillSaved)
		}
		if r.Report.Missing != 0 {
			t.Errorf("%s: %d lines missing", sc.Title, r.Report.Missing)
		}
		if sc.Dedupe {
			if r.Report.Twice != 0 || !r.Report.Exact() {
				t.Errorf("%s: written twice %d, exact %t", sc.Title, r.Report.Twice, r.Report.Exact())
			}
			if r.Skipped != r.Redelivered {
				t.Errorf("%s: %d lines between the pointer and the saved state, %d skipped on restart", sc.Title, r.Redelivered, r.Skipped)
			}
		} else {
			// Without de-duplication, what the restart re-delivered from
			// behind the saved state is applied a second time: the
			// scenario must show some, on any machine.
			if r.Redelivered == 0 || r.Report.Twice == 0 || r.Report.State.Applied <= r.Report.Want.Applied {
				t.Errorf("%s: no line applied twice (re-delivered %d, written twice %d, applied %d of %d): the scenario shows nothing",
					sc.Title, r.Redelivered, r.Report.Twice, r.Report.State.Applied, r.Report.Want.Applied)
			}
			if got, want := r.Report.State.Applied-r.Report.Want.Applied, int64(r.Redelivered); got != want {
				t.Errorf("%s: applied %d lines twice, want the %d re-delivered", sc.Title, got, want)
			}
			if r.Report.Twice != r.Redelivered {
				t.Errorf("%s: %d output lines written twice, want %d", sc.Title, r.Report.Twice, r.Redelivered)
			}
		}
	}
	for _, want := range []string{
		"lines missing: 0, output lines written twice: 0\nstate: applied 5000 (expected 5000)",
		"(never ahead of the state: true)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
}

// A scenario without de-duplication is OK only when it shows lines applied
// twice; one with de-duplication only when nothing is twice.
func TestScenarioResultOK(t *testing.T) {
	exact := &Report{State: LedgerState{Applied: 10, Total: 5}, Want: LedgerState{Applied: 10, Total: 5}}
	twice := &Report{Twice: 3, State: LedgerState{Applied: 13, Total: 8}, Want: LedgerState{Applied: 10, Total: 5}}
	for _, tc := range []struct {
		name        string
		dedupe      bool
		redelivered int
		report      *Report
		ok          bool
	}{
		{"no dedupe, lines applied twice", false, 3, twice, true},
		{"no dedupe, nothing twice", false, 0, exact, false},
		{"no dedupe, re-delivered but nothing twice", false, 3, exact, false},
		{"dedupe, exact", true, 3, exact, true},
		{"dedupe, lines applied twice", true, 3, twice, false},
	} {
		r := &ScenarioResult{Scenario: Scenario{Dedupe: tc.dedupe}, Killed: true, NeverAhead: true, Redelivered: tc.redelivered, Report: tc.report}
		if r.OK() != tc.ok {
			t.Errorf("%s: OK() = %t, want %t", tc.name, r.OK(), tc.ok)
		}
	}
}
