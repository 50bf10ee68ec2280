package ops_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/ops"
)

// malformed is a processor's error that names its reason.
type malformed struct{}

func (malformed) Error() string        { return "malformed line" }
func (malformed) RejectReason() string { return "malformed" }

// rejecter refuses every third line as malformed and every other third
// with an error of no reason.
type rejecter struct{}

func (rejecter) Start(_ context.Context, fc *framework.Context) error { return fc.Subscribe("in") }

func (rejecter) Handle(_ context.Context, d tidemark.Delivery, _ []byte) error {
	switch d.Seq % 3 {
	case 0:
		return framework.Permanent(malformed{})
	case 1:
		return framework.Permanent(errors.New("refused"))
	}
	return nil
}

// The lines a group skips are counted by reason in /metrics and /status.
func TestSkipsByReason(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "in.log")
	require.NoError(t, os.WriteFile(input, []byte(lines(1, 30)), 0o644))
	srv, err := framework.New(framework.Config{
		Feeds:  []framework.FeedConfig{{Name: "in", File: &framework.FileConfig{Filename: input}, Overload: framework.OverloadConfig{Policy: framework.Pause}}},
		Groups: []framework.GroupConfig{{Name: "A", Processors: []string{"r"}, Failure: framework.FailurePolicy{Retries: framework.NoRetries}}},
		Logger: slog.New(slog.DiscardHandler),
	}, framework.Processors{"r": rejecter{}})
	require.NoError(t, err)
	require.NoError(t, srv.Start(context.Background()))
	defer srv.Stop(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	require.NoError(t, srv.WaitSettled(ctx, "in"))
	l := startListener(t, ops.Config{Server: srv})
	_, body := get(t, "http://"+l.Addr().String()+"/metrics")
	require.Equal(t, "10", metric(body, `tidemark_queue_lines_skipped_by_reason_total{feed="in",group="A",reason="malformed"}`), body)
	require.Equal(t, "10", metric(body, `tidemark_queue_lines_skipped_by_reason_total{feed="in",group="A",reason="permanent"}`), body)
	require.Equal(t, "20", metric(body, `tidemark_queue_lines_skipped_total{feed="in",group="A"}`))
	_, body = get(t, "http://"+l.Addr().String()+"/status")
	var r ops.Report
	require.NoError(t, json.Unmarshal([]byte(body), &r))
	require.Equal(t, map[string]uint64{"malformed": 10, "permanent": 10}, r.Feeds[0].Groups[0].SkippedByReason)
}
