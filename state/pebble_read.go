package state

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2"
)

// Iteration, snapshots and backup of the Pebble backend: a Pebble
// iterator (a consistent view of its own, held while the loop runs), a
// Pebble snapshot, and a Pebble checkpoint.

// estimateKeys returns about how many keys the database's tables hold:
// the entries their properties count (a key in two levels counts twice; a
// key only in the memtable not at all), 0 when they cannot be read. It
// reads the properties block of each table not open yet. A panic of
// Pebble's there fails the engine as any other (recoverFatal): the reads
// after it say so.
func (e *pebbleEngine) estimateKeys() int64 {
	n, err := e.tableEntries()
	if err != nil {
		return 0
	}
	return n
}

func (e *pebbleEngine) tableEntries() (n int64, err error) {
	defer e.recoverFatal(&err)
	levels, err := e.db.SSTables(pebble.WithProperties())
	if err != nil {
		return 0, err
	}
	for _, l := range levels {
		for _, t := range l {
			if t.Properties != nil {
				n += int64(t.Properties.NumEntries)
			}
		}
	}
	return n, nil
}

func (e *pebbleEngine) cursor(lo, hi []byte, reverse bool) cursor {
	if e.fatal.Load() {
		return &failedCursor{errPebbleFatal}
	}
	return e.newCursor(e.db.NewIter, lo, hi, reverse)
}

// newCursor returns a cursor of an iterator made by newIter (of the
// database, of a snapshot, or of a backup's checkpoint). Pebble's damage
// errors become *CorruptError (see damaged), a panic on damage as in
// every other call (see recoverFatal).
func (e *pebbleEngine) newCursor(newIter func(*pebble.IterOptions) (*pebble.Iterator, error), lo, hi []byte, reverse bool) cursor {
	it, err := e.newIter(newIter, &pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return &failedCursor{err}
	}
	return &pebbleCursor{e: e, it: it, rev: reverse}
}

func (e *pebbleEngine) newIter(newIter func(*pebble.IterOptions) (*pebble.Iterator, error), o *pebble.IterOptions) (_ *pebble.Iterator, err error) {
	defer e.recoverFatal(&err)
	it, err := newIter(o)
	return it, e.damaged(err)
}

type pebbleCursor struct {
	e       *pebbleEngine
	it      *pebble.Iterator
	rev     bool
	started bool
	v       []byte
	failed  error
	closed  bool
}

func (c *pebbleCursor) next() bool {
	if c.failed != nil || c.closed {
		return false
	}
	if c.e.fatal.Load() {
		c.failed = errPebbleFatal
		return false
	}
	defer c.e.recoverFatal(&c.failed)
	var ok bool
	switch {
	case !c.started && c.rev:
		ok = c.it.Last()
	case !c.started:
		ok = c.it.First()
	case c.rev:
		ok = c.it.Prev()
	default:
		ok = c.it.Next()
	}
	c.started = true
	if !ok {
		c.failed = c.e.damaged(c.it.Error())
		return false
	}
	var err error
	if c.v, err = c.it.ValueAndErr(); err != nil {
		c.failed = c.e.damaged(err)
		return false
	}
	return true
}

func (c *pebbleCursor) key() []byte   { return c.it.Key() }
func (c *pebbleCursor) value() []byte { return c.v }
func (c *pebbleCursor) err() error    { return c.failed }

func (c *pebbleCursor) close() (err error) {
	if c.closed {
		return c.failed
	}
	c.closed = true
	defer c.e.recoverFatal(&err)
	return errors.Join(c.failed, c.e.damaged(c.it.Close()))
}

// failedCursor is a cursor that could not be made.
type failedCursor struct{ e error }

func (c *failedCursor) next() bool    { return false }
func (c *failedCursor) key() []byte   { return nil }
func (c *failedCursor) value() []byte { return nil }
func (c *failedCursor) err() error    { return c.e }
func (c *failedCursor) close() error  { return c.e }

// pebbleSnap is a Pebble snapshot.
type pebbleSnap struct {
	e *pebbleEngine
	s *pebble.Snapshot
}

func (e *pebbleEngine) snapshot(context.Context) (_ snapshot, err error) {
	if e.fatal.Load() {
		return nil, errPebbleFatal
	}
	defer e.recoverFatal(&err)
	return &pebbleSnap{e: e, s: e.db.NewSnapshot()}, nil
}

func (s *pebbleSnap) get(key []byte) (_ []byte, _ bool, err error) {
	if s.e.fatal.Load() {
		return nil, false, errPebbleFatal
	}
	defer s.e.recoverFatal(&err)
	return s.e.getFrom(s.s, key)
}

func (s *pebbleSnap) cursor(lo, hi []byte, reverse bool) cursor {
	return s.e.newCursor(s.s.NewIter, lo, hi, reverse)
}

func (s *pebbleSnap) close() (err error) {
	defer s.e.recoverFatal(&err)
	return s.s.Close()
}

// backup makes a Pebble checkpoint in dir/pebble (hard links to the
// tables where dir is on the same file system, copies elsewhere; the WAL
// flushed into it), then reads the outputs' lengths from the copy.
func (e *pebbleEngine) backup(ctx context.Context, dir string, verify func(k, v []byte) ([]byte, error)) (_ string, _ map[string]int64, err error) {
	if e.fatal.Load() {
		return "", nil, errPebbleFatal
	}
	defer e.recoverFatal(&err)
	path := filepath.Join(dir, pebbleDir)
	if err := e.db.Checkpoint(path, pebble.WithFlushedWAL()); err != nil {
		return "", nil, fmt.Errorf("checkpoint into %s: %w", path, err)
	}
	if err := ctx.Err(); err != nil {
		return "", nil, err
	}
	cp, err := pebble.Open(path, &pebble.Options{FS: e.fs, ReadOnly: true, Logger: pebbleLogger{log: e.log}})
	if err != nil {
		return "", nil, fmt.Errorf("open the checkpoint %s: %w", path, e.damaged(err))
	}
	// The checkpoint's tables are the store's own (hard links, or copies
	// of them): damage found in them is named as the store's, and a panic
	// on it leaves the store usable (the engine of the copy is its own).
	ce := &pebbleEngine{db: cp, fs: e.fs, log: e.log, dir: e.dir, path: e.path}
	snap := &pebbleSnap{e: ce, s: cp.NewSnapshot()}
	outs, err := outputLengths(snap, verify)
	if err == nil {
		err = checkCopy(ctx, snap, verify)
	}
	return Pebble, outs, errors.Join(err, snap.close(), cp.Close())
}
