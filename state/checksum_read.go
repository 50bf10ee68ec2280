package state

import (
	"context"
	"errors"
)

// The checksums of the values read by iteration, snapshots and backups:
// each value a cursor or a snapshot returns is verified and returned
// without its checksum, as get and scan do.

func (s *sumEngine) cursor(lo, hi []byte, reverse bool) cursor {
	c := s.engine.cursor(lo, hi, reverse)
	if !s.sums {
		return c
	}
	return &sumCursor{c: c, s: s}
}

func (s *sumEngine) snapshot(ctx context.Context) (snapshot, error) {
	sn, err := s.engine.snapshot(ctx)
	if err != nil || !s.sums {
		return sn, err
	}
	return &sumSnap{snapshot: sn, s: s}, nil
}

func (s *sumEngine) backup(ctx context.Context, dir string, _ func(k, v []byte) ([]byte, error)) (string, map[string]int64, error) {
	var verify func(k, v []byte) ([]byte, error)
	if s.sums {
		verify = s.verify
	}
	return s.engine.backup(ctx, dir, verify)
}

// sumCursor verifies the values of a cursor.
type sumCursor struct {
	c      cursor
	s      *sumEngine
	v      []byte
	failed error
}

func (c *sumCursor) next() bool {
	if c.failed != nil || !c.c.next() {
		return false
	}
	v, err := c.s.verify(c.c.key(), c.c.value())
	if err != nil {
		c.failed = err
		return false
	}
	c.v = v
	return true
}

func (c *sumCursor) key() []byte   { return c.c.key() }
func (c *sumCursor) value() []byte { return c.v }

func (c *sumCursor) err() error {
	if c.failed != nil {
		return c.failed
	}
	return c.c.err()
}

func (c *sumCursor) close() error { return errors.Join(c.failed, c.c.close()) }

// sumSnap verifies the values of a snapshot.
type sumSnap struct {
	snapshot
	s *sumEngine
}

func (s *sumSnap) get(key []byte) ([]byte, bool, error) {
	v, ok, err := s.snapshot.get(key)
	if err != nil || !ok {
		return v, ok, err
	}
	if v, err = s.s.verify(key, v); err != nil {
		return nil, false, err
	}
	return v, true, nil
}

func (s *sumSnap) cursor(lo, hi []byte, reverse bool) cursor {
	return &sumCursor{c: s.snapshot.cursor(lo, hi, reverse), s: s.s}
}
