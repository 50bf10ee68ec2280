package feed

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/feed/pointer"
	"github.com/tidemark-go/tidemark/vfs"
)

// reader is the open file of a stream and its framing: the file, the
// framer that cuts what is read from it into lines, and the bytes kept to
// recognise the file (its first bytes, the bytes just before the offset
// read). It reads nothing by itself: the stream's read loop fills the
// framer and notes each read here.
//
// Invariants:
//
//   - fr.off is the offset in the open file of the next byte to read, and
//     fr.position() the offset just after the last line returned or
//     skipped: a line start, the only positions ever committed;
//   - seen holds the last seenLen (at most 64) bytes before fr.off exactly
//     as they were read (not as the file holds them now), so that a file
//     rewritten in place under the reader is recognised by them;
//   - the framer's buffer bytes [0, w) are the file's bytes
//     [fr.off-w, fr.off) as read: readBytes serves them without a read.
type reader struct {
	in    *inputFile // the open input; nil while waiting for it
	fr    *framer
	size  int64 // last size seen by stat
	atEOF bool  // the last read of the open file found its end

	head [maxFPLen]byte   // the first bytes of a file being opened
	tail [maxTailLen]byte // scratch for a tail hash read back

	seen    [maxTailLen]byte
	seenLen int
	scratch [maxTailLen]byte
	// headCheck: the first read since the open file was begun must find
	// its first bytes still those fingerprinted when it was opened (fp):
	// a read at 0 has no bytes before it to look at.
	headCheck bool
}

// inputFile is the open input. Its Origin's TailHash reads it concurrently
// with the source, so closing takes the lock.
type inputFile struct {
	mu    sync.RWMutex
	f     vfs.File // nil once closed
	name  string
	id    tidemark.Identity
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
	return pointer.HashBytes(b), nil
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

// openInput opens name for reading, and only when it is a regular file
// (a compressed file, name.gz, is returned as its decompressed stream, and
// only once complete: else the error wraps errIncomplete)
// (symbolic links followed). It stats the path first, so that a FIFO or a
// device is never opened; it opens with O_NONBLOCK, so that a path that
// becomes a FIFO between the stat and the open does not block the open;
// and it checks the opened file again (fstat) before it returns it. The
// error of anything but a regular file wraps ErrNotRegular; that of a
// missing file wraps fs.ErrNotExist.
func (s *stream) openInput(name string) (vfs.File, fs.FileInfo, error) {
	return openRegular(s.fs, name)
}

// openRegular is openInput on fsys.
func openRegular(fsys vfs.FS, name string) (vfs.File, fs.FileInfo, error) {
	if fi, err := fsys.Stat(name); err == nil && !fi.Mode().IsRegular() {
		return nil, nil, notRegular(name, fi.Mode())
	}
	f, err := fsys.OpenFile(name, os.O_RDONLY|openNonblock, 0)
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
	if isCompressed(name) {
		// Read decompressed, once complete (see gz.go).
		g, err := openGzip(f, fi)
		if err != nil {
			return nil, nil, errors.Join(err, f.Close())
		}
		gfi, err := g.Stat()
		if err != nil {
			return nil, nil, errors.Join(fmt.Errorf("feed: stat input %s: %w; the next poll retries", name, err), f.Close())
		}
		return g, gfi, nil
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

// readHead reads the first min(4096, size) bytes of h into r.head.
func (r *reader) readHead(h *inputFile, size int64) ([]byte, error) {
	b := r.head[:min(int64(len(r.head)), size)]
	n, err := h.f.ReadAt(b, 0)
	if err != nil && !(errors.Is(err, io.EOF) && n < len(b)) {
		return nil, fmt.Errorf("feed: read the first %d bytes of input %s: %w; the next poll retries", len(b), h.name, err)
	}
	return b[:n], nil
}

// noteRead keeps the last (up to 64) bytes read, b being the bytes just
// read: one copy per read of the input, none per line.
func (r *reader) noteRead(b []byte) {
	if len(b) >= maxTailLen {
		r.seenLen = copy(r.seen[:], b[len(b)-maxTailLen:])
		return
	}
	keep := min(r.seenLen, maxTailLen-len(b))
	copy(r.seen[:keep], r.seen[r.seenLen-keep:r.seenLen])
	r.seenLen = keep + copy(r.seen[keep:], b)
}

// unchanged reports whether the open file still holds, just before the
// offset read, the bytes read there (one read of up to 64 bytes).
func (r *reader) unchanged() (bool, error) {
	return r.unchangedBefore(r.fr.off)
}

// unchangedBefore reports whether the open file holds, just before off,
// the bytes seen holds (one read of up to 64 bytes): seen must be the
// bytes read before off (noteRead not yet told of any read after it).
func (r *reader) unchangedBefore(off int64) (bool, error) {
	if r.seenLen == 0 {
		return true, nil
	}
	b := r.scratch[:r.seenLen]
	n, err := r.in.f.ReadAt(b, off-int64(len(b)))
	if n < len(b) {
		if err == nil || errors.Is(err, io.EOF) {
			return false, nil // shorter than what was read
		}
		return false, fmt.Errorf("feed: read the %d bytes of input %s before offset %d: %w; the next poll retries", len(b), r.in.name, off, err)
	}
	return bytes.Equal(b, r.seen[:r.seenLen]), nil
}

// readVerified reports whether the got bytes the framer's last fill read
// at the end of its buffer were read from the content the reader had been
// reading: the bytes just before them, looked at again after the read,
// are still those read there before it. A writer that truncates the file
// and fills it again past the offset read (copytruncate, a rewrite in
// place) between any look at the file and the read would otherwise lend
// the new content's bytes to old offsets in the old epoch: a fragment of
// a line, then lines at the wrong positions, and the new content's first
// lines never read. Looking before the read cannot close that window;
// looking after it does, because a writer appends in order: bytes of the
// new content at the offset read mean that the bytes before it were
// rewritten first. One read of up to 64 bytes per read of the file (up to
// 64 KiB), none per line. A compressed file is not checked: it is read
// complete, and a change of it is a new file (see check).
//
// The first read after the file was opened (or read again from 0) also
// reads the file's first bytes, and compares them with the fingerprint
// taken when it was opened (fp, up to 4096 bytes): a read at 0 has no
// bytes before it, and the file may have been truncated and filled again
// between the open, which decided where to read it and in which epoch,
// and that read. One read of up to 4 KiB per file opened.
func (r *reader) readVerified(got int, fp tidemark.Fingerprint) (bool, error) {
	if _, gz := r.in.f.(*gzFile); gz {
		return true, nil
	}
	if r.headCheck && fp.Len > 0 {
		b := r.head[:fp.Len]
		n, err := r.in.f.ReadAt(b, 0)
		if n < len(b) {
			if err == nil || errors.Is(err, io.EOF) {
				return false, nil // shorter than its first bytes were
			}
			return false, fmt.Errorf("feed: read the first %d bytes of input %s: %w; the next poll retries", len(b), r.in.name, err)
		}
		if pointer.HashBytes(b) != fp.Hash {
			return false, nil
		}
	}
	r.headCheck = false
	return r.unchangedBefore(r.fr.off - int64(got))
}

// readBytes returns the n bytes at input offset off when the framer's
// buffer still holds them as they were read: its bytes [0, w) are those of
// the input [off-w, off).
func (r *reader) readBytes(off int64, n int) ([]byte, bool) {
	f := r.fr
	first := f.off - int64(f.w)
	if n < 0 || off < first || off+int64(n) > f.off {
		return nil, false
	}
	i := int(off - first)
	return f.buf[i : i+n], true
}

// fileIdentity returns the device and inode of fi, and whether the platform
// provides them; where it does not (Windows), only the fingerprint, the
// tail hash and the size decide whether a file changed.
func fileIdentity(fi fs.FileInfo) (tidemark.Identity, bool) {
	dev, ino, ok := vfs.FileID(fi)
	return tidemark.Identity{Dev: dev, Ino: ino}, ok
}
