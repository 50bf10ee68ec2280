package feed

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"sync"
	"time"

	"github.com/tidemark-go/tidemark/vfs"
)

// A file whose name ends in ".gz" is read decompressed: a rotated file that
// logrotate compressed, or a compressed input. Positions are offsets in the
// decompressed stream, so a restart resumes inside it (decompressing, and
// dropping, the bytes before the position), and the fingerprint and the
// tail hash are of decompressed bytes: a file compressed after it was
// (partly) read is recognised by its content.
//
// A compressed file is read only once it is complete: at its open it is
// decompressed to its end once, and one that ends early (still being
// written by gzip) or does not verify (its checksum) is not read
// (errIncomplete). Among rotated files, name.gz is not even looked at
// while name exists (see siblings).

// errIncomplete is the error of the open of a compressed file that does
// not decompress to a valid end: still being written, or damaged.
var errIncomplete = errors.New("feed: compressed file not complete")

// isCompressed reports whether name is read decompressed.
func isCompressed(name string) bool { return strings.HasSuffix(name, ".gz") }

// gzRing is how many of the last decompressed bytes a gzFile keeps, so
// that reading back the bytes just before the offset read (the rewrite
// check, a tail hash) costs no decompression.
const gzRing = 64 << 10

// gzFile is a compressed file read decompressed: a vfs.File whose reads,
// seeks and size are those of the decompressed stream. It cannot be
// written. ReadAt outside the bytes it keeps decompresses again from the
// start (a store's TailHash far behind the reading, rare).
type gzFile struct {
	raw     vfs.File
	rawSize int64 // the compressed size that was verified
	size    int64 // the decompressed size
	info    fs.FileInfo

	mu   sync.Mutex
	zr   *gzip.Reader
	off  int64  // decompressed offset of the next Read
	ring []byte // the decompressed bytes just before off (at most gzRing)
	err  error  // a decompression error met by Read
}

// openGzip verifies the compressed file raw (fi its Stat) by decompressing
// it to its end, and returns it as a gzFile positioned at 0. The error
// wraps errIncomplete when it does not decompress to a valid end.
func openGzip(raw vfs.File, fi fs.FileInfo) (*gzFile, error) {
	g := &gzFile{raw: raw, rawSize: fi.Size(), info: fi}
	zr, err := gzip.NewReader(io.NewSectionReader(raw, 0, g.rawSize))
	if err == nil {
		g.size, err = io.Copy(io.Discard, zr)
	}
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, gzip.ErrChecksum) || errors.Is(err, gzip.ErrHeader) {
			return nil, fmt.Errorf("%w: %s (%d bytes): %v", errIncomplete, raw.Name(), g.rawSize, err)
		}
		return nil, fmt.Errorf("feed: decompress %s: %w", raw.Name(), err)
	}
	if err := g.rewind(); err != nil {
		return nil, err
	}
	return g, nil
}

// rewind restarts the decompression at offset 0. Under g.mu, or before g
// is shared.
func (g *gzFile) rewind() error {
	sr := io.NewSectionReader(g.raw, 0, g.rawSize)
	var err error
	if g.zr == nil {
		g.zr, err = gzip.NewReader(sr)
	} else {
		err = g.zr.Reset(sr)
	}
	g.off, g.ring, g.err = 0, g.ring[:0], nil
	if err != nil {
		return fmt.Errorf("feed: decompress %s: %w", g.raw.Name(), err)
	}
	return nil
}

// Read reads decompressed bytes.
func (g *gzFile) Read(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.read(p)
}

func (g *gzFile) read(p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	n, err := g.zr.Read(p)
	if n > 0 {
		g.off += int64(n)
		g.keep(p[:n])
	}
	if err != nil && !errors.Is(err, io.EOF) {
		g.err = fmt.Errorf("feed: decompress %s at offset %d: %w", g.raw.Name(), g.off, err)
		return n, g.err
	}
	return n, err
}

// keep appends b to the ring of the last bytes read.
func (g *gzFile) keep(b []byte) {
	if len(b) >= gzRing {
		g.ring = append(g.ring[:0], b[len(b)-gzRing:]...)
		return
	}
	if over := len(g.ring) + len(b) - gzRing; over > 0 {
		g.ring = g.ring[:copy(g.ring, g.ring[over:])]
	}
	g.ring = append(g.ring, b...)
}

// ReadAt reads decompressed bytes at off: from the bytes kept when they
// are there, else by decompressing again from the start.
func (g *gzFile) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("feed: read %s at negative offset %d", g.raw.Name(), off)
	}
	g.mu.Lock()
	first := g.off - int64(len(g.ring))
	if off >= first && off+int64(len(p)) <= g.off {
		n := copy(p, g.ring[off-first:])
		g.mu.Unlock()
		return n, nil
	}
	g.mu.Unlock()
	zr, err := gzip.NewReader(io.NewSectionReader(g.raw, 0, g.rawSize))
	if err != nil {
		return 0, fmt.Errorf("feed: decompress %s: %w", g.raw.Name(), err)
	}
	if _, err := io.CopyN(io.Discard, zr, off); err != nil {
		if errors.Is(err, io.EOF) {
			return 0, io.EOF
		}
		return 0, fmt.Errorf("feed: decompress %s to offset %d: %w", g.raw.Name(), off, err)
	}
	n, err := io.ReadFull(zr, p)
	if errors.Is(err, io.ErrUnexpectedEOF) {
		err = io.EOF
	}
	return n, err
}

// Seek positions the next Read at the decompressed offset offset (from the
// start only), decompressing the bytes before it.
func (g *gzFile) Seek(offset int64, whence int) (int64, error) {
	if whence != io.SeekStart || offset < 0 {
		return 0, fmt.Errorf("feed: seek %s: only to an offset from the start", g.raw.Name())
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if offset < g.off {
		if err := g.rewind(); err != nil {
			return 0, err
		}
	}
	var buf [32 << 10]byte
	for g.off < offset {
		n, err := g.read(buf[:min(int64(len(buf)), offset-g.off)])
		if n == 0 && err != nil {
			if errors.Is(err, io.EOF) {
				return g.off, nil
			}
			return g.off, err
		}
	}
	return g.off, nil
}

// Stat returns the compressed file's information with the decompressed
// size.
func (g *gzFile) Stat() (fs.FileInfo, error) {
	fi, err := g.raw.Stat()
	if err != nil {
		return nil, err
	}
	return gzInfo{FileInfo: fi, size: g.size}, nil
}

// Name returns the compressed file's name.
func (g *gzFile) Name() string { return g.raw.Name() }

// Close closes the compressed file.
func (g *gzFile) Close() error { return g.raw.Close() }

var errReadOnly = errors.New("feed: a compressed input is read only")

func (g *gzFile) Write([]byte) (int, error)          { return 0, errReadOnly }
func (g *gzFile) WriteAt([]byte, int64) (int, error) { return 0, errReadOnly }
func (g *gzFile) Sync() error                        { return errReadOnly }
func (g *gzFile) Datasync() error                    { return errReadOnly }
func (g *gzFile) Truncate(int64) error               { return errReadOnly }
func (g *gzFile) Lock() error                        { return errReadOnly }

// gzInfo is a compressed file's information with its decompressed size.
type gzInfo struct {
	fs.FileInfo
	size int64
}

func (i gzInfo) Size() int64        { return i.size }
func (i gzInfo) ModTime() time.Time { return i.FileInfo.ModTime() }

// headOf returns the first n decompressed (for a compressed file) bytes of
// the file name, or fewer when it is shorter; ok is false when it cannot
// be read. It is a cheap look at a rotated file before a full open.
func (s *stream) headOf(name string, n int) ([]byte, bool) {
	f, err := s.fs.Open(name)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	var rd io.Reader = f
	if isCompressed(name) {
		fi, err := f.Stat()
		if err != nil {
			return nil, false
		}
		zr, err := gzip.NewReader(io.NewSectionReader(f, 0, fi.Size()))
		if err != nil {
			return nil, false
		}
		rd = zr
	}
	b := make([]byte, n)
	m, err := io.ReadFull(rd, b)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, false
	}
	return b[:m], true
}
