package state

import (
	"errors"
	"fmt"
	"strconv"
)

// Errors of opening a store.
var (
	// ErrNotStore is returned by [OpenDir] (and [Open] without a backend)
	// when the directory holds no store: it has no STORE file. Open it with
	// a backend ("bbolt:DIR" or "pebble:DIR") to create one.
	ErrNotStore = errors.New("state: not a store directory")
	// ErrUnknownBackend is returned for a backend name other than "bbolt" or
	// "pebble", in a config string or in a STORE file.
	ErrUnknownBackend = errors.New("state: unknown backend")
	// ErrBackendMismatch is returned when a store is opened with a backend
	// other than the one that created it (open it with [OpenDir] to use the
	// recorded one), and when the backend its STORE file names is not the
	// one whose data the folder holds (STORE edited or replaced), or the
	// folder holds the data of both. Nothing in the folder is changed.
	ErrBackendMismatch = errors.New("state: store was created by another backend")
	// ErrStoreMissing is returned when a folder's STORE file names a
	// backend whose data is not there (state.bolt, or the Pebble database
	// in pebble/, deleted or moved): opening would make a new, empty store
	// behind the feeds' pointers. Restore the folder from a backup, or
	// remove the whole folder to start over (its feeds then read their
	// input again). Nothing in the folder is changed, output files
	// included.
	ErrStoreMissing = errors.New("state: the store's data is missing")
	// ErrLocked is returned when another process (or this one, through
	// another Open) has the store open and does not close it within
	// [Options.LockTimeout]. The error names the folder and, where the
	// system tells (Linux), the holder's process id.
	ErrLocked = errors.New("state: store is locked by another process")
	// ErrCorrupt is returned when a record of the store or an output file
	// does not verify: a bad checksum, an unknown version, an output file
	// shorter than its committed length. The error names what and where.
	ErrCorrupt = errors.New("state: corrupt store")
	// ErrNewerFormat is returned when the store's format record names a
	// format newer than this version of tidemark knows: a newer version
	// wrote it, and nothing in the folder is changed: run that version or
	// a newer one on it. The format record carries no checksum, so a
	// record damaged into a larger number reads so too: where no newer
	// version ever ran, restore the folder from a backup.
	ErrNewerFormat = errors.New("state: the store is of a newer format")
)

// Errors of using a store.
var (
	// ErrFailed is returned by every Apply and Flush after the store
	// failed: a commit failed (an I/O error, a full disk), or the check of
	// its file running in the background found damage (a [*CorruptError]).
	// The error also wraps the cause; [Store.Failed] is closed at the
	// failure. Nothing staged after it is declared durable, and no
	// checkpoint moves again: close the store, fix the cause, and open it
	// again (restart the process). The feed re-delivers what was not
	// durable, and the store skips what was.
	ErrFailed = errors.New("state: the store failed and makes nothing more durable; open it again (restart the process) once the cause is fixed")
	// ErrClosed is returned by the methods of a closed store.
	ErrClosed = errors.New("state: store closed")
	// ErrReadOnly is returned by a write inside [Store.View].
	ErrReadOnly = errors.New("state: write in a read-only transaction")
	// ErrBadName is returned for an output name that is not a plain file
	// name, or that the store uses itself.
	ErrBadName = errors.New("state: bad output name")
	// ErrOutputExists is returned when an output is declared for the first
	// time and a file of its name, not empty, is in the store's folder: the
	// store did not write it (it records every output before its first
	// byte), so it may be anyone's data, and the store does not empty it.
	// Move the file away, or declare another name.
	ErrOutputExists = errors.New("state: a file the store did not write has the output's name")
	// ErrNotInt64 is returned by GetInt64 and AddInt64 for a value that is
	// not 8 bytes long, so was not written by PutInt64 or AddInt64.
	ErrNotInt64 = errors.New("state: value is not an int64")
	// ErrTxDone is returned by the methods of a [Tx] used after the
	// function it was given to returned.
	ErrTxDone = errors.New("state: transaction used after its function returned")
	// ErrNotBound is returned by a batched Apply of a delivery whose feed
	// has no checkpoint bound to the store: nothing would keep the feed's
	// pointer behind what the store has made durable. Declare the store on
	// the processor group (framework.GroupConfig.Store), which binds it, or
	// [Store.Bind] the group's checkpoint, or open the store with
	// [Options].Unbound when the caller resumes from the store itself.
	//
	// The Sync mode needs no binding (each Apply is durable before it
	// returns), nor does a delivery without a feed name.
	ErrNotBound = errors.New("state: no checkpoint of the feed is bound to the store")
	// ErrTooLarge is wrapped by the error of a write whose key or value is
	// larger than the backend can store (see [TooLargeError] for the
	// limits). The error is permanent: retrying the line cannot succeed, so
	// a framework failure policy skips or quarantines it at once.
	ErrTooLarge = errors.New("state: key or value too large for the backend")
)

// TooLargeError is the error of a write that the backend cannot store: a
// key or a value longer than the backend's limit. It wraps [ErrTooLarge]
// and is permanent. The write fails in the [Tx] call (Put, PutInt64,
// AddInt64), and the whole line is refused: Apply returns the error even
// when the function ignored it, and stages nothing of the line.
//
// The limits, counting the key with the store's prefix of namespace and
// bucket (a few bytes plus their names):
//
//	bbolt    key ≤ 32768 bytes (bbolt.MaxKeySize), value ≤ 2147483642 bytes (bbolt.MaxValueSize
//	         less the value's checksum)
//	Pebble   key ≤ 16 MiB, value ≤ 64 MiB (the store's own limits: Pebble's is a batch
//	         of 4 GiB, and the store commits a whole batch as one; it also cuts a
//	         batch once it holds 1 GiB)
//	Postgres key ≤ 2400 bytes (a btree entry fits in a third of a page), value ≤ 64 MiB
//
// A Delete of a key longer than the limit does nothing: no such key is
// stored.
type TooLargeError struct {
	// Backend is the backend's name ([Bolt], [Pebble], [Postgres]); Dir the
	// store's directory.
	Backend, Dir string
	// Namespace and Bucket name where the write went.
	Namespace, Bucket string
	// What is "key" or "value"; Len its length (a key's with the store's
	// prefix of PrefixLen bytes), Limit the backend's.
	What           string
	Len, PrefixLen int
	Limit          int
	// KeyLen is the key's length without the prefix, and KeyStart its
	// first 32 bytes at most.
	KeyLen   int
	KeyStart []byte
	// Feed, Epoch and Position are the delivery's.
	Feed     string
	Epoch    uint64
	Position int64
}

// Error says what was refused, where, and what to do.
func (e *TooLargeError) Error() string {
	key := strconv.Quote(string(e.KeyStart))
	if e.KeyLen > len(e.KeyStart) {
		key += "…"
	}
	what, fix := fmt.Sprintf("key %s of %d bytes (%d with the store's prefix of namespace %q and bucket %q)", key, e.KeyLen, e.Len, e.Namespace, e.Bucket), "shorten or hash such keys"
	if e.What != "key" {
		what, fix = fmt.Sprintf("%s of %d bytes for key %s in bucket %q of namespace %q", e.What, e.Len, key, e.Bucket, e.Namespace), "keep such values elsewhere, or split them"
	}
	return fmt.Sprintf("state: %s is longer than %s takes (%d bytes): feed %q epoch %d position %d, store %s: "+
		"the line cannot be stored and goes to the failure policy; %s",
		what, e.Backend, e.Limit, e.Feed, e.Epoch, e.Position, e.Dir, fix)
}

// Unwrap returns [ErrTooLarge].
func (e *TooLargeError) Unwrap() error { return ErrTooLarge }

// Permanent reports true: the same line fails the same way every time, so
// retrying it is pointless. The framework sends an error whose Permanent
// method returns true straight to the failure policy.
func (e *TooLargeError) Permanent() bool { return true }
