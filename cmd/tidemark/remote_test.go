package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/ops"
)

// deadline is how long a test waits for a condition before failing.
const deadline = 30 * time.Second

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

// proc subscribes to the feed "in" and counts lines; with blockSeq set it
// waits at that line until unblock is closed (or its ctx ends).
type proc struct {
	blockSeq uint64
	unblock  chan struct{}
	waiting  atomic.Bool
	n        atomic.Int64
}

func (p *proc) Start(_ context.Context, fc *framework.Context) error { return fc.Subscribe("in") }

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

// startStalled starts a server on a 20-line file with groups A and B and an
// operator listener with token, then stalls the feed: A, blocked at line 5,
// is unsubscribed with 15 lines unfinished. It returns the server and the
// listener's address.
func startStalled(t *testing.T, token string) (*framework.Server, string) {
	t.Helper()
	dir := t.TempDir()
	input := filepath.Join(dir, "in.log")
	var sb strings.Builder
	for i := 1; i <= 20; i++ {
		fmt.Fprintf(&sb, "line-%04d\n", i)
	}
	require.NoError(t, os.WriteFile(input, []byte(sb.String()), 0o644))
	a := &proc{blockSeq: 5, unblock: make(chan struct{})}
	b := &proc{}
	srv, err := framework.New(framework.Config{
		Feeds: []framework.FeedConfig{{
			Name: "in", File: &framework.FileConfig{Filename: input},
			QueueCapacity: 1000, Idle: framework.FixedIdle(time.Millisecond),
		}},
		Groups: []framework.GroupConfig{{Name: "A", Processors: []string{"a"}}, {Name: "B", Processors: []string{"b"}}},
	}, framework.Processors{"a": a, "b": b})
	require.NoError(t, err)
	require.NoError(t, srv.Start(context.Background()))
	unblocked := false
	t.Cleanup(func() {
		if !unblocked {
			close(a.unblock)
		}
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		require.NoError(t, srv.Stop(ctx))
	})
	l, err := ops.New(ops.Config{Server: srv, Feeds: []string{"in"}, Token: token})
	require.NoError(t, err)
	require.NoError(t, l.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, l.Close()) })

	waitFor(t, "A blocked", a.waiting.Load)
	waitFor(t, "B done", func() bool { return b.n.Load() == 20 })
	require.NoError(t, srv.Unsubscribe("in", "A"))
	close(a.unblock)
	unblocked = true
	waitFor(t, "stalled", func() bool {
		st, err := srv.FeedStatus("in")
		return err == nil && st.Stalled
	})
	return srv, l.Addr().String()
}

func TestStatusAndReleaseOfARunningServer(t *testing.T) {
	srv, addr := startStalled(t, "s3cret")

	// The listener has a token: reads need it too.
	r := tm("status", "--addr", addr)
	expect(t, r, exitFail)
	require.Contains(t, r.stderr, "401")
	require.Contains(t, r.stderr, "--token or $TIDEMARK_TOKEN")
	r = tm("status", "--addr", addr, "--token", "wrong")
	expect(t, r, exitFail)
	require.Contains(t, r.stderr, "the token given is not the listener's")
	t.Setenv("TIDEMARK_TOKEN", "s3cret")
	expect(t, tm("status", "--addr", addr), exitOK)
	t.Setenv("TIDEMARK_TOKEN", "")

	r = tm("status", "--addr", addr, "--token", "s3cret")
	expect(t, r, exitOK)
	for _, want := range []string{
		"FEED", "EPOCH", "BEHIND", "PENDING",
		"STALLED: a removed consumer left unprocessed items: A",
		"removed, holds the pointer (tidemark release --feed in --consumer A)",
		"GROUP", "PROCESSED",
	} {
		require.Contains(t, r.stdout, want)
	}
	lines := strings.Split(r.stdout, "\n")
	require.True(t, strings.HasPrefix(lines[1], "in "), "the feed's row: %q", lines[1])
	fields := strings.Fields(lines[1])
	require.Equal(t, "caught", fields[1])
	require.Equal(t, "200", fields[4], "read position in %q", lines[1]) // in caught up EPOCH READ

	r = tm("status", "--addr", addr, "--check", "--token", "s3cret")
	expect(t, r, exitCheck)
	require.Contains(t, r.stdout, "STALLED")
	require.Contains(t, r.stderr, "unhealthy: feed in: stalled: a removed consumer left unprocessed items: A")
	// The groups are listed, and the listener's /readyz says the same.
	require.Contains(t, r.stdout, "GROUP  STATE")
	resp, err := http.Get("http://" + addr + "/readyz")
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Contains(t, string(b), "readyz check failed")

	r = tm("status", "--addr", "http://"+addr+"/", "--json", "--token", "s3cret")
	expect(t, r, exitOK)
	var rep ops.Report
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	require.True(t, rep.Feeds[0].Stalled)

	// The listener has a token: a release without it is refused.
	r = tm("release", "--addr", addr, "--feed", "in", "--consumer", "A")
	expect(t, r, exitFail)
	require.Contains(t, r.stderr, "401")
	require.Contains(t, r.stderr, "Authorization: Bearer")
	r = tm("release", "--addr", addr, "--feed", "in", "--consumer", "A", "--token", "wrong")
	expect(t, r, exitFail)
	r = tm("release", "--addr", addr, "--feed", "in", "--consumer", "B", "--token", "s3cret")
	expect(t, r, exitFail)
	require.Contains(t, r.stderr, "409")
	require.Contains(t, r.stderr, "no removed consumer holds the feed")
	st, err := srv.FeedStatus("in")
	require.NoError(t, err)
	require.True(t, st.Stalled)

	r = tm("release", "--addr", addr, "--feed", "in", "--consumer", "A", "--token", "s3cret")
	expect(t, r, exitOK)
	require.Contains(t, r.stdout, "released the hold of A on feed in")
	require.NoError(t, srv.WaitSettled(context.Background(), "in"))
	r = tm("status", "--addr", addr, "--check", "--token", "s3cret")
	expect(t, r, exitOK)
	require.Contains(t, r.stdout, "settled")
	require.NotContains(t, r.stdout, "STALLED")
	require.NotContains(t, r.stdout, "removed")
}

func TestStatusOfNoServer(t *testing.T) {
	// A port that was free a moment ago.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	r := tm("status", "--addr", addr, "--timeout", "5s")
	expect(t, r, exitFail)
	require.Contains(t, r.stderr, "is the server running")
	r = tm("status", "--addr", "::bad::")
	expect(t, r, exitFail)
}
