package pointer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/vfs"
)

// Suffix is appended to the input's path to name its pointer file.
const Suffix = ".readPointer"

// Path returns the path of the pointer file of input: in dir when dir is
// not empty (dir/<base of input>.readPointer), else beside the input
// (input+".readPointer").
func Path(input, dir string) string {
	if dir == "" {
		return input + Suffix
	}
	return filepath.Join(dir, filepath.Base(input)+Suffix)
}

// TempSuffix is appended to a pointer file's path to name the
// temporary file through which a pointer file is created or replaced. A
// leftover temporary file is never read: [File.Load] removes it.
const TempSuffix = ".tmp"

// The sizes and limits of the pointer file format, version 1.
const (
	// RecordSize is the size of one encoded record.
	RecordSize = 80
	// SlotSize is the distance between the two slots of a pointer
	// file: a record starts at offset 0 or SlotSize.
	SlotSize = 4096
	// FileSize is the size of a pointer file: two slots.
	FileSize = 2 * SlotSize
	// Version is the format version this package writes.
	Version = 1
	// MaxFingerprintLen is the largest Fingerprint.Len a record holds.
	MaxFingerprintLen = 4096
	// MaxTailLen is the largest Record.TailLen a record holds.
	MaxTailLen = 64
	// LegacySize is the size of a pointer file written by the
	// product tidemark replaces.
	LegacySize = 1024
	// minFileSize: a shorter pointer file is treated as absent.
	minFileSize = 8
)

// pointerMagic opens every record: "TDMP" (tidemark pointer).
var pointerMagic = [4]byte{'T', 'D', 'M', 'P'}

// crcTable is the CRC-32C (Castagnoli) table, built once.
var crcTable = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt is wrapped by errors of a pointer record that does not
// verify (bad magic, checksum, length or version).
var ErrCorrupt = errors.New("feed: corrupt pointer record")

// ErrClosed is returned by a [File] used after Close.
var ErrClosed = errors.New("feed: pointer file closed")

// ErrLocked is wrapped by the error of [File.Lock] when another open file
// holds the pointer file's lock: another source, in this process or
// another, or the tidemark pointer tool. The feed package names it
// feed.ErrPointerLocked (the same value).
var ErrLocked = errors.New("feed: pointer file is locked by another source")

// ErrInvalid is returned by [File.Store] for a pointer that
// cannot be encoded (a negative position, or a fingerprint or tail length
// out of range).
var ErrInvalid = errors.New("feed: invalid pointer")

// Record is the content of a pointer record.
type Record struct {
	// Epoch names the position space (see NewEpoch).
	Epoch uint64
	// Position is the byte offset just after the last committed line's
	// terminator; never negative.
	Position int64
	// Identity is the input file's device and inode when it was opened.
	Identity tidemark.Identity
	// Fingerprint covers the input's leading bytes (up to 4096).
	Fingerprint tidemark.Fingerprint
	// TailLen and TailHash cover the bytes just before Position (up to 64).
	TailLen  int
	TailHash uint64
}

// SyncPolicy decides when a pointer write is made durable. Whatever the
// policy, the pointer on disk only ever lags the pointer stored: a power loss
// or an operating system crash costs re-delivery of the lines committed
// since the last durable record, never a gap. A process crash (kill -9)
// costs nothing under any policy: the operating system still holds every
// completed write.
type SyncPolicy int

// The sync policies.
const (
	// SyncEveryCommit makes every Store durable (one fdatasync) before it
	// returns. A power loss loses no stored commit. The zero value.
	SyncEveryCommit SyncPolicy = iota
	// SyncInterval makes a Store durable at most once every
	// Options.SyncInterval: a Store within the interval after the
	// last sync only writes; the first Store or SyncIfDue after the
	// interval, Sync, or Close makes it durable. There is no background
	// goroutine: a caller that may pause calls SyncIfDue when idle. A power
	// loss costs re-delivery of the lines committed since the last sync (at
	// most one interval, plus the time to the next Store or SyncIfDue).
	// Writes between syncs go to the same slot, so the record of the last
	// sync is never overwritten before the next sync.
	SyncInterval
	// SyncNever never calls fdatasync after the file's creation: the
	// operating system writes the file back on its own schedule (typically
	// within 30 s on Linux). Writes alternate between the slots. A power
	// loss usually costs re-delivery of what was committed since the last
	// write-back; in the worst case (both slots torn by the power loss) no
	// record survives and the input is read again from 0 under a new epoch.
	SyncNever
)

// String returns the policy's name.
func (p SyncPolicy) String() string {
	switch p {
	case SyncEveryCommit:
		return "every commit"
	case SyncInterval:
		return "interval"
	case SyncNever:
		return "never"
	}
	return fmt.Sprintf("SyncPolicy(%d)", int(p))
}

// DefaultSyncInterval is the interval of [SyncInterval] when
// Options.SyncInterval is not positive.
const DefaultSyncInterval = 100 * time.Millisecond

// Encode appends p's record to dst. The record's write sequence is 0;
// [File] writes its own. It does not check p: see [File.Store]
// for the limits.
func Encode(dst []byte, p Record) []byte { return appendRecord(dst, p, 0) }

// appendRecord appends p's record with write sequence seq to dst.
func appendRecord(dst []byte, p Record, seq uint64) []byte {
	start := len(dst)
	dst = append(dst, pointerMagic[:]...)
	dst = binary.LittleEndian.AppendUint16(dst, Version)
	dst = binary.LittleEndian.AppendUint16(dst, RecordSize)
	dst = binary.LittleEndian.AppendUint64(dst, seq)
	dst = binary.LittleEndian.AppendUint64(dst, p.Epoch)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(p.Position))
	dst = binary.LittleEndian.AppendUint64(dst, p.Identity.Dev)
	dst = binary.LittleEndian.AppendUint64(dst, p.Identity.Ino)
	dst = binary.LittleEndian.AppendUint64(dst, p.Fingerprint.Hash)
	dst = binary.LittleEndian.AppendUint64(dst, p.TailHash)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(p.Fingerprint.Len))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(p.TailLen))
	dst = binary.LittleEndian.AppendUint32(dst, 0) // reserved
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[start:], crcTable))
}

// Decode decodes the record at the start of b; bytes after the
// record are ignored. Its errors wrap [ErrCorrupt].
func Decode(b []byte) (Record, error) {
	p, _, err := decodeRecord(b)
	return p, err
}

// checkPointer reports why p cannot be stored, or nil.
func checkPointer(p Record) error {
	switch {
	case p.Position < 0:
		return fmt.Errorf("negative position %d", p.Position)
	case p.Fingerprint.Len < 0 || p.Fingerprint.Len > MaxFingerprintLen:
		return fmt.Errorf("fingerprint length %d outside 0..%d", p.Fingerprint.Len, MaxFingerprintLen)
	case p.TailLen < 0 || p.TailLen > MaxTailLen:
		return fmt.Errorf("tail length %d outside 0..%d", p.TailLen, MaxTailLen)
	case int64(p.TailLen) > p.Position:
		return fmt.Errorf("tail length %d beyond position %d", p.TailLen, p.Position)
	}
	return nil
}

// decodeRecord decodes the record at the start of b and its write sequence.
func decodeRecord(b []byte) (Record, uint64, error) {
	if len(b) < 8 {
		return Record{}, 0, fmt.Errorf("%w: %d bytes, shorter than a record header", ErrCorrupt, len(b))
	}
	if [4]byte(b[:4]) != pointerMagic {
		return Record{}, 0, fmt.Errorf("%w: bad magic %q", ErrCorrupt, b[:4])
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != Version {
		return Record{}, 0, fmt.Errorf("%w: unknown version %d (this build reads version %d)", ErrCorrupt, v, Version)
	}
	if n := binary.LittleEndian.Uint16(b[6:]); n != RecordSize {
		return Record{}, 0, fmt.Errorf("%w: record length %d, want %d", ErrCorrupt, n, RecordSize)
	}
	if len(b) < RecordSize {
		return Record{}, 0, fmt.Errorf("%w: truncated: %d of %d bytes", ErrCorrupt, len(b), RecordSize)
	}
	b = b[:RecordSize]
	body := b[:RecordSize-4]
	if want, got := binary.LittleEndian.Uint32(b[RecordSize-4:]), crc32.Checksum(body, crcTable); want != got {
		return Record{}, 0, fmt.Errorf("%w: checksum mismatch (stored %08x, computed %08x)", ErrCorrupt, want, got)
	}
	le := binary.LittleEndian
	seq := le.Uint64(b[8:])
	p := Record{
		Epoch:       le.Uint64(b[16:]),
		Position:    int64(le.Uint64(b[24:])),
		Identity:    tidemark.Identity{Dev: le.Uint64(b[32:]), Ino: le.Uint64(b[40:])},
		Fingerprint: tidemark.Fingerprint{Hash: le.Uint64(b[48:])},
		TailHash:    le.Uint64(b[56:]),
	}
	fpLen, tailLen, reserved := le.Uint32(b[64:]), le.Uint32(b[68:]), le.Uint32(b[72:])
	if reserved != 0 {
		return Record{}, 0, fmt.Errorf("%w: reserved field is %08x, want 0", ErrCorrupt, reserved)
	}
	if fpLen > MaxFingerprintLen || tailLen > MaxTailLen {
		return Record{}, 0, fmt.Errorf("%w: fingerprint length %d or tail length %d out of range", ErrCorrupt, fpLen, tailLen)
	}
	p.Fingerprint.Len, p.TailLen = int(fpLen), int(tailLen)
	if err := checkPointer(p); err != nil {
		return Record{}, 0, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return p, seq, nil
}

// Options configures a File.
type Options struct {
	// FS is the file system; nil means vfs.Default().
	FS vfs.FS
	// Sync is when a Store is made durable. An unknown value acts as
	// SyncEveryCommit.
	Sync SyncPolicy
	// SyncInterval is the interval of SyncInterval; not positive means
	// DefaultSyncInterval.
	SyncInterval time.Duration
	// Logger receives warnings (a removed temporary file); nil means
	// slog.Default().
	Logger *slog.Logger
}

// LoadResult is what Load found.
type LoadResult struct {
	Record  Record
	Found   bool // a valid current-format record was found
	Missing bool // no pointer file
	// Empty: the file exists and is empty. A source creates its pointer
	// file empty to lock it (see [File.Lock]), so an empty file is
	// what a source stopped before its first write leaves: it holds no
	// record, like a missing file, and is no sign of damage.
	Empty  bool
	Legacy bool   // a legacy 1024-byte pointer; Record.Position holds its count, Epoch is 0
	Reason string // why a present file gave no valid record, or which slot was used
}

// File is the durable pointer of one input: a file of two fixed-size
// slots, each holding one checksummed record, written alternately in place.
//
// # Format (version 1)
//
// The file is FileSize (8192) bytes: slot A at offset 0 and slot B
// at offset 4096, each a RecordSize (80) byte record followed by
// zeros up to the next slot. All integers are little-endian.
//
//	offset  size  field
//	     0     4  magic "TDMP" (54 44 4d 50)
//	     4     2  version, 1
//	     6     2  record length, 80
//	     8     8  write sequence: one more than the previous write
//	    16     8  epoch
//	    24     8  position (signed, >= 0): the byte offset after a line's '\n'
//	    32     8  identity: device
//	    40     8  identity: inode
//	    48     8  fingerprint hash: HashBytes of the input's first Len bytes
//	    56     8  tail hash: HashBytes of the TailLen bytes before position
//	    64     4  fingerprint length (0..4096)
//	    68     4  tail length (0..64, at most position)
//	    72     4  reserved, 0
//	    76     4  CRC-32C (Castagnoli) of bytes 0..75
//
//	 0            80                4096           4176               8192
//	 +------------+-----------------+--------------+------------------+
//	 | record A   | zeros           | record B     | zeros            |
//	 +------------+-----------------+--------------+------------------+
//
// Load decodes both slots and uses the valid record with the higher write
// sequence. A slot that does not verify (torn, zeros, bit rot, unknown
// version) is skipped; when neither verifies the pointer is not found and
// LoadResult.Reason says why.
//
// # Why two slots
//
// A Store writes the new record over the slot that does not hold the last
// durable record, then makes it durable with one fdatasync. A write torn at
// any byte by a power loss leaves the other slot, the last durable record,
// intact, so Load falls back to it: the position only ever lags. Because
// the file keeps its size, fdatasync has no metadata to write, and a commit
// costs one small in-place write and one fdatasync. The usual alternative,
// write a temporary file, fsync it, rename it over the pointer and fsync the
// directory, costs a file creation, an fsync with metadata, a rename and a
// directory fsync per commit, and leaves temporary files behind after a
// crash. After a failed write or fdatasync the slot written is of unknown
// content; the next Store writes the same slot again, never the one holding
// the last durable record.
//
// The file is created, or replaced when it holds no valid record of this
// format (absent, empty, legacy, corrupt), the careful way: the full
// 8192-byte image is written to path+".tmp", fdatasynced, renamed over path,
// and the parent directory is synced. A crash during that leaves the old
// file (or none) in place and a temporary file that Load removes.
//
// # Legacy files
//
// A file of exactly 1024 bytes whose first four bytes are not the magic is
// the pointer of the product tidemark replaces: a big-endian signed 64-bit
// count of UTF-16 code units at offset 0. Load returns it with Legacy set and
// the count in Record.Position; the file source resolves it to a line start
// and stores a record of this format under a new epoch.
//
// A File is safe for concurrent use, but Store is meant to be called
// by one goroutine.
type File struct {
	writer // path, policy, mu, closed, pending; Path, Sync, SyncIfDue

	// f is the pointer file open for reading and writing in place; nil
	// until prepared, or when the file must be (re)created first.
	f vfs.File
	// prepared is set once the write state below has been read from disk.
	// It is never reset after a failed write or sync: the page cache may
	// then show a record that is not durable.
	prepared bool
	// seq is the highest write sequence read or written.
	seq uint64
	// keep is the slot the next in-place write must not touch: it holds the
	// last durable record (under SyncNever, the last written one).
	keep int
	// last is the last record written successfully (or loaded), for the
	// forward-only rule.
	last     Record
	haveLast bool
	buf      [RecordSize]byte
}

// Open prepares the pointer file at path; it does not read it.
func Open(path string, opts Options) *File {
	pf := &File{writer: newWriter(path, opts)}
	pf.flush = pf.sync
	return pf
}

// withDefaults returns opts with its zero fields set to their defaults.
func (opts Options) withDefaults() Options {
	if opts.FS == nil {
		opts.FS = vfs.Default()
	}
	if opts.SyncInterval <= 0 {
		opts.SyncInterval = DefaultSyncInterval
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return opts
}

// slotState is what one slot of a file held.
type slotState struct {
	p     Record
	seq   uint64
	valid bool
	err   error
}

// fileState is what a pointer file held.
type fileState struct {
	size  int64
	slots [2]slotState
	best  int // index of the valid slot with the higher sequence, or -1
}

// errEmptySlot is the error of a slot of NUL bytes: never written.
var errEmptySlot = fmt.Errorf("%w: empty slot", ErrCorrupt)

// readState reads the slots of an open pointer file.
func readState(f vfs.File) (fileState, []byte, error) {
	info, err := f.Stat()
	if err != nil {
		return fileState{best: -1}, nil, err
	}
	size := info.Size()
	data := make([]byte, min(max(size, 0), FileSize))
	if len(data) > 0 {
		m, err := f.ReadAt(data, 0)
		switch {
		case m == len(data):
		case errors.Is(err, io.EOF):
			data = data[:m] // the file shrank under us: decode what is there
		default:
			return fileState{best: -1}, nil, err
		}
	}
	return parseState(data, size), data, nil
}

// parseState decodes the slots of a pointer file of size bytes whose first
// bytes are data.
func parseState(data []byte, size int64) fileState {
	st := fileState{size: size, best: -1}
	for i := range st.slots {
		off := i * SlotSize
		s := &st.slots[i]
		if off >= len(data) {
			s.err = fmt.Errorf("%w: slot beyond the end of the file", ErrCorrupt)
			continue
		}
		rec := data[off:min(len(data), off+RecordSize)]
		if allZero(rec) {
			s.err = errEmptySlot
			continue
		}
		s.p, s.seq, s.err = decodeRecord(rec)
		s.valid = s.err == nil
		if s.valid && (st.best < 0 || s.seq > st.slots[st.best].seq) {
			st.best = i
		}
	}
	return st
}

func slotName(i int) byte { return 'A' + byte(i) }

// maxLockTries bounds how often Lock opens the path again when the file
// it locked is no longer the one at the path.
const maxLockTries = 8

// Lock takes the pointer file's lock, so that one writer at a time uses
// it: an exclusive OS lock (flock on Unix) on the file, held until Close,
// and released by the operating system when the process dies (no stale
// lock to clean up after a kill -9). A missing file is created empty to be
// locked (an empty file loads as [LoadResult].Empty: no record yet); its
// folder must exist. Once locked, a Store that creates or replaces the
// file locks the new file before renaming it over the path, so the file
// at the path is locked at every moment. Close removes an empty file that
// Lock created, when nothing was written to it.
//
// When another open file holds the lock (another source, in this process
// or another, or tidemark pointer set), the error wraps
// [ErrLocked] and a *vfs.LockedError, and names the file and,
// where the operating system tells (Linux), the holder's process ID. On a
// platform without file locks, Lock logs a warning and returns nil: one
// writer per pointer is then not enforced. Taking the lock again is a
// no-op.
func (pf *File) Lock() error {
	pf.mu.Lock()
	defer pf.mu.Unlock()
	if pf.closed {
		return ErrClosed
	}
	if pf.lockf != nil {
		return nil
	}
	for try := 1; ; try++ {
		f, made, err := pf.openToLock()
		if err != nil {
			return err
		}
		if err := f.Lock(); err != nil {
			f.Close()
			var le *vfs.LockedError
			switch {
			case errors.As(err, &le):
				return fmt.Errorf("%w: %w; one feed at a time may follow a pointer file: stop the feed that holds it first, or give this one a pointer file of its own (a pointer folder of its own: PointerDir)",
					ErrLocked, le)
			case errors.Is(err, errors.ErrUnsupported):
				pf.log.Warn("feed: this platform has no file locks: one writer per pointer file is not enforced", "pointer", pf.path, "err", err)
				return nil
			}
			return fmt.Errorf("feed: lock pointer file %s: %w; check the file system", pf.path, err)
		}
		if atPath, err := pf.isAtPath(f); err != nil || !atPath {
			// Replaced (or removed) between the open and the lock by the
			// holder that has just released it: lock the file at the path.
			f.Close()
			if err != nil {
				return fmt.Errorf("feed: lock pointer file %s: %w", pf.path, err)
			}
			if try < maxLockTries {
				continue
			}
			return fmt.Errorf("%w: %s was replaced %d times while being locked: another source is writing it; stop it first", ErrLocked, pf.path, try)
		}
		pf.lockf, pf.made = f, made
		return nil
	}
}

// Made reports whether Lock created the file (it was missing) and it has
// not been replaced since: a file this one made empty, which Close removes
// when nothing was written to it.
func (pf *File) Made() bool {
	pf.mu.Lock()
	defer pf.mu.Unlock()
	return pf.made
}

// openToLock opens the pointer file for reading and writing, creating it
// empty when missing, and reports whether it created it.
func (pf *File) openToLock() (vfs.File, bool, error) {
	for {
		f, err := pf.fs.OpenFile(pf.path, os.O_RDWR, 0)
		if err == nil {
			return f, false, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, false, fmt.Errorf("feed: open pointer file %s to lock it: %w; fix its permissions, or choose a pointer folder the feed may write (PointerDir)", pf.path, err)
		}
		f, err = pf.fs.OpenFile(pf.path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if err == nil {
			return f, true, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, false, fmt.Errorf("feed: create pointer file %s to lock it: %w; its folder must exist and be writable: fix its permissions, or choose a pointer folder the feed may write (PointerDir)", pf.path, err)
		}
		// Created meanwhile by another source: open it.
	}
}

// isAtPath reports whether f is the file at the pointer's path (by
// identity; true where the platform has none).
func (pf *File) isAtPath(f vfs.File) (bool, error) {
	fi, err := f.Stat()
	if err != nil {
		return false, err
	}
	pi, err := pf.fs.Stat(pf.path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	ad, ai, ok1 := vfs.FileID(fi)
	bd, bi, ok2 := vfs.FileID(pi)
	return !ok1 || !ok2 || (ad == bd && ai == bi), nil
}

// Load reads the last valid record. A missing file, or a present file that
// holds no valid record, is not an error: LoadResult says what was found and
// why. Load removes a leftover temporary file. Its error reports a file that
// exists but cannot be read.
func (pf *File) Load() (LoadResult, error) {
	pf.mu.Lock()
	defer pf.mu.Unlock()
	if pf.closed {
		return LoadResult{}, ErrClosed
	}
	pf.removeTemp()
	f, err := pf.fs.Open(pf.path)
	if errors.Is(err, fs.ErrNotExist) {
		return LoadResult{Missing: true, Reason: fmt.Sprintf("pointer file %s does not exist", pf.path)}, nil
	}
	if err != nil {
		return LoadResult{}, fmt.Errorf("feed: open pointer file %s: %w; fix its permissions or the disk, or remove it to restart the input from 0", pf.path, err)
	}
	st, data, err := readState(f)
	err = errors.Join(err, f.Close())
	if err != nil {
		return LoadResult{}, fmt.Errorf("feed: read pointer file %s: %w; fix the disk, or remove it to restart the input from 0", pf.path, err)
	}
	res := pf.describe(st, data)
	if res.Found && !pf.haveLast {
		pf.last, pf.haveLast = res.Record, true
	}
	if !pf.prepared {
		for _, s := range st.slots {
			if s.valid {
				pf.seq = max(pf.seq, s.seq)
			}
		}
	}
	return res, nil
}

// describe turns a file's state into a LoadResult.
func (pf *File) describe(st fileState, data []byte) LoadResult {
	if st.best >= 0 {
		s := st.slots[st.best]
		reason := fmt.Sprintf("pointer file %s: slot %c, write %d", pf.path, slotName(st.best), s.seq)
		if o := st.slots[1-st.best]; !o.valid {
			reason += fmt.Sprintf(" (slot %c: %v)", slotName(1-st.best), o.err)
		}
		return LoadResult{Record: s.p, Found: true, Reason: reason}
	}
	switch {
	case st.size == 0:
		return LoadResult{Empty: true, Reason: fmt.Sprintf("pointer file %s is empty (no record written yet)", pf.path)}
	case st.size < minFileSize:
		return LoadResult{Reason: fmt.Sprintf("pointer file %s is %d bytes long, shorter than %d", pf.path, st.size, minFileSize)}
	case st.size == LegacySize && len(data) == LegacySize && [4]byte(data[:4]) != pointerMagic:
		count := int64(binary.BigEndian.Uint64(data))
		if count < 0 {
			return LoadResult{Reason: fmt.Sprintf("legacy pointer file %s holds a negative count %d", pf.path, count)}
		}
		return LoadResult{Legacy: true, Record: Record{Position: count},
			Reason: fmt.Sprintf("legacy pointer file %s (1024 bytes, count %d)", pf.path, count)}
	case allZero(data):
		return LoadResult{Reason: fmt.Sprintf("pointer file %s (%d bytes) holds only NUL bytes", pf.path, st.size)}
	}
	return LoadResult{Reason: fmt.Sprintf("pointer file %s (%d bytes) holds no valid record: slot A: %v; slot B: %v",
		pf.path, st.size, st.slots[0].err, st.slots[1].err)}
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// removeTemp removes tmp, a leftover temporary file of the file at path
// (a pointer file or a registry), which is never read.
func removeTemp(fsys vfs.FS, log *slog.Logger, tmp, path string) {
	if _, err := fsys.Stat(tmp); err != nil {
		return
	}
	if err := fsys.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		log.Warn("feed: cannot remove a leftover temporary file; it is ignored", "file", tmp, "of", path, "err", err)
		return
	}
	log.Info("feed: removed a leftover temporary file; it was ignored", "file", tmp, "of", path)
}

// prepare reads the write state from disk: which slot to keep, the write
// sequence, the last record. It leaves pf.f nil when the file must be
// created or replaced.
func (pf *File) prepare() error {
	f, err := pf.fs.OpenFile(pf.path, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		pf.prepared = true
		return nil
	}
	if err != nil {
		return fmt.Errorf("feed: open pointer file %s for writing: %w; the previous pointer is still in place and the next commit retries; fix its permissions or the disk", pf.path, err)
	}
	st, _, err := readState(f)
	if err != nil {
		return errors.Join(fmt.Errorf("feed: read pointer file %s: %w; the next commit retries; fix the disk, or remove it to restart the input from 0", pf.path, err), f.Close())
	}
	for _, s := range st.slots {
		if s.valid {
			pf.seq = max(pf.seq, s.seq)
		}
	}
	pf.prepared = true
	if st.best < 0 || st.size != FileSize {
		// Not a file of this format, or one of the wrong size: replace it.
		return f.Close()
	}
	pf.f, pf.keep = f, st.best
	if !pf.haveLast {
		pf.last, pf.haveLast = st.slots[st.best].p, true
	}
	return nil
}

// Store writes p according to the sync policy. Within an epoch the position
// only moves forward: a Store with the epoch of the last record and a lower
// position, or a Store of the last record again, writes nothing. A Store
// with another epoch is written. A failed Store leaves the last durable
// record in place and readable; the next Store retries.
func (pf *File) Store(p Record) error {
	pf.mu.Lock()
	defer pf.mu.Unlock()
	if pf.closed {
		return ErrClosed
	}
	if err := checkPointer(p); err != nil {
		return fmt.Errorf("%w: %v (pointer file %s); this is a bug in the caller", ErrInvalid, err, pf.path)
	}
	if !pf.prepared {
		if err := pf.prepare(); err != nil {
			return err
		}
	}
	if pf.haveLast && p.Epoch == pf.last.Epoch && (p.Position < pf.last.Position || p == pf.last) {
		return pf.syncIfDue()
	}
	pf.seq++
	if pf.f == nil {
		if err := pf.create(p, pf.seq); err != nil {
			return err
		}
		pf.last, pf.haveLast = p, true
		return nil
	}
	slot := 1 - pf.keep
	rec := appendRecord(pf.buf[:0], p, pf.seq)
	if _, err := pf.f.WriteAt(rec, int64(slot)*SlotSize); err != nil {
		// The slot's content is unknown; keep stays, so the next Store
		// writes this slot again.
		return fmt.Errorf("feed: write pointer file %s (slot %c, epoch %d, position %d): %w; the previous pointer is still in place and the next commit retries; check the disk and free space",
			pf.path, slotName(slot), p.Epoch, p.Position, err)
	}
	pf.pending = true
	switch pf.policy {
	case SyncNever:
		pf.keep, pf.pending = slot, false
	case SyncInterval:
		if err := pf.syncIfDue(); err != nil {
			return err
		}
	default:
		if err := pf.sync(); err != nil {
			return err
		}
	}
	pf.last, pf.haveLast = p, true
	return nil
}

// sync makes the slot last written durable; it becomes the slot to keep.
func (pf *File) sync() error {
	if !pf.pending || pf.f == nil {
		return nil
	}
	if err := pf.f.Datasync(); err != nil {
		// The slot may or may not be on disk: keep stays on the slot
		// known durable, and the write stays pending.
		return fmt.Errorf("feed: sync pointer file %s: %w; the previous pointer is still in place and the next commit retries; check the disk", pf.path, err)
	}
	pf.keep, pf.pending = 1-pf.keep, false
	pf.lastSync = time.Now()
	return nil
}

// create writes a new pointer file holding p in slot A through a temporary
// file, renames it over the path and syncs the directory.
func (pf *File) create(p Record, seq uint64) (err error) {
	fail := func(what string, err error) error {
		return fmt.Errorf("feed: create pointer file %s (epoch %d, position %d): %s: %w; the previous pointer file, if any, is still in place and the next commit retries; check the directory's permissions and free space",
			pf.path, p.Epoch, p.Position, what, err)
	}
	img := make([]byte, FileSize)
	appendRecord(img[:0], p, seq)
	if what, err := pf.replace(img, "pointer"); err != nil {
		return fail(what, err)
	}
	if err := pf.fs.SyncDir(filepath.Dir(pf.path)); err != nil {
		// The new file may or may not survive a power loss: the next Store
		// creates it again.
		return fail("sync directory", err)
	}
	pf.pending = false
	pf.lastSync = time.Now()
	f, err := pf.fs.OpenFile(pf.path, os.O_RDWR, 0)
	if err != nil {
		// The record is durable; the next Store reads the file again.
		pf.prepared = false
		return fail("reopen", err)
	}
	pf.f, pf.keep = f, 0
	return nil
}

// replaceFile writes img to tmp, makes it durable and renames it over
// path (the caller syncs the folder). With lock, tmp is locked before the
// rename (a process opening path meanwhile finds it held) and returned
// open; else it is closed and nil is returned. On an error, tmp is
// removed, path is as it was, and what names the step that failed.
func replaceFile(fsys vfs.FS, tmp, path string, img []byte, lock bool) (f vfs.File, what string, err error) {
	t, err := fsys.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, "create " + tmp, err
	}
	undo := func(step string, err error) (vfs.File, string, error) {
		return nil, step + " " + tmp, errors.Join(err, t.Close(), fsys.Remove(tmp))
	}
	if lock {
		if err := t.Lock(); err != nil {
			return undo("lock", err)
		}
	}
	if _, err := t.WriteAt(img, 0); err != nil {
		return undo("write", err)
	}
	if err := t.Datasync(); err != nil {
		return undo("sync", err)
	}
	if err := fsys.Rename(tmp, path); err != nil {
		return undo("rename", err)
	}
	if lock {
		return t, "", nil
	}
	if err := t.Close(); err != nil {
		// Renamed and durable: only the descriptor failed.
		return nil, "close " + tmp, err
	}
	return nil, "", nil
}

// Close makes a pending write durable (except under SyncNever) and closes
// the file. Closing twice returns nil.
func (pf *File) Close() error {
	pf.mu.Lock()
	defer pf.mu.Unlock()
	if pf.closed {
		return nil
	}
	pf.closed = true
	var err error
	if pf.f != nil {
		if pf.policy != SyncNever {
			err = pf.sync()
		}
		if cerr := pf.f.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("feed: close pointer file %s: %w", pf.path, cerr))
		}
		pf.f = nil
	}
	if pf.lockf != nil {
		pf.removeUnwritten()
		if cerr := pf.lockf.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("feed: close pointer file %s (releasing its lock): %w", pf.path, cerr))
		}
		pf.lockf = nil
	}
	return err
}

// removeUnwritten removes the file Lock created when it is still empty
// and at the path: a source that never wrote its pointer (its input never
// appeared, or was refused) leaves nothing behind. It runs while the lock
// is held, so no other source uses the file; one that opened it meanwhile
// finds it locked, and creates a new one once this one is released.
func (pf *File) removeUnwritten() {
	if !pf.made {
		return
	}
	fi, err := pf.lockf.Stat()
	if err != nil || fi.Size() != 0 {
		return
	}
	if at, err := pf.isAtPath(pf.lockf); err != nil || !at {
		return
	}
	if err := pf.fs.Remove(pf.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		pf.log.Info("feed: cannot remove the empty pointer file this source made; it is harmless", "pointer", pf.path, "err", err)
	}
}
