package state

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/tidemark-go/tidemark/vfs"
)

// Output is an append-only file in a store's directory whose committed
// length is recorded in the same transaction as the state. Bytes staged
// with [Tx.Output] are appended and synced when their batch commits, just
// before the state; bytes past the committed length (from a batch whose
// state never committed) are cut off when the store opens. So every line
// is in the file exactly once, whatever moment a crash picks.
//
// Read the file after [Store.Flush] or [Store.Close]: before, it may end
// with bytes of a batch still committing.
//
// A PostgreSQL store has no directory: its outputs are rows of its table,
// written in the same transaction as the state, and read back with
// [Output.WriteTo]. Path is "" for them.
type Output struct {
	name, path string
	f          vfs.File // nil for an output the engine keeps
	c          *core

	mu        sync.Mutex
	committed int64
	// sum is the CRC-32C of the committed bytes of a file output, and
	// pending that of the bytes of the batch being committed (the
	// committer's alone).
	sum, pending uint32

	// The write-ahead of a file output (see core.writeAhead), under mu:
	// next is the offset just past the bytes of the last batch handed to
	// stage, stagedSeq that batch's seq, ah what the writer was given of
	// the staging batch's bytes; aq feeds the writer (nil until the first
	// chunk), aclosed is set when the output closes, and adone is closed
	// when the writer has ended.
	next      int64
	stagedSeq uint64
	// syncedSeq is the seq of the last batch whose stage synced the file
	// (or found it synced): the writer syncs for the next batch only once
	// it equals stagedSeq, never while a commit's own sync may run. Two
	// syncs of one file must not race: Linux reports a write-back error
	// to one of them only (the first to check), and the commit whose
	// bytes failed could be told they are durable.
	syncedSeq uint64
	ah        *ahead
	aq        chan aheadWrite
	aclosed   bool
	adone     chan struct{}
	// bg is the check of the file's committed bytes running in the
	// background since the open (a file larger than VerifyMaxBytes, found
	// as the store left it checked), nil when none runs.
	bg *bgCheck
	// vouched says the file's committed bytes were checked at the open,
	// or vouched for by the record of the last clean close (and, then,
	// being checked in bg): a clean close records it as left checked
	// (outputsLeftFile).
	vouched bool
}

// aheadChunk is how many bytes of a staging batch an output's writer is
// given at least at once (see core.writeAhead).
const aheadChunk = 64 << 10

// ahead is what an output's writer was given of one batch's bytes: the
// first sent bytes, to be written from base, the batch's offset in the
// file. wg counts the chunks not written yet, err is the first write that
// failed (under the output's mu).
type ahead struct {
	seq  uint64
	base int64
	sent int
	wg   sync.WaitGroup
	err  error
	// synced says the writer synced the file once it had written the
	// first synced bytes (see core.syncAhead); under the output's mu.
	synced int
}

// aheadWrite is one chunk for an output's writer: p at off, of batch a;
// sync asks the writer to sync the file after it, once it has written the
// first upto bytes of the batch.
type aheadWrite struct {
	a    *ahead
	p    []byte
	off  int64
	sync bool
	upto int
}

// Name returns the output's name.
func (o *Output) Name() string { return o.name }

// Path returns the output file's path; "" for an output kept in a
// database.
func (o *Output) Path() string { return o.path }

// Committed returns the output's committed length: every byte before it is
// durable and recorded with the state.
func (o *Output) Committed() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.committed
}

func (o *Output) setCommitted(n int64) {
	o.mu.Lock()
	o.committed = n
	o.sum = o.pending
	o.mu.Unlock()
}

// WriteTo writes the output's committed bytes to w: every byte of a batch
// that is durable, and none of a batch still committing. Call it while the
// store is open.
func (o *Output) WriteTo(w io.Writer) (int64, error) {
	n := o.Committed()
	if o.f != nil {
		return io.Copy(w, io.NewSectionReader(o.f, 0, n))
	}
	o.c.mu.Lock()
	closed := o.c.closed
	o.c.mu.Unlock()
	if closed {
		return 0, fmt.Errorf("read output %q of store %s: %w", o.name, o.c.dir, ErrClosed)
	}
	var off int64
	prefix := outputDataPrefix(o.name)
	err := o.c.eng.scan(prefix, func(k, v []byte) error {
		if len(k) != len(prefix)+8 {
			return fmt.Errorf("output chunk key %q: %w", k, ErrCorrupt)
		}
		at := int64(binary.BigEndian.Uint64(k[len(prefix):]))
		if at >= n {
			return errEnough // of a batch committed since n was read
		}
		if at != off || at+int64(len(v)) > n {
			return fmt.Errorf("output chunk at %d of %d bytes, after %d bytes of %d committed: %w", at, len(v), off, n, ErrCorrupt)
		}
		if _, err := w.Write(v); err != nil {
			return err
		}
		off += int64(len(v))
		return nil
	})
	if errors.Is(err, errEnough) {
		err = nil
	}
	if err == nil && off != n {
		err = fmt.Errorf("the chunks hold %d bytes of the %d committed: %w", off, n, ErrCorrupt)
	}
	if err != nil {
		return off, fmt.Errorf("read output %q of store %s: %w", o.name, o.c.dir, err)
	}
	return off, nil
}

// errEnough stops a scan that read what it wanted.
var errEnough = errors.New("enough")

// outputChunk is the most bytes of one output chunk of an engine that
// keeps outputs.
const outputChunk = 1 << 20

// stage makes p, the bytes of batch seq, durable with the batch: for a
// file, it appends p at the committed length (what the output's writer
// wrote of them ahead aside) and syncs it now; for an output the engine
// keeps, it adds p to ws as chunks. Then it adds the new length to ws,
// and returns ws and the new length.
func (o *Output) stage(seq uint64, p []byte, ws []write) ([]write, int64, error) {
	var n int64
	if o.f != nil {
		var err error
		if n, err = o.append(seq, p); err != nil {
			return ws, 0, err
		}
		o.mu.Lock()
		o.pending = crc32.Update(o.sum, crcTable, p)
		rec := outputRec{n: n, sum: o.pending, hasSum: true, tail: n - int64(len(p)), tailSum: o.sum, hasTail: true}
		o.mu.Unlock()
		return append(ws, write{key: outputKey(o.name), val: rec.encode()}), n, nil
	} else {
		off := o.Committed()
		for i := 0; i < len(p); i += outputChunk {
			ws = append(ws, write{key: outputChunkKey(o.name, off+int64(i)), val: p[i:min(len(p), i+outputChunk)]})
		}
		n = off + int64(len(p))
	}
	return append(ws, write{key: outputKey(o.name), val: outputRec{n: n}.encode()}), n, nil
}

// The record of an output's committed length: the length, and for a file
// output the CRC-32C of its bytes up to it; since 3b47141 also where the
// bytes of the batch that wrote the record start (its tail) and the
// CRC-32C of the bytes before them, which only a store of format 3 holds
// (see formats: sumEngine.commit writes the format record with the first
// such record, and cuts the tail off in a store of format 1). A record of
// 8 bytes (from before the checksum) has neither, one of 12 bytes no tail.
//
//	+------------------+-----------------------------+----------------+-------------------------+
//	| length, 8 B (BE) | crc32c of [0, length), 4 B  | tail, 8 B (BE) | crc32c of [0, tail), 4 B |
//	+------------------+-----------------------------+----------------+-------------------------+
//
// An open checks the whole committed file against the first CRC when it
// is at most VerifyMaxBytes; a larger one, only its tail before it
// returns (the bytes from tail to length, from the second CRC to the
// first), and the bytes before the tail against the second CRC in the
// background (see openOutput).
type outputRec struct {
	n       int64
	sum     uint32
	hasSum  bool
	tail    int64
	tailSum uint32
	hasTail bool
}

func (r outputRec) encode() []byte {
	b := encodeInt64(r.n)
	if r.hasSum {
		b = binary.BigEndian.AppendUint32(b, r.sum)
		if r.hasTail {
			b = binary.BigEndian.AppendUint64(b, uint64(r.tail))
			b = binary.BigEndian.AppendUint32(b, r.tailSum)
		}
	}
	return b
}

// encodeOutputLen is the record of a file output of length n whose bytes
// have the CRC-32C sum (withSum), with no tail: an open checks the whole
// file.
func encodeOutputLen(n int64, sum uint32, withSum bool) []byte {
	return outputRec{n: n, sum: sum, hasSum: withSum}.encode()
}

// The lengths of an output record: with a checksum, and with a tail too
// (of format 3, see formats).
const (
	outputRecSumLen  = 12
	outputRecTailLen = 24
)

func decodeOutputRec(b []byte) (r outputRec, ok bool) {
	switch len(b) {
	case 8:
		r.n, ok = decodeInt64(b)
	case outputRecSumLen, outputRecTailLen:
		r.n, ok = decodeInt64(b[:8])
		r.sum, r.hasSum = binary.BigEndian.Uint32(b[8:]), true
		if len(b) == outputRecTailLen {
			r.tail, r.tailSum, r.hasTail = int64(binary.BigEndian.Uint64(b[12:])), binary.BigEndian.Uint32(b[20:]), true
			ok = ok && r.tail >= 0 && r.tail <= r.n
		}
	}
	return r, ok && r.n >= 0
}

// append writes p, the bytes of batch seq, at the committed length (over
// the bytes of an earlier failed batch, if any), but for those the
// output's writer wrote there ahead, and syncs the file. It returns the
// new length.
func (o *Output) append(seq uint64, p []byte) (int64, error) {
	o.mu.Lock()
	off := o.committed
	a := o.ah
	if a != nil && a.seq == seq {
		o.ah = nil
	} else {
		a = nil
	}
	// The next batch's bytes go after these: its writer may start.
	o.next, o.stagedSeq = off+int64(len(p)), seq
	o.mu.Unlock()
	from, synced := 0, false
	if a != nil {
		a.wg.Wait()
		o.mu.Lock()
		err := a.err
		o.mu.Unlock()
		if err != nil {
			return 0, fmt.Errorf("write %d bytes at %d to output %s: %w", a.sent, a.base, o.path, err)
		}
		if a.base == off {
			from = a.sent
			o.mu.Lock()
			synced = a.synced == len(p)
			o.mu.Unlock()
		}
	}
	if from < len(p) {
		synced = false
		if _, err := o.f.WriteAt(p[from:], off+int64(from)); err != nil {
			return 0, fmt.Errorf("write %d bytes at %d to output %s: %w", len(p)-from, off+int64(from), o.path, err)
		}
	}
	// synced: the writer wrote every byte of the batch where it goes, then
	// synced the file, while the batch before committed.
	if !synced {
		if err := o.f.Datasync(); err != nil {
			return 0, fmt.Errorf("sync output %s: %w", o.path, err)
		}
	}
	o.mu.Lock()
	o.syncedSeq = seq
	o.mu.Unlock()
	return off + int64(len(p)), nil
}

// writeAhead gives the writer of each file output the bytes that b, the
// staging batch, appends to it, once they are aheadChunk past what it was
// given: the writer writes them where they go in the file while the batch
// fills (past the committed length, unsynced: a crash leaves them to be
// cut off at the next open, as those of a batch whose commit failed), and
// the commit writes only the rest before its sync, off the way of the
// Applies that wait for it. The bytes of a batch are given only once the
// last batch before it that holds bytes of the output, if one is in
// flight, is being written (their offset is known then), and only those of
// Applies that returned: a rollback never cuts them. c.mu and the token
// held, in Apply.
//
// With sync, b is overfull (see core.syncAhead): the writer is given the
// rest of its bytes, however few, and syncs the file after them.
func (c *core) writeAhead(b *batch, sync bool) {
	for i := range b.outs {
		bo := &b.outs[i]
		if sync && bo.synced || !sync && len(bo.buf)-bo.sent < aheadChunk {
			continue
		}
		// c.mu is held, and a declaration takes c.mu under c.outMu
		// (core.output): when one runs, the bytes wait for the next line.
		if !c.outMu.TryLock() {
			continue
		}
		o := c.outputs[bo.name]
		c.outMu.Unlock()
		if o == nil || o.f == nil {
			bo.sent = len(bo.buf) // the engine keeps it: nothing to write ahead
			continue
		}
		// prev: the last batch before b that holds bytes of o, if one is
		// in flight (the pending one, then the sealed one): b's bytes go
		// after its, which are placed once it is staged. Not only the
		// batch just before b: one without bytes of o (a pending batch)
		// says nothing of where they go (TestWriteAheadWaitsForEveryBatchBefore).
		var prev uint64
		for _, s := range [...]*batch{c.pending, c.sealed} {
			if s == nil || s == b || prev != 0 {
				continue
			}
			for j := range s.outs {
				if s.outs[j].name == bo.name {
					prev = s.seq
				}
			}
		}
		if o.give(b.seq, prev, bo.buf[bo.sent:], bo.sent, sync) {
			bo.sent = len(bo.buf)
			bo.synced = sync
		}
	}
}

// give hands p, the bytes of batch seq from its byte from on, to the
// output's writer, unless the batch prev (0: none) is not handed to stage
// yet, the batch seq is (its commit writes them), or the writer has no
// room: it reports whether it did. With sync, the writer syncs the file
// once it has written them; it is given them only once the stage of the
// batch before has synced (see syncedSeq).
func (o *Output) give(seq, prev uint64, p []byte, from int, sync bool) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.aclosed || (prev != 0 && o.stagedSeq != prev) || o.stagedSeq >= seq || (sync && o.syncedSeq != o.stagedSeq) {
		return false
	}
	a := o.ah
	if a == nil || a.seq != seq {
		a = &ahead{seq: seq, base: o.next}
		o.ah = a
	}
	if a.sent != from || a.err != nil {
		return false
	}
	if o.aq == nil {
		o.aq, o.adone = make(chan aheadWrite, 8), make(chan struct{})
		go o.writer(o.aq)
	}
	a.wg.Add(1)
	select {
	case o.aq <- aheadWrite{a: a, p: p, off: a.base + int64(from), sync: sync, upto: from + len(p)}:
		a.sent += len(p)
		return true
	default:
		a.wg.Done()
		return false
	}
}

// writer writes the chunks it is given, until the output closes. A chunk
// of a batch whose earlier chunk failed is not written: the batch's
// commit fails with the first error.
func (o *Output) writer(q <-chan aheadWrite) {
	defer close(o.adone)
	for w := range q {
		o.mu.Lock()
		failed := w.a.err != nil
		o.mu.Unlock()
		if !failed && len(w.p) > 0 {
			if _, err := o.f.WriteAt(w.p, w.off); err != nil {
				failed = true
				o.mu.Lock()
				if w.a.err == nil {
					w.a.err = err
				}
				o.mu.Unlock()
			}
		}
		if !failed && w.sync {
			// The chunks before this one are written (they came first):
			// the batch's first upto bytes are durable once this returns.
			err := o.f.Datasync()
			o.mu.Lock()
			if err != nil {
				if w.a.err == nil {
					w.a.err = fmt.Errorf("sync: %w", err)
				}
			} else {
				w.a.synced = w.upto
			}
			o.mu.Unlock()
		}
		w.a.wg.Done()
	}
}

// stopWriter ends the output's writer, once it has written what it was
// given.
func (o *Output) stopWriter() {
	o.mu.Lock()
	o.aclosed = true
	q, done := o.aq, o.adone
	o.aq = nil
	o.mu.Unlock()
	if q != nil {
		close(q)
		<-done
	}
}

// reserved are the names a store uses itself.
var reservedNames = map[string]bool{storeFile: true, storeFile + ".tmp": true, lockFile: true, boltFile: true, pebbleDir: true,
	outputsLeftFile: true, outputsLeftFile + ".tmp": true}

func validOutputName(name string) bool {
	return name != "" && name != "." && name != ".." && filepath.Base(name) == name &&
		!reservedNames[name] && !reservedNames[filepath.Clean(name)]
}

// output returns the declared output name, declaring it if needed: its
// committed length 0 is recorded durably before the file is created, so
// that a crash can never leave bytes in a file the store does not know.
// So a file of that name that is not empty when the output is declared is
// none of the store's: it is refused (ErrOutputExists), never emptied.
func (c *core) output(name string) (*Output, error) {
	c.outMu.Lock()
	defer c.outMu.Unlock()
	if o := c.outputs[name]; o != nil {
		return o, nil
	}
	if !validOutputName(name) {
		return nil, fmt.Errorf("output %q in store %s: want a plain file name not used by the store: %w", name, c.dir, ErrBadName)
	}
	c.mu.Lock()
	err := c.unusable()
	c.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("declare output %q in store %s: %w", name, c.dir, err)
	}
	_, inEngine := c.rawEngine().(interface{ outputsInEngine() })
	path := filepath.Join(c.dir, name)
	if fi, err := c.fsys.Stat(path); inEngine {
		// No file: the engine keeps the output.
	} else if err == nil && fi.Size() > 0 {
		return nil, fmt.Errorf("declare output %q in store %s: %s holds %d bytes that the store did not write (it has no record of the output); it may be someone's data, and the store does not empty it: move the file away, or declare another output name: %w",
			name, c.dir, path, fi.Size(), ErrOutputExists)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("declare output %q in store %s: %w", name, c.dir, err)
	}
	rec := outputRec{hasSum: !inEngine, hasTail: !inEngine}
	if err := c.eng.commit([]write{{key: outputKey(name), val: rec.encode()}}); err != nil {
		return nil, fmt.Errorf("declare output %q in %s store %s: %w", name, c.kind, c.dir, err)
	}
	o, err := c.openOutput(name, rec, outputLeft{})
	if err != nil {
		return nil, err
	}
	if o.f == nil {
		c.outputs[name] = o
		return o, nil
	}
	if err := c.fsys.SyncDir(c.dir); err != nil {
		return nil, errors.Join(fmt.Errorf("declare output %q: sync directory %s: %w", name, c.dir, err), o.f.Close())
	}
	c.outputs[name] = o
	return o, nil
}

// loadOutputs opens every output the store records (at open).
func (c *core) loadOutputs() error {
	var names []string
	recs := make(map[string]outputRec)
	err := c.eng.scan([]byte{tagOutput}, func(k, v []byte) error {
		r, ok := decodeOutputRec(v)
		if !ok {
			return fmt.Errorf("committed length of output %q: %w", k[1:], ErrCorrupt)
		}
		if r.hasTail {
			c.heldTail()
		}
		names = append(names, string(k[1:]))
		recs[string(k[1:])] = r
		return nil
	})
	if err != nil {
		return fmt.Errorf("open store %s: %w", c.dir, err)
	}
	// The record vouches for the files only until they are used again:
	// removed now, it is written again by a clean close, so that a crash
	// (or a failure found after this open) leaves none.
	left := c.outputsLeft()
	if left != nil {
		c.recordOutputsLeft(nil, false)
	}
	for _, name := range names {
		o, err := c.openOutput(name, recs[name], left[name])
		if err != nil {
			return errors.Join(err, c.closeOutputs(false))
		}
		c.outputs[name] = o
	}
	return nil
}

// openOutput opens the output file, cuts it back to the committed length
// of its record r, and checks its bytes against r's checksums when it has
// them: a file of at most VerifyMaxBytes whole before it returns, and a
// larger one too unless it is exactly as the store left it checked at its
// last clean close (left, read from outputsLeftFile; the zero outputLeft
// for none): then only its last batch's bytes, and the bytes before them
// in the background (checkInBackground), so that a restart does not read
// the whole file (380 MB for 10,000,000 ledger lines). A file changed while
// the store was closed (an editor, a copy over it, a crash after a commit:
// another size, modification time or inode) is read whole before a line is
// applied, whatever its size. Damage the background check finds fails the
// store.
func (c *core) openOutput(name string, r outputRec, left outputLeft) (*Output, error) {
	committed := r.n
	if _, ok := c.rawEngine().(interface{ outputsInEngine() }); ok {
		return &Output{name: name, c: c, committed: committed}, nil
	}
	path := filepath.Join(c.dir, name)
	f, err := c.fsys.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open output %s: %w", path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, errors.Join(fmt.Errorf("open output %s: %w", path, err), f.Close())
	}
	// Before a cut back below moves its modification time.
	asLeft := left.size > 0 && left == statOutputLeft(path)
	switch size := fi.Size(); {
	case size < committed:
		return nil, errors.Join(fmt.Errorf("output %s is %d bytes, shorter than the %d bytes committed: it was cut or replaced outside the store; restore it, or remove the store directory to start over: %w",
			path, size, committed, ErrCorrupt), f.Close())
	case size > committed:
		// The output is recorded, so every byte of it is the store's:
		// those past the committed length belong to a batch whose state
		// never committed, and the feed re-delivers their lines.
		c.log.Info("state: output file cut back to its committed length (the bytes past it belong to a batch whose state was never saved)",
			"output", path, "size", size, "committed", committed)
		err := f.Truncate(committed)
		if err == nil {
			err = f.Sync()
		}
		if err != nil {
			return nil, errors.Join(fmt.Errorf("cut output %s back to %d bytes: %w", path, committed, err), f.Close())
		}
	}
	o := &Output{name: name, path: path, f: f, c: c, committed: committed, next: committed, vouched: true}
	verifyMax := c.opts.verifyMaxBytes()
	if r.hasTail && (verifyMax < 0 || committed > verifyMax && asLeft) {
		// The last batch's bytes now: a file replaced or changed at its
		// end (the likeliest mistake) is found before a line is applied.
		sum, err := crcRange(f, r.tail, committed, r.tailSum, nil)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("read output %s to check it: %w", path, err), f.Close())
		}
		if sum != r.sum {
			return nil, errors.Join(o.damaged(fmt.Sprintf("the checksum of its last committed bytes (%d to %d) is not the one the store recorded with them: the file was changed outside the store or damaged", r.tail, committed)), f.Close())
		}
		o.sum, o.pending = r.sum, r.sum
		if verifyMax >= 0 && r.tail > 0 {
			o.checkInBackground(r.tail, r.tailSum)
		}
		return o, nil
	}
	// The whole file is read: a byte changed anywhere is found now,
	// before a line more is applied.
	if r.hasTail && committed > verifyMax {
		c.log.Info("state: the output file is not as the store left it at its last clean close (or it has no record of one): it is checked whole before the store opens",
			"output", path, "bytes", committed, "verify_max_bytes", verifyMax)
	}
	sum, err := crcRange(f, 0, committed, 0, nil)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("read output %s to check it: %w", path, err), f.Close())
	}
	if r.hasSum && sum != r.sum {
		return nil, errors.Join(o.damaged(fmt.Sprintf("the checksum of its %d committed bytes is %08x, the store recorded %08x with them: the file was changed outside the store or damaged", committed, sum, r.sum)), f.Close())
	}
	o.sum, o.pending = sum, sum
	return o, nil
}

// damaged is the *CorruptError of damage to o's file.
func (o *Output) damaged(detail string) *CorruptError {
	return &CorruptError{Backend: o.c.kind, Dir: o.c.dir, File: o.path, Record: fmt.Sprintf("output %q", o.name), Detail: detail}
}

// crcChunk is how much of an output file a check reads at a time.
const crcChunk = 1 << 20

// crcRange returns the CRC-32C of f's bytes from..to, continued from sum
// (the CRC of the bytes before from). It returns errCheckStopped once stop
// (nil: never) is closed.
func crcRange(f vfs.File, from, to int64, sum uint32, stop <-chan struct{}) (uint32, error) {
	buf := make([]byte, min(crcChunk, to-from))
	for off := from; off < to; {
		if stop != nil {
			select {
			case <-stop:
				return 0, errCheckStopped
			default:
			}
		}
		n, err := f.ReadAt(buf[:min(int64(len(buf)), to-off)], off)
		sum = crc32.Update(sum, crcTable, buf[:n])
		off += int64(n)
		if err != nil && !(errors.Is(err, io.EOF) && off == to) {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return 0, err
		}
	}
	return sum, nil
}

// checkInBackground checks the first n bytes of o's file against sum, their
// CRC-32C recorded with the state, in the background: leftCheckDelay after
// the open (a short run, such as a restart that applies a few lines, does
// not share the machine with its reads), or at once when a backup waits
// for it. Nothing else waits for it: the store never reads
// the output's bytes, and its commits append past them. Damage found fails
// the store (every later Apply, Flush and commit returns the
// *CorruptError); closeOutputs ends the check.
func (o *Output) checkInBackground(n int64, sum uint32) {
	bg := &bgCheck{done: make(chan struct{}), stop: make(chan struct{}), left: true, hurry: make(chan struct{})}
	o.bg = bg
	c := o.c
	c.log.Info("state: the output file is larger than the check at open covers: its last batch's bytes were checked, the rest is checked in the background",
		"output", o.path, "bytes", o.committed, "verify_max_bytes", c.opts.verifyMaxBytes())
	go func() {
		defer close(bg.done)
		if !delayed(bg.hurry, bg.stop) {
			bg.err = fmt.Errorf("check output %s: %w", o.path, ErrClosed)
			return
		}
		if h := c.opts.hooks; h != nil && h.outputCheck != nil {
			h.outputCheck(bg.stop)
		}
		start := time.Now()
		got, err := crcRange(o.f, 0, n, 0, bg.stop)
		switch {
		case errors.Is(err, errCheckStopped):
			bg.err = fmt.Errorf("check output %s: %w", o.path, ErrClosed)
			return
		case err != nil:
			err = fmt.Errorf("read output %s to check it: %w", o.path, err)
		case got != sum:
			err = o.damaged(fmt.Sprintf("the checksum of its first %d committed bytes is %08x, the store recorded %08x with them: the file was changed outside the store or damaged", n, got, sum))
		default:
			c.log.Info("state: the output file passed its check", "output", o.path, "bytes", n, "took", time.Since(start).Round(time.Millisecond))
			return
		}
		bg.err = err
		c.log.Error("state: the check of the output file found damage: the store refuses every Apply and commit from now on", "output", o.path, "err", err)
		c.fail(err)
	}()
}

// outputsChecked waits, until ctx is done, for the checks of output files
// running in the background, starting them at once, and returns the first
// error: a backup copies nothing of a damaged file. what
// names the read, for the error.
func (c *core) outputsChecked(ctx context.Context, what string) error {
	c.outMu.Lock()
	var bgs []*bgCheck
	for _, o := range c.outputs {
		if o.bg != nil {
			bgs = append(bgs, o.bg)
		}
	}
	c.outMu.Unlock()
	for _, bg := range bgs {
		bg.start()
		select {
		case <-bg.done:
			if bg.err != nil {
				return bg.err
			}
		case <-ctx.Done():
			return fmt.Errorf("%s of %s store %s waits for the check of its output files, still running: %w", what, c.kind, c.dir, ctx.Err())
		}
	}
	return nil
}

// closeOutputs closes the output files. clean says the store flushed
// everything and never failed: each file it vouched for (and whose check
// in the background, if it ran, found nothing) is then recorded as left
// checked in outputsLeftFile; otherwise the record is removed.
func (c *core) closeOutputs(clean bool) error {
	c.outMu.Lock()
	defer c.outMu.Unlock()
	var errs []error
	left := make(map[string]outputLeft)
	for name, o := range c.outputs {
		vouched := o.vouched
		if o.bg != nil {
			stopAndWait(o.bg.stop, o.bg.done)
			if o.bg.err != nil && !errors.Is(o.bg.err, ErrClosed) {
				vouched = false
			}
		}
		if o.f == nil {
			delete(c.outputs, name)
			continue
		}
		o.stopWriter()
		err := o.f.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("close output %s: %w", o.path, err))
		}
		if clean && vouched && err == nil {
			if l := leaveOutput(o.path); l.size > 0 {
				left[name] = l
			}
		}
		delete(c.outputs, name)
	}
	c.recordOutputsLeft(left, len(errs) == 0 && clean)
	return errors.Join(errs...)
}
