package ops_test

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/stretchr/testify/require"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/feed"
	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/ops"
	"github.com/tidemark-go/tidemark/state"
)

// fakeServer is a Server whose statuses the test sets.
type fakeServer struct {
	mu       sync.Mutex
	st       map[string]framework.FeedStatus
	released []string
}

func (f *fakeServer) FeedStatus(name string) (framework.FeedStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, ok := f.st[name]
	if !ok {
		return framework.FeedStatus{}, fmt.Errorf("framework: feed %q: %w", name, framework.ErrUnknownFeed)
	}
	return st, nil
}

func (f *fakeServer) Release(feedName, consumer string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = append(f.released, feedName+"/"+consumer)
	return nil
}

func (f *fakeServer) set(st framework.FeedStatus) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.st == nil {
		f.st = map[string]framework.FeedStatus{}
	}
	f.st[st.Name] = st
}

func scrape(t *testing.T, l *ops.Listener) string {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1/metrics", nil)
	req.RemoteAddr = "127.0.0.1:1"
	w := httptest.NewRecorder()
	l.Handler().ServeHTTP(w, req)
	if w.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", w.Code, w.Body.String())
	}
	return w.Body.String()
}

// A group restarted twice leaves two removed queues that hold the feed:
// their items are summed into one series, and the scrape does not fail on
// duplicate series.
func TestMetricsOfRemovedFencedAndReopens(t *testing.T) {
	fs := &fakeServer{}
	fs.set(framework.FeedStatus{
		Name: "orders",
		Status: feed.Status{
			State: feed.StateBehind, Epoch: 9, ReadPosition: 100, FileSize: 250,
			Reopens: map[string]uint64{feed.ReasonReplaced: 2, feed.ReasonTruncated: 1},
		},
		Stalled: true, StallReason: "consumer g fenced or dead",
		Groups: []framework.QueueStatus{
			{Group: "g", Depth: 3, Fenced: true},
			{Group: "g", Depth: 4, Removed: true},
			{Group: "g", Depth: 5, Removed: true},
		},
	})
	l, err := ops.New(ops.Config{Server: fs, Feeds: []string{"orders"}})
	require.NoError(t, err)
	body := scrape(t, l)
	for sample, want := range map[string]string{
		`tidemark_feed_behind_bytes{feed="orders"}`:                                           "150",
		`tidemark_feed_stalled{feed="orders"}`:                                                "1",
		`tidemark_feed_state{feed="orders",state="BEHIND"}`:                                   "1",
		`tidemark_feed_reopens_total{feed="orders",reason="input replaced while being read"}`: "2",
		`tidemark_feed_reopens_total{feed="orders",reason="input truncated"}`:                 "1",
		`tidemark_queue_fenced{feed="orders",group="g"}`:                                      "1",
		`tidemark_queue_depth{feed="orders",group="g"}`:                                       "3",
		`tidemark_queue_removed_held_items{feed="orders",group="g"}`:                          "9",
		`tidemark_ops_status_errors`:                                                          "0",
	} {
		require.Equal(t, want, metric(body, sample), "%s in\n%s", sample, body)
	}
}

// The page escapes what it shows: a feed name or stall reason cannot inject
// markup.
func TestPageEscapes(t *testing.T) {
	fs := &fakeServer{}
	fs.set(framework.FeedStatus{Name: "<b>x</b>", Stalled: true, StallReason: `<script>alert(1)</script>`})
	l, err := ops.New(ops.Config{Server: fs, Feeds: []string{"<b>x</b>"}})
	require.NoError(t, err)
	req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1/", nil)
	req.RemoteAddr = "127.0.0.1:1"
	w := httptest.NewRecorder()
	l.Handler().ServeHTTP(w, req)
	require.Equal(t, http.StatusOK, w.Code)
	body := w.Body.String()
	require.False(t, strings.Contains(body, "<script>alert"), "unescaped script in\n%s", body)
	require.Contains(t, body, "&lt;script&gt;alert(1)&lt;/script&gt;")
	require.Contains(t, body, "&lt;b&gt;x&lt;/b&gt;")
}

// A feed name with a slash reaches Release whole (escaped in the path).
func TestReleaseEscapedFeedName(t *testing.T) {
	fs := &fakeServer{}
	l, err := ops.New(ops.Config{Server: fs, Feeds: []string{}})
	require.NoError(t, err)
	req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/feeds/a%2Fb/release?consumer=g%20h", nil)
	req.RemoteAddr = "127.0.0.1:1"
	w := httptest.NewRecorder()
	l.Handler().ServeHTTP(w, req)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.Equal(t, []string{"a/b/g h"}, fs.released)
}

// A store's counters and durable positions are read at each scrape and in
// /status.
func TestStoreMetricsAndStatus(t *testing.T) {
	st, err := state.Open("bbolt:"+filepath.Join(t.TempDir(), "s"), &state.Options{Sync: true})
	require.NoError(t, err)
	defer st.Close()
	for i := 1; i <= 3; i++ {
		d := tidemark.Delivery{Feed: "orders", Epoch: 7, Position: int64(10 * i), Seq: uint64(i)}
		_, err := st.Apply(context.Background(), d, func(tx *state.Tx) error { return tx.Put([]byte{byte(i)}, nil) })
		require.NoError(t, err)
	}
	// A re-delivery is skipped and counted.
	_, err = st.Apply(context.Background(), tidemark.Delivery{Feed: "orders", Epoch: 7, Position: 20, Seq: 4}, func(*state.Tx) error { return nil })
	require.NoError(t, err)
	// The first line's key, committed two batches ago, is read from the
	// value cache: a hit.
	require.NoError(t, st.View(func(tx *state.Tx) error {
		v, ok, err := tx.Get([]byte{1})
		require.True(t, ok)
		require.Empty(t, v)
		return err
	}))
	budget := st.Stats().CacheBudget
	require.Positive(t, budget)

	fs := &fakeServer{}
	fs.set(framework.FeedStatus{Name: "orders"})
	obs := ops.NewObserver()
	l, err := ops.New(ops.Config{Server: fs, Feeds: []string{"orders"}, Observer: obs,
		Stores: []ops.StoreConfig{{Name: "ledger", Store: st}}})
	require.NoError(t, err)
	body := scrape(t, l)
	for sample, want := range map[string]string{
		`tidemark_store_batches_committed_total{store="ledger"}`:              "3",
		`tidemark_store_failed_commits_total{store="ledger"}`:                 "0",
		`tidemark_store_failed{store="ledger"}`:                               "0",
		`tidemark_store_applied_total{store="ledger"}`:                        "3",
		`tidemark_store_redeliveries_skipped_total{store="ledger"}`:           "1",
		`tidemark_store_staged{store="ledger"}`:                               "0",
		`tidemark_store_durable_position_bytes{feed="orders",store="ledger"}`: "30",
		`tidemark_store_durable_epoch{feed="orders",store="ledger"}`:          "7",
		`tidemark_store_cache_hits_total{store="ledger"}`:                     "1",
		`tidemark_store_cache_misses_total{store="ledger"}`:                   "0",
	} {
		require.Equal(t, want, metric(body, sample), "%s in\n%s", sample, body)
	}
	got, err := strconv.ParseFloat(metric(body, `tidemark_store_cache_budget_bytes{store="ledger"}`), 64)
	require.NoError(t, err, body)
	require.Equal(t, float64(budget), got)

	req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1/status", nil)
	req.RemoteAddr = "127.0.0.1:1"
	w := httptest.NewRecorder()
	l.Handler().ServeHTTP(w, req)
	var r ops.Report
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &r))
	require.Len(t, r.Stores, 1)
	s := r.Stores[0]
	require.Equal(t, "ledger", s.Name)
	require.Equal(t, state.Bolt, s.Backend)
	require.EqualValues(t, 3, s.Commits)
	require.EqualValues(t, 1, s.CacheHits)
	require.EqualValues(t, 0, s.CacheMisses)
	require.Equal(t, budget, s.CacheBudget)
	require.Equal(t, []ops.StorePosition{{Feed: "orders", Epoch: 7, Position: 30}}, s.Positions)
}

// A feed whose name is not valid UTF-8 cannot be a label value: its
// metrics are left out and logged, and the rest of the scrape is served.
func TestScrapeSurvivesABadLabel(t *testing.T) {
	fs := &fakeServer{}
	fs.set(framework.FeedStatus{Name: "ok", Status: feed.Status{ReadPosition: 5}})
	fs.set(framework.FeedStatus{Name: "bad\xff"})
	l, err := ops.New(ops.Config{Server: fs, Feeds: []string{"ok", "bad\xff"}})
	require.NoError(t, err)
	body := scrape(t, l)
	require.Equal(t, "5", metric(body, `tidemark_feed_read_position_bytes{feed="ok"}`), body)
}

// A feed that follows a set of files has its metrics per file, by path.
func TestMetricsPerFileOfASet(t *testing.T) {
	fs := &fakeServer{}
	fs.set(framework.FeedStatus{
		Name: "logs",
		Status: feed.Status{
			State: feed.StateBehind, ReadPosition: 130, FileSize: 300,
			Files: []feed.Status{
				{Path: "/l/a.log", State: feed.StateCaughtUp, ReadPosition: 100, CommittedPosition: 90, FileSize: 100, LinesRead: 10},
				{Path: "/l/b.log", State: feed.StateBehind, ReadPosition: 30, FileSize: 200, LinesRead: 3},
			},
		},
	})
	l, err := ops.New(ops.Config{Server: fs, Feeds: []string{"logs"}})
	require.NoError(t, err)
	body := scrape(t, l)
	for sample, want := range map[string]string{
		`tidemark_file_read_position_bytes{feed="logs",file="/l/a.log"}`:    "100",
		`tidemark_file_pointer_position_bytes{feed="logs",file="/l/a.log"}`: "90",
		`tidemark_file_behind_bytes{feed="logs",file="/l/b.log"}`:           "170",
		`tidemark_file_lines_read_total{feed="logs",file="/l/b.log"}`:       "3",
		`tidemark_file_caught_up{feed="logs",file="/l/a.log"}`:              "1",
		`tidemark_file_caught_up{feed="logs",file="/l/b.log"}`:              "0",
	} {
		require.Equal(t, want, metric(body, sample), "%s in\n%s", sample, body)
	}
}
