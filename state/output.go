package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

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
	ah        *ahead
	aq        chan aheadWrite
	aclosed   bool
	adone     chan struct{}
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
}

// aheadWrite is one chunk for an output's writer: p at off, of batch a.
type aheadWrite struct {
	a   *ahead
	p   []byte
	off int64
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
		sum := o.pending
		o.mu.Unlock()
		return append(ws, write{key: outputKey(o.name), val: encodeOutputLen(n, sum, true)}), n, nil
	} else {
		off := o.Committed()
		for i := 0; i < len(p); i += outputChunk {
			ws = append(ws, write{key: outputChunkKey(o.name, off+int64(i)), val: p[i:min(len(p), i+outputChunk)]})
		}
		n = off + int64(len(p))
	}
	return append(ws, write{key: outputKey(o.name), val: encodeOutputLen(n, 0, false)}), n, nil
}

// The record of an output's committed length: the length, and for a file
// output the CRC-32C of its bytes up to it, checked when the store opens
// (a record of 8 bytes, from before the checksum, has none).
//
//	+------------------+------------------------------------------+
//	| length, 8 B (BE) | crc32c of the file's first length bytes, 4 B |
//	+------------------+------------------------------------------+
func encodeOutputLen(n int64, sum uint32, withSum bool) []byte {
	b := encodeInt64(n)
	if withSum {
		b = binary.BigEndian.AppendUint32(b, sum)
	}
	return b
}

func decodeOutputLen(b []byte) (n int64, sum uint32, hasSum, ok bool) {
	switch len(b) {
	case 8:
		n, ok = decodeInt64(b)
	case 12:
		n, ok = decodeInt64(b[:8])
		sum, hasSum = binary.BigEndian.Uint32(b[8:]), true
	}
	return n, sum, hasSum, ok && n >= 0
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
	from := 0
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
		}
	}
	if from < len(p) {
		if _, err := o.f.WriteAt(p[from:], off+int64(from)); err != nil {
			return 0, fmt.Errorf("write %d bytes at %d to output %s: %w", len(p)-from, off+int64(from), o.path, err)
		}
	}
	if err := o.f.Datasync(); err != nil {
		return 0, fmt.Errorf("sync output %s: %w", o.path, err)
	}
	return off + int64(len(p)), nil
}

// writeAhead gives the writer of each file output the bytes that b, the
// staging batch, appends to it, once they are aheadChunk past what it was
// given: the writer writes them where they go in the file while the batch
// fills (past the committed length, unsynced: a crash leaves them to be
// cut off at the next open, as those of a batch whose commit failed), and
// the commit writes only the rest before its sync, off the way of the
// Applies that wait for it. The bytes of a batch are given only once the
// batch before it, if it holds bytes of the output, is being written
// (their offset is known then), and only those of Applies that returned:
// a rollback never cuts them. c.mu and the token held, in Apply.
func (c *core) writeAhead(b *batch) {
	for i := range b.outs {
		bo := &b.outs[i]
		if len(bo.buf)-bo.sent < aheadChunk {
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
		var prev uint64 // the sealed batch, if it holds bytes of o
		if s := c.sealed; s != nil {
			for j := range s.outs {
				if s.outs[j].name == bo.name {
					prev = s.seq
				}
			}
		}
		if o.give(b.seq, prev, bo.buf[bo.sent:], bo.sent) {
			bo.sent = len(bo.buf)
		}
	}
}

// give hands p, the bytes of batch seq from its byte from on, to the
// output's writer, unless the batch prev (0: none) is not handed to stage
// yet, the batch seq is (its commit writes them), or the writer has no
// room: it reports whether it did.
func (o *Output) give(seq, prev uint64, p []byte, from int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.aclosed || (prev != 0 && o.stagedSeq != prev) || o.stagedSeq >= seq {
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
	case o.aq <- aheadWrite{a: a, p: p, off: a.base + int64(from)}:
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
		if !failed {
			if _, err := o.f.WriteAt(w.p, w.off); err != nil {
				o.mu.Lock()
				if w.a.err == nil {
					w.a.err = err
				}
				o.mu.Unlock()
			}
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
var reservedNames = map[string]bool{storeFile: true, storeFile + ".tmp": true, lockFile: true, boltFile: true, pebbleDir: true}

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
	if err := c.eng.commit([]write{{key: outputKey(name), val: encodeOutputLen(0, 0, !inEngine)}}); err != nil {
		return nil, fmt.Errorf("declare output %q in %s store %s: %w", name, c.kind, c.dir, err)
	}
	o, err := c.openOutput(name, 0, 0, !inEngine)
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
	type outRec struct {
		n      int64
		sum    uint32
		hasSum bool
	}
	var names []string
	lens := make(map[string]outRec)
	err := c.eng.scan([]byte{tagOutput}, func(k, v []byte) error {
		n, sum, hasSum, ok := decodeOutputLen(v)
		if !ok {
			return fmt.Errorf("committed length of output %q: %w", k[1:], ErrCorrupt)
		}
		names = append(names, string(k[1:]))
		lens[string(k[1:])] = outRec{n, sum, hasSum}
		return nil
	})
	if err != nil {
		return fmt.Errorf("open store %s: %w", c.dir, err)
	}
	for _, name := range names {
		r := lens[name]
		o, err := c.openOutput(name, r.n, r.sum, r.hasSum)
		if err != nil {
			c.closeOutputs()
			return err
		}
		c.outputs[name] = o
	}
	return nil
}

// openOutput opens the output file, cuts it back to committed, and checks
// its bytes against sum when the record has one (hasSum).
func (c *core) openOutput(name string, committed int64, sum uint32, hasSum bool) (*Output, error) {
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
	// The whole file is read: a byte changed anywhere is found now,
	// before a line more is applied.
	h := crc32.New(crcTable)
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, committed)); err != nil {
		return nil, errors.Join(fmt.Errorf("read output %s to check it: %w", path, err), f.Close())
	}
	if hasSum && h.Sum32() != sum {
		return nil, errors.Join(&CorruptError{Backend: c.kind, Dir: c.dir, File: path, Record: fmt.Sprintf("output %q", name),
			Detail: fmt.Sprintf("the checksum of its %d committed bytes is %08x, the store recorded %08x with them: the file was changed outside the store or damaged", committed, h.Sum32(), sum)}, f.Close())
	}
	return &Output{name: name, path: path, f: f, c: c, committed: committed, next: committed, sum: h.Sum32(), pending: h.Sum32()}, nil
}

func (c *core) closeOutputs() error {
	c.outMu.Lock()
	defer c.outMu.Unlock()
	var errs []error
	for name, o := range c.outputs {
		if o.f == nil {
			delete(c.outputs, name)
			continue
		}
		o.stopWriter()
		if err := o.f.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close output %s: %w", o.path, err))
		}
		delete(c.outputs, name)
	}
	return errors.Join(errs...)
}
