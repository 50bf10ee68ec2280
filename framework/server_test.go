package framework_test

import (
	"context"
	"errors"
	"github.com/stretchr/testify/require"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/framework"
)

func oneFeed(src *memSource, groups ...framework.GroupConfig) framework.Config {
	return framework.Config{
		Feeds:  []framework.FeedConfig{{Name: "orders", Source: src, Overload: framework.OverloadConfig{Policy: framework.Pause}}},
		Groups: groups,
		Logger: discard(),
	}
}

func grp(name string, procs ...string) framework.GroupConfig {
	return framework.GroupConfig{Name: name, Processors: procs}
}

func TestDeliversEveryLineInOrderAndCommits(t *testing.T) {
	src := newMemSource(1000)
	p := &recProc{feeds: []string{"orders"}}
	s := startServer(t, oneFeed(src, grp("g", "p")), framework.Processors{"p": p})
	settle(t, s, "orders")
	waitFor(t, "commit of the last line", func() bool { return src.committedPos() == src.pos(1000) })
	gotAll := p.all()
	require.Len(t, gotAll, 1000)
	for i, g := range gotAll {
		require.Equal(t, lineText(i+1), g.line)
		require.Equal(t, tidemark.Delivery{Feed: "orders", Epoch: 7, Position: src.pos(i + 1), Seq: uint64(i + 1)}, g.d)
	}
	st := status(t, s, "orders")
	require.True(t, st.Settled)
	require.False(t, st.Stalled)
	require.Equal(t, 1, st.Consumers)
	require.EqualValues(t, 1000, st.Read)
	require.EqualValues(t, 1000, st.Delivered)
	require.Equal(t, framework.Pause, st.Policy)
	require.Len(t, st.Groups, 1)
	require.EqualValues(t, 1000, st.Groups[0].Processed)
	require.EqualValues(t, 0, st.Groups[0].Depth)
	require.EqualValues(t, 0, st.PendingAcks)
	stopServer(t, s)
	require.Equal(t, 1, p.stopped)
}

// The pointer follows the slowest group: a group that processed everything
// does not move it past lines another group has not finished, and it never
// moves back.
func TestSlowGroupHoldsPointerNotOthers(t *testing.T) {
	src := newMemSource(100)
	g := newGate()
	slow := &recProc{feeds: []string{"orders"}, handle: func(ctx context.Context, d tidemark.Delivery, _ []byte) error {
		if d.Seq == 10 {
			return g.wait(ctx, d.Seq)
		}
		return nil
	}}
	fast := &recProc{feeds: []string{"orders"}}
	cfg := oneFeed(src, grp("slow", "slow"), grp("fast", "fast"))
	cfg.Feeds[0].QueueCapacity = 1000
	s := startServer(t, cfg, framework.Processors{"slow": slow, "fast": fast})
	waitFor(t, "fast group done", func() bool { return fast.count() == 100 })
	waitFor(t, "slow group at line 10", func() bool { return g.waitingSeq() == 10 })
	// Let the runner go through duty cycles: the pointer stays at line 9.
	waitFor(t, "commit of line 9", func() bool { return src.committedPos() == src.pos(9) })
	st := status(t, s, "orders")
	require.False(t, st.Settled)
	require.False(t, st.Stalled)
	require.EqualValues(t, 91, st.PendingAcks)
	g.release()
	settle(t, s, "orders")
	waitFor(t, "commit of the last line", func() bool { return src.committedPos() == src.pos(100) })
	stopServer(t, s)
	src.mu.Lock()
	defer src.mu.Unlock()
	require.True(t, slices.IsSorted(src.commits), "commits move forward only: %v", src.commits)
}

func TestSequenceStartsAtOneEveryRun(t *testing.T) {
	src := newMemSource(50)
	p := &recProc{feeds: []string{"orders"}}
	s := startServer(t, oneFeed(src, grp("g", "p")), framework.Processors{"p": p})
	settle(t, s, "orders")
	stopServer(t, s)
	require.Equal(t, src.pos(50), src.committedPos())

	src2 := src.restart()
	src2.appendN(5)
	p2 := &recProc{feeds: []string{"orders"}}
	s2 := startServer(t, oneFeed(src2, grp("g", "p")), framework.Processors{"p": p2})
	settle(t, s2, "orders")
	stopServer(t, s2)
	all := p2.all()
	require.Len(t, all, 5)
	require.EqualValues(t, 1, all[0].d.Seq)
	require.Equal(t, lineText(51), all[0].line)
	require.Equal(t, src2.pos(51), all[0].d.Position)
}

// A duty cycle commits before it polls.
func TestDutyCycleCommitsThenPolls(t *testing.T) {
	src := newMemSource(3)
	src.traceOn = true
	p := &recProc{feeds: []string{"orders"}}
	s := startServer(t, oneFeed(src, grp("g", "p")), framework.Processors{"p": p})
	waitFor(t, "commit", func() bool { return src.committedPos() == src.pos(3) })
	stopServer(t, s)
	src.mu.Lock()
	defer src.mu.Unlock()
	// Every poll is preceded by a commit attempt of its cycle: the source
	// only sees commits that advance, so check the first two events.
	require.Equal(t, "poll", src.trace[0])
	i := slices.Index(src.trace, "commit")
	require.Positive(t, i)
	require.Equal(t, "poll", src.trace[i+1], "after committing, the cycle polls")
}

func TestStartSubscribeUnknownFeedFails(t *testing.T) {
	src := newMemSource(1)
	p := &recProc{feeds: []string{"nope"}}
	s, err := framework.New(oneFeed(src, grp("g", "p")), framework.Processors{"p": p})
	require.NoError(t, err)
	err = s.Start(context.Background())
	require.ErrorIs(t, err, framework.ErrUnknownFeed)
	require.ErrorContains(t, err, `"nope"`)
	require.True(t, src.closed, "a failed start closes the sources")
	require.ErrorIs(t, s.Stop(context.Background()), framework.ErrState)
}

func TestNewValidates(t *testing.T) {
	src := newMemSource(1)
	p := &recProc{}
	for name, tc := range map[string]struct {
		cfg   framework.Config
		procs framework.Processors
		want  string
	}{
		"unknown processor":   {oneFeed(src, grp("g", "x")), framework.Processors{"p": p}, `processor "x" of group "g" is not in the registry`},
		"processor twice":     {oneFeed(src, grp("g", "p"), grp("h", "p")), framework.Processors{"p": p}, `processor "p" is in groups "g" and "h"`},
		"group twice":         {oneFeed(src, grp("g", "p"), grp("g")), framework.Processors{"p": p}, `group "g" is defined twice`},
		"group without name":  {oneFeed(src, grp("")), nil, "processor group 1 has no agentName"},
		"feed without source": {framework.Config{Feeds: []framework.FeedConfig{{Name: "f"}}}, nil, `feed "f" has neither a source nor a filename`},
		"feed without name":   {framework.Config{Feeds: []framework.FeedConfig{{Source: src}}}, nil, "feed 1 has no name"},
		"bad policy":          {framework.Config{Feeds: []framework.FeedConfig{{Name: "f", Source: src, Overload: framework.OverloadConfig{Policy: 9}}}}, nil, `feed "f": unknown overload policy 9`},
		"bad action":          {framework.Config{Groups: []framework.GroupConfig{{Name: "g", Failure: framework.FailurePolicy{Action: 5}}}}, nil, `group "g": unknown failure action 5`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := framework.New(tc.cfg, tc.procs)
			require.ErrorIs(t, err, framework.ErrInvalidConfig)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestStatusUnknownFeed(t *testing.T) {
	src := newMemSource(1)
	s, err := framework.New(oneFeed(src), nil)
	require.NoError(t, err)
	_, err = s.FeedStatus("x")
	require.ErrorIs(t, err, framework.ErrUnknownFeed)
}

func TestWaitSettledTimesOutWithContextError(t *testing.T) {
	src := newMemSource(5)
	g := newGate()
	p := &recProc{feeds: []string{"orders"}, handle: func(ctx context.Context, d tidemark.Delivery, _ []byte) error {
		return g.wait(ctx, d.Seq)
	}}
	cfg := oneFeed(src, grp("g", "p"))
	s := startServer(t, cfg, framework.Processors{"p": p})
	waitFor(t, "handler blocked", func() bool { return g.waitingSeq() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 20*1e6)
	defer cancel()
	err := s.WaitSettled(ctx, "orders")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, framework.ErrStalled)
	g.release()
	settle(t, s, "orders")
}

// Groups run on their own goroutines: two groups handle lines at the same
// time.
func TestGroupsRunConcurrently(t *testing.T) {
	src := newMemSource(1)
	var inA, inB atomic.Bool
	both := make(chan struct{})
	var once atomic.Bool
	mk := func(me, other *atomic.Bool) *recProc {
		return &recProc{feeds: []string{"orders"}, handle: func(ctx context.Context, _ tidemark.Delivery, _ []byte) error {
			me.Store(true)
			if other.Load() && once.CompareAndSwap(false, true) {
				close(both)
			}
			select {
			case <-both:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}}
	}
	a, b := mk(&inA, &inB), mk(&inB, &inA)
	s := startServer(t, oneFeed(src, grp("a", "a"), grp("b", "b")), framework.Processors{"a": a, "b": b})
	settle(t, s, "orders")
	require.Equal(t, 1, a.count())
	require.Equal(t, 1, b.count())
}

func TestStartTwiceAndStopBeforeStart(t *testing.T) {
	src := newMemSource(1)
	s, err := framework.New(oneFeed(src), nil)
	require.NoError(t, err)
	require.NoError(t, s.Start(context.Background()))
	require.True(t, errors.Is(s.Start(context.Background()), framework.ErrState))
	stopServer(t, s)
	require.ErrorIs(t, s.Stop(context.Background()), framework.ErrState, "a second stop")

	// Stop before Start releases what New opened; the server cannot start
	// afterwards.
	src = newMemSource(1)
	s, err = framework.New(oneFeed(src), nil)
	require.NoError(t, err)
	require.NoError(t, s.Stop(context.Background()))
	require.True(t, src.closed)
	<-s.Done()
	require.ErrorIs(t, s.Start(context.Background()), framework.ErrState)
}

// A group subscribed to two feeds receives the lines of both, each with its
// feed's name, and each feed commits on its own.
func TestGroupOnTwoFeeds(t *testing.T) {
	orders, trades := newMemSource(20), newMemSource(30)
	p := &recProc{feeds: []string{"orders", "trades"}}
	cfg := framework.Config{
		Feeds: []framework.FeedConfig{
			{Name: "orders", Source: orders, Overload: framework.OverloadConfig{Policy: framework.Pause}},
			{Name: "trades", Source: trades, Overload: framework.OverloadConfig{Policy: framework.Pause}},
		},
		Groups: []framework.GroupConfig{grp("g", "p")},
		Logger: discard(),
	}
	s := startServer(t, cfg, framework.Processors{"p": p})
	settle(t, s, "orders")
	settle(t, s, "trades")
	stopServer(t, s)
	byFeed := map[string][]got{}
	for _, g := range p.all() {
		byFeed[g.d.Feed] = append(byFeed[g.d.Feed], g)
	}
	require.Len(t, byFeed["orders"], 20)
	require.Len(t, byFeed["trades"], 30)
	for i, g := range byFeed["trades"] {
		require.EqualValues(t, i+1, g.d.Seq, "each feed numbers its lines")
	}
	require.Equal(t, orders.pos(20), orders.committedPos())
	require.Equal(t, trades.pos(30), trades.committedPos())
}

// A processor may subscribe late, while its group runs: it receives the
// lines read after it subscribed, none lost to a race with its queue's
// creation.
func TestLateSubscribe(t *testing.T) {
	for i := range 20 {
		orders, trades := newMemSource(5), newMemSource(50)
		var fc *framework.Context
		p := &recProc{feeds: []string{"orders"}}
		p.startFn = func(c *framework.Context) error { fc = c; return nil }
		cfg := framework.Config{
			Feeds: []framework.FeedConfig{
				{Name: "orders", Source: orders, Overload: framework.OverloadConfig{Policy: framework.Pause}},
				{Name: "trades", Source: trades, Overload: framework.OverloadConfig{Policy: framework.Pause}, BatchSize: 1},
			},
			Groups: []framework.GroupConfig{grp("g", "p")},
			Logger: discard(),
		}
		s := startServer(t, cfg, framework.Processors{"p": p})
		settle(t, s, "orders")
		require.NoError(t, fc.Subscribe("trades"))
		settle(t, s, "trades")
		stopServer(t, s)
		n := 0
		for _, g := range p.all() {
			if g.d.Feed == "trades" {
				n++
			}
		}
		require.Equal(t, 50, n, "run %d: every trade line handled", i)
	}
}

// A processor's logger names its group and itself.
func TestContextLogger(t *testing.T) {
	src := newMemSource(1)
	var logs logBuf
	p := &recProc{feeds: []string{"orders"}}
	p.startFn = func(fc *framework.Context) error {
		require.Equal(t, "g", fc.Group())
		require.Equal(t, "p", fc.Name())
		fc.Logger().Info("hello")
		return nil
	}
	cfg := oneFeed(src, grp("g", "p"))
	cfg.Logger = logs.logger()
	s := startServer(t, cfg, framework.Processors{"p": p})
	settle(t, s, "orders")
	require.Contains(t, logs.String(), "msg=hello group=g processor=p")
}

// Stop reports a failed final commit.
func TestStopReportsFailedFinalCommit(t *testing.T) {
	src := newMemSource(3)
	g := newGate()
	p := blockAt(g, 1)
	s := startServer(t, oneFeed(src, grp("g", "p")), framework.Processors{"p": p})
	waitFor(t, "blocked", func() bool { return g.waitingSeq() == 1 })
	src.mu.Lock()
	src.failCommits = 1000
	src.mu.Unlock()
	g.release()
	err := s.Stop(context.Background())
	require.ErrorContains(t, err, "the final commit failed")
	require.ErrorContains(t, err, "pointer write failed")
	require.Equal(t, int64(0), src.committedPos())
}

// A processor that subscribes while its group is in the middle of a batch
// gets the lines from the next one on, in that batch too; the one already
// subscribed keeps getting every line once. (The source has the 20 lines
// from the start, and its first poll hands them all: one batch.)
func TestProcessorJoiningMidBatchGetsTheNextLine(t *testing.T) {
	src := newMemSource(20)
	var bfc *framework.Context
	b := &recProc{startFn: func(fc *framework.Context) error { bfc = fc; return nil }}
	a := &recProc{feeds: []string{"orders"}, handle: func(_ context.Context, d tidemark.Delivery, _ []byte) error {
		if d.Seq == 5 {
			return bfc.Subscribe("orders")
		}
		return nil
	}}
	s := startServer(t, oneFeed(src, grp("g", "a", "b")), framework.Processors{"a": a, "b": b})
	settle(t, s, "orders")
	var wantA, wantB []uint64
	for i := uint64(1); i <= 20; i++ {
		wantA = append(wantA, i)
		if i > 5 {
			wantB = append(wantB, i)
		}
	}
	require.Equal(t, wantA, seqsOf(a))
	require.Equal(t, wantB, seqsOf(b), "b gets the lines after the one during which it subscribed")
}
