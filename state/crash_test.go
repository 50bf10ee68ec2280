package state

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/checkpoint"
	"github.com/tidemark-go/tidemark/internal/pgtest"
)

// The crash tests re-execute the test binary as a child that applies the
// lines of a feed to a store, driving a checkpoint, and writes the "pointer"
// (the durable mark's position) as a feed would. The parent kills it with
// SIGKILL once it reported enough progress, then checks on disk that:
//
//   - the state and the recorded position agree: the counter of applied
//     lines is the recorded position's line number, and the output file
//     holds exactly lines 1 to that number;
//   - the pointer is never ahead of the recorded position (invariant 5).
//
// The next child resumes from the pointer, as the feed would after a
// restart: the re-delivered lines are skipped. The last run finishes and
// every line is applied and written exactly once.

const (
	envCrashChild = "TIDEMARK_STATE_CRASH_CHILD"
	crashLines    = 20000
	pointerFile   = "pointer"
)

type crashConfig struct {
	backend string
	sync    bool
	// stopAfterOutput makes the child stop (block, to be killed) right
	// after the output bytes of batch number stopAfterOutput are synced and
	// before the backend transaction: the kill lands in that window.
	stopAfterOutput int
	// holdCommitAt makes the child's committer stop (to be killed) before
	// writing the first batch cut once line holdCommitAt was applied: the
	// kill then finds that batch and the next one staged, not durable.
	holdCommitAt int
	// epoch is the feed's epoch in this run (0 means 1). The deliveries
	// carry an Origin over the input, so a new epoch after a lost pointer
	// is recognised through the lineage.
	epoch uint64
	// spec, if set, is the store's Open spec (a PostgreSQL store on a
	// server of the test's own) instead of crashSpec's.
	spec string
	// each makes the child apply its lines with ApplyEach, in runs of
	// eachRun, and count them finished a run at a time, as the framework
	// does for a BatchHandler.
	each bool
	// runs makes the child apply the same runs with ApplyRuns, each run's
	// count and sum added once for its lines (with sync, each line is
	// a run of its own).
	runs bool
}

// eachRun is the length of the child's ApplyEach runs: prime, so that
// runs end everywhere in the batches of 64.
const eachRun = 37

func (c crashConfig) env(t *testing.T, dir string) []string {
	env := os.Environ()
	if c.spec != "" {
		env = append(env, "CRASH_SPEC="+c.spec)
	} else if c.backend == Postgres {
		// The child uses this process's server.
		pg, err := pgtest.Env()
		if err != nil {
			t.Fatal(err)
		}
		env = append(env, pg)
	}
	return append(env,
		envCrashChild+"=1",
		"CRASH_DIR="+dir,
		"CRASH_BACKEND="+c.backend,
		"CRASH_SYNC="+strconv.FormatBool(c.sync),
		"CRASH_STOP_AFTER_OUTPUT="+strconv.Itoa(c.stopAfterOutput),
		"CRASH_HOLD_COMMIT_AT="+strconv.Itoa(c.holdCommitAt),
		"CRASH_EPOCH="+strconv.FormatUint(max(c.epoch, 1), 10),
		"CRASH_EACH="+strconv.FormatBool(c.each || c.runs),
		"CRASH_RUNS="+strconv.FormatBool(c.runs),
	)
}

// TestCrashChild is the child; it does nothing in a normal run.
func TestCrashChild(t *testing.T) {
	if os.Getenv(envCrashChild) == "" {
		return // the crash tests run this as their child process
	}
	dir := os.Getenv("CRASH_DIR")
	o := &Options{Logger: quietLogger(), BatchSize: 64, BatchInterval: 2 * time.Millisecond}
	o.Sync, _ = strconv.ParseBool(os.Getenv("CRASH_SYNC"))
	stopAt, _ := strconv.Atoi(os.Getenv("CRASH_STOP_AFTER_OUTPUT"))
	if stopAt > 0 {
		batches := 0
		o.hooks = &hooks{afterOutput: func() {
			batches++
			if batches == stopAt {
				fmt.Println("stopped after output")
				select {} // wait for the kill
			}
		}}
	}
	var applied atomic.Int64
	if holdAt, _ := strconv.Atoi(os.Getenv("CRASH_HOLD_COMMIT_AT")); holdAt > 0 {
		if o.hooks == nil {
			o.hooks = &hooks{}
		}
		o.hooks.beforeCommit = func() {
			if applied.Load() >= int64(holdAt) {
				fmt.Println("commit held")
				select {} // wait for the kill
			}
		}
	}
	spec := os.Getenv("CRASH_SPEC")
	if spec == "" {
		spec = crashSpec(t, os.Getenv("CRASH_BACKEND"), dir)
	}
	s, err := Open(spec, o)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	var p progress
	reg := checkpoint.NewSet()
	cp := reg.Hold("f", "g")
	ptr := readPointer(dir)
	reg.Bind("f", "g", func() checkpoint.Mark {
		n := p.n.Load()
		return checkpoint.Mark{Count: n, Epoch: 1, Position: ptr + int64(n)*lineLen}
	})
	if err := s.Bind("f", cp); err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	// The feed's commit: write the durable mark's position as the pointer.
	go func() {
		var last uint64
		for {
			if m, _ := cp.Durable(); m.Count > last {
				last = m.Count
				writePointer(dir, m.Position)
			}
			time.Sleep(200 * time.Microsecond)
		}
	}()
	ctx := context.Background()
	epoch, _ := strconv.ParseUint(os.Getenv("CRASH_EPOCH"), 10, 64)
	input := &file{data: lines(crashLines, 'a'), ident: tidemark.Identity{Dev: 1, Ino: 42}}
	origin := input.origin()
	// applied is set inside the line's function too, before its line can
	// be in a batch: a commit that begins (the hold's hook) once the
	// batch holding line holdCommitAt was cut sees it. Set only after
	// Apply returned, it let that batch's commit begin unheld when the
	// committer took it at once (a batch that waited for the one before
	// it, cut by that line's Apply).
	apply := func(tx *Tx, n int) error {
		applied.Store(int64(n))
		if _, err := tx.AddInt64([]byte("count"), 1); err != nil {
			return err
		}
		if _, err := tx.AddInt64([]byte("sum"), int64(n)); err != nil {
			return err
		}
		_, err := fmt.Fprintf(tx.Output("out.csv"), "%d\n", n)
		return err
	}
	each, _ := strconv.ParseBool(os.Getenv("CRASH_EACH"))
	runs, _ := strconv.ParseBool(os.Getenv("CRASH_RUNS"))
	applyRuns := func(run []tidemark.Delivery) (int, error) {
		return s.ApplyRuns(ctx, len(run), func(i int) *tidemark.Delivery { return &run[i] }, func(tx *Tx, from, to int) error {
			applied.Store(run[to-1].Position / lineLen)
			var sum int64
			for i := from; i < to; i++ {
				n := run[i].Position / lineLen
				sum += n
				if _, err := fmt.Fprintf(tx.Output("out.csv"), "%d\n", n); err != nil {
					return err
				}
			}
			if _, err := tx.AddInt64([]byte("count"), int64(to-from)); err != nil {
				return err
			}
			_, err := tx.AddInt64([]byte("sum"), sum)
			return err
		})
	}
	if each {
		run := make([]tidemark.Delivery, 0, eachRun)
		for n := int(ptr/lineLen) + 1; n <= crashLines; {
			run = run[:0]
			for ; n <= crashLines && len(run) < eachRun; n++ {
				d := del("f", epoch, n)
				d.Origin = origin
				run = append(run, d)
			}
			var done int
			var err error
			if runs {
				done, err = applyRuns(run)
			} else {
				done, err = s.ApplyEach(ctx, len(run), func(i int) *tidemark.Delivery { return &run[i] }, func(tx *Tx, i int) error {
					return apply(tx, int(run[i].Position/lineLen))
				})
			}
			if err == nil && done != len(run) {
				err = fmt.Errorf("ApplyEach or ApplyRuns of %d lines did %d", len(run), done)
			}
			if err != nil {
				fmt.Println("error", err)
				os.Exit(2)
			}
			last := int(run[len(run)-1].Position / lineLen)
			applied.Store(int64(last))
			p.set(p.n.Load() + uint64(len(run)))
			if last/50 != (last-len(run))/50 {
				fmt.Println("progress", last)
			}
		}
	}
	for n := int(ptr/lineLen) + 1; n <= crashLines && !each; n++ {
		d := del("f", epoch, n)
		d.Origin = origin
		_, err := s.Apply(ctx, d, func(tx *Tx) error { return apply(tx, n) })
		if err != nil {
			fmt.Println("error", err)
			os.Exit(2)
		}
		applied.Store(int64(n))
		p.finish()
		if n%50 == 0 {
			fmt.Println("progress", n)
		}
	}
	st := s.Stats()
	if err := s.Close(); err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	fmt.Println("skipped by lineage", st.SkippedByLineage)
	if m, _ := cp.Durable(); m.Count > 0 {
		writePointer(dir, m.Position)
	}
	fmt.Println("done")
}

func readPointer(dir string) int64 {
	b, err := os.ReadFile(filepath.Join(dir, pointerFile))
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

func writePointer(dir string, pos int64) {
	tmp := filepath.Join(dir, pointerFile+".tmp")
	if err := os.WriteFile(tmp, []byte(strconv.FormatInt(pos, 10)), 0o644); err == nil {
		os.Rename(tmp, filepath.Join(dir, pointerFile))
	}
}

// crashSpec is the Open spec of the crash tests' store of backend in dir.
// A PostgreSQL store's lease is short: a killed child's runs out soon,
// and the next run takes over.
func crashSpec(t *testing.T, backend, dir string) string {
	if backend == Postgres {
		return pgSpec(t, dir, "lease", "1s")
	}
	return backend + ":" + dir
}

// runChild runs a child until it prints a line for which stop returns
// true (then kills it with SIGKILL), or until it ends. It returns whether
// the child finished.
func runChild(t *testing.T, cfg crashConfig, dir string, stop func(line string) bool) (finished bool) {
	t.Helper()
	finished, _ = runTestChild(t, "TestCrashChild", cfg.env(t, dir), stop)
	return finished
}

// startTestChild starts this test binary running only the test named
// test, with the environment env, its stdout piped to out and its stderr
// to this process's.
func startTestChild(t *testing.T, test string, env []string) (cmd *exec.Cmd, out io.Reader) {
	t.Helper()
	cmd = exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = env
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, out
}

// runTestChild runs the child test (startTestChild) until it prints a
// line for which stop returns true (then kills it with SIGKILL), or until
// it ends; a line that starts with "error" fails t. It returns whether the
// child printed "done", and whether it was killed.
func runTestChild(t *testing.T, test string, env []string, stop func(line string) bool) (finished, killed bool) {
	t.Helper()
	cmd, out := startTestChild(t, test, env)
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "error") {
			t.Errorf("child: %s", line)
		}
		if line == "done" {
			finished = true
		}
		if !killed && stop != nil && stop(line) {
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed = true
		}
	}
	if err := cmd.Wait(); !killed && err != nil {
		t.Fatalf("child %s failed: %v", test, err)
	}
	return finished, killed
}

// checkAgree opens the store in dir and checks that the state, the
// recorded position, the output and the pointer agree. It returns the
// number of lines recorded as applied.
func checkAgree(t *testing.T, backend, dir string) int64 {
	t.Helper()
	return checkAgreeAt(t, crashSpec(t, backend, dir), backend, dir)
}

// checkAgreeAt is checkAgree of the store of spec.
func checkAgreeAt(t *testing.T, spec, backend, dir string) int64 {
	t.Helper()
	s, err := Open(spec, &Options{Logger: quietLogger(), LockTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, _ := s.Applied("f")
	n := l.Position / lineLen
	if count := getInt(t, s, "count"); count != n {
		t.Fatalf("count %d, but the recorded position is line %d", count, n)
	}
	if sum := getInt(t, s, "sum"); sum != n*(n+1)/2 {
		t.Fatalf("sum %d, want %d for %d lines", sum, n*(n+1)/2, n)
	}
	var out []byte
	if backend == Postgres {
		o, err := s.Output("out.csv")
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if _, err := o.WriteTo(&b); err != nil {
			t.Fatal(err)
		}
		out = b.Bytes()
	} else if out, err = os.ReadFile(filepath.Join(dir, "out.csv")); err != nil && n > 0 {
		t.Fatal(err)
	}
	checkOutput(t, out, n)
	if ptr := readPointer(dir); ptr > l.Position {
		t.Fatalf("pointer %d is ahead of the recorded position %d", ptr, l.Position)
	}
	return n
}

// checkOutput checks that out is lines 1 to n, each once.
func checkOutput(t *testing.T, out []byte, n int64) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if n == 0 {
		if len(out) != 0 {
			t.Fatalf("output %q with nothing applied", out)
		}
		return
	}
	if int64(len(lines)) != n {
		t.Fatalf("output has %d lines, state has %d", len(lines), n)
	}
	for i, line := range lines {
		if line != strconv.Itoa(i+1) {
			t.Fatalf("output line %d is %q", i+1, line)
		}
	}
}

func TestCrashMidBatch(t *testing.T) {
	for _, cfg := range []crashConfig{
		{backend: Bolt}, {backend: Pebble}, {backend: Postgres},
		{backend: Bolt, sync: true}, {backend: Pebble, sync: true}, {backend: Postgres, sync: true},
		{backend: Bolt, each: true}, {backend: Pebble, each: true}, {backend: Postgres, each: true},
		{backend: Bolt, runs: true}, {backend: Pebble, runs: true}, {backend: Postgres, runs: true},
		{backend: Bolt, sync: true, runs: true},
	} {
		name := cfg.backend
		if cfg.sync {
			name += "/sync"
		}
		if cfg.each {
			name += "/each"
		}
		if cfg.runs {
			name += "/runs"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			kills := []int{1000, 2600, 5000}
			if cfg.sync {
				kills = []int{200, 450}
			}
			var last int64
			for i, target := range kills {
				runChild(t, cfg, dir, func(line string) bool {
					var n int
					_, err := fmt.Sscanf(line, "progress %d", &n)
					return err == nil && n >= target
				})
				n := checkAgree(t, cfg.backend, dir)
				t.Logf("kill %d at progress >= %d: %d lines recorded, pointer at line %d", i+1, target, n, readPointer(dir)/lineLen)
				if n < last {
					t.Fatalf("recorded position went back from line %d to %d", last, n)
				}
				last = n
			}
			if cfg.sync {
				return // the batched runs finish the file
			}
			finishAndCheck(t, cfg, dir, "last run")
		})
	}
}

// TestCrashWithBatchesStaged kills the child while its committer is held
// before a batch, so that the kill is sure to find lines staged and not
// durable: they are lost, the pointer is behind them, and the restart
// applies them once.
func TestCrashWithBatchesStaged(t *testing.T) {
	for _, be := range []string{Bolt, Pebble, Postgres} {
		t.Run(be, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			const holdAt = 3000
			cfg := crashConfig{backend: be, holdCommitAt: holdAt}
			progressed := 0
			runChild(t, cfg, dir, func(line string) bool {
				fmt.Sscanf(line, "progress %d", &progressed)
				return line == "commit held"
			})
			n := checkAgree(t, cfg.backend, dir)
			if n >= holdAt {
				t.Fatalf("recorded line %d, but the commit of line %d was held", n, holdAt)
			}
			t.Logf("killed with the commit held: %d lines recorded, %d reported applied", n, progressed)
			cfg.holdCommitAt = 0
			finishAndCheck(t, cfg, dir, "restart")
		})
	}
}

// TestCrashThenLostPointer kills the child, then deletes the pointer file:
// the restart reads the input from the start under a new epoch. The store
// recognises the lines it applied through the lineage (same file, same
// bytes before the recorded position), so none is applied or written twice.
func TestCrashThenLostPointer(t *testing.T) {
	for _, be := range []string{Bolt, Pebble, Postgres} {
		t.Run(be, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			cfg := crashConfig{backend: be, epoch: 1}
			runChild(t, cfg, dir, func(line string) bool {
				var n int
				_, err := fmt.Sscanf(line, "progress %d", &n)
				return err == nil && n >= 2000
			})
			n := checkAgree(t, cfg.backend, dir)
			if err := os.Remove(filepath.Join(dir, pointerFile)); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			cfg.epoch = 2
			var skipped int64 = -1
			finished := runChild(t, cfg, dir, func(line string) bool {
				fmt.Sscanf(line, "skipped by lineage %d", &skipped)
				return false
			})
			if !finished {
				t.Fatal("the restart did not finish")
			}
			if skipped != n {
				t.Fatalf("%d lines skipped by lineage, want the %d recorded", skipped, n)
			}
			if got := checkAgree(t, cfg.backend, dir); got != crashLines {
				t.Fatalf("after the restart %d lines applied, want %d", got, crashLines)
			}
			t.Logf("killed at line %d; the new epoch skipped %d lines by lineage", n, skipped)
		})
	}
}

// TestCrashBetweenOutputAndSave kills the child after a batch's output is
// synced and before its state is saved: the bytes are in the file, past the
// committed length. After the restart they are cut off, and the replay
// writes every line exactly once. (A PostgreSQL store writes its output in
// the transaction of the state: it has no such window.)
func TestCrashBetweenOutputAndSave(t *testing.T) {
	for _, be := range []string{Bolt, Pebble} {
		t.Run(be, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			cfg := crashConfig{backend: be, stopAfterOutput: 5}
			runChild(t, cfg, dir, func(line string) bool { return line == "stopped after output" })
			out, _ := os.ReadFile(filepath.Join(dir, "out.csv"))
			s, err := OpenDir(dir, &Options{Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			o, err := s.Output("out.csv")
			if err != nil {
				t.Fatal(err)
			}
			committed := o.Committed()
			s.Close()
			if int64(len(out)) <= committed {
				t.Fatalf("the kill missed the window: output %d bytes, committed %d", len(out), committed)
			}
			n := checkAgree(t, cfg.backend, dir)
			t.Logf("killed with %d output bytes past the committed %d; %d lines recorded", int64(len(out))-committed, committed, n)
			cfg.stopAfterOutput = 0
			finishAndCheck(t, cfg, dir, "restart")
		})
	}
}

// finishAndCheck runs the child to the end of the input (what names the
// run: "restart", "last run") and checks that every line was applied once
// and the recorded position agrees with the state.
func finishAndCheck(t *testing.T, cfg crashConfig, dir, what string) {
	t.Helper()
	if !runChild(t, cfg, dir, nil) {
		t.Fatalf("the %s did not finish", what)
	}
	if n := checkAgree(t, cfg.backend, dir); n != crashLines {
		t.Fatalf("after the %s %d lines applied, want %d", what, n, crashLines)
	}
}
