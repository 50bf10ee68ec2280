package ops_test

import (
	"context"
	"fmt"
	"github.com/stretchr/testify/require"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/ops"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// client sends the tests' requests; no keep-alive, so that no connection
// goroutine outlives a test.
var client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: deadline}

// deadline is how long a test waits for a condition before failing.
const deadline = 30 * time.Second

// waitFor polls cond until it holds, failing the test after the deadline.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(deadline)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// proc is a processor that subscribes to one feed and counts lines; when
// blockSeq is set it waits at that line until unblocked (or its ctx ends).
type proc struct {
	feed     string
	blockSeq uint64
	unblock  chan struct{}
	waiting  atomic.Bool
	n        atomic.Int64
}

func (p *proc) Start(_ context.Context, fc *framework.Context) error { return fc.Subscribe(p.feed) }

func (p *proc) Handle(ctx context.Context, d tidemark.Delivery, _ []byte) error {
	if p.blockSeq != 0 && d.Seq == p.blockSeq {
		p.waiting.Store(true)
		select {
		case <-p.unblock:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	p.n.Add(1)
	return nil
}

// fixture is a running framework server on a temporary input file.
type fixture struct {
	dir   string
	input string
	srv   *framework.Server
	a, b  *proc
}

// lines returns n lines "line-0001\n"...
func lines(from, n int) string {
	var sb strings.Builder
	for i := from; i < from+n; i++ {
		fmt.Fprintf(&sb, "line-%04d\n", i)
	}
	return sb.String()
}

// startFixture starts a server with one file feed "in" of n lines and the
// groups A (which blocks at line blockA when it is not 0) and B.
func startFixture(t *testing.T, n int, blockA uint64) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{dir: dir, input: filepath.Join(dir, "in.log")}
	require.NoError(t, os.WriteFile(f.input, []byte(lines(1, n)), 0o644))
	f.a = &proc{feed: "in", blockSeq: blockA, unblock: make(chan struct{})}
	f.b = &proc{feed: "in"}
	cfg := framework.Config{
		Feeds: []framework.FeedConfig{{
			Name:          "in",
			File:          &framework.FileConfig{Filename: f.input},
			QueueCapacity: 1000,
			Idle:          framework.FixedIdle(time.Millisecond),
		}},
		Groups: []framework.GroupConfig{
			{Name: "A", Processors: []string{"a"}},
			{Name: "B", Processors: []string{"b"}},
		},
	}
	srv, err := framework.New(cfg, framework.Processors{"a": f.a, "b": f.b})
	require.NoError(t, err)
	require.NoError(t, srv.Start(context.Background()))
	f.srv = srv
	var once sync.Once
	t.Cleanup(func() {
		once.Do(func() {
			select {
			case <-f.a.unblock:
			default:
				close(f.a.unblock)
			}
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			require.NoError(t, srv.Stop(ctx))
		})
	})
	return f
}

// stall makes A, blocked at its line, a removed consumer with a backlog:
// the feed holds its pointer and reports stalled.
func (f *fixture) stall(t *testing.T, n int64) {
	t.Helper()
	waitFor(t, "A blocked", f.a.waiting.Load)
	waitFor(t, "B done", func() bool { return f.b.n.Load() == n })
	require.NoError(t, f.srv.Unsubscribe("in", "A"))
	close(f.a.unblock)
	// A's reader still finishes the line it was part way through when it
	// was removed; only then is its hold what the tests expect: the lines
	// after the one it was handling.
	waitFor(t, "A to finish the line it was handling", func() bool {
		st, err := f.srv.FeedStatus("in")
		if err != nil {
			return false
		}
		for _, q := range st.Groups {
			if q.Group == "A" && q.Removed {
				return q.Depth == uint64(n)-f.a.blockSeq
			}
		}
		return false
	})
	waitFor(t, "stalled", func() bool {
		st, err := f.srv.FeedStatus("in")
		return err == nil && st.Stalled
	})
}

// startListener starts a listener on 127.0.0.1 for the fixture's server.
func startListener(t *testing.T, cfg ops.Config) *ops.Listener {
	t.Helper()
	l, err := ops.New(cfg)
	require.NoError(t, err)
	require.NoError(t, l.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	return l
}

// get sends a GET and returns the status code and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	return do(t, http.MethodGet, url, "", nil)
}

func do(t *testing.T, method, url, token string, body io.Reader) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// metric returns the value of the sample whose line starts with name (with
// its labels), or "" when absent.
func metric(body, sample string) string {
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			return v
		}
	}
	return ""
}

// writeFile rewrites path in place (same file, new content).
func writeFile(path, content string) error {
	return os.WriteFile(path, []byte(content), 0o644)
}
