package feed

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/feed/pointer"
	"github.com/tidemark-go/tidemark/vfs"
)

// The kinds of rotation, logged as "kind" with the notes a rotation
// writes: a rotation the source follows loses nothing, so it is logged at
// INFO. A warning is kept for what an operator must look at (a file
// rewritten in place, a line dropped, a file that could not be found).
const (
	rotationRename       = "rename"          // the file read was renamed away; a new file at the path
	rotationReplace      = "replace"         // the file read was deleted, or another file renamed over it
	rotationCopyRename   = "copy-and-rename" // a copy of the file read (and more) renamed over the path
	rotationTruncate     = "truncate"        // the file read was truncated in place
	rotationCopyTruncate = "copytruncate"    // truncated, and its unread lines found in a rotated copy
	rotationCopy         = "copy"            // the file the pointer names found as a copy (copytruncate) among the rotated files
	rotationCompressed   = "compressed"      // a rotated file found compressed (name.gz)
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
	fp       tidemark.Fingerprint
	tailLen  int
	tailHash uint64
	ok       bool // tailHash was read
	// id is the identity of the file left (hasID: the platform gives
	// one); moved is set when that file still has a name once left: it
	// was renamed away (a rotation), not replaced by a file renamed over
	// its name, which leaves it none. A file at the path of another
	// identity is then a new file, whatever bytes it starts with.
	id    tidemark.Identity
	hasID bool
	moved bool
}

// continues returns "" when h, the file now at the path (size bytes,
// starting with head), continues the file left (c): a copy of every byte
// read from it, renamed over the path. Else it says why it does not: a
// file at the path of another identity while the file left still has a
// name (renamed away: a rotation) is a new file, even with the same first
// bytes (a header line, or none at all); so is one without the bytes read.
func (s *stream) continues(c *continuation, h *inputFile, size int64, head []byte) string {
	switch {
	case c.forceNew:
		return "the file left was truncated or rewritten"
	case !c.ok:
		return "the bytes read from the file left cannot be read back"
	case c.moved && c.hasID && h.hasID && h.id != c.id:
		return "the file left is still in the folder under another name (rotated): the file at the path is another file"
	}
	return sameContent(h, size, head, c.end, c.fp, c.tailLen, c.tailHash)
}

// caughtUp records that the source is at the end of its input.
func (s *stream) caughtUp() {
	if s.fr.pending() > 0 {
		s.setState(StateCaughtUp, DetailPartialLine)
		return
	}
	s.setState(StateCaughtUp, "")
}

// check stats the path at the end of the open file. It returns whether the
// open file may hold more bytes, and starts a reopen when the path names
// another file or the file shrank or was rewritten.
//
// When the path no longer names the open file (another file is there, or
// none: a rotation in progress), the open file's own size and the bytes
// before the offset read decide first: it may have been truncated, or
// rewritten, before it was renamed away, and reading on from the offset
// would deliver fragments of its new content in the old epoch. Such a file
// is read again from 0 under a new epoch (it holds the lines written since
// the truncation), then the path's file is opened as after any rotation.
func (s *stream) check() (bool, error) {
	if s.retiring {
		// The path is another file of the set's: only the open file's own
		// growth (a late write) is read.
		ofi, err := s.in.f.Stat()
		if err != nil {
			return false, fmt.Errorf("feed: stat the open input %s (epoch %d, read to %d), which the path no longer names: %w; the next poll retries", s.path, s.epoch, s.fr.off, err)
		}
		return ofi.Size() > s.fr.off, nil
	}
	fi, err := s.fs.Stat(s.path)
	gone, replaced := false, false
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// A rotation in progress: the open file is read on, once checked.
		gone = true
	case err != nil:
		return false, fmt.Errorf("feed: stat input %s (epoch %d, read to %d): %w; the next poll retries", s.path, s.epoch, s.fr.off, err)
	case s.in.hasID:
		if id, ok := fileIdentity(fi); ok && id != s.in.id {
			gone, replaced = true, true
		}
	}
	if gone {
		ofi, err := s.in.f.Stat()
		if err != nil {
			return false, fmt.Errorf("feed: stat the open input %s (epoch %d, read to %d), which the path no longer names: %w; the next poll retries", s.path, s.epoch, s.fr.off, err)
		}
		if s.shrunk(ofi.Size()) {
			s.startReopen(ReasonTruncated)
			return true, nil
		}
		same, err := s.unchanged()
		if err != nil {
			return false, err
		}
		switch {
		case !same:
			s.startReopen(ReasonRewritten)
		case replaced:
			s.startReopen(ReasonReplaced)
		case ofi.Size() == s.fr.off && s.rotatedSince():
			// No file at the path (rotated without create, or between the
			// rename and the create), and a rotated file newer than the
			// open one holds lines: they are read now (after RotateWait),
			// not once a file appears at the path again.
			s.startReopen(ReasonReplaced)
		}
		return true, nil
	}
	if g, ok := s.in.f.(*gzFile); ok {
		// A compressed input is read complete: it has nothing more unless
		// the file changed (another member appended), which a reopen
		// verifies and reads on from the position in the same epoch.
		if fi.Size() != g.rawSize {
			s.startReopen(ReasonReplaced)
			return true, nil
		}
		return false, nil
	}
	size := fi.Size()
	s.size = size
	if s.shrunk(size) {
		s.startReopen(ReasonTruncated)
		return true, nil
	}
	if size == s.fr.off {
		return false, nil
	}
	// The file has grown since its end was found. Whether it grew, or
	// was truncated and rewritten in place to at least the length read,
	// the read of the new bytes tells: it looks at the bytes before them
	// again once it has them (see readVerified). A look here, before the
	// read, would leave the writer a window between the two.
	return true, nil
}

// shrunk reports whether the open file, now size bytes, was truncated: it
// is shorter than what was read from it, or, before anything was read
// since it was opened (a truncation to the offset read, 0, leaves no
// offset past the size), than its first bytes fingerprinted at the open.
func (s *stream) shrunk(size int64) bool {
	return size < s.fr.off || (s.headCheck && size < int64(s.fp.Len))
}

// rotatedSince reports whether, with Rotated, a rotated file follows the
// open file in the rotation order (a rotation since it was opened, whose
// file is not the path's). Used while the path names no file.
func (s *stream) rotatedSince() bool {
	if s.rotated == "" {
		return false
	}
	list, err := s.siblings()
	if err != nil {
		return false // the reopen at the next file at the path lists them again
	}
	next := s.nextAfter(list)
	return next != nil && !next.live
}

// startReopen makes the next end of the open file reopen the path (for a
// truncated or rewritten file, read it again from 0: nothing more is read
// from the old offset).
func (s *stream) startReopen(reason string) {
	s.reopenReason = reason
	s.setState(StateBehind, reason)
	s.log.Info("feed: "+reason+": reading the open file to its end, then opening the path again",
		"path", s.path, "epoch", s.epoch, "position", s.fr.position())
}

// reopen leaves the open file, dropping an unterminated last line: a
// truncated or rewritten file is read again from 0 under a new epoch (see
// reread); any other is closed, and the path opened again.
func (s *stream) reopen() error {
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
	forceNew := reason == ReasonTruncated || reason == ReasonRewritten
	if !forceNew && s.wait > 0 {
		// A rotated file stays open until it has been quiet for
		// RotateWait: a writer that has not reopened the path yet still
		// appends to it, and every Poll meanwhile reads what it appends.
		if fi, err := s.in.f.Stat(); err == nil {
			if quiet := s.now().Sub(fi.ModTime()); quiet < s.wait {
				s.setState(StateBehind, fmt.Sprintf("%s: reading the rotated file %s until it has been quiet for %v (written %v ago)", reason, s.in.name, s.wait, quiet.Round(time.Millisecond)))
				return nil
			}
		}
	}
	// In a file set, a file renamed away while the source was stopped is
	// left only as any other: the set has looked for its new name since
	// (its listing at the start may have been taken before the rename,
	// and a new name of the set found once the stream has left the file
	// would be taken for a new file, read again from 0).
	if !forceNew && s.leaveCheck != nil {
		switch s.leaveCheck() {
		case leaveWait:
			s.setState(StateBehind, reason+": waiting for the file set to look for the file's new name")
			return nil
		case leaveRetire:
			s.retiring, s.reopenReason = true, ""
			s.log.Info("feed: the file's path names another file of the set, renamed there: the file is read to its end, and its path is left to that file",
				"path", s.path, "epoch", s.epoch, "position", s.fr.position())
			s.setState(StateWaiting, "its path names another file of the set: read to its end")
			return nil
		}
	}
	c := s.leaving(reason)
	if c.forceNew && s.rotated != "" {
		// logrotate's copytruncate: the lines after the offset read may be
		// in the copy it made before the truncation.
		cp, err := s.findCopy(c)
		if err != nil {
			// Rotations went on while the folder was listed: the copy may
			// be there under a name the listing missed. Wait.
			s.setState(StateBehind, reason+": waiting for the rotated files to stop changing to look for a copy of the input")
			return nil
		}
		if cp != nil {
			return s.continueInCopy(c, cp, reason)
		}
	}
	// The file to move to: the next one in the rotation order (a file
	// rotated since the open file, not read yet), else the file at the
	// path.
	target := s.path
	var tf vfs.File
	var tfi fs.FileInfo
	var terr error
	if !c.forceNew {
		target, tf, tfi, terr = s.openNext()
		if errors.Is(terr, errUnsettled) {
			// The next file may be one the listing missed: moving to the
			// path could skip it. The open file is read on meanwhile.
			s.setState(StateBehind, reason+": waiting for the rotated files to stop changing")
			return nil
		}
		if errors.Is(terr, errIncomplete) {
			// The next file is a compressed one still being written: the
			// open file is read on (late writes) until it is complete.
			s.setState(StateBehind, reason+": waiting for "+target+" to be complete")
			return nil
		}
	}
	if s.rotated != "" && !c.forceNew && target == s.path && errors.Is(terr, fs.ErrNotExist) {
		// No rotated file follows the open one, and the path names no
		// file. The open file stays open: leaving it, the source would
		// open only the path once a file is there, and a file made and
		// rotated away meanwhile (before this source looks again) would be
		// skipped. Kept open, it is placed in the rotation order by its
		// identity when a file appears, at the path or among the rotated
		// files (see check), and the files after it are read in order.
		s.reopenReason = ""
		s.setState(StateWaiting, "waiting for "+s.path+" or a rotated file newer than "+s.in.name)
		return nil
	}
	if s.pf != nil && !c.forceNew && (s.unprocessed() || unwritten) && s.startsNewEpoch(c, tf, tfi, terr) {
		// The file to move to would start a new epoch, stored at once,
		// while lines delivered from the file left are not committed: were
		// the source killed before they are applied, the pointer would
		// have passed them (a gap); killed after lines of the new epoch
		// are applied, the left file's lines, read again (an input
		// renamed away), would look new to a store. So the source leaves
		// the file only once its delivered lines are committed (under
		// GroupCommit, written); meanwhile Poll returns 0, behind, and
		// commits land as usual.
		if tf != nil {
			tf.Close()
		}
		s.retryCommit()
		if s.unprocessed() {
			s.setState(StateBehind, reason+": waiting for the lines read from the old file to be committed")
			return nil
		}
		if unwritten {
			s.setState(StateBehind, reason+": waiting for the pointer write of the lines read from the old file (it failed; every poll retries it)")
			return nil
		}
		target, tf, tfi, terr = s.openNext()
		if errors.Is(terr, errUnsettled) {
			s.setState(StateBehind, reason+": waiting for the rotated files to stop changing")
			return nil
		}
		if errors.Is(terr, errIncomplete) {
			s.setState(StateBehind, reason+": waiting for "+target+" to be complete")
			return nil
		}
	}
	s.reopenReason = ""
	if reason == ReasonRenamedAway {
		s.log.Info("feed: finished the input renamed away while the source was stopped: opening the next file",
			"path", s.path, "renamed", s.renamed, "next", target, "epoch", s.epoch, "position", s.fr.position())
		s.renamed = ""
	}
	s.countReopen(reason)
	if c.forceNew {
		return s.reread(c, reason)
	}
	err := s.in.close()
	s.in = nil
	s.cont = c
	if err != nil {
		s.log.Warn("feed: closing the old input failed", "path", s.path, "err", err)
	}
	if target != s.path {
		kind := rotationRename
		if _, gz := tf.(*gzFile); gz {
			kind = rotationCompressed
		}
		s.log.Info("feed: moving to the next rotated file", "kind", kind, "path", s.path, "file", target, "previous_epoch", s.epoch)
	}
	return s.opened(false, target, tf, tfi, terr)
}

// openNext opens the file a reopen moves to: with Rotated, the file that
// follows the open one in the rotation order when it is a rotated file
// (renamed or compressed since the open file was created: it holds lines
// written after the open file's and before the path's), else the file at
// the path. A rotated file renamed again between the listing and its open
// (gone from its name, or another file under it) is looked for again, up
// to three times; then the error wraps errUnsettled and the caller waits:
// moving to the path would skip it. So is a path that no longer names the
// file the listing saw there (or names one where the listing saw none). The
// result is that of openInput.
func (s *stream) openNext() (string, vfs.File, fs.FileInfo, error) {
	for try := 0; s.rotated != ""; try++ {
		if try == 3 {
			// The next file was renamed each time it was opened: rotations
			// are going on. Wait rather than move to the path past it.
			return "", nil, nil, fmt.Errorf("feed: the next rotated file of input %s was renamed each time it was opened: %w", s.path, errUnsettled)
		}
		list, err := s.siblings()
		if errors.Is(err, errUnsettled) {
			return "", nil, nil, err
		}
		if err != nil {
			s.log.Warn("feed: cannot list the rotated files: moving to the file at the path", "path", s.path, "err", err)
			break
		}
		next := s.nextAfter(list)
		if next == nil || next.live {
			// The path is next. The file there must be the one listed (or
			// none, as listed): a file made at the path and rotated away
			// since the listing, another file at the path now, would be
			// skipped.
			f, fi, err := s.openInput(s.path)
			if err == nil && next == nil {
				if id, ok := fileIdentity(fi); !ok || !s.in.hasID || id != s.in.id {
					err = errAppeared
				}
			} else if err == nil && next.hasID {
				if id, ok := fileIdentity(fi); ok && id != next.id {
					err = errAppeared
				}
			} else if errors.Is(err, fs.ErrNotExist) && next != nil {
				err = errAppeared
			}
			if errors.Is(err, errAppeared) {
				if f != nil {
					if cerr := f.Close(); cerr != nil {
						s.log.Warn("feed: closing the input failed", "path", s.path, "err", cerr)
					}
				}
				continue
			}
			return s.path, f, fi, err
		}
		f, fi, err := s.openInput(next.name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err == nil && next.hasID {
			// Renamed between the listing and the open, and another file
			// took the name (the next rotation's shift): reading it would
			// skip the file listed. Look again.
			if id, ok := fileIdentity(fi); ok && id != next.id {
				if cerr := f.Close(); cerr != nil {
					s.log.Warn("feed: closing a rotated file failed", "path", s.path, "file", next.name, "err", cerr)
				}
				continue
			}
		}
		return next.name, f, fi, err
	}
	f, fi, err := s.openInput(s.path)
	return s.path, f, fi, err
}

// errAppeared is openNext's note that the file at the path is not the one
// its listing saw there: it lists again.
var errAppeared = errors.New("the file at the path changed since the listing")

// continueInCopy goes on reading the epoch in cp, the copy of the open
// file made before its truncation (copytruncate), from c.pos: the lines
// the source had not read are there. The truncated file, which the path
// still names, is read from 0 under a new epoch once the copy is done.
func (s *stream) continueInCopy(c *continuation, cp *renamedInput, reason string) error {
	s.log.Info("feed: the input was truncated, and a rotated file holds a copy of it with lines not read yet (copytruncate): reading them first in the same epoch, then the input from 0",
		"kind", rotationCopyTruncate, "path", s.path, "copy", cp.in.name, "epoch", s.epoch, "position", c.pos, "copy_size", cp.size)
	s.countReopen(reason)
	old := s.in
	s.reopenReason = ""
	if err := s.begin(cp.in, cp.size, cp.fp, decision{start: c.pos, resync: c.resync, committed: s.committed, renamed: cp}); err != nil {
		return err
	}
	closeQuietly(s, old)
	return nil
}

// countReopen counts a reopen for reason in Status.
func (s *stream) countReopen(reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reopens[reason]++
	s.lastReopenReason = reason
	s.lastReopenAt = s.now()
}

// reread reads the open file again from 0 under a new epoch, stored at
// once: it was truncated, or rewritten in place, so the bytes it holds now
// are lines written since (delivered-and-uncommitted lines of the old
// content are gone from it; nothing waits for them). The file is kept
// open rather than opened again at the path, because the path may no
// longer name it (renamed away after the rewrite): it holds lines no other
// file does. Once it is read to its end, the end-of-file check moves to the
// path's file if the path names another one. reason is the reopen's:
// ReasonTruncated or ReasonRewritten.
func (s *stream) reread(c *continuation, reason string) error {
	h := s.in
	fi, err := h.f.Stat()
	if err != nil {
		return fmt.Errorf("feed: stat input %s to read it again from 0 (epoch %d): %w; the next poll retries", s.path, s.epoch, err)
	}
	size := fi.Size()
	head, err := s.readHead(h, size)
	if err != nil {
		return err
	}
	s.renamed = ""
	s.cont = c
	if reason == ReasonTruncated {
		// A truncation is a rotation (copytruncate, or a writer that
		// starts over); a rewrite in place is not.
		s.log.Info("feed: reading the input from 0 under a new epoch: it was truncated", "kind", rotationTruncate, "path", s.path, "previous_epoch", s.epoch, "size", size)
	} else {
		s.log.Warn("feed: reading the input from 0 under a new epoch: it was rewritten in place (its bytes before the offset read changed)",
			"path", s.path, "previous_epoch", s.epoch, "size", size)
	}
	return s.begin(h, size, tidemark.Fingerprint{Len: len(head), Hash: pointer.HashBytes(head)}, decision{newEpoch: true, prev: s.epoch, store: true})
}

// unprocessed reports whether lines delivered from the epoch are not
// committed yet: not stored in the pointer, or, after a rewind below the
// pointer, not named by a Commit (a commit at or below the pointer is not
// stored, but it says the lines up to it are processed).
func (s *stream) unprocessed() bool {
	return s.lastDelivered > s.committed || s.lastDelivered > s.acked
}

// startsNewEpoch reports whether the file to move to (f, fi, or the error
// of its open), compared with the file left (c), would be read under a new
// epoch: another file, or none, or one that cannot be read. It reads the
// file's first bytes, and leaves it open.
func (s *stream) startsNewEpoch(c *continuation, f vfs.File, fi fs.FileInfo, err error) bool {
	if !c.ok || err != nil {
		return true
	}
	h := &inputFile{f: f, name: f.Name()}
	h.id, h.hasID = fileIdentity(fi)
	size := fi.Size()
	head, err := s.readHead(h, size)
	if err != nil {
		return true
	}
	return s.continues(c, h, size, head) != ""
}

// leaving describes the open file as a reopen for reason leaves it.
func (s *stream) leaving(reason string) *continuation {
	c := &continuation{
		forceNew: reason == ReasonTruncated || reason == ReasonRewritten,
		pos:      s.fr.position(),
		resync:   s.fr.discard && s.fr.discardKind == skipResync,
		epoch:    s.epoch,
	}
	if !c.resync {
		c.drop = s.fr.pending()
	}
	c.id, c.hasID = s.in.id, s.in.hasID
	if fi, err := s.in.f.Stat(); err == nil {
		n, ok := vfs.Links(fi)
		c.moved = ok && n > 0
	}
	if !c.forceNew {
		// Describe every byte read from the old file, an unterminated last
		// line included: the file at the path continues the epoch only if
		// it holds them all.
		c.end = s.fr.off
		c.tailLen = int(min(maxTailLen, c.end))
		th, terr := s.in.tailHash(c.end, c.tailLen)
		head := s.head[:min(int64(len(s.head)), c.end)]
		n, herr := s.in.f.ReadAt(head, 0)
		c.fp = tidemark.Fingerprint{Len: n, Hash: pointer.HashBytes(head[:n])}
		c.tailHash = th
		c.ok = terr == nil && n == len(head) && (herr == nil || errors.Is(herr, io.EOF))
	}
	return c
}

// dropPartial reports the unterminated last line of the file a reopen left,
// when the file opened instead does not continue it.
func (s *stream) dropPartial(c *continuation) {
	if c.drop <= 0 {
		return
	}
	s.partialDropped++
	s.log.Warn("feed: dropped the unterminated last line of the old input: it was never delivered",
		"path", s.path, "epoch", c.epoch, "position", c.pos, "length", c.drop)
	s.rejectLine(Reject{Path: s.path, Epoch: c.epoch, Position: c.pos, Length: c.drop, Reason: RejectPartialDropped})
}
