package main

import (
	"path/filepath"
	"strings"
	"testing"

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
		{name: "ledger-store", edit: func(a *childArgs) { a.sync = true; a.file, a.lines = small, 20 }, lines: 20},
		{name: "bare-bbolt", lines: lines},
		{name: "bare-pebble", lines: lines},
		{name: "fsync4k", lines: 3},
		{name: "fsync4k-append", lines: 3},
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
