package ops_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/ops"
)

func base(l *ops.Listener) string { return "http://" + l.Addr().String() }

func TestDefaultAddrIsLoopback(t *testing.T) {
	f := startFixture(t, 3, 0)
	l := startListener(t, ops.Config{Server: f.srv, Feeds: []string{"in"}})
	ta, ok := l.Addr().(*net.TCPAddr)
	require.True(t, ok)
	require.True(t, ta.IP.Equal(net.IPv4(127, 0, 0, 1)), "bound to %v", ta.IP)
	require.NotZero(t, ta.Port)
}

func TestStatusJSON(t *testing.T) {
	f := startFixture(t, 20, 0)
	require.NoError(t, f.srv.WaitSettled(context.Background(), "in"))
	l := startListener(t, ops.Config{Server: f.srv, Feeds: []string{"in"}})

	code, body := get(t, base(l)+"/status")
	require.Equal(t, http.StatusOK, code, body)
	var r ops.Report
	require.NoError(t, json.Unmarshal([]byte(body), &r))
	require.Len(t, r.Feeds, 1)
	fr := r.Feeds[0]
	require.Equal(t, "in", fr.Name)
	require.Equal(t, f.input, fr.Path)
	require.Equal(t, "CAUGHT_UP", strings.ToUpper(strings.ReplaceAll(fr.State, " ", "_")))
	require.EqualValues(t, 200, fr.ReadPosition)
	require.EqualValues(t, 200, fr.FileSize)
	require.EqualValues(t, 0, fr.BytesBehind)
	require.EqualValues(t, 20, fr.Read)
	require.EqualValues(t, 40, fr.Delivered)
	require.True(t, fr.Settled)
	require.False(t, fr.Stalled)
	require.NotZero(t, fr.Epoch)
	require.Len(t, fr.Groups, 2)
	require.Equal(t, "A", fr.Groups[0].Group)
	require.EqualValues(t, 20, fr.Groups[0].Processed)
	// The JSON has the field names the CLI and scripts rely on.
	require.Contains(t, body, `"pointerPosition"`)
	require.Contains(t, body, `"lastCommitPosition"`)
	require.Contains(t, body, `"pendingAcks"`)

	code, body = get(t, base(l)+"/status/in")
	require.Equal(t, http.StatusOK, code, body)
	var one ops.FeedReport
	require.NoError(t, json.Unmarshal([]byte(body), &one))
	require.Equal(t, "in", one.Name)

	code, body = get(t, base(l)+"/status/nope")
	require.Equal(t, http.StatusNotFound, code, body)
	require.Contains(t, body, "nope")
}

func TestUnknownFeedIsReportedNotFatal(t *testing.T) {
	f := startFixture(t, 3, 0)
	l := startListener(t, ops.Config{Server: f.srv, Feeds: []string{"in", "ghost"}})
	code, body := get(t, base(l)+"/status")
	require.Equal(t, http.StatusOK, code)
	var r ops.Report
	require.NoError(t, json.Unmarshal([]byte(body), &r))
	require.Len(t, r.Feeds, 1)
	require.Len(t, r.Errors, 1)
	require.Contains(t, r.Errors[0], "ghost")
	code, body = get(t, base(l)+"/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "1", metric(body, "tidemark_ops_status_errors"))
}

func TestPageRefreshesAndShowsFeeds(t *testing.T) {
	f := startFixture(t, 5, 0)
	require.NoError(t, f.srv.WaitSettled(context.Background(), "in"))
	l := startListener(t, ops.Config{Server: f.srv, Feeds: []string{"in"}, Refresh: 3 * time.Second})
	code, body := get(t, base(l)+"/")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `<meta http-equiv="refresh" content="3">`)
	require.Contains(t, body, ">in</td>")
	require.Contains(t, body, "settled")
	code, _ = get(t, base(l)+"/nothing-here")
	require.Equal(t, http.StatusNotFound, code)
}

func TestMetricsOfFeedsAndQueues(t *testing.T) {
	f := startFixture(t, 20, 0)
	require.NoError(t, f.srv.WaitSettled(context.Background(), "in"))
	obs := ops.NewObserver()
	obs.ObserveHandle("A", 3*time.Millisecond)
	obs.ForStore("ledger").ObserveCommit(100, 2*time.Millisecond)
	reg := prometheus.NewRegistry()
	l := startListener(t, ops.Config{Server: f.srv, Feeds: []string{"in"}, Observer: obs, Registerer: reg})
	require.Same(t, obs, l.Observer())

	var body string
	waitFor(t, "the commit of every line", func() bool {
		_, body = get(t, base(l)+"/metrics")
		return metric(body, `tidemark_feed_committed_position_bytes{feed="in"}`) == "200" &&
			metric(body, `tidemark_feed_pointer_position_bytes{feed="in"}`) == "200"
	})
	for sample, want := range map[string]string{
		`tidemark_feed_read_position_bytes{feed="in"}`:                 "200",
		`tidemark_feed_pointer_position_bytes{feed="in"}`:              "200",
		`tidemark_feed_file_size_bytes{feed="in"}`:                     "200",
		`tidemark_feed_behind_bytes{feed="in"}`:                        "0",
		`tidemark_feed_lines_read_total{feed="in"}`:                    "20",
		`tidemark_feed_lines_delivered_total{feed="in"}`:               "40",
		`tidemark_feed_lines_dropped_total{feed="in"}`:                 "0",
		`tidemark_feed_lines_failed_total{feed="in"}`:                  "0",
		`tidemark_feed_lines_skipped_total{feed="in"}`:                 "0",
		`tidemark_feed_pending_acks{feed="in"}`:                        "0",
		`tidemark_feed_commit_lag_lines{feed="in"}`:                    "0",
		`tidemark_feed_stalled{feed="in"}`:                             "0",
		`tidemark_feed_settled{feed="in"}`:                             "1",
		`tidemark_feed_consumers{feed="in"}`:                           "2",
		`tidemark_feed_state{feed="in",state="CAUGHT_UP"}`:             "1",
		`tidemark_feed_state{feed="in",state="BEHIND"}`:                "0",
		`tidemark_queue_depth{feed="in",group="A"}`:                    "0",
		`tidemark_queue_lines_processed_total{feed="in",group="B"}`:    "20",
		`tidemark_queue_failures_total{feed="in",group="A"}`:           "0",
		`tidemark_queue_fenced{feed="in",group="A"}`:                   "0",
		`tidemark_group_handle_seconds_count{group="A"}`:               "1",
		`tidemark_store_commit_seconds_count{store="ledger"}`:          "1",
		`tidemark_store_batch_lines_sum{store="ledger"}`:               "100",
		`tidemark_store_batch_lines_bucket{store="ledger",le="128"}`:   "1",
		`tidemark_store_batch_lines_bucket{store="ledger",le="64"}`:    "0",
		`tidemark_group_handle_seconds_bucket{group="A",le="0.00064"}`: "0",
		`tidemark_group_handle_seconds_bucket{group="A",le="0.01024"}`: "1",
	} {
		require.Equal(t, want, metric(body, sample), "%s in\n%s", sample, body)
	}
	require.NotEmpty(t, metric(body, `tidemark_feed_epoch{feed="in"}`))

	// The same metrics are on the Registerer passed in.
	mfs, err := reg.Gather()
	require.NoError(t, err)
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	require.True(t, names["tidemark_feed_read_position_bytes"])
	require.True(t, names["tidemark_group_handle_seconds"])

	// A second listener on the same Registerer is a conflict, said so.
	_, err = ops.New(ops.Config{Server: f.srv, Feeds: []string{"in"}, Observer: obs, Registerer: reg})
	require.ErrorContains(t, err, "Registerer")
}

func TestReopenCountByReason(t *testing.T) {
	f := startFixture(t, 10, 0)
	require.NoError(t, f.srv.WaitSettled(context.Background(), "in"))
	l := startListener(t, ops.Config{Server: f.srv, Feeds: []string{"in"}})
	// Truncate the input: the source reopens it with the reason "input truncated".
	require.NoError(t, writeFile(f.input, "x\n"))
	waitFor(t, "the reopen", func() bool {
		_, body := get(t, base(l)+"/metrics")
		return metric(body, `tidemark_feed_reopens_total{feed="in",reason="input truncated"}`) == "1"
	})
}

func TestReleaseOverHTTP(t *testing.T) {
	f := startFixture(t, 20, 5)
	l := startListener(t, ops.Config{Server: f.srv, Feeds: []string{"in"}})
	f.stall(t, 20)

	_, body := get(t, base(l)+"/metrics")
	require.Equal(t, "1", metric(body, `tidemark_feed_stalled{feed="in"}`), body)
	require.Equal(t, "0", metric(body, `tidemark_feed_settled{feed="in"}`), body)
	require.Equal(t, "15", metric(body, `tidemark_queue_removed_held_items{feed="in",group="A"}`), body)
	require.Equal(t, "1", metric(body, `tidemark_feed_consumers{feed="in"}`), body)

	_, body = get(t, base(l)+"/status")
	var r ops.Report
	require.NoError(t, json.Unmarshal([]byte(body), &r))
	require.True(t, r.Feeds[0].Stalled)
	require.Contains(t, r.Feeds[0].StallReason, "A")
	_, page := get(t, base(l)+"/")
	require.Contains(t, page, "stalled: ")
	require.Contains(t, page, "tidemark release --addr "+l.Addr().String()+" --feed in --consumer A")

	rel := base(l) + "/feeds/in/release"
	code, body := do(t, http.MethodPost, rel, "", nil)
	require.Equal(t, http.StatusBadRequest, code, body)
	require.Contains(t, body, "consumer=")
	code, body = get(t, rel+"?consumer=A")
	require.Equal(t, http.StatusMethodNotAllowed, code, body)
	code, body = do(t, http.MethodPost, rel+"?consumer=B", "", nil)
	require.Equal(t, http.StatusConflict, code, body)
	code, body = do(t, http.MethodPost, base(l)+"/feeds/nope/release?consumer=A", "", nil)
	require.Equal(t, http.StatusNotFound, code, body)

	// The consumer may come in a form body too.
	code, body = do(t, http.MethodPost, rel, "", strings.NewReader(url.Values{"consumer": {"A"}}.Encode()))
	require.Equal(t, http.StatusOK, code, body)
	var res ops.ReleaseResult
	require.NoError(t, json.Unmarshal([]byte(body), &res))
	require.Equal(t, "A", res.Consumer)
	require.NotNil(t, res.Status)
	require.EqualValues(t, 1, res.Status.Released)

	require.NoError(t, f.srv.WaitSettled(context.Background(), "in"))
	waitFor(t, "the commit of every line", func() bool {
		_, body = get(t, base(l)+"/metrics")
		return metric(body, `tidemark_feed_committed_position_bytes{feed="in"}`) == "200"
	})
	require.Equal(t, "0", metric(body, `tidemark_feed_stalled{feed="in"}`))
	require.Equal(t, "1", metric(body, `tidemark_feed_releases_total{feed="in"}`))
	require.Empty(t, metric(body, `tidemark_queue_removed_held_items{feed="in",group="A"}`))
}

// A request from a non-loopback address is refused without a token; with
// one, every request needs it, reads included, from any address. The
// remote address is simulated: no traffic leaves the loopback interface.
func TestAccessRules(t *testing.T) {
	f := startFixture(t, 20, 5)
	f.stall(t, 20)
	remote := "10.0.0.1:1234"
	serve := func(l *ops.Listener, method, target, from, auth string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, "http://127.0.0.1"+target, nil)
		req.RemoteAddr = from
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		w := httptest.NewRecorder()
		l.Handler().ServeHTTP(w, req)
		return w
	}

	open, err := ops.New(ops.Config{Server: f.srv, Feeds: []string{"in"}})
	require.NoError(t, err)
	for _, target := range []string{"/", "/status", "/status/in", "/metrics"} {
		require.Equal(t, http.StatusForbidden, serve(open, http.MethodGet, target, remote, "").Code, target)
		require.Equal(t, http.StatusForbidden, serve(open, http.MethodGet, target, "[2001:db8::1]:80", "").Code, target)
		require.Equal(t, http.StatusForbidden, serve(open, http.MethodGet, target, "not an address", "").Code, target)
		require.Equal(t, http.StatusOK, serve(open, http.MethodGet, target, "127.0.0.1:5000", "").Code, target)
		require.Equal(t, http.StatusOK, serve(open, http.MethodGet, target, "[::1]:5000", "").Code, target)
		require.Equal(t, http.StatusOK, serve(open, http.MethodGet, target, "[::ffff:127.0.0.1]:5000", "").Code, target)
	}
	w := serve(open, http.MethodPost, "/feeds/in/release?consumer=A", remote, "")
	require.Equal(t, http.StatusForbidden, w.Code)
	require.Contains(t, w.Body.String(), "token")
	st, err := f.srv.FeedStatus("in")
	require.NoError(t, err)
	require.True(t, st.Stalled, "a refused release released nothing")

	guarded, err := ops.New(ops.Config{Server: f.srv, Feeds: []string{"in"}, Token: "s3cret"})
	require.NoError(t, err)
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("anyone:s3cret"))
	for _, target := range []string{"/", "/status", "/status/in", "/metrics"} {
		for _, from := range []string{remote, "127.0.0.1:5000"} {
			for _, auth := range []string{"", "Bearer wrong", "Basic s3cret", "s3cret", "Bearer s3cret2",
				"Basic " + base64.StdEncoding.EncodeToString([]byte("s3cret:wrong"))} {
				w := serve(guarded, http.MethodGet, target, from, auth)
				require.Equal(t, http.StatusUnauthorized, w.Code, "GET %s with %q from %s", target, auth, from)
				require.Equal(t, []string{`Bearer realm="tidemark"`, `Basic realm="tidemark", charset="UTF-8"`}, w.Header().Values("WWW-Authenticate"))
				require.NotContains(t, w.Body.String(), `"in"`, "nothing of the status leaks")
			}
			require.Equal(t, http.StatusOK, serve(guarded, http.MethodGet, target, from, "Bearer s3cret").Code, target)
			require.Equal(t, http.StatusOK, serve(guarded, http.MethodGet, target, from, "bearer  s3cret").Code, target)
			require.Equal(t, http.StatusOK, serve(guarded, http.MethodGet, target, from, basic).Code, target)
		}
	}
	for _, auth := range []string{"", "Bearer wrong", "Basic s3cret", "s3cret", "Bearer s3cret2"} {
		for _, from := range []string{remote, "127.0.0.1:5000"} {
			w := serve(guarded, http.MethodPost, "/feeds/in/release?consumer=A", from, auth)
			require.Equal(t, http.StatusUnauthorized, w.Code, "auth %q from %s", auth, from)
			require.Contains(t, w.Header().Get("WWW-Authenticate"), "Bearer")
		}
	}
	st, err = f.srv.FeedStatus("in")
	require.NoError(t, err)
	require.True(t, st.Stalled, "an unauthorized release released nothing")
	w = serve(guarded, http.MethodPost, "/feeds/in/release?consumer=A", remote, "Bearer s3cret")
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.NoError(t, f.srv.WaitSettled(context.Background(), "in"))

	_, err = ops.New(ops.Config{Server: f.srv, Feeds: []string{"in"}, AllowedHosts: []string{""}})
	require.ErrorIs(t, err, ops.ErrInvalidConfig)
}

// A request for a host name the listener does not serve is refused, with a
// token or without, from loopback or not: a web page that rebinds its name
// to the listener's address cannot read the status. localhost, IP
// addresses and the allowed hosts are served.
func TestDNSRebindingRefused(t *testing.T) {
	f := startFixture(t, 1, 0)
	open, err := ops.New(ops.Config{Server: f.srv, Feeds: []string{"in"}, AllowedHosts: []string{"Tidemark-1.example.net."}})
	require.NoError(t, err)
	guarded, err := ops.New(ops.Config{Server: f.srv, Feeds: []string{"in"}, Token: "t", AllowedHosts: []string{"tidemark-1.example.net:9100"}})
	require.NoError(t, err)
	for host, want := range map[string]int{
		"evil.example":                http.StatusForbidden,
		"evil.example:8080":           http.StatusForbidden,
		"127.0.0.1:8080":              http.StatusOK,
		"127.0.0.2":                   http.StatusOK,
		"localhost:9":                 http.StatusOK,
		"localhost.:9":                http.StatusOK,
		"LOCALHOST":                   http.StatusOK,
		"[::1]:9":                     http.StatusOK,
		"10.0.0.1:9":                  http.StatusOK, // an address cannot be rebound
		"[2001:db8::1]:9":             http.StatusOK,
		"localhost.evil.com":          http.StatusForbidden,
		"tidemark-1.example.net:9100": http.StatusOK,
		"TIDEMARK-1.example.net":      http.StatusOK,
		"tidemark-1.example.net.evil": http.StatusForbidden,
		"x.tidemark-1.example.net":    http.StatusForbidden,
	} {
		for _, tc := range []struct {
			l    *ops.Listener
			from string
			auth string
		}{{open, "127.0.0.1:5000", ""}, {guarded, "127.0.0.1:5000", "Bearer t"}, {guarded, "10.1.1.1:5000", "Bearer t"}} {
			req := httptest.NewRequest(http.MethodGet, "/status", nil)
			req.Host = host
			req.RemoteAddr = tc.from
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			w := httptest.NewRecorder()
			tc.l.Handler().ServeHTTP(w, req)
			require.Equal(t, want, w.Code, "host %s from %s, token %v", host, tc.from, tc.auth != "")
			if want == http.StatusForbidden {
				require.Contains(t, w.Body.String(), "DNS rebinding")
				require.Contains(t, w.Body.String(), "allowed hosts")
			}
		}
	}
}

// A browser's cross-origin POST to the loopback listener is refused: a web
// page cannot release a hold.
func TestCrossOriginPostRefused(t *testing.T) {
	f := startFixture(t, 20, 5)
	f.stall(t, 20)
	l, err := ops.New(ops.Config{Server: f.srv, Feeds: []string{"in"}})
	require.NoError(t, err)
	req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/feeds/in/release?consumer=A", nil)
	req.RemoteAddr = "127.0.0.1:5000"
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	w := httptest.NewRecorder()
	l.Handler().ServeHTTP(w, req)
	require.Equal(t, http.StatusForbidden, w.Code)
	st, err := f.srv.FeedStatus("in")
	require.NoError(t, err)
	require.True(t, st.Stalled)
}

func TestConfigErrors(t *testing.T) {
	f := startFixture(t, 1, 0)
	_, err := ops.New(ops.Config{})
	require.ErrorIs(t, err, ops.ErrInvalidConfig)
	// A server that cannot list its feeds needs Config.Feeds.
	_, err = ops.New(ops.Config{Server: &fakeServer{}})
	require.ErrorIs(t, err, ops.ErrInvalidConfig)
	require.ErrorContains(t, err, "Feeds")
	_, err = ops.New(ops.Config{Server: f.srv, Feeds: []string{"in"}, Stores: []ops.StoreConfig{{Name: ""}}})
	require.ErrorIs(t, err, ops.ErrInvalidConfig)
	_, err = ops.New(ops.Config{Server: f.srv, Feeds: []string{"in"}, Stores: []ops.StoreConfig{{Name: "s"}}})
	require.ErrorIs(t, err, ops.ErrInvalidConfig)
}

// TestFeedNamesFromServer: without Config.Feeds the listener reports the
// feeds the framework server lists.
func TestFeedNamesFromServer(t *testing.T) {
	f := startFixture(t, 2, 0)
	l := startListener(t, ops.Config{Server: f.srv})
	_, body := get(t, base(l)+"/status")
	var r ops.Report
	require.NoError(t, json.Unmarshal([]byte(body), &r))
	require.Len(t, r.Feeds, 1)
}

func TestStartCloseLifecycle(t *testing.T) {
	f := startFixture(t, 1, 0)
	l, err := ops.New(ops.Config{Server: f.srv, Feeds: []string{"in"}})
	require.NoError(t, err)
	require.Nil(t, l.Addr())
	require.NoError(t, l.Close(), "close before start")
	require.ErrorIs(t, l.Start(context.Background()), ops.ErrStarted, "no start after close")

	l, err = ops.New(ops.Config{Server: f.srv, Feeds: []string{"in"}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, l.Start(ctx))
	require.ErrorIs(t, l.Start(ctx), ops.ErrStarted)
	addr := l.Addr().String()
	code, _ := get(t, "http://"+addr+"/status")
	require.Equal(t, http.StatusOK, code)
	cancel() // the context's end closes the listener
	waitFor(t, "the listener to close", func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return true
		}
		_ = c.Close()
		return false
	})
	require.NoError(t, l.Close())

	// A busy address is an error that names it.
	l1 := startListener(t, ops.Config{Server: f.srv, Feeds: []string{"in"}})
	l2, err := ops.New(ops.Config{Server: f.srv, Feeds: []string{"in"}, Addr: l1.Addr().String()})
	require.NoError(t, err)
	err = l2.Start(context.Background())
	require.Error(t, err)
	require.Contains(t, err.Error(), l1.Addr().String())
	require.False(t, errors.Is(err, ops.ErrStarted))
}

// The limits of the listener's own server: an idle keep-alive connection
// and a request whose body stops coming are closed when their timeout
// passes; a body is refused where none is taken, and bounded where one is.
func TestListenerLimits(t *testing.T) {
	fs := &fakeServer{}
	fs.set(framework.FeedStatus{Name: "orders"})
	l := startListener(t, ops.Config{Server: fs, Feeds: []string{"orders"},
		IdleTimeout: 50 * time.Millisecond, ReadTimeout: 100 * time.Millisecond})
	addr := l.Addr().String()
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.DialTimeout("tcp", addr, deadline)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		require.NoError(t, c.SetDeadline(time.Now().Add(deadline)))
		return c, bufio.NewReader(c)
	}
	host := "Host: " + addr + "\r\n"

	// An idle keep-alive connection is closed by the listener: the read
	// after the response ends, well before the test's own deadline.
	c, br := dial()
	_, err := io.WriteString(c, "GET /status HTTP/1.1\r\n"+host+"\r\n")
	require.NoError(t, err)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.False(t, resp.Close, "a keep-alive response")
	_, err = br.ReadByte()
	require.ErrorIs(t, err, io.EOF, "the idle connection is closed by the listener")

	// A body that stops coming is cut off by ReadTimeout.
	c, br = dial()
	_, err = io.WriteString(c, "POST /feeds/orders/release HTTP/1.1\r\n"+host+
		"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n\r\nconsumer=")
	require.NoError(t, err)
	resp, err = http.ReadResponse(br, nil)
	if err == nil {
		// The handler saw the read fail and answered; then the listener
		// closes the connection.
		require.Equal(t, http.StatusBadRequest, resp.StatusCode)
		_, _ = io.Copy(io.Discard, resp.Body)
		_, err = br.ReadByte()
	}
	require.ErrorIs(t, err, io.EOF, "the slow body's connection is closed")
	require.Empty(t, fs.released, "nothing released from half a form")

	// A body larger than MaxRequestBody is refused.
	big := "consumer=" + strings.Repeat("g", ops.MaxRequestBody)
	code, body := do(t, http.MethodPost, base(l)+"/feeds/orders/release", "", strings.NewReader(big))
	require.Equal(t, http.StatusRequestEntityTooLarge, code, body)
	require.Contains(t, body, "larger than")
	require.Empty(t, fs.released)
	// A GET with a body is refused, and its connection closed unread.
	c, br = dial()
	_, err = io.WriteString(c, "GET /metrics HTTP/1.1\r\n"+host+"Content-Length: 100000\r\n\r\nabc")
	require.NoError(t, err)
	resp, err = http.ReadResponse(br, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.True(t, resp.Close)
	_, _ = io.Copy(io.Discard, resp.Body)
	_, err = br.ReadByte()
	require.ErrorIs(t, err, io.EOF)

	_, body = get(t, base(l)+"/metrics")
	require.Equal(t, "1", metric(body, `tidemark_ops_requests_refused_total{reason="body"}`), body)

	// Limits must be positive; zero means the default.
	for _, cfg := range []ops.Config{{MaxConns: -1}, {ReadTimeout: -time.Second}, {IdleTimeout: -1}} {
		cfg.Server, cfg.Feeds = fs, []string{"orders"}
		_, err := ops.New(cfg)
		require.ErrorIs(t, err, ops.ErrInvalidConfig)
	}
}
