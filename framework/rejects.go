package framework

import (
	"errors"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/state"
)

// The reasons [RejectReason] gives a skipped line, besides those its error
// names itself.
const (
	// ReasonPanic: the processor panicked on the line.
	ReasonPanic = "panic"
	// ReasonTooLarge: a key or value of the line is larger than the store
	// takes (state.ErrTooLarge).
	ReasonTooLarge = "too large"
	// ReasonPermanent: the error was marked permanent (see [Permanent]).
	ReasonPermanent = "permanent"
	// ReasonRetriesSpent: the error persisted through every retry.
	ReasonRetriesSpent = "retries spent"
)

// RejectReason returns the reason under which a line skipped with err is
// counted ([QueueStatus.SkippedByReason], the ops metric
// tidemark_queue_lines_skipped_by_reason_total): the RejectReason() of the
// first error in err's chain that has that method (a processor names its
// own reasons so: "malformed", "unknown account"), else ReasonPanic,
// ReasonTooLarge, ReasonPermanent or ReasonRetriesSpent. Keep the reasons a
// small fixed set: each is a metric series.
func RejectReason(err error) string {
	var r interface{ RejectReason() string }
	if errors.As(err, &r) {
		if s := r.RejectReason(); s != "" {
			return s
		}
	}
	var p *PanicError
	switch {
	case errors.As(err, &p):
		return ReasonPanic
	case errors.Is(err, state.ErrTooLarge):
		return ReasonTooLarge
	case isPermanent(err):
		return ReasonPermanent
	}
	return ReasonRetriesSpent
}

// maxRejectReasons bounds the reasons a queue counts apart; the others are
// counted under otherReasons.
const maxRejectReasons = 32

// otherReasons counts the skipped lines of the reasons past
// maxRejectReasons.
const otherReasons = "other"

// skipLogEvery is the least time between two log records of lines a
// group skipped: a feed of bad lines writes a few records, not one per
// line.
const skipLogEvery = time.Second

// skipCounts are the lines a queue skipped, by reason.
type skipCounts struct {
	mu       sync.Mutex
	byReason map[string]uint64
}

func (c *skipCounts) add(reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byReason == nil {
		c.byReason = make(map[string]uint64)
	}
	if _, ok := c.byReason[reason]; !ok && len(c.byReason) >= maxRejectReasons {
		reason = otherReasons
	}
	c.byReason[reason]++
}

func (c *skipCounts) snapshot() map[string]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.byReason) == 0 {
		return nil
	}
	return maps.Clone(c.byReason)
}

// skipLog is a group's log of skipped lines: the first skip after a quiet
// second is logged with its line's feed, position and error; the skips
// after it, until a second has passed, are counted and reported with the
// next record (or when the group stops). Only the group's goroutine uses
// it (one per incarnation of the group).
type skipLog struct {
	logged   time.Time
	unlogged uint64
	reasons  map[string]uint64 // of the unlogged skips
}

// skipped records a line skipped for err and logs it, or counts it for
// the next report.
func (g *group) skipped(inc *incarnation, p *procEntry, d tidemark.Delivery, reason string, err error) {
	l := &inc.skips
	now := time.Now()
	if !l.logged.IsZero() && now.Sub(l.logged) < skipLogEvery {
		l.unlogged++
		if l.reasons == nil {
			l.reasons = make(map[string]uint64)
		}
		if len(l.reasons) < maxRejectReasons {
			l.reasons[reason]++
		}
		return
	}
	args := []any{"feed", d.Feed, "processor", p.name, "epoch", d.Epoch, "position", d.Position, "seq", d.Seq, "reason", reason, "err", err}
	if l.unlogged > 0 {
		args = append(args, "skipped_since_last_report", l.unlogged, "reasons_since_last_report", reasonList(l.reasons))
	}
	g.log.Warn("processor failed after its retries: line skipped", args...)
	l.logged, l.unlogged, l.reasons = now, 0, nil
}

// reportSkips logs the skips not yet reported, if any: the group is
// stopping.
func (g *group) reportSkips(inc *incarnation) {
	l := &inc.skips
	if l.unlogged == 0 {
		return
	}
	g.log.Warn("lines were skipped by the failure policy since the last report",
		"skipped_since_last_report", l.unlogged, "reasons_since_last_report", reasonList(l.reasons))
	l.logged, l.unlogged, l.reasons = time.Now(), 0, nil
}

// reasonList is "reason=N, reason=N" in the reasons' order.
func reasonList(m map[string]uint64) string {
	var b []byte
	for _, r := range slices.Sorted(maps.Keys(m)) {
		if len(b) > 0 {
			b = append(b, ", "...)
		}
		b = append(b, r...)
		b = append(b, '=')
		b = strconv.AppendUint(b, m[r], 10)
	}
	return string(b)
}
