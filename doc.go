// Package tidemark is the vocabulary that tidemark's packages share: the
// delivery context of a line, [Delivery], what a store records as applied,
// [Applied] and [Lineage], and the rule that tells a re-delivered line from a
// new one, [AlreadyApplied]. It imports no other package of the module.
//
// The library itself is in the subpackages: package framework runs feeds and
// processor groups, package feed reads files, package state keeps a
// processor's state with what it applied, package tidemarktest tests a
// processor. A processor sees this package in its Handle method:
//
//	func (p *proc) Handle(ctx context.Context, d tidemark.Delivery, line []byte) error
//
// # Caveats
//
//   - A position only means something within its epoch. A delivery in an
//     epoch other than the recorded one is never a re-delivery by
//     [AlreadyApplied]. A deleted pointer file, a truncated or replaced input
//     file, or a pointer migrated from a format without epochs all start a new
//     epoch, and the lines of the new epoch are applied again even if they are
//     the same bytes. The state package goes further for the first and the
//     last of these: it keeps a [Lineage] (file identity, fingerprint and a
//     hash of the bytes just before the applied position) and recognises the
//     lines of a new epoch opened on the same, unchanged file.
//   - A delivery without positions (Epoch 0: an in-memory feed, a pipe, a
//     read strategy that does not commit) is never recognised as a
//     re-delivery, and records nothing.
//   - [Delivery.Seq] restarts at 1 every run: never use it across runs.
//   - [Tracker] is in memory only. To survive a restart, save [Tracker.Last]
//     with the state it protects, in the same transaction.
//
// # Use
//
// A file feed is at-least-once: after a crash it re-delivers the lines after
// its committed pointer, some of which a processor may already have applied.
// A processor that records the last (epoch, position) it applied, in the same
// transaction as its state, can skip them:
//
//	if tidemark.AlreadyApplied(d, last) {
//		return nil // applied before the crash
//	}
//	apply(line)
//	last = tidemark.Advance(last, d) // saved with the state
//
// [Tracker] does this bookkeeping per feed for a processor that keeps its own
// state. The package knows nothing of files, stores or queues.
package tidemark
