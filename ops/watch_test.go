package ops_test

import (
	"context"
	"github.com/stretchr/testify/require"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-go/tidemark/feed"
	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/ops"
)

// recorder is a slog.Handler that keeps each record as "LEVEL msg k=v ...".
type recorder struct {
	mu   sync.Mutex
	recs []string
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *recorder) WithGroup(string) slog.Handler            { return r }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	var sb strings.Builder
	sb.WriteString(rec.Level.String() + " " + rec.Message)
	rec.Attrs(func(a slog.Attr) bool {
		sb.WriteString(" " + a.String())
		return true
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, sb.String())
	return nil
}

// take returns the records since the last take.
func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.recs
	r.recs = nil
	return out
}

func requireOne(t *testing.T, recs []string, parts ...string) {
	t.Helper()
	if len(recs) != 1 {
		t.Fatalf("want one record with %q, got %d:\n%s", parts, len(recs), strings.Join(recs, "\n"))
	}
	for _, p := range parts {
		require.Contains(t, recs[0], p)
	}
}

func TestWatcherLogsEachEventOnce(t *testing.T) {
	fs := &fakeServer{}
	st := framework.FeedStatus{
		Name:   "orders",
		Status: feed.Status{Epoch: 5, ReadPosition: 100, Reopens: map[string]uint64{}},
		Groups: []framework.QueueStatus{{Group: "g"}},
	}
	fs.set(st)
	rec := &recorder{}
	w, err := ops.NewWatcher(ops.Config{Server: fs, Feeds: []string{"orders"}, Logger: slog.New(rec)})
	require.NoError(t, err)

	w.Check()
	require.Len(t, rec.take(), 0, "a quiet first check logs nothing")
	w.Check()
	require.Len(t, rec.take(), 0, "nothing changed")

	st.Stalled, st.StallReason = true, "a removed consumer left unprocessed items: A (3 items)"
	st.LastCommitEpoch, st.LastCommitPosition = 5, 40
	fs.set(st)
	w.Check()
	requireOne(t, rec.take(), "WARN feed stalled", "feed=orders", "epoch=5", "committed_position=40", "reason=a removed consumer left unprocessed items: A (3 items)")
	w.Check()
	require.Len(t, rec.take(), 0, "a stall is logged once")

	st.Stalled, st.StallReason = false, ""
	fs.set(st)
	w.Check()
	requireOne(t, rec.take(), "INFO feed no longer stalled", "feed=orders")

	st.Groups[0].Dropped = 7
	fs.set(st)
	w.Check()
	requireOne(t, rec.take(), "WARN lines dropped", "group=g", "dropped=7", "feed=orders")

	st.Reopens = map[string]uint64{feed.ReasonTruncated: 1}
	st.Epoch, st.ReadPosition = 6, 0
	fs.set(st)
	w.Check()
	recs := rec.take()
	require.Len(t, recs, 2)
	require.Contains(t, recs[0], "INFO feed started a new epoch")
	require.Contains(t, recs[0], "previous_epoch=5")
	require.Contains(t, recs[0], "epoch=6")
	require.Contains(t, recs[1], "INFO feed reopened its input", "a truncation is followed: a note")
	require.Contains(t, recs[1], "reason=input truncated")

	st.Reopens = map[string]uint64{feed.ReasonTruncated: 1, feed.ReasonRewritten: 1}
	fs.set(st)
	w.Check()
	requireOne(t, rec.take(), "WARN feed reopened its input", "reason=input rewritten in place")

	st.CommitErrors = 2
	st.Status.LastCommitError = "disk full"
	fs.set(st)
	w.Check()
	requireOne(t, rec.take(), "ERROR feed commit failed", "errors=2", "err=disk full")
}

// A stall already there at the first check is logged.
func TestWatcherLogsStallAtFirstCheck(t *testing.T) {
	fs := &fakeServer{}
	fs.set(framework.FeedStatus{Name: "orders", Stalled: true, StallReason: "no live consumer"})
	rec := &recorder{}
	w, err := ops.NewWatcher(ops.Config{Server: fs, Feeds: []string{"orders"}, Logger: slog.New(rec)})
	require.NoError(t, err)
	w.Check()
	requireOne(t, rec.take(), "feed stalled", "no live consumer")
}

// A listener with Watch logs a real stall and its release.
func TestListenerWatchesARealServer(t *testing.T) {
	f := startFixture(t, 20, 5)
	rec := &recorder{}
	startListener(t, ops.Config{Server: f.srv, Feeds: []string{"in"}, Logger: slog.New(rec), Watch: time.Millisecond})
	f.stall(t, 20)
	has := func(s string) func() bool {
		return func() bool {
			rec.mu.Lock()
			defer rec.mu.Unlock()
			for _, r := range rec.recs {
				if strings.Contains(r, s) {
					return true
				}
			}
			return false
		}
	}
	waitFor(t, "the stall record", has("feed stalled"))
	require.NoError(t, f.srv.Release("in", "A"))
	waitFor(t, "the end of the stall", has("feed no longer stalled"))
}
