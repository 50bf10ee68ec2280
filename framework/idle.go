package framework

import "time"

// IdleStrategy decides how long a feed's reader waits when a duty cycle
// found nothing to do (nothing to read, no consumer, or a fenced consumer).
// n counts the consecutive idle cycles, from 0; it starts again at 0 after a
// cycle that read lines. Implementations must be safe to share.
type IdleStrategy interface {
	Idle(n int) time.Duration
}

// Backoff is the default idle strategy: it waits Min after the first idle
// cycle and doubles the wait at each further one, up to Max. A tailing feed
// that finds nothing therefore settles at one poll every Max, and a line
// that arrives is read within Max. The zero value waits 1 ms, then up to
// 50 ms.
type Backoff struct {
	// Min is the first wait; 0 means 1 ms.
	Min time.Duration
	// Max is the longest wait; 0 means 50 ms.
	Max time.Duration
}

// Idle returns min(Min·2ⁿ, Max).
func (b Backoff) Idle(n int) time.Duration {
	lo, hi := b.Min, b.Max
	if lo <= 0 {
		lo = time.Millisecond
	}
	if hi <= 0 {
		hi = 50 * time.Millisecond
	}
	if hi < lo {
		hi = lo
	}
	d := lo
	for i := 0; i < n && d < hi; i++ {
		d *= 2
	}
	return min(d, hi)
}

// FixedIdle waits the same duration after every idle cycle; the spec's
// SleepingMillisIdleStrategy.
type FixedIdle time.Duration

// Idle returns the fixed duration.
func (f FixedIdle) Idle(int) time.Duration { return time.Duration(f) }
