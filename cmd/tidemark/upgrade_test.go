package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/tidemark-go/tidemark/state"
)

// TestStoreUpgrade upgrades a bbolt store of format 1 (as tidemark before
// value checksums made a new one: its STORE file and its format record),
// then finds nothing to do, on it and on a new store (of format 3).
func TestStoreUpgrade(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	db, err := bolt.Open(filepath.Join(dir, "state.bolt"), 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("tidemark"))
		if err != nil {
			return err
		}
		return b.Put([]byte("v"), []byte("tidemark-state 1"))
	}))
	require.NoError(t, db.Close())
	require.NoError(t, os.WriteFile(filepath.Join(dir, "STORE"), []byte("tidemark state store\nbackend bbolt\n"), 0o644))

	r := tm("store", "upgrade", dir)
	expect(t, r, exitOK)
	require.Contains(t, r.stdout, "upgraded from format 1 to format 3")
	r = tm("store", "upgrade", dir)
	expect(t, r, exitOK)
	require.Contains(t, r.stdout, "already of format 2 or later")
	r = tm("store", "upgrade", makeStore(t, state.Pebble, ""))
	expect(t, r, exitOK)
	require.Contains(t, r.stdout, "already of format 2 or later")
	expect(t, tm("store", "upgrade"), exitUsage)
	r = tm("store", "upgrade", t.TempDir())
	expect(t, r, exitFail)
	require.Contains(t, r.stderr, "STORE")
}
