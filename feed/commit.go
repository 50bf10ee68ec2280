package feed

import (
	"errors"
	"fmt"
	"io"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/feed/pointer"
)

// recordStore is where a stream keeps its pointer record: its own pointer
// file (a feed of one file), or its entry in a file set's registry. Store
// writes a record durably per the sync policy, moving a position only
// forward within an epoch; Load returns the record stored.
type recordStore interface {
	Load() (pointer.LoadResult, error)
	Store(pointer.Record) error
	SyncIfDue() error
	Path() string
	Close() error
}

var _ recordStore = (*pointer.File)(nil)

// store writes the pointer of the current epoch at position; under
// GroupCommit a record that only moves the position is handed to the
// writer instead.
func (s *stream) store(position int64) error {
	p := pointer.Record{Epoch: s.epoch, Position: position, Identity: s.in.id, Fingerprint: s.fp}
	fromFile := false // bytes were read back from the file for this pointer
	if s.fp.Len < maxFPLen {
		// The file was short when fingerprinted: cover more of it now.
		if known := max(s.size, s.fr.off); known > int64(s.fp.Len) {
			b := s.head[:min(int64(len(s.head)), known)]
			if n, err := s.in.f.ReadAt(b, 0); n == len(b) && (err == nil || errors.Is(err, io.EOF)) {
				p.Fingerprint = tidemark.Fingerprint{Len: n, Hash: pointer.HashBytes(b)}
				fromFile = true
			}
		}
	}
	if n := int(min(maxTailLen, position)); n > 0 {
		if b, ok := s.readBytes(position-int64(n), n); ok {
			// The bytes as they were read: no read, and no rewrite since
			// can slip into the tail hash.
			p.TailLen, p.TailHash = n, pointer.HashBytes(b)
		} else {
			b := s.tail[:n]
			if m, err := s.in.f.ReadAt(b, position-int64(n)); m == n && (err == nil || errors.Is(err, io.EOF)) {
				p.TailLen, p.TailHash = n, pointer.HashBytes(b)
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
			if r := s.reopenReason; r != ReasonTruncated && r != ReasonRewritten {
				// Also over a pending rotation: the delivered lines whose
				// commit is refused here would otherwise be waited for
				// forever, and the file read on from the old offset.
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
			if e, ok := s.pf.(*regEntry); ok && s.setw != nil {
				s.gw = s.setw.slot(e, s.path, s.wroteInBackground, s.failedInBackground)
			} else {
				s.gw = newGroupWriter(s.pf, s.path, s.sync == SyncEveryCommit, s.wroteInBackground, s.failedInBackground)
			}
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

// nameOpenFile makes the pointer name the file being read when the epoch is
// read on from a file of another identity (a copy renamed over the path, at
// a reopen or at the start): the same epoch and committed position, the new
// file's identity. Were the pointer left naming the old file, freed by the
// rename, a restart after the copy is renamed away could not find the copy
// by its identity (or would find an unrelated file that reused the inode),
// and the copy's unread lines would be lost (D5). It reports whether lines
// may be handed out: not while that store fails (the failure is counted in
// Status like a failed commit, and the next Poll retries).
func (s *stream) nameOpenFile() bool {
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
func (s *stream) retryCommit() {
	if s.asked > s.committed && s.commitFailing() {
		_ = s.store(s.asked)
	}
}

// commitFailed counts a failed pointer write or sync in Status.
func (s *stream) commitFailed(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.commitErrors++
	s.lastCommitErr = err.Error()
	s.st.CommitErrors, s.st.LastCommitError = s.commitErrors, s.lastCommitErr
}

// wroteAt records a pointer write at position that succeeded.
func (s *stream) wroteAt(position int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.written = position
	s.lastCommitErr = ""
	s.st.CommittedPosition, s.st.LastCommitError = position, ""
}

// setWritten records position as the position in the pointer file for a
// new epoch (0), or as loaded at the start.
func (s *stream) setWritten(position int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.written = position
	s.st.CommittedPosition = position
}

// commitFailing reports whether the last pointer write failed.
func (s *stream) commitFailing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastCommitErr != ""
}

// wroteInBackground is the GroupCommit writer's report of a record written.
func (s *stream) wroteInBackground(p pointer.Record) { s.wroteAt(p.Position) }

// failedInBackground is the GroupCommit writer's report of a failed write:
// counted and logged (the next Commit returns it).
func (s *stream) failedInBackground(p pointer.Record, err error) {
	s.commitFailed(err)
	s.log.Warn("feed: pointer write failed; the next commit retries",
		"path", s.path, "pointer", s.pf.Path(), "epoch", p.Epoch, "position", p.Position, "err", err, "group_commit", true)
}
