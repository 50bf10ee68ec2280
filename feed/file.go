package feed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tidemark-go/tidemark/dedupe"
	"github.com/tidemark-go/tidemark/internal/vfs"
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

// maxRenamedScan bounds the folder scan for an input renamed away while
// the source was stopped: a folder with more entries is not scanned.
const maxRenamedScan = 4096

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

// Errors of a file source.
var (
	// ErrInvalidConfig is wrapped by NewFileSource's errors.
	ErrInvalidConfig = errors.New("feed: invalid file source config")
	// ErrClosed is returned by Poll and Commit after Close.
	ErrClosed = errors.New("feed: source closed")
	// ErrCommitAhead is wrapped by the error of a Commit beyond the lines
	// read: a bug in the caller.
	ErrCommitAhead = errors.New("feed: commit beyond the lines read")
	// ErrNotRegular is wrapped by the error of a source whose input is not
	// a regular file once symbolic links are followed: a FIFO, a device, a
	// socket or a directory. Such an input is never opened for reading in
	// a way that can block, and no pointer file is made for it. The error
	// names the path and what it is. It is returned by NewFileSource when
	// the path names such a file already, and by Poll when it comes to
	// (every open checks again). A framework treats it as fatal: retrying
	// does not help until the path is fixed.
	ErrNotRegular = errors.New("feed: input is not a regular file")
	// ErrPointerLocked is wrapped by the error of a Committed source whose
	// pointer file another source holds, in this process or another: one
	// writer per pointer. The error names the pointer file and, where the
	// operating system tells (Linux), the process that holds it. It is
	// returned by NewFileSource. A framework treats it as fatal: stop the
	// other feed, or give this one its own Config.PointerDir.
	ErrPointerLocked = errors.New("feed: pointer file is locked by another source")
)

// maxConfigLineBytes bounds Config.MaxLineBytes: the framer may hold that
// many bytes in memory.
const maxConfigLineBytes = 1 << 30

// Config configures a [FileSource]. The zero value of every field but Path
// is a sensible default.
type Config struct {
	// Path is the input file. It need not exist yet: the source waits for
	// it. It must be a regular file, or a symbolic link to one
	// (ErrNotRegular).
	Path string
	// Strategy is the read strategy; the zero value is Committed, the only
	// strategy that opens a pointer file.
	Strategy ReadStrategy
	// PointerDir is the folder of the pointer file (Committed only); ""
	// means the input's folder. The pointer file is
	// PointerDir/<base of Path>.readPointer ([PointerPath]). With a folder
	// of its own, the input's folder may be read-only, and two programs
	// may follow one file, each with its own pointer. The folder is
	// created when missing (logged).
	PointerDir string
	// MaxLineBytes is the longest line payload (without its terminator)
	// delivered; longer lines are skipped and reported. 0 means
	// DefaultMaxLineBytes (1 MiB). The source's read buffer is 64 KiB and
	// grows for longer lines up to MaxLineBytes+2 bytes, never beyond.
	MaxLineBytes int
	// Sync is when a pointer write is made durable (Committed only).
	Sync SyncPolicy
	// SyncInterval is the interval of SyncInterval; 0 means
	// DefaultSyncInterval.
	SyncInterval time.Duration
	// FS is the file system; nil means vfs.Default(), the operating system.
	FS vfs.FS
	// Logger receives the source's warnings and notes; nil means
	// slog.Default(), as in every tidemark package. To silence a source,
	// pass a logger with slog.DiscardHandler (Status and OnReject still
	// report everything).
	Logger *slog.Logger
	// OnReject, when set, is called for every line that is not delivered:
	// an oversize line, or the unterminated last line of a file that was
	// replaced or truncated while being read. It is called from Poll.
	OnReject func(Reject)
	// Now is the clock for new epochs; nil means time.Now.
	Now func() time.Time
	// GroupCommit (Committed only) makes Commit hand the pointer record to
	// a writer goroutine instead of writing it itself: Commit computes the
	// record as without it (fingerprint, tail hash, the rewrite-in-place
	// check) and returns without waiting for the write and its sync. The
	// writer writes one record at a time (write and sync per Sync, so the
	// two-slot scheme is unchanged); the commits that arrive during a write
	// coalesce, and only the newest is written next. Commits are no longer
	// capped by the disk's sync rate: a file is read at close to the speed
	// of its page cache under SyncEveryCommit.
	//
	// Only a record that moves the position within the epoch, on the same
	// file (identity and fingerprint), goes to the writer. Every other
	// store (a new epoch, another identity, a longer fingerprint) first
	// waits for the writer's pending write, then is written as without
	// GroupCommit: the pointer moves in the same order.
	//
	// What it costs: a kill -9, a power loss or an operating system crash
	// also loses the commits not yet written when it happens, at most those
	// handed during one write and sync. Their lines are delivered again
	// after the restart, never skipped. A failed write is counted in Status,
	// logged, and returned by the next Commit; the next Commit, Flush or
	// Close retries it. Status.CommittedPosition is the position written;
	// Status.AskedPosition the newest position Commit accepted. Call
	// [FileSource.Flush] to wait for the writer; Close flushes.
	GroupCommit bool
}

// Reject describes a line the source did not deliver.
type Reject struct {
	// Path is the input's path.
	Path string
	// Epoch is the epoch the line was read in (0 for strategies without a
	// pointer).
	Epoch uint64
	// Position is the offset of the line's first byte.
	Position int64
	// End is the offset just after the line's terminator, 0 when it has
	// none (a dropped partial line).
	End int64
	// Length is the number of bytes of the line, its terminator included.
	Length int64
	// Reason is RejectOversize or RejectPartialDropped.
	Reason string
}

// FileSource reads lines from one file: it implements [Source] with the read
// strategies, the pointer file, epochs, tailing and the rotation and
// truncation checks described in the package documentation.
//
// Poll, Commit and Close are called by one goroutine at a time; Status may
// be called from any goroutine.
type FileSource struct {
	path   string
	strat  ReadStrategy
	fs     vfs.FS
	log    *slog.Logger
	now    func() time.Time
	reject func(Reject)
	pf     *PointerFile // nil unless Committed
	// madePointer: the pointer file was missing, and its lock made it.
	madePointer bool
	sync        SyncPolicy
	group       bool         // Config.GroupCommit, Committed only
	gw          *groupWriter // GroupCommit's writer; nil until the first record handed to it
	// lastRec is the last pointer record stored, or handed to the writer;
	// a record that differs from it by its position only goes to the
	// writer (GroupCommit).
	lastRec Pointer
	haveRec bool

	fr *framer
	in *inputFile // the open input; nil while waiting for it

	epoch    uint64
	origin   *dedupe.Origin     // shared by the items of the epoch in this run
	ef       *epochFile         // the file the origin's TailHash reads
	fp       dedupe.Fingerprint // of the epoch's file, refreshed while < 4096 bytes
	storedFP int                // Fingerprint.Len in the pointer file for epoch
	// committed is the position stored in the pointer file for epoch, or
	// under GroupCommit handed to the writer (written once it is idle).
	committed int64
	// storedID is the identity in the pointer record last stored (or
	// loaded) for the epoch; idStale is set while the epoch is read on from
	// a file of another identity (a copy renamed over the path) and the
	// pointer still names the old one, freed by the rename (D5): no line of
	// the file is handed out until the pointer names it.
	storedID dedupe.Identity
	idStale  bool
	seq      uint64
	size     int64 // last size seen by stat

	polled         bool // Poll was called before
	started        bool // the input was opened once
	missingAtStart bool // the input did not exist at the first Poll
	atEOF          bool // the last read of the open file found its end
	waitWarned     bool
	migrate        bool   // a legacy pointer's migration is stored once the resync completes
	reopenReason   string // a reopen is due at the next end of the open file
	cont           *continuation
	done, closed   bool

	lines, bytes, oversize, partialDropped uint64
	state                                  State
	detail                                 string

	head [MaxFingerprintLen]byte
	tail [MaxTailLen]byte

	// seen holds the last seenLen (<= 64) bytes before s.fr.off as they
	// were read: a rewrite in place is recognised by them.
	seen    [MaxTailLen]byte
	seenLen int
	scratch [MaxTailLen]byte
	// lastDelivered is the position of the last line delivered in the
	// epoch, asked the highest position Commit was asked to store, acked
	// the highest position of the epoch Commit was called with, stored or
	// not (after a rewind, commits at or below the pointer are not stored,
	// but they say which delivered lines are processed).
	lastDelivered, asked, acked int64
	// resume holds the points of ResumeFrom; resumed is set once it was
	// called. rewinds counts the starts below the pointer, lastRewind
	// says why (Status.Rewinds, Status.LastRewind).
	resume     []ResumePoint
	resumed    bool
	rewinds    uint64
	lastRewind string
	// renamed is the path of the input renamed away that is being finished
	// ("" when none).
	renamed string
	maxScan int // maxRenamedScan; tests lower it
	// renamedTried: the start with the path missing looked for the file
	// the pointer names.
	renamedTried bool

	mu               sync.Mutex // guards st, reopens, the reopen facts and the commit facts
	st               Status
	reopens          map[string]uint64
	lastReopenReason string
	lastReopenAt     time.Time
	// The commit facts, written by the source and by GroupCommit's writer:
	// written is the position in the pointer file for the epoch
	// (Status.CommittedPosition); commitErrors counts failed pointer writes
	// and syncs, lastCommitErr is the last one's message, "" once a write
	// succeeds.
	written       int64
	commitErrors  uint64
	lastCommitErr string
}

var (
	_ Source  = (*FileSource)(nil)
	_ Resumer = (*FileSource)(nil)
)

// continuation is what a reopen knows of the file it left: where it read to
// and the bytes just before that, so that the file found at the path can be
// recognised as the same content (a copy renamed over the path).
type continuation struct {
	forceNew bool  // truncated: always a new epoch from 0
	pos      int64 // where the old file was read to (a line start)
	resync   bool  // the old file was being read from inside a line
	drop     int64 // bytes of an unterminated last line after pos
	epoch    uint64
	// end is how far the old file was read; fp and the tail describe the
	// old file's bytes up to end.
	end      int64
	fp       dedupe.Fingerprint
	tailLen  int
	tailHash uint64
	ok       bool // tailHash was read
}

// inputFile is the open input. Its Origin's TailHash reads it concurrently
// with the source, so closing takes the lock.
type inputFile struct {
	mu    sync.RWMutex
	f     vfs.File // nil once closed
	name  string
	id    dedupe.Identity
	hasID bool
}

// tailHash returns HashBytes of the n bytes just before pos.
func (h *inputFile) tailHash(pos int64, n int) (uint64, error) {
	if n < 0 || int64(n) > pos {
		return 0, fmt.Errorf("feed: tail hash of input %s: %d bytes before position %d is out of range", h.name, n, pos)
	}
	b := make([]byte, n)
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.f == nil {
		return 0, fmt.Errorf("feed: tail hash of input %s: the file of this epoch is closed (rotated or the source stopped)", h.name)
	}
	if _, err := h.f.ReadAt(b, pos-int64(n)); err != nil {
		return 0, fmt.Errorf("feed: tail hash of input %s at position %d: %w", h.name, pos, err)
	}
	return HashBytes(b), nil
}

// epochFile is the file an epoch is read from now: the Origin of an epoch
// reads it, and a reopen that keeps the epoch (a copy renamed over the path)
// points it at the new file, so that the epoch keeps one Origin.
type epochFile struct {
	mu sync.RWMutex
	in *inputFile // nil once the epoch ended
}

func (e *epochFile) set(in *inputFile) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.in = in
}

// tailHash is the Origin's TailHash.
func (e *epochFile) tailHash(pos int64, n int) (uint64, error) {
	e.mu.RLock()
	in := e.in
	e.mu.RUnlock()
	if in == nil {
		return 0, errors.New("feed: tail hash: the epoch has ended (its file was rotated, or the source closed)")
	}
	return in.tailHash(pos, n)
}

func (h *inputFile) close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.f == nil {
		return nil
	}
	err := h.f.Close()
	h.f = nil
	return err
}

// NewFileSource validates cfg and returns a source. A path that names
// something other than a regular file (a FIFO, a device, a socket, a
// directory) is refused with an error wrapping ErrNotRegular. It does not
// open the input: the first Poll does, so the input need not exist yet.
//
// Committed only: it takes the pointer file's lock ([PointerFile.Lock]),
// creating the pointer folder and an empty pointer file when missing, and
// holds it until Close: one source per pointer file, in this process or
// any other. When another source holds it, the error wraps
// ErrPointerLocked and names the pointer file and, where the operating
// system tells, the holder. Close every source you make.
func NewFileSource(cfg Config) (*FileSource, error) {
	switch {
	case cfg.Path == "":
		return nil, fmt.Errorf("%w: Path is empty: set it to the input file", ErrInvalidConfig)
	case cfg.Strategy < Committed || cfg.Strategy > OnceLatest:
		return nil, fmt.Errorf("%w: unknown read strategy %d for %s", ErrInvalidConfig, int(cfg.Strategy), cfg.Path)
	case cfg.MaxLineBytes < 0 || cfg.MaxLineBytes > maxConfigLineBytes:
		return nil, fmt.Errorf("%w: MaxLineBytes %d for %s is outside 0..%d (0 means %d)", ErrInvalidConfig, cfg.MaxLineBytes, cfg.Path, maxConfigLineBytes, DefaultMaxLineBytes)
	case cfg.Sync < SyncEveryCommit || cfg.Sync > SyncNever:
		return nil, fmt.Errorf("%w: unknown sync policy %d for %s", ErrInvalidConfig, int(cfg.Sync), cfg.Path)
	case cfg.SyncInterval < 0:
		return nil, fmt.Errorf("%w: negative SyncInterval %v for %s", ErrInvalidConfig, cfg.SyncInterval, cfg.Path)
	}
	s := &FileSource{
		path:    cfg.Path,
		strat:   cfg.Strategy,
		fs:      cfg.FS,
		log:     cfg.Logger,
		now:     cfg.Now,
		reject:  cfg.OnReject,
		reopens: map[string]uint64{},
		maxScan: maxRenamedScan,
		sync:    cfg.Sync,
	}
	if s.fs == nil {
		s.fs = vfs.Default()
	}
	if fi, err := s.fs.Stat(s.path); err == nil && !fi.Mode().IsRegular() {
		// Checked again at every open: the path may come to name one.
		return nil, notRegular(s.path, fi.Mode())
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.fr = newFramer(cfg.MaxLineBytes, s.onSkip)
	if s.strat.Commits() {
		ptr := PointerPath(cfg.Path, cfg.PointerDir)
		if err := s.pointerFolder(filepath.Dir(ptr), cfg.PointerDir != ""); err != nil {
			return nil, err
		}
		s.pf = OpenPointerFile(ptr, PointerFileOptions{
			FS: s.fs, Sync: cfg.Sync, SyncInterval: cfg.SyncInterval, Logger: s.log,
		})
		if err := s.pf.Lock(); err != nil {
			// The error names the pointer file, itself named after the input.
			return nil, errors.Join(err, s.pf.Close())
		}
		s.madePointer = s.pf.made
		s.group = cfg.GroupCommit || groupCommitAll
	}
	s.publish()
	return s, nil
}

// PointerPath returns the path of the pointer file of input: in dir when
// dir is not empty, else beside the input (input+".readPointer").
func PointerPath(input, dir string) string {
	if dir == "" {
		return input + PointerSuffix
	}
	return filepath.Join(dir, filepath.Base(input)+PointerSuffix)
}

// pointerFolder makes sure the pointer file's folder exists, creating it
// when missing; own says it was configured (PointerDir), not the input's.
func (s *FileSource) pointerFolder(dir string, own bool) error {
	fi, err := s.fs.Stat(dir)
	switch {
	case err == nil && fi.IsDir():
		return nil
	case err == nil:
		return fmt.Errorf("%w: the pointer folder %s of input %s is not a folder: set PointerDir to a folder", ErrInvalidConfig, dir, s.path)
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("feed: the pointer folder %s of input %s: %w; fix its permissions, or choose another PointerDir", dir, s.path, err)
	}
	if err := s.fs.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("feed: create the pointer folder %s of input %s: %w; create it, or choose a folder the feed may write (PointerDir)", dir, s.path, err)
	}
	if own {
		s.log.Info("feed: created the pointer folder", "folder", dir, "path", s.path)
	} else {
		s.log.Warn("feed: the input's folder does not exist: created it to hold the pointer file; the source waits for the input", "folder", dir, "path", s.path)
	}
	return nil
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
	switch {
	case s.closed:
		return ErrClosed
	case s.polled:
		return fmt.Errorf("feed: ResumeFrom on input %s after its first Poll: the source has started where its pointer says; call ResumeFrom once, before the first Poll", s.path)
	case s.resumed:
		return fmt.Errorf("feed: ResumeFrom on input %s called twice: call it once, before the first Poll, with every point", s.path)
	}
	s.resumed = true
	if s.strat.Commits() {
		s.resume = slices.Clone(points)
	}
	return nil
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
	if s.closed {
		return 0, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if s.done {
		return 0, ErrDone
	}
	if s.strat == OnceLatest {
		s.done = true
		s.setState(StateDone, "ONCE_LATEST starts at the end of the file: nothing to read")
		s.publish()
		return 0, ErrDone
	}
	if len(items) == 0 {
		return 0, nil
	}
	first := !s.polled
	s.polled = true
	if s.in == nil {
		err := s.open(first)
		if err != nil || s.in == nil {
			s.publish()
			return 0, err
		}
	}
	n, err := s.read(items)
	if n == 0 && err == nil && s.pf != nil && s.sync == SyncInterval && s.state == StateCaughtUp {
		// Idle: make a commit pending under SyncInterval durable now
		// rather than at the next commit (no system call otherwise).
		if serr := s.pf.SyncIfDue(); serr != nil {
			s.commitFailed(serr)
			s.log.Warn("feed: pointer sync failed; the next commit retries", "path", s.path, "pointer", s.pf.Path(), "err", serr)
		}
	}
	if n > 0 && s.pf != nil && !s.migrate && s.storedFP < int(min(MaxFingerprintLen, s.fr.off)) {
		// Lines are about to be delivered, possibly applied by a store, and
		// the pointer file's fingerprint does not cover all the bytes read
		// (the file was short when the epoch started): store it again with
		// a longer one first, so that a file replaced while the source is
		// down is not taken for this one at the next start. Only the first
		// 4096 bytes of an epoch cost such writes. A failure is counted and
		// logged; the lines are delivered all the same.
		_ = s.store(s.committed)
	}
	for i := range items[:n] {
		s.seq++
		it := &items[i]
		it.Seq, it.Epoch, it.Origin = s.seq, s.epoch, s.origin
	}
	if n > 0 {
		s.lastDelivered = items[n-1].Position
	}
	s.lines += uint64(n)
	s.publish()
	return n, err
}

// read fills items from the open input; see Poll.
func (s *FileSource) read(items []Item) (int, error) {
	if !s.nameOpenFile() {
		return 0, nil
	}
	n := 0
	checked, reopened := false, false
	for {
		n += s.fr.frame(items[n:])
		if n == len(items) {
			s.setState(StateBehind, s.reopenReason)
			return n, nil
		}
		if s.atEOF && s.reopenReason == "" {
			if s.strat == OnceEarliest && s.fr.off > 0 {
				s.done = true
				s.setState(StateDone, "ONCE_EARLIEST reached the end of the file")
				if n > 0 {
					return n, nil
				}
				return 0, ErrDone
			}
			if checked {
				s.caughtUp()
				return n, nil
			}
			checked = true
			more, err := s.check()
			if err != nil {
				if n > 0 {
					return n, nil // the next poll meets the error again
				}
				return 0, err
			}
			if !more {
				s.caughtUp()
				return n, nil
			}
		}
		var got int
		var err error
		if s.reopenReason == ReasonRewritten {
			// The bytes after the position are another file's: read none.
			err = io.EOF
		} else {
			got, err = s.fr.fill(s.in.f, n == 0)
		}
		s.bytes += uint64(got)
		if got > 0 {
			s.noteRead(s.fr.buf[s.fr.w-got : s.fr.w])
			s.atEOF = false
			continue
		}
		if errors.Is(err, errBufferFull) {
			s.setState(StateBehind, s.reopenReason)
			return n, nil
		}
		if err != nil && !errors.Is(err, io.EOF) {
			if n > 0 {
				return n, nil // the next poll meets the error again
			}
			return 0, fmt.Errorf("feed: read input %s at offset %d (epoch %d): %w; the next poll retries", s.path, s.fr.off, s.epoch, err)
		}
		s.atEOF = true
		if s.reopenReason != "" {
			if n > 0 || reopened {
				s.setState(StateBehind, s.reopenReason)
				return n, nil
			}
			reopened = true
			if err := s.reopen(); err != nil || s.in == nil || s.reopenReason != "" {
				return 0, err // an error, waiting for the path, or for commits
			}
			if !s.nameOpenFile() {
				return 0, nil
			}
			checked = false
		}
	}
}

// noteRead keeps the last (up to 64) bytes read, b being the bytes just
// read: one copy per read of the input, none per line.
func (s *FileSource) noteRead(b []byte) {
	if len(b) >= MaxTailLen {
		s.seenLen = copy(s.seen[:], b[len(b)-MaxTailLen:])
		return
	}
	keep := min(s.seenLen, MaxTailLen-len(b))
	copy(s.seen[:keep], s.seen[s.seenLen-keep:s.seenLen])
	s.seenLen = keep + copy(s.seen[keep:], b)
}

// unchanged reports whether the open file still holds, just before the
// offset read, the bytes read there (one read of up to 64 bytes).
func (s *FileSource) unchanged() (bool, error) {
	if s.seenLen == 0 {
		return true, nil
	}
	b := s.scratch[:s.seenLen]
	n, err := s.in.f.ReadAt(b, s.fr.off-int64(len(b)))
	if n < len(b) {
		if err == nil || errors.Is(err, io.EOF) {
			return false, nil // shorter than what was read
		}
		return false, fmt.Errorf("feed: read the %d bytes of input %s before offset %d: %w; the next poll retries", len(b), s.path, s.fr.off, err)
	}
	return bytes.Equal(b, s.seen[:s.seenLen]), nil
}

// readBytes returns the n bytes at input offset off when the framer's
// buffer still holds them as they were read: its bytes [0, w) are those of
// the input [off-w, off).
func (s *FileSource) readBytes(off int64, n int) ([]byte, bool) {
	f := s.fr
	first := f.off - int64(f.w)
	if n < 0 || off < first || off+int64(n) > f.off {
		return nil, false
	}
	i := int(off - first)
	return f.buf[i : i+n], true
}

// nameOpenFile makes the pointer name the file being read when the epoch is
// read on from a file of another identity (a copy renamed over the path, at
// a reopen or at the start): the same epoch and committed position, the new
// file's identity. Were the pointer left naming the old file, freed by the
// rename, a restart after the copy is renamed away could not find the copy
// by its identity (or would find an unrelated file that reused the inode),
// and the copy's unread lines would be lost (D5). It reports whether lines
// may be handed out: not while that store fails (the failure is counted in
// Status like a failed commit, and the next Poll retries).
func (s *FileSource) nameOpenFile() bool {
	if !s.idStale || s.pf == nil || s.in == nil {
		return true
	}
	if err := s.store(s.committed); err != nil {
		s.setState(StateBehind, "pointer write failed: waiting to store the pointer naming the file being read")
		return false
	}
	// Stored, or not stored because the file was rewritten in place (a
	// reopen under a new epoch is due, and nothing more is read from it).
	return true
}

// retryCommit stores again a commit whose pointer write failed.
func (s *FileSource) retryCommit() {
	if s.asked > s.committed && s.commitFailing() {
		_ = s.store(s.asked)
	}
}

// caughtUp records that the source is at the end of its input.
func (s *FileSource) caughtUp() {
	if s.fr.pending() > 0 {
		s.setState(StateCaughtUp, DetailPartialLine)
		return
	}
	s.setState(StateCaughtUp, "")
}

// check stats the path at the end of the open file. It returns whether the
// open file may hold more bytes, and starts a reopen when the path names
// another file or the file shrank.
func (s *FileSource) check() (bool, error) {
	fi, err := s.fs.Stat(s.path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			// A rotation in progress: read the open file on.
			return true, nil
		}
		return false, fmt.Errorf("feed: stat input %s (epoch %d, read to %d): %w; the next poll retries", s.path, s.epoch, s.fr.off, err)
	}
	if s.in.hasID {
		if id, ok := fileIdentity(fi); ok && id != s.in.id {
			s.startReopen(ReasonReplaced)
			return true, nil
		}
	}
	size := fi.Size()
	s.size = size
	if size < s.fr.off {
		s.startReopen(ReasonTruncated)
		return true, nil
	}
	if size == s.fr.off {
		return false, nil
	}
	// The file has grown since its end was found: check that the bytes
	// before the offset read are still those read (one read of up to 64
	// bytes per return from idle, none per line), else it was truncated
	// and rewritten in place to at least the length read.
	same, err := s.unchanged()
	if err != nil {
		return false, err
	}
	if !same {
		s.startReopen(ReasonRewritten)
	}
	return true, nil
}

// startReopen makes the next end of the open file reopen the path.
func (s *FileSource) startReopen(reason string) {
	s.reopenReason = reason
	s.setState(StateBehind, reason)
	s.log.Info("feed: "+reason+": reading the open file to its end, then opening the path again",
		"path", s.path, "epoch", s.epoch, "position", s.fr.position())
}

// reopen closes the open file, dropping an unterminated last line, and opens
// the path again.
func (s *FileSource) reopen() error {
	// unwritten: under GroupCommit, commits of the file left are not in
	// the pointer file (the writer's write failed, and failed again now).
	unwritten := false
	if s.gw != nil {
		// Leave the file with the writer idle: the pointer and Status
		// move in order from here to the store of the file opened. A
		// failed write stays pending (counted and logged by the writer);
		// the next store retries it before anything else.
		unwritten = s.gw.flush() != nil
	}
	reason := s.reopenReason
	c := s.leaving(reason)
	if s.pf != nil && !c.forceNew && (s.unprocessed() || unwritten) && s.startsNewEpoch(c) {
		// The file at the path would start a new epoch, stored at once,
		// while lines delivered from the file left are not committed: were
		// the source killed before they are applied, the pointer would
		// have passed them (a gap); killed after lines of the new epoch
		// are applied, the left file's lines, read again (an input
		// renamed away), would look new to a store. So the source leaves
		// the file only once its delivered lines are committed (under
		// GroupCommit, written); meanwhile Poll returns 0, behind, and
		// commits land as usual.
		s.retryCommit()
		if s.unprocessed() {
			s.setState(StateBehind, reason+": waiting for the lines read from the old file to be committed")
			return nil
		}
		if unwritten {
			s.setState(StateBehind, reason+": waiting for the pointer write of the lines read from the old file (it failed; every poll retries it)")
			return nil
		}
	}
	s.reopenReason = ""
	if reason == ReasonRenamedAway {
		s.log.Info("feed: finished the input renamed away while the source was stopped: opening the file at the path",
			"path", s.path, "renamed", s.renamed, "epoch", s.epoch, "position", s.fr.position())
		s.renamed = ""
	}
	s.mu.Lock()
	s.reopens[reason]++
	s.lastReopenReason = reason
	s.lastReopenAt = s.now()
	s.mu.Unlock()
	err := s.in.close()
	s.in = nil
	s.cont = c
	if err != nil {
		s.log.Warn("feed: closing the old input failed", "path", s.path, "err", err)
	}
	return s.open(false)
}

// unprocessed reports whether lines delivered from the epoch are not
// committed yet: not stored in the pointer, or, after a rewind below the
// pointer, not named by a Commit (a commit at or below the pointer is not
// stored, but it says the lines up to it are processed).
func (s *FileSource) unprocessed() bool {
	return s.lastDelivered > s.committed || s.lastDelivered > s.acked
}

// startsNewEpoch reports whether the file at the path, compared with the
// file left (c), would be read under a new epoch: another file, or none,
// or one that cannot be read. It opens and reads the path's file, and
// closes it.
func (s *FileSource) startsNewEpoch(c *continuation) bool {
	if !c.ok {
		return true
	}
	f, fi, err := s.openInput(s.path)
	if err != nil {
		return true
	}
	defer f.Close()
	h := &inputFile{f: f, name: s.path}
	size := fi.Size()
	head, err := s.readHead(h, size)
	if err != nil {
		return true
	}
	return s.sameContent(h, size, head, c.end, c.fp, c.tailLen, c.tailHash) != ""
}

// leaving describes the open file as a reopen for reason leaves it.
func (s *FileSource) leaving(reason string) *continuation {
	c := &continuation{
		forceNew: reason == ReasonTruncated || reason == ReasonRewritten,
		pos:      s.fr.position(),
		resync:   s.fr.discard && s.fr.discardKind == skipResync,
		epoch:    s.epoch,
	}
	if !c.resync {
		c.drop = s.fr.pending()
	}
	if !c.forceNew {
		// Describe every byte read from the old file, an unterminated last
		// line included: the file at the path continues the epoch only if
		// it holds them all.
		c.end = s.fr.off
		c.tailLen = int(min(MaxTailLen, c.end))
		th, terr := s.in.tailHash(c.end, c.tailLen)
		head := s.head[:min(int64(len(s.head)), c.end)]
		n, herr := s.in.f.ReadAt(head, 0)
		c.fp = dedupe.Fingerprint{Len: n, Hash: HashBytes(head[:n])}
		c.tailHash = th
		c.ok = terr == nil && n == len(head) && (herr == nil || errors.Is(herr, io.EOF))
	}
	return c
}

// dropPartial reports the unterminated last line of the file a reopen left,
// when the file opened instead does not continue it.
func (s *FileSource) dropPartial(c *continuation) {
	if c.drop <= 0 {
		return
	}
	s.partialDropped++
	s.log.Warn("feed: dropped the unterminated last line of the old input: it was never delivered",
		"path", s.path, "epoch", c.epoch, "position", c.pos, "length", c.drop)
	s.rejectLine(Reject{Path: s.path, Epoch: c.epoch, Position: c.pos, Length: c.drop, Reason: RejectPartialDropped})
}

// decision is where and in which epoch an opened input is read.
type decision struct {
	start     int64
	resync    bool   // skip to the first line start after start
	newEpoch  bool   // start a new epoch (the previous one is prev)
	prev      uint64 // the largest epoch known
	committed int64  // the committed position when the epoch is kept
	store     bool   // store the pointer at start at once
	migrate   bool   // store the pointer when the resync completes
	// renamed, when set, is the file the pointer names, renamed away: it
	// is read instead of the file at the path, which is closed.
	renamed *renamedInput
}

// renamedInput is the input renamed away while the source was stopped,
// found in the folder by its identity.
type renamedInput struct {
	in   *inputFile
	size int64
	fp   dedupe.Fingerprint
}

// open opens the input at the path and decides where to read it. When the
// file does not exist the source waits: s.in stays nil.
func (s *FileSource) open(first bool) error {
	f, fi, err := s.openInput(s.path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			if first {
				s.missingAtStart = true
			}
			if !s.started && s.pf != nil && !s.renamedTried {
				// The path names no file at the start: the file the
				// pointer names may have been renamed away while the
				// source was stopped; finish it while waiting.
				d, err := s.decideMissing()
				if err != nil {
					return err
				}
				if d.renamed != nil {
					return s.begin(d.renamed.in, d.renamed.size, d.renamed.fp, d)
				}
			}
			if !s.waitWarned {
				s.waitWarned = true
				s.log.Warn("feed: input does not exist; waiting for it", "path", s.path)
			}
			s.setState(StateWaiting, "waiting for "+s.path)
			return nil
		}
		if errors.Is(err, ErrNotRegular) {
			return err
		}
		return fmt.Errorf("feed: open input %s: %w; check that it is a readable file", s.path, err)
	}
	s.waitWarned = false
	h := &inputFile{f: f, name: s.path}
	h.id, h.hasID = fileIdentity(fi)
	size := fi.Size()
	head, err := s.readHead(h, size)
	if err != nil {
		return errors.Join(err, f.Close())
	}
	fp := dedupe.Fingerprint{Len: len(head), Hash: HashBytes(head)}

	var d decision
	switch {
	case s.started:
		d, err = s.decideReopen(h, size, fp)
	case s.strat.Commits():
		d, err = s.decidePointer(h, size, fp)
	case s.strat == Latest && !s.missingAtStart:
		d.start = size
		if size > 0 {
			var b [1]byte
			if _, err = f.ReadAt(b[:], size-1); err == nil {
				d.resync = b[0] != '\n'
			}
		}
	}
	if err == nil && d.renamed != nil {
		// Finish the file renamed away first; the file at the path is
		// opened again once it is done.
		if cerr := f.Close(); cerr != nil {
			s.log.Warn("feed: closing the input failed", "path", s.path, "err", cerr)
		}
		h, size, fp = d.renamed.in, d.renamed.size, d.renamed.fp
	}
	if err != nil {
		return errors.Join(err, f.Close())
	}
	return s.begin(h, size, fp, d)
}

// begin makes h the open input, read from where d says.
func (s *FileSource) begin(h *inputFile, size int64, fp dedupe.Fingerprint, d decision) error {
	f := h.f
	first := !s.started
	if _, err := f.Seek(d.start, io.SeekStart); err != nil {
		return errors.Join(fmt.Errorf("feed: seek input %s to %d: %w", h.name, d.start, err), f.Close())
	}
	if d.renamed != nil {
		s.renamed = h.name
		s.reopenReason = ReasonRenamedAway
	}

	if c := s.cont; c != nil && d.newEpoch {
		s.dropPartial(c)
	}
	s.in = h
	s.started = true
	s.cont = nil
	s.size = size
	s.atEOF = false
	s.fr.reset(d.start, d.resync)
	s.fp = fp
	s.seenLen = 0
	if n := min(int64(MaxTailLen), d.start); n > 0 {
		// The bytes before the start, as they are now: a rewrite in place
		// from here on is recognised by them.
		if m, rerr := f.ReadAt(s.seen[:n], d.start-n); m == int(n) && (rerr == nil || errors.Is(rerr, io.EOF)) {
			s.seenLen = m
		}
	}
	s.setState(StateBehind, s.reopenReason)
	if !s.strat.Commits() {
		return nil
	}
	if d.newEpoch {
		s.epoch = NewEpoch(d.prev, s.now())
		s.committed = 0
		s.setWritten(0)
		s.storedFP = 0
		s.lastDelivered, s.asked, s.acked = 0, 0, 0
		s.idStale = false
	} else {
		s.committed = d.committed
		if first {
			s.setWritten(d.committed) // as loaded from the pointer file
		}
		// The epoch goes on in h: the pointer must name it before its
		// lines are handed out (see nameOpenFile). A pending legacy
		// migration stores its record, naming h, once the resync completes.
		s.idStale = h.hasID && h.id != s.storedID && !d.migrate
	}
	if d.newEpoch || s.origin == nil {
		if s.ef != nil {
			s.ef.set(nil)
		}
		s.ef = &epochFile{in: h}
		s.origin = &dedupe.Origin{Identity: h.id, Fingerprint: fp, TailHash: s.ef.tailHash}
	} else {
		// The same epoch on a copy of the file: one Origin per epoch,
		// reading the file the epoch is read from now.
		s.ef.set(h)
	}
	s.migrate = d.migrate
	if d.store {
		// Failures are counted and logged; the next commit retries.
		_ = s.store(d.start)
	}
	return nil
}

// openInput opens name for reading, and only when it is a regular file
// (symbolic links followed). It stats the path first, so that a FIFO or a
// device is never opened; it opens with O_NONBLOCK, so that a path that
// becomes a FIFO between the stat and the open does not block the open;
// and it checks the opened file again (fstat) before it returns it. The
// error of anything but a regular file wraps ErrNotRegular; that of a
// missing file wraps fs.ErrNotExist.
func (s *FileSource) openInput(name string) (vfs.File, fs.FileInfo, error) {
	if fi, err := s.fs.Stat(name); err == nil && !fi.Mode().IsRegular() {
		return nil, nil, notRegular(name, fi.Mode())
	}
	f, err := s.fs.OpenFile(name, os.O_RDONLY|openNonblock, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("feed: stat input %s: %w; the next poll retries", name, err), f.Close())
	}
	if !fi.Mode().IsRegular() {
		return nil, nil, errors.Join(notRegular(name, fi.Mode()), f.Close())
	}
	return f, fi, nil
}

// notRegular is the error of an input path that names mode, not a
// regular file.
func notRegular(path string, mode fs.FileMode) error {
	kind := "not a regular file"
	switch {
	case mode&fs.ModeNamedPipe != 0:
		kind = "a FIFO (named pipe)"
	case mode&fs.ModeSocket != 0:
		kind = "a socket"
	case mode&fs.ModeCharDevice != 0:
		kind = "a character device"
	case mode&fs.ModeDevice != 0:
		kind = "a block device"
	case mode.IsDir():
		kind = "a directory"
	}
	return fmt.Errorf("%w: %s is %s (mode %v): a file feed reads a regular file that it can read again after a restart; point the feed at the file itself (a symbolic link to a regular file is fine), and write a stream to a file first",
		ErrNotRegular, path, kind, mode)
}

// readHead reads the first min(4096, size) bytes of the input into s.head.
func (s *FileSource) readHead(h *inputFile, size int64) ([]byte, error) {
	b := s.head[:min(int64(len(s.head)), size)]
	n, err := h.f.ReadAt(b, 0)
	if err != nil && !(errors.Is(err, io.EOF) && n < len(b)) {
		return nil, fmt.Errorf("feed: read the first %d bytes of input %s: %w; the next poll retries", len(b), s.path, err)
	}
	return b[:n], nil
}

// sameContent compares the file with what is known of the file read before
// (the pointer, or the file left by a reopen). It returns "" when the file
// may be read on at pos, else why not.
func (s *FileSource) sameContent(h *inputFile, size int64, head []byte, pos int64, fp dedupe.Fingerprint, tailLen int, tailHash uint64) string {
	switch {
	case size < pos:
		return fmt.Sprintf("the input (%d bytes) is shorter than the position %d: truncated", size, pos)
	case size < int64(fp.Len):
		return fmt.Sprintf("the input (%d bytes) is shorter than its fingerprinted first %d bytes: truncated", size, fp.Len)
	case HashBytes(head[:fp.Len]) != fp.Hash:
		return fmt.Sprintf("the first %d bytes of the input differ: replaced or rewritten", fp.Len)
	}
	if tailLen > 0 {
		got, err := h.tailHash(pos, tailLen)
		if err != nil {
			return fmt.Sprintf("the %d bytes before position %d cannot be read: %v", tailLen, pos, err)
		}
		if got != tailHash {
			return fmt.Sprintf("the %d bytes before position %d differ: replaced or rewritten", tailLen, pos)
		}
	}
	return ""
}

// decidePointer is the open-time decision of Committed at the first open.
func (s *FileSource) decidePointer(h *inputFile, size int64, fp dedupe.Fingerprint) (decision, error) {
	res, err := s.pf.Load()
	if err != nil {
		return decision{}, err
	}
	pfPath := s.pf.Path()
	fresh := decision{newEpoch: true, store: true}
	switch {
	case res.Missing, res.Empty && s.madePointer:
		// (Made empty by this source's lock: it was missing.)
		s.log.Info("feed: no pointer file: reading the input from 0 under a new epoch", "path", s.path, "pointer", pfPath)
		return fresh, nil
	case res.Empty:
		// Made empty to be locked, by this source or one stopped before
		// its first write: no record, no damage.
		s.log.Info("feed: the pointer file holds no record yet: reading the input from 0 under a new epoch", "path", s.path, "pointer", pfPath)
		return fresh, nil
	case res.Legacy:
		count := res.Pointer.Position
		if count > size {
			s.log.Warn("feed: legacy pointer is past the end of the input (truncated): reading from 0 under a new epoch",
				"path", s.path, "pointer", pfPath, "count", count, "size", size)
			return fresh, nil
		}
		d := decision{start: count, newEpoch: true}
		var b [1]byte
		if count > 0 {
			if _, err := h.f.ReadAt(b[:], count-1); err != nil {
				return decision{}, fmt.Errorf("feed: read input %s at %d to migrate legacy pointer %s: %w", s.path, count-1, pfPath, err)
			}
		}
		if count > 0 && b[0] != '\n' {
			d.resync, d.migrate = true, true
		} else {
			d.store = true
		}
		s.log.Info("feed: migrating legacy pointer file: its count is taken as a byte offset, resumed at the next line start, and stored at once under a new epoch",
			"path", s.path, "pointer", pfPath, "count", count, "mid_line", d.resync)
		if err := s.applyFloor(&d, 0, count, h, size); err != nil {
			return decision{}, err
		}
		return d, nil
	case !res.Found:
		s.log.Warn("feed: pointer file holds no valid record: reading the input from 0 under a new epoch",
			"path", s.path, "pointer", pfPath, "reason", res.Reason)
		return fresh, nil
	}
	p := res.Pointer
	fresh.prev = p.Epoch
	if why := s.sameContent(h, size, s.head[:fp.Len], p.Position, p.Fingerprint, p.TailLen, p.TailHash); why != "" {
		if h.hasID && p.Identity != (dedupe.Identity{}) && p.Identity != h.id {
			// The path names another file: the one the pointer names may
			// have been renamed away while the source was stopped, with
			// lines after the pointer.
			r, err := s.findRenamed(p)
			if err != nil {
				return decision{}, err
			}
			if r != nil {
				d := decision{start: p.Position, committed: p.Position, renamed: r}
				if err := s.applyFloor(&d, p.Epoch, p.Position, r.in, r.size); err != nil {
					return decision{}, errors.Join(err, r.in.close())
				}
				if r.size > d.start {
					s.log.Warn("feed: the input was renamed away while the source was stopped, with bytes after the start: finishing it in the pointer's epoch, then reading the file at the path",
						"path", s.path, "renamed", r.in.name, "pointer", pfPath, "epoch", p.Epoch, "position", p.Position, "start", d.start, "size", r.size, "reason", why)
					s.epoch = p.Epoch
					s.storedFP = p.Fingerprint.Len
					s.storedID = p.Identity
					return d, nil
				}
				s.log.Info("feed: the input renamed away while the source was stopped was read to its end",
					"path", s.path, "renamed", r.in.name, "epoch", p.Epoch, "position", p.Position)
				if cerr := r.in.close(); cerr != nil {
					s.log.Warn("feed: closing the renamed input failed", "path", r.in.name, "err", cerr)
				}
			}
		}
		s.log.Warn("feed: the input does not match its pointer: reading from 0 under a new epoch",
			"path", s.path, "pointer", pfPath, "epoch", p.Epoch, "position", p.Position, "reason", why)
		return fresh, nil
	}
	if h.hasID && p.Identity != (dedupe.Identity{}) && p.Identity != h.id {
		s.log.Warn("feed: the input is another file (identity changed) with the same leading bytes and not shorter: position and epoch kept",
			"path", s.path, "pointer", pfPath, "epoch", p.Epoch, "position", p.Position,
			"old_dev", p.Identity.Dev, "old_ino", p.Identity.Ino, "dev", h.id.Dev, "ino", h.id.Ino)
	}
	d := decision{start: p.Position, committed: p.Position}
	if err := s.applyFloor(&d, p.Epoch, p.Position, h, size); err != nil {
		return decision{}, err
	}
	s.epoch = p.Epoch
	s.storedFP = p.Fingerprint.Len
	s.storedID = p.Identity
	return d, nil
}

// applyFloor lowers d's start to the floor of the resume points (see
// ResumeFrom) when it is below it. epoch and position are the pointer's
// (epoch 0 for a legacy pointer, which has none); h, of size bytes, is the
// file d reads. A point of the pointer's epoch covers its position; one of
// another epoch covers its position only when h holds the bytes it was
// applied from; a point without a record covers nothing. The start never
// rises: a store ahead of the pointer leaves it where it is. Each lowered
// start is logged once, at WARN, and counted in Status.
func (s *FileSource) applyFloor(d *decision, epoch uint64, position int64, h *inputFile, size int64) error {
	if len(s.resume) == 0 {
		return nil
	}
	start, at, reason := d.start, -1, ""
	for i, pt := range s.resume {
		if pt.Found && pt.Lineage.Position >= start {
			continue // it cannot lower the start: nothing to check
		}
		c, why, err := s.covers(pt, epoch, h, size)
		if err != nil {
			return err
		}
		if c < start {
			start, at, reason = c, i, why
		}
	}
	if at < 0 {
		return nil
	}
	pt := s.resume[at]
	d.start, d.resync = start, false
	if d.newEpoch {
		// A legacy migration: the new epoch is stored at once at the
		// floor, a line start, rather than at the count's next line start.
		d.migrate, d.store = false, true
	}
	store := "no record"
	if pt.Found {
		store = fmt.Sprintf("epoch %d, position %d", pt.Lineage.Epoch, pt.Lineage.Position)
	}
	s.rewinds++
	s.lastRewind = fmt.Sprintf("%s (%s): %s; started at %d, the pointer is at %d (epoch %d)",
		pt.Holder, store, reason, start, position, epoch)
	s.log.Warn("feed: a store is behind the pointer: reading from where the store is, not from the pointer (the store is the truth; the pointer is not moved back)",
		"path", s.path, "pointer", s.pf.Path(), "epoch", epoch, "pointer_position", position,
		"holder", pt.Holder, "store_found", pt.Found, "store_epoch", pt.Lineage.Epoch, "store_position", pt.Lineage.Position,
		"start", start, "reason", reason)
	return nil
}

// covers returns the position up to which pt says the lines of h are
// applied, and why; see applyFloor. An error means h cannot be read.
func (s *FileSource) covers(pt ResumePoint, epoch uint64, h *inputFile, size int64) (int64, string, error) {
	l := pt.Lineage
	switch {
	case !pt.Found:
		return 0, "the store has no record of the feed: reading the input from its start", nil
	case l.Position <= 0:
		return 0, "the store has applied nothing of the input: reading it from its start", nil
	case epoch != 0 && l.Epoch == epoch:
		if l.Position > size {
			return 0, fmt.Sprintf("the store's position %d in the pointer's epoch is past the end of the input (%d bytes): reading it from its start", l.Position, size), nil
		}
		var b [1]byte
		if _, err := h.f.ReadAt(b[:], l.Position-1); err != nil {
			return 0, "", fmt.Errorf("feed: read input %s at %d, the position of %s: %w; the next poll retries", h.name, l.Position-1, pt.Holder, err)
		}
		if b[0] != '\n' {
			return 0, fmt.Sprintf("the store's position %d in the pointer's epoch is not a line start of the input: reading it from its start", l.Position), nil
		}
		return l.Position, "the store is behind the pointer in the pointer's epoch", nil
	}
	why, err := lineageDiffers(h, size, l)
	if err != nil {
		return 0, "", fmt.Errorf("feed: check the lineage of %s against input %s: %w; the next poll retries", pt.Holder, h.name, err)
	}
	if why != "" {
		return 0, fmt.Sprintf("the store's record is of epoch %d, and the input does not hold the bytes it was applied from (%s): reading it from its start", l.Epoch, why), nil
	}
	return l.Position, fmt.Sprintf("the store's record is of epoch %d, and the input holds the bytes it was applied from (its lineage)", l.Epoch), nil
}

// lineageDiffers returns why h, of size bytes, does not hold the bytes l was
// applied from ("" when it does): its first l.Fingerprint.Len bytes and the
// l.TailLen bytes before l.Position, which end a line. A record without a
// tail hash never matches.
func lineageDiffers(h *inputFile, size int64, l dedupe.Lineage) (string, error) {
	switch {
	case size < l.Position:
		return fmt.Sprintf("the input (%d bytes) is shorter than the position %d", size, l.Position), nil
	case size < int64(l.Fingerprint.Len):
		return fmt.Sprintf("the input (%d bytes) is shorter than the %d bytes fingerprinted", size, l.Fingerprint.Len), nil
	case l.TailLen <= 0 || int64(l.TailLen) > l.Position || l.TailLen > MaxTailLen || l.Fingerprint.Len < 0 || l.Fingerprint.Len > MaxFingerprintLen:
		return fmt.Sprintf("the record has no usable tail hash (tail %d bytes, fingerprint %d bytes)", l.TailLen, l.Fingerprint.Len), nil
	}
	head := make([]byte, l.Fingerprint.Len)
	if _, err := h.f.ReadAt(head, 0); err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	if HashBytes(head) != l.Fingerprint.Hash {
		return fmt.Sprintf("the first %d bytes differ", l.Fingerprint.Len), nil
	}
	tail := make([]byte, l.TailLen)
	if _, err := h.f.ReadAt(tail, l.Position-int64(l.TailLen)); err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	if HashBytes(tail) != l.TailHash {
		return fmt.Sprintf("the %d bytes before position %d differ", l.TailLen, l.Position), nil
	}
	if tail[len(tail)-1] != '\n' {
		return fmt.Sprintf("position %d is not a line start", l.Position), nil
	}
	return "", nil
}

// decideMissing is the decision at the start when the path names no file:
// it finds the file the pointer names renamed away, once per start.
func (s *FileSource) decideMissing() (decision, error) {
	res, err := s.pf.Load()
	if err != nil {
		return decision{}, err
	}
	s.renamedTried = true
	p := res.Pointer
	if !res.Found || res.Legacy || p.Identity == (dedupe.Identity{}) {
		return decision{}, nil
	}
	r, err := s.findRenamed(p)
	if err != nil || r == nil {
		s.renamedTried = err == nil
		return decision{}, err
	}
	d := decision{start: p.Position, committed: p.Position, renamed: r}
	if err := s.applyFloor(&d, p.Epoch, p.Position, r.in, r.size); err != nil {
		return decision{}, errors.Join(err, r.in.close())
	}
	if r.size <= d.start {
		// Read to its end: the file that appears at the path is compared
		// with the pointer as usual.
		return decision{}, r.in.close()
	}
	s.log.Warn("feed: the input was renamed away while the source was stopped, with bytes after the start, and the path names no file: finishing it in the pointer's epoch, then waiting for the file at the path",
		"path", s.path, "renamed", r.in.name, "pointer", s.pf.Path(), "epoch", p.Epoch, "position", p.Position, "start", d.start, "size", r.size)
	s.epoch = p.Epoch
	s.storedFP = p.Fingerprint.Len
	s.storedID = p.Identity
	return d, nil
}

// findRenamed looks in the input's folder for the file the pointer names
// (by its identity), renamed away while the source was stopped, and opens
// it when its content matches the pointer (leading bytes, length, bytes
// before the position). It stats every entry of the folder, reads only the
// candidate, and scans no folder of more than maxRenamedScan entries. It
// returns nil when there is no such file, and an error when the candidate
// cannot be read (the next Poll tries again).
func (s *FileSource) findRenamed(p Pointer) (*renamedInput, error) {
	dir := filepath.Dir(s.path)
	names, err := s.listDir(dir)
	switch {
	case err != nil:
		s.log.Warn("feed: cannot list the input's folder to look for the input renamed away: its unread lines, if any, are not read",
			"path", s.path, "folder", dir, "err", err)
		return nil, nil
	case len(names) > s.maxScan:
		s.log.Warn("feed: the input's folder has too many entries to look for the input renamed away: its unread lines, if any, are not read",
			"path", s.path, "folder", dir, "max_entries", s.maxScan)
		return nil, nil
	}
	base := filepath.Base(s.path)
	for _, name := range names {
		if name == base || strings.HasPrefix(name, base+PointerSuffix) {
			continue
		}
		full := filepath.Join(dir, name)
		fi, err := s.fs.Stat(full)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if id, ok := fileIdentity(fi); !ok || id != p.Identity {
			continue
		}
		r, why, err := s.openRenamed(full, p)
		if err != nil {
			return nil, err
		}
		if r == nil {
			s.log.Warn("feed: a file in the input's folder has the identity the pointer names, but not its content (the inode was reused?): not read",
				"path", s.path, "file", full, "epoch", p.Epoch, "position", p.Position, "reason", why)
			return nil, nil
		}
		return r, nil
	}
	s.log.Info("feed: no file in the input's folder has the identity the pointer names: it was deleted, or moved out of the folder",
		"path", s.path, "folder", dir, "dev", p.Identity.Dev, "ino", p.Identity.Ino)
	return nil, nil
}

// openRenamed opens name and checks that it is the file p names, with the
// content p describes. It returns nil and why not otherwise, and an error
// when the file cannot be opened or read.
func (s *FileSource) openRenamed(name string, p Pointer) (*renamedInput, string, error) {
	f, fi, err := s.openInput(name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrNotRegular) {
			return nil, "renamed again while being opened", nil
		}
		return nil, "", fmt.Errorf("feed: open %s, the input %s renamed away: %w; the next poll retries", name, s.path, err)
	}
	h := &inputFile{f: f, name: name}
	h.id, h.hasID = fileIdentity(fi)
	if !h.hasID || h.id != p.Identity {
		return nil, "renamed again while being opened", f.Close()
	}
	size := fi.Size()
	head, err := s.readHead(h, size)
	if err != nil {
		return nil, "", errors.Join(fmt.Errorf("feed: the input %s renamed away to %s: %w", s.path, name, err), f.Close())
	}
	fp := dedupe.Fingerprint{Len: len(head), Hash: HashBytes(head)}
	if why := s.sameContent(h, size, head, p.Position, p.Fingerprint, p.TailLen, p.TailHash); why != "" {
		return nil, why, f.Close()
	}
	return &renamedInput{in: h, size: size, fp: fp}, "", nil
}

// listDir returns the names in dir, at most s.maxScan+1 of them. It
// needs a file system whose opened folders list their names (the operating
// system's does).
func (s *FileSource) listDir(dir string) ([]string, error) {
	d, err := s.fs.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	l, ok := d.(interface {
		Readdirnames(n int) ([]string, error)
	})
	if !ok {
		// A wrapper of the operating system's file system (a fault
		// injector) whose files do not list: take the names from the
		// operating system; every stat and open still goes through s.fs.
		od, err := os.Open(dir)
		if err != nil {
			return nil, fmt.Errorf("the file system cannot list folders, nor the operating system this one: %w", err)
		}
		defer od.Close()
		l = od
	}
	names, err := l.Readdirnames(s.maxScan + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return names, nil
}

// decideReopen is the decision for the file found at the path after a
// rotation or truncation: it is read on in the same epoch only when it holds
// the same bytes as the file left (a copy renamed over the path).
func (s *FileSource) decideReopen(h *inputFile, size int64, fp dedupe.Fingerprint) (decision, error) {
	fresh := decision{newEpoch: true, prev: s.epoch, store: true}
	c := s.cont
	if c == nil || c.forceNew || !c.ok {
		s.log.Warn("feed: reading the input at the path from 0 under a new epoch", "path", s.path, "previous_epoch", s.epoch)
		return fresh, nil
	}
	if why := s.sameContent(h, size, s.head[:fp.Len], c.end, c.fp, c.tailLen, c.tailHash); why != "" {
		s.log.Warn("feed: the file at the path is a new file: reading it from 0 under a new epoch",
			"path", s.path, "previous_epoch", s.epoch, "reason", why)
		return fresh, nil
	}
	s.log.Warn("feed: the file at the path is another file with the same bytes up to the position read: reading on under the same epoch",
		"path", s.path, "epoch", s.epoch, "position", c.pos)
	return decision{start: c.pos, resync: c.resync, committed: s.committed, migrate: s.migrate}, nil
}

// onSkip is the framer's report of skipped bytes.
func (s *FileSource) onSkip(kind skipKind, start, end int64) {
	switch kind {
	case skipOversize:
		s.oversize++
		s.log.Warn("feed: skipped a line longer than the maximum",
			"path", s.path, "epoch", s.epoch, "position", start, "end", end, "length", end-start, "max", s.fr.max)
		s.rejectLine(Reject{Path: s.path, Epoch: s.epoch, Position: start, End: end, Length: end - start, Reason: RejectOversize})
	case skipResync:
		if s.migrate {
			s.migrate = false
			_ = s.store(end)
		}
	}
}

func (s *FileSource) rejectLine(r Reject) {
	if s.reject != nil {
		s.reject(r)
	}
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
	if s.closed {
		return ErrClosed
	}
	if s.pf != nil && s.in != nil && epoch == s.epoch {
		if read := s.fr.position(); position > read {
			return fmt.Errorf("%w: position %d of epoch %d of input %s, read only to %d; commit only positions of delivered lines",
				ErrCommitAhead, position, epoch, s.path, read)
		}
		s.acked = max(s.acked, position)
	}
	if s.pf == nil || s.in == nil || epoch != s.epoch || position <= s.committed {
		// After a rewind below the pointer, the commits up to the pointer
		// land here: the pointer does not move back.
		if s.gw != nil {
			return s.gw.retry()
		}
		return nil
	}
	s.asked = position
	return s.store(position)
}

// Flush waits until every commit handed to the GroupCommit writer is
// written (and synced, per the sync policy). When the last write failed it
// tries once more, and returns that write's error, naming the input, the
// epoch and the position: the record stays pending, and the next Commit,
// Flush or Close retries it. Without GroupCommit it returns nil at once:
// Commit has written already. It returns ErrClosed after Close.
func (s *FileSource) Flush() error {
	if s.closed && s.group {
		return ErrClosed
	}
	if s.gw == nil {
		return nil
	}
	return s.gw.flush()
}

// store writes the pointer of the current epoch at position; under
// GroupCommit a record that only moves the position is handed to the
// writer instead.
func (s *FileSource) store(position int64) error {
	p := Pointer{Epoch: s.epoch, Position: position, Identity: s.in.id, Fingerprint: s.fp}
	fromFile := false // bytes were read back from the file for this pointer
	if s.fp.Len < MaxFingerprintLen {
		// The file was short when fingerprinted: cover more of it now.
		if known := max(s.size, s.fr.off); known > int64(s.fp.Len) {
			b := s.head[:min(int64(len(s.head)), known)]
			if n, err := s.in.f.ReadAt(b, 0); n == len(b) && (err == nil || errors.Is(err, io.EOF)) {
				p.Fingerprint = dedupe.Fingerprint{Len: n, Hash: HashBytes(b)}
				fromFile = true
			}
		}
	}
	if n := int(min(MaxTailLen, position)); n > 0 {
		if b, ok := s.readBytes(position-int64(n), n); ok {
			// The bytes as they were read: no read, and no rewrite since
			// can slip into the tail hash.
			p.TailLen, p.TailHash = n, HashBytes(b)
		} else {
			b := s.tail[:n]
			if m, err := s.in.f.ReadAt(b, position-int64(n)); m == n && (err == nil || errors.Is(err, io.EOF)) {
				p.TailLen, p.TailHash = n, HashBytes(b)
				fromFile = true
			}
			// Else the file shrank under us: store no tail; the truncation
			// is noticed at the end of the file.
		}
	}
	if fromFile {
		// What was read back must be what was delivered: the bytes just
		// before the offset read are checked after those reads, so that a
		// file rewritten in place since it was read never lends its new
		// bytes to the pointer.
		same, err := s.unchanged()
		if err != nil {
			s.commitFailed(err)
			s.publish()
			return fmt.Errorf("feed: commit position %d of epoch %d of input %s: %w", position, s.epoch, s.path, err)
		}
		if !same {
			s.log.Warn("feed: the input was rewritten in place since it was read: the pointer is not moved, and the input is read again from 0 under a new epoch",
				"path", s.path, "epoch", s.epoch, "position", position, "committed", s.committed)
			if s.reopenReason == "" {
				s.startReopen(ReasonRewritten)
			}
			s.publish()
			return nil
		}
	}
	if s.group && s.haveRec && !s.idStale && position >= s.lastRec.Position && p.Epoch == s.lastRec.Epoch &&
		p.Identity == s.lastRec.Identity && p.Fingerprint == s.lastRec.Fingerprint {
		// Only the position moves: the writer writes it.
		if s.gw == nil {
			s.gw = newGroupWriter(s.pf, s.path, s.wroteInBackground, s.failedInBackground)
		}
		s.lastRec = p
		s.committed = position
		err := s.gw.hand(p)
		s.publish()
		return err
	}
	if s.gw != nil {
		// Anything else is stored in order after the pending write.
		if err := s.gw.flush(); err != nil {
			s.publish()
			return fmt.Errorf("feed: store the pointer of input %s at position %d of epoch %d: the pointer write before it failed and is retried first: %w",
				s.path, position, s.epoch, err)
		}
	}
	s.fp = p.Fingerprint
	if err := s.pf.Store(p); err != nil {
		s.commitFailed(err)
		s.log.Warn("feed: pointer write failed; the next commit retries",
			"path", s.path, "pointer", s.pf.Path(), "epoch", s.epoch, "position", position, "err", err)
		s.publish()
		return fmt.Errorf("feed: commit position %d of epoch %d of input %s: %w", position, s.epoch, s.path, err)
	}
	s.lastRec, s.haveRec = p, true
	s.committed = position
	s.storedFP = p.Fingerprint.Len
	s.storedID, s.idStale = p.Identity, false
	s.wroteAt(position)
	s.publish()
	return nil
}

// commitFailed counts a failed pointer write or sync in Status.
func (s *FileSource) commitFailed(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.commitErrors++
	s.lastCommitErr = err.Error()
	s.st.CommitErrors, s.st.LastCommitError = s.commitErrors, s.lastCommitErr
}

// wroteAt records a pointer write at position that succeeded.
func (s *FileSource) wroteAt(position int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.written = position
	s.lastCommitErr = ""
	s.st.CommittedPosition, s.st.LastCommitError = position, ""
}

// setWritten records position as the position in the pointer file for a
// new epoch (0), or as loaded at the start.
func (s *FileSource) setWritten(position int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.written = position
	s.st.CommittedPosition = position
}

// commitFailing reports whether the last pointer write failed.
func (s *FileSource) commitFailing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastCommitErr != ""
}

// wroteInBackground is the GroupCommit writer's report of a record written.
func (s *FileSource) wroteInBackground(p Pointer) { s.wroteAt(p.Position) }

// failedInBackground is the GroupCommit writer's report of a failed write:
// counted and logged (the next Commit returns it).
func (s *FileSource) failedInBackground(p Pointer, err error) {
	s.commitFailed(err)
	s.log.Warn("feed: pointer write failed; the next commit retries",
		"path", s.path, "pointer", s.pf.Path(), "epoch", p.Epoch, "position", p.Position, "err", err, "group_commit", true)
}

// Close waits for the GroupCommit writer's pending write (see Flush) and
// stops it, then closes the input and the pointer file (making a pending
// pointer write durable). It does not commit. Closing twice returns nil.
func (s *FileSource) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	var err error
	if s.gw != nil {
		if ferr := s.gw.flush(); ferr != nil {
			err = fmt.Errorf("feed: close input %s: the last commits are not in the pointer file, their lines will be delivered again: %w", s.path, ferr)
		}
		s.gw.close()
	}
	if s.in != nil {
		if cerr := s.in.close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("feed: close input %s: %w", s.path, cerr))
		}
		s.in = nil
	}
	if s.pf != nil {
		err = errors.Join(err, s.pf.Close())
	}
	s.setState(StateStopped, "")
	s.publish()
	return err
}

func (s *FileSource) setState(st State, detail string) {
	s.state, s.detail = st, detail
}

// publish copies the source's facts for Status.
func (s *FileSource) publish() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st = Status{
		Path:              s.path,
		Strategy:          s.strat,
		State:             s.state,
		Detail:            s.detail,
		Epoch:             s.epoch,
		ReadPosition:      s.fr.position(),
		CommittedPosition: s.written,
		AskedPosition:     max(s.asked, s.committed),
		FileSize:          max(s.size, s.fr.off),
		LinesRead:         s.lines,
		BytesRead:         s.bytes,
		OversizeSkipped:   s.oversize,
		PartialPending:    s.state == StateCaughtUp && s.fr.pending() > 0,
		PartialDropped:    s.partialDropped,
		LastReopenReason:  s.lastReopenReason,
		LastReopenAt:      s.lastReopenAt,
		CommitErrors:      s.commitErrors,
		LastCommitError:   s.lastCommitErr,
		Rewinds:           s.rewinds,
		LastRewind:        s.lastRewind,
	}
}

// Status returns the source's facts as of the end of the last Poll, Commit
// or Close, and under GroupCommit of the writer's last write. It is safe to
// call from any goroutine.
func (s *FileSource) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	st.Reopens = maps.Clone(s.reopens)
	return st
}

// groupCommitAll makes every Committed source use GroupCommit; tests set
// it to run suites written for Commit's synchronous writes with it on.
var groupCommitAll = false

// groupWriter is the GroupCommit writer: a goroutine that writes the
// records the source hands it, one write (and sync, per the policy) at a
// time. A record handed during a write replaces the one handed before it:
// only the newest is written next. A failed write stays pending and is
// retried when asked (the next record handed, retry, flush), never on its
// own.
type groupWriter struct {
	pf     *PointerFile
	input  string // the input's path, for errors
	wrote  func(Pointer)
	failed func(Pointer, error)

	mu   sync.Mutex
	cond sync.Cond
	next Pointer // the newest record handed and not written yet
	has  bool    // next is set
	gen  uint64  // counts the records handed
	wake bool    // a write of next is asked for
	busy bool    // a write is in progress
	err  error   // the last write's error; nil once one succeeds
	stop bool
	// flushing counts the flushes waiting (tests look at it).
	flushing int
	done     chan struct{}
}

// newGroupWriter starts a writer of pf's records.
func newGroupWriter(pf *PointerFile, input string, wrote func(Pointer), failed func(Pointer, error)) *groupWriter {
	w := &groupWriter{pf: pf, input: input, wrote: wrote, failed: failed, done: make(chan struct{})}
	w.cond.L = &w.mu
	go w.run()
	return w
}

func (w *groupWriter) run() {
	defer close(w.done)
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		for !w.wake && !w.stop {
			w.cond.Wait()
		}
		if !w.wake {
			return
		}
		w.wake = false
		if !w.has {
			w.cond.Broadcast()
			continue
		}
		p, gen := w.next, w.gen
		w.busy = true
		w.mu.Unlock()
		err := w.pf.Store(p)
		w.mu.Lock()
		w.err = nil
		if err != nil {
			w.err = fmt.Errorf("feed: commit position %d of epoch %d of input %s (written by the group commit writer): %w",
				p.Position, p.Epoch, w.input, err)
		}
		w.mu.Unlock()
		// Reported after the error is set (a Commit that follows a
		// success in Status returns nil) and while still busy (a flush
		// returns after the report).
		if err != nil {
			w.failed(p, err)
		} else {
			w.wrote(p)
		}
		w.mu.Lock()
		w.busy = false
		if err == nil && w.gen == gen {
			w.has = false
		}
		w.cond.Broadcast()
	}
}

// hand makes p the next record to write, and returns the error of the last
// write when it failed.
func (w *groupWriter) hand(p Pointer) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.next, w.has, w.wake = p, true, true
	w.gen++
	w.cond.Broadcast()
	return w.err
}

// retry asks for a failed pending record to be written again, and returns
// the error of the last write when it failed.
func (w *groupWriter) retry() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil && w.has && !w.busy && !w.stop {
		w.wake = true
		w.cond.Broadcast()
	}
	return w.err
}

// idle waits until the writer has no write in progress or asked for.
func (w *groupWriter) idle() {
	w.flushing++
	for w.busy || w.wake {
		w.cond.Wait()
	}
	w.flushing--
}

// waiting reports whether a flush waits for the writer.
func (w *groupWriter) waiting() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.flushing > 0
}

// flush waits until the records handed are written. A record still pending
// after that (its write failed) is tried once more; flush returns that
// write's error.
func (w *groupWriter) flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.idle()
	if !w.has {
		return nil
	}
	if !w.stop {
		w.wake = true
		w.cond.Broadcast()
		w.idle()
	}
	if w.has {
		return w.err
	}
	return nil
}

// close stops the writer and waits for its goroutine to end.
func (w *groupWriter) close() {
	w.mu.Lock()
	w.stop = true
	w.cond.Broadcast()
	w.mu.Unlock()
	<-w.done
}
