package feed

import (
	"bytes"
	"errors"
	"io"
	"sync"
)

// DefaultMaxLineBytes is the longest line payload delivered when
// Config.MaxLineBytes is 0: 1 MiB.
const DefaultMaxLineBytes = 1 << 20

// framerBufSize is the framer's read buffer size; it grows for lines longer
// than that, up to MaxLineBytes+2, and shrinks back once they are consumed.
const framerBufSize = 64 << 10

// minFreeRead is the free space below which the framer compacts its buffer
// before a read (when it is allowed to), so that reads stay large.
const minFreeRead = 4 << 10

// errBufferFull is returned by framer.fill when the buffer has no free space
// and may not be compacted because lines returned in this poll point into it.
var errBufferFull = errors.New("feed: framer buffer full")

// skipKind says why the framer skipped bytes instead of delivering them.
type skipKind int

const (
	// skipOversize: a line longer than the maximum, skipped to its '\n'.
	skipOversize skipKind = iota
	// skipResync: the bytes before the first line start after an offset
	// that fell inside a line (a legacy pointer, a Latest start). Not a
	// rejected line.
	skipResync
)

// framer cuts a byte stream into lines ending with '\n'. It owns one read
// buffer and returns lines as slices into it: a line is valid until the
// buffer is compacted, which only happens when fill is called with
// compact set. A line without its '\n' is kept (never returned) until its
// terminator arrives. A line longer than max is skipped to its terminator
// without being buffered whole: the buffer never exceeds max(base, max+2).
type framer struct {
	buf []byte
	// r..w is the unconsumed part of buf; newlines are searched from scan
	// (r <= scan <= w): the bytes r..scan are known to hold none.
	r, w, scan int
	// off is the input offset of buf[w]: the number of bytes taken from
	// the input, counting from the framer's start offset.
	off int64
	max int
	// base is the buffer's usual size.
	base int
	// discard is set while bytes are dropped up to and including the next
	// '\n'; discardStart is the input offset of the first dropped byte.
	discard      bool
	discardKind  skipKind
	discardStart int64
	// onSkip is told of every completed skip: [start, end) of the input.
	onSkip func(kind skipKind, start, end int64)
}

// newFramer returns a framer whose first byte is at input offset off. It
// takes its read buffer at its first fill (from bufPool): a set of many
// files holds buffers only for the files it reads.
func newFramer(maxLine int, onSkip func(kind skipKind, start, end int64)) *framer {
	if maxLine <= 0 {
		maxLine = DefaultMaxLineBytes
	}
	return &framer{
		base:   framerBufSize,
		max:    maxLine,
		onSkip: onSkip,
	}
}

// reset drops everything buffered and restarts at input offset off. With
// resync set, the bytes up to and including the first '\n' are skipped.
func (f *framer) reset(off int64, resync bool) {
	f.r, f.w, f.scan = 0, 0, 0
	f.off = off
	f.discard = resync
	f.discardKind = skipResync
	f.discardStart = off
	if len(f.buf) > f.base {
		f.buf = make([]byte, f.base)
	}
}

// pos returns the input offset of buf[i].
func (f *framer) pos(i int) int64 { return f.off - int64(f.w-i) }

// position returns the input offset of the first unconsumed byte: just after
// the last line returned or skipped, or the start of a line being skipped.
func (f *framer) position() int64 {
	if f.discard {
		return f.discardStart
	}
	return f.pos(f.r)
}

// pending returns how many bytes of an unterminated line the framer holds or
// has dropped while skipping: they are not part of any line returned yet.
func (f *framer) pending() int64 { return f.off - f.position() }

// frame fills items with the complete lines buffered, setting Line and
// Position only, and returns how many it filled.
func (f *framer) frame(items []Item) int {
	n := 0
	for n < len(items) {
		if f.discard {
			i := bytes.IndexByte(f.buf[f.r:f.w], '\n')
			if i < 0 {
				f.r, f.scan = f.w, f.w
				return n
			}
			f.r += i + 1
			f.scan = f.r
			f.discard = false
			if f.onSkip != nil {
				f.onSkip(f.discardKind, f.discardStart, f.pos(f.r))
			}
			continue
		}
		i := bytes.IndexByte(f.buf[f.scan:f.w], '\n')
		if i < 0 {
			f.scan = f.w
			if f.w-f.r > f.max+1 {
				// Whatever follows, the payload exceeds max: drop what is
				// buffered and skip to the terminator.
				f.discard = true
				f.discardKind = skipOversize
				f.discardStart = f.pos(f.r)
				f.r = f.w
				continue
			}
			return n
		}
		e := f.scan + i
		line := f.buf[f.r:e:e]
		if len(line) > 0 && line[len(line)-1] == '\r' {
			line = line[: len(line)-1 : len(line)-1]
		}
		start := f.pos(f.r)
		f.r = e + 1
		f.scan = f.r
		if len(line) > f.max {
			if f.onSkip != nil {
				f.onSkip(skipOversize, start, f.pos(f.r))
			}
			continue
		}
		items[n].Line = line
		items[n].Position = f.pos(f.r)
		n++
	}
	return n
}

// bufPool holds read buffers of framerBufSize given up by idle framers.
var bufPool = sync.Pool{New: func() any { b := make([]byte, framerBufSize); return &b }}

// release gives the read buffer up while nothing is buffered (a file of a
// set that is idle: a set of many files holds a buffer only for those
// being read); the next fill takes one again. The lines returned by frame
// must not be in use any more.
func (f *framer) release() {
	if f.buf == nil || f.r != f.w {
		return
	}
	if len(f.buf) == framerBufSize {
		b := f.buf
		bufPool.Put(&b)
	}
	f.buf = nil
	f.r, f.w, f.scan = 0, 0, 0
}

// fill reads once from rd into the buffer and returns how many bytes it
// read. With compact set, no line returned by frame is in use any more, so
// the buffer may be compacted, grown or shrunk; without it, fill only reads
// into the free space after the buffered bytes (growing keeps old lines
// valid, but is only done when compacting) and returns errBufferFull when
// there is none.
func (f *framer) fill(rd io.Reader, compact bool) (int, error) {
	if f.buf == nil {
		f.buf = *bufPool.Get().(*[]byte)
		f.r, f.w, f.scan = 0, 0, 0
	}
	if compact {
		f.makeRoom()
	}
	if f.w == len(f.buf) {
		return 0, errBufferFull
	}
	n, err := rd.Read(f.buf[f.w:])
	if n < 0 || n > len(f.buf)-f.w {
		return 0, errors.New("feed: reader returned an invalid count")
	}
	f.w += n
	f.off += int64(n)
	return n, err
}

// unfill takes back the last n bytes fill read (not framed yet): the
// input is read again from fr.off once it has been sought there.
func (f *framer) unfill(n int) {
	f.w -= n
	f.off -= int64(n)
}

// makeRoom compacts, grows or shrinks the buffer so that a read has room.
func (f *framer) makeRoom() {
	if f.r == f.w {
		f.r, f.w, f.scan = 0, 0, 0
	}
	pending := f.w - f.r
	if len(f.buf) > f.base && pending <= f.base/2 {
		// A long line was consumed: give the large buffer back.
		nb := make([]byte, f.base)
		f.moveTo(nb)
		return
	}
	if len(f.buf)-f.w >= minFreeRead || (f.w < len(f.buf) && f.r == 0) {
		return
	}
	if f.r > 0 {
		f.moveTo(f.buf)
		return
	}
	// The buffer is full of one unterminated line of at most max+1 bytes
	// (frame starts skipping beyond that): grow it, up to max+2.
	nb := make([]byte, max(len(f.buf)+1, min(2*len(f.buf), f.max+2)))
	f.moveTo(nb)
}

// moveTo moves the unconsumed bytes to the start of nb and makes nb the
// buffer.
func (f *framer) moveTo(nb []byte) {
	n := copy(nb, f.buf[f.r:f.w])
	f.scan -= f.r
	f.r, f.w = 0, n
	f.buf = nb
}
