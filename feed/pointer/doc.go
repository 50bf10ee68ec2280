// Package pointer is the on-disk format of a file feed's pointer: the
// durable record of how far the lines of an input have been committed,
// with the facts that tell whether a file is still the one read (its
// identity, a fingerprint of its first bytes, a hash of the bytes before
// the position).
//
// Most programs never use this package: a Committed
// [github.com/tidemark-go/tidemark/feed.FileSource] reads and writes
// its pointer through it. It is exported for the tools that inspect or set
// a pointer while no feed runs (tidemark pointer), for tests, and for
// readers who want to check the format before they trust it.
//
// A [File] is one pointer file: two checksummed fixed-size records written
// alternately in place (the format, its diagram and why a torn write never
// moves the position forward are documented on File). [File.Lock] takes
// the exclusive OS lock that makes one writer per pointer file. [Encode]
// and [Decode] turn one record into bytes and back; [Path] names the
// pointer file of an input.
//
// The limits of a record ([MaxFingerprintLen], [MaxTailLen]) are the limits
// of what a feed compares when it opens a file.
package pointer
