package ops_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/feed"
	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/ops"
)

// probe sends a GET for target to l's handler from loopback, with auth as
// the Authorization header when not empty.
func probe(l *ops.Listener, target, auth string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1"+target, nil)
	req.RemoteAddr = "127.0.0.1:5000"
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	w := httptest.NewRecorder()
	l.Handler().ServeHTTP(w, req)
	return w
}

// failer fails the line at failSeq, with an error marked permanent, until
// healed.
type failer struct {
	failSeq uint64
	healed  atomic.Bool
	n       atomic.Int64
}

func (p *failer) Start(_ context.Context, fc *framework.Context) error { return fc.Subscribe("in") }

func (p *failer) Handle(_ context.Context, d tidemark.Delivery, line []byte) error {
	if d.Seq == p.failSeq && !p.healed.Load() {
		return framework.Permanent(errors.New("bad line " + strings.TrimSpace(string(line))))
	}
	p.n.Add(1)
	return nil
}

// /readyz follows a real server through its life: not started, a
// quarantined group, the fence lifted and every line processed, stopped.
// /livez and /healthz answer throughout.
func TestReadyzOfARealServer(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "in.log")
	require.NoError(t, os.WriteFile(input, []byte(lines(1, 20)), 0o644))
	q := &failer{failSeq: 10}
	ok := &proc{feed: "in"}
	srv, err := framework.New(framework.Config{
		Feeds: []framework.FeedConfig{{Name: "in", File: &framework.FileConfig{Filename: input}, Idle: framework.FixedIdle(time.Millisecond)}},
		Groups: []framework.GroupConfig{
			{Name: "ok", Processors: []string{"ok"}},
			{Name: "q", Processors: []string{"q"}, Failure: framework.FailurePolicy{Retries: framework.NoRetries, Action: framework.Quarantine}},
		},
	}, framework.Processors{"ok": ok, "q": q})
	require.NoError(t, err)
	l, err := ops.New(ops.Config{Server: srv})
	require.NoError(t, err)
	alive := func() {
		t.Helper()
		for _, p := range []string{"/livez", "/healthz"} {
			w := probe(l, p, "")
			require.Equal(t, http.StatusOK, w.Code, p)
			require.Equal(t, "ok\n", w.Body.String(), p)
		}
	}

	alive()
	w := probe(l, "/readyz", "")
	require.Equal(t, http.StatusServiceUnavailable, w.Code, w.Body.String())
	require.Contains(t, w.Body.String(), "[-]feed in: has not started reading yet; stalled: no live consumer\n")
	require.Contains(t, w.Body.String(), "[+]group ok ok\n")
	require.True(t, strings.HasSuffix(w.Body.String(), "readyz check failed: 1 of 3 checks\n"), w.Body.String())

	require.NoError(t, srv.Start(context.Background()))
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			require.NoError(t, srv.Stop(context.Background()))
		}
	})
	waitFor(t, "group q fenced", func() bool {
		st, err := srv.GroupStatus("q")
		return err == nil && st.State == framework.GroupFenced
	})
	alive()
	w = probe(l, "/readyz", "")
	require.Equal(t, http.StatusServiceUnavailable, w.Code, w.Body.String())
	body := w.Body.String()
	require.Contains(t, body, "[-]group q: is fenced: processor q failed on feed in at epoch ")
	require.Contains(t, body, ", position 100: bad line line-0010; its feeds pause until the fence is lifted")
	require.Contains(t, body, "[+]group ok ok\n")
	require.Contains(t, body, "[-]feed in: stalled: consumer q fenced or dead\n")

	// The fence lifted, the line is handled again, and the feed settles.
	q.healed.Store(true)
	require.NoError(t, srv.LiftFence("q"))
	require.NoError(t, srv.WaitSettled(context.Background(), "in"))
	w = probe(l, "/readyz", "")
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.Equal(t, "[+]feed in ok\n[+]group ok ok\n[+]group q ok\nreadyz check passed\n", w.Body.String())
	head := httptest.NewRequest(http.MethodHead, "http://127.0.0.1/readyz", nil)
	head.RemoteAddr = "127.0.0.1:5000"
	rec := httptest.NewRecorder()
	l.Handler().ServeHTTP(rec, head)
	require.Equal(t, http.StatusOK, rec.Code, "a HEAD probe")

	require.NoError(t, srv.Stop(context.Background()))
	stopped = true
	alive()
	w = probe(l, "/readyz", "")
	require.Equal(t, http.StatusServiceUnavailable, w.Code, w.Body.String())
	require.Contains(t, w.Body.String(), "[-]server: has stopped; restart the process\n")
	require.Contains(t, w.Body.String(), "[-]feed in: is stopped: its source is closed\n")

	// /status has the groups and the stop.
	w = probe(l, "/status", "")
	require.Equal(t, http.StatusOK, w.Code)
	require.Contains(t, w.Body.String(), `"stopped": true`)
	require.Contains(t, w.Body.String(), `"state": "running"`)
}

// With a token, the probes answer without it: /livez and /healthz with
// "ok", /readyz with its verdict and status code alone; with the token,
// /readyz gives the reasons. Everything else needs the token.
func TestProbesWithAToken(t *testing.T) {
	fs := &fakeServer{}
	fs.set(framework.FeedStatus{Name: "secret-feed", Stalled: true, StallReason: "no live consumer",
		Status: feed.Status{State: feed.StateCaughtUp}})
	l, err := ops.New(ops.Config{Server: fs, Feeds: []string{"secret-feed"}, Token: "t"})
	require.NoError(t, err)
	for _, p := range []string{"/livez", "/healthz"} {
		w := probe(l, p, "")
		require.Equal(t, http.StatusOK, w.Code, p)
		require.Equal(t, "ok\n", w.Body.String())
	}
	w := probe(l, "/readyz", "")
	require.Equal(t, http.StatusServiceUnavailable, w.Code)
	require.Equal(t, "readyz check failed: 1 of 1 checks\nsend the listener's token for the reasons\n", w.Body.String())
	require.NotContains(t, w.Body.String(), "secret-feed")
	w = probe(l, "/readyz", "Bearer t")
	require.Equal(t, http.StatusServiceUnavailable, w.Code)
	require.Equal(t, "[-]feed secret-feed: stalled: no live consumer\nreadyz check failed: 1 of 1 checks\n", w.Body.String())
	for _, p := range []string{"/status", "/metrics", "/", "/status/secret-feed"} {
		require.Equal(t, http.StatusUnauthorized, probe(l, p, "").Code, p)
	}

	fs.set(framework.FeedStatus{Name: "secret-feed", Status: feed.Status{State: feed.StateCaughtUp}})
	w = probe(l, "/readyz", "")
	require.Equal(t, http.StatusOK, w.Code)
	require.Equal(t, "readyz check passed\n", w.Body.String())

	// The probes keep the other rules: a foreign Host is refused.
	req := httptest.NewRequest(http.MethodGet, "http://evil.example/livez", nil)
	req.RemoteAddr = "127.0.0.1:5000"
	rec := httptest.NewRecorder()
	l.Handler().ServeHTTP(rec, req)
	require.Equal(t, http.StatusForbidden, rec.Code)
}

// Report.Health, the one computation behind /readyz and tidemark status
// --check, row by row.
func TestReportHealth(t *testing.T) {
	for _, tc := range []struct {
		name    string
		r       ops.Report
		ready   bool
		checks  []string // Check.String() of every check
		noteOf0 string
	}{
		{name: "empty", r: ops.Report{}, ready: true},
		{
			name:   "caught up",
			r:      ops.Report{Feeds: []ops.FeedReport{{Name: "a", State: "caught up"}, {Name: "b", State: "done"}, {Name: "c", State: "behind"}}},
			ready:  true,
			checks: []string{"feed a ok", "feed b ok", "feed c ok"},
		},
		{
			name:    "waiting for the input is ready",
			r:       ops.Report{Feeds: []ops.FeedReport{{Name: "a", State: "waiting", Path: "/in/a.log"}}},
			ready:   true,
			checks:  []string{"feed a ok"},
			noteOf0: "waiting for its input to appear /in/a.log",
		},
		{
			name:   "starting",
			r:      ops.Report{Feeds: []ops.FeedReport{{Name: "a", State: "starting"}}},
			checks: []string{"feed a: has not started reading yet"},
		},
		{
			name:   "stopped, stalled and failing to write its pointer",
			r:      ops.Report{Feeds: []ops.FeedReport{{Name: "a", State: "stopped", Stalled: true, StallReason: "no live consumer", LastPointerError: "disk full"}}},
			checks: []string{"feed a: is stopped: its source is closed; stalled: no live consumer; its pointer write fails, so it cannot commit: disk full"},
		},
		{
			name: "a fenced queue, without group reports",
			r: ops.Report{Feeds: []ops.FeedReport{{Name: "a", State: "behind", Groups: []ops.QueueReport{
				{Group: "g", Fenced: true}, {Group: "h"}, {Group: "r", Fenced: true, Removed: true}}}}},
			checks: []string{"feed a: group g is fenced or dead"},
		},
		{
			name: "groups",
			r: ops.Report{Groups: []ops.GroupReport{
				{Name: "run", State: "running"}, {Name: "gone", State: "removed"},
				{Name: "dead", State: "dead"}, {Name: "re", State: "restarting"},
				{Name: "f", State: "fenced", Fence: &ops.FenceReport{Processor: "p", Feed: "a", Epoch: 7, Position: 30, Error: "boom"}},
			}, Feeds: []ops.FeedReport{{Name: "a", State: "behind", Groups: []ops.QueueReport{{Group: "f", Fenced: true}}}}},
			checks: []string{
				"feed a ok", // the group's own check says it
				"group run ok", "group gone ok",
				"group dead: is dead: a restart of its processors failed; its feeds pause until it is removed or the process restarts",
				"group re: is restarting its processors",
				"group f: is fenced: processor p failed on feed a at epoch 7, position 30: boom; its feeds pause until the fence is lifted, or the processor or group is removed or restarted",
			},
		},
		{
			name:   "a failed store",
			r:      ops.Report{Stores: []ops.StoreReport{{Name: "s", Failed: true, FailedCommits: 1, LastError: "fsync: EIO"}, {Name: "t"}}},
			checks: []string{"store s: failed a commit: fsync: EIO; it declares nothing durable any more: restart the process", "store t ok"},
		},
		{
			name: "a store whose file the check found damaged",
			r: ops.Report{Stores: []ops.StoreReport{{Name: "s", Failed: true,
				LastError: "state: bbolt store /d is damaged: page 2 of the bbolt database in /d/state.bolt does not verify: x; restore the store's folder from a backup, or remove the whole folder /d to start over"}}},
			checks: []string{"store s: has failed: state: bbolt store /d is damaged: page 2 of the bbolt database in /d/state.bolt does not verify: x; restore the store's folder from a backup, or remove the whole folder /d to start over; it declares nothing durable any more"},
		},
		{
			name:   "a stopped server and an unreadable feed",
			r:      ops.Report{Stopped: true, StopError: "framework: fatal", Errors: []string{"feed x: unknown feed"}},
			checks: []string{"server: has stopped: framework: fatal; restart the process", "status: feed x: unknown feed"},
		},
		{
			name:   "a cleanly stopped server",
			r:      ops.Report{Stopped: true},
			checks: []string{"server: has stopped; restart the process"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.r.Health()
			require.Equal(t, tc.ready, h.Ready())
			var got []string
			for _, c := range h.Checks {
				got = append(got, c.String())
			}
			require.Equal(t, tc.checks, got)
			if tc.noteOf0 != "" {
				require.Equal(t, tc.noteOf0, h.Checks[0].Note)
			}
			require.Equal(t, !tc.ready, len(h.Problems()) > 0)
		})
	}
}

// tidemark_build_info is 1 with the version and Go version labels, on the
// listener's registry and the Registerer passed in, never on the global
// registry.
func TestBuildInfo(t *testing.T) {
	fs := &fakeServer{}
	reg := prometheus.NewRegistry()
	l, err := ops.New(ops.Config{Server: fs, Feeds: []string{}, Registerer: reg})
	require.NoError(t, err)
	bi, ok := debug.ReadBuildInfo()
	require.True(t, ok)
	require.Equal(t, "github.com/tidemark-go/tidemark", bi.Main.Path, "the test runs inside the module")
	var revision string
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			revision = s.Value
		}
	}
	body := scrape(t, l)
	sample := `tidemark_build_info{goversion="` + runtime.Version() + `",revision="` + revision + `",version="` + bi.Main.Version + `"}`
	require.Equal(t, "1", metric(body, sample), "%s in\n%s", sample, body)
	require.Contains(t, body, "# TYPE tidemark_build_info gauge")

	has := func(g prometheus.Gatherer) bool {
		mfs, err := g.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() == "tidemark_build_info" {
				return true
			}
		}
		return false
	}
	require.True(t, has(reg), "on the Registerer passed in")
	require.False(t, has(prometheus.DefaultGatherer), "never on the global registry")
}

// A group's state is a metric, 1 for the current one.
func TestGroupStateMetric(t *testing.T) {
	f := startFixture(t, 3, 0)
	require.NoError(t, f.srv.WaitSettled(context.Background(), "in"))
	l, err := ops.New(ops.Config{Server: f.srv})
	require.NoError(t, err)
	body := scrape(t, l)
	require.Equal(t, "1", metric(body, `tidemark_group_state{group="A",state="running"}`), body)
	require.Equal(t, "0", metric(body, `tidemark_group_state{group="A",state="dead"}`), body)
	require.Equal(t, "1", metric(body, `tidemark_group_state{group="B",state="running"}`), body)
}
