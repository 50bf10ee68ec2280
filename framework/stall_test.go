package framework_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/stretchr/testify/require"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/feed"
	"github.com/tidemark-go/tidemark/framework"
)

// blockAt returns a processor subscribed to orders whose handler waits on g
// at line seq (ctx-aware).
func blockAt(g *gate, seq uint64) *recProc {
	return &recProc{feeds: []string{"orders"}, handle: func(ctx context.Context, d tidemark.Delivery, _ []byte) error {
		if d.Seq == seq {
			return g.wait(ctx, d.Seq)
		}
		return nil
	}}
}

func stallCfg(src *memSource, idle *countingIdle, groups ...framework.GroupConfig) framework.Config {
	cfg := oneFeed(src, groups...)
	cfg.Feeds[0].QueueCapacity = 1000
	cfg.Feeds[0].Idle = idle
	return cfg
}

func requireStalled(t *testing.T, s *framework.Server, reason string) framework.FeedStatus {
	t.Helper()
	st := status(t, s, "orders")
	require.True(t, st.Stalled, "stalled")
	require.False(t, st.Settled, "a stalled feed is never settled")
	require.Contains(t, st.StallReason, reason)
	err := s.WaitSettled(context.Background(), "orders")
	require.ErrorIs(t, err, framework.ErrStalled)
	var se *framework.StalledError
	require.True(t, errors.As(err, &se))
	require.Equal(t, "orders", se.Feed)
	require.Contains(t, err.Error(), reason)
	return st
}

// Row 1: a consumer with unprocessed lines is removed while others remain.
// The others go on being fed; the pointer stays before the removed
// consumer's first unprocessed line, except that the line it was part way
// through still counts when it finishes; the feed is stalled. Release gives
// the hold up.
func TestRemovedConsumerWithBacklogHoldsPointer(t *testing.T) {
	src := newMemSource(20)
	idle := &countingIdle{}
	g := newGate()
	a := blockAt(g, 5)
	b := &recProc{feeds: []string{"orders"}}
	s := startServer(t, stallCfg(src, idle, grp("A", "a"), grp("B", "b")), framework.Processors{"a": a, "b": b})
	waitFor(t, "A at line 5", func() bool { return g.waitingSeq() == 5 })
	waitFor(t, "B done", func() bool { return b.count() == 20 })

	require.NoError(t, s.Unsubscribe("orders", "A"))
	require.ErrorIs(t, s.Unsubscribe("orders", "A"), framework.ErrNotSubscribed)
	g.release() // A's reader finishes the line it was part way through
	waitFor(t, "commit through line 5", func() bool { return src.committedPos() == src.pos(5) })

	src.appendN(10)
	waitFor(t, "B fed after the removal", func() bool { return b.count() == 30 })
	idle.wait(t, 5)
	require.Equal(t, src.pos(5), src.committedPos(), "the pointer stays before the removed consumer's first unprocessed line")
	require.Equal(t, 5, a.count(), "the removed consumer gets nothing more")
	st := requireStalled(t, s, "a removed consumer left unprocessed items: A (15 items)")
	require.Equal(t, 1, st.Consumers)

	require.NoError(t, s.Release("orders", "A"))
	require.ErrorIs(t, s.Release("orders", "A"), framework.ErrNoHold)
	settle(t, s, "orders")
	waitFor(t, "commit of everything", func() bool { return src.committedPos() == src.pos(30) })
	st = status(t, s, "orders")
	require.EqualValues(t, 1, st.Released)
	require.False(t, st.Stalled)
}

// Row 1, by a restart: the restarted group's old queue holds the pointer
// before the line it was handling (its handling was cancelled), and its new
// queue receives only lines read after it subscribed.
func TestRestartedGroupHoldsBeforeUnfinishedLine(t *testing.T) {
	src := newMemSource(20)
	idle := &countingIdle{}
	g := newGate()
	a := blockAt(g, 5)
	b := &recProc{feeds: []string{"orders"}}
	s := startServer(t, stallCfg(src, idle, grp("A", "a"), grp("B", "b")), framework.Processors{"a": a, "b": b})
	waitFor(t, "A at line 5", func() bool { return g.waitingSeq() == 5 })
	waitFor(t, "B done", func() bool { return b.count() == 20 })
	require.NoError(t, s.RestartGroup(context.Background(), "A"))
	require.Equal(t, 2, a.started)
	require.Equal(t, 1, a.stopped)
	waitFor(t, "commit through line 4", func() bool { return src.committedPos() == src.pos(4) })
	requireStalled(t, s, "a removed consumer left unprocessed items: A (16 items)")
	src.appendN(3)
	waitFor(t, "both fed", func() bool { return b.count() == 23 && a.count() == 7 })
	require.Equal(t, lineText(21), a.all()[4].line, "the new subscriber starts at the next line read")
	idle.wait(t, 3)
	require.Equal(t, src.pos(4), src.committedPos())
}

// Row 2: the last consumer is removed. The source stops reading and
// committing; consumers 0; stalled "no live consumer". A later subscriber
// resumes reading, and the pointer stays before the removed consumer's
// lines.
func TestLastConsumerRemoved(t *testing.T) {
	src := newMemSource(20)
	idle := &countingIdle{}
	g := newGate()
	a := blockAt(g, 5)
	s := startServer(t, stallCfg(src, idle, grp("A", "a")), framework.Processors{"a": a})
	waitFor(t, "A at line 5", func() bool { return g.waitingSeq() == 5 })
	waitFor(t, "commit through line 4", func() bool { return src.committedPos() == src.pos(4) })
	require.NoError(t, s.Unsubscribe("orders", "A"))
	src.appendN(10)
	polls := src.pollCount()
	idle.wait(t, 5)
	st := requireStalled(t, s, "no live consumer")
	require.Equal(t, 0, st.Consumers)
	require.EqualValues(t, 20, st.Read, "nothing read without a consumer")
	require.Equal(t, polls, src.pollCount(), "the source is not polled without a consumer")
	require.Equal(t, src.pos(4), src.committedPos())

	// A later subscriber: the group restarted subscribes a new queue.
	require.NoError(t, s.RestartGroup(context.Background(), "A"))
	waitFor(t, "reading resumed", func() bool { return a.count() == 14 })
	require.Equal(t, lineText(21), a.all()[4].line)
	idle.wait(t, 3)
	st = requireStalled(t, s, "a removed consumer left unprocessed items: A")
	require.Equal(t, 1, st.Consumers)
	require.Equal(t, src.pos(4), src.committedPos(), "the pointer stays before the removed consumer's lines")
}

// Row 3 (dead): a group whose restart failed is dead: the whole feed pauses
// until it is removed.
func TestDeadGroupPausesFeedUntilRemoved(t *testing.T) {
	src := newMemSource(10)
	idle := &countingIdle{}
	var fail bool
	a := &recProc{feeds: []string{"orders"}}
	a.startFn = func(*framework.Context) error {
		if fail {
			return errors.New("cannot restore state")
		}
		return nil
	}
	b := &recProc{feeds: []string{"orders"}}
	s := startServer(t, stallCfg(src, idle, grp("A", "a"), grp("B", "b")), framework.Processors{"a": a, "b": b})
	settle(t, s, "orders")
	fail = true
	// The failing Start subscribes first, so the dead group has a queue.
	a.feeds = nil
	a.startFn = func(fc *framework.Context) error {
		if err := fc.Subscribe("orders"); err != nil {
			return err
		}
		return errors.New("cannot restore state")
	}
	err := s.RestartGroup(context.Background(), "A")
	require.ErrorContains(t, err, "cannot restore state")
	src.appendN(5)
	idle.wait(t, 5)
	requireStalled(t, s, "consumer A fenced or dead")
	require.Equal(t, 10, b.count(), "no consumer receives lines while a group is dead")
	require.EqualValues(t, 10, status(t, s, "orders").Read)

	gs, err := s.GroupStatus("A")
	require.NoError(t, err)
	require.Equal(t, framework.GroupDead, gs.State)
	require.NoError(t, s.RemoveGroup(context.Background(), "A"))
	gs, err = s.GroupStatus("A")
	require.NoError(t, err)
	require.Equal(t, framework.GroupRemoved, gs.State)
	require.Len(t, gs.Feeds, 0)
	require.Equal(t, []string{"orders"}, s.FeedNames())
	require.Equal(t, []string{"A", "B"}, s.GroupNames())
	settle(t, s, "orders")
	require.Equal(t, 15, b.count())
	waitFor(t, "commit of everything", func() bool { return src.committedPos() == src.pos(15) })
}

// Row 4: a consumer that had processed everything it was given is removed:
// it holds nothing.
func TestRemovedConsumerWithoutBacklogHoldsNothing(t *testing.T) {
	src := newMemSource(10)
	a := &recProc{feeds: []string{"orders"}}
	b := &recProc{feeds: []string{"orders"}}
	s := startServer(t, oneFeed(src, grp("A", "a"), grp("B", "b")), framework.Processors{"a": a, "b": b})
	settle(t, s, "orders")
	require.NoError(t, s.Unsubscribe("orders", "A"))
	src.appendN(5)
	settle(t, s, "orders")
	waitFor(t, "commit of everything", func() bool { return src.committedPos() == src.pos(15) })
	st := status(t, s, "orders")
	require.False(t, st.Stalled)
	require.Equal(t, 1, st.Consumers)
	require.Equal(t, 15, b.count())
	require.Equal(t, 10, a.count())
	require.ErrorIs(t, s.Release("orders", "A"), framework.ErrNoHold)
}

// RemoveProcessor stops the processor; the group's queue stays while
// another processor of the group still subscribes, and goes with the last.
func TestRemoveProcessor(t *testing.T) {
	src := newMemSource(10)
	p1 := &recProc{feeds: []string{"orders"}}
	p2 := &recProc{feeds: []string{"orders"}}
	s := startServer(t, oneFeed(src, grp("g", "p1", "p2")), framework.Processors{"p1": p1, "p2": p2})
	settle(t, s, "orders")
	require.NoError(t, s.RemoveProcessor(context.Background(), "g", "p1"))
	require.Equal(t, 1, p1.stopped)
	require.ErrorIs(t, s.RemoveProcessor(context.Background(), "g", "p1"), framework.ErrUnknownProcessor)
	src.appendN(5)
	settle(t, s, "orders")
	require.Equal(t, 10, p1.count())
	require.Equal(t, 15, p2.count())
	require.Equal(t, 1, status(t, s, "orders").Consumers)
	require.NoError(t, s.RemoveProcessor(context.Background(), "g", "p2"))
	st := status(t, s, "orders")
	require.Equal(t, 0, st.Consumers)
	require.Contains(t, st.StallReason, "no live consumer")
	stopServer(t, s)
	require.Equal(t, 1, p1.stopped, "a removed processor is stopped once")
}

func TestOperatorCallsName(t *testing.T) {
	src := newMemSource(1)
	s := startServer(t, oneFeed(src, grp("g")), nil)
	require.ErrorIs(t, s.Unsubscribe("x", "g"), framework.ErrUnknownFeed)
	require.ErrorIs(t, s.Unsubscribe("orders", "x"), framework.ErrUnknownGroup)
	require.ErrorIs(t, s.Release("x", "g"), framework.ErrUnknownFeed)
	require.ErrorIs(t, s.LiftFence("g"), framework.ErrNotFenced)
	require.ErrorIs(t, s.RestartGroup(context.Background(), "x"), framework.ErrUnknownGroup)
	require.ErrorIs(t, s.RemoveGroup(context.Background(), "x"), framework.ErrUnknownGroup)
}

// A source that cannot re-read keeps the containment rule: a removed
// consumer's unfinished lines are counted as dropped and hold nothing, and a
// fenced group does not pause the feed (its full queue drops instead).
func TestNonRereadableSourceDoesNotHold(t *testing.T) {
	src := newMemSource(10)
	src.reread = false
	g := newGate()
	a := blockAt(g, 1)
	b := &recProc{feeds: []string{"orders"}}
	cfg := oneFeed(src, grp("A", "a"), grp("B", "b"))
	cfg.Feeds[0].Overload = framework.OverloadConfig{} // its default: DropAfterSpin
	cfg.Feeds[0].QueueCapacity = 1000
	s := startServer(t, cfg, framework.Processors{"a": a, "b": b})
	defer g.release()
	waitFor(t, "A blocked, B done", func() bool { return g.waitingSeq() == 1 && b.count() == 10 })
	require.NoError(t, s.Unsubscribe("orders", "A"))
	st := status(t, s, "orders")
	require.False(t, st.Stalled, "reason: %s", st.StallReason)
	require.EqualValues(t, 10, st.Dropped, "the removed queue's lost lines are counted, the one being handled too")
	settle(t, s, "orders")
	waitFor(t, "commit of everything", func() bool { return src.committedPos() == src.pos(10) })
}

func TestFencedGroupDoesNotPauseNonRereadableFeed(t *testing.T) {
	src := newMemSource(10)
	src.reread = false
	a := &recProc{feeds: []string{"orders"}, handle: func(_ context.Context, d tidemark.Delivery, _ []byte) error {
		if d.Seq == 2 {
			return errors.New("down")
		}
		return nil
	}}
	b := &recProc{feeds: []string{"orders"}}
	cfg := oneFeed(src, grp("A", "a"), grp("B", "b"))
	cfg.Feeds[0].Overload = framework.OverloadConfig{Policy: framework.DropAfterSpin, Spin: 1e6}
	cfg.Feeds[0].QueueCapacity = 1
	cfg.Feeds[0].BatchSize = 1
	cfg.Groups[0].Failure = framework.FailurePolicy{Retries: -1, Action: framework.Quarantine}
	cfg.DrainTimeout = 10 * time.Millisecond // A stays fenced
	s := startServer(t, cfg, framework.Processors{"a": a, "b": b})
	// B is fed while A is fenced (a loaded machine may make B's queue
	// drop a line too: DropAfterSpin applies to every queue).
	waitFor(t, "B fed while A is fenced", func() bool {
		return uint64(b.count())+status(t, s, "orders").Groups[1].Dropped == 10
	})
	// On a loaded machine B may have all its lines before A's failure
	// has fenced it (CI, 2026-12-07: "Should be true" on Fenced): the
	// fence and A's drops come, they are not timed.
	waitFor(t, "A fenced, its lines dropped", func() bool {
		g := status(t, s, "orders").Groups[0]
		return g.Fenced && g.Dropped >= 7
	})
	st := status(t, s, "orders")
	require.EqualValues(t, 10, st.Read, "the feed did not pause")
	require.True(t, st.Groups[0].Fenced)
	require.False(t, st.Stalled, "reason: %s", st.StallReason)
	require.True(t, st.Groups[0].Dropped >= 7, "dropped for A: %d", st.Groups[0].Dropped)
}

// A failed commit is counted, logged, and tried again by a later cycle; a
// failed poll is counted, logged, and retried.
func TestCommitAndPollErrorsAreRetried(t *testing.T) {
	src := newMemSource(10)
	src.failCommits = 2
	src.failPolls = 1
	var logs logBuf
	p := &recProc{feeds: []string{"orders"}}
	cfg := oneFeed(src, grp("g", "p"))
	cfg.Logger = logs.logger()
	cfg.Feeds[0].BatchSize = 3
	s := startServer(t, cfg, framework.Processors{"p": p})
	settle(t, s, "orders")
	waitFor(t, "commit of everything", func() bool { return src.committedPos() == src.pos(10) })
	st := status(t, s, "orders")
	require.EqualValues(t, 2, st.CommitErrors)
	require.EqualValues(t, 1, st.PollErrors)
	require.Contains(t, logs.String(), "commit failed; the next duty cycle tries again")
	require.Contains(t, logs.String(), "feed read failed; retrying after the idle wait")
	require.Equal(t, 10, p.count())
}

// A hold taken after lines were committed does not move the pointer back.
func TestLateHoldKeepsCommittedLines(t *testing.T) {
	src := newMemSource(10)
	idle := &countingIdle{}
	p := &recProc{feeds: []string{"orders"}}
	s := startServer(t, stallCfg(src, idle, grp("g", "p")), framework.Processors{"p": p})
	waitFor(t, "commit of everything", func() bool { return src.committedPos() == src.pos(10) })
	cp := s.Checkpoint("orders", "g")
	src.appendN(5)
	waitFor(t, "new lines", func() bool { return p.count() == 15 })
	idle.wait(t, 3)
	require.Equal(t, src.pos(10), src.committedPos())
	require.EqualValues(t, 10, status(t, s, "orders").LastCommitSeq)
	cp.DurableThrough(cp.Mark())
	waitFor(t, "commit of the new lines", func() bool { return src.committedPos() == src.pos(15) })
}

// hookSource calls before at the start of each Poll that has lines to give.
// A Poll that found no line to give returns none, even if lines were
// appended meanwhile: the next Poll gives them, after its hook.
type hookSource struct {
	*memSource
	before func()
}

func (h *hookSource) Poll(ctx context.Context, items []feed.Item) (int, error) {
	h.memSource.mu.Lock()
	more := h.memSource.next < len(h.memSource.lines)
	h.memSource.mu.Unlock()
	if !more {
		return 0, nil
	}
	if h.before != nil {
		h.before()
	}
	return h.memSource.Poll(ctx, items)
}

// A batch read while its only consumer is being removed is never committed
// unless a consumer got it: if the removal wins, the batch waits for the
// next subscriber.
func TestBatchReadDuringRemovalIsNotLost(t *testing.T) {
	for i := range 10 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			src := newMemSource(5)
			idle := &countingIdle{}
			a := &recProc{feeds: []string{"orders"}}
			hs := &hookSource{memSource: src}
			cfg := stallCfg(src, idle, grp("A", "a"))
			cfg.Feeds[0].Source = hs
			var s *framework.Server
			removed := make(chan error, 1)
			var once sync.Once
			hs.before = func() {
				if src.next == 5 { // the second batch: remove A while it is read
					once.Do(func() { go func() { removed <- s.Unsubscribe("orders", "A") }() })
				}
			}
			s = startServer(t, cfg, framework.Processors{"a": a})
			waitFor(t, "first batch", func() bool { return a.count() == 5 })
			src.appendN(5)
			require.NoError(t, <-removed)
			idle.wait(t, 3)
			// Whoever won, the pointer is not past a line A did not finish.
			require.LessOrEqual(t, src.committedPos(), src.pos(a.count()))
			require.NoError(t, s.RestartGroup(context.Background(), "A"))
			waitFor(t, "every line finished by someone", func() bool {
				seen := map[string]bool{}
				for _, g := range a.all() {
					seen[g.line] = true
				}
				return len(seen) == 10 || status(t, s, "orders").Stalled
			})
			idle.wait(t, 3)
			finished := map[int64]bool{}
			for _, g := range a.all() {
				finished[g.d.Position] = true
			}
			for j := 1; j <= 10; j++ {
				if src.pos(j) <= src.committedPos() && !finished[src.pos(j)] {
					t.Fatalf("committed through %d, past line %d that no consumer finished", src.committedPos(), j)
				}
			}
		})
	}
}

// A processor that unsubscribes itself (from Handle) with lines left in its
// queue: the line it handled counts, the rest are held.
func TestVoluntaryUnsubscribeHolds(t *testing.T) {
	src := newMemSource(10)
	idle := &countingIdle{}
	var fc *framework.Context
	a := &recProc{feeds: []string{"orders"}}
	a.startFn = func(c *framework.Context) error { fc = c; return nil }
	a.handle = func(_ context.Context, d tidemark.Delivery, _ []byte) error {
		if d.Seq == 5 {
			if err := fc.Unsubscribe("orders"); err != nil {
				return err
			}
			if err := fc.Unsubscribe("orders"); !errors.Is(err, framework.ErrNotSubscribed) {
				t.Errorf("second unsubscribe: %v", err)
			}
		}
		return nil
	}
	b := &recProc{feeds: []string{"orders"}}
	s := startServer(t, stallCfg(src, idle, grp("A", "a"), grp("B", "b")), framework.Processors{"a": a, "b": b})
	waitFor(t, "B done", func() bool { return b.count() == 10 })
	waitFor(t, "commit through line 5", func() bool { return src.committedPos() == src.pos(5) })
	idle.wait(t, 3)
	require.Equal(t, src.pos(5), src.committedPos())
	require.Equal(t, 5, a.count())
	requireStalled(t, s, "a removed consumer left unprocessed items: A (5 items)")
	require.ErrorIs(t, fc.Unsubscribe("nope"), framework.ErrUnknownFeed)
}

// Removing a group's last processor while its group is handling lines: the
// pointer never passes a line the processor did not handle.
func TestRemoveProcessorWhileBusyHoldsUnhandled(t *testing.T) {
	for i := range 10 {
		src := newMemSource(3000)
		idle := &countingIdle{}
		var handled atomic.Int64
		p := &recProc{feeds: []string{"orders"}, handle: func(_ context.Context, d tidemark.Delivery, _ []byte) error {
			handled.Store(int64(d.Seq))
			return nil
		}}
		cfg := stallCfg(src, idle, grp("g", "p"))
		cfg.Feeds[0].BatchSize = 16
		cfg.Feeds[0].QueueCapacity = 64
		s := startServer(t, cfg, framework.Processors{"p": p})
		waitFor(t, "some lines handled", func() bool { return handled.Load() >= 100 })
		require.NoError(t, s.RemoveProcessor(context.Background(), "g", "p"))
		idle.wait(t, 3)
		last := handled.Load()
		require.LessOrEqual(t, src.committedPos(), src.pos(int(last)), "run %d: committed past line %d, the last handled", i, last)
		require.Equal(t, int(last), p.count())
		stopServer(t, s)
	}
}

// A feed paused on a restarting group's full queue hands the waiting batch
// to the group's new queue: the new incarnation starts with it, and the
// lines the old one held stay held.
func TestRestartWhilePausedOnGroupHandsOver(t *testing.T) {
	restartWhilePaused(t)
}

// The same, thirty times: the group B's finished batches wake the paused
// feed (to commit) around the restart, and whichever of the removal and the
// room it made the feed sees first, the batch it waited to hand over goes
// to the restarted group. Before the fix, about one run in ten handed it to
// the removed queue.
func TestRestartWhilePausedHandsOverWhateverTheOrder(t *testing.T) {
	for i := range 30 {
		t.Run(fmt.Sprint(i), restartWhilePaused)
	}
}

func restartWhilePaused(t *testing.T) {
	src := newMemSource(10)
	g := newGate()
	a := blockAt(g, 2)
	b := &recProc{feeds: []string{"orders"}}
	cfg := oneFeed(src, grp("A", "a"), grp("B", "b"))
	cfg.Feeds[0].QueueCapacity = 1
	cfg.Feeds[0].BatchSize = 1
	s := startServer(t, cfg, framework.Processors{"a": a, "b": b})
	waitFor(t, "A at line 2, the feed paused on A with line 4", func() bool {
		return g.waitingSeq() == 2 && b.count() == 3 && status(t, s, "orders").Read == 4
	})
	require.NoError(t, s.RestartGroup(context.Background(), "A"))
	waitFor(t, "both done", func() bool { return b.count() == 10 && a.count() == 8 })
	got := a.all()
	require.Equal(t, lineText(1), got[0].line)
	require.Equal(t, lineText(4), got[1].line, "the new incarnation starts with the batch the feed was waiting to hand over")
	require.Equal(t, src.pos(1), src.committedPos())
	requireStalled(t, s, "a removed consumer left unprocessed items: A (2 items)")
}
