package main

import (
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/tidemark-go/tidemark/state"
)

// balanceKey is the key of account "a1" of table "accounts" (balances) in
// the default namespace, as a bbolt store of format 1 to 3 keeps it.
var balanceKey = []byte("d\x00\x08accountsa1")

// makeOldBoltStore makes a bbolt store of format 1 or 3 as tidemark made
// one before value checksums (format 1) or before format 4: its STORE
// file, its format record, and the balance 250 of account "a1" in the
// store's bucket, with its CRC-32C in format 3.
func makeOldBoltStore(t *testing.T, format int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "store")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	db, err := bolt.Open(filepath.Join(dir, "state.bolt"), 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("tidemark"))
		if err != nil {
			return err
		}
		if err := b.Put([]byte("v"), []byte("tidemark-state "+string(rune('0'+format)))); err != nil {
			return err
		}
		val := []byte{0, 0, 0, 0, 0, 0, 0, 250}
		if format >= 2 {
			c := crc32.MakeTable(crc32.Castagnoli)
			val = binary.BigEndian.AppendUint32(val, crc32.Update(crc32.Checksum(balanceKey, c), c, val))
		}
		return b.Put(balanceKey, val)
	}))
	require.NoError(t, db.Close())
	require.NoError(t, os.WriteFile(filepath.Join(dir, "STORE"), []byte("tidemark state store\nbackend bbolt\n"), 0o644))
	return dir
}

// TestStoreUpgrade upgrades bbolt stores of format 1 and 3 to format 4:
// store show says what the upgrade would do, then that the store is of
// format 4; the balance leaves the store's bucket for its table's, and
// reads the same. A second upgrade, and one of a new Pebble store (of
// format 3), find nothing to do.
func TestStoreUpgrade(t *testing.T) {
	for _, tc := range []struct {
		format int
		hint   string
	}{
		{1, `format +1 \(its values carry no checksums`},
		{3, `format +3 \(each table's keys are in the store's bucket: "tidemark store upgrade DIR"`},
	} {
		dir := makeOldBoltStore(t, tc.format)
		r := tm("store", "show", dir)
		expect(t, r, exitOK)
		require.Regexp(t, tc.hint, r.stdout)
		r = tm("store", "upgrade", dir)
		expect(t, r, exitOK)
		require.Contains(t, r.stdout, "upgraded to the newest format of its backend")
		r = tm("store", "show", dir)
		expect(t, r, exitOK)
		require.Regexp(t, `format +4\n`, r.stdout)
		db, err := bolt.Open(filepath.Join(dir, "state.bolt"), 0o600, &bolt.Options{ReadOnly: true})
		require.NoError(t, err)
		require.NoError(t, db.View(func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte("tidemark"))
			require.Equal(t, "tidemark-state 4", string(b.Get([]byte("v"))))
			require.Nil(t, b.Get(balanceKey), "the balance is still in the store's bucket")
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
	}
	pebble := makeStore(t, state.Pebble, "")
	r := tm("store", "upgrade", pebble)
	expect(t, r, exitOK)
	require.Contains(t, r.stdout, "already of the newest format")
	r = tm("store", "show", pebble)
	expect(t, r, exitOK)
	require.Regexp(t, `format +3\n`, r.stdout)
	expect(t, tm("store", "upgrade"), exitUsage)
	r = tm("store", "upgrade", t.TempDir())
	expect(t, r, exitFail)
	require.Contains(t, r.stderr, "STORE")
}
