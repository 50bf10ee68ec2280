package state

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// boltFile is the bbolt database file inside a store directory.
const boltFile = "state.bolt"

var boltBucket = []byte("tidemark")

type boltEngine struct {
	db *bolt.DB
}

func openBolt(dir string, opts *Options) (*boltEngine, error) {
	path := filepath.Join(dir, boltFile)
	bo := &bolt.Options{
		Timeout:  opts.lockTimeout(),
		OpenFile: opts.boltOpenFile,
		// NoSync stays false: every commit writes and syncs the data
		// pages, then the meta page.
	}
	db, err := bolt.Open(path, 0o600, bo)
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			return nil, fmt.Errorf("open bbolt %s: another process holds it (waited %v): %w", path, bo.Timeout, ErrLocked)
		}
		return nil, fmt.Errorf("open bbolt %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(boltBucket)
		return err
	})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("open bbolt %s: create bucket: %w", path, err), db.Close())
	}
	return &boltEngine{db: db}, nil
}

func (e *boltEngine) get(key []byte) (val []byte, ok bool, err error) {
	err = e.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(boltBucket).Get(key)
		if v != nil {
			val, ok = append([]byte{}, v...), true
		}
		return nil
	})
	return val, ok, err
}

func (e *boltEngine) scan(prefix []byte, fn func(k, v []byte) error) error {
	return e.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(boltBucket).Cursor()
		for k, v := c.Seek(prefix); k != nil && hasPrefix(k, prefix); k, v = c.Next() {
			if err := fn(k, v); err != nil {
				return err
			}
		}
		return nil
	})
}

// commit writes ws in key order: each Put searches the B+tree from its
// root, and keys in order find the pages of the previous one in the CPU's
// cache and touch each node once, in order (a batch of 10,000 changes in
// the order of their first change spent a third of its commit searching).
// The keys of ws are distinct, so their order changes nothing else.
func (e *boltEngine) commit(ws []write) error {
	slices.SortFunc(ws, func(a, b write) int { return bytes.Compare(a.key, b.key) })
	return e.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(boltBucket)
		for _, w := range ws {
			var err error
			if w.del {
				err = b.Delete(w.key)
			} else {
				err = b.Put(w.key, w.val)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
}

func (e *boltEngine) close() error { return e.db.Close() }

// limits are bbolt's: its Put refuses a longer key or value, and so would
// fail the whole batch's commit.
func (e *boltEngine) limits() (maxKey, maxValue int) { return bolt.MaxKeySize, bolt.MaxValueSize }

// lockTimeout is how long an open waits for another process's lock.
func (o *Options) lockTimeout() time.Duration {
	if o.LockTimeout > 0 {
		return o.LockTimeout
	}
	return DefaultLockTimeout
}
