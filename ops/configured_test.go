package ops_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/ops"
)

// A server config's operator section (YAML "operator:", the token from
// the environment) is served while the server runs, with the histograms
// that ops.Use wires, and closed once it has stopped.
func TestOperatorFromTheConfig(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "in.log")
	require.NoError(t, os.WriteFile(input, []byte(lines(1, 30)), 0o644))
	t.Setenv("TM_TEST_TOKEN", "s3cret")
	cfg, err := framework.LoadConfig(strings.NewReader(`operator:
  addr: 127.0.0.1:0
  token: ${TM_TEST_TOKEN}
  allowedHosts: [tidemark.example.net]
  maxConns: 10
  readTimeout: 5s
eventFeeds:
  - {name: in, filename: ` + input + `, overload: {policy: PAUSE}}
processorGroups:
  - {agentName: A, processors: [p], store: 'bbolt:` + filepath.Join(dir, "state") + `', storeOptions: {batchInterval: 5ms}}
`))
	require.NoError(t, err)
	logs := &recorder{}
	cfg.Logger = slog.New(logs)
	ops.Use(&cfg)
	srv, err := framework.New(cfg, framework.Processors{"p": &storeProc{}})
	require.NoError(t, err)
	require.NoError(t, srv.Start(context.Background()))
	defer srv.Stop(context.Background())

	recs := strings.Join(logs.take(), "\n")
	m := regexp.MustCompile(`ops: listener started addr=(\S+) token=true`).FindStringSubmatch(recs)
	require.NotNil(t, m, "the listener logs where it listens:\n%s", recs)
	url := "http://" + m[1]
	code, _ := get(t, url+"/metrics")
	require.Equal(t, http.StatusUnauthorized, code, "the token is demanded")
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	require.NoError(t, srv.WaitSettled(ctx, "in"))
	waitFor(t, "the histograms and the store's counters", func() bool {
		_, body := do(t, http.MethodGet, url+"/metrics", "s3cret", nil)
		return metric(body, `tidemark_group_handle_seconds_count{group="A"}`) == "30" &&
			metric(body, `tidemark_store_batch_lines_sum{store="A"}`) == "30"
	})
	code, body := do(t, http.MethodGet, url+"/readyz", "s3cret", nil)
	require.Equal(t, http.StatusOK, code, body)

	require.NoError(t, srv.Stop(context.Background()))
	_, err = client.Get(url + "/livez")
	require.Error(t, err, "the listener is closed with the server")
	var opErr interface{ Timeout() bool }
	require.False(t, errors.As(err, &opErr) && opErr.Timeout(), "refused, not timed out: %v", err)
}

// Without ops.Use, a config with an operator section is refused: it is
// never silently ignored.
func TestOperatorWithoutUse(t *testing.T) {
	cfg, err := framework.LoadConfig(strings.NewReader("operator: {addr: '127.0.0.1:0'}\neventFeeds:\n  - {name: in, filename: " + filepath.Join(t.TempDir(), "in.log") + "}\n"))
	require.NoError(t, err)
	_, err = framework.New(cfg, nil)
	require.ErrorIs(t, err, framework.ErrInvalidConfig)
	require.ErrorContains(t, err, "ops.Use")
}
