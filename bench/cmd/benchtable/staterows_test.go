package main

import (
	"testing"

	"github.com/tidemark-go/tidemark/state"
)

// The state rows' cases run at small sizes on both backends and report
// what their rows print.
func TestStateCases(t *testing.T) {
	for _, be := range []string{state.Bolt, state.Pebble} {
		t.Run(be, func(t *testing.T) {
			a := childArgs{backend: be, work: t.TempDir(), ops: 5000}
			r, err := measureCase("state-iter", a)
			if err != nil {
				t.Fatal(err)
			}
			if r.Lines != 10_000 || r.Extra["snap_keys_per_s"] <= 0 || r.Extra["view_keys_per_s"] <= 0 || r.Extra["store_bytes"] <= 0 {
				t.Errorf("state-iter: %+v", r)
			}
			a.ops, a.lines = 2000, 500
			if r, err = measureCase("state-apply-reader", a); err != nil {
				t.Fatal(err)
			}
			if r.Lines != 1000 || r.Extra["rate_alone"] <= 0 || r.Extra["rate_with_reader"] <= 0 || r.Extra["reader_passes"] <= 0 {
				t.Errorf("state-apply-reader: %+v", r)
			}
			a.ops = 1 << 20
			if r, err = measureCase("state-backup", a); err != nil {
				t.Fatal(err)
			}
			if r.Extra["backup_seconds"] <= 0 || r.Extra["copy_bytes"] < 1<<20 {
				t.Errorf("state-backup: %+v", r)
			}
		})
	}
}

// whereTimeGoes reads the CPU time and the saves of a run of a ledger row.
func TestWhereTimeGoes(t *testing.T) {
	r := result{Lines: 100_000, Seconds: 10, Extra: map[string]float64{"cpu_seconds": 3, "saves": 73}}
	if got, want := whereTimeGoes(r), "30.0 µs of CPU a line, on a CPU 30 % of its run, 1,370 lines a save"; got != want {
		t.Errorf("whereTimeGoes = %q, want %q", got, want)
	}
	delete(r.Extra, "saves")
	if got, want := whereTimeGoes(r), "30.0 µs of CPU a line, on a CPU 30 % of its run"; got != want {
		t.Errorf("without saves: %q, want %q", got, want)
	}
	sum := "ledger: settled: 100000 lines read, 100000 applied, 0 skipped as already applied, 0 rejected; 73 saves; pointer at position 33416941 of epoch 1796354926334978826"
	if m := ledgerSaves.FindStringSubmatch(sum); m == nil || m[1] != "73" {
		t.Errorf("saves of %q: %v, want 73", sum, m)
	}
}
