package framework_test

import (
	"context"
	"github.com/stretchr/testify/require"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/checkpoint"
	"github.com/tidemark-go/tidemark/feed"
	"github.com/tidemark-go/tidemark/framework"
)

// batchingProc is the spec's BatchingProcessor: it collects lines and, every
// size lines, takes a mark and declares it durable from another goroutine
// once the batch is "saved".
type batchingProc struct {
	size  int
	cp    *checkpoint.Checkpoint
	batch []string
	marks []checkpoint.Mark
	saved sync.WaitGroup
	mu    sync.Mutex
}

func (p *batchingProc) Start(_ context.Context, fc *framework.Context) error {
	p.cp = fc.Checkpoint("orders")
	return fc.Subscribe("orders")
}

func (p *batchingProc) Handle(_ context.Context, _ tidemark.Delivery, line []byte) error {
	p.batch = append(p.batch, string(line))
	if len(p.batch) == p.size {
		m := p.cp.Mark() // excludes the line being handled
		p.mu.Lock()
		p.marks = append(p.marks, m)
		p.mu.Unlock()
		p.batch = p.batch[:0]
		p.saved.Add(1)
		go func() {
			defer p.saved.Done()
			p.cp.DurableThrough(m) // any goroutine
		}()
	}
	return nil
}

// The spec's check: 250 lines, batches of 100, each batch declared durable
// asynchronously: the pointer ends after line 199 (the second mark) and
// holds the rest.
func TestCheckpointSpecBatches(t *testing.T) {
	src := newMemSource(250)
	src.once = true
	idle := &countingIdle{}
	p := &batchingProc{size: 100}
	cfg := oneFeed(src, grp("orders-agent", "p"))
	cfg.Feeds[0].Idle = idle
	s := startServer(t, cfg, framework.Processors{"p": p})
	settle(t, s, "orders")
	p.saved.Wait()
	waitFor(t, "commit through line 199", func() bool { return src.committedPos() == src.pos(199) })
	idle.wait(t, 5)
	require.Equal(t, src.pos(199), src.committedPos(), "the rest is held")
	st := status(t, s, "orders")
	require.False(t, st.Stalled)
	require.EqualValues(t, 51, st.PendingAcks)
	stopServer(t, s)
	require.Equal(t, src.pos(199), src.committedPos(), "the stop's commit holds too")
	require.Len(t, p.marks, 2)
	require.EqualValues(t, checkpoint.Mark{Count: 99, Seq: 99, Epoch: 7, Position: src.pos(99)}.Count, p.marks[0].Count)
	require.EqualValues(t, 199, p.marks[1].Seq)
	require.Equal(t, src.pos(199), p.marks[1].Position)
}

// The host takes the hold with Server.Checkpoint; Release returns the group
// to the default.
func TestHostCheckpointHoldsUntilDurable(t *testing.T) {
	src := newMemSource(10)
	idle := &countingIdle{}
	p := &recProc{feeds: []string{"orders"}}
	cfg := oneFeed(src, grp("g", "p"))
	cfg.Feeds[0].Idle = idle
	s, err := framework.New(cfg, framework.Processors{"p": p})
	require.NoError(t, err)
	cp := s.Checkpoint("orders", "g")
	require.Equal(t, "orders", cp.Feed())
	require.Equal(t, "g", cp.Group())
	require.NoError(t, s.Start(context.Background()))
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	settle(t, s, "orders")
	idle.wait(t, 3)
	require.Equal(t, int64(0), src.committedPos(), "nothing durable yet")
	m := cp.Mark()
	require.EqualValues(t, 10, m.Count)
	require.Equal(t, src.pos(10), m.Position)
	src.appendN(5)
	settle(t, s, "orders")
	cp.DurableThrough(m)
	waitFor(t, "commit through the durable mark", func() bool { return src.committedPos() == src.pos(10) })
	idle.wait(t, 3)
	require.Equal(t, src.pos(10), src.committedPos())
	cp.Release()
	waitFor(t, "commit of everything", func() bool { return src.committedPos() == src.pos(15) })
}

// A group restarted as a new subscriber ignores marks taken before: the
// lines its old queue finished were never declared durable, so they stay
// held.
func TestCheckpointRestartIgnoresOlderMarks(t *testing.T) {
	src := newMemSource(10)
	idle := &countingIdle{}
	p := &recProc{feeds: []string{"orders"}, hold: "orders"}
	cfg := oneFeed(src, grp("g", "p"))
	cfg.Feeds[0].Idle = idle
	s := startServer(t, cfg, framework.Processors{"p": p})
	settle(t, s, "orders")
	old := p.cp.Mark()
	require.EqualValues(t, 10, old.Count)
	require.NoError(t, s.RestartGroup(context.Background(), "g"))
	p.cp.DurableThrough(old)
	src.appendN(5)
	waitFor(t, "new lines", func() bool { return p.count() == 15 })
	d, held := p.cp.Durable()
	require.True(t, held)
	require.EqualValues(t, 0, d.Count, "the old mark is ignored")
	idle.wait(t, 3)
	require.Equal(t, int64(0), src.committedPos())
	requireStalled(t, s, "a removed consumer's checkpoint hold was not declared durable: g")
	// A new mark covers the new queue only.
	p.cp.DurableThrough(p.cp.Mark())
	idle.wait(t, 3)
	require.Equal(t, int64(0), src.committedPos())
	require.NoError(t, s.Release("orders", "g"))
	waitFor(t, "commit of everything", func() bool { return src.committedPos() == src.pos(15) })
}

// Status events pass through the queues in order with the lines, and a
// mark counts them.
func TestStatusEventsCountedByMarks(t *testing.T) {
	src := newMemSource(10)
	src.once = true
	p := &statusProc{recProc{feeds: []string{"orders"}, hold: "orders"}}
	cfg := oneFeed(src, grp("g", "p"))
	cfg.Feeds[0].StatusEvents = true
	s := startServer(t, cfg, framework.Processors{"p": p})
	settle(t, s, "orders")
	p.mu.Lock()
	evs := append([]framework.StatusEvent(nil), p.statuses...)
	p.mu.Unlock()
	require.True(t, len(evs) >= 1, "events: %v", evs)
	last := evs[len(evs)-1]
	require.Equal(t, feed.StateDone, last.State)
	require.Equal(t, "orders", last.Feed)
	require.EqualValues(t, 10, last.Seq)
	require.Equal(t, src.pos(10), last.Position)
	m := p.cp.Mark()
	require.EqualValues(t, 10+len(evs), m.Count)
	require.EqualValues(t, 10, m.Seq, "a mark's line is the last line, not the event")
	p.cp.DurableThrough(m)
	waitFor(t, "commit of everything", func() bool { return src.committedPos() == src.pos(10) })
}

// A clean stop lets the groups drain and commits what they finished after
// the feed stopped reading.
func TestStopDrainsAndCommits(t *testing.T) {
	src := newMemSource(10)
	g := newGate()
	p := blockAt(g, 1)
	var logs logBuf
	cfg := oneFeed(src, grp("g", "p"))
	cfg.Logger = logs.logger()
	s := startServer(t, cfg, framework.Processors{"p": p})
	waitFor(t, "blocked on line 1", func() bool { return g.waitingSeq() == 1 })
	waitFor(t, "every line queued", func() bool { return status(t, s, "orders").Read == 10 })
	stopped := make(chan error, 1)
	go func() { stopped <- s.Stop(context.Background()) }()
	waitFor(t, "the feed stopped reading", func() bool { return logs.contains("feed stopped reading") })
	require.Equal(t, int64(0), src.committedPos())
	g.release()
	require.NoError(t, <-stopped)
	require.Equal(t, 10, p.count())
	require.Equal(t, src.pos(10), src.committedPos(), "lines finished during the drain are committed")
	require.True(t, src.closed)
	require.Equal(t, 1, p.stopped)
}

// A group that does not drain in time leaves its lines uncommitted.
func TestStopDrainTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := newMemSource(10)
		g := newGate()
		p := blockAt(g, 3)
		cfg := oneFeed(src, grp("g", "p"))
		cfg.DrainTimeout = time.Second
		var logs logBuf
		cfg.Logger = logs.logger()
		s := startServer(t, cfg, framework.Processors{"p": p})
		synctest.Wait()
		require.NoError(t, s.Stop(context.Background()))
		require.Equal(t, src.pos(2), src.committedPos())
		require.Equal(t, 1, p.stopped)
		require.True(t, strings.Contains(logs.String(), "drain timed out"), "logged")
	})
}

// The default idle strategy backs off: an idle tailing feed polls about
// once per 50 ms, not in a spin.
func TestIdleFeedBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := newMemSource(0)
		p := &recProc{feeds: []string{"orders"}}
		s := startServer(t, oneFeed(src, grp("g", "p")), framework.Processors{"p": p})
		time.Sleep(10 * time.Second)
		polls := src.pollCount()
		// 1+2+4+8+16+32 ms, then 50 ms: about 200 polls in 10 s.
		require.True(t, polls > 150 && polls < 260, "polls in 10s: %d", polls)
		src.appendN(1)
		waitFor(t, "line read", func() bool { return p.count() == 1 })
		stopServer(t, s)
	})
}

func TestBackoffValues(t *testing.T) {
	ms := time.Millisecond
	var b framework.Backoff
	for n, want := range []time.Duration{1 * ms, 2 * ms, 4 * ms, 8 * ms, 16 * ms, 32 * ms, 50 * ms, 50 * ms} {
		require.Equal(t, want, b.Idle(n))
	}
	require.Equal(t, 100*ms, framework.Backoff{Min: 100 * ms, Max: 10 * ms}.Idle(3))
	require.Equal(t, 7*ms, framework.FixedIdle(7*ms).Idle(99))
}

// flushingProc is a batchingProc that saves its partial batch when the group
// has drained.
type flushingProc struct{ batchingProc }

func (p *flushingProc) Drained(context.Context) error {
	m := p.cp.Mark() // everything: no line is being handled
	p.batch = p.batch[:0]
	p.cp.DurableThrough(m)
	return nil
}

// Drained runs after the drain and before the final commit: a batching
// processor's last partial batch is committed by a clean stop.
func TestDrainerSavesBeforeFinalCommit(t *testing.T) {
	src := newMemSource(250)
	p := &flushingProc{batchingProc{size: 100}}
	s := startServer(t, oneFeed(src, grp("orders-agent", "p")), framework.Processors{"p": p})
	settle(t, s, "orders")
	p.saved.Wait()
	waitFor(t, "commit through line 199", func() bool { return src.committedPos() == src.pos(199) })
	stopServer(t, s)
	require.Equal(t, src.pos(250), src.committedPos())
}
