package framework_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/stretchr/testify/require"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/framework"
)

// Pause: a full queue stops the feed from reading, and nothing is dropped.
func TestPauseStopsReadingWhenQueueFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := newMemSource(100)
		g := newGate()
		a := blockAt(g, 1)
		cfg := oneFeed(src, grp("A", "a"))
		cfg.Feeds[0].QueueCapacity = 1
		cfg.Feeds[0].BatchSize = 1
		s := startServer(t, cfg, framework.Processors{"a": a})
		synctest.Wait()
		time.Sleep(time.Minute) // a minute of the bubble's clock: the feed stays paused
		synctest.Wait()
		st := status(t, s, "orders")
		// Line 1 is being handled, line 2 waits in the queue, line 3 was
		// read and waits for room.
		require.EqualValues(t, 3, st.Read)
		require.EqualValues(t, 1, st.ReadPending)
		require.EqualValues(t, 0, st.Dropped)
		g.release()
		settle(t, s, "orders")
		require.Equal(t, 100, a.count())
		require.EqualValues(t, 0, status(t, s, "orders").Dropped)
		stopServer(t, s)
		require.Equal(t, src.pos(100), src.committedPos())
	})
}

// DropAfterSpin: the full queue's lines are dropped for that queue only,
// counted, logged with feed, group, seq and position, and committed past.
func TestDropAfterSpinDropsForFullQueueOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := newMemSource(10)
		g := newGate()
		a := blockAt(g, 1)
		b := &recProc{feeds: []string{"orders"}}
		var logs logBuf
		cfg := oneFeed(src, grp("A", "a"), grp("B", "b"))
		cfg.Logger = logs.logger()
		cfg.Feeds[0].QueueCapacity = 1
		cfg.Feeds[0].BatchSize = 1
		cfg.Feeds[0].Overload = framework.OverloadConfig{Policy: framework.DropAfterSpin, Spin: time.Second}
		s := startServer(t, cfg, framework.Processors{"a": a, "b": b})
		waitFor(t, "B done", func() bool { return b.count() == 10 })
		g.release()
		settle(t, s, "orders")
		st := status(t, s, "orders")
		require.EqualValues(t, 10, uint64(a.count())+st.Dropped, "every line is processed or dropped")
		require.True(t, st.Dropped >= 7, "dropped %d", st.Dropped)
		require.EqualValues(t, st.Dropped, st.Groups[0].Dropped)
		require.EqualValues(t, 0, st.Groups[1].Dropped)
		last := a.all()[a.count()-1].d.Seq
		require.Contains(t, logs.String(), fmt.Sprintf("lines dropped for this group and committed past\" feed=orders group=A lines=1 first_seq=%d epoch=7 first_position=%d", last+1, src.pos(int(last)+1)))
		waitFor(t, "commit past the dropped lines", func() bool { return src.committedPos() == src.pos(10) })
		stopServer(t, s)
	})
}

// Under sustained overload the drops are reported at most once a second
// per queue, each report counting what was dropped since the last one;
// status counts every line.
func TestDropReportsAreRateLimited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := newMemSource(300)
		g := newGate()
		a := blockAt(g, 1)
		var logs logBuf
		cfg := oneFeed(src, grp("A", "a"))
		cfg.Logger = logs.logger()
		cfg.Feeds[0].QueueCapacity = 1
		cfg.Feeds[0].BatchSize = 1
		cfg.Feeds[0].Overload = framework.OverloadConfig{Policy: framework.DropAfterSpin, Spin: 10 * time.Millisecond}
		s := startServer(t, cfg, framework.Processors{"a": a})
		// Line 1 blocks, line 2 waits in the queue: the other 298 are
		// dropped, one every 10 ms of the bubble's clock (about 3 s).
		waitFor(t, "298 lines dropped", func() bool { return status(t, s, "orders").Dropped == 298 })
		reports := strings.Count(logs.String(), "lines dropped for this group and committed past")
		require.GreaterOrEqual(t, reports, 2, "the first drop and at least one later report")
		require.LessOrEqual(t, reports, 5, "at most one report a second over about three seconds: %d", reports)
		g.release()
		settle(t, s, "orders")
		stopServer(t, s)
		require.Contains(t, logs.String(), "dropped_total=298", "the drops after the last report are reported when the feed stops")
	})
}

func TestDefaultOverloadPolicyIsLogged(t *testing.T) {
	for _, tc := range []struct {
		reread   bool
		explicit framework.OverloadPolicy
		want     framework.OverloadPolicy
		log      string
	}{
		{true, framework.PolicyDefault, framework.Pause, "policy=PAUSE reason=\"the source re-reads"},
		{false, framework.PolicyDefault, framework.DropAfterSpin, "policy=DROP_AFTER_SPIN reason=\"the source cannot re-read"},
		{true, framework.DropAfterSpin, framework.DropAfterSpin, ""},
		{false, framework.Pause, framework.Pause, ""},
	} {
		t.Run(fmt.Sprint(tc.reread, tc.explicit), func(t *testing.T) {
			src := newMemSource(1)
			src.reread = tc.reread
			var logs logBuf
			cfg := oneFeed(src, grp("g"))
			cfg.Feeds[0].Overload.Policy = tc.explicit
			cfg.Logger = logs.logger()
			s := startServer(t, cfg, nil)
			require.Equal(t, tc.want, status(t, s, "orders").Policy)
			const msg = "feed has no explicit overload policy: using the source's default"
			if tc.log == "" {
				require.False(t, logs.contains(msg), "no warning for an explicit policy")
			} else {
				require.Contains(t, logs.String(), msg)
				require.Contains(t, logs.String(), "feed=orders "+tc.log)
			}
		})
	}
}

func failCfg(src *memSource, pol framework.FailurePolicy, groups ...framework.GroupConfig) framework.Config {
	cfg := oneFeed(src, groups...)
	cfg.Feeds[0].QueueCapacity = 1000
	cfg.Groups[0].Failure = pol
	return cfg
}

// Skip: after the retries, the line is rejected (callback, log, count) and
// counts as finished.
func TestFailureSkipAfterRetries(t *testing.T) {
	src := newMemSource(10)
	var mu sync.Mutex
	var rejected []framework.Rejection
	p := &recProc{feeds: []string{"orders"}, handle: func(_ context.Context, d tidemark.Delivery, _ []byte) error {
		if d.Seq == 3 {
			return errors.New("bad amount")
		}
		return nil
	}}
	var logs logBuf
	cfg := failCfg(src, framework.FailurePolicy{Retries: 2, Backoff: time.Millisecond, OnReject: func(r framework.Rejection) {
		mu.Lock()
		rejected = append(rejected, r)
		mu.Unlock()
	}}, grp("g", "p"))
	cfg.Logger = logs.logger()
	s := startServer(t, cfg, framework.Processors{"p": p})
	settle(t, s, "orders")
	waitFor(t, "commit of everything", func() bool { return src.committedPos() == src.pos(10) })
	st := status(t, s, "orders")
	require.EqualValues(t, 3, st.Failed, "the first attempt and two retries")
	require.EqualValues(t, 1, st.Skipped)
	require.EqualValues(t, 1, st.Groups[0].Skipped)
	require.EqualValues(t, 10, st.Groups[0].Processed)
	require.Equal(t, 9, p.count())
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, rejected, 1)
	r := rejected[0]
	require.Equal(t, "g", r.Group)
	require.Equal(t, "p", r.Processor)
	require.Equal(t, lineText(3), string(r.Line))
	require.Equal(t, tidemark.Delivery{Feed: "orders", Epoch: 7, Position: src.pos(3), Seq: 3}, r.Delivery)
	require.ErrorContains(t, r.Err, "bad amount")
	require.Contains(t, logs.String(), fmt.Sprintf("line skipped\" group=g feed=orders processor=p epoch=7 position=%d seq=3", src.pos(3)))
}

func TestFailureRetrySucceeds(t *testing.T) {
	src := newMemSource(5)
	var fails atomic.Int32
	p := &recProc{feeds: []string{"orders"}, handle: func(_ context.Context, d tidemark.Delivery, _ []byte) error {
		if d.Seq == 2 && fails.Add(1) <= 2 {
			return errors.New("transient")
		}
		return nil
	}}
	s := startServer(t, failCfg(src, framework.FailurePolicy{Retries: 3, Backoff: time.Millisecond}, grp("g", "p")), framework.Processors{"p": p})
	settle(t, s, "orders")
	st := status(t, s, "orders")
	require.EqualValues(t, 2, st.Failed)
	require.EqualValues(t, 0, st.Skipped)
	require.Equal(t, 5, p.count())
}

// A panic in a processor is an error for the failure policy, not a crash.
func TestProcessorPanicIsAnError(t *testing.T) {
	src := newMemSource(5)
	var got error
	p := &recProc{feeds: []string{"orders"}, handle: func(_ context.Context, d tidemark.Delivery, _ []byte) error {
		if d.Seq == 2 {
			panic("nil map")
		}
		return nil
	}}
	s := startServer(t, failCfg(src, framework.FailurePolicy{Retries: -1, OnReject: func(r framework.Rejection) { got = r.Err }}, grp("g", "p")), framework.Processors{"p": p})
	settle(t, s, "orders")
	stopServer(t, s)
	var pe *framework.PanicError
	require.True(t, errors.As(got, &pe), "rejection carries a *PanicError: %v", got)
	require.Equal(t, "nil map", pe.Value)
	require.Contains(t, string(pe.Stack), "TestProcessorPanicIsAnError")
	require.Equal(t, 4, p.count())
}

// Panics in the middle of a batch, in a group's only processor (the group's
// loop for one processor) or in the first of two: each panicking line goes
// through the policy (here a retry that succeeds, or a skip) for that
// processor only; the other processor still gets it, the rest of the batch
// runs in order, once, and the pointer reaches the end of the batch (every
// line counts as finished, the skipped ones too). The panics fall on the
// first and the last line of the batch, and on two lines in a row.
func TestPanicsMidBatchResumeTheBatch(t *testing.T) {
	for _, two := range []bool{false, true} {
		t.Run(map[bool]string{false: "one processor", true: "two processors"}[two], func(t *testing.T) {
			src := newMemSource(20)
			var mu sync.Mutex
			tries := map[uint64]int{}
			var rejected []uint64
			a := &recProc{feeds: []string{"orders"}, handle: func(_ context.Context, d tidemark.Delivery, _ []byte) error {
				mu.Lock()
				tries[d.Seq]++
				n := tries[d.Seq]
				mu.Unlock()
				switch {
				case (d.Seq == 1 || d.Seq == 4) && n == 1: // panics once: the retry succeeds
					panic("transient")
				case d.Seq == 9 || d.Seq == 10 || d.Seq == 20: // panics every time: skipped
					panic(fmt.Sprintf("bad line %d", d.Seq))
				}
				return nil
			}}
			b := &recProc{feeds: []string{"orders"}}
			pol := framework.FailurePolicy{Retries: 1, Backoff: time.Millisecond, OnReject: func(r framework.Rejection) {
				mu.Lock()
				rejected = append(rejected, r.Delivery.Seq)
				mu.Unlock()
			}}
			gc, procs := grp("g", "a"), framework.Processors{"a": a}
			if two {
				gc, procs = grp("g", "a", "b"), framework.Processors{"a": a, "b": b}
			}
			s := startServer(t, failCfg(src, pol, gc), procs)
			settle(t, s, "orders")
			waitFor(t, "commit of the last line", func() bool { return src.committedPos() == src.pos(20) })
			var wantA, wantB []uint64
			for i := uint64(1); i <= 20; i++ {
				wantB = append(wantB, i)
				if i != 9 && i != 10 && i != 20 {
					wantA = append(wantA, i)
				}
			}
			require.Equal(t, wantA, seqsOf(a), "a handled every line once, in order, but the skipped ones")
			if two {
				require.Equal(t, wantB, seqsOf(b), "b handled every line once, in order")
			}
			st := status(t, s, "orders")
			require.EqualValues(t, 3, st.Skipped)
			require.EqualValues(t, 8, st.Failed, "lines 1 and 4 once, lines 9, 10 and 20 twice each")
			mu.Lock()
			defer mu.Unlock()
			require.Equal(t, []uint64{9, 10, 20}, rejected)
			require.Equal(t, 2, tries[1])
			require.Equal(t, 2, tries[4])
			require.Equal(t, 1, tries[5])
		})
	}
}

// The retry back-off sleeps only its own group, and a clean stop cuts it
// short (the timer watches the group's context).
func TestRetryBackoffSleepsOnlyItsGroup(t *testing.T) {
	src := newMemSource(10)
	a := &recProc{feeds: []string{"orders"}, handle: func(context.Context, tidemark.Delivery, []byte) error {
		return errors.New("down")
	}}
	b := &recProc{feeds: []string{"orders"}}
	cfg := failCfg(src, framework.FailurePolicy{Retries: 5, Backoff: time.Hour}, grp("A", "a"), grp("B", "b"))
	cfg.DrainTimeout = 10 * time.Millisecond
	s := startServer(t, cfg, framework.Processors{"a": a, "b": b})
	waitFor(t, "B done, A failed once and sleeps", func() bool {
		return b.count() == 10 && status(t, s, "orders").Failed == 1
	})
	stopServer(t, s)
	require.Equal(t, int64(0), src.committedPos(), "A finished nothing")
}

func quarantineSetup(t *testing.T, procsA ...string) (*memSource, *countingIdle, *framework.Server, *atomic.Bool, *recProc) {
	src := newMemSource(10)
	idle := &countingIdle{}
	var broken atomic.Bool
	broken.Store(true)
	reg := framework.Processors{}
	for _, name := range procsA {
		fail := name == "a"
		reg[name] = &recProc{feeds: []string{"orders"}, handle: func(_ context.Context, d tidemark.Delivery, _ []byte) error {
			if fail && d.Seq == 5 && broken.Load() {
				return errors.New("store offline")
			}
			return nil
		}}
	}
	b := &recProc{feeds: []string{"orders"}}
	reg["b"] = b
	cfg := failCfg(src, framework.FailurePolicy{Retries: -1, Action: framework.Quarantine}, grp("A", procsA...), grp("B", "b"))
	cfg.Feeds[0].Idle = idle
	s := startServer(t, cfg, reg)
	waitFor(t, "A fenced", func() bool { return status(t, s, "orders").Stalled })
	requireStalled(t, s, "consumer A fenced or dead")
	require.True(t, status(t, s, "orders").Groups[0].Fenced)
	// The whole feed pauses: nothing more is read for any consumer.
	src.appendN(5)
	idle.wait(t, 5)
	require.EqualValues(t, 10, status(t, s, "orders").Read)
	waitFor(t, "B finished what it was given", func() bool { return b.count() == 10 })
	require.Equal(t, src.pos(4), src.committedPos())
	return src, idle, s, &broken, b
}

// Quarantine fences the group; the feed pauses for every consumer until the
// fence lifts; then the group retries the line.
func TestQuarantineFencesFeedUntilLifted(t *testing.T) {
	src, _, s, broken, b := quarantineSetup(t, "a")
	gs, err := s.GroupStatus("A")
	require.NoError(t, err)
	require.Equal(t, framework.GroupFenced, gs.State)
	require.Equal(t, []string{"orders"}, gs.Feeds)
	require.Equal(t, "a", gs.Fence.Processor)
	require.Equal(t, src.pos(5), gs.Fence.Delivery.Position)
	require.ErrorContains(t, gs.Fence.Err, "store offline")
	broken.Store(false)
	require.NoError(t, s.LiftFence("A"))
	settle(t, s, "orders")
	require.Equal(t, 15, b.count())
	waitFor(t, "commit of everything", func() bool { return src.committedPos() == src.pos(15) })
	st := status(t, s, "orders")
	require.EqualValues(t, 1, st.Failed)
	require.EqualValues(t, 15, st.Groups[0].Processed)
	gs, err = s.GroupStatus("A")
	require.NoError(t, err)
	require.Equal(t, framework.GroupRunning, gs.State)
	require.True(t, gs.Fence == nil)
	_, err = s.GroupStatus("x")
	require.ErrorIs(t, err, framework.ErrUnknownGroup)
}

// Removing the processor that failed lifts the fence; the group goes on
// with the others and the line counts as finished.
func TestQuarantineLiftedByRemovingProcessor(t *testing.T) {
	src, _, s, _, b := quarantineSetup(t, "a", "a2")
	require.NoError(t, s.RemoveProcessor(context.Background(), "A", "a"))
	settle(t, s, "orders")
	require.Equal(t, 15, b.count())
	waitFor(t, "commit of everything", func() bool { return src.committedPos() == src.pos(15) })
}

// Restarting a quarantined group lifts the fence; its old queue holds the
// pointer before the failed line.
func TestQuarantineLiftedByRestart(t *testing.T) {
	src, idle, s, broken, b := quarantineSetup(t, "a")
	broken.Store(false)
	require.NoError(t, s.RestartGroup(context.Background(), "A"))
	waitFor(t, "B fed again", func() bool { return b.count() == 15 })
	idle.wait(t, 3)
	require.Equal(t, src.pos(4), src.committedPos())
	requireStalled(t, s, "a removed consumer left unprocessed items: A (6 items)")
}

// reasonErr names its reason for the skip counts.
type reasonErr string

func (e reasonErr) Error() string        { return "bad line: " + string(e) }
func (e reasonErr) RejectReason() string { return string(e) }

// A feed of bad lines is counted by reason and logged a few times, not
// once a line: the first skip with its position and error, then one
// record a second at most with the count since, and the rest at the stop.
func TestSkipsAreCountedByReasonAndLogsBounded(t *testing.T) {
	const n = 5000
	src := newMemSource(n)
	p := &recProc{feeds: []string{"orders"}, handle: func(_ context.Context, d tidemark.Delivery, _ []byte) error {
		switch d.Seq % 3 {
		case 0:
			return framework.Permanent(reasonErr("malformed"))
		case 1:
			return framework.Permanent(errors.New("no reason given"))
		}
		panic("boom")
	}}
	var logs logBuf
	cfg := failCfg(src, framework.FailurePolicy{Retries: framework.NoRetries}, grp("g", "p"))
	cfg.Logger = logs.logger()
	s := startServer(t, cfg, framework.Processors{"p": p})
	settle(t, s, "orders")
	st := status(t, s, "orders")
	require.EqualValues(t, n, st.Skipped)
	require.Equal(t, map[string]uint64{
		"malformed":               n / 3,
		framework.ReasonPermanent: n/3 + 1,
		framework.ReasonPanic:     n/3 + 1,
	}, st.Groups[0].SkippedByReason)
	stopServer(t, s)

	out := logs.String()
	records := strings.Count(out, "line skipped")
	require.GreaterOrEqual(t, records, 1, out)
	require.Less(t, records, 100, "one record a second at most, not one a line")
	require.Contains(t, out, `level=WARN msg="processor failed after its retries: line skipped" group=g feed=orders processor=p epoch=7`)
	require.Contains(t, out, "reason=permanent")
	// Every skip is in the log: the first of each report, plus the counts
	// since the last report.
	total := records
	for _, m := range regexp.MustCompile(`skipped_since_last_report=(\d+)`).FindAllStringSubmatch(out, -1) {
		k, err := strconv.Atoi(m[1])
		require.NoError(t, err)
		total += k
	}
	require.Equal(t, n, total, "every skip is reported:\n%s", out)
}
