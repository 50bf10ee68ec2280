package framework_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/checkpoint"
	"github.com/tidemark-go/tidemark/feed"
	"github.com/tidemark-go/tidemark/framework"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(runChild(mode))
	}
	goleak.VerifyTestMain(m)
}

// deadline is how long a test waits for a condition before failing.
const deadline = 20 * time.Second

// waitFor polls cond until it holds, failing the test after the deadline.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(deadline)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// memSource is an in-memory feed.Source: lines with byte positions as if
// they were a file, in one epoch. It can tail (more lines appended later)
// or be once (ErrDone at the end).
type memSource struct {
	mu        sync.Mutex
	lines     [][]byte
	ends      []int64
	next      int
	once      bool
	reread    bool
	epoch     uint64
	committed int64
	commits   []int64
	polls     int
	closed    bool
	trace     []string
	traceOn   bool
	seq       uint64
	done      bool
	// failCommits and failPolls make that many calls fail.
	failCommits int
	failPolls   int
	// commitBlock, when set, makes Commit wait until it is closed before
	// it records anything (without holding mu: Status still answers).
	commitBlock chan struct{}
}

func newMemSource(n int) *memSource {
	s := &memSource{reread: true, epoch: 7}
	s.appendN(n)
	return s
}

func lineText(i int) string { return fmt.Sprintf("line-%04d", i) }

// appendN appends lines numbered after the current ones (from 1).
func (s *memSource) appendN(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		i := len(s.lines) + 1
		s.lines = append(s.lines, []byte(lineText(i)))
		var prev int64
		if len(s.ends) > 0 {
			prev = s.ends[len(s.ends)-1]
		}
		s.ends = append(s.ends, prev+int64(len(lineText(i)))+1)
	}
}

// pos returns the position just after line i (from 1); pos(0) is 0.
func (s *memSource) pos(i int) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i == 0 {
		return 0
	}
	return s.ends[i-1]
}

// startAfter makes the source resume after its committed position, as a
// restart would.
func (s *memSource) restart() *memSource {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := &memSource{reread: s.reread, epoch: s.epoch, once: s.once, committed: s.committed}
	r.lines, r.ends = s.lines, s.ends
	for r.next < len(r.ends) && r.ends[r.next] <= s.committed {
		r.next++
	}
	return r
}

func (s *memSource) Poll(_ context.Context, items []feed.Item) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.polls++
	if s.traceOn {
		s.trace = append(s.trace, "poll")
	}
	if s.failPolls > 0 {
		s.failPolls--
		return 0, errors.New("disk on fire")
	}
	n := 0
	for n < len(items) && s.next < len(s.lines) {
		s.seq++
		items[n] = feed.Item{Seq: s.seq, Epoch: s.epoch, Position: s.ends[s.next], Line: s.lines[s.next]}
		s.next++
		n++
	}
	if n == 0 && s.once {
		s.done = true
		return 0, feed.ErrDone
	}
	return n, nil
}

func (s *memSource) Commit(epoch uint64, position int64) error {
	s.mu.Lock()
	if b := s.commitBlock; b != nil {
		s.mu.Unlock()
		<-b
		s.mu.Lock()
	}
	defer s.mu.Unlock()
	if s.traceOn {
		s.trace = append(s.trace, "commit")
	}
	if s.failCommits > 0 {
		s.failCommits--
		return errors.New("pointer write failed")
	}
	if epoch != s.epoch || position <= s.committed {
		return nil
	}
	s.committed = position
	s.commits = append(s.commits, position)
	return nil
}

func (s *memSource) Rereadable() bool { return s.reread }

func (s *memSource) Status() feed.Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := feed.Status{Epoch: s.epoch, CommittedPosition: s.committed, LinesRead: uint64(s.next)}
	if s.next > 0 {
		st.ReadPosition = s.ends[s.next-1]
	}
	switch {
	case s.closed:
		st.State = feed.StateStopped
	case s.done:
		st.State = feed.StateDone
	case s.next < len(s.lines):
		st.State = feed.StateBehind
	default:
		st.State = feed.StateCaughtUp
	}
	return st
}

func (s *memSource) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

func (s *memSource) committedPos() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.committed
}

func (s *memSource) pollCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.polls
}

// got is one delivery a recProc saw.
type got struct {
	d    tidemark.Delivery
	line string
}

// recProc records what it handles. handle, when set, runs first and may
// fail or block.
type recProc struct {
	feeds   []string
	hold    string // feed to hold at start
	handle  func(ctx context.Context, d tidemark.Delivery, line []byte) error
	startFn func(fc *framework.Context) error

	mu       sync.Mutex
	got      []got
	statuses []framework.StatusEvent
	started  int
	stopped  int
	cp       *checkpoint.Checkpoint
}

func (p *recProc) Start(ctx context.Context, fc *framework.Context) error {
	p.mu.Lock()
	p.started++
	p.mu.Unlock()
	if p.startFn != nil {
		if err := p.startFn(fc); err != nil {
			return err
		}
	}
	if p.hold != "" {
		cp := fc.Checkpoint(p.hold)
		p.mu.Lock()
		p.cp = cp
		p.mu.Unlock()
	}
	for _, f := range p.feeds {
		if err := fc.Subscribe(f); err != nil {
			return err
		}
	}
	return nil
}

func (p *recProc) Handle(ctx context.Context, d tidemark.Delivery, line []byte) error {
	if p.handle != nil {
		if err := p.handle(ctx, d, line); err != nil {
			return err
		}
	}
	p.mu.Lock()
	p.got = append(p.got, got{d: d, line: string(line)})
	p.mu.Unlock()
	return nil
}

func (p *recProc) Stop(context.Context) error {
	p.mu.Lock()
	p.stopped++
	p.mu.Unlock()
	return nil
}

func (p *recProc) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.got)
}

func (p *recProc) all() []got {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]got(nil), p.got...)
}

// seqsOf returns the sequence numbers of the lines p handled, in order.
func seqsOf(p *recProc) []uint64 {
	var out []uint64
	for _, g := range p.all() {
		out = append(out, g.d.Seq)
	}
	return out
}

// statusProc is a recProc that also takes status events.
type statusProc struct{ recProc }

func (p *statusProc) HandleStatus(_ context.Context, ev framework.StatusEvent) error {
	p.mu.Lock()
	p.statuses = append(p.statuses, ev)
	p.mu.Unlock()
	return nil
}

// gate blocks handlers until opened; it reports which line waits.
type gate struct {
	mu      sync.Mutex
	open    chan struct{}
	waiting int // seq of the line waiting, 0 if none
}

func newGate() *gate { return &gate{open: make(chan struct{})} }

// wait blocks until the gate opens or ctx ends.
func (g *gate) wait(ctx context.Context, seq uint64) error {
	g.mu.Lock()
	g.waiting = int(seq)
	ch := g.open
	g.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gate) waitingSeq() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.waiting
}

func (g *gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	close(g.open)
}

// logBuf is a concurrency-safe log sink.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuf) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.Reset()
}

func (l *logBuf) contains(s string) bool { return strings.Contains(l.String(), s) }

func (l *logBuf) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// startServer makes and starts a server and stops it at the end of the test.
func startServer(t testing.TB, cfg framework.Config, procs framework.Processors) *framework.Server {
	t.Helper()
	s, err := framework.New(cfg, procs)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		_ = s.Stop(ctx)
	})
	return s
}

func stopServer(t testing.TB, s *framework.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
}

func status(t testing.TB, s *framework.Server, name string) framework.FeedStatus {
	t.Helper()
	st, err := s.FeedStatus(name)
	if err != nil {
		t.Fatalf("FeedStatus(%q): %v", name, err)
	}
	return st
}

func settle(t testing.TB, s *framework.Server, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	if err := s.WaitSettled(ctx, name); err != nil {
		t.Fatalf("WaitSettled(%q): %v", name, err)
	}
}

// countingIdle counts idle cycles and waits a fixed short time.
type countingIdle struct {
	mu sync.Mutex
	n  int
	d  time.Duration
}

func (c *countingIdle) Idle(int) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	if c.d == 0 {
		return time.Millisecond
	}
	return c.d
}

func (c *countingIdle) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// idleCycles waits until the feed runner has gone through n more idle
// cycles: proof that it had the chance to read and did not.
func (c *countingIdle) wait(t testing.TB, n int) {
	t.Helper()
	start := c.count()
	waitFor(t, fmt.Sprintf("%d idle cycles", n), func() bool { return c.count() >= start+n })
}
