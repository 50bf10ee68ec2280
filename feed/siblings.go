package feed

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/feed/pointer"
)

// sibling is one file of an input's rotation history as found on disk: the
// file at the path (live) or a file whose name matches Config.Rotated.
type sibling struct {
	name  string
	id    tidemark.Identity
	hasID bool
	size  int64
	mtime time.Time
	live  bool
	rank  suffixRank
}

// The kinds of a rotated name's suffix.
const (
	rankNone  = iota // no number, or more than one kind: the mtime orders
	rankIndex        // logrotate's .1 .2 …: a larger index is older
	rankDate         // a date (8 digits or more): a smaller date is older
)

// suffixRank is what a rotated name's suffix says of its age.
type suffixRank struct {
	kind  int
	index int64
	date  string // the digits of the suffix, compared by length, then value
}

// parseRank reads the suffix of name after base (the input's base name),
// without a ".gz": ".3" is index 3, "-20240102" and ".2024-01-02" are dates,
// anything else (or a name that does not start with base) is unranked.
func parseRank(base, name string) suffixRank {
	rest, ok := strings.CutPrefix(name, base)
	if !ok {
		return suffixRank{}
	}
	rest = strings.TrimSuffix(rest, ".gz")
	var runs []string
	for i := 0; i < len(rest); {
		if rest[i] < '0' || rest[i] > '9' {
			i++
			continue
		}
		j := i
		for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
			j++
		}
		runs = append(runs, rest[i:j])
		i = j
	}
	digits := strings.Join(runs, "")
	switch {
	case len(runs) == 1 && len(digits) <= 6:
		var n int64
		for _, c := range digits {
			n = n*10 + int64(c-'0')
		}
		return suffixRank{kind: rankIndex, index: n}
	case len(digits) >= 8:
		return suffixRank{kind: rankDate, date: strings.TrimLeft(digits, "0")}
	}
	return suffixRank{}
}

// older reports whether a comes before b in the rotation order (older
// first). The file at the path is the newest. Between rotated files, their
// names decide when both carry the same kind of suffix (logrotate's
// numbers: .2 before .1; dates: the earlier first), else their
// modification times, then their names.
func older(a, b *sibling) bool {
	switch {
	case a.live != b.live:
		return b.live
	case a.rank.kind == b.rank.kind && a.rank.kind == rankIndex && a.rank.index != b.rank.index:
		return a.rank.index > b.rank.index
	case a.rank.kind == b.rank.kind && a.rank.kind == rankDate && a.rank.date != b.rank.date:
		if len(a.rank.date) != len(b.rank.date) {
			return len(a.rank.date) < len(b.rank.date)
		}
		return a.rank.date < b.rank.date
	case !a.mtime.Equal(b.mtime):
		return a.mtime.Before(b.mtime)
	}
	return a.name < b.name
}

// siblings lists the files of the input's rotation history, oldest first,
// the file at the path (when there is one) last: every regular file whose
// name matches the Rotated pattern, but for the pointer files and their
// temporary files, and for a compressed file whose uncompressed original
// is still there (gzip writes name.gz beside name, and removes name only
// once name.gz is complete: until then the original is the one read).
//
// A listing is one read of the folder's names, then one stat per name: a
// rotation between the two (logrotate renames every rotated file one
// number up, .3 to .4, .2 to .3, …) can hide a file, listed under a name
// it no longer has, and not under the one it has now. A file missing from
// the list would be taken for gone, and its unread lines skipped (the
// source would start on, or move to, a newer file). So the folder is
// listed until two listings in a row name the same files under the same
// names; when rotations go on for maxListings listings, the error wraps
// errUnsettled, and the caller stays where it is until the next poll.
func (s *stream) siblings() ([]sibling, error) {
	prev, err := s.listSiblings()
	if err != nil {
		return nil, err
	}
	for range maxListings - 1 {
		cur, err := s.listSiblings()
		if err != nil {
			return nil, err
		}
		if sameListing(prev, cur) {
			return cur, nil
		}
		prev = cur
	}
	return nil, fmt.Errorf("feed: the rotated files %s of input %s changed in each of %d listings in a row: %w; the next poll lists them again",
		s.rotated, s.path, maxListings, errUnsettled)
}

// maxListings bounds the listings of one call of siblings.
const maxListings = 8

// errUnsettled is the error of a listing of the rotated files that kept
// changing: the caller waits for the next poll rather than decide on it.
var errUnsettled = errors.New("rotations went on while the folder was listed")

// sameListing reports whether a and b name the same files (by identity,
// where the platform has one) under the same names. Sizes and times may
// differ (a rotated file still written to).
func sameListing(a, b []sibling) bool {
	if len(a) != len(b) {
		return false
	}
	byName := make(map[string]sibling, len(a))
	for _, sb := range a {
		byName[sb.name] = sb
	}
	for _, sb := range b {
		o, ok := byName[sb.name]
		if !ok || o.live != sb.live || o.hasID != sb.hasID || o.id != sb.id {
			return false
		}
	}
	return true
}

// listSiblings is one listing of siblings: one read of the names, one
// stat per name. Files renamed while being listed may be missed or seen
// twice (by identity: once); siblings lists until two listings agree.
func (s *stream) listSiblings() ([]sibling, error) {
	names, err := filepath.Glob(s.rotated)
	if err != nil {
		return nil, fmt.Errorf("feed: list the rotated files %s of input %s: %w", s.rotated, s.path, err)
	}
	base := filepath.Base(s.path)
	present := make(map[string]bool, len(names))
	for _, n := range names {
		present[n] = true
	}
	var out []sibling
	seen := map[tidemark.Identity]bool{}
	add := func(name string, live bool) error {
		fi, err := s.fs.Stat(name)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil // renamed or removed meanwhile
		case err != nil:
			return fmt.Errorf("feed: stat %s, a rotated file of input %s: %w; the next poll retries", name, s.path, err)
		case !fi.Mode().IsRegular():
			return nil
		}
		sb := sibling{name: name, size: fi.Size(), mtime: fi.ModTime(), live: live}
		sb.id, sb.hasID = fileIdentity(fi)
		if sb.hasID {
			if seen[sb.id] {
				return nil
			}
			seen[sb.id] = true
		}
		if !live {
			sb.rank = parseRank(base, filepath.Base(name))
		}
		out = append(out, sb)
		return nil
	}
	for _, n := range names {
		switch {
		case n == s.path || filepath.Clean(n) == filepath.Clean(s.path):
			continue
		case strings.HasSuffix(n, pointer.Suffix), strings.HasSuffix(n, pointer.Suffix+pointer.TempSuffix):
			continue
		case strings.HasSuffix(n, ".gz") && present[strings.TrimSuffix(n, ".gz")]:
			continue
		}
		if err := add(n, false); err != nil {
			return nil, err
		}
	}
	slices.SortStableFunc(out, func(a, b sibling) int {
		switch {
		case older(&a, &b):
			return -1
		case older(&b, &a):
			return 1
		}
		return 0
	})
	if err := add(s.path, true); err != nil {
		return nil, err
	}
	return out, nil
}

// nextAfter returns the file that follows the open file in the rotation
// order of list: the oldest file newer than it, or nil when it is the
// newest. The open file is placed by its identity; when no file of list
// has it, by its first bytes (compressed into another file while being
// read), else (removed) by its modification time: a file modified at the
// same moment counts as newer (read again rather than skipped).
func (s *stream) nextAfter(list []sibling) *sibling {
	if s.in.hasID {
		for i := range list {
			if list[i].hasID && list[i].id == s.in.id {
				if i+1 < len(list) {
					return &list[i+1]
				}
				return nil
			}
		}
	}
	// Compressed into another file since it was opened (gzip keeps the
	// modification time): found by its first bytes.
	if s.fp.Len > 0 {
		for i := range list {
			if list[i].live {
				break
			}
			if head, ok := s.headOf(list[i].name, s.fp.Len); ok && len(head) == s.fp.Len && pointer.HashBytes(head) == s.fp.Hash {
				if i+1 < len(list) {
					return &list[i+1]
				}
				return nil
			}
		}
	}
	fi, err := s.in.f.Stat()
	if err != nil {
		// Without its time the open file cannot be placed: the file at the
		// path is next, as without a rotation pattern.
		if n := len(list); n > 0 && list[n-1].live {
			return &list[n-1]
		}
		return nil
	}
	for i := range list {
		if !list[i].mtime.Before(fi.ModTime()) || list[i].live {
			return &list[i]
		}
	}
	return nil
}

// findGeneration looks among the rotated files for the file the pointer p
// names, when the file at the path is not it: renamed (the identity, with
// the content p describes), or copied before the input was truncated
// (logrotate's copytruncate: another identity, the content p describes).
// A file with p's identity and content is taken first; else the oldest
// file with p's content. It returns nil when no file is p's, and an error
// when a candidate cannot be read.
func (s *stream) findGeneration(p pointer.Record) (*renamedInput, error) {
	for range 3 {
		r, moved, err := s.findGenerationOnce(p)
		if err != nil || !moved {
			return r, err
		}
		// A file was renamed between the listing and its open (the next
		// rotation's shift): the file p names may now be under a name the
		// listing did not give it. List again.
	}
	return nil, fmt.Errorf("feed: looking for the file the pointer of input %s names (epoch %d, position %d): rotated files were renamed under each listing: %w",
		s.path, p.Epoch, p.Position, errUnsettled)
}

// findGenerationOnce is findGeneration over one listing; moved reports
// that a listed file had been renamed by the time it was opened (the
// result is then not to be trusted: nil, and the caller lists again).
func (s *stream) findGenerationOnce(p pointer.Record) (r *renamedInput, moved bool, err error) {
	list, err := s.siblings()
	if err != nil {
		return nil, false, err
	}
	s.log.Debug("feed: looking for the file the pointer names among the rotated files",
		"path", s.path, "files", len(list), "epoch", p.Epoch, "position", p.Position, "dev", p.Identity.Dev, "ino", p.Identity.Ino,
		"fingerprint_len", p.Fingerprint.Len, "tail_len", p.TailLen)
	var byContent *renamedInput
	var rewritten *sibling // p's identity, not p's content
	for _, sb := range list {
		if sb.live {
			continue
		}
		idMatch := sb.hasID && sb.id == p.Identity && p.Identity != (tidemark.Identity{})
		if !idMatch && byContent != nil {
			continue // an older file with p's content was found already
		}
		r, why, err := s.openGeneration(sb, p, idMatch)
		s.log.Debug("feed: looking for the file the pointer names: a rotated file",
			"path", s.path, "file", sb.name, "dev", sb.id.Dev, "ino", sb.id.Ino, "size", sb.size, "identity_matches", idMatch, "content_matches", r != nil, "why", why, "err", err)
		if err != nil {
			if byContent != nil {
				closeQuietly(s, byContent.in)
			}
			return nil, false, err
		}
		if why == whyMoved {
			if byContent != nil {
				closeQuietly(s, byContent.in)
			}
			return nil, true, nil
		}
		if r == nil {
			if idMatch {
				rewritten = &sb
			}
			continue
		}
		if idMatch {
			if byContent != nil {
				closeQuietly(s, byContent.in)
			}
			return r, false, nil
		}
		byContent = r
	}
	if byContent == nil && rewritten != nil {
		// The file p names, truncated (or rewritten) and then rotated
		// away while the source was stopped: what it holds now was
		// written since the truncation. It is read from 0 under a new
		// epoch, then the files after it; reading the path alone would
		// skip it.
		f, fi, err := s.openInput(rewritten.name)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, true, nil
		}
		if err != nil {
			return nil, false, fmt.Errorf("feed: open %s, a rotated file of input %s: %w; the next poll retries", rewritten.name, s.path, err)
		}
		h := &inputFile{f: f, name: rewritten.name}
		h.id, h.hasID = fileIdentity(fi)
		if !h.hasID || h.id != p.Identity {
			return nil, true, f.Close()
		}
		head, err := s.readHead(h, fi.Size())
		if err != nil {
			return nil, false, errors.Join(err, f.Close())
		}
		return &renamedInput{in: h, size: fi.Size(), fp: tidemark.Fingerprint{Len: len(head), Hash: pointer.HashBytes(head)}, fromStart: true}, false, nil
	}
	return byContent, false, nil
}

// findCopy looks among the rotated files for a copy of the open file's
// bytes up to the offset read: the copy logrotate's copytruncate makes
// before it truncates the input. It compares the epoch's fingerprint and
// the (up to 64) bytes before the offset read as they were read, and
// returns the copy only when it holds bytes after c.pos (the lines the
// source has not delivered), else nil. A copy shorter than the offset read
// holds nothing the source has not read (it read past the copy, up to the
// truncation).
//
// A listing that kept changing (errUnsettled) is returned: the caller
// waits for the next poll rather than read the truncated input without
// the copy's lines.
func (s *stream) findCopy(c *continuation) (*renamedInput, error) {
	p := pointer.Record{Epoch: s.epoch, Position: s.fr.off, Fingerprint: s.fp, TailLen: s.seenLen, TailHash: pointer.HashBytes(s.seen[:s.seenLen])}
	list, err := s.siblings()
	if errors.Is(err, errUnsettled) {
		return nil, err
	}
	if err != nil {
		s.log.Warn("feed: cannot list the rotated files to look for a copy of the truncated input", "path", s.path, "err", err)
		return nil, nil
	}
	for i := len(list) - 1; i >= 0; i-- { // the newest copy first
		sb := list[i]
		if sb.live || (sb.hasID && s.in.hasID && sb.id == s.in.id) || (sb.size < s.fr.off && !isCompressed(sb.name)) {
			continue
		}
		r, why, err := s.openGeneration(sb, p, false)
		s.log.Debug("feed: looking for a copy of the truncated input: a rotated file",
			"path", s.path, "file", sb.name, "size", sb.size, "content_matches", r != nil, "why", why, "err", err)
		if err != nil {
			s.log.Warn("feed: cannot read a rotated file to compare it with the truncated input", "path", s.path, "file", sb.name, "err", err)
			continue
		}
		if why == whyMoved {
			// Renamed since the listing: the copy may be under another
			// name now. The caller waits and looks again.
			return nil, fmt.Errorf("feed: looking for a copy of the truncated input %s: %s was renamed since it was listed: %w", s.path, sb.name, errUnsettled)
		}
		if r == nil {
			continue
		}
		if r.size > c.pos {
			return r, nil
		}
		closeQuietly(s, r.in)
		return nil, nil
	}
	return nil, nil
}

// openGeneration opens sb.name and checks that it holds the content p
// describes (and, with needID, that it has p's identity). It returns nil
// and why not otherwise, and an error when the file cannot be opened or
// read.
func (s *stream) openGeneration(sb sibling, p pointer.Record, needID bool) (*renamedInput, string, error) {
	name := sb.name
	if isCompressed(name) && p.Fingerprint.Len > 0 {
		// A cheap look first: decompressing a whole file to compare it is
		// done only for one that starts with the bytes p describes.
		if head, ok := s.headOf(name, p.Fingerprint.Len); !ok || len(head) < p.Fingerprint.Len || pointer.HashBytes(head) != p.Fingerprint.Hash {
			return nil, "other leading bytes", nil
		}
	}
	f, fi, err := s.openInput(name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, whyMoved, nil
		}
		if errors.Is(err, ErrNotRegular) {
			return nil, "not a regular file", nil
		}
		if errors.Is(err, errIncomplete) {
			return nil, "a compressed file not complete yet", nil
		}
		return nil, "", fmt.Errorf("feed: open %s, a rotated file of input %s: %w; the next poll retries", name, s.path, err)
	}
	h := &inputFile{f: f, name: name}
	h.id, h.hasID = fileIdentity(fi)
	if sb.hasID && (!h.hasID || h.id != sb.id) {
		// Another file has the name now.
		return nil, whyMoved, f.Close()
	}
	if needID && (!h.hasID || h.id != p.Identity) {
		return nil, whyMoved, f.Close()
	}
	size := fi.Size()
	head, err := s.readHead(h, size)
	if err != nil {
		return nil, "", errors.Join(fmt.Errorf("feed: rotated file %s of input %s: %w", name, s.path, err), f.Close())
	}
	fp := tidemark.Fingerprint{Len: len(head), Hash: pointer.HashBytes(head)}
	if why := sameContent(h, size, head, p.Position, p.Fingerprint, p.TailLen, p.TailHash); why != "" {
		return nil, why, f.Close()
	}
	return &renamedInput{in: h, size: size, fp: fp}, "", nil
}

// whyMoved is openGeneration's reason for a file renamed between the
// listing and its open: the caller lists again.
const whyMoved = "renamed since it was listed"

// closeQuietly closes h, logging a failure.
func closeQuietly(s *stream, h *inputFile) {
	if err := h.close(); err != nil {
		s.log.Warn("feed: closing a rotated file failed", "path", s.path, "file", h.name, "err", err)
	}
}
