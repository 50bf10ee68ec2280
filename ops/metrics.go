package ops

import (
	"cmp"
	"fmt"
	"log"
	"log/slog"
	"maps"
	"reflect"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark-go/tidemark/feed"
	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/state"
)

// Observer holds the histograms that cannot be read from status at scrape
// time: how long a processor group takes to handle a line, and how big a
// store's batches are and how long their commits take. An Observer is a
// [framework.HandleObserver] (set it as framework.Config.Observer); a store
// reports to it through [Observer.ForStore], a [state.CommitObserver] (set
// it as state.Options.Observer).
//
// An Observer is safe for concurrent use. Make it before the server and the
// stores, hand it to them, and pass it to the listener in Config.Observer.
type Observer struct {
	handle *prometheus.HistogramVec
	commit *prometheus.HistogramVec
	batch  *prometheus.HistogramVec
	// groups caches each group's histogram (string → prometheus.Observer):
	// ObserveHandle runs once per line.
	groups sync.Map
}

var (
	_ framework.HandleObserver = (*Observer)(nil)
	_ state.CommitObserver     = StoreObserver{}
)

// NewObserver returns an Observer with empty histograms.
func NewObserver() *Observer {
	return &Observer{
		handle: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tidemark_group_handle_seconds",
			Help:    "Time a processor group took to handle one line, retries included.",
			Buckets: prometheus.ExponentialBuckets(10e-6, 4, 10), // 10µs .. 2.6s
		}, []string{"group"}),
		commit: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tidemark_store_commit_seconds",
			Help:    "Time a store took to make one batch durable.",
			Buckets: prometheus.ExponentialBuckets(100e-6, 2, 15), // 100µs .. 1.6s
		}, []string{"store"}),
		batch: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tidemark_store_batch_lines",
			Help:    "Applied deliveries per committed batch of a store.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14), // 1 .. 8192
		}, []string{"store"}),
	}
}

// ObserveHandle records that group handled a line in d.
func (o *Observer) ObserveHandle(group string, d time.Duration) {
	h, ok := o.groups.Load(group)
	if !ok {
		h, _ = o.groups.LoadOrStore(group, o.handle.WithLabelValues(group))
	}
	h.(prometheus.Observer).Observe(d.Seconds())
}

// observeCommit records that store committed a batch of lines applied
// deliveries in d.
func (o *Observer) observeCommit(store string, lines int, d time.Duration) {
	o.commit.WithLabelValues(store).Observe(d.Seconds())
	o.batch.WithLabelValues(store).Observe(float64(lines))
}

// ForStore returns the observer of one store's commits, recorded under the
// label store: a [state.CommitObserver] for state.Options.Observer.
func (o *Observer) ForStore(store string) StoreObserver {
	return StoreObserver{o: o, store: store}
}

// StoreObserver is an Observer bound to one store's name: the
// [state.CommitObserver] that [Observer.ForStore] returns.
type StoreObserver struct {
	o     *Observer
	store string
}

// ObserveCommit records a committed batch of the bound store.
func (s StoreObserver) ObserveCommit(lines int, d time.Duration) {
	s.o.observeCommit(s.store, lines, d)
}

// Describe implements prometheus.Collector.
func (o *Observer) Describe(ch chan<- *prometheus.Desc) {
	o.handle.Describe(ch)
	o.commit.Describe(ch)
	o.batch.Describe(ch)
}

// Collect implements prometheus.Collector.
func (o *Observer) Collect(ch chan<- prometheus.Metric) {
	o.handle.Collect(ch)
	o.commit.Collect(ch)
	o.batch.Collect(ch)
}

// The metrics read from status at each scrape.
var (
	lFeed       = []string{"feed"}
	lFeedFile   = []string{"feed", "file"}
	lFeedGroup  = []string{"feed", "group"}
	lStore      = []string{"store"}
	lStoreFeed  = []string{"store", "feed"}
	dReadPos    = desc("tidemark_feed_read_position_bytes", "Offset just after the last line read, in the feed's current epoch.", lFeed)
	dPointerPos = desc("tidemark_feed_pointer_position_bytes", "Position stored in the feed's pointer file, in the feed's current epoch.", lFeed)
	dCommitPos  = desc("tidemark_feed_committed_position_bytes", "Last position the server committed in this run (0 before the first commit).", lFeed)
	dEpoch      = desc("tidemark_feed_epoch", "The feed's current epoch (position space); 0 for a feed without positions.", lFeed)
	dFileSize   = desc("tidemark_feed_file_size_bytes", "Size of the input file as last seen.", lFeed)
	dBehind     = desc("tidemark_feed_behind_bytes", "Bytes of the input file after the last line read.", lFeed)
	dLinesRead  = desc("tidemark_feed_lines_read_total", "Lines read from the source in this run.", lFeed)
	dDelivered  = desc("tidemark_feed_lines_delivered_total", "Line hand-offs to subscriber queues (a line given to two groups counts twice).", lFeed)
	dDropped    = desc("tidemark_feed_lines_dropped_total", "Lines dropped for a subscriber queue.", lFeed)
	dFailed     = desc("tidemark_feed_lines_failed_total", "Failed handling attempts (errors and panics).", lFeed)
	dSkipped    = desc("tidemark_feed_lines_skipped_total", "Lines the failure policy skipped.", lFeed)
	dOversize   = desc("tidemark_feed_lines_oversize_total", "Lines longer than the maximum, skipped by the source.", lFeed)
	dPartDrop   = desc("tidemark_feed_partial_lines_dropped_total", "Unterminated last lines of rotated-away or truncated inputs, never delivered.", lFeed)
	dReleased   = desc("tidemark_feed_releases_total", "Holds of removed consumers given up by an operator.", lFeed)
	dPollErr    = desc("tidemark_feed_poll_errors_total", "Failed reads of the source.", lFeed)
	dCommitErr  = desc("tidemark_feed_commit_errors_total", "Failed commits (pointer writes).", lFeed)
	dPending    = desc("tidemark_feed_pending_acks", "Lines handed to the queues and not yet committed.", lFeed)
	dCommitLag  = desc("tidemark_feed_commit_lag_lines", "Lines every consumer finished (and every hold declared durable) that are not committed yet.", lFeed)
	dConsumers  = desc("tidemark_feed_consumers", "Live subscriber queues.", lFeed)
	dStalled    = desc("tidemark_feed_stalled", "1 when the feed holds its pointer for a reason that waiting does not clear (see /status for the reason).", lFeed)
	dSettled    = desc("tidemark_feed_settled", "1 when the feed is at the end of its input and every consumer finished every line.", lFeed)
	dState      = desc("tidemark_feed_state", "1 for the source's current state.", []string{"feed", "state"})
	dReopens    = desc("tidemark_feed_reopens_total", "Reopens of the input, by reason.", []string{"feed", "reason"})
	dFReadPos   = desc("tidemark_file_read_position_bytes", "Offset just after the last line read of one file of a file set, in its current epoch.", lFeedFile)
	dFPtrPos    = desc("tidemark_file_pointer_position_bytes", "Position in the registry of one file of a file set, in its current epoch.", lFeedFile)
	dFSize      = desc("tidemark_file_size_bytes", "Size of one file of a file set as last seen.", lFeedFile)
	dFBehind    = desc("tidemark_file_behind_bytes", "Bytes of one file of a file set after the last line read.", lFeedFile)
	dFLines     = desc("tidemark_file_lines_read_total", "Lines read from one file of a file set in this run.", lFeedFile)
	dFCaughtUp  = desc("tidemark_file_caught_up", "1 when one file of a file set is read to its end.", lFeedFile)
	dRewinds    = desc("tidemark_feed_rewinds_total", "Starts at which a subscriber's store was behind the pointer, so the feed read from the store's position (the store is the truth).", lFeed)
	dDepth      = desc("tidemark_queue_depth", "Items handed to a group's queue and not finished.", lFeedGroup)
	dProcessed  = desc("tidemark_queue_lines_processed_total", "Lines a group's queue finished (handled or skipped).", lFeedGroup)
	dQFailures  = desc("tidemark_queue_failures_total", "Failed handling attempts of a group's queue.", lFeedGroup)
	dQSkipped   = desc("tidemark_queue_lines_skipped_total", "Lines a group's queue skipped after its retries.", lFeedGroup)
	dQByReason  = desc("tidemark_queue_lines_skipped_by_reason_total", "Lines a group's queue skipped after its retries, by reason (framework.RejectReason).", []string{"feed", "group", "reason"})
	dQDropped   = desc("tidemark_queue_lines_dropped_total", "Lines dropped for a group's queue.", lFeedGroup)
	dFenced     = desc("tidemark_queue_fenced", "1 when the group is quarantined or dead: its feeds pause.", lFeedGroup)
	dHeld       = desc("tidemark_queue_removed_held_items", "Unfinished items of a removed queue of the group that still hold the feed's pointer (release them with POST /feeds/{feed}/release).", lFeedGroup)
	dCommits    = desc("tidemark_store_batches_committed_total", "Durable transactions (batches) a store committed.", lStore)
	dFailedCmt  = desc("tidemark_store_failed_commits_total", "Failed commits of a store.", lStore)
	dStoreFail  = desc("tidemark_store_failed", "1 once a commit of the store failed: it declares nothing durable any more; restart the process.", lStore)
	dApplied    = desc("tidemark_store_applied_total", "Deliveries a store applied.", lStore)
	dRedeliv    = desc("tidemark_store_redeliveries_skipped_total", "Re-deliveries a store recognised and skipped.", lStore)
	dByLineage  = desc("tidemark_store_redeliveries_skipped_by_lineage_total", "Re-deliveries a store recognised through the lineage of an earlier epoch.", lStore)
	dStaged     = desc("tidemark_store_staged", "Applied deliveries not yet durable.", lStore)
	dBackPress  = desc("tidemark_store_backpressure_total", "Apply calls that waited for a batch to commit.", lStore)
	dCacheHits  = desc("tidemark_store_cache_hits_total", "Reads of a store's value cache that found their key.", lStore)
	dCacheMiss  = desc("tidemark_store_cache_misses_total", "Reads of a store's value cache that did not find their key and read the backend.", lStore)
	dCacheBytes = desc("tidemark_store_cache_budget_bytes", "The budget of a store's value cache now, in live bytes (a bbolt store whose cache finds few of its keys gives part of it to its commits).", lStore)
	dDurPos     = desc("tidemark_store_durable_position_bytes", "Last position of a feed a store made durable.", lStoreFeed)
	dDurEpoch   = desc("tidemark_store_durable_epoch", "Epoch of the last position of a feed a store made durable.", lStoreFeed)
	dGroupState = desc("tidemark_group_state", "1 for the processor group's current state (running, fenced, dead, removed, restarting).", []string{"group", "state"})
	dScrapeErr  = desc("tidemark_ops_status_errors", "Feeds and groups whose status could not be read at this scrape.", nil)
	dConns      = desc("tidemark_ops_connections", "Connections the operator listener holds open.", nil)
	dEvicted    = desc("tidemark_ops_connections_evicted_total", "Quiet connections the operator listener closed to make room at its connection cap.", nil)
	dRefused    = desc("tidemark_ops_requests_refused_total", "Requests the operator listener refused, by reason.", []string{"reason"})
	allDescs    = []*prometheus.Desc{
		dReadPos, dPointerPos, dCommitPos, dEpoch, dFileSize, dBehind, dLinesRead, dDelivered, dDropped,
		dFailed, dSkipped, dOversize, dPartDrop, dReleased, dPollErr, dCommitErr, dPending, dCommitLag, dConsumers,
		dStalled, dSettled, dState, dReopens, dRewinds, dDepth, dProcessed, dQFailures, dQSkipped, dQByReason, dQDropped,
		dFenced, dHeld, dCommits, dFailedCmt, dStoreFail, dApplied, dRedeliv, dByLineage, dStaged,
		dBackPress, dCacheHits, dCacheMiss, dCacheBytes, dDurPos, dDurEpoch, dGroupState, dScrapeErr, dConns, dEvicted, dRefused,
		dFReadPos, dFPtrPos, dFSize, dFBehind, dFLines, dFCaughtUp,
	}
	allStates      = []feed.State{feed.StateStarting, feed.StateWaiting, feed.StateBehind, feed.StateCaughtUp, feed.StateDone, feed.StateStopped}
	allGroupStates = []framework.GroupState{framework.GroupRunning, framework.GroupFenced, framework.GroupDead, framework.GroupRemoved, framework.GroupRestarting}
)

// newBuildInfo returns the tidemark_build_info gauge: 1, with the version
// of the tidemark module the program was built with, the VCS revision when
// tidemark is the main module, and the Go version, as Prometheus' own
// *_build_info metrics have them.
func newBuildInfo() prometheus.Collector {
	version, revision := buildVersion()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tidemark_build_info",
		Help: "1, labelled with the tidemark version, VCS revision and Go version the program was built with.",
		ConstLabels: prometheus.Labels{
			"version": version, "revision": revision, "goversion": runtime.Version(),
		},
	})
	g.Set(1)
	return g
}

// modulePath is the tidemark module's path, found from this package's.
var modulePath = strings.TrimSuffix(reflect.TypeFor[Listener]().PkgPath(), "/ops")

// buildVersion returns the tidemark module's version in the running
// program ("(devel)" for a build inside the module itself, "unknown"
// without build information) and, when tidemark is the main module, the
// VCS revision it was built from ("-modified" when the tree had changes).
func buildVersion() (version, revision string) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown", ""
	}
	if bi.Main.Path == modulePath {
		var modified bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if modified && revision != "" {
			revision += "-modified"
		}
		return cmp.Or(bi.Main.Version, "unknown"), revision
	}
	for _, d := range bi.Deps {
		if d.Path != modulePath {
			continue
		}
		if r := d.Replace; r != nil {
			if r.Version == "" {
				return "replaced by " + r.Path, ""
			}
			return r.Version, ""
		}
		return cmp.Or(d.Version, "unknown"), ""
	}
	return "unknown", ""
}

func desc(name, help string, labels []string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

// collector reads the server's and stores' status at each scrape.
type collector struct{ l *Listener }

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	emit := func(d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
		m, err := prometheus.NewConstMetric(d, t, v, labels...)
		if err != nil {
			ch <- prometheus.NewInvalidMetric(d, err)
			return
		}
		ch <- m
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) { emit(d, prometheus.GaugeValue, v, labels...) }
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		emit(d, prometheus.CounterValue, float64(v), labels...)
	}
	feeds := c.l.feedNames()
	errs := 0
	for _, name := range feeds {
		st, err := c.l.cfg.Server.FeedStatus(name)
		if err != nil {
			errs++
			continue
		}
		f := NewFeedReport(st)
		gauge(dReadPos, float64(f.ReadPosition), name)
		gauge(dPointerPos, float64(f.PointerPosition), name)
		gauge(dCommitPos, float64(f.LastCommitPosition), name)
		gauge(dEpoch, float64(f.Epoch), name)
		gauge(dFileSize, float64(f.FileSize), name)
		gauge(dBehind, float64(f.BytesBehind), name)
		counter(dLinesRead, f.Read, name)
		counter(dDelivered, f.Delivered, name)
		counter(dDropped, f.Dropped, name)
		counter(dFailed, f.Failed, name)
		counter(dSkipped, f.Skipped, name)
		counter(dOversize, f.OversizeSkipped, name)
		counter(dPartDrop, f.PartialDropped, name)
		counter(dReleased, f.Released, name)
		counter(dPollErr, f.PollErrors, name)
		counter(dCommitErr, f.CommitErrors, name)
		counter(dRewinds, f.Rewinds, name)
		gauge(dPending, float64(f.PendingAcks), name)
		gauge(dCommitLag, float64(f.CommitLag), name)
		gauge(dConsumers, float64(f.Consumers), name)
		gauge(dStalled, b2f(f.Stalled), name)
		gauge(dSettled, b2f(f.Settled), name)
		for _, s := range allStates {
			gauge(dState, b2f(s == st.State), name, stateLabel(s))
		}
		for _, reason := range sortedKeys(f.Reopens) {
			counter(dReopens, f.Reopens[reason], name, reason)
		}
		for _, fr := range f.Files {
			gauge(dFReadPos, float64(fr.ReadPosition), name, fr.Path)
			gauge(dFPtrPos, float64(fr.PointerPosition), name, fr.Path)
			gauge(dFSize, float64(fr.FileSize), name, fr.Path)
			gauge(dFBehind, float64(fr.BytesBehind), name, fr.Path)
			counter(dFLines, fr.LinesRead, name, fr.Path)
			gauge(dFCaughtUp, b2f(fr.State == feed.StateCaughtUp.String()), name, fr.Path)
		}
		// A group has one live queue per feed, and may have removed queues
		// that still hold the pointer: those are summed into one gauge.
		held := map[string]uint64{}
		var heldOrder []string
		for _, q := range f.Groups {
			if q.Removed {
				if _, ok := held[q.Group]; !ok {
					heldOrder = append(heldOrder, q.Group)
				}
				held[q.Group] += q.Depth
				continue
			}
			gauge(dDepth, float64(q.Depth), name, q.Group)
			counter(dProcessed, q.Processed, name, q.Group)
			counter(dQFailures, q.Failures, name, q.Group)
			counter(dQSkipped, q.Skipped, name, q.Group)
			for _, r := range slices.Sorted(maps.Keys(q.SkippedByReason)) {
				counter(dQByReason, q.SkippedByReason[r], name, q.Group, r)
			}
			counter(dQDropped, q.Dropped, name, q.Group)
			gauge(dFenced, b2f(q.Fenced), name, q.Group)
		}
		for _, g := range heldOrder {
			gauge(dHeld, float64(held[g]), name, g)
		}
	}
	if gr, ok := c.l.cfg.Server.(GroupReporter); ok {
		for _, name := range gr.GroupNames() {
			st, err := gr.GroupStatus(name)
			if err != nil {
				errs++
				continue
			}
			for _, s := range allGroupStates {
				gauge(dGroupState, b2f(s == st.State), name, string(s))
			}
		}
	}
	gauge(dScrapeErr, float64(errs))
	c.l.mu.Lock()
	gate := c.l.gate
	c.l.mu.Unlock()
	if gate != nil {
		open, evicted := gate.counts()
		gauge(dConns, float64(open))
		counter(dEvicted, evicted)
	}
	refused := c.l.refused.counts()
	for _, reason := range sortedKeys(refused) {
		counter(dRefused, refused[reason], reason)
	}
	for _, sc := range c.l.cfg.Stores {
		r := newStoreReport(sc, storeFeeds(sc, feeds))
		counter(dCommits, r.Commits, sc.Name)
		counter(dFailedCmt, r.FailedCommits, sc.Name)
		gauge(dStoreFail, b2f(r.Failed), sc.Name)
		counter(dApplied, r.Applied, sc.Name)
		counter(dRedeliv, r.Skipped, sc.Name)
		counter(dByLineage, r.SkippedByLineage, sc.Name)
		gauge(dStaged, float64(r.Staged), sc.Name)
		counter(dBackPress, r.BackPressure, sc.Name)
		counter(dCacheHits, r.CacheHits, sc.Name)
		counter(dCacheMiss, r.CacheMisses, sc.Name)
		gauge(dCacheBytes, float64(r.CacheBudget), sc.Name)
		for _, p := range r.Positions {
			gauge(dDurPos, float64(p.Position), sc.Name, p.Feed)
			gauge(dDurEpoch, float64(p.Epoch), sc.Name, p.Feed)
		}
	}
}

// stateLabel is a state's label value: its name in the spec's spelling
// (CAUGHT_UP).
func stateLabel(s feed.State) string {
	return strings.ToUpper(strings.ReplaceAll(s.String(), " ", "_"))
}

func sortedKeys(m map[string]uint64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// slogErrorLog adapts a slog.Logger to promhttp's and net/http's error logs.
type slogErrorLog struct{ l *slog.Logger }

// Println implements promhttp.Logger.
func (s slogErrorLog) Println(v ...any) {
	s.l.Error("ops: " + fmt.Sprint(v...))
}

func (s slogErrorLog) logger() *log.Logger {
	return slog.NewLogLogger(s.l.Handler(), slog.LevelWarn)
}
