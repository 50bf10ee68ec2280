package feed

import (
	"errors"
	"fmt"
	"io"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/feed/pointer"
)

// applyFloor lowers d's start to the floor of the resume points (see
// ResumeFrom) when it is below it. epoch and position are the pointer's
// (epoch 0 for a legacy pointer, which has none); h, of size bytes, is the
// file d reads. A point of the pointer's epoch covers its position; one of
// another epoch covers its position only when h holds the bytes it was
// applied from; a point without a record covers nothing. The start never
// rises: a store ahead of the pointer leaves it where it is. Each lowered
// start is logged once, at WARN, and counted in Status.
func (s *stream) applyFloor(d *decision, epoch uint64, position int64, h *inputFile, size int64) error {
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
func (s *stream) covers(pt ResumePoint, epoch uint64, h *inputFile, size int64) (int64, string, error) {
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
func lineageDiffers(h *inputFile, size int64, l tidemark.Lineage) (string, error) {
	switch {
	case size < l.Position:
		return fmt.Sprintf("the input (%d bytes) is shorter than the position %d", size, l.Position), nil
	case size < int64(l.Fingerprint.Len):
		return fmt.Sprintf("the input (%d bytes) is shorter than the %d bytes fingerprinted", size, l.Fingerprint.Len), nil
	case l.TailLen <= 0 || int64(l.TailLen) > l.Position || l.TailLen > maxTailLen || l.Fingerprint.Len < 0 || l.Fingerprint.Len > maxFPLen:
		return fmt.Sprintf("the record has no usable tail hash (tail %d bytes, fingerprint %d bytes)", l.TailLen, l.Fingerprint.Len), nil
	}
	head := make([]byte, l.Fingerprint.Len)
	if _, err := h.f.ReadAt(head, 0); err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	if pointer.HashBytes(head) != l.Fingerprint.Hash {
		return fmt.Sprintf("the first %d bytes differ", l.Fingerprint.Len), nil
	}
	tail := make([]byte, l.TailLen)
	if _, err := h.f.ReadAt(tail, l.Position-int64(l.TailLen)); err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	if pointer.HashBytes(tail) != l.TailHash {
		return fmt.Sprintf("the %d bytes before position %d differ", l.TailLen, l.Position), nil
	}
	if tail[len(tail)-1] != '\n' {
		return fmt.Sprintf("position %d is not a line start", l.Position), nil
	}
	return "", nil
}
