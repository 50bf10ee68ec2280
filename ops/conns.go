package ops

import (
	"container/list"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// connGate keeps room on a listener whose connections are capped (by
// netutil.LimitListener, which stops accepting at the cap): whenever the
// open connections reach the cap, it closes the one that has been quiet the
// longest, so that a new client is accepted instead of waiting behind
// connections that do nothing.
//
// Quiet is net/http's StateNew (accepted, the request header not complete
// yet: a client that sends nothing, or half a header) and StateIdle (a
// keep-alive connection between requests). A connection in StateActive is
// in a request and is never closed here: its time is bounded by the
// server's read and write timeouts.
//
// Its hook runs on http.Server's ConnState.
type connGate struct {
	max int
	log *slog.Logger

	mu    sync.Mutex
	open  int
	quiet *list.List // of net.Conn, the longest quiet first
	elems map[net.Conn]*list.Element
	// evicted counts the connections closed to make room; logged and
	// logAt say when the last record said so and how many it counted.
	evicted uint64
	logged  uint64
	logAt   time.Time
}

// evictLogEvery is how often, at most, the listener logs that it closes
// connections to make room.
const evictLogEvery = time.Minute

func newConnGate(max int, log *slog.Logger) *connGate {
	return &connGate{max: max, log: log, quiet: list.New(), elems: map[net.Conn]*list.Element{}}
}

// track is the http.Server's ConnState hook.
func (g *connGate) track(c net.Conn, s http.ConnState) {
	g.mu.Lock()
	switch s {
	case http.StateNew:
		g.open++
		g.elems[c] = g.quiet.PushBack(c)
	case http.StateIdle:
		g.unquietLocked(c)
		g.elems[c] = g.quiet.PushBack(c)
	case http.StateActive:
		g.unquietLocked(c)
	case http.StateClosed, http.StateHijacked:
		g.unquietLocked(c)
		g.open--
	}
	var victim net.Conn
	if (s == http.StateNew || s == http.StateIdle) && g.open >= g.max {
		// A connection just accepted is given its chance: it is closed
		// only once it has been quiet longer than another.
		if e := g.quiet.Front(); e != nil && !(s == http.StateNew && e.Value.(net.Conn) == c) {
			victim = e.Value.(net.Conn)
			g.unquietLocked(victim)
			g.evicted++
		}
	}
	var report bool
	var evicted, since uint64
	if victim != nil && time.Since(g.logAt) >= evictLogEvery {
		report, evicted, since = true, g.evicted, g.evicted-g.logged
		g.logged, g.logAt = g.evicted, time.Now()
	}
	g.mu.Unlock()
	if victim == nil {
		return
	}
	// http.Server sees the read fail and reports StateClosed.
	_ = victim.Close()
	if report {
		g.log.Warn("ops: the listener is at its connection cap: it closes the connections that have been quiet the longest to make room (raise Config.MaxConns if these are legitimate clients)",
			"max_conns", g.max, "closed", since, "closed_total", evicted, "remote", victim.RemoteAddr().String())
	}
}

func (g *connGate) unquietLocked(c net.Conn) {
	if e, ok := g.elems[c]; ok {
		g.quiet.Remove(e)
		delete(g.elems, c)
	}
}

// counts returns the open connections and how many were closed to make
// room.
func (g *connGate) counts() (open int, evicted uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open, g.evicted
}
