package ops

import (
	"context"
	"log/slog"
	"time"

	"github.com/tidemark-go/tidemark/feed"
)

// Watcher reads the status of feeds and stores and logs one structured
// record per change an operator must know of, with the feed, group, epoch
// and position as attributes:
//
//	feed stalled            (warn)  the feed holds its pointer; reason
//	feed no longer stalled  (info)
//	feed started a new epoch (info) previous_epoch, epoch
//	feed reopened its input (info)  reason, reopens (how many since the last check);
//	                        (warn)  for a rewrite in place (feed.ReasonRewritten)
//	lines dropped           (warn)  group, dropped (since the last check)
//	feed commit failed      (error) errors (since the last check), err
//	store commit failed     (error) store, failed_commits, err
//
// It sees what status shows, so an event shorter than its interval (a stall
// released at once) may be missed; the counters never are. The framework's
// and the stores' own logs say more; the watcher's records are the ones to
// alert on. The first check logs a stall or a failed store already there,
// and takes the counters as they are.
type Watcher struct {
	srv    Server
	feeds  func() []string
	stores []StoreConfig
	log    *slog.Logger

	seen   bool
	feedSt map[string]watchedFeed
	store  map[string]uint64 // failed commits by store
}

type watchedFeed struct {
	epoch        uint64
	stalled      bool
	reason       string
	reopens      map[string]uint64
	commitErrors uint64
	dropped      map[string]uint64 // by group, live queues
}

// NewWatcher returns a watcher of the feeds and stores of cfg (Server,
// Feeds, Stores), logging to cfg.Logger. Nothing runs until Check or Run.
func NewWatcher(cfg Config) (*Watcher, error) {
	l, err := New(Config{Server: cfg.Server, Feeds: cfg.Feeds, Stores: cfg.Stores, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	return l.newWatcher(), nil
}

func (l *Listener) newWatcher() *Watcher {
	return &Watcher{
		srv:    l.cfg.Server,
		feeds:  l.feedNames,
		stores: l.cfg.Stores,
		log:    l.log,
		feedSt: map[string]watchedFeed{},
		store:  map[string]uint64{},
	}
}

// Run checks every interval until ctx is done.
func (w *Watcher) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		w.Check()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Check reads the status once and logs what changed since the last Check.
// It is not safe for concurrent use.
func (w *Watcher) Check() {
	first := !w.seen
	w.seen = true
	for _, name := range w.feeds() {
		st, err := w.srv.FeedStatus(name)
		if err != nil {
			continue
		}
		f := NewFeedReport(st)
		prev, known := w.feedSt[name]
		cur := watchedFeed{
			epoch:        f.Epoch,
			stalled:      f.Stalled,
			reason:       f.StallReason,
			reopens:      f.Reopens,
			commitErrors: f.CommitErrors,
			dropped:      map[string]uint64{},
		}
		for _, q := range f.Groups {
			if !q.Removed {
				cur.dropped[q.Group] = q.Dropped
			}
		}
		w.feedSt[name] = cur
		at := []any{"feed", name, "epoch", f.Epoch, "position", f.ReadPosition,
			"committed_epoch", f.LastCommitEpoch, "committed_position", f.LastCommitPosition}
		if cur.stalled && (!known || !prev.stalled || prev.reason != cur.reason) {
			w.log.Warn("feed stalled: it holds its pointer until the reason clears, a restart, or a release", append(at, "reason", cur.reason)...)
		}
		if known && prev.stalled && !cur.stalled {
			w.log.Info("feed no longer stalled", at...)
		}
		if first || !known {
			continue
		}
		if cur.epoch != prev.epoch && prev.epoch != 0 {
			w.log.Info("feed started a new epoch", append(at, "previous_epoch", prev.epoch)...)
		}
		for _, reason := range sortedKeys(cur.reopens) {
			if n := cur.reopens[reason] - prev.reopens[reason]; n > 0 {
				// A rotation or a truncation is what the source follows;
				// a rewrite in place is a writer the operator must look at.
				level := slog.LevelInfo
				if reason == feed.ReasonRewritten {
					level = slog.LevelWarn
				}
				w.log.Log(context.Background(), level, "feed reopened its input", append(at, "reason", reason, "reopens", n)...)
			}
		}
		for _, q := range f.Groups {
			if q.Removed {
				continue
			}
			if n := q.Dropped - prev.dropped[q.Group]; q.Dropped > prev.dropped[q.Group] {
				w.log.Warn("lines dropped for a group: its queue was full after the spin time", append(at, "group", q.Group, "dropped", n)...)
			}
		}
		if n := cur.commitErrors - prev.commitErrors; cur.commitErrors > prev.commitErrors {
			w.log.Error("feed commit failed: the pointer did not move; the next duty cycle retries", append(at, "errors", n, "err", f.LastPointerError)...)
		}
	}
	for _, sc := range w.stores {
		s := sc.Store.Stats()
		prev, known := w.store[sc.Name]
		w.store[sc.Name] = s.FailedCommits
		if (!known && s.FailedCommits > 0) || (known && s.FailedCommits > prev) {
			w.log.Error("store commit failed: the store declares nothing durable any more; restart the process",
				"store", sc.Name, "failed_commits", s.FailedCommits, "err", s.LastError)
		}
	}
}
