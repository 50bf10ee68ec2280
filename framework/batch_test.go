package framework_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/framework"
)

// batchCall is one HandleBatch call: the seq of its first line and its
// length.
type batchCall struct {
	first uint64
	n     int
}

// contains reports whether the call held the line seq.
func (c batchCall) contains(seq uint64) bool { return seq >= c.first && seq < c.first+uint64(c.n) }

// batchProc is a BatchHandler that records the lines it finished (by
// HandleBatch or Handle), the calls of each, and the status events, in one
// ordered log. It checks each line it is given against the memSource's
// content.
type batchProc struct {
	feeds []string
	src   *memSource
	// line, when set, runs for each line, in HandleBatch (inBatch) and in
	// Handle, before the line is recorded: an error fails the line
	// (HandleBatch returns (i, err)); it may panic or block.
	line func(ctx context.Context, d tidemark.Delivery, inBatch bool) error
	// result, when set, is what HandleBatch returns after its lines.
	result func(b *framework.Batch) (int, error)

	mu      sync.Mutex
	done    []uint64    // seqs of the lines finished, in order
	handles []uint64    // seqs handed to Handle, in order
	calls   []batchCall // HandleBatch calls, in order
	log     []string    // "L<seq>" for a line finished, "E<seq>" for a status event
	bad     []string    // what a check found wrong
}

func (p *batchProc) Start(_ context.Context, fc *framework.Context) error {
	for _, f := range p.feeds {
		if err := fc.Subscribe(f); err != nil {
			return err
		}
	}
	return nil
}

// check records what is wrong with line seq as it was handed over.
func (p *batchProc) check(d tidemark.Delivery, line []byte) {
	wrong := d.Seq == 0 || string(line) != lineText(int(d.Seq)) || d.Position != p.src.pos(int(d.Seq)) || d.Feed != "orders" || d.Epoch != p.src.epoch
	p.mu.Lock()
	defer p.mu.Unlock()
	if wrong {
		p.bad = append(p.bad, fmt.Sprintf("line %q with delivery %+v", line, d))
	}
	if cap(line) != len(line) {
		p.bad = append(p.bad, fmt.Sprintf("line %d: capacity %d, length %d", d.Seq, cap(line), len(line)))
	}
}

func (p *batchProc) finish(seq uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done = append(p.done, seq)
	p.log = append(p.log, fmt.Sprintf("L%d", seq))
}

func (p *batchProc) HandleBatch(ctx context.Context, b *framework.Batch) (int, error) {
	p.mu.Lock()
	call := batchCall{first: b.Delivery(0).Seq, n: b.Len()}
	p.calls = append(p.calls, call)
	p.mu.Unlock()
	for i := range b.Len() {
		d := *b.Delivery(i)
		if d.Seq != call.first+uint64(i) {
			p.mu.Lock()
			p.bad = append(p.bad, fmt.Sprintf("call from %d: line %d has seq %d", call.first, i, d.Seq))
			p.mu.Unlock()
		}
		p.check(d, b.Line(i))
		if p.line != nil {
			if err := p.line(ctx, d, true); err != nil {
				return i, err
			}
		}
		p.finish(d.Seq)
	}
	if p.result != nil {
		return p.result(b)
	}
	return b.Len(), nil
}

func (p *batchProc) Handle(ctx context.Context, d tidemark.Delivery, line []byte) error {
	p.mu.Lock()
	p.handles = append(p.handles, d.Seq)
	p.mu.Unlock()
	p.check(d, line)
	if p.line != nil {
		if err := p.line(ctx, d, false); err != nil {
			return err
		}
	}
	p.finish(d.Seq)
	return nil
}

func (p *batchProc) HandleStatus(_ context.Context, ev framework.StatusEvent) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.log = append(p.log, fmt.Sprintf("E%d", ev.Seq))
	return nil
}

// snapshot returns copies of what p recorded.
func (p *batchProc) snapshot() (done, handles []uint64, calls []batchCall, log, bad []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.done), slices.Clone(p.handles), slices.Clone(p.calls), slices.Clone(p.log), slices.Clone(p.bad)
}

func (p *batchProc) doneCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.done)
}

// seqRange returns the seqs from..to, both included, but those in skip.
func seqRange(from, to uint64, skip ...uint64) []uint64 {
	var out []uint64
	for i := from; i <= to; i++ {
		if !slices.Contains(skip, i) {
			out = append(out, i)
		}
	}
	return out
}

// batchCfg is one feed of n lines read 10 at a time, and group g with the
// processor p.
func batchCfg(n int, pol framework.FailurePolicy) (*memSource, *batchProc, framework.Config) {
	src := newMemSource(n)
	p := &batchProc{feeds: []string{"orders"}, src: src}
	cfg := failCfg(src, pol, grp("g", "p"))
	cfg.Feeds[0].BatchSize = 10
	return src, p, cfg
}

// A BatchHandler alone on its queue gets every line, in order, once, in
// calls of several lines that never span two of the feed's batches, and
// never a Handle call.
func TestBatchHandlerGetsEveryLineOnce(t *testing.T) {
	const n = 3000
	src := newMemSource(n)
	p := &batchProc{feeds: []string{"orders"}, src: src}
	cfg := oneFeed(src, grp("g", "p"))
	cfg.Feeds[0].BatchSize = 100
	s := startServer(t, cfg, framework.Processors{"p": p})
	settle(t, s, "orders")
	waitFor(t, "commit of the last line", func() bool { return src.committedPos() == src.pos(n) })
	done, handles, calls, _, bad := p.snapshot()
	require.Empty(t, bad)
	require.Equal(t, seqRange(1, n), done, "every line once, in order")
	require.Empty(t, handles, "no Handle call")
	require.GreaterOrEqual(t, len(calls), n/100, "at least a call per batch of the feed")
	long := 0
	for _, c := range calls {
		require.LessOrEqual(t, c.n, 100, "a call never spans two batches: %+v", c)
		if c.n > 1 {
			long++
		}
	}
	require.Positive(t, long, "calls of several lines: %v", calls)
	st := status(t, s, "orders")
	require.EqualValues(t, n, st.Groups[0].Processed)
	require.EqualValues(t, 0, st.Failed)
}

// A line that HandleBatch reports failed goes through the failure policy:
// skipped (counted) with Skip, its retries made with Handle; the lines
// before it in the call are finished, and a new call goes on after it.
// The failures fall on the first line of the feed, on lines in the middle
// and at the end of a batch of the feed, and on lines in a row.
func TestBatchHandlerErrorGoesThroughThePolicy(t *testing.T) {
	failing := []uint64{1, 15, 20, 21, 22, 100}
	errBad := errors.New("bad amount")
	failOn := func(always bool) func(context.Context, tidemark.Delivery, bool) error {
		return func(_ context.Context, d tidemark.Delivery, inBatch bool) error {
			if slices.Contains(failing, d.Seq) && (inBatch || always) {
				return errBad
			}
			return nil
		}
	}
	// run runs 100 lines under pol, the failing lines' Handle failing
	// too (handleFails) or not, and returns what the processor recorded
	// and the feed's status once the last line is committed.
	run := func(t *testing.T, pol framework.FailurePolicy, handleFails bool) (done, handles []uint64, calls []batchCall, st framework.FeedStatus) {
		src, p, cfg := batchCfg(100, pol)
		p.line = failOn(handleFails)
		s := startServer(t, cfg, framework.Processors{"p": p})
		settle(t, s, "orders")
		waitFor(t, "commit of the last line", func() bool { return src.committedPos() == src.pos(100) })
		done, handles, calls, _, bad := p.snapshot()
		require.Empty(t, bad)
		return done, handles, calls, status(t, s, "orders")
	}
	retries := framework.FailurePolicy{Retries: 2, Backoff: time.Millisecond}
	t.Run("skip", func(t *testing.T) {
		var mu sync.Mutex
		var rejected []uint64
		done, handles, calls, st := run(t, framework.FailurePolicy{Retries: framework.NoRetries, OnReject: func(r framework.Rejection) {
			mu.Lock()
			rejected = append(rejected, r.Delivery.Seq)
			mu.Unlock()
		}}, true)
		require.Equal(t, seqRange(1, 100, failing...), done, "every other line once, in order")
		require.Empty(t, handles, "no retry: no Handle call")
		for _, seq := range failing[:len(failing)-1] {
			require.True(t, slices.ContainsFunc(calls, func(c batchCall) bool { return c.first == seq+1 }),
				"a new call starts after the failed line %d: %v", seq, calls)
		}
		require.EqualValues(t, len(failing), st.Skipped, "the failing lines skipped by the policy")
		require.EqualValues(t, len(failing), st.Groups[0].Skipped)
		require.EqualValues(t, len(failing), st.Failed)
		require.EqualValues(t, 100, st.Groups[0].Processed)
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, failing, rejected)
	})
	t.Run("retries fail", func(t *testing.T) {
		done, handles, _, st := run(t, retries, true)
		require.Equal(t, seqRange(1, 100, failing...), done)
		var want []uint64
		for _, seq := range failing {
			want = append(want, seq, seq)
		}
		require.Equal(t, want, handles, "two retries each, with Handle")
		require.EqualValues(t, len(failing), st.Skipped, "the failing lines skipped by the policy")
		require.EqualValues(t, 3*len(failing), st.Failed)
	})
	t.Run("retry succeeds", func(t *testing.T) {
		done, handles, _, st := run(t, retries, false)
		require.Equal(t, seqRange(1, 100), done, "every line once, in order: the failed ones by their retry")
		require.Equal(t, failing, handles, "one retry each, with Handle")
		require.EqualValues(t, 0, st.Skipped, "no line skipped by the policy")
		require.EqualValues(t, len(failing), st.Failed)
	})
}

// A panic in HandleBatch: the call's lines go to Handle one at a time from
// the call's first; a line whose Handle panics too is skipped, the others
// are handled (again); then HandleBatch takes over again, and the server
// goes on.
func TestBatchHandlerPanicFallsBackToHandle(t *testing.T) {
	const bomb = 25
	for _, c := range []struct{ handlePanics, observer bool }{{true, false}, {false, false}, {true, true}, {false, true}} {
		handlePanics := c.handlePanics
		name := map[bool]string{true: "Handle panics too", false: "Handle succeeds"}[handlePanics]
		if c.observer {
			name += ", with an observer"
		}
		t.Run(name, func(t *testing.T) {
			var logs logBuf
			src, p, cfg := batchCfg(100, framework.FailurePolicy{Retries: framework.NoRetries})
			cfg.Logger = logs.logger()
			obs := &handleCounter{n: map[string]int{}}
			if c.observer {
				cfg.Observer = obs
			}
			p.line = func(_ context.Context, d tidemark.Delivery, inBatch bool) error {
				if d.Seq == bomb && (inBatch || handlePanics) {
					panic(fmt.Sprintf("bad line %d", d.Seq))
				}
				return nil
			}
			s := startServer(t, cfg, framework.Processors{"p": p})
			settle(t, s, "orders")
			waitFor(t, "commit of the last line", func() bool { return src.committedPos() == src.pos(100) })
			require.NoError(t, s.Err())
			select {
			case <-s.Done():
				t.Fatal("the server stopped")
			default:
			}
			done, handles, calls, _, bad := p.snapshot()
			require.Empty(t, bad)
			i := slices.IndexFunc(calls, func(c batchCall) bool { return c.contains(bomb) })
			require.GreaterOrEqual(t, i, 0, "a call held the line: %v", calls)
			pc := calls[i]
			last := pc.first + uint64(pc.n) - 1
			require.Greater(t, last, uint64(bomb), "the call goes on after the line (the feed reads 10 lines at a time): %+v", pc)
			require.Equal(t, seqRange(pc.first, last), handles, "the call's lines, from its first, to Handle")
			var skip []uint64
			if handlePanics {
				skip = []uint64{bomb}
			}
			want := seqRange(1, bomb-1)                               // HandleBatch, up to the panic
			want = append(want, seqRange(pc.first, last, skip...)...) // Handle, from the call's first
			want = append(want, seqRange(last+1, 100)...)             // HandleBatch again
			require.Equal(t, want, done)
			require.True(t, slices.ContainsFunc(calls[i+1:], func(c batchCall) bool { return c.first == last+1 }),
				"HandleBatch takes over after the call's lines: %v", calls)
			st := status(t, s, "orders")
			require.EqualValues(t, len(skip), st.Skipped)
			require.EqualValues(t, 1+len(skip), st.Failed, "the panic of HandleBatch, and that of Handle")
			require.EqualValues(t, 100, st.Groups[0].Processed)
			require.Contains(t, logs.String(), `level=WARN msg="processor panicked in HandleBatch`)
			require.Contains(t, logs.String(), fmt.Sprintf("feed=orders processor=p epoch=7 position=%d seq=%d lines=%d panic=\"bad line %d\"", src.pos(int(pc.first)), pc.first, pc.n, bomb))
			if c.observer {
				// Every line is timed once: by its HandleBatch call, or,
				// after the panic, by runItems' loop, as it times a line
				// of a processor without HandleBatch (the one whose Handle
				// panicked too, through the failure policy); the call that
				// panicked times none.
				obs.mu.Lock()
				defer obs.mu.Unlock()
				require.Equal(t, 100, obs.n["g"], "lines timed")
			}
		})
	}
}

// A HandleBatch result out of its contract stops the server with an error
// that names HandleBatch, what it returned and what it must return; none
// of the call's lines is committed.
func TestBatchHandlerBadResultStopsTheServer(t *testing.T) {
	for _, tc := range []struct {
		name   string
		result func(b *framework.Batch) (int, error)
		says   string
	}{
		{"short without error", func(b *framework.Batch) (int, error) { return b.Len() - 1, nil }, "returned (9, nil)"},
		{"none without error", func(b *framework.Batch) (int, error) { return 0, nil }, "returned (0, nil)"},
		{"too many", func(b *framework.Batch) (int, error) { return b.Len() + 1, nil }, "returned (11, nil)"},
		{"negative", func(b *framework.Batch) (int, error) { return -1, errors.New("oops") }, "returned (-1, oops)"},
		{"every line with an error", func(b *framework.Batch) (int, error) { return b.Len(), errors.New("oops") }, "returned (10, oops)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs logBuf
			src, p, cfg := batchCfg(100, framework.FailurePolicy{Retries: framework.NoRetries})
			cfg.Logger = logs.logger()
			p.result = func(b *framework.Batch) (int, error) {
				if b.Delivery(0).Seq > 30 {
					return tc.result(b)
				}
				return b.Len(), nil
			}
			s := startServer(t, cfg, framework.Processors{"p": p})
			select {
			case <-s.Done():
			case <-time.After(deadline):
				t.Fatal("the server did not stop")
			}
			_, handles, calls, _, bad := p.snapshot()
			require.Empty(t, bad)
			require.Empty(t, handles)
			bc := calls[len(calls)-1]
			require.Greater(t, bc.first, uint64(30))
			require.Equal(t, 10, bc.n, "the feed reads 10 lines at a time")
			err := s.Err()
			require.Error(t, err)
			require.ErrorContains(t, err, fmt.Sprintf(`processor "p" of group "g" on feed "orders", epoch 7, position %d: HandleBatch of 10 lines`, src.pos(int(bc.first))))
			require.ErrorContains(t, err, tc.says)
			require.ErrorContains(t, err, "it must return (10, nil) when every line finished, or (k, err) with 0 <= k < 10 and err != nil")
			require.LessOrEqual(t, src.committedPos(), src.pos(int(bc.first)-1), "none of the call's lines is committed")
			line := errorLine(t, &logs, "HandleBatch")
			require.Contains(t, line, "group=g processor=p feed=orders epoch=7")
			require.Contains(t, line, fmt.Sprintf("position=%d", src.pos(int(bc.first))))
		})
	}
}

// Status events reach HandleStatus in their place among the lines: a
// HandleBatch call never spans one.
func TestBatchHandlerStatusEventsInOrder(t *testing.T) {
	src := newMemSource(35)
	p := &batchProc{feeds: []string{"orders"}, src: src}
	cfg := oneFeed(src, grp("g", "p"))
	cfg.Feeds[0].BatchSize = 10
	cfg.Feeds[0].StatusEvents = true
	s := startServer(t, cfg, framework.Processors{"p": p})
	waitFor(t, "the first 35 lines", func() bool { return p.doneCount() == 35 })
	src.appendN(20)
	waitFor(t, "the next 20 lines", func() bool { return p.doneCount() == 55 })
	settle(t, s, "orders")
	stopServer(t, s)
	done, handles, calls, log, bad := p.snapshot()
	require.Empty(t, bad)
	require.Equal(t, seqRange(1, 55), done)
	require.Empty(t, handles)
	require.NotEmpty(t, calls)
	lines, events, mid := 0, 0, 0
	for _, e := range log {
		var seq int
		if _, err := fmt.Sscanf(e[1:], "%d", &seq); err != nil {
			t.Fatal(err)
		}
		if e[0] == 'L' {
			lines++
			continue
		}
		events++
		require.Equal(t, lines, seq, "the event after line %d comes after it and before the next: %v", seq, log)
		if seq > 0 && seq < 55 {
			mid++
		}
	}
	require.GreaterOrEqual(t, events, 2, "%v", log)
	require.Positive(t, mid, "an event between lines: %v", log)
}

// Invariant 1: while HandleBatch runs, the pointer stays before the call's
// first line, however many of its lines the processor has handled; once
// the call returns, the feed settles at the end.
func TestBatchHandlerPointerWaitsForTheCall(t *testing.T) {
	src := newMemSource(100)
	idle := &countingIdle{}
	g := newGate()
	p := &batchProc{feeds: []string{"orders"}, src: src}
	var mu sync.Mutex
	var first uint64
	p.line = func(ctx context.Context, d tidemark.Delivery, inBatch bool) error {
		mu.Lock()
		if inBatch && first == 0 && d.Seq > 30 {
			first = d.Seq // the call's first line
		}
		block := inBatch && first != 0 && d.Seq == first+5
		mu.Unlock()
		if block {
			return g.wait(ctx, d.Seq)
		}
		return nil
	}
	cfg := stallCfg(src, idle, grp("g", "p"))
	cfg.Feeds[0].BatchSize = 10
	s := startServer(t, cfg, framework.Processors{"p": p})
	waitFor(t, "blocked in a call", func() bool { return g.waitingSeq() != 0 })
	mu.Lock()
	P := first
	mu.Unlock()
	require.EqualValues(t, P+5, g.waitingSeq())
	_, _, calls, _, _ := p.snapshot()
	require.Equal(t, P, calls[len(calls)-1].first, "blocked in the call that starts at line %d", P)
	// The lines before the call are committed; the call's are not, though
	// five of them were handled.
	waitFor(t, "commit of the lines before the call", func() bool { return src.committedPos() == src.pos(int(P)-1) })
	waitFor(t, "every line read", func() bool { return status(t, s, "orders").Read == 100 })
	idle.wait(t, 5)
	require.Equal(t, src.pos(int(P)-1), src.committedPos())
	src.mu.Lock()
	for _, c := range src.commits {
		require.Less(t, c, src.ends[P-1], "a commit at or past line %d while its call runs", P)
	}
	src.mu.Unlock()
	st := status(t, s, "orders")
	require.EqualValues(t, P-1, st.Groups[0].Processed)
	require.False(t, st.Settled)
	g.release()
	settle(t, s, "orders")
	waitFor(t, "commit of the last line", func() bool { return src.committedPos() == src.pos(100) })
	done, handles, _, _, bad := p.snapshot()
	require.Empty(t, bad)
	require.Equal(t, seqRange(1, 100), done)
	require.Empty(t, handles)
}

// With two processors on the queue, a BatchHandler gets Handle, once a
// line; with an Observer, it gets HandleBatch still, and the observer
// hears of every line once (each a share of its call's time).
func TestBatchHandlerSharingItsQueueGetsHandle(t *testing.T) {
	for _, observer := range []bool{false, true} {
		t.Run(map[bool]string{false: "two processors", true: "an observer"}[observer], func(t *testing.T) {
			const n = 500
			src := newMemSource(n)
			b := &batchProc{feeds: []string{"orders"}, src: src}
			r := &recProc{feeds: []string{"orders"}}
			cfg := oneFeed(src, grp("g", "b", "r"))
			procs := framework.Processors{"b": b, "r": r}
			obs := &handleCounter{n: map[string]int{}}
			if observer {
				cfg = oneFeed(src, grp("g", "b"))
				cfg.Observer = obs
				procs = framework.Processors{"b": b}
			}
			cfg.Feeds[0].BatchSize = 50
			s := startServer(t, cfg, procs)
			settle(t, s, "orders")
			waitFor(t, "commit of the last line", func() bool { return src.committedPos() == src.pos(n) })
			done, handles, calls, _, bad := b.snapshot()
			require.Empty(t, bad)
			require.Equal(t, seqRange(1, n), done)
			if observer {
				require.Empty(t, handles, "no Handle call")
				require.True(t, slices.ContainsFunc(calls, func(c batchCall) bool { return c.n > 1 }), "HandleBatch with several lines: %v", calls)
				obs.mu.Lock()
				defer obs.mu.Unlock()
				require.Equal(t, n, obs.n["g"], "lines timed")
				return
			}
			require.Empty(t, calls, "no HandleBatch call")
			require.Equal(t, seqRange(1, n), handles, "Handle, once a line, in order")
			require.Equal(t, seqRange(1, n), seqsOf(r))
		})
	}
}
