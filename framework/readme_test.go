package framework_test

// The README's code as a user runs it: the smallest exactly-once
// processor (countLines, example_store_test.go) killed with SIGKILL, the
// old snippet that opened its own store without binding it, a clean stop
// on a file feed, and a typo in the input's path with no Logger.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/feed/pointer"
	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/state"
)

// Child modes of the README tests (see runChild).
const (
	// childCounter runs countLines over TIDEMARK_DIR/orders.csv into the
	// store TIDEMARK_DIR/state until the feed settles. With
	// TIDEMARK_FREEZE_AFTER=N, the store's commit observer stops the
	// store's committer for good, printing "frozen", once N lines were
	// saved in this run: the process is then killed by its parent.
	childCounter = "readme-counter"
	// childUnbound runs the README's old snippet: a processor that opens
	// its own store and never binds it to the feed.
	childUnbound = "readme-unbound"
)

// readmeLines is the size of the input of the README kill tests.
const readmeLines = 200_000

func orderLine(i int) string { return fmt.Sprintf("order-%06d", i) }

// writeOrders writes lines 1..n of the orders feed to path.
func writeOrders(t *testing.T, path string, n int) {
	t.Helper()
	var b bytes.Buffer
	for i := 1; i <= n; i++ {
		b.WriteString(orderLine(i))
		b.WriteByte('\n')
	}
	require.NoError(t, os.WriteFile(path, b.Bytes(), 0o644))
}

// freezeAfter is a store's commit observer that stops the committer once
// after lines were saved: the save is durable, the feed's checkpoint has
// not heard of it, and no later save happens. The parent kills the
// process then, a moment chosen by progress.
type freezeAfter struct {
	after, saved int64
}

func (o *freezeAfter) ObserveCommit(lines int, _ time.Duration) {
	o.saved += int64(lines)
	if o.after > 0 && o.saved >= o.after {
		fmt.Printf("frozen %d\n", o.saved)
		select {}
	}
}

// runReadmeChild is the child of the README tests.
func runReadmeChild(mode string) int {
	dir := os.Getenv("TIDEMARK_DIR")
	input, data := filepath.Join(dir, "orders.csv"), filepath.Join(dir, "state")
	var err error
	switch mode {
	case childCounter:
		after, _ := strconv.ParseInt(os.Getenv("TIDEMARK_FREEZE_AFTER"), 10, 64)
		err = runOrdersObserved(input, data, &freezeAfter{after: after})
	case childUnbound:
		err = runUnboundCounter(input, data)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		return 1
	}
	return 0
}

// runOrdersObserved is runOrders (the README's code) with a commit
// observer on the group's store.
func runOrdersObserved(input, data string, obs state.CommitObserver) error {
	srv, err := framework.New(framework.Config{
		Feeds: []framework.FeedConfig{{Name: "orders", File: &framework.FileConfig{Filename: input}}},
		Groups: []framework.GroupConfig{{Name: "orders-agent", Processors: []string{"counter"}, Store: "bbolt:" + data,
			StoreOptions: &state.Options{Observer: obs}}},
		UntilSettled: true,
	}, framework.Processors{"counter": &countLines{}})
	if err != nil {
		return err
	}
	return srv.Run(context.Background())
}

// ownStoreCounter is the README's old counter without its Bind: it opened
// its own store and applied to it, and the group declared no store.
type ownStoreCounter struct{ st state.Store }

func (c *ownStoreCounter) Start(ctx context.Context, fc *framework.Context) error {
	return fc.Subscribe("orders")
}

func (c *ownStoreCounter) Handle(ctx context.Context, d tidemark.Delivery, line []byte) error {
	_, err := c.st.Apply(ctx, d, func(tx *state.Tx) error {
		_, err := tx.Bucket("counts").AddInt64(line, 1)
		return err
	})
	return err
}

func runUnboundCounter(input, data string) error {
	st, err := state.Open("bbolt:"+data, nil)
	if err != nil {
		return err
	}
	srv, err := framework.New(framework.Config{
		Feeds:        []framework.FeedConfig{{Name: "orders", File: &framework.FileConfig{Filename: input}}},
		Groups:       []framework.GroupConfig{{Name: "orders-agent", Processors: []string{"counter"}}},
		UntilSettled: true,
	}, framework.Processors{"counter": &ownStoreCounter{st: st}})
	if err != nil {
		return errors.Join(err, st.Close())
	}
	return errors.Join(srv.Run(context.Background()), st.Close())
}

// buildTestBinary builds this package's test binary without the race
// detector into dir, for children that apply many lines: the test's own
// code runs with the detector, the children at full speed (as the
// ledger's tests run the ledger).
func buildTestBinary(t *testing.T, dir string) string {
	t.Helper()
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goTool); err != nil {
		goTool = "go"
	}
	exe := filepath.Join(dir, "framework.test")
	out, err := exec.Command(goTool, "test", "-c", "-o", exe, ".").CombinedOutput()
	require.NoError(t, err, "go test -c: %s", out)
	return exe
}

// readmeChild starts exe (a test binary of this package) as a child of
// mode on dir; env adds variables.
func readmeChild(t *testing.T, exe, dir, mode string, env ...string) (*exec.Cmd, *bufio.Scanner, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(append(os.Environ(), childEnv+"="+mode, "TIDEMARK_DIR="+dir), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	timer := time.AfterFunc(2*time.Minute, func() { cmd.Process.Kill() }) // a safety net only
	t.Cleanup(func() { timer.Stop() })
	return cmd, bufio.NewScanner(out), &stderr
}

// readCounts opens the store in dir and returns its counts per line.
func readCounts(t *testing.T, dir string) map[string]int64 {
	t.Helper()
	st, err := state.OpenDir(dir, &state.Options{Logger: discard()})
	require.NoError(t, err)
	defer st.Close()
	counts := make(map[string]int64)
	require.NoError(t, st.View(func(tx *state.Tx) error {
		return tx.Bucket("counts").ForEach(func(k, v []byte) error {
			counts[string(k)] = int64(beUint64(v))
			return nil
		})
	}))
	return counts
}

// beUint64 decodes a value written by PutInt64 or AddInt64.
func beUint64(v []byte) uint64 {
	var n uint64
	for _, b := range v {
		n = n<<8 | uint64(b)
	}
	return n
}

// The README's counter as written (the store declared on its group), over
// 200,000 lines, killed with SIGKILL three times, each time right after a
// durable save that the feed's pointer has not caught up with (the store's
// committer stopped there, with later lines staged): every line is
// counted exactly once at the end, and after each kill the pointer is
// behind what the store holds, never ahead.
func TestReadmeCounterKilledThreeTimes(t *testing.T) {
	dir := t.TempDir()
	exe := buildTestBinary(t, dir)
	input, data := filepath.Join(dir, "orders.csv"), filepath.Join(dir, "state")
	writeOrders(t, input, readmeLines)
	var prev int
	for run, after := range []int{30_000, 40_000, 50_000} {
		cmd, out, stderr := readmeChild(t, exe, dir, childCounter, fmt.Sprintf("TIDEMARK_FREEZE_AFTER=%d", after))
		frozen := false
		for out.Scan() {
			if strings.HasPrefix(out.Text(), "frozen ") {
				frozen = true
				break
			}
		}
		if !frozen {
			err := cmd.Wait()
			t.Fatalf("run %d ended before %d lines were saved: %v\n%s", run+1, after, err, stderr)
		}
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		err := cmd.Wait()
		ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
		require.True(t, ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL, "run %d: %v", run+1, err)

		// The store holds lines 1..k, each once: a batch is saved whole,
		// in order.
		counts := readCounts(t, data)
		for i := 1; i <= len(counts); i++ {
			require.Equal(t, int64(1), counts[orderLine(i)], "run %d: %s", run+1, orderLine(i))
		}
		require.Greater(t, len(counts), prev, "run %d saved nothing", run+1)
		require.Less(t, len(counts), readmeLines, "run %d was killed part way", run+1)
		prev = len(counts)
		ptr := loadPointerFile(t, input)
		last := int64(len(counts)) * int64(len(orderLine(1))+1) // the position after line k
		// Behind, not only not ahead: the last save was durable before the
		// checkpoint heard of it, so the restart re-delivers its lines.
		require.Less(t, ptr.Position, last, "run %d: the pointer is not behind the store", run+1)
		t.Logf("run %d killed: %d lines counted, pointer %d lines behind", run+1, len(counts), (last-ptr.Position)/int64(len(orderLine(1))+1))
	}

	cmd, _, stderr := readmeChild(t, exe, dir, childCounter)
	require.NoError(t, cmd.Wait(), "the last run: %s", stderr)
	counts := readCounts(t, data)
	require.Len(t, counts, readmeLines, "lines lost")
	for i := 1; i <= readmeLines; i++ {
		require.Equal(t, int64(1), counts[orderLine(i)], "%s", orderLine(i))
	}
}

// loadPointerFile loads the pointer beside input; no feed may hold it.
func loadPointerFile(t *testing.T, input string) pointer.Record {
	t.Helper()
	return loadPointer(t, input).Record
}

// The README's old snippet, a processor that opened its own store and
// applied to it without binding it to the feed (its group declared no
// store), lost lines silently when killed: its pointer ran ahead of the
// store. Now its first Apply fails with state.ErrNotBound, which stops the
// server: the process exits with an error that names the feed and the
// fix, and the pointer has not moved, so nothing can be lost.
func TestReadmeUnboundCounterFailsLoudly(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "orders.csv")
	writeOrders(t, input, readmeLines)
	cmd, _, stderr := readmeChild(t, os.Args[0], dir, childUnbound)
	err := cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "the unbound counter ran to the end: %s", stderr)
	require.Equal(t, 1, ee.ExitCode(), "%s", stderr)
	msg := stderr.String()
	for _, want := range []string{
		state.ErrNotBound.Error(),
		`feed "orders"`,
		"framework.GroupConfig.Store",
	} {
		require.Contains(t, msg, want)
	}
	res := loadPointer(t, input)
	require.Zero(t, res.Record.Position, "the pointer moved past lines no store holds")
	require.Empty(t, readCounts(t, filepath.Join(dir, "state")), "nothing was saved")
}

// handleCount wraps the README's counter and counts the lines it is given.
type handleCount struct {
	*countLines
	n atomic.Int64
}

func (h *handleCount) Handle(ctx context.Context, d tidemark.Delivery, line []byte) error {
	h.n.Add(1)
	return h.countLines.Handle(ctx, d, line)
}

// The README's snippet on a file feed: a clean stop (the end of a run
// until settled) leaves the pointer at the end of the input, so the
// restart re-delivers nothing, with the store's defaults and with a store
// that saves only when the drain flushes it. (The old snippet stopped the
// server, then closed the store: the pointer stayed a whole batch behind,
// and the restart re-delivered it.)
func TestReadmeCleanStopOnAFile(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts *state.Options
	}{
		{"the README's code", nil},
		{"only the drain saves", &state.Options{BatchSize: 1 << 20, BatchInterval: time.Hour}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			input, data := filepath.Join(dir, "orders.csv"), filepath.Join(dir, "state")
			const n = 20_000
			writeOrders(t, input, n)
			if tc.opts == nil {
				require.NoError(t, runOrders(input, data)) // exactly the README's code
			} else {
				require.NoError(t, runOrdersWith(input, data, tc.opts, &countLines{}))
			}
			fi, err := os.Stat(input)
			require.NoError(t, err)
			require.Equal(t, fi.Size(), loadPointerFile(t, input).Position, "the clean stop committed every line")

			again := &handleCount{countLines: &countLines{}}
			require.NoError(t, runOrdersWith(input, data, tc.opts, again))
			require.Zero(t, again.n.Load(), "the restart re-delivered lines")
			counts := readCounts(t, data)
			require.Len(t, counts, n)
		})
	}
}

// runOrdersWith is runOrders with the store's options and processor given.
func runOrdersWith(input, data string, opts *state.Options, p framework.Processor) error {
	srv, err := framework.New(framework.Config{
		Feeds:        []framework.FeedConfig{{Name: "orders", File: &framework.FileConfig{Filename: input}}},
		Groups:       []framework.GroupConfig{{Name: "orders-agent", Processors: []string{"counter"}, Store: "bbolt:" + data, StoreOptions: opts}},
		UntilSettled: true,
		Logger:       discard(),
	}, framework.Processors{"counter": p})
	if err != nil {
		return err
	}
	return srv.Run(context.Background())
}

// A typo in the input's path with Config.Logger left nil: the feed's
// warning reaches slog.Default() (it used to go to a logger that dropped
// it, and the server waited in silence), and a run until settled ends with
// an error naming the path instead of waiting forever.
func TestTypoInputWithNilLogger(t *testing.T) {
	var logs logBuf
	old := slog.Default()
	slog.SetDefault(logs.logger())
	defer slog.SetDefault(old)
	dir := t.TempDir()
	typo := filepath.Join(dir, "ordres.csv")
	writeOrders(t, filepath.Join(dir, "orders.csv"), 10)

	cfg := framework.Config{
		Feeds:  []framework.FeedConfig{{Name: "orders", File: &framework.FileConfig{Filename: typo}}},
		Groups: []framework.GroupConfig{{Name: "orders-agent", Processors: []string{"counter"}, Store: "bbolt:" + filepath.Join(dir, "state")}},
	}
	// Tailing: it waits for the file, and says so where the user looks.
	srv, err := framework.New(cfg, framework.Processors{"counter": &countLines{}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- srv.Run(ctx) }()
	waitFor(t, "the warning of the missing input in slog.Default()", func() bool {
		return logs.contains("level=WARN") && logs.contains("input does not exist") && logs.contains(typo)
	})
	cancel()
	require.NoError(t, <-errc)

	// A run until settled ends with an error naming the path.
	cfg.UntilSettled = true
	srv, err = framework.New(cfg, framework.Processors{"counter": &countLines{}})
	require.NoError(t, err)
	ctx, cancel = context.WithTimeout(context.Background(), deadline)
	defer cancel()
	err = srv.Run(ctx)
	require.ErrorIs(t, err, framework.ErrInputMissing)
	require.ErrorContains(t, err, typo)
}
