package ops

import (
	"cmp"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/net/netutil"

	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/state"
)

// DefaultAddr is the address a Listener binds when Config.Addr is empty:
// the loopback interface, on a port the system picks (see Listener.Addr).
const DefaultAddr = "127.0.0.1:0"

// DefaultRefresh is how often the page at / reloads itself when
// Config.Refresh is zero.
const DefaultRefresh = 2 * time.Second

// The defaults of the listener's limits (see Config).
const (
	DefaultMaxConns          = 100
	DefaultReadHeaderTimeout = 5 * time.Second
	DefaultReadTimeout       = 10 * time.Second
	DefaultWriteTimeout      = 30 * time.Second
	DefaultIdleTimeout       = 60 * time.Second
)

// MaxRequestBody is the largest request body the listener reads (only a
// release takes one, a form with the consumer's name); a larger one is
// refused with 413.
const MaxRequestBody = 64 << 10

// maxHeaderBytes bounds a request's header.
const maxHeaderBytes = 64 << 10

// shutdownTimeout bounds how long Close waits for requests in flight.
const shutdownTimeout = 5 * time.Second

// Errors of a Listener.
var (
	// ErrInvalidConfig is wrapped by New's errors.
	ErrInvalidConfig = errors.New("ops: invalid listener config")
	// ErrStarted is returned by a second Start.
	ErrStarted = errors.New("ops: listener already started")
)

// Server is what the listener reads and acts on: a *framework.Server
// satisfies it.
type Server interface {
	// FeedStatus returns the named feed's status.
	FeedStatus(name string) (framework.FeedStatus, error)
	// Release gives up the hold of a removed consumer (group) on a feed.
	Release(feed, consumer string) error
}

// FeedNamer is implemented by a Server that can list its feeds. When the
// Server does not implement it, Config.Feeds must name them.
type FeedNamer interface {
	FeedNames() []string
}

// GroupReporter is implemented by a Server that reports its processor
// groups, as a *framework.Server does: their states are in /status and
// /metrics, and a dead, fenced or restarting group makes the server not
// ready. Without it, readiness looks at the fences of the feeds' queues.
type GroupReporter interface {
	GroupNames() []string
	GroupStatus(name string) (framework.GroupStatus, error)
}

// Lifecycle is implemented by a Server that says when it has stopped, as
// a *framework.Server does: a stopped server is not ready, and /status
// says why it stopped.
type Lifecycle interface {
	// Done is closed once the server has stopped.
	Done() <-chan struct{}
	// Err is the error that stopped it, once Done is closed; nil for a
	// clean stop.
	Err() error
}

var (
	_ Server        = (*framework.Server)(nil)
	_ FeedNamer     = (*framework.Server)(nil)
	_ GroupReporter = (*framework.Server)(nil)
	_ Lifecycle     = (*framework.Server)(nil)
)

// StoreConfig is a store whose counters and durable positions the listener
// reports.
type StoreConfig struct {
	// Name labels the store in metrics and status; required and unique.
	Name string
	// Store is the store. Its Stats and Applied are read at each scrape
	// and status request.
	Store state.Store
	// Feeds are the feeds whose durable position is reported. Nil means
	// the listener's feeds.
	Feeds []string
}

// GroupStorer is implemented by a Server whose processor groups have
// stores that it opened (framework.GroupConfig.Store), as a
// *framework.Server does. When Config.Stores is nil, the listener reports
// each of them, named after its group.
type GroupStorer interface {
	GroupNames() []string
	Store(group string) (state.Store, error)
}

// groupStores returns one StoreConfig per group of srv that has a store.
func groupStores(srv Server) []StoreConfig {
	gs, ok := srv.(GroupStorer)
	if !ok {
		return nil
	}
	var out []StoreConfig
	for _, g := range gs.GroupNames() {
		if st, err := gs.Store(g); err == nil {
			out = append(out, StoreConfig{Name: g, Store: st})
		}
	}
	return out
}

// Config configures a Listener. Only Server is required.
type Config struct {
	// Addr is the TCP address to listen on. Empty means DefaultAddr:
	// 127.0.0.1 on a free port. Bind another interface only together with
	// a Token: without one, every request from a non-loopback address is
	// refused anyway.
	Addr string
	// Token, when set, allows requests from any address and is demanded on
	// every request, reads included, loopback included: as
	// "Authorization: Bearer <token>", or as the password of HTTP Basic
	// authentication (any user name), which is what a browser asks for.
	// Only the probes /livez and /healthz, and /readyz without its
	// reasons, answer without it (see the package documentation). When
	// empty, only loopback clients are served, and they need no token.
	Token string
	// AllowedHosts are host names, besides localhost and IP addresses,
	// that a request may name in its Host header: the names by which
	// clients on other hosts reach the listener (say
	// "tidemark-1.example.net"). A request naming any other host is
	// refused, with a token or without, so that a web page that points its
	// own name at the listener's address (DNS rebinding) is not served.
	// Names are compared without case, a port and a final dot.
	AllowedHosts []string
	// Server is the framework server to report on and act on.
	Server Server
	// Feeds names the feeds to report, in order. Nil means the server's
	// feeds (FeedNamer); it must be set for a Server that cannot list them.
	Feeds []string
	// Stores are reported besides the feeds. Nil means the stores of the
	// server's groups (GroupStorer), each named after its group; an empty,
	// non-nil slice reports none.
	Stores []StoreConfig
	// Observer holds the latency and batch size histograms fed by the
	// framework and the stores. Nil means the listener makes its own,
	// which stays empty until something observes into it (see Observer).
	Observer *Observer
	// Registerer, when set, also gets the listener's metrics (besides the
	// listener's private registry that /metrics serves), so that a host can
	// expose them with its own. Registration fails New on a conflict.
	Registerer prometheus.Registerer
	// Gatherer, when set, is served on /metrics together with the
	// listener's own metrics (for example the host's registry with Go
	// runtime metrics).
	Gatherer prometheus.Gatherer
	// Refresh is how often the page at / reloads itself; zero means
	// DefaultRefresh.
	Refresh time.Duration
	// Logger receives the listener's records (start, stop, releases,
	// refused requests, and the Watcher's). Nil means slog.Default().
	Logger *slog.Logger
	// Watch, when positive, makes the listener run a [Watcher] this often
	// while it runs: one log record per stall, reopen, drop or failed
	// commit. Zero means no watcher.
	Watch time.Duration

	// MaxConns caps the connections the listener holds open at once (each
	// is a file descriptor); zero means DefaultMaxConns. At the cap the
	// listener closes the connection that has been quiet the longest (one
	// that has not sent a whole request header yet, or a keep-alive
	// connection between requests) to make room for a new one. A
	// connection in a request is never closed for room: when every one is
	// in a request, new connections wait in the kernel's accept queue
	// until one ends, which the timeouts below bound.
	MaxConns int
	// ReadHeaderTimeout bounds the reading of a request's header; zero
	// means DefaultReadHeaderTimeout.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds the reading of a whole request, body included;
	// zero means DefaultReadTimeout.
	ReadTimeout time.Duration
	// WriteTimeout bounds the time from the end of a request's header to
	// the end of its response; zero means DefaultWriteTimeout.
	WriteTimeout time.Duration
	// IdleTimeout bounds how long a keep-alive connection waits for its
	// next request; zero means DefaultIdleTimeout.
	IdleTimeout time.Duration
}

// Listener is the operator's HTTP endpoint of a running server:
//
//	GET  /                         a page with every feed's status, reloading itself
//	GET  /status                   every feed's, group's and store's status as JSON (Report)
//	GET  /status/{feed}            one feed's status as JSON (FeedReport)
//	GET  /metrics                  Prometheus metrics
//	GET  /livez, /healthz          "ok" while the process answers
//	GET  /readyz                   200 when ready, 503 when not, with the checks (Report.Health)
//	POST /feeds/{feed}/release     give up a removed consumer's hold:
//	                               consumer=<group> in the query or form
//	GET  /stores                   the stores reported, with backend and folder ([StoreInfo])
//	GET  /stores/{store}           its namespaces, applied records, buckets, keys and values,
//	                               read on a snapshot ([StoreListing], see [ShowOptions]):
//	                               namespace=, bucket= (repeatable), prefix=, from=, limit=, count=1
//	POST /stores/{store}/backup    dir=<new folder on the server's host>: a consistent copy
//	                               of the running store ([state.Store.Backup])
//
// Make one with New, then Start it; Close stops it.
type Listener struct {
	cfg     Config
	hosts   map[string]bool // AllowedHosts, as hostName has them
	log     *slog.Logger
	reg     *prometheus.Registry
	obs     *Observer
	handler http.Handler
	refused refusals

	mu     sync.Mutex
	ln     net.Listener
	gate   *connGate
	srv    *http.Server
	served chan struct{}
	stop   func() bool
	closed bool
	// closeDone is closed when the first Close has finished.
	closeDone chan struct{}
	// watchStop and watched stop and wait for the watcher; nil without one.
	watchStop context.CancelFunc
	watched   chan struct{}
}

// New checks cfg, registers the metrics and builds the handler. Nothing
// listens until Start.
func New(cfg Config) (*Listener, error) {
	if cfg.Server == nil {
		return nil, fmt.Errorf("%w: Server is nil: pass the framework server to report on", ErrInvalidConfig)
	}
	if cfg.Feeds == nil {
		if _, ok := cfg.Server.(FeedNamer); !ok {
			return nil, fmt.Errorf("%w: Feeds is empty and the server cannot list its feeds: name the feeds to report", ErrInvalidConfig)
		}
	}
	if cfg.Stores == nil {
		cfg.Stores = groupStores(cfg.Server)
	}
	seen := map[string]bool{}
	for i, sc := range cfg.Stores {
		switch {
		case sc.Name == "":
			return nil, fmt.Errorf("%w: store %d has no name: name it, it labels its metrics", ErrInvalidConfig, i+1)
		case sc.Store == nil:
			return nil, fmt.Errorf("%w: store %q is nil", ErrInvalidConfig, sc.Name)
		case seen[sc.Name]:
			return nil, fmt.Errorf("%w: store %q is configured twice: give each store its own name", ErrInvalidConfig, sc.Name)
		}
		seen[sc.Name] = true
	}
	for _, lim := range []struct {
		name string
		v    time.Duration
	}{
		{"ReadHeaderTimeout", cfg.ReadHeaderTimeout}, {"ReadTimeout", cfg.ReadTimeout},
		{"WriteTimeout", cfg.WriteTimeout}, {"IdleTimeout", cfg.IdleTimeout},
	} {
		if lim.v < 0 {
			return nil, fmt.Errorf("%w: %s is %v: a timeout must be positive (zero means its default)", ErrInvalidConfig, lim.name, lim.v)
		}
	}
	if cfg.MaxConns < 0 {
		return nil, fmt.Errorf("%w: MaxConns is %d: the cap must be positive (zero means DefaultMaxConns, %d)", ErrInvalidConfig, cfg.MaxConns, DefaultMaxConns)
	}
	hosts := map[string]bool{}
	for _, h := range cfg.AllowedHosts {
		n := hostName(h)
		if n == "" || strings.ContainsAny(n, "/ ") {
			return nil, fmt.Errorf("%w: AllowedHosts has %q: want a host name such as tidemark.example.net", ErrInvalidConfig, h)
		}
		hosts[n] = true
	}
	if cfg.Addr == "" {
		cfg.Addr = DefaultAddr
	}
	cfg.MaxConns = cmp.Or(cfg.MaxConns, DefaultMaxConns)
	cfg.ReadHeaderTimeout = cmp.Or(cfg.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	cfg.ReadTimeout = cmp.Or(cfg.ReadTimeout, DefaultReadTimeout)
	cfg.WriteTimeout = cmp.Or(cfg.WriteTimeout, DefaultWriteTimeout)
	cfg.IdleTimeout = cmp.Or(cfg.IdleTimeout, DefaultIdleTimeout)
	if cfg.Refresh <= 0 {
		cfg.Refresh = DefaultRefresh
	}
	l := &Listener{cfg: cfg, hosts: hosts, log: cfg.Logger, obs: cfg.Observer, reg: prometheus.NewRegistry()}
	if l.log == nil {
		l.log = slog.Default()
	}
	if l.obs == nil {
		l.obs = NewObserver()
	}
	col := &collector{l: l}
	for _, c := range []prometheus.Collector{col, l.obs, newBuildInfo()} {
		if err := l.reg.Register(c); err != nil {
			return nil, fmt.Errorf("ops: register metrics: %w", err)
		}
		if cfg.Registerer != nil {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("ops: register metrics on the Registerer passed in: %w; is another listener registered there?", err)
			}
		}
	}
	var g prometheus.Gatherer = l.reg
	if cfg.Gatherer != nil {
		g = prometheus.Gatherers{l.reg, cfg.Gatherer}
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorLog: slogErrorLog{l.log}, ErrorHandling: promhttp.ContinueOnError}))
	mux.HandleFunc("GET /status", l.serveStatus)
	mux.HandleFunc("GET /status/{feed}", l.serveFeedStatus)
	mux.HandleFunc("POST /feeds/{feed}/release", l.serveRelease)
	mux.HandleFunc("GET /stores", l.serveStores)
	mux.HandleFunc("GET /stores/{store}", l.serveStoreShow)
	mux.HandleFunc("POST /stores/{store}/backup", l.serveStoreBackup)
	mux.HandleFunc("GET /{$}", l.servePage)
	mux.HandleFunc("GET /livez", serveAlive)
	mux.HandleFunc("GET /healthz", serveAlive)
	mux.HandleFunc("GET /readyz", l.serveReady)
	l.handler = l.guard(http.NewCrossOriginProtection().Handler(mux))
	return l, nil
}

// Handler returns the listener's HTTP handler, with its access rules, for
// a host that serves it on its own server.
func (l *Listener) Handler() http.Handler { return l.handler }

// Observer returns the histograms the listener serves: pass it to the
// framework and the stores (see Observer).
func (l *Listener) Observer() *Observer { return l.obs }

// Start listens on the configured address and serves in the background
// until Close, or until ctx is done.
func (l *Listener) Start(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ln != nil || l.closed {
		return ErrStarted
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", l.cfg.Addr)
	if err != nil {
		return fmt.Errorf("ops: listen on %s: %w; choose a free address (port 0 picks one)", l.cfg.Addr, err)
	}
	ln = netutil.LimitListener(ln, l.cfg.MaxConns)
	l.ln = ln
	l.gate = newConnGate(l.cfg.MaxConns, l.log)
	l.srv = &http.Server{
		Handler:           l.handler,
		ReadHeaderTimeout: l.cfg.ReadHeaderTimeout,
		ReadTimeout:       l.cfg.ReadTimeout,
		WriteTimeout:      l.cfg.WriteTimeout,
		IdleTimeout:       l.cfg.IdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ConnState:         l.gate.track,
		ErrorLog:          slogErrorLog{l.log}.logger(),
	}
	l.served = make(chan struct{})
	go func() {
		defer close(l.served)
		if err := l.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			l.log.Error("ops: listener stopped serving", "addr", ln.Addr().String(), "err", err)
		}
	}()
	l.stop = context.AfterFunc(ctx, func() { _ = l.Close() })
	if l.cfg.Watch > 0 {
		wctx, cancel := context.WithCancel(context.Background())
		l.watchStop, l.watched = cancel, make(chan struct{})
		w := l.newWatcher()
		go func() {
			defer close(l.watched)
			w.Run(wctx, l.cfg.Watch)
		}()
	}
	attrs := []any{"addr", ln.Addr().String(), "token", l.cfg.Token != ""}
	if !isLoopbackListen(ln.Addr()) && l.cfg.Token == "" {
		l.log.Warn("ops: listener bound to a non-loopback address without a token: requests from other hosts are refused; set a token to allow them", attrs...)
	} else {
		l.log.Info("ops: listener started", attrs...)
	}
	return nil
}

// Addr returns the address the listener is bound to (with the port the
// system picked for port 0), or nil before Start.
func (l *Listener) Addr() net.Addr {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ln == nil {
		return nil
	}
	return l.ln.Addr()
}

// Close stops the listener: it stops accepting, waits a few seconds for
// requests in flight, then closes their connections. A Close while another
// one (or the end of Start's context) is closing waits for it and returns
// nil; so does a Close before Start.
func (l *Listener) Close() error {
	l.mu.Lock()
	if l.closed || l.srv == nil {
		l.closed = true
		done := l.closeDone
		l.mu.Unlock()
		if done != nil {
			<-done
		}
		return nil
	}
	l.closed = true
	l.closeDone = make(chan struct{})
	defer close(l.closeDone)
	srv, served, stop := l.srv, l.served, l.stop
	watchStop, watched := l.watchStop, l.watched
	l.mu.Unlock()
	stop()
	if watchStop != nil {
		watchStop()
		<-watched
	}
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	err := srv.Shutdown(ctx)
	if err != nil {
		err = errors.Join(err, srv.Close())
	}
	<-served
	l.log.Info("ops: listener stopped", "addr", l.ln.Addr().String())
	if err != nil {
		return fmt.Errorf("ops: close listener on %s: %w", l.ln.Addr(), err)
	}
	return nil
}

// guard applies the access rules: without a token, loopback clients
// only; with one, any client that sends it; either way, only a Host the
// listener serves. It also refuses a body where none is taken and bounds
// the one that is.
func (l *Listener) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case l.cfg.Token == "" && !isLoopbackRemote(r.RemoteAddr):
			l.refuse(w, r, refusedRemote, http.StatusForbidden,
				"only loopback clients are served: configure a token to allow other addresses")
			return
		case !l.hostAllowed(r.Host):
			l.refuse(w, r, refusedHost, http.StatusForbidden, fmt.Sprintf(
				"the request names the host %q, which this listener does not serve (a guard against DNS rebinding): use localhost or the listener's IP address, or add the name to the listener's allowed hosts", r.Host))
			return
		case l.cfg.Token != "" && !probes[r.URL.Path] && !l.tokenOK(r):
			w.Header().Add("WWW-Authenticate", `Bearer realm="tidemark"`)
			w.Header().Add("WWW-Authenticate", `Basic realm="tidemark", charset="UTF-8"`)
			l.refuse(w, r, refusedToken, http.StatusUnauthorized,
				"this request needs the listener's token: send Authorization: Bearer <token> (or the token as the password of Basic authentication)")
			return
		case safeMethod(r.Method) && r.ContentLength != 0:
			// A body nobody reads would be read anyway to keep the
			// connection: refused, and the connection closed at once.
			l.refuse(w, r, refusedBody, http.StatusBadRequest,
				"a "+r.Method+" request takes no body")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, MaxRequestBody)
		next.ServeHTTP(w, r)
	})
}

// The reasons a request is refused, as the label of
// tidemark_ops_requests_refused_total.
const (
	refusedRemote = "non_loopback_client"
	refusedHost   = "host"
	refusedToken  = "token"
	refusedBody   = "body"
)

var refusalMessages = map[string]string{
	refusedRemote: "ops: refused requests from non-loopback addresses: no token is configured",
	refusedHost:   "ops: refused requests for a host name the listener does not serve (add it to the allowed hosts if it is the listener's own)",
	refusedToken:  "ops: refused requests without the right token",
	refusedBody:   "ops: refused requests with a body the endpoint does not take",
}

// refuse answers a refused request with code and msg, and counts it. A
// request with a body has its connection closed after the answer, the body
// unread: net/http would otherwise read up to 256 KiB of it, as slowly as
// the client sends it. The log gets one record per reason per
// refuseLogEvery, with the count since the last.
func (l *Listener) refuse(w http.ResponseWriter, r *http.Request, reason string, code int, msg string) {
	if r.ContentLength != 0 {
		w.Header().Set("Connection", "close")
	}
	httpError(w, code, msg)
	if r.ContentLength != 0 {
		// Not supported by a host's own ResponseWriter: then its server's
		// timeouts bound the read.
		_ = http.NewResponseController(w).SetReadDeadline(time.Now())
	}
	if n, log := l.refused.add(reason); log {
		l.log.Warn(refusalMessages[reason], "refused", n, "remote", r.RemoteAddr, "host", r.Host,
			"method", r.Method, "path", r.URL.Path)
	}
}

// refuseLogEvery is how often, at most, the listener logs refused requests
// of one reason.
const refuseLogEvery = time.Minute

// refusals counts refused requests by reason and says when to log.
type refusals struct {
	mu     sync.Mutex
	total  map[string]uint64
	logged map[string]uint64
	at     map[string]time.Time
}

// add counts a refusal of reason; it reports whether to log and how many
// refusals of reason the record covers.
func (c *refusals) add(reason string) (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.total == nil {
		c.total, c.logged, c.at = map[string]uint64{}, map[string]uint64{}, map[string]time.Time{}
	}
	c.total[reason]++
	if t, ok := c.at[reason]; ok && time.Since(t) < refuseLogEvery {
		return 0, false
	}
	n := c.total[reason] - c.logged[reason]
	c.logged[reason], c.at[reason] = c.total[reason], time.Now()
	return n, true
}

// counts returns the refusals by reason.
func (c *refusals) counts() map[string]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.total)
}

// tokenOK reports whether r carries the token: as a bearer token, or as
// the password of Basic authentication.
func (l *Listener) tokenOK(r *http.Request) bool {
	want := []byte(l.cfg.Token)
	if _, pass, ok := r.BasicAuth(); ok {
		return subtle.ConstantTimeCompare([]byte(pass), want) == 1
	}
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), want) == 1
}

func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// isLoopbackRemote reports whether a request's RemoteAddr is a loopback
// address. An address that does not parse is not.
func isLoopbackRemote(remote string) bool {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return false
	}
	return ap.Addr().Unmap().IsLoopback()
}

// hostAllowed reports whether a request's Host is one the listener
// serves: localhost, an IP address, or one of Config.AllowedHosts. A web
// page that rebinds its own name to the listener's address still sends its
// name, and an address cannot be rebound.
func (l *Listener) hostAllowed(host string) bool {
	h := hostName(host)
	// No Host at all (HTTP/1.0) is no browser's request.
	if h == "" || h == "localhost" || l.hosts[h] {
		return true
	}
	_, err := netip.ParseAddr(h)
	return err == nil
}

// hostName is a Host header's name: without a port, brackets, a final dot,
// in lower case.
func hostName(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return strings.ToLower(strings.TrimSuffix(host, "."))
}

func isLoopbackListen(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// feedNames returns the feeds to report.
func (l *Listener) feedNames() []string {
	if l.cfg.Feeds != nil {
		return l.cfg.Feeds
	}
	return l.cfg.Server.(FeedNamer).FeedNames()
}

// probes are the paths that answer without the token: a prober (a
// kubelet, a load balancer) rarely holds a secret. /livez and /healthz say
// nothing but that the process answers; /readyz without the token says
// only ready or not.
var probes = map[string]bool{"/livez": true, "/healthz": true, "/readyz": true}

// serveAlive answers /livez and /healthz: the process is alive and its
// listener answers.
func serveAlive(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = io.WriteString(w, "ok\n")
}

// serveReady answers /readyz: 200 when the server is ready, 503 when not,
// with a line per check (only the verdict when a token is configured and
// the request does not carry it).
func (l *Listener) serveReady(w http.ResponseWriter, r *http.Request) {
	h := l.report().Health()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if !h.Ready() {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	writeReadiness(w, h, l.cfg.Token == "" || l.tokenOK(r))
}

func (l *Listener) serveStatus(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, l.report())
}

func (l *Listener) serveFeedStatus(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("feed")
	st, err := l.cfg.Server.FeedStatus(name)
	if err != nil {
		httpError(w, statusOf(err), err.Error())
		return
	}
	writeJSON(w, http.StatusOK, NewFeedReport(st))
}

// ReleaseResult is the body of a successful POST /feeds/{feed}/release.
type ReleaseResult struct {
	Feed     string `json:"feed"`
	Consumer string `json:"consumer"`
	// Status is the feed's status just after the release.
	Status *FeedReport `json:"status,omitempty"`
}

func (l *Listener) serveRelease(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("feed")
	if err := r.ParseForm(); err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			httpError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("release on feed %q: the form is larger than %d bytes: send consumer=<group> alone", name, MaxRequestBody))
			return
		}
		httpError(w, http.StatusBadRequest, fmt.Sprintf("release on feed %q: read the form: %v", name, err))
		return
	}
	consumer := r.FormValue("consumer")
	if consumer == "" {
		httpError(w, http.StatusBadRequest, fmt.Sprintf("release on feed %q: name the removed consumer (its group) with consumer=<group>; GET /status lists the removed queues that hold the feed", name))
		return
	}
	if err := l.cfg.Server.Release(name, consumer); err != nil {
		l.log.Warn("ops: release refused", "feed", name, "group", consumer, "remote", r.RemoteAddr, "err", err)
		msg := err.Error()
		if errors.Is(err, framework.ErrNoHold) {
			msg += "; GET /status lists the removed queues that hold a feed"
		}
		httpError(w, statusOf(err), msg)
		return
	}
	l.log.Warn("ops: released a removed consumer's hold at an operator's request", "feed", name, "group", consumer, "remote", r.RemoteAddr)
	res := ReleaseResult{Feed: name, Consumer: consumer}
	if st, err := l.cfg.Server.FeedStatus(name); err == nil {
		fr := NewFeedReport(st)
		res.Status = &fr
	}
	writeJSON(w, http.StatusOK, res)
}

// statusOf maps the framework's errors of operator calls to HTTP statuses.
func statusOf(err error) int {
	switch {
	case errors.Is(err, framework.ErrUnknownFeed), errors.Is(err, framework.ErrUnknownGroup):
		return http.StatusNotFound
	case errors.Is(err, framework.ErrNoHold), errors.Is(err, framework.ErrState):
		return http.StatusConflict
	default:
		return http.StatusInternalServerError
	}
}

// ErrorBody is the JSON body of every error response.
type ErrorBody struct {
	Error string `json:"error"`
}

func httpError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, ErrorBody{Error: msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		code = http.StatusInternalServerError
		b, _ = json.Marshal(ErrorBody{Error: "encode response: " + err.Error()})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}
