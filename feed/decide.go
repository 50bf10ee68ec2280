package feed

import (
	"errors"
	"fmt"
	"io"
	"io/fs"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/feed/pointer"
	"github.com/tidemark-go/tidemark/vfs"
)

// decision is where and in which epoch an opened input is read.
type decision struct {
	start     int64
	resync    bool   // skip to the first line start after start
	newEpoch  bool   // start a new epoch (the previous one is prev)
	prev      uint64 // the largest epoch known
	committed int64  // the committed position when the epoch is kept
	store     bool   // store the pointer at start at once
	migrate   bool   // store the pointer when the resync completes
	// tailLen and tailHash, when tailLen > 0, are the bytes before start
	// as the decision found them (the pointer's tail hash): begin takes
	// the bytes before start from the file again, and they must be these.
	tailLen  int
	tailHash uint64
	// renamed, when set, is the file the pointer names, renamed away: it
	// is read instead of the file at the path, which is closed.
	renamed *renamedInput
}

// renamedInput is the input renamed away while the source was stopped,
// found in the folder by its identity.
type renamedInput struct {
	in   *inputFile
	size int64
	fp   tidemark.Fingerprint
	// fromStart: the file has the pointer's identity but not its content
	// (truncated or rewritten, then rotated away): read from 0 under a
	// new epoch.
	fromStart bool
}

// knownTail records in d the pointer p's tail hash, which the decision
// compared with the file, when d starts at p's position (a floor below it
// does not).
func (d *decision) knownTail(p pointer.Record) {
	if d.start == p.Position && p.TailLen > 0 {
		d.tailLen, d.tailHash = p.TailLen, p.TailHash
	}
}

// open opens the input at the path and decides where to read it. When the
// file does not exist the source waits: s.in stays nil.
func (s *stream) open(first bool) error {
	f, fi, err := s.openInput(s.path)
	return s.opened(first, s.path, f, fi, err)
}

// opened goes on from the open of name (the path, or a rotated file a
// reopen moves to): f and fi, or the open's error.
func (s *stream) opened(first bool, name string, f vfs.File, fi fs.FileInfo, err error) error {
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
		if errors.Is(err, errIncomplete) {
			// A compressed input still being written: wait for its end.
			s.setState(StateWaiting, "waiting for the compressed input "+name+" to be complete")
			return nil
		}
		return fmt.Errorf("feed: open input %s: %w; check that it is a readable file", name, err)
	}
	s.waitWarned = false
	h := &inputFile{f: f, name: name}
	h.id, h.hasID = fileIdentity(fi)
	size := fi.Size()
	head, err := s.readHead(h, size)
	if err != nil {
		return errors.Join(err, f.Close())
	}
	fp := tidemark.Fingerprint{Len: len(head), Hash: pointer.HashBytes(head)}

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
func (s *stream) begin(h *inputFile, size int64, fp tidemark.Fingerprint, d decision) error {
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
	_, gz := f.(*gzFile) // read complete: a change is a new file (see check)
	s.headCheck = !gz
	s.seenLen = 0
	if n := min(int64(maxTailLen), d.start); n > 0 {
		// The bytes before the start, as they are now: a rewrite in place
		// from here on is recognised by them.
		if m, rerr := f.ReadAt(s.seen[:n], d.start-n); m == int(n) && (rerr == nil || errors.Is(rerr, io.EOF)) {
			s.seenLen = m
		}
	}
	if d.tailLen > 0 && (s.seenLen != d.tailLen || pointer.HashBytes(s.seen[:s.seenLen]) != d.tailHash) {
		// The file was truncated and filled again (copytruncate, or a
		// rewrite in place) since the decision compared it with the
		// pointer: the bytes before the start are another content's, and
		// nothing is read after them. The file is treated as rewritten at
		// once; a copy of it is looked for by its first bytes.
		s.seenLen = 0
		s.reopenReason = ReasonRewritten
		s.log.Info("feed: input rewritten in place since it was opened: reading it again from 0 under a new epoch, after a copy of it if a rotated file holds one",
			"path", s.path, "file", h.name, "position", d.start)
	}
	s.setState(StateBehind, s.reopenReason)
	if !s.strat.Commits() {
		return nil
	}
	if d.newEpoch {
		s.epoch = pointer.NewEpoch(d.prev, s.now())
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
		s.origin = &tidemark.Origin{Identity: h.id, Fingerprint: fp, TailHash: s.ef.tailHash}
	} else {
		// The same epoch on a copy of the file: one Origin per epoch,
		// reading the file the epoch is read from now.
		s.ef.set(h)
	}
	s.migrate = d.migrate
	s.log.Debug("feed: reading a file", "path", s.path, "file", h.name, "dev", h.id.Dev, "ino", h.id.Ino, "size", size,
		"start", d.start, "new_epoch", d.newEpoch, "epoch", s.epoch, "committed", s.committed, "reason", s.reopenReason)
	if d.store {
		// Failures are counted and logged; the next commit retries.
		_ = s.store(d.start)
	}
	return nil
}

// sameContent compares the file with what is known of the file read before
// (the pointer, or the file left by a reopen). It returns "" when the file
// may be read on at pos, else why not.
func sameContent(h *inputFile, size int64, head []byte, pos int64, fp tidemark.Fingerprint, tailLen int, tailHash uint64) string {
	switch {
	case size < pos:
		return fmt.Sprintf("the input (%d bytes) is shorter than the position %d: truncated", size, pos)
	case size < int64(fp.Len):
		return fmt.Sprintf("the input (%d bytes) is shorter than its fingerprinted first %d bytes: truncated", size, fp.Len)
	case pointer.HashBytes(head[:fp.Len]) != fp.Hash:
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
func (s *stream) decidePointer(h *inputFile, size int64, fp tidemark.Fingerprint) (decision, error) {
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
		count := res.Record.Position
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
	p := res.Record
	fresh.prev = p.Epoch
	s.log.Debug("feed: the pointer at the start", "path", s.path, "pointer", pfPath, "epoch", p.Epoch, "position", p.Position,
		"dev", p.Identity.Dev, "ino", p.Identity.Ino, "fingerprint_len", p.Fingerprint.Len, "tail_len", p.TailLen, "file", h.name, "file_dev", h.id.Dev, "file_ino", h.id.Ino, "size", size)
	why := sameContent(h, size, s.head[:fp.Len], p.Position, p.Fingerprint, p.TailLen, p.TailHash)
	if (h.hasID && p.Identity != (tidemark.Identity{}) && p.Identity != h.id) || (s.rotated != "" && why != "") {
		// The path names another file (or, with Rotated, a file that is
		// not the one the pointer describes: logrotate's copytruncate
		// leaves the input's identity at the path and the content in a
		// copy). When the file the pointer names is
		// still in the folder under another name, it was renamed away
		// while the source was stopped: it is the file the pointer
		// describes, whatever the file at the path holds (a pointer whose
		// fingerprint covers nothing, or a header line, matches any new
		// file that starts the same way), and it may hold lines after the
		// pointer. Finish it first; the file at the path is then compared
		// with it, as after a rotation while running.
		d, ok, err := s.decideRenamed(p, why, false)
		if err != nil || ok {
			return d, err
		}
	}
	if why != "" {
		s.log.Warn("feed: the input does not match its pointer: reading from 0 under a new epoch",
			"path", s.path, "pointer", pfPath, "epoch", p.Epoch, "position", p.Position, "reason", why)
		return fresh, nil
	}
	if h.hasID && p.Identity != (tidemark.Identity{}) && p.Identity != h.id {
		s.log.Warn("feed: the input is another file (identity changed) with the same leading bytes and not shorter: position and epoch kept",
			"path", s.path, "pointer", pfPath, "epoch", p.Epoch, "position", p.Position,
			"old_dev", p.Identity.Dev, "old_ino", p.Identity.Ino, "dev", h.id.Dev, "ino", h.id.Ino)
	}
	d := decision{start: p.Position, committed: p.Position}
	if err := s.applyFloor(&d, p.Epoch, p.Position, h, size); err != nil {
		return decision{}, err
	}
	d.knownTail(p)
	s.epoch = p.Epoch
	s.storedFP = p.Fingerprint.Len
	s.storedID = p.Identity
	return d, nil
}

// decideMissing is the decision at the start when the path names no file:
// it finds the file the pointer names renamed away, once per start.
func (s *stream) decideMissing() (decision, error) {
	res, err := s.pf.Load()
	if err != nil {
		return decision{}, err
	}
	s.renamedTried = true
	p := res.Record
	if !res.Found || res.Legacy || p.Identity == (tidemark.Identity{}) {
		return decision{}, nil
	}
	d, _, err := s.decideRenamed(p, "", true)
	if err != nil {
		s.renamedTried = false
	}
	return d, err
}

// decideRenamed looks for the file the pointer p names, renamed away while
// the source was stopped (see findRenamed), and when it finds it, decides
// to read it in the pointer's epoch from the pointer (or the stores' floor
// below it): ok is set, and d.renamed is the file. A file read to its end
// already is read all the same: reading it delivers nothing, and its end
// moves the source to the file at the path, compared with it as after a
// rotation (a new file then, since the renamed file still has its name).
// why says how the file at the path differs from the pointer ("" when it
// matches it; for the logs); missing, that the path names no file.
func (s *stream) decideRenamed(p pointer.Record, why string, missing bool) (decision, bool, error) {
	var r *renamedInput
	var err error
	if s.rotated != "" {
		r, err = s.findGeneration(p)
	} else {
		r, err = s.findRenamed(p)
	}
	if err != nil || r == nil {
		return decision{}, false, err
	}
	if r.fromStart {
		s.log.Warn("feed: the file the pointer names was truncated or rewritten, then rotated away, while the source was stopped: reading it from 0 under a new epoch, then the newer rotated files and the file at the path",
			"path", s.path, "file", r.in.name, "pointer", s.pf.Path(), "epoch", p.Epoch, "position", p.Position, "size", r.size, "reason", why)
		return decision{newEpoch: true, prev: p.Epoch, store: true, renamed: r}, true, nil
	}
	d := decision{start: p.Position, committed: p.Position, renamed: r}
	if err := s.applyFloor(&d, p.Epoch, p.Position, r.in, r.size); err != nil {
		return decision{}, false, errors.Join(err, r.in.close())
	}
	d.knownTail(p)
	// A rotation while the source was stopped, found: nothing is lost, so
	// these are notes, not warnings.
	kind := rotationRename
	if _, gz := r.in.f.(*gzFile); gz {
		kind = rotationCompressed
	} else if r.in.hasID && r.in.id != p.Identity {
		kind = rotationCopy
	}
	switch {
	case r.size > d.start && missing:
		s.log.Info("feed: the input was renamed away while the source was stopped, with bytes after the start, and the path names no file: finishing it in the pointer's epoch, then waiting for the file at the path",
			"kind", kind, "path", s.path, "renamed", r.in.name, "pointer", s.pf.Path(), "epoch", p.Epoch, "position", p.Position, "start", d.start, "size", r.size)
	case r.size > d.start && s.rotated != "":
		s.log.Info("feed: the file the pointer names is a rotated file (renamed, compressed, or copied before a truncation) with bytes after the start: finishing it in the pointer's epoch, then the newer rotated files and the file at the path",
			"kind", kind, "path", s.path, "renamed", r.in.name, "pointer", s.pf.Path(), "epoch", p.Epoch, "position", p.Position, "start", d.start, "size", r.size, "reason", why)
	case r.size > d.start:
		s.log.Info("feed: the input was renamed away while the source was stopped, with bytes after the start: finishing it in the pointer's epoch, then reading the file at the path",
			"kind", kind, "path", s.path, "renamed", r.in.name, "pointer", s.pf.Path(), "epoch", p.Epoch, "position", p.Position, "start", d.start, "size", r.size, "reason", why)
	default:
		s.log.Info("feed: the input was renamed away while the source was stopped, read to its end: reading the file at the path as after a rotation",
			"path", s.path, "renamed", r.in.name, "pointer", s.pf.Path(), "epoch", p.Epoch, "position", p.Position)
	}
	s.epoch = p.Epoch
	s.storedFP = p.Fingerprint.Len
	s.storedID = p.Identity
	return d, true, nil
}

// decideReopen is the decision for the file found at the path after a
// rotation: it is read on in the same epoch only when it continues the
// file left (a copy of every byte read, renamed over the path; see
// continues).
func (s *stream) decideReopen(h *inputFile, size int64, fp tidemark.Fingerprint) (decision, error) {
	fresh := decision{newEpoch: true, prev: s.epoch, store: true}
	c := s.cont
	if c == nil {
		s.log.Warn("feed: reading the input at the path from 0 under a new epoch", "path", s.path, "previous_epoch", s.epoch)
		return fresh, nil
	}
	// The file left was read to its end: a rotation loses nothing, so
	// these are notes, not warnings.
	if why := s.continues(c, h, size, s.head[:fp.Len]); why != "" {
		kind := rotationReplace // the file left has no name any more
		if c.moved {
			kind = rotationRename
		}
		s.log.Info("feed: the file at the path is a new file: reading it from 0 under a new epoch",
			"kind", kind, "path", s.path, "previous_epoch", s.epoch, "reason", why)
		return fresh, nil
	}
	s.log.Info("feed: the file at the path is another file with the same bytes up to the position read: reading on under the same epoch",
		"kind", rotationCopyRename, "path", s.path, "epoch", s.epoch, "position", c.pos)
	d := decision{start: c.pos, resync: c.resync, committed: s.committed, migrate: s.migrate}
	if c.end == c.pos {
		// The bytes before the start, compared just now: begin reads them
		// again, and they must still be these.
		d.tailLen, d.tailHash = c.tailLen, c.tailHash
	}
	return d, nil
}
