package feed

import (
	"context"
)

// The reasons a file source reopens its input, as counted in
// Status.Reopens and shown in Status.Detail and Status.LastReopenReason.
const (
	// ReasonReplaced: the path names another file than the one being read
	// (a rotation by rename, a write-temp-and-rename writer).
	ReasonReplaced = "input replaced while being read"
	// ReasonTruncated: the file being read is shorter than what was read.
	ReasonTruncated = "input truncated"
	// ReasonRewritten: the file being read has grown, but the bytes just
	// before the position read are no longer those read there: it was
	// truncated and rewritten in place (to at least the length read)
	// between two reads. It is read from 0 under a new epoch, like a
	// truncated file.
	ReasonRewritten = "input rewritten in place"
	// ReasonRenamedAway: at the start, the pointer named a file that was
	// renamed away (found by its identity in the input's folder) with
	// bytes after the pointer; the source finishes it in the pointer's
	// epoch, then opens the file at the path.
	ReasonRenamedAway = "finishing the input renamed away while stopped"
)

// The reasons of a [Reject].
const (
	// RejectOversize: the line's payload is longer than MaxLineBytes.
	RejectOversize = "line longer than MaxLineBytes"
	// RejectPartialDropped: the unterminated last line of a file that was
	// replaced or truncated while being read; it was never delivered.
	RejectPartialDropped = "unterminated last line of a replaced or truncated input"
)

// DetailPartialLine is Status.Detail of a source caught up with a line whose
// '\n' has not arrived yet.
const DetailPartialLine = "partial line pending"

// FileSource reads lines from one file: it implements [Source] with the read
// strategies, the pointer file, epochs, tailing and the rotation and
// truncation checks described in the package documentation.
//
// Poll, Commit and Close are called by one goroutine at a time; Status may
// be called from any goroutine.
type FileSource struct {
	// The source of one input path (Config.Path); nil for a file set.
	*stream
	// set is the source of a set of files (Config.Paths); nil for one
	// file.
	set *fileSet
}

var (
	_ Source  = (*FileSource)(nil)
	_ Resumer = (*FileSource)(nil)
)

// NewFileSource validates cfg and returns a source. A path that names
// something other than a regular file (a FIFO, a device, a socket, a
// directory) is refused with an error wrapping ErrNotRegular. It does not
// open the input: the first Poll does, so the input need not exist yet.
//
// Committed only: it takes the pointer file's lock ([github.com/tidemark-go/tidemark/feed/pointer.File.Lock]),
// creating the pointer folder and an empty pointer file when missing, and
// holds it until Close: one source per pointer file, in this process or
// any other. When another source holds it, the error wraps
// ErrPointerLocked and names the pointer file and, where the operating
// system tells, the holder. Close every source you make.
func NewFileSource(cfg Config) (*FileSource, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if len(cfg.Paths) > 0 {
		set, err := newFileSet(cfg)
		if err != nil {
			return nil, err
		}
		return &FileSource{set: set}, nil
	}
	st, err := newStream(cfg, nil, "")
	if err != nil {
		return nil, err
	}
	return &FileSource{stream: st}, nil
}

// Rereadable reports true: a file can always be read again. Only Committed
// resumes where it was after a restart; the other strategies re-read from
// their start (Earliest) or skip to the end (Latest).
func (s *FileSource) Rereadable() bool { return true }

// ResumeFrom implements [Resumer]: the source starts where its stateful
// subscribers' stores say, when that is below its own pointer. Call it once,
// before the first Poll, with one point per store (an empty list changes
// nothing); it returns an error after the first Poll, at a second call, and
// after Close.
//
// Committed only. At the first open, once the pointer decision keeps the
// pointer's epoch at its position P (the input appended to, a copy with the
// same bytes, the input renamed away while stopped), the source starts at
// the lowest position the points cover, if that is below P:
//
//	the point                                           covers
//	not found (the store has no record of the feed)     nothing: the input is read from 0
//	in the pointer's epoch                              its position, a line end of the bytes the pointer vouches for
//	of another epoch, the input holds its bytes         its position (the store skips what it holds by its lineage)
//	  (first Fingerprint.Len bytes, size, the TailLen
//	  bytes before its position)
//	of another epoch, the input does not                nothing: the input is read from 0
//
// A point above P leaves the start at P. The pointer file is not moved
// back: it stays at P, commits at or below P are not stored (they still
// count as processed for a rotation), and Status.CommittedPosition stays P
// until the reading passes it. A decision that starts a new epoch from 0
// (no pointer file, a replaced or truncated input) has nothing to rewind.
// A legacy pointer's migration follows the same rule against its count
// (points of other epochs only, there being no epoch yet), and then stores
// the new epoch at once at the start. Each rewind is logged once at WARN
// (path, pointer file, epoch, both positions, the holder, the store's
// record, the start and the reason) and counted in Status.Rewinds and
// Status.LastRewind.
//
// The other strategies accept the points and ignore them: Earliest and
// OnceEarliest read from 0 on every run anyway, and Latest and OnceLatest
// start at the end, by definition with no past to catch up.
func (s *FileSource) ResumeFrom(points []ResumePoint) error {
	if s.set != nil {
		return s.set.resumeFrom(points)
	}
	return s.stream.resumeFrom(points)
}

// Poll fills items with the lines available now, up to len(items), and
// returns how many it filled. It never blocks: at the end of the input it
// returns 0 and nil, after checking (one stat) that the path still names the
// file being read and that the file did not shrink; when it has grown, one
// read of the 64 bytes before the offset read checks that it was not
// rewritten in place. It returns ErrDone when a once strategy has reached
// its end. Lines are slices into the source's buffer, valid until the next
// Poll.
//
// Committed only: before it returns lines of bytes beyond the prefix that
// the pointer file's fingerprint covers (in the first 4096 bytes of an
// epoch), Poll stores the pointer again with a longer fingerprint; and an
// idle Poll makes a commit left pending by SyncInterval durable. Failures
// of those writes are counted in Status and logged, not returned.
func (s *FileSource) Poll(ctx context.Context, items []Item) (int, error) {
	if s.set != nil {
		return s.set.poll(ctx, items)
	}
	return s.stream.poll(ctx, items)
}

// Commit stores position in the pointer file when epoch is the current
// epoch and position is beyond the committed one; other commits are ignored.
// A position beyond the lines read is a caller bug: it returns an error
// wrapping ErrCommitAhead. A failed pointer write returns its error, is
// counted in Status, and is retried by the next Commit. Strategies without a
// pointer ignore every commit.
//
// Under Config.GroupCommit, a commit that only moves the position is handed
// to the writer goroutine and Commit returns at once: it returns the error
// of the writer's last write when that write failed (nil once one
// succeeds), and an ignored commit makes the writer retry a failed write.
func (s *FileSource) Commit(epoch uint64, position int64) error {
	if s.set != nil {
		return s.set.commit(epoch, position)
	}
	return s.stream.commit(epoch, position)
}

// Flush waits until every commit handed to the GroupCommit writer is
// written (and synced, per the sync policy). When the last write failed it
// tries once more, and returns that write's error, naming the input, the
// epoch and the position: the record stays pending, and the next Commit,
// Flush or Close retries it. Without GroupCommit it returns nil at once:
// Commit has written already. It returns ErrClosed after Close.
func (s *FileSource) Flush() error {
	if s.set != nil {
		return s.set.flush()
	}
	return s.stream.flush()
}

// Close waits for the GroupCommit writer's pending write (see Flush) and
// stops it, then closes the input and the pointer file (making a pending
// pointer write durable). It does not commit. Closing twice returns nil.
func (s *FileSource) Close() error {
	if s.set != nil {
		return s.set.close()
	}
	return s.stream.close()
}

// Status returns the source's facts as of the end of the last Poll, Commit
// or Close, and under GroupCommit of the writer's last write. It is safe to
// call from any goroutine.
func (s *FileSource) Status() Status {
	if s.set != nil {
		return s.set.status()
	}
	return s.stream.status()
}
