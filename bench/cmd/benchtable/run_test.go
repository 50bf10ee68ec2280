package main

import "testing"

// Row 3's note: the CPU a line of the one-group and the four-group runs
// (medians), what each group past the first adds, and their ratio.
func TestFanoutCPU(t *testing.T) {
	run := func(cpu ...float64) *runs {
		x := &runs{}
		for _, c := range cpu {
			x.res = append(x.res, result{Lines: 1_000_000, Seconds: 1, Extra: map[string]float64{"cpu_seconds": c}})
		}
		return x
	}
	got := fanoutCPU("the default", run(0.05, 0.04, 0.9), run(0.08, 0.07, 0.09))
	want := "Row 3 CPU a line (the default; all threads, median): one group 50 ns, four groups 80 ns: each group past the first adds 10.0 ns. On a machine without a core to spare, row 3's ratio comes down to that of the CPU times, 0.62."
	if got != want {
		t.Fatalf("fanoutCPU:\n got %s\nwant %s", got, want)
	}
}

// TestReportPaths: the chart goes beside the report unless it is named, so
// that a report of some rows written elsewhere (-out /tmp/x.md) does not
// draw over bench/throughput.svg.
func TestReportPaths(t *testing.T) {
	for _, tc := range []struct{ out, chart, outDir, wantOut, wantChart string }{
		{"", "", "bench", "bench/RESULTS.md", "bench/throughput.svg"},
		{"", "", "/tmp/short", "/tmp/short/RESULTS.md", "/tmp/short/throughput.svg"},
		{"/tmp/x.md", "", "bench", "/tmp/x.md", "/tmp/throughput.svg"},
		{"bench/RESULTS.md", "bench/throughput.svg", "/tmp/short", "bench/RESULTS.md", "bench/throughput.svg"},
		{"/tmp/x.md", "/tmp/y.svg", "bench", "/tmp/x.md", "/tmp/y.svg"},
	} {
		out, chart := reportPaths(tc.out, tc.chart, tc.outDir)
		if out != tc.wantOut || chart != tc.wantChart {
			t.Errorf("reportPaths(%q, %q, %q) = %q, %q; want %q, %q", tc.out, tc.chart, tc.outDir, out, chart, tc.wantOut, tc.wantChart)
		}
	}
}
