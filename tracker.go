package tidemark

import "sync"

// Tracker is a small in-memory record of the last position applied per feed,
// for processors that keep their own state (in memory, or in a store of
// their own) and want the de-duplication rule applied for them. It is safe
// for concurrent use. The zero value is ready to use.
//
// A Tracker forgets everything when the process ends: to skip lines
// re-delivered after a restart, save [Tracker.Last] with your state, in the
// same transaction, and give it back with [Tracker.Restore] when you load the
// state. The state package does all of this for you.
type Tracker struct {
	mu   sync.Mutex
	last map[trackKey]Applied
}

// NewTracker returns an empty tracker.
func NewTracker() *Tracker { return &Tracker{} }

// Seen reports whether d is a re-delivery of a line at or before the last
// position recorded for its feed (see [AlreadyApplied]).
func (t *Tracker) Seen(d Delivery) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return AlreadyApplied(d, t.last[trackKey{d.Feed, d.File}])
}

// Record records that d has been applied: the feed's position moves to d's
// when d is newer (see [Advance]). A delivery without positions (Epoch 0)
// records nothing.
func (t *Tracker) Record(d Delivery) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.recordLocked(d)
}

func (t *Tracker) recordLocked(d Delivery) {
	if d.Epoch == 0 {
		return
	}
	if t.last == nil {
		t.last = make(map[trackKey]Applied)
	}
	k := trackKey{d.Feed, d.File}
	t.last[k] = Advance(t.last[k], d)
}

// Apply calls fn unless d is a re-delivery, and records d when fn returns
// nil. It reports whether fn was called and succeeded. When fn fails, its
// error is returned and d is not recorded, so a re-delivery of d is applied
// again.
//
// Apply holds the tracker's lock while fn runs, so that two deliveries of the
// same line racing on two goroutines are applied once: fn must not call the
// tracker.
func (t *Tracker) Apply(d Delivery, fn func() error) (applied bool, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if AlreadyApplied(d, t.last[trackKey{d.Feed, d.File}]) {
		return false, nil
	}
	if err := fn(); err != nil {
		return false, err
	}
	t.recordLocked(d)
	return true, nil
}

// trackKey is what a Tracker records a position for: a feed, and the file
// of a file set (Delivery.File, "" for a feed of one file).
type trackKey struct{ feed, file string }

// Last returns the last position recorded for feed (of one file, or the
// file "" of a set); the zero [Applied] when none was. [Tracker.LastOf]
// returns a file's.
func (t *Tracker) Last(feed string) Applied {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.last[trackKey{feed, ""}]
}

// LastOf returns the last position recorded for the file file of feed.
func (t *Tracker) LastOf(feed, file string) Applied {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.last[trackKey{feed, file}]
}

// RestoreOf sets the last position of the file file of feed (see Restore).
func (t *Tracker) RestoreOf(feed, file string, last Applied) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.last == nil {
		t.last = make(map[trackKey]Applied)
	}
	t.last[trackKey{feed, file}] = last
}

// Restore sets the last position of feed, typically to what was saved with
// the processor's state, before the first delivery.
func (t *Tracker) Restore(feed string, last Applied) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.last == nil {
		t.last = make(map[trackKey]Applied)
	}
	t.last[trackKey{feed, ""}] = last
}
