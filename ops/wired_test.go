package ops_test

import (
	"context"
	"github.com/stretchr/testify/require"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/ops"
	"github.com/tidemark-go/tidemark/state"
)

// storeProc applies every line to its group's store.
type storeProc struct{ st state.Store }

func (p *storeProc) Start(_ context.Context, fc *framework.Context) error {
	st, err := fc.Store()
	if err != nil {
		return err
	}
	p.st = st
	return fc.Subscribe("in")
}

func (p *storeProc) Handle(ctx context.Context, d tidemark.Delivery, line []byte) error {
	_, err := p.st.Apply(ctx, d, func(tx *state.Tx) error {
		_, err := tx.AddInt64([]byte("n"), 1)
		return err
	})
	return err
}

// TestHistogramsFromTheFrameworkAndTheStore: one Observer handed to the
// framework and to a group's store fills the handling, commit and
// batch-size histograms that /metrics serves; the store, which the
// framework opened, is reported under its group's name without being named
// in the listener's config.
func TestHistogramsFromTheFrameworkAndTheStore(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "in.log")
	require.NoError(t, os.WriteFile(input, []byte(lines(1, 50)), 0o644))
	obs := ops.NewObserver()
	srv, err := framework.New(framework.Config{
		Feeds: []framework.FeedConfig{{Name: "in", File: &framework.FileConfig{Filename: input}, Idle: framework.FixedIdle(time.Millisecond)}},
		Groups: []framework.GroupConfig{{Name: "A", Processors: []string{"p"}, Store: "bbolt:" + filepath.Join(dir, "state"),
			StoreOptions: &state.Options{Observer: obs.ForStore("A"), BatchInterval: 5 * time.Millisecond}}},
		Observer: obs,
	}, framework.Processors{"p": &storeProc{}})
	require.NoError(t, err)
	require.NoError(t, srv.Start(context.Background()))
	defer srv.Stop(context.Background())
	l := startListener(t, ops.Config{Server: srv, Observer: obs})
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	require.NoError(t, srv.WaitSettled(ctx, "in"))
	waitFor(t, "the histograms", func() bool {
		_, body := get(t, base(l)+"/metrics")
		return metric(body, `tidemark_group_handle_seconds_count{group="A"}`) == "50" &&
			metric(body, `tidemark_store_batch_lines_sum{store="A"}`) == "50" &&
			metric(body, `tidemark_store_commit_seconds_count{store="A"}`) != "" &&
			metric(body, `tidemark_store_applied_total{store="A"}`) == "50"
	})
}

// A store deleted between two runs: the feed reads from the input's start
// again, and says so in /metrics and /status.
func TestRewindIsReported(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "in.log")
	require.NoError(t, os.WriteFile(input, []byte(lines(1, 20)), 0o644))
	data := filepath.Join(dir, "state")
	runOnce := func() *framework.Server {
		srv, err := framework.New(framework.Config{
			Feeds:        []framework.FeedConfig{{Name: "in", File: &framework.FileConfig{Filename: input}, Idle: framework.FixedIdle(time.Millisecond)}},
			Groups:       []framework.GroupConfig{{Name: "A", Processors: []string{"p"}, Store: "bbolt:" + data}},
			UntilSettled: true,
			Logger:       slog.New(slog.DiscardHandler),
		}, framework.Processors{"p": &storeProc{}})
		require.NoError(t, err)
		return srv
	}
	require.NoError(t, runOnce().Run(context.Background()))
	require.NoError(t, os.RemoveAll(data))

	srv := runOnce()
	l := startListener(t, ops.Config{Server: srv})
	require.NoError(t, srv.Run(context.Background()))
	_, body := get(t, base(l)+"/metrics")
	require.Equal(t, "1", metric(body, `tidemark_feed_rewinds_total{feed="in"}`), body)
	_, st := get(t, base(l)+"/status/in")
	require.Contains(t, st, "the store has no record of the feed")
}
