package ops_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidemark-go/tidemark/ops"
)

// TestListenerHoldsUnderLoad opens thousands of connections that send
// nothing, or a request and then nothing, or half a header, or a header
// and a trickle of body, all from this process on loopback, and holds them
// open. The listener must keep its own sockets within its cap (counted in
// /proc/self/fd) while /metrics, /status and the feed keep answering. Every
// timeout of the listener is set far beyond the test's length: what is
// checked rests on the cap and on which connections make room, never on a
// timeout expiring.
func TestListenerHoldsUnderLoad(t *testing.T) {
	const maxConns = 40
	attackers := 3000
	var lim syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim))
	if room := int(lim.Cur) - 500; room < attackers {
		// Each attacker is one descriptor here (its client end); the
		// listener's ends are what the test bounds.
		require.Greater(t, room, 10*maxConns, "RLIMIT_NOFILE %d is too low for a load test", lim.Cur)
		attackers = room
	}

	f := startFixture(t, 20, 0)
	require.NoError(t, f.srv.WaitSettled(context.Background(), "in"))
	const token = "s3cret"
	l := startListener(t, ops.Config{
		Server: f.srv, Feeds: []string{"in"}, Token: token,
		MaxConns:          maxConns,
		ReadHeaderTimeout: time.Hour, ReadTimeout: time.Hour, WriteTimeout: time.Hour, IdleTimeout: time.Hour,
	})
	addr := l.Addr().String()
	port := l.Addr().(*net.TCPAddr).Port
	require.Equal(t, 1, serverSockets(t, port), "the listening socket alone")
	fdsBefore := openFDs(t)

	// The listener's sockets are counted every 250 connections, and in the
	// background until the end of the attack.
	var peak atomic.Int64
	sample := func() {
		n := int64(serverSockets(t, port))
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				return
			}
		}
	}
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			sample()
			select {
			case <-stopSampling:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()

	host := "Host: " + addr + "\r\n"
	kinds := []string{
		"", // connects and sends nothing
		"GET /livez HTTP/1.1\r\n" + host + "\r\n",       // one request, then an idle keep-alive
		"GET /status HTTP/1.1\r\n" + host + "X-Slow: a", // half a header
		"GET /metrics HTTP/1.1\r\n" + host + "Authorization: Bearer " + token + "\r\nContent-Length: 100000\r\n\r\nabc",                             // a body a GET does not take, trickled, with the token
		"POST /feeds/in/release HTTP/1.1\r\n" + host + "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 100000\r\n\r\nconsumer=", // a slow body without the token
	}
	// A few slow bodies with the token: they are requests the listener
	// must read, and hold their connections; the others still answer.
	const slowAuthorized = maxConns / 4
	authorized := "POST /feeds/in/release HTTP/1.1\r\n" + host + "Authorization: Bearer " + token + "\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100000\r\n\r\nconsumer="

	conns := make([]net.Conn, attackers+slowAuthorized)
	var next atomic.Int64
	var wg sync.WaitGroup
	dialErrs := make(chan error, 1)
	d := net.Dialer{Timeout: deadline}
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(conns) {
					return
				}
				c, err := d.Dial("tcp", addr)
				if err != nil {
					select {
					case dialErrs <- fmt.Errorf("dial %d: %w", i, err):
					default:
					}
					return
				}
				conns[i] = c
				payload := kinds[i%len(kinds)]
				if i >= attackers {
					payload = authorized
				}
				// The listener may already have closed it to make room: a
				// write error is what an attacker sees then.
				_, _ = c.Write([]byte(payload))
				if i%250 == 0 {
					sample()
				}
			}
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, c := range conns {
			if c != nil {
				_ = c.Close()
			}
		}
	})
	select {
	case err := <-dialErrs:
		t.Fatal(err)
	default:
	}

	// Every connection is open on this side. The listener still answers,
	// and it reads the feed's new lines.
	read := func(path string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		require.NoError(t, err, "GET %s under load", path)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err, "GET %s under load", path)
		return resp.StatusCode, string(b)
	}
	code, body := read("/metrics")
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, "1", metric(body, `tidemark_feed_settled{feed="in"}`), body)
	code, body = read("/status")
	require.Equal(t, http.StatusOK, code, body)

	require.NoError(t, appendFile(f.input, lines(21, 5)))
	waitFor(t, "the feed to read the new lines under load", func() bool {
		code, body := read("/status")
		var r ops.Report
		return code == http.StatusOK && json.Unmarshal([]byte(body), &r) == nil &&
			len(r.Feeds) == 1 && r.Feeds[0].Read == 25
	})

	close(stopSampling)
	<-sampled
	now := serverSockets(t, port)
	fdsPeak := openFDs(t)
	_, body = read("/metrics")
	t.Logf("%d connections held open by the client (%d of them slow bodies with the token); the listener's sockets: at most %d seen (cap %d + the listening socket), %d now; process descriptors %d before, %d after; closed to make room %s, refused for their body %s, for the token %s",
		len(conns), slowAuthorized, peak.Load(), maxConns, now, fdsBefore, fdsPeak,
		metric(body, "tidemark_ops_connections_evicted_total"), metric(body, `tidemark_ops_requests_refused_total{reason="body"}`),
		metric(body, `tidemark_ops_requests_refused_total{reason="token"}`))
	require.NotEqual(t, "0", metric(body, "tidemark_ops_connections_evicted_total"), "the cap was reached: quiet connections were closed to make room")
	require.LessOrEqual(t, peak.Load(), int64(maxConns+1), "the listener held more sockets than its cap")
	require.LessOrEqual(t, now, maxConns+1)
	require.LessOrEqual(t, fdsPeak, fdsBefore+len(conns)+maxConns+16, "descriptors beyond the clients' and the cap")
}

// serverSockets counts this process's open descriptors that are TCP sockets
// on the local port: the listening socket and the connections it accepted
// (connections still in the kernel's accept queue have no descriptor).
func serverSockets(t *testing.T, port int) int {
	t.Helper()
	inodes := map[string]bool{}
	for _, table := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		data, err := os.ReadFile(table)
		if os.IsNotExist(err) {
			continue
		}
		require.NoError(t, err)
		for _, line := range strings.Split(string(data), "\n")[1:] {
			fields := strings.Fields(line)
			if len(fields) < 10 {
				continue
			}
			_, p, _ := strings.Cut(fields[1], ":")
			if v, err := strconv.ParseUint(p, 16, 16); err == nil && int(v) == port && fields[9] != "0" {
				inodes[fields[9]] = true
			}
		}
	}
	n := 0
	for _, fd := range fdEntries(t) {
		link, err := os.Readlink("/proc/self/fd/" + fd)
		if err != nil {
			continue // closed meanwhile
		}
		if inode, ok := strings.CutPrefix(link, "socket:["); ok && inodes[strings.TrimSuffix(inode, "]")] {
			n++
		}
	}
	return n
}

func openFDs(t *testing.T) int { return len(fdEntries(t)) }

func fdEntries(t *testing.T) []string {
	t.Helper()
	d, err := os.Open("/proc/self/fd")
	require.NoError(t, err)
	defer d.Close()
	names, err := d.Readdirnames(-1)
	require.NoError(t, err)
	return names
}

func appendFile(path, content string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(content)
	return errors.Join(err, f.Close())
}
