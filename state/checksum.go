package state

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
)

// Value checksums. From format 2 on, every value the store writes to its
// backend, except the format version itself, is followed by a CRC-32C
// (Castagnoli) of its key and its bytes:
//
//	+-----------------+-----------------------------+
//	| value (n bytes) | crc32c(key ‖ value), 4 B BE |
//	+-----------------+-----------------------------+
//
// The key is covered so that a value found under another key (a page
// pointer damaged) does not verify either. A store of format 1, written
// before checksums, is read and written without them (see sumEngine).
const sumLen = 4

// sumEngine adds a checksum to every value written through it and
// verifies and strips it from every value read, so that a damaged value of
// any backend is an error rather than a wrong answer. With sums false
// (a store of format 1) it passes everything through.
type sumEngine struct {
	engine
	sums bool
	// format3 is set once the store's format record says format 3 (see
	// formats): a commit that writes an output record with a tail into a
	// store of format 2 writes the format record in the same transaction,
	// and sets it once committed. Commits run on the committer and on the
	// declaration of an output, so it is atomic.
	format3 atomic.Bool
	// owed is set when a store of format 2 holds an output record with a
	// tail already (written by a version between 3b47141 and format 3):
	// its next commit, of any kind, writes the format record too.
	owed atomic.Bool
	// what names the store's data for errors: the backend, the folder and
	// the file.
	backend, dir, file string
	// scratch is the memory of the last commit's summed writes, for the
	// next: at 10,000 accounts, about 400 KiB a commit that the collector
	// had to reclaim. A commit that finds it taken (an output's
	// declaration while the committer commits) makes its own.
	scratch struct {
		sync.Mutex
		buf []byte
		out []write
	}
}

func newSumEngine(kind, dir string, e engine) *sumEngine {
	s := &sumEngine{engine: e, backend: kind, dir: dir}
	switch kind {
	case Bolt:
		s.file = filepath.Join(dir, boltFile)
	case Pebble:
		s.file = filepath.Join(dir, pebbleDir)
	}
	return s
}

func isVersionKey(k []byte) bool { return len(k) == 1 && k[0] == tagVersion }

func valueSum(key, val []byte) uint32 {
	return crc32.Update(crc32.Update(0, crcTable, key), crcTable, val)
}

// appendSummed appends val and its checksum, as the store writes the value
// of key to its backend, to buf.
func appendSummed(buf, key, val []byte) []byte {
	return binary.BigEndian.AppendUint32(append(buf, val...), valueSum(key, val))
}

// summed reports whether w is written with its checksum.
func summed(w write) bool { return !w.del && !isVersionKey(w.key) }

// summing reports whether the store's values are written with their
// checksums (format 2 on), for a caller that sums them ahead (see
// write.summed): false when the engine is not the store's sumEngine (a
// test's wrapper). A store's format only moves up, and only while no
// batch is staged (an upgrade).
func (c *core) summing() bool {
	s, ok := c.eng.(*sumEngine)
	return ok && s.sums
}

// verify returns v without its checksum, or a *CorruptError.
func (s *sumEngine) verify(k, v []byte) ([]byte, error) {
	if !s.sums || isVersionKey(k) {
		return v, nil
	}
	if len(v) < sumLen {
		return nil, s.corrupt(k, fmt.Sprintf("its value is %d bytes, shorter than its checksum", len(v)))
	}
	n := len(v) - sumLen
	if got, want := valueSum(k, v[:n]), binary.BigEndian.Uint32(v[n:]); got != want {
		return nil, s.corrupt(k, fmt.Sprintf("the checksum of its %d bytes is %08x, the one stored with it %08x", n, got, want))
	}
	return v[:n:n], nil
}

func (s *sumEngine) corrupt(k []byte, detail string) *CorruptError {
	e := &CorruptError{Backend: s.backend, Dir: s.dir, File: s.file, Key: append([]byte{}, k...), Detail: detail}
	e.Record, e.Namespace, e.Bucket = describeKey(k)
	return e
}

func (s *sumEngine) get(key []byte) ([]byte, bool, error) {
	v, ok, err := s.engine.get(key)
	if err != nil || !ok {
		return v, ok, err
	}
	v, err = s.verify(key, v)
	if err != nil {
		return nil, false, err
	}
	return v, true, nil
}

func (s *sumEngine) scan(prefix []byte, fn func(k, v []byte) error) error {
	if !s.sums {
		return s.engine.scan(prefix, fn)
	}
	return s.engine.scan(prefix, func(k, v []byte) error {
		v, err := s.verify(k, v)
		if err != nil {
			return err
		}
		return fn(k, v)
	})
}

// setFormat records that the store is of format n (1 to 3) as its format
// record says, at the open or after an upgrade.
func (s *sumEngine) setFormat(n int) {
	s.sums = n >= 2
	s.format3.Store(n >= 3)
}

// commit adds their checksums to the values of ws (format 2 on) and
// commits them. It keeps the format record true to what the store holds
// (see formats): in a store of format 2, a transaction that writes an
// output record with a tail also writes the format record of format 3; in
// a store of format 1 the records are written without their tails.
func (s *sumEngine) commit(ws []write) error { return s.commitSent(ws, nil) }

// commitSent is commit, calling sent as the backend's commitSent does (see
// sentCommitter) if it is one.
func (s *sumEngine) commitSent(ws []write, sent func()) error {
	if !s.sums {
		for _, w := range ws {
			if w.summed {
				return fmt.Errorf("state: internal error: a value of key %q with its checksum for a store of format 1 (%s)", w.key, s.dir)
			}
		}
		return commitTo(s.engine, withoutTails(ws), sent)
	}
	bump := !s.format3.Load() && (s.owed.Load() || writesTail(ws))
	size := 0
	for i := range ws {
		if !ws[i].del && !ws[i].summed {
			size += len(ws[i].val) + sumLen
		}
	}
	// One buffer for the whole transaction; ws is the caller's, so the
	// summed writes go to a copy.
	var (
		buf []byte
		out []write
	)
	if s.scratch.TryLock() {
		buf, out = s.scratch.buf, s.scratch.out
		defer func() {
			s.scratch.out = keepWrites(out)
			if s.scratch.buf = buf[:0]; cap(buf) > maxScratchBytes {
				s.scratch.buf = nil
			}
			s.scratch.Unlock()
		}()
	}
	buf = slices.Grow(buf[:0], size)
	out = slices.Grow(out[:0], len(ws)+1)[:len(ws)]
	for i, w := range ws {
		out[i] = w
		if !summed(w) || w.summed {
			continue
		}
		n := len(buf)
		buf = appendSummed(buf, w.key, w.val)
		out[i].val = buf[n:len(buf):len(buf)]
	}
	if bump {
		out = append(out, write{key: []byte{tagVersion}, val: []byte(formatVersion)})
	}
	if err := commitTo(s.engine, out, sent); err != nil {
		return err
	}
	if bump {
		s.format3.Store(true)
	}
	return nil
}

// maxScratchBytes is the largest buffer of summed values a sumEngine keeps
// for its next commit.
const maxScratchBytes = 4 << 20

// isTailRecord reports whether w writes an output record with a tail, of
// format 3 (see outputRec).
func isTailRecord(w write) bool {
	return !w.del && len(w.key) > 0 && w.key[0] == tagOutput && len(w.val) == outputRecTailLen
}

// writesTail reports whether ws writes an output record with a tail.
func writesTail(ws []write) bool {
	for _, w := range ws {
		if isTailRecord(w) {
			return true
		}
	}
	return false
}

// withoutTails returns ws with each output record's tail cut off (a
// record of format 2 instead, which an open checks whole), for a store of
// format 1; ws itself when it writes none.
func withoutTails(ws []write) []write {
	if !writesTail(ws) {
		return ws
	}
	out := make([]write, len(ws))
	for i, w := range ws {
		out[i] = w
		if isTailRecord(w) {
			out[i].val = w.val[:outputRecSumLen:outputRecSumLen]
		}
	}
	return out
}

// limits leaves room for the checksum in bbolt's longest value, which is
// bbolt's own hard limit (in either format: it is asked before the format
// is known). The limits of the other backends are the store's, far below
// theirs.
func (s *sumEngine) limits() (maxKey, maxValue int) {
	k, v := s.engine.limits()
	if s.backend == Bolt && v > sumLen {
		v -= sumLen
	}
	return k, v
}

// rawEngine returns the backend under the checksums of c.
func (c *core) rawEngine() engine {
	if s, ok := c.eng.(*sumEngine); ok {
		return s.engine
	}
	return c.eng
}

// describeKey names the record of a backend key for an error: what it is,
// and the namespace and bucket of a value.
func describeKey(k []byte) (record, ns, bucket string) {
	if len(k) == 0 {
		return "an empty key", "", ""
	}
	switch k[0] {
	case tagData:
		if ns, rest, ok := cutName(k[1:]); ok {
			if b, key, ok := cutName(rest); ok {
				return fmt.Sprintf("the value of key %s in bucket %q of namespace %q", quoteKey(key), b, ns), ns, b
			}
		}
	case tagApplied:
		if ns, feed, file, ok := parseAppliedKey(k); ok {
			if file != "" {
				return fmt.Sprintf("the applied position of file %q of feed %q in namespace %q", file, feed, ns), ns, ""
			}
			return fmt.Sprintf("the applied position of feed %q in namespace %q", feed, ns), ns, ""
		}
	case tagOutput:
		return fmt.Sprintf("the committed length of output %q", k[1:]), "", ""
	case tagOutputData:
		if name, off, ok := cutName(k[1:]); ok && len(off) == 8 {
			return fmt.Sprintf("the bytes at offset %d of output %q", binary.BigEndian.Uint64(off), name), "", ""
		}
	}
	return "the value of key " + quoteKey(k), "", ""
}

// cutName splits a uvarint-prefixed name off b.
func cutName(b []byte) (name string, rest []byte, ok bool) {
	n, w := nameLen(b)
	if w <= 0 {
		return "", nil, false
	}
	return string(b[w : w+int(n)]), b[w+int(n):], true
}

func quoteKey(k []byte) string {
	const most = 64
	if len(k) > most {
		return strconv.Quote(string(k[:most])) + "…"
	}
	return strconv.Quote(string(k))
}

// CorruptError is the error of a record of a store that does not verify:
// a value whose checksum does not match, a page of the backend's file
// that its own checks refuse. It wraps [ErrCorrupt]. The store's data
// cannot be trusted past it: restore the store from a backup, or remove
// it to start over. A store decides where each feed resumes, so a store
// started over has its feeds read their input again from the start.
type CorruptError struct {
	// Backend is the backend's name ([Bolt], [Pebble], [Postgres]); Dir
	// the store's directory (for PostgreSQL, "postgres:NAME"); File the
	// damaged file or database directory, "" when there is none.
	Backend, Dir, File string
	// Record names what failed to verify, as in "the value of key "alice"
	// in bucket "balances" of namespace """; Namespace and Bucket are
	// those of the value, when the record is one. Key is the backend's
	// key, nil when the damage is not in one record.
	Record            string
	Namespace, Bucket string
	Key               []byte
	// Detail says what was found.
	Detail string
}

// Error says what is damaged, where, and what to do.
func (e *CorruptError) Error() string {
	where := e.Dir
	if e.File != "" {
		where = e.File
	}
	fix := fmt.Sprintf("restore the store's folder from a backup, or remove the whole folder %s to start over (the store decides where each feed resumes, so its feeds then read their input again)", e.Dir)
	if e.Backend == Postgres {
		fix = fmt.Sprintf("restore the database from a backup, or delete store %s to start over (its feeds then read their input again)", e.Dir)
	}
	return fmt.Sprintf("state: %s store %s is damaged: %s in %s does not verify: %s; %s", e.Backend, e.Dir, e.Record, where, e.Detail, fix)
}

// Unwrap returns [ErrCorrupt].
func (e *CorruptError) Unwrap() error { return ErrCorrupt }
