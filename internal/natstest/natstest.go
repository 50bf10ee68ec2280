// Package natstest runs real NATS servers with JetStream for tidemark's
// tests: a server inside the test process ([Run]), a cluster of them
// ([RunCluster]), and a server in a child process that a test can kill with
// SIGKILL ([StartProcess]). Nothing is mocked: each is nats-server v2 as a
// user runs it, with its file store in a temporary folder.
//
// Every server listens on 127.0.0.1 and is shut down (or killed) when the
// test ends. A restarted server keeps its ports and its store folder, so
// that clients reconnect to it and find their streams and consumers.
//
// A test binary that uses [StartProcess] must let the child run: its
// TestMain calls [Main] (or [RunChild] before m.Run).
package natstest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Config says how to run a server. The zero value is a standalone
// JetStream server with the server's default sync interval, on a random
// port, with its store in a new temporary folder.
type Config struct {
	// Name is the server's name (ServerName); "" lets the server pick one
	// (a cluster names its servers n0, n1, ...).
	Name string
	// StoreDir is the JetStream store folder; "" means a new t.TempDir().
	StoreDir string
	// Port is the client port; 0 picks a free one. A restart keeps it.
	Port int
	// SyncAlways makes the file store sync every write (sync_interval:
	// always), so that a power loss (not only a process crash) loses no
	// acknowledged message.
	SyncAlways bool
	// SyncInterval, when set, replaces the server's default interval
	// (2 minutes) between syncs of the file store.
	SyncInterval time.Duration
	// ProfPort, when set, is the port the server serves Go's profiles on
	// (nats-server's prof_port: http://127.0.0.1:ProfPort/debug/pprof/),
	// to profile a server in a child process, which a test cannot reach
	// otherwise.
	ProfPort int
}

// readyTimeout bounds the wait for a server to accept connections.
const readyTimeout = 30 * time.Second

// Server is a nats-server with JetStream running in the test process.
type Server struct {
	t    testing.TB
	opts server.Options
	srv  *server.Server
}

// Run starts a server in the test process and shuts it down when the test
// ends.
func Run(t testing.TB, cfg Config) *Server {
	t.Helper()
	s := &Server{t: t, opts: options(t, cfg)}
	s.start()
	t.Cleanup(s.Shutdown)
	return s
}

// options returns the server options of cfg, with the ports chosen.
func options(t testing.TB, cfg Config) server.Options {
	t.Helper()
	dir := cfg.StoreDir
	if dir == "" {
		dir = t.TempDir()
	}
	port := cfg.Port
	if port == 0 {
		port = FreePort(t)
	}
	return server.Options{
		ServerName:         cfg.Name,
		Host:               "127.0.0.1",
		Port:               port,
		JetStream:          true,
		StoreDir:           dir,
		JetStreamMaxMemory: 256 << 20,
		JetStreamMaxStore:  4 << 30,
		SyncAlways:         cfg.SyncAlways,
		SyncInterval:       cfg.SyncInterval,
		ProfPort:           cfg.ProfPort,
		NoLog:              true,
		NoSigs:             true,
		// The default is a minute: a test that waits for a client to
		// reconnect to a restarted server should not wait that long.
		PingInterval:          time.Second,
		MaxPingsOut:           3,
		DisableShortFirstPing: true,
	}
}

func (s *Server) start() {
	s.t.Helper()
	opts := s.opts
	srv, err := server.NewServer(&opts)
	if err != nil {
		s.t.Fatalf("natstest: new server: %v", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(readyTimeout) {
		srv.Shutdown()
		s.t.Fatalf("natstest: server %s did not accept connections within %v", s.opts.ServerName, readyTimeout)
	}
	s.srv = srv
}

// URL is the server's client URL.
func (s *Server) URL() string {
	return "nats://" + net.JoinHostPort(s.opts.Host, strconv.Itoa(s.opts.Port))
}

// StoreDir is the server's JetStream store folder.
func (s *Server) StoreDir() string { return s.opts.StoreDir }

// Name is the server's name.
func (s *Server) Name() string {
	if s.srv != nil {
		return s.srv.Name()
	}
	return s.opts.ServerName
}

// Running reports whether the server runs (it was not shut down since its
// last start).
func (s *Server) Running() bool { return s.srv != nil }

// NATS returns the running server itself, nil after Shutdown.
func (s *Server) NATS() *server.Server { return s.srv }

// Shutdown stops the server, as a crash of its process would: clients see
// their connection drop. It does nothing when the server is not running.
func (s *Server) Shutdown() {
	if s.srv == nil {
		return
	}
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
	s.srv = nil
}

// Restart shuts the server down (if it runs) and starts it again on the
// same ports and store folder.
func (s *Server) Restart() {
	s.t.Helper()
	s.Shutdown()
	s.start()
}

// Connect connects to url (several URLs separated by commas) with options
// that suit tests: reconnect forever, every 50 ms, with a short jitter,
// and asynchronous errors (a write to a server that was killed) dropped
// rather than printed. The connection is closed when the test ends.
func Connect(t testing.TB, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	all := append([]nats.Option{
		nats.MaxReconnects(-1),
		nats.ReconnectWait(50 * time.Millisecond),
		nats.ReconnectJitter(10*time.Millisecond, 10*time.Millisecond),
		nats.Timeout(5 * time.Second),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}),
	}, opts...)
	nc, err := nats.Connect(url, all...)
	if err != nil {
		t.Fatalf("natstest: connect %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// JetStream connects to url (see [Connect]) and returns its JetStream
// context.
func JetStream(t testing.TB, url string, opts ...nats.Option) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(Connect(t, url, opts...))
	if err != nil {
		t.Fatalf("natstest: jetstream: %v", err)
	}
	return js
}

// FreePort returns a TCP port on 127.0.0.1 that nothing listened on a
// moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("natstest: free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Cluster is a JetStream cluster of servers in the test process, fully
// routed to each other.
type Cluster struct {
	t       testing.TB
	Servers []*Server
}

// RunCluster starts n servers (n0, n1, ...) in one cluster and waits until
// JetStream has a meta leader. cfg's SyncAlways and SyncInterval apply to
// every server; its Name, StoreDir and Port are ignored.
func RunCluster(t testing.TB, n int, cfg Config) *Cluster {
	t.Helper()
	c := &Cluster{t: t}
	cports := make([]int, n)
	for i := range cports {
		cports[i] = FreePort(t)
	}
	for i := range n {
		sc := cfg
		sc.Name, sc.StoreDir, sc.Port = fmt.Sprintf("n%d", i), "", 0
		opts := options(t, sc)
		opts.Cluster = server.ClusterOpts{Name: "tidemark", Host: "127.0.0.1", Port: cports[i]}
		for j, p := range cports {
			if j != i {
				opts.Routes = append(opts.Routes, &url.URL{Scheme: "nats", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(p))})
			}
		}
		c.Servers = append(c.Servers, &Server{t: t, opts: opts})
	}
	// Start them together: each waits for the others' routes before its
	// JetStream is ready.
	errs := make(chan error, n)
	for _, s := range c.Servers {
		go func() {
			opts := s.opts
			srv, err := server.NewServer(&opts)
			if err != nil {
				errs <- err
				return
			}
			go srv.Start()
			if !srv.ReadyForConnections(readyTimeout) {
				srv.Shutdown()
				errs <- fmt.Errorf("server %s did not accept connections within %v", opts.ServerName, readyTimeout)
				return
			}
			s.srv = srv
			errs <- nil
		}()
	}
	var failed error
	for range n {
		failed = errors.Join(failed, <-errs)
	}
	t.Cleanup(c.Shutdown)
	if failed != nil {
		t.Fatalf("natstest: cluster: %v", failed)
	}
	c.WaitMetaLeader()
	c.WaitMetaPeers()
	return c
}

// URLs returns the client URLs of every server, separated by commas.
func (c *Cluster) URLs() string {
	var u string
	for i, s := range c.Servers {
		if i > 0 {
			u += ","
		}
		u += s.URL()
	}
	return u
}

// Shutdown stops every server.
func (c *Cluster) Shutdown() {
	for _, s := range c.Servers {
		s.Shutdown()
	}
}

// waitFor calls cond every 20 ms until it reports true, and fails the test
// with what after d.
func (c *Cluster) waitFor(d time.Duration, what string, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("natstest: %s not within %v", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WaitMetaLeader waits until a running server is JetStream's meta leader.
func (c *Cluster) WaitMetaLeader() *Server {
	c.t.Helper()
	var l *Server
	c.waitFor(readyTimeout, "a JetStream meta leader", func() bool {
		for _, s := range c.Servers {
			if s.srv != nil && s.srv.JetStreamIsLeader() {
				l = s
				return true
			}
		}
		return false
	})
	return l
}

// WaitMetaPeers waits until the meta leader sees every other running
// server as a current peer: until then a replicated stream may find no
// place.
func (c *Cluster) WaitMetaPeers() {
	c.t.Helper()
	running := 0
	for _, s := range c.Servers {
		if s.srv != nil {
			running++
		}
	}
	c.waitFor(readyTimeout, "every server a current JetStream peer", func() bool {
		for _, s := range c.Servers {
			if s.srv == nil || !s.srv.JetStreamIsLeader() {
				continue
			}
			jsz, err := s.srv.Jsz(nil)
			if err != nil || jsz.Meta == nil {
				return false
			}
			current := 0
			for _, r := range jsz.Meta.Replicas {
				if r.Current && !r.Offline {
					current++
				}
			}
			return current == running-1
		}
		return false
	})
}

// StreamLeader waits until a running server leads stream (in the global
// account) and returns it.
func (c *Cluster) StreamLeader(stream string) *Server {
	c.t.Helper()
	var l *Server
	c.waitFor(readyTimeout, "a leader of stream "+stream, func() bool {
		for _, s := range c.Servers {
			if s.srv != nil && s.srv.JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, stream) {
				l = s
				return true
			}
		}
		return false
	})
	return l
}

// ConsumerLeader waits until a running server leads consumer of stream and
// returns it.
func (c *Cluster) ConsumerLeader(stream, consumer string) *Server {
	c.t.Helper()
	var l *Server
	c.waitFor(readyTimeout, "a leader of consumer "+stream+" > "+consumer, func() bool {
		for _, s := range c.Servers {
			if s.srv != nil && s.srv.JetStreamIsConsumerLeader(server.DEFAULT_GLOBAL_ACCOUNT, stream, consumer) {
				l = s
				return true
			}
		}
		return false
	})
	return l
}

// WaitStreamCurrent waits until every running server's replica of stream
// holds its last message, as the leader has it: once it returns, killing
// the leader loses nothing that was acknowledged before the call.
func (c *Cluster) WaitStreamCurrent(stream string) {
	c.t.Helper()
	c.waitFor(readyTimeout, "every replica of stream "+stream+" current", func() bool {
		var want uint64
		var have []uint64
		for _, s := range c.Servers {
			if s.srv == nil {
				continue
			}
			last, ok := localLastSeq(s.srv, stream)
			if !ok {
				return false
			}
			if s.srv.JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, stream) {
				want = last
			}
			have = append(have, last)
		}
		if want == 0 {
			return false
		}
		for _, h := range have {
			if h != want {
				return false
			}
		}
		return true
	})
}

// Ping checks that js answers a JetStream request within d.
func Ping(js jetstream.JetStream, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_, err := js.AccountInfo(ctx)
	return err
}

// localLastSeq returns the last sequence of srv's own replica of stream in
// the global account.
func localLastSeq(srv *server.Server, stream string) (uint64, bool) {
	jsz, err := srv.Jsz(&server.JSzOptions{Account: server.DEFAULT_GLOBAL_ACCOUNT, Streams: true})
	if err != nil {
		return 0, false
	}
	for _, ad := range jsz.AccountDetails {
		for _, sd := range ad.Streams {
			if sd.Name == stream {
				return sd.State.LastSeq, true
			}
		}
	}
	return 0, false
}
