package framework_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/framework"
)

// hourIdle makes every idle wait, and every pause tick on a full queue, an
// hour long, and counts how often the feed asked for one: a commit that
// happens once the feed waits was woken by something, not by the clock.
type hourIdle struct{ n atomic.Int64 }

func (h *hourIdle) Idle(int) time.Duration {
	h.n.Add(1)
	return time.Hour
}

// A consumer that finishes a batch while the feed waits idle wakes it to
// commit: the pointer does not wait for the next line or the idle timer.
func TestFinishedBatchWakesCommit(t *testing.T) {
	src := newMemSource(10)
	idle := &hourIdle{}
	g := newGate()
	p := &recProc{feeds: []string{"orders"}, handle: func(ctx context.Context, d tidemark.Delivery, _ []byte) error {
		if d.Seq == 10 {
			return g.wait(ctx, d.Seq)
		}
		return nil
	}}
	cfg := oneFeed(src, grp("g", "p"))
	cfg.Feeds[0].Idle = idle
	s := startServer(t, cfg, framework.Processors{"p": p})
	waitFor(t, "line 10 handled", func() bool { return g.waitingSeq() == 10 })
	// Lines 1 to 9 may be committed by the cycle before the wait; line 10
	// cannot be: it is not finished. The feed, with nothing more to read,
	// goes to its hour-long wait.
	waitFor(t, "the feed waiting idle", func() bool { return idle.n.Load() > 0 })
	require.Less(t, src.committedPos(), src.pos(10))
	g.release()
	waitFor(t, "commit of line 10 while the feed waits an hour", func() bool { return src.committedPos() == src.pos(10) })
	st := status(t, s, "orders")
	require.Zero(t, st.ProcessedPending)
}

// A hold declared durable while the feed waits idle wakes it to commit.
func TestDurableMarkWakesCommit(t *testing.T) {
	src := newMemSource(10)
	idle := &hourIdle{}
	p := &recProc{feeds: []string{"orders"}, hold: "orders"}
	cfg := oneFeed(src, grp("g", "p"))
	cfg.Feeds[0].Idle = idle
	s := startServer(t, cfg, framework.Processors{"p": p})
	settle(t, s, "orders")
	waitFor(t, "10 lines handled", func() bool { return p.count() == 10 })
	require.Positive(t, idle.n.Load(), "the feed went to its hour-long wait")
	require.Zero(t, src.committedPos(), "nothing durable yet")
	p.mu.Lock()
	cp := p.cp
	p.mu.Unlock()
	cp.DurableThrough(cp.Mark())
	waitFor(t, "commit of the durable mark while the feed waits an hour", func() bool { return src.committedPos() == src.pos(10) })
}

// ProcessedPending counts the lines every consumer finished that are not
// committed yet; a slow pointer write shows there, not as unprocessed.
func TestStatusProcessedPending(t *testing.T) {
	src := newMemSource(10)
	src.commitBlock = make(chan struct{})
	p := &recProc{feeds: []string{"orders"}}
	s := startServer(t, oneFeed(src, grp("g", "p")), framework.Processors{"p": p})
	waitFor(t, "10 lines handled", func() bool { return p.count() == 10 })
	// No commit has returned: every handled line is processed and not
	// committed.
	waitFor(t, "ProcessedPending 10", func() bool { return status(t, s, "orders").ProcessedPending == 10 })
	st := status(t, s, "orders")
	require.EqualValues(t, 10, st.PendingAcks)
	require.Zero(t, st.LastCommitSeq)
	close(src.commitBlock)
	waitFor(t, "commit of everything", func() bool {
		st := status(t, s, "orders")
		return st.ProcessedPending == 0 && st.LastCommitSeq == 10
	})
}
