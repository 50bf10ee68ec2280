package state

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"

	bolt "go.etcd.io/bbolt"
)

// Iteration, snapshots and backup of the bbolt backend.
//
// A cursor inside Apply and View reads a page of keys at a time, each
// page in a read transaction of its own, copied out: no read transaction
// stays open while the loop runs. (bbolt grows its file by mapping it
// again, which waits for every open read transaction: one held by a long
// loop would stall the commits.) A snapshot is one read transaction,
// held until it closes, so a snapshot held long on a store whose file
// must grow delays that commit (see Store.Snapshot).

// Page sizes of a paged cursor: the first page is small (a loop that
// stops after a few keys copies a few), then they double.
const (
	firstPage   = 64
	maxPage     = 4096
	maxPageSize = 1 << 20 // bytes of keys and values
)

func (e *boltEngine) cursor(lo, hi []byte, reverse bool) cursor {
	return &pager{lo: lo, hi: hi, rev: reverse, want: firstPage, fill: e.fill}
}

// fill reads the page of p that follows its last key. The keys and values
// are copied into the page inside the guard: a damaged page is a
// *CorruptError of this read, never a panic or fault later.
func (e *boltEngine) fill(p *pager) (err error) {
	if err := e.check(); err != nil {
		return err
	}
	defer func(old bool) { e.guard(old, recover(), &err) }(debug.SetPanicOnFault(true))
	return e.db.View(func(tx *bolt.Tx) error {
		c := newBoltCursor(tx.Bucket(boltBucket), e.tables)
		k, v := p.position(c)
		for ; k != nil && p.inRange(k); k, v = p.step(c) {
			if p.add(k, v) {
				break
			}
		}
		if k == nil || !p.inRange(k) {
			p.end = true
		}
		return nil
	})
}

// pager is a cursor that reads a range a page at a time through fill,
// which calls add for each key of the page. Each page resumes after the
// last key of the one before.
type pager struct {
	lo, hi []byte
	rev    bool
	fill   func(p *pager) error
	// The page: keys and values in buf, at offs.
	buf  []byte
	offs [][4]int
	i    int
	// last is the last key of the page before; started is set once
	// there is one.
	last    []byte
	started bool
	end     bool // no page after this one
	want    int  // keys of the next page
	failed  error
}

// position moves c to the first key of the next page.
func (p *pager) position(c boltCursor) (k, v []byte) {
	switch {
	case !p.started && !p.rev:
		return c.Seek(p.lo)
	case !p.rev:
		k, v = c.Seek(p.last)
		if k != nil && bytes.Equal(k, p.last) {
			k, v = c.Next()
		}
		return k, v
	case !p.started && p.hi == nil:
		return c.Last()
	}
	at := p.hi
	if p.started {
		at = p.last
	}
	// The key before at: the one before the first key >= at.
	if k, _ = c.Seek(at); k == nil {
		return c.Last()
	}
	return c.Prev()
}

func (p *pager) step(c boltCursor) ([]byte, []byte) {
	if p.rev {
		return c.Prev()
	}
	return c.Next()
}

func (p *pager) inRange(k []byte) bool {
	if p.rev {
		return bytes.Compare(k, p.lo) >= 0
	}
	return p.hi == nil || bytes.Compare(k, p.hi) < 0
}

// add copies k and v into the page; it reports whether the page is full.
func (p *pager) add(k, v []byte) bool {
	n := len(p.buf)
	p.buf = append(append(p.buf, k...), v...)
	p.offs = append(p.offs, [4]int{n, n + len(k), n + len(k), len(p.buf)})
	return len(p.offs) >= p.want || len(p.buf) >= maxPageSize
}

func (p *pager) next() bool {
	if p.failed != nil {
		return false
	}
	p.i++
	if p.i < len(p.offs) {
		return true
	}
	if p.end {
		return false
	}
	if n := len(p.offs); n > 0 {
		// The next page resumes after this one's last key.
		o := p.offs[n-1]
		p.last = append(p.last[:0], p.buf[o[0]:o[1]]...)
		p.started = true
	}
	p.buf, p.offs, p.i = p.buf[:0], p.offs[:0], 0
	if err := p.fill(p); err != nil {
		p.failed = err
		return false
	}
	p.want = min(2*p.want, maxPage)
	return len(p.offs) > 0
}

func (p *pager) key() []byte   { o := p.offs[p.i]; return p.buf[o[0]:o[1]:o[1]] }
func (p *pager) value() []byte { o := p.offs[p.i]; return p.buf[o[2]:o[3]:o[3]] }
func (p *pager) err() error    { return p.failed }
func (p *pager) close() error  { return p.failed }

// boltSnap is a snapshot of a bbolt store: a read transaction. Each read
// runs in the engine's guard (see boltEngine.guard), and copies what it
// returns while there: bbolt's keys and values point into its mapped
// file, and a damaged or shortened file faults where they are read.
type boltSnap struct {
	e  *boltEngine
	tx *bolt.Tx
	b  *bolt.Bucket
}

func (e *boltEngine) snapshot(context.Context) (_ snapshot, err error) {
	if err := e.check(); err != nil {
		return nil, err
	}
	defer func(old bool) { e.guard(old, recover(), &err) }(debug.SetPanicOnFault(true))
	tx, err := e.db.Begin(false)
	if err != nil {
		return nil, err
	}
	return &boltSnap{e: e, tx: tx, b: tx.Bucket(boltBucket)}, nil
}

// get returns a copy of the value of key.
func (s *boltSnap) get(key []byte) (val []byte, ok bool, err error) {
	if err := s.e.check(); err != nil {
		return nil, false, err
	}
	defer func(old bool) { s.e.guard(old, recover(), &err) }(debug.SetPanicOnFault(true))
	if v := tableGet(s.b, key, s.e.tables); v != nil {
		return bytes.Clone(v), true, nil
	}
	return nil, false, nil
}

func (s *boltSnap) cursor(lo, hi []byte, reverse bool) cursor {
	return &txCursor{e: s.e, c: newBoltCursor(s.b, s.e.tables), p: pager{lo: lo, hi: hi, rev: reverse}}
}

func (s *boltSnap) close() (err error) {
	defer func(old bool) { s.e.guard(old, recover(), &err) }(debug.SetPanicOnFault(true))
	return s.tx.Rollback()
}

// txCursor walks a bbolt cursor of a snapshot's transaction, each step in
// the engine's guard. The key and value are copied into buffers of the
// cursor (reused: no allocation per key once they are large enough), valid
// until the next step.
type txCursor struct {
	e      *boltEngine
	c      boltCursor
	p      pager // its bounds and positioning only
	k, v   []byte
	ok     bool
	failed error
}

func (t *txCursor) next() bool {
	if t.failed != nil {
		return false
	}
	if err := t.step(); err != nil {
		t.failed, t.ok = err, false
	}
	return t.ok
}

func (t *txCursor) step() (err error) {
	if err := t.e.check(); err != nil {
		return err
	}
	defer func(old bool) { t.e.guard(old, recover(), &err) }(debug.SetPanicOnFault(true))
	var k, v []byte
	switch {
	case !t.p.started:
		k, v = t.p.position(t.c)
		t.p.started = true
	case t.ok:
		k, v = t.p.step(t.c)
	}
	t.ok = k != nil && t.p.inRange(k)
	if t.ok {
		t.k, t.v = append(t.k[:0], k...), append(t.v[:0], v...)
	}
	return nil
}

func (t *txCursor) key() []byte   { return t.k }
func (t *txCursor) value() []byte { return t.v }
func (t *txCursor) err() error    { return t.failed }
func (t *txCursor) close() error  { return t.failed }

// backup writes the database as one read transaction sees it (bbolt's
// Tx.WriteTo: a consistent copy, while commits go on) to dir/state.bolt,
// after reading every value of that transaction (see checkCopy).
func (e *boltEngine) backup(ctx context.Context, dir string, verify func(k, v []byte) ([]byte, error)) (_ string, _ map[string]int64, err error) {
	sn, err := e.snapshot(ctx)
	if err != nil {
		return "", nil, err
	}
	s := sn.(*boltSnap)
	defer func() { err = errors.Join(err, s.close()) }()
	outs, err := outputLengths(s, verify)
	if err != nil {
		return "", nil, err
	}
	if err := checkCopy(ctx, s, verify); err != nil {
		return "", nil, err
	}
	path := filepath.Join(dir, boltFile)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", nil, err
	}
	err = s.writeTo(ctxWriter{ctx, f})
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", nil, fmt.Errorf("write %s: %w", path, err)
	}
	return Bolt, outs, nil
}

// writeTo writes the snapshot's database to w, in the engine's guard.
func (s *boltSnap) writeTo(w io.Writer) (err error) {
	if err := s.e.check(); err != nil {
		return err
	}
	defer func(old bool) { s.e.guard(old, recover(), &err) }(debug.SetPanicOnFault(true))
	_, err = s.tx.WriteTo(w)
	return err
}

// ctxWriter is a writer that fails once ctx is done.
type ctxWriter struct {
	ctx context.Context
	f   *os.File
}

func (w ctxWriter) Write(p []byte) (int, error) {
	if err := w.ctx.Err(); err != nil {
		return 0, err
	}
	return w.f.Write(p)
}

// outputLengths returns the committed length of every output, as r holds
// them.
func outputLengths(r reader, verify func(k, v []byte) ([]byte, error)) (map[string]int64, error) {
	outs := make(map[string]int64)
	c := r.cursor([]byte{tagOutput}, []byte{tagOutput + 1}, false)
	for c.next() {
		v := c.value()
		if verify != nil {
			var err error
			if v, err = verify(c.key(), v); err != nil {
				return nil, errors.Join(err, c.close())
			}
		}
		r, ok := decodeOutputRec(v)
		if !ok {
			return nil, errors.Join(fmt.Errorf("committed length of output %q: %w", c.key()[1:], ErrCorrupt), c.close())
		}
		outs[string(c.key()[1:])] = r.n
	}
	return outs, c.close()
}
