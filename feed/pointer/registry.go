package pointer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/tidemark-go/tidemark"
)

// RegistrySuffix ends the name of a file set's registry file.
const RegistrySuffix = ".registry"

// The registry format, version 1.
const (
	// RegistryVersion is the registry format version this package writes.
	RegistryVersion = 1
	// RegistryHeaderSize is the size of a registry file's header.
	RegistryHeaderSize = 16
	// MaxRegistryRecord bounds the body of one registry record.
	MaxRegistryRecord = 64 << 10
	// MaxRegistryKey bounds a key (a file's path).
	MaxRegistryKey = 8 << 10
	// registryEntryFixed is the size of an entry body after its key.
	registryEntryFixed = 8*6 + 4*3 + 8
	// compactMin is the log size under which a registry is never
	// compacted.
	compactMin = 64 << 10
)

// The kinds of a registry record.
const (
	recEntry  = 1
	recForget = 2
)

// registryMagic opens a registry file: "TDMR" (tidemark registry).
var registryMagic = [4]byte{'T', 'D', 'M', 'R'}

// Entry is one file's record in a registry: its pointer record, and what a
// file set knows of it besides.
type Entry struct {
	Record
	// Finished is set once the file was read to its end and is gone from
	// the set (removed, or no longer matched): kept, to be forgotten after
	// a while, so that a file that comes back is recognised.
	Finished bool
	// Stamp is when the entry was written (Finished: when it was found
	// finished).
	Stamp time.Time
}

// RegistryLoad is what a registry's Load found.
type RegistryLoad struct {
	// Entries holds the last record of every key not forgotten.
	Entries map[string]Entry
	// Missing: no registry file. Empty: the file exists and is empty (a
	// lock made it; no record written yet).
	Missing, Empty bool
	// Damaged is set when bytes of the file could not be read as records
	// (a torn last record after a crash, or damage): the records before
	// them are in Entries, and Reason says where. The next write rewrites
	// the file without them.
	Damaged bool
	Reason  string
}

// Registry is the durable record of a file set: one Entry per file, in one
// file, written by one writer at a time (Lock). It is log-structured: a
// header, then checksummed records appended in order, the last record of a
// key winning; it is compacted (every live entry written to a new file,
// renamed over the old one) when the log has grown to several times its
// live size.
//
// # Format (version 1)
//
// All integers are little-endian.
//
//	header (16 bytes)
//	   0  4  magic "TDMR"
//	   4  2  version, 1
//	   6  2  header length, 16
//	   8  4  reserved, 0
//	  12  4  CRC-32C of bytes 0..11
//	record
//	   0  4  body length n (1..65536)
//	   4  4  CRC-32C of the body
//	   8  n  body:
//	         1      kind: 1 entry, 2 forget
//	         var    key length (uvarint), then the key (a path)
//	         entry only:
//	         8      epoch
//	         8      position
//	         8, 8   identity: device, inode
//	         8      fingerprint hash
//	         8      tail hash
//	         4      fingerprint length
//	         4      tail length
//	         4      flags (bit 0: finished)
//	         8      stamp (nanoseconds since 1970)
//
// # Why it is crash safe
//
// A record is appended after the last valid one and made durable (per the
// sync policy) before Store returns; nothing valid is ever overwritten in
// place. A crash can only tear what was being appended: Load reads records
// in order and stops at the first one that does not verify, so it finds
// every record made durable before it, and a position only ever lags.
// Bytes after the last valid record (a torn record, damage) are never
// written after: the next write first compacts, writing the live entries
// to path+".tmp", syncing it, renaming it over path and syncing the
// folder. A crash during that leaves the old file (or the new one) whole.
//
// A Registry is safe for concurrent use; writes are serialised.
type Registry struct {
	writer // path, policy, mu, closed, pending; Path, Sync, SyncIfDue

	cond     sync.Cond // signals the end of a sync
	prepared bool
	live     map[string]Entry
	end      int64 // offset of the next append
	liveSize int64 // bytes of a snapshot of live
	rewrite  bool  // the file must be rewritten before the next append
	buf      []byte
	// Appends are numbered; synced is the number of the last one a sync
	// made durable, and syncing is set while a sync runs (without mu):
	// the Stores that append meanwhile wait for the next sync, which
	// covers them all (one fdatasync for the records of many files).
	// failed is the number of the last append a failed sync may have
	// lost, failErr its error.
	appended, synced, failed uint64
	syncing                  bool
	failErr                  error
	// deferred makes SyncEveryCommit appends wait for an explicit Sync.
	deferred bool
}

// OpenRegistry prepares the registry file at path; it does not read it.
func OpenRegistry(path string, opts Options) *Registry {
	r := &Registry{writer: newWriter(path, opts)}
	r.flush = r.sync
	r.cond.L = &r.mu
	return r
}

// Lock takes the registry's lock: an exclusive OS lock on the file, held
// until Close, as [File.Lock] does for a pointer file (a missing file is
// created empty to be locked; a replaced one is locked before it is
// renamed over the path). The error wraps [ErrLocked] when another open
// file holds it.
func (r *Registry) Lock() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	if r.lockf != nil {
		return nil
	}
	pf := &File{writer: writer{path: r.path, fs: r.fs, log: r.log}}
	if err := pf.Lock(); err != nil {
		return err
	}
	r.lockf, r.made = pf.lockf, pf.made
	return nil
}

// Load reads the registry: the last record of every key. A missing file,
// or a file that holds no valid record, is not an error (RegistryLoad says
// why); the error reports a file that cannot be read.
func (r *Registry) Load() (RegistryLoad, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return RegistryLoad{}, ErrClosed
	}
	r.removeTemp()
	data, err := r.read()
	if errors.Is(err, fs.ErrNotExist) {
		return RegistryLoad{Missing: true, Entries: map[string]Entry{}, Reason: fmt.Sprintf("registry %s does not exist", r.path)}, nil
	}
	if err != nil {
		return RegistryLoad{}, fmt.Errorf("feed: read registry %s: %w; fix the disk, or remove it to read every file of the set from 0", r.path, err)
	}
	res, end := ParseRegistry(data)
	if !res.Missing && !res.Empty {
		res.Reason = fmt.Sprintf("registry %s: %s", r.path, res.Reason)
	}
	r.live, r.end, r.prepared = maps.Clone(res.Entries), end, true
	r.rewrite = res.Damaged || end < RegistryHeaderSize
	r.liveSize = snapshotSize(r.live)
	return res, nil
}

// read returns the registry file's bytes.
func (r *Registry) read() ([]byte, error) {
	f := r.lockf
	if f == nil {
		var err error
		f, err = r.fs.Open(r.path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	data := make([]byte, fi.Size())
	n, err := f.ReadAt(data, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return data[:n], nil
}

// ParseRegistry decodes the bytes of a registry file: every record up to
// the first that does not verify. end is the offset just after the last
// valid record (the header's end for a file without records, 0 for one
// without a valid header).
func ParseRegistry(data []byte) (res RegistryLoad, end int64) {
	res.Entries = map[string]Entry{}
	if len(data) == 0 {
		res.Empty, res.Reason = true, "empty (no record written yet)"
		return res, 0
	}
	if why := checkHeader(data); why != "" {
		res.Damaged, res.Reason = true, why
		return res, 0
	}
	off := int64(RegistryHeaderSize)
	n := 0
	for off < int64(len(data)) {
		body, next, why := nextRecord(data, off)
		if why != "" {
			res.Damaged = true
			res.Reason = fmt.Sprintf("%d records; %s at offset %d of %d (the records after it, if any, are not read)", n, why, off, len(data))
			return res, off
		}
		kind, key, e, ok := decodeBody(body)
		if !ok {
			res.Damaged = true
			res.Reason = fmt.Sprintf("%d records; a record that does not decode at offset %d of %d", n, off, len(data))
			return res, off
		}
		switch kind {
		case recEntry:
			res.Entries[key] = e
		case recForget:
			delete(res.Entries, key)
		}
		n++
		off = next
	}
	res.Reason = fmt.Sprintf("%d records, %d entries", n, len(res.Entries))
	return res, off
}

// checkHeader returns why data does not start with a valid header, or "".
func checkHeader(data []byte) string {
	switch {
	case len(data) < RegistryHeaderSize:
		return fmt.Sprintf("%d bytes, shorter than a header", len(data))
	case [4]byte(data[:4]) != registryMagic:
		return fmt.Sprintf("bad magic %q", data[:4])
	case binary.LittleEndian.Uint16(data[4:]) != RegistryVersion:
		return fmt.Sprintf("unknown version %d (this build reads version %d)", binary.LittleEndian.Uint16(data[4:]), RegistryVersion)
	case binary.LittleEndian.Uint16(data[6:]) != RegistryHeaderSize || binary.LittleEndian.Uint32(data[8:]) != 0:
		return "bad header length or reserved field"
	case binary.LittleEndian.Uint32(data[12:]) != crc32.Checksum(data[:12], crcTable):
		return "header checksum mismatch"
	}
	return ""
}

// nextRecord returns the body of the record at off and the offset after
// it, or why there is no valid record there.
func nextRecord(data []byte, off int64) ([]byte, int64, string) {
	rest := data[off:]
	if len(rest) < 8 {
		return nil, 0, "a torn record header"
	}
	n := binary.LittleEndian.Uint32(rest)
	if n == 0 || n > MaxRegistryRecord {
		return nil, 0, fmt.Sprintf("a record length of %d", n)
	}
	if uint64(len(rest)-8) < uint64(n) {
		return nil, 0, "a torn record"
	}
	body := rest[8 : 8+n]
	if binary.LittleEndian.Uint32(rest[4:]) != crc32.Checksum(body, crcTable) {
		return nil, 0, "a record checksum mismatch"
	}
	return body, off + 8 + int64(n), ""
}

// decodeBody decodes a record body.
func decodeBody(b []byte) (kind byte, key string, e Entry, ok bool) {
	if len(b) < 2 {
		return 0, "", Entry{}, false
	}
	kind = b[0]
	kl, w := binary.Uvarint(b[1:])
	if w <= 0 || kl == 0 || kl > MaxRegistryKey || uint64(len(b)-1-w) < kl {
		return 0, "", Entry{}, false
	}
	key = string(b[1+w : 1+w+int(kl)])
	rest := b[1+w+int(kl):]
	switch kind {
	case recForget:
		return kind, key, Entry{}, len(rest) == 0
	case recEntry:
	default:
		return 0, "", Entry{}, false
	}
	if len(rest) != registryEntryFixed {
		return 0, "", Entry{}, false
	}
	le := binary.LittleEndian
	p := Record{
		Epoch:       le.Uint64(rest[0:]),
		Position:    int64(le.Uint64(rest[8:])),
		Identity:    tidemark.Identity{Dev: le.Uint64(rest[16:]), Ino: le.Uint64(rest[24:])},
		Fingerprint: tidemark.Fingerprint{Hash: le.Uint64(rest[32:])},
		TailHash:    le.Uint64(rest[40:]),
	}
	fpLen, tailLen, flags := le.Uint32(rest[48:]), le.Uint32(rest[52:]), le.Uint32(rest[56:])
	if fpLen > MaxFingerprintLen || tailLen > MaxTailLen || flags&^1 != 0 {
		return 0, "", Entry{}, false
	}
	p.Fingerprint.Len, p.TailLen = int(fpLen), int(tailLen)
	if checkPointer(p) != nil {
		return 0, "", Entry{}, false
	}
	e = Entry{Record: p, Finished: flags&1 != 0, Stamp: time.Unix(0, int64(le.Uint64(rest[60:])))}
	return kind, key, e, true
}

// appendEntry appends the record of key's entry e (or, when forget, of its
// removal) to dst.
func appendEntry(dst []byte, key string, e Entry, forget bool) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0, 0, 0, 0)
	kind := byte(recEntry)
	if forget {
		kind = recForget
	}
	dst = append(dst, kind)
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	dst = append(dst, key...)
	if !forget {
		le := binary.LittleEndian
		p := e.Record
		dst = le.AppendUint64(dst, p.Epoch)
		dst = le.AppendUint64(dst, uint64(p.Position))
		dst = le.AppendUint64(dst, p.Identity.Dev)
		dst = le.AppendUint64(dst, p.Identity.Ino)
		dst = le.AppendUint64(dst, p.Fingerprint.Hash)
		dst = le.AppendUint64(dst, p.TailHash)
		dst = le.AppendUint32(dst, uint32(p.Fingerprint.Len))
		dst = le.AppendUint32(dst, uint32(p.TailLen))
		var flags uint32
		if e.Finished {
			flags = 1
		}
		dst = le.AppendUint32(dst, flags)
		var stamp int64
		if !e.Stamp.IsZero() {
			stamp = e.Stamp.UnixNano()
		}
		dst = le.AppendUint64(dst, uint64(stamp))
	}
	body := dst[start+8:]
	binary.LittleEndian.PutUint32(dst[start:], uint32(len(body)))
	binary.LittleEndian.PutUint32(dst[start+4:], crc32.Checksum(body, crcTable))
	return dst
}

// appendHeader appends a registry header to dst.
func appendHeader(dst []byte) []byte {
	start := len(dst)
	dst = append(dst, registryMagic[:]...)
	dst = binary.LittleEndian.AppendUint16(dst, RegistryVersion)
	dst = binary.LittleEndian.AppendUint16(dst, RegistryHeaderSize)
	dst = binary.LittleEndian.AppendUint32(dst, 0)
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[start:], crcTable))
}

// snapshotSize is the size of a registry file holding exactly live.
func snapshotSize(live map[string]Entry) int64 {
	n := int64(RegistryHeaderSize)
	for k := range live {
		n += entrySize(k)
	}
	return n
}

// entrySize is the size of the record of an entry of key.
func entrySize(key string) int64 {
	var b [binary.MaxVarintLen64]byte
	return 8 + 1 + int64(binary.PutUvarint(b[:], uint64(len(key)))) + int64(len(key)) + registryEntryFixed
}

// checkKey reports why key cannot be stored, or nil.
func checkKey(key string) error {
	if key == "" || len(key) > MaxRegistryKey {
		return fmt.Errorf("key of %d bytes outside 1..%d", len(key), MaxRegistryKey)
	}
	return nil
}

// Entry returns the entry of key as last stored (or loaded).
func (r *Registry) Entry(key string) (Entry, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.live[key]
	return e, ok
}

// Entries returns every entry as last stored (or loaded).
func (r *Registry) Entries() map[string]Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.live)
}

// Store writes key's entry per the sync policy. Within an epoch the
// position only moves forward: an entry of the stored epoch, the same
// Finished flag and a lower position, or the stored entry again, writes
// nothing. A failed Store leaves every entry durable before it in place;
// the next write rewrites the file.
func (r *Registry) Store(key string, e Entry) error { return r.store(key, e, false) }

// StoreLater is Store without the sync of SyncEveryCommit: the entry is
// written, and durable once [Registry.Sync] (or a Store that syncs)
// returns. A writer that stores the entries of several files at once makes
// them durable with one sync. Under the other policies it is Store.
func (r *Registry) StoreLater(key string, e Entry) error { return r.store(key, e, true) }

func (r *Registry) store(key string, e Entry, later bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	if err := checkKey(key); err != nil {
		return fmt.Errorf("%w: %v (registry %s); this is a bug in the caller", ErrInvalid, err, r.path)
	}
	if err := checkPointer(e.Record); err != nil {
		return fmt.Errorf("%w: %v (registry %s, key %s); this is a bug in the caller", ErrInvalid, err, r.path, key)
	}
	if err := r.prepare(); err != nil {
		return err
	}
	if old, ok := r.live[key]; ok && old.Epoch == e.Epoch && old.Finished == e.Finished &&
		(e.Position < old.Position || old.Record == e.Record) {
		return r.syncIfDue()
	}
	return r.write(key, e, false, later)
}

// Forget removes key's entry. Forgetting a key without an entry writes
// nothing.
func (r *Registry) Forget(key string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	if err := r.prepare(); err != nil {
		return err
	}
	if _, ok := r.live[key]; !ok {
		return nil
	}
	return r.write(key, Entry{}, true, false)
}

// prepare loads the registry's state for writing when Load was not called.
func (r *Registry) prepare() error {
	if r.prepared {
		return nil
	}
	data, err := r.read()
	switch {
	case errors.Is(err, fs.ErrNotExist):
		data, err = nil, nil
	case err != nil:
		return fmt.Errorf("feed: read registry %s to write it: %w; the next write retries", r.path, err)
	}
	res, end := ParseRegistry(data)
	r.live, r.end, r.prepared = maps.Clone(res.Entries), end, true
	r.rewrite = res.Damaged || end < RegistryHeaderSize
	r.liveSize = snapshotSize(r.live)
	return nil
}

// write appends one record (or rewrites the file with it), syncing per
// the policy (later: not under SyncEveryCommit), and applies it to r.live
// once written.
func (r *Registry) write(key string, e Entry, forget, later bool) error {
	size := r.newSize(key, forget)
	for r.syncing && (r.rewrite || r.lockf == nil || (r.end > compactMin && r.end > 4*size)) {
		// The file a sync in progress uses is not replaced under it.
		r.cond.Wait()
		size = r.newSize(key, forget)
	}
	apply := func() {
		if forget {
			delete(r.live, key)
		} else {
			r.live[key] = e
		}
		r.liveSize = size
	}
	if r.rewrite || r.lockf == nil || (r.end > compactMin && r.end > 4*size) {
		next := maps.Clone(r.live)
		if forget {
			delete(next, key)
		} else {
			next[key] = e
		}
		if err := r.compact(next); err != nil {
			return err
		}
		apply()
		return nil
	}
	rec := appendEntry(r.buf[:0], key, e, forget)
	r.buf = rec[:0]
	if _, err := r.lockf.WriteAt(rec, r.end); err != nil {
		// What landed is unknown: the next write rewrites the file.
		r.rewrite = true
		return fmt.Errorf("feed: write registry %s (key %s, epoch %d, position %d): %w; the entries before it are still in place and the next commit retries; check the disk and free space",
			r.path, key, e.Epoch, e.Position, err)
	}
	r.end += int64(len(rec))
	apply()
	r.pending = true
	r.appended++
	switch {
	case r.policy == SyncNever:
		r.pending = false
		r.synced = r.appended
	case r.policy == SyncInterval:
		return r.syncIfDue()
	case r.deferred || later:
		return nil
	}
	return r.syncTo(r.appended)
}

// newSize is the size of a snapshot once key is stored (or forgotten).
func (r *Registry) newSize(key string, forget bool) int64 {
	size := r.liveSize
	if _, ok := r.live[key]; ok {
		size -= entrySize(key)
	}
	if !forget {
		size += entrySize(key)
	}
	return size
}

// SetDeferred makes Stores under SyncEveryCommit write without syncing
// until it is reset: a caller that stores many entries at once (a file
// set finding many new files) then makes them durable with one Sync
// before it relies on them.
func (r *Registry) SetDeferred(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.deferred = on
}

// compact writes live as the whole registry through a temporary file
// renamed over the path (locked before the rename), and syncs the folder.
func (r *Registry) compact(live map[string]Entry) error {
	fail := func(what string, err error) error {
		return fmt.Errorf("feed: rewrite registry %s: %s: %w; the previous registry, if any, is still in place and the next commit retries; check the folder's permissions and free space", r.path, what, err)
	}
	img := appendHeader(make([]byte, 0, snapshotSize(live)))
	for _, k := range slices.Sorted(maps.Keys(live)) {
		img = appendEntry(img, k, live[k], false)
	}
	if what, err := r.replace(img, "registry"); err != nil {
		return fail(what, err)
	}
	r.end, r.rewrite, r.pending = int64(len(img)), false, false
	r.appended++
	r.synced = r.appended
	if err := r.fs.SyncDir(filepath.Dir(r.path)); err != nil {
		// The new file may or may not survive a power loss: write it again.
		r.rewrite = true
		return fail("sync the folder", err)
	}
	r.lastSync = time.Now()
	return nil
}

// sync makes the appends written durable. r.mu held.
func (r *Registry) sync() error { return r.syncTo(r.appended) }

// syncTo returns once append n is durable: it syncs, or waits for the sync
// in progress and then syncs once more if that one began before append n
// (the Stores waiting together share the next sync). An error means
// append n may be lost: the next write rewrites the file. r.mu held; it
// is released during the sync.
func (r *Registry) syncTo(n uint64) error {
	for r.synced < n {
		if r.failed >= n {
			return r.failErr
		}
		if r.syncing {
			r.cond.Wait()
			continue
		}
		if r.lockf == nil {
			return nil
		}
		r.syncing = true
		target, f := r.appended, r.lockf
		r.mu.Unlock()
		err := f.Datasync()
		r.mu.Lock()
		r.syncing = false
		r.cond.Broadcast()
		if f != r.lockf {
			continue // replaced by a compaction, which made every append durable
		}
		if err != nil {
			r.rewrite = true
			r.failed = max(r.failed, target)
			r.failErr = fmt.Errorf("feed: sync registry %s: %w; the next commit rewrites it; check the disk", r.path, err)
			return r.failErr
		}
		r.synced = max(r.synced, target)
		if r.synced == r.appended {
			r.pending = false
		}
		r.lastSync = time.Now()
	}
	return nil
}

// Close makes pending appends durable (except under SyncNever) and
// releases the lock. Closing twice returns nil.
func (r *Registry) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	var err error
	if r.lockf != nil {
		if r.policy != SyncNever {
			err = r.sync()
		}
		if r.made {
			if fi, serr := r.lockf.Stat(); serr == nil && fi.Size() == 0 {
				_ = r.fs.Remove(r.path)
			}
		}
		if cerr := r.lockf.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("feed: close registry %s: %w", r.path, cerr))
		}
		r.lockf = nil
	}
	return err
}
