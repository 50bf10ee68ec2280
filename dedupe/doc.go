// Package dedupe is the delivery context of a line, [Delivery], and the rule
// that tells a re-delivered line from a new one, [AlreadyApplied].
//
// A file feed is at-least-once: after a crash it re-delivers the lines after
// its committed pointer, some of which a processor may already have applied.
// A processor that records the last (epoch, position) it applied, in the same
// transaction as its state, can skip them:
//
//	if dedupe.AlreadyApplied(d, last) {
//		return nil // applied before the crash
//	}
//	apply(line)
//	last = dedupe.Advance(last, d) // saved with the state
//
// The package knows nothing of files, stores or queues.
package dedupe
