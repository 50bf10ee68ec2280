package ops

import (
	"time"

	"github.com/tidemark-go/tidemark/framework"
)

// Report is the body of GET /status: every feed's status, every group's
// and every configured store's counters at one moment. The command-line
// tool (cmd/tidemark status) decodes it; [Report.Health] says whether it
// shows a server that is ready.
type Report struct {
	// Time is when the report was made.
	Time time.Time `json:"time"`
	// Stopped is true once the server has stopped (for a Server that says
	// so: see [Lifecycle]); StopError is the error that stopped it, if
	// any.
	Stopped   bool   `json:"stopped,omitempty"`
	StopError string `json:"stopError,omitempty"`
	// Feeds has one entry per feed, in the server's order.
	Feeds []FeedReport `json:"feeds"`
	// Groups has one entry per processor group, in the server's order,
	// for a Server that reports them ([GroupReporter]); nil otherwise.
	Groups []GroupReport `json:"groups,omitempty"`
	// Stores has one entry per configured store.
	Stores []StoreReport `json:"stores,omitempty"`
	// Errors lists the feeds and groups whose status could not be read,
	// and why.
	Errors []string `json:"errors,omitempty"`
}

// GroupReport is the JSON form of [framework.GroupStatus].
type GroupReport struct {
	Name string `json:"name"`
	// State is the group's [framework.GroupState]: running, fenced, dead,
	// removed or restarting.
	State      string   `json:"state"`
	Processors []string `json:"processors,omitempty"`
	// Feeds are the feeds the group has a live queue on.
	Feeds []string `json:"feeds,omitempty"`
	// Fence is the failure that quarantined a fenced group.
	Fence *FenceReport `json:"fence,omitempty"`
}

// FenceReport is the JSON form of [framework.Fence]: the processor that
// failed, the line it failed on, and its last error.
type FenceReport struct {
	Processor string `json:"processor"`
	Feed      string `json:"feed"`
	Epoch     uint64 `json:"epoch"`
	Position  int64  `json:"position"`
	Error     string `json:"error"`
}

// NewGroupReport converts a group's status to its report.
func NewGroupReport(st framework.GroupStatus) GroupReport {
	r := GroupReport{Name: st.Name, State: string(st.State), Processors: st.Processors, Feeds: st.Feeds}
	if fc := st.Fence; fc != nil {
		r.Fence = &FenceReport{Processor: fc.Processor, Feed: fc.Delivery.Feed, Epoch: fc.Delivery.Epoch, Position: fc.Delivery.Position}
		if fc.Err != nil {
			r.Fence.Error = fc.Err.Error()
		}
	}
	return r
}

// FeedReport is the JSON form of [framework.FeedStatus]: its own fields,
// the source's facts ([feed.Status]) flattened beside them, and BytesBehind.
//
// Two positions are reported because they differ: PointerPosition is the
// position the source last wrote to its pointer file (in Epoch), and
// LastCommitPosition is the last position the server committed in this run
// (in LastCommitEpoch; 0 before the first commit).
type FeedReport struct {
	Name     string `json:"name"`
	Path     string `json:"path,omitempty"`
	Strategy string `json:"strategy"`
	State    string `json:"state"`
	Detail   string `json:"detail,omitempty"`
	Policy   string `json:"policy"`

	Epoch           uint64 `json:"epoch"`
	ReadPosition    int64  `json:"readPosition"`
	PointerPosition int64  `json:"pointerPosition"`
	FileSize        int64  `json:"fileSize"`
	// BytesBehind is FileSize minus ReadPosition (never negative): how much
	// of the file is still to be read.
	BytesBehind int64 `json:"bytesBehind"`

	LinesRead        uint64            `json:"linesRead"`
	BytesRead        uint64            `json:"bytesRead"`
	OversizeSkipped  uint64            `json:"oversizeSkipped"`
	PartialPending   bool              `json:"partialPending"`
	PartialDropped   uint64            `json:"partialDropped"`
	Reopens          map[string]uint64 `json:"reopens,omitempty"`
	LastReopenReason string            `json:"lastReopenReason,omitempty"`
	LastReopenAt     *time.Time        `json:"lastReopenAt,omitempty"`
	// Rewinds counts the starts at which a subscriber's store was behind
	// the pointer; LastRewind says which store and why.
	Rewinds    uint64 `json:"rewinds,omitempty"`
	LastRewind string `json:"lastRewind,omitempty"`
	// PointerWriteErrors counts the source's failed pointer writes;
	// LastPointerError is the last one's message, empty once a write
	// succeeded again.
	PointerWriteErrors uint64 `json:"pointerWriteErrors"`
	LastPointerError   string `json:"lastPointerError,omitempty"`

	Consumers   int    `json:"consumers"`
	PendingAcks uint64 `json:"pendingAcks"`
	// CommitLag counts lines finished by every consumer and not yet
	// committed (FeedStatus.ProcessedPending).
	CommitLag   uint64 `json:"commitLag"`
	Settled     bool   `json:"settled"`
	Stalled     bool   `json:"stalled"`
	StallReason string `json:"stallReason,omitempty"`

	LastCommitSeq      uint64 `json:"lastCommitSeq"`
	LastCommitEpoch    uint64 `json:"lastCommitEpoch"`
	LastCommitPosition int64  `json:"lastCommitPosition"`

	Read         uint64 `json:"read"`
	Delivered    uint64 `json:"delivered"`
	Dropped      uint64 `json:"dropped"`
	Failed       uint64 `json:"failed"`
	Skipped      uint64 `json:"skipped"`
	Released     uint64 `json:"released"`
	PollErrors   uint64 `json:"pollErrors"`
	CommitErrors uint64 `json:"commitErrors"`

	Groups []QueueReport `json:"groups"`
	// Files has one report per file of a feed that follows a set of files
	// (feed.Status.Files); the fields above sum them up.
	Files []FileReport `json:"files,omitempty"`
}

// FileReport is one file of a file set: its own source facts.
type FileReport struct {
	Path            string `json:"path"`
	State           string `json:"state"`
	Detail          string `json:"detail,omitempty"`
	Epoch           uint64 `json:"epoch"`
	ReadPosition    int64  `json:"readPosition"`
	PointerPosition int64  `json:"pointerPosition"`
	FileSize        int64  `json:"fileSize"`
	BytesBehind     int64  `json:"bytesBehind"`
	LinesRead       uint64 `json:"linesRead"`
	PartialPending  bool   `json:"partialPending"`
}

// QueueReport is the JSON form of [framework.QueueStatus].
type QueueReport struct {
	Group     string `json:"group"`
	Depth     uint64 `json:"depth"`
	Processed uint64 `json:"processed"`
	Failures  uint64 `json:"failures"`
	Skipped   uint64 `json:"skipped"`
	// SkippedByReason counts the skipped lines by reason
	// (framework.RejectReason); absent when none was skipped.
	SkippedByReason map[string]uint64 `json:"skippedByReason,omitempty"`
	Dropped         uint64            `json:"dropped"`
	Fenced          bool              `json:"fenced"`
	// Removed is true for a removed queue that still holds the pointer:
	// POST /feeds/{feed}/release?consumer=<group> gives its hold up.
	Removed bool `json:"removed"`
}

// StoreReport is a store's counters ([state.Stats]) and its durable
// position per feed.
type StoreReport struct {
	Name             string `json:"name"`
	Dir              string `json:"dir,omitempty"`
	Backend          string `json:"backend"`
	Sync             bool   `json:"sync"`
	Applied          uint64 `json:"applied"`
	Skipped          uint64 `json:"skipped"`
	SkippedByLineage uint64 `json:"skippedByLineage"`
	Staged           int    `json:"staged"`
	Commits          uint64 `json:"commits"`
	FailedCommits    uint64 `json:"failedCommits"`
	LastError        string `json:"lastError,omitempty"`
	Failed           bool   `json:"failed"`
	BackPressure     uint64 `json:"backPressure"`
	// CacheHits, CacheMisses and CacheBudget are the value cache's
	// ([state.Stats]).
	CacheHits   uint64          `json:"cacheHits"`
	CacheMisses uint64          `json:"cacheMisses"`
	CacheBudget int64           `json:"cacheBudget"`
	Positions   []StorePosition `json:"positions,omitempty"`
}

// StorePosition is the last position a store made durable for a feed.
type StorePosition struct {
	Feed     string `json:"feed"`
	Epoch    uint64 `json:"epoch"`
	Position int64  `json:"position"`
}

// NewFeedReport converts a feed's status to its report.
func NewFeedReport(st framework.FeedStatus) FeedReport {
	r := FeedReport{
		Name:               st.Name,
		Path:               st.Path,
		Strategy:           st.Strategy.String(),
		State:              st.State.String(),
		Detail:             st.Detail,
		Policy:             st.Policy.String(),
		Epoch:              st.Epoch,
		ReadPosition:       st.ReadPosition,
		PointerPosition:    st.Status.CommittedPosition,
		FileSize:           st.FileSize,
		BytesBehind:        max(0, st.FileSize-st.ReadPosition),
		LinesRead:          st.LinesRead,
		BytesRead:          st.BytesRead,
		OversizeSkipped:    st.OversizeSkipped,
		PartialPending:     st.PartialPending,
		PartialDropped:     st.PartialDropped,
		Reopens:            st.Reopens,
		LastReopenReason:   st.LastReopenReason,
		Rewinds:            st.Rewinds,
		LastRewind:         st.LastRewind,
		PointerWriteErrors: st.Status.CommitErrors,
		LastPointerError:   st.LastCommitError,
		Consumers:          st.Consumers,
		PendingAcks:        st.PendingAcks,
		CommitLag:          st.ProcessedPending,
		Settled:            st.Settled,
		Stalled:            st.Stalled,
		StallReason:        st.StallReason,
		LastCommitSeq:      st.LastCommitSeq,
		LastCommitEpoch:    st.LastCommitEpoch,
		LastCommitPosition: st.LastCommitPosition,
		Read:               st.Read,
		Delivered:          st.Delivered,
		Dropped:            st.Dropped,
		Failed:             st.Failed,
		Skipped:            st.Skipped,
		Released:           st.Released,
		PollErrors:         st.PollErrors,
		CommitErrors:       st.CommitErrors,
		Groups:             make([]QueueReport, 0, len(st.Groups)),
	}
	for _, f := range st.Files {
		r.Files = append(r.Files, FileReport{
			Path: f.Path, State: f.State.String(), Detail: f.Detail, Epoch: f.Epoch,
			ReadPosition: f.ReadPosition, PointerPosition: f.CommittedPosition, FileSize: f.FileSize,
			BytesBehind: max(0, f.FileSize-f.ReadPosition), LinesRead: f.LinesRead, PartialPending: f.PartialPending,
		})
	}
	if !st.LastReopenAt.IsZero() {
		t := st.LastReopenAt
		r.LastReopenAt = &t
	}
	for _, q := range st.Groups {
		r.Groups = append(r.Groups, QueueReport{
			Group: q.Group, Depth: q.Depth, Processed: q.Processed, Failures: q.Failures,
			Skipped: q.Skipped, SkippedByReason: q.SkippedByReason, Dropped: q.Dropped, Fenced: q.Fenced, Removed: q.Removed,
		})
	}
	return r
}

// newStoreReport reads a store's counters and its durable positions of
// feeds.
func newStoreReport(sc StoreConfig, feeds []string) StoreReport {
	s := sc.Store.Stats()
	r := StoreReport{
		Name:             sc.Name,
		Dir:              sc.Store.Dir(),
		Backend:          s.Backend,
		Sync:             s.Sync,
		Applied:          s.Applied,
		Skipped:          s.Skipped,
		SkippedByLineage: s.SkippedByLineage,
		Staged:           s.Staged,
		Commits:          s.Commits,
		FailedCommits:    s.FailedCommits,
		LastError:        s.LastError,
		Failed:           s.Failed,
		BackPressure:     s.BackPressure,
		CacheHits:        s.CacheHits,
		CacheMisses:      s.CacheMisses,
		CacheBudget:      s.CacheBudget,
	}
	for _, f := range feeds {
		if l, ok := sc.Store.Applied(f); ok {
			r.Positions = append(r.Positions, StorePosition{Feed: f, Epoch: l.Epoch, Position: l.Position})
		}
	}
	return r
}

// report reads the status of the server and of every feed, group and
// store.
func (l *Listener) report() Report {
	r := Report{Time: time.Now().UTC(), Feeds: []FeedReport{}}
	if lc, ok := l.cfg.Server.(Lifecycle); ok {
		select {
		case <-lc.Done():
			r.Stopped = true
			if err := lc.Err(); err != nil {
				r.StopError = err.Error()
			}
		default:
		}
	}
	feeds := l.feedNames()
	for _, name := range feeds {
		st, err := l.cfg.Server.FeedStatus(name)
		if err != nil {
			r.Errors = append(r.Errors, "feed "+name+": "+err.Error())
			continue
		}
		r.Feeds = append(r.Feeds, NewFeedReport(st))
	}
	if gr, ok := l.cfg.Server.(GroupReporter); ok {
		r.Groups = []GroupReport{}
		for _, name := range gr.GroupNames() {
			st, err := gr.GroupStatus(name)
			if err != nil {
				r.Errors = append(r.Errors, "group "+name+": "+err.Error())
				continue
			}
			r.Groups = append(r.Groups, NewGroupReport(st))
		}
	}
	for _, sc := range l.cfg.Stores {
		r.Stores = append(r.Stores, newStoreReport(sc, storeFeeds(sc, feeds)))
	}
	return r
}

func storeFeeds(sc StoreConfig, serverFeeds []string) []string {
	if sc.Feeds != nil {
		return sc.Feeds
	}
	return serverFeeds
}
