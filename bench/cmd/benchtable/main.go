// Command benchtable measures tidemark against this machine's limits and
// against a peer, and prints the table of bench/README (issue 6): every
// row's median over several runs and its ratio to a baseline measured in
// the same run. It writes bench/RESULTS.md and bench/throughput.svg.
//
//	go run ./bench/cmd/benchtable          # make bench: 1,000,000 lines, 3 runs a row
//	go run ./bench/cmd/benchtable -short   # make bench-short: 100,000 lines, 1 run, under 60 s
//
// Every measurement runs in a child process (this program re-executed with
// -child), so that each has its own peak RSS and nothing of one run warms
// or burdens the next.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"time"

	"github.com/tidemark-go/tidemark/internal/pgtest"
)

func main() {
	var cfg config
	var a childArgs
	child := flag.String("child", "", "run one measurement `case` and print its result as JSON (used by the table itself)")
	flag.BoolVar(&cfg.short, "short", false, "quick check: 100,000 lines, a 100 MB restart file, one run a row")
	flag.IntVar(&cfg.reps, "reps", 0, "runs of each row (0: 3, or 1 with -short)")
	flag.IntVar(&cfg.lines, "lines", 0, "lines of the generated ledger (0: 1,000,000, or 100,000 with -short)")
	flag.StringVar(&cfg.rows, "rows", "", "comma-separated rows to run (default all), e.g. 1,2,5")
	flag.StringVar(&cfg.accounts, "accounts", "", "comma-separated numbers of accounts of the ledger rows to run (default all of the mode), e.g. 20,10000")
	flag.StringVar(&cfg.out, "out", "", "write the report here (default bench/RESULTS.md; with -short, $TMPDIR/tidemark-bench-short/RESULTS.md)")
	flag.StringVar(&cfg.chart, "chart", "", "write the chart here (default beside the report: bench/throughput.svg for bench/RESULTS.md)")
	flag.StringVar(&cfg.work, "work", "", "work directory (default a new temporary directory, removed at the end)")
	flag.StringVar(&cfg.peers, "peers", "bench/peers", "directory of the peer module (row 13)")
	flag.StringVar(&cfg.setups, "setups", "", "keep the set-up stores of the ledger rows (1,000,000 accounts and more) in this `directory` and reuse them in later runs, each under the format of a store tidemark makes new (one of an older format is not reused; remove it)")
	flag.StringVar(&a.file, "file", "", "child: input file")
	flag.Int64Var(&a.lines, "lines-child", 0, "child: lines to wait for")
	flag.IntVar(&a.batch, "batch", 256, "child: batch size")
	flag.StringVar(&a.backend, "backend", "bbolt", "child: store backend")
	flag.StringVar(&a.work, "dir", os.TempDir(), "child: work directory")
	flag.StringVar(&a.psync, "psync", "every", "child: pointer sync policy (every, interval, never)")
	flag.IntVar(&a.groups, "groups", 1, "child: processor groups")
	flag.BoolVar(&a.sync, "sync", false, "child: store Sync mode")
	flag.Float64Var(&a.seconds, "seconds", 1, "child: seconds of idle")
	flag.IntVar(&a.ops, "ops", 1000, "child: operations")
	flag.IntVar(&a.qcap, "qcap", 0, "child: subscriber queue capacity (0: the framework's default)")
	flag.StringVar(&a.keep, "keep", "", "child: the `folder` of the store rows 16 and 18 fill, reused when an earlier run filled it")
	cpuprofile := flag.String("cpuprofile", "", "child: write a CPU profile of the measurement to `file`")
	traceFile := flag.String("trace", "", "child: write a runtime trace of the child to `file` (go tool trace reads it)")
	flag.Parse()
	if *child != "" {
		if *traceFile != "" {
			startOutput(*traceFile, trace.Start)
			defer trace.Stop()
		}
		if *cpuprofile != "" {
			startOutput(*cpuprofile, pprof.StartCPUProfile)
			defer pprof.StopCPUProfile()
		}
		if err := runChild(*child, a); err != nil {
			pprof.StopCPUProfile()
			trace.Stop()
			fmt.Fprintf(os.Stderr, "benchtable -child %s: %v\n", *child, err)
			os.Exit(1)
		}
		return
	}
	cfg.command = "go run ./bench/cmd/benchtable"
	if len(os.Args) > 1 {
		cfg.command += " " + strings.Join(os.Args[1:], " ")
	}
	start := time.Now()
	// Row 20's PostgreSQL server, started at its first use, is stopped
	// and removed once run returns, on an error too (see pgrows.go).
	code := pgtest.Main(runFunc(func() int {
		if err := run(cfg); err != nil {
			fmt.Fprintln(os.Stderr, "benchtable:", err)
			return 1
		}
		return 0
	})).Run()
	if code == 0 {
		fmt.Fprintf(os.Stderr, "benchtable: done in %v\n", time.Since(start).Round(time.Second))
	}
	os.Exit(code)
}

// runFunc is the table's run as pgtest.Main takes it.
type runFunc func() int

func (f runFunc) Run() int { return f() }

// startOutput creates path and starts writing a profile or trace into it
// with start; it exits the process when it cannot.
func startOutput(path string, start func(io.Writer) error) {
	f, err := os.Create(path)
	if err == nil {
		err = start(f)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
}
