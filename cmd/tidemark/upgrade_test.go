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
// value checksums made a new one: its STORE file, its format record and a
// balance) to format 4: the balance reads the same, from its table's
// bucket. Then it finds nothing to do, on it and on a new Pebble store (of
// format 3).
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
		if err := b.Put([]byte("v"), []byte("tidemark-state 1")); err != nil {
			return err
		}
		// Table "accounts" of the default namespace, key "a1": 250.
		return b.Put([]byte("d\x00\x08accountsa1"), []byte{0, 0, 0, 0, 0, 0, 0, 250})
	}))
	require.NoError(t, db.Close())
	require.NoError(t, os.WriteFile(filepath.Join(dir, "STORE"), []byte("tidemark state store\nbackend bbolt\n"), 0o644))

	r := tm("store", "upgrade", dir)
	expect(t, r, exitOK)
	require.Contains(t, r.stdout, "upgraded to the newest format of its backend")
	db, err = bolt.Open(filepath.Join(dir, "state.bolt"), 0o600, &bolt.Options{ReadOnly: true})
	require.NoError(t, err)
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("tidemark"))
		require.Equal(t, "tidemark-state 4", string(b.Get([]byte("v"))))
		require.Nil(t, b.Get([]byte("d\x00\x08accountsa1")), "the balance is still in the store's bucket")
		require.NotNil(t, b.Bucket([]byte("d\x00\x08accounts")), "table accounts has no bucket")
		return nil
	}))
	require.NoError(t, db.Close())
	st, err := state.Open(dir, nil)
	require.NoError(t, err)
	require.NoError(t, st.View(func(tx *state.Tx) error {
		n, ok, err := balances.Get(tx, "a1")
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, int64(250), n)
		return nil
	}))
	require.NoError(t, st.Close())
	r = tm("store", "upgrade", dir)
	expect(t, r, exitOK)
	require.Contains(t, r.stdout, "already of the newest format")
	r = tm("store", "upgrade", makeStore(t, state.Pebble, ""))
	expect(t, r, exitOK)
	require.Contains(t, r.stdout, "already of the newest format")
	expect(t, tm("store", "upgrade"), exitUsage)
	r = tm("store", "upgrade", t.TempDir())
	expect(t, r, exitFail)
	require.Contains(t, r.stderr, "STORE")
}
