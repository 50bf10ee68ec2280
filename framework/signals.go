package framework

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// SignalContext returns a copy of parent that is cancelled at the first
// SIGINT or SIGTERM, for [Server.Run] in a program's main:
//
//	ctx, stop := srv.SignalContext(context.Background())
//	defer stop()
//	if err := srv.Run(ctx); err != nil { ... }
//
// At the first signal the server logs that it is stopping and how many
// lines it has read and not yet committed (the drain); Run then stops it
// cleanly. A second signal exits the process at once, with the status a
// shell gives a process killed by that signal (130 for SIGINT, 143 for
// SIGTERM), after a log line: nothing is lost, the lines not committed are
// read again at the next start. The returned stop function releases the
// signals and cancels the context.
func (s *Server) SignalContext(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		var first os.Signal
		for {
			select {
			case sig := <-ch:
				if first == nil {
					first = sig
					s.log.Info("signal received: stopping; the lines read are drained, saved and committed; a second signal exits at once",
						"signal", sig.String(), "draining_lines", s.uncommitted())
					cancel()
					continue
				}
				s.log.Warn("second signal: exiting now without draining; the lines not committed are read again at the next start",
					"signal", sig.String(), "uncommitted_lines", s.uncommitted())
				code := 1
				if n, ok := sig.(syscall.Signal); ok {
					code = 128 + int(n)
				}
				os.Exit(code)
			case <-done:
				return
			}
		}
	}()
	var once sync.Once
	return ctx, func() {
		once.Do(func() {
			signal.Stop(ch)
			close(done)
		})
		cancel()
	}
}

// uncommitted counts the lines read and handed to the groups, over every
// feed, that are not committed yet.
func (s *Server) uncommitted() uint64 {
	var n uint64
	for _, f := range s.feedOrder {
		if st, err := s.FeedStatus(f.name); err == nil {
			n += st.PendingAcks + st.ReadPending
		}
	}
	return n
}
