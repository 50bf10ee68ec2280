package feed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/feed/pointer"
	"github.com/tidemark-go/tidemark/vfs"
)

// stream is one input path followed through appends, rotation and
// truncation, with its pointer record: the whole of a single-file feed,
// and one file of a file set. Its jobs live in their own files:
//
//   - reader.go: the open file and its framing (the reader, embedded);
//   - decide.go: the open-time decision that ties the file at the path to
//     the pointer record (the table of the package documentation);
//   - floor.go: the start lowered to the stores' floor (ResumeFrom);
//   - tail.go: the checks at the end of the file, and the reopen;
//   - renamed.go: the search for the input renamed away while stopped;
//   - commit.go: the pointer record stored (Commit), and what it covers;
//   - groupcommit.go: the writer goroutine of Config.GroupCommit.
//
// Invariants, kept by every path through it:
//
//   - the record stored for the epoch never passes a line not delivered
//     (Commit refuses positions beyond what was read), and within an
//     epoch it only moves forward;
//   - no line is handed out while the record names another file than the
//     one it is read from (idStale);
//   - in the first 4096 bytes of an epoch, the record is stored again
//     with a longer fingerprint before lines beyond the prefix it covers
//     are handed out (a failed store is counted and logged, and the lines
//     go out: the record then only lags);
//   - the stream leaves a file for a new epoch only once the lines it
//     delivered from it are committed (and, under GroupCommit, written);
//   - a new epoch is stored before any of its lines is handed out.
//
// A stream is used by one goroutine at a time; status may be called from
// any goroutine (mu guards what it reads).
type stream struct {
	reader // the open input and its framing

	path   string
	strat  ReadStrategy
	fs     vfs.FS
	log    *slog.Logger
	now    func() time.Time
	reject func(Reject)
	pf     recordStore // nil unless Committed
	// madePointer: the pointer file was missing, and its lock made it.
	madePointer bool
	sync        SyncPolicy
	group       bool          // Config.GroupCommit, Committed only
	gw          pointerWriter // GroupCommit's writer; nil until the first record handed to it
	// setw is the GroupCommit writer of the file set the stream is a file
	// of (its records go to the set's registry); nil for a feed of one
	// file, whose stream has a writer of its own.
	setw *setWriter
	// lastRec is the last pointer record stored, or handed to the writer;
	// a record that differs from it by its position only goes to the
	// writer (GroupCommit).
	lastRec pointer.Record
	haveRec bool

	epoch    uint64
	origin   *tidemark.Origin     // shared by the items of the epoch in this run
	ef       *epochFile           // the file the origin's TailHash reads
	fp       tidemark.Fingerprint // of the epoch's file, refreshed while < 4096 bytes
	storedFP int                  // Fingerprint.Len in the pointer file for epoch
	// committed is the position stored in the pointer file for epoch, or
	// under GroupCommit handed to the writer (written once it is idle).
	committed int64
	// storedID is the identity in the pointer record last stored (or
	// loaded) for the epoch; idStale is set while the epoch is read on from
	// a file of another identity (a copy renamed over the path) and the
	// pointer still names the old one, freed by the rename (D5): no line of
	// the file is handed out until the pointer names it.
	storedID tidemark.Identity
	idStale  bool
	seq      uint64

	polled         bool // Poll was called before
	started        bool // the input was opened once
	missingAtStart bool // the input did not exist at the first Poll
	waitWarned     bool
	migrate        bool   // a legacy pointer's migration is stored once the resync completes
	reopenReason   string // a reopen is due at the next end of the open file
	cont           *continuation
	done, closed   bool

	lines, bytes, oversize, partialDropped uint64
	state                                  State
	detail                                 string

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
	// rotated is the pattern of the input's rotated files ("" when not
	// configured), relative patterns joined to the input's folder; wait is
	// the effective RotateWait.
	rotated string
	wait    time.Duration
	// file is Item.File of the stream's lines: "" for a feed of one file,
	// the file's path in a file set.
	file string
	// leaveCheck, in a file set, is asked before the stream leaves a
	// file whose path names another file now (a rename): the file may
	// have been renamed to another name of the set, which then reads it
	// on (see fileSet.follow). retiring: the set said the path's file is
	// another file of the set; the stream reads its open file to its
	// end, and opens nothing else.
	leaveCheck func() leaveVerdict
	retiring   bool

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

// newStream returns the stream of cfg.Path: cfg is valid. Committed only:
// it takes the pointer file's lock (see NewFileSource); a file of a set
// passes its registry entry as store instead (file names it in its items).
func newStream(cfg Config, store recordStore, file string) (*stream, error) {
	s := &stream{
		path:    cfg.Path,
		strat:   cfg.Strategy,
		fs:      cfg.FS,
		log:     cfg.Logger,
		now:     cfg.Now,
		reject:  cfg.OnReject,
		reopens: map[string]uint64{},
		maxScan: maxRenamedScan,
		sync:    cfg.Sync,
		rotated: rotatedPattern(cfg.Path, cfg.Rotated),
		wait:    cfg.rotateWait(),
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
	s.file = file
	if s.strat.Commits() && store != nil {
		s.pf = store
		s.group = cfg.GroupCommit || groupCommitAll
	} else if s.strat.Commits() {
		ptr := pointer.Path(cfg.Path, cfg.PointerDir)
		if err := s.pointerFolder(filepath.Dir(ptr), cfg.PointerDir != ""); err != nil {
			return nil, err
		}
		pf := pointer.Open(ptr, pointer.Options{
			FS: s.fs, Sync: cfg.Sync, SyncInterval: cfg.SyncInterval, Logger: s.log,
		})
		if err := pf.Lock(); err != nil {
			// The error names the pointer file, itself named after the input.
			return nil, errors.Join(err, pf.Close())
		}
		s.pf, s.madePointer = pf, pf.Made()
		s.group = cfg.GroupCommit || groupCommitAll
	}
	s.publish()
	return s, nil
}

// prime opens the input as the first Poll does (the decision, the store of
// a new epoch), without reading; the next Poll reads. A file set primes
// the files it finds together, so that their records are synced once.
func (s *stream) prime() error {
	if s.polled || s.closed || s.done || s.strat == OnceLatest {
		return nil
	}
	s.polled = true
	err := s.open(true)
	s.publish()
	return err
}

// resumeFrom is ResumeFrom of the stream; see [FileSource].
func (s *stream) resumeFrom(points []ResumePoint) error {
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

// poll is Poll of the stream; see [FileSource].
func (s *stream) poll(ctx context.Context, items []Item) (int, error) {
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
	if n > 0 && s.pf != nil && !s.migrate && s.storedFP < int(min(maxFPLen, s.fr.off)) {
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
		it.Seq, it.Epoch, it.Origin, it.File = s.seq, s.epoch, s.origin, s.file
	}
	if n > 0 {
		s.lastDelivered = items[n-1].Position
	}
	s.lines += uint64(n)
	s.publish()
	return n, err
}

// commit is Commit of the stream; see [FileSource].
func (s *stream) commit(epoch uint64, position int64) error {
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

// flush is Flush of the stream; see [FileSource].
func (s *stream) flush() error {
	if s.closed && s.group {
		return ErrClosed
	}
	if s.gw == nil {
		return nil
	}
	return s.gw.flush()
}

// close is Close of the stream; see [FileSource].
func (s *stream) close() error {
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

// moveTo makes path (a file set's name its file was renamed to, rotated
// its Rotated pattern) the stream's path: its lines name it, and a reopen
// started because the old path names another file (or because the file
// was found renamed away at the start) is called off, the new path naming
// the open file.
func (s *stream) moveTo(path, rotated string) {
	s.path, s.file, s.rotated = path, path, rotatedPattern(path, rotated)
	if s.reopenReason == ReasonReplaced || s.reopenReason == ReasonRenamedAway {
		s.reopenReason, s.renamed = "", ""
		s.setState(StateBehind, "")
	}
	s.publish()
}

// status is Status of the stream; see [FileSource].
func (s *stream) status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	st.Reopens = maps.Clone(s.reopens)
	return st
}

// pointerFolder makes sure the pointer file's folder exists, creating it
// when missing; own says it was configured (PointerDir), not the input's.
func (s *stream) pointerFolder(dir string, own bool) error {
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

// read fills items from the open input; see Poll.
func (s *stream) read(items []Item) (int, error) {
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
		if s.reopenReason == ReasonRewritten || s.reopenReason == ReasonTruncated {
			// The bytes after the position are another file's: read none.
			err = io.EOF
		} else {
			got, err = s.fr.fill(s.in.f, n == 0)
		}
		if got > 0 {
			same, verr := s.readVerified(got, s.fp)
			if verr != nil || !same {
				// Not the content read so far: the bytes are taken back,
				// unframed. On an error the file is read again from the
				// offset by the next poll.
				s.fr.unfill(got)
				if verr != nil {
					if _, serr := s.in.f.Seek(s.fr.off, io.SeekStart); serr != nil {
						verr = errors.Join(verr, fmt.Errorf("feed: seek input %s back to %d: %w", s.in.name, s.fr.off, serr))
					}
					if n > 0 {
						return n, nil // the next poll meets the error again
					}
					return 0, verr
				}
				s.startReopen(ReasonRewritten)
				continue
			}
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

// onSkip is the framer's report of skipped bytes.
func (s *stream) onSkip(kind skipKind, start, end int64) {
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

func (s *stream) rejectLine(r Reject) {
	if s.reject != nil {
		s.reject(r)
	}
}

func (s *stream) setState(st State, detail string) {
	s.state, s.detail = st, detail
}

// publish copies the source's facts for Status.
func (s *stream) publish() {
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
