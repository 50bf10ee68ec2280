package framework_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"github.com/stretchr/testify/require"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/checkpoint"
	"github.com/tidemark-go/tidemark/framework"
)

// childEnv selects a child mode of the test binary (see TestMain).
const childEnv = "TIDEMARK_FRAMEWORK_CHILD"

// The crash test's child runs a server over dir/input.csv with a processor
// that appends "run epoch position line" to dir/state and syncs it before
// Handle returns: its durable state. Mode "kill" runs until killed; mode
// "finish" runs until the feed settles, then stops cleanly.
const crashKillAfter = 400

func runChild(mode string) int {
	switch mode {
	case "signals":
		return runSignalChild()
	case childCounter, childUnbound:
		return runReadmeChild(mode)
	case childFileSetKill, childFileSetFinish:
		return runFileSetChild(mode)
	}
	dir := os.Getenv("TIDEMARK_DIR")
	run := os.Getenv("TIDEMARK_RUN")
	state, err := os.OpenFile(filepath.Join(dir, "state"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer state.Close()
	var p framework.Processor = &stateProc{run: run, f: state}
	if os.Getenv("TIDEMARK_PROC") == "batch" {
		p = &batchStateProc{run: run, f: state, saves: make(chan savedBatch, 4), done: make(chan struct{})}
	}
	cfg := fileCfg(filepath.Join(dir, "input.csv"))
	cfg.Feeds[0].QueueCapacity = 64
	cfg.Feeds[0].BatchSize = 16
	s, err := framework.New(cfg, framework.Processors{"p": p})
	if err == nil {
		err = s.Start(context.Background())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	switch mode {
	case "kill":
		time.Sleep(2 * time.Minute) // the parent kills us long before
		return 3
	case "finish":
		return settleAndStop(s, "orders")
	}
	return 2
}

// settleAndStop is the end of a child's "finish" run: it waits for feed to
// settle, stops the server, and returns the exit code.
func settleAndStop(s *framework.Server, feed string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := s.WaitSettled(ctx, feed); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 4
	}
	if err := s.Stop(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 5
	}
	return 0
}

// stateProc writes each line to its state file, durably, before returning.
type stateProc struct {
	run string
	f   *os.File
	buf []byte
}

func (p *stateProc) Start(_ context.Context, fc *framework.Context) error {
	return fc.Subscribe("orders")
}

func (p *stateProc) Handle(_ context.Context, d tidemark.Delivery, line []byte) error {
	p.buf = fmt.Appendf(p.buf[:0], "%s %d %d %s\n", p.run, d.Epoch, d.Position, line)
	if _, err := p.f.Write(p.buf); err != nil {
		return err
	}
	return p.f.Sync()
}

// batchStateProc keeps its records in memory and saves them every 50
// lines from another goroutine, declaring each batch durable through its
// checkpoint once synced.
type batchStateProc struct {
	run   string
	f     *os.File
	cp    *checkpoint.Checkpoint
	buf   []byte
	n     int
	saves chan savedBatch
	done  chan struct{}
}

type savedBatch struct {
	data []byte
	mark checkpoint.Mark
}

func (p *batchStateProc) Start(_ context.Context, fc *framework.Context) error {
	p.cp = fc.Checkpoint("orders")
	go func() {
		defer close(p.done)
		for b := range p.saves {
			if _, err := p.f.Write(b.data); err != nil {
				panic(err)
			}
			if err := p.f.Sync(); err != nil {
				panic(err)
			}
			p.cp.DurableThrough(b.mark)
		}
	}()
	return fc.Subscribe("orders")
}

func (p *batchStateProc) Handle(_ context.Context, d tidemark.Delivery, line []byte) error {
	p.buf = fmt.Appendf(p.buf, "%s %d %d %s\n", p.run, d.Epoch, d.Position, line)
	if p.n++; p.n%50 == 0 {
		p.saves <- savedBatch{data: p.buf, mark: p.cp.Mark()}
		p.buf = nil
	}
	return nil
}

func (p *batchStateProc) Drained(context.Context) error {
	p.saves <- savedBatch{data: p.buf, mark: p.cp.Mark()}
	p.buf = nil
	close(p.saves)
	<-p.done
	return nil
}

type stateRec struct {
	run   string
	epoch uint64
	pos   int64
	line  string
}

func readState(t *testing.T, dir string) []stateRec {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	var recs []stateRec
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 4 {
			continue // a torn last record
		}
		e, _ := strconv.ParseUint(f[1], 10, 64)
		p, _ := strconv.ParseInt(f[2], 10, 64)
		recs = append(recs, stateRec{run: f[0], epoch: e, pos: p, line: f[3]})
	}
	return recs
}

func child(t *testing.T, dir, mode, run, proc string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestKill9")
	cmd.Env = append(os.Environ(), childEnv+"="+mode, "TIDEMARK_DIR="+dir, "TIDEMARK_RUN="+run, "TIDEMARK_PROC="+proc)
	return cmd
}

// A server killed with SIGKILL part way through: its pointer is never ahead
// of what the processor had made durable, and the next run re-delivers every
// line after the pointer, so that no line is ever missed.
func TestKill9PointerNeverAheadAndRestartRedelivers(t *testing.T) {
	kill9(t, "sync", 3000)
}

// The same with a processor that saves asynchronously in batches of 50 and
// holds the feed's commits with a checkpoint until each batch is synced.
func TestKill9BatchedSavesWithCheckpoint(t *testing.T) {
	kill9(t, "batch", 20000) // faster: more lines, so that the kill lands before the end
}

func kill9(t *testing.T, proc string, crashLines int) {
	dir := t.TempDir()
	input := filepath.Join(dir, "input.csv")
	writeLines(t, input, 1, crashLines)

	cmd := child(t, dir, "kill", "1", proc)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, fmt.Sprintf("child processed %d lines", crashKillAfter), func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, "state"))
		return bytes.Count(b, []byte{'\n'}) >= crashKillAfter
	})
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die of SIGKILL: %v", err)
	}

	// The kill may have torn the state file's last write (Linux stops a
	// write at a page when a fatal signal is pending): recover it as a
	// processor would, by cutting it back to its last complete record.
	statePath := filepath.Join(dir, "state")
	b, err := os.ReadFile(statePath)
	if err != nil {
		t.Fatal(err)
	}
	if cut := bytes.LastIndexByte(b, '\n') + 1; cut < len(b) {
		t.Logf("the kill tore the last record: %d bytes cut", len(b)-cut)
		if err := os.Truncate(statePath, int64(cut)); err != nil {
			t.Fatal(err)
		}
	}
	killed := readState(t, dir)
	last := killed[len(killed)-1]
	ptr := loadPointer(t, input)
	t.Logf("killed: %d lines durable, last position %d; pointer %d (found %v)", len(killed), last.pos, ptr.Record.Position, ptr.Found)
	if ptr.Found {
		require.Equal(t, last.epoch, ptr.Record.Epoch)
		require.LessOrEqual(t, ptr.Record.Position, last.pos, "the pointer is never ahead of the durable state")
	}
	require.True(t, last.pos < fileLinePos(crashLines), "killed before the end")

	cmd = child(t, dir, "finish", "2", proc)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("restart: %v\n%s", err, out)
	}
	recs := readState(t, dir)
	seen := make(map[string]int)
	var second []stateRec
	for _, r := range recs {
		seen[r.line]++
		if r.run == "2" {
			second = append(second, r)
		}
	}
	for i := 1; i <= crashLines; i++ {
		if seen[fmt.Sprintf("%06d,entry", i)] == 0 {
			t.Fatalf("line %d was never processed: a gap", i)
		}
	}
	// The restart starts with the line just after the pointer.
	require.True(t, len(second) > 0)
	var resume int64
	if ptr.Found {
		resume = ptr.Record.Position
	}
	require.Equal(t, resume+fileLinePos(1), second[0].pos, "the restart re-delivers from the pointer on")
	dups := len(recs) - crashLines
	t.Logf("re-delivered %d lines (the commit lag)", dups)
	require.Equal(t, fileLinePos(crashLines), loadPointer(t, input).Record.Position)
}
