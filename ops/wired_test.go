package ops_test

import (
	"context"
	"github.com/stretchr/testify/require"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tidemark-go/tidemark/dedupe"
	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/ops"
	"github.com/tidemark-go/tidemark/state"
)

// storeProc applies every line to a store that drives its checkpoint.
type storeProc struct{ st state.Store }

func (p *storeProc) Start(_ context.Context, fc *framework.Context) error {
	if err := p.st.Bind("in", fc.Checkpoint("in")); err != nil {
		return err
	}
	return fc.Subscribe("in")
}

func (p *storeProc) Handle(ctx context.Context, d dedupe.Delivery, line []byte) error {
	_, err := p.st.Apply(ctx, d, func(tx *state.Tx) error {
		_, err := tx.AddInt64([]byte("n"), 1)
		return err
	})
	return err
}

// TestHistogramsFromTheFrameworkAndTheStore: one Observer handed to the
// framework and to a store fills the handling, commit and batch-size
// histograms that /metrics serves.
func TestHistogramsFromTheFrameworkAndTheStore(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "in.log")
	require.NoError(t, os.WriteFile(input, []byte(lines(1, 50)), 0o644))
	obs := ops.NewObserver()
	st, err := state.Open("bbolt:"+filepath.Join(dir, "state"), &state.Options{
		Observer: obs.ForStore("ledger"), BatchInterval: 5 * time.Millisecond,
	})
	require.NoError(t, err)
	defer st.Close()
	srv, err := framework.New(framework.Config{
		Feeds:    []framework.FeedConfig{{Name: "in", File: &framework.FileConfig{Filename: input}, Idle: framework.FixedIdle(time.Millisecond)}},
		Groups:   []framework.GroupConfig{{Name: "A", Processors: []string{"p"}}},
		Observer: obs,
	}, framework.Registry{"p": &storeProc{st: st}})
	require.NoError(t, err)
	require.NoError(t, srv.Start(context.Background()))
	defer srv.Stop(context.Background())
	l := startListener(t, ops.Config{Server: srv, Observer: obs, Stores: []ops.StoreConfig{{Name: "ledger", Store: st, Feeds: []string{"in"}}}})
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	require.NoError(t, srv.WaitSettled(ctx, "in"))
	require.NoError(t, st.Flush(ctx))
	waitFor(t, "the histograms", func() bool {
		_, body := get(t, base(l)+"/metrics")
		return metric(body, `tidemark_group_handle_seconds_count{group="A"}`) == "50" &&
			metric(body, `tidemark_store_batch_lines_sum{store="ledger"}`) == "50" &&
			metric(body, `tidemark_store_commit_seconds_count{store="ledger"}`) != ""
	})
}
