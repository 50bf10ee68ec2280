package main

import (
	"context"
	"fmt"
	"github.com/stretchr/testify/require"
	"path/filepath"
	"testing"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/state"
)

// makeStore creates a store with backend in a temporary directory: three
// keys in the root bucket and two in bucket "accounts", applied through
// (epoch 5, position 30) of feed orders, in namespace ns.
func makeStore(t *testing.T, backend, ns string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "store")
	st, err := state.Open(backend+":"+dir, &state.Options{Sync: true})
	require.NoError(t, err)
	view := st.Namespace(ns)
	for i := 1; i <= 3; i++ {
		d := tidemark.Delivery{Feed: "orders", Epoch: 5, Position: int64(10 * i), Seq: uint64(i)}
		applied, err := view.Apply(context.Background(), d, func(tx *state.Tx) error {
			if err := tx.Put([]byte(fmt.Sprintf("k%d", i)), []byte("v")); err != nil {
				return err
			}
			if i <= 2 {
				return tx.Bucket("accounts").Put([]byte(fmt.Sprintf("a%d", i)), []byte("v"))
			}
			return nil
		})
		require.NoError(t, err)
		require.True(t, applied)
	}
	require.NoError(t, st.Close())
	return dir
}

func TestStoreShow(t *testing.T) {
	for _, backend := range []string{state.Bolt, state.Pebble} {
		t.Run(backend, func(t *testing.T) {
			dir := makeStore(t, backend, "")
			r := tm("store", "show", dir, "--feed", "orders", "--feed", "audit", "--bucket", "accounts")
			expect(t, r, exitOK)
			for _, want := range []string{
				"backend    " + backend,
				"keys       3 in the root bucket",
				"2 in bucket \"accounts\"",
				"FEED",
			} {
				require.Contains(t, r.stdout, want)
			}
			require.Contains(t, r.stdout, "orders  5      30")
			require.Contains(t, r.stdout, "audit   -      -")

			// The feeds of a server config.
			r = tm("store", "show", "--config", filepath.Join("..", "..", "testdata", "cli", "server.yaml"), dir)
			expect(t, r, exitOK)
			require.Contains(t, r.stdout, "orders  5      30")
			require.Contains(t, r.stdout, "audit ")

			// No feeds named: said so.
			r = tm("store", "show", dir)
			expect(t, r, exitOK)
			require.Contains(t, r.stdout, "name the feeds with --feed or --config")
		})
	}
}

func TestStoreShowNamespace(t *testing.T) {
	dir := makeStore(t, state.Bolt, "ledger")
	r := tm("store", "show", dir, "--feed", "orders")
	expect(t, r, exitOK)
	require.Contains(t, r.stdout, "keys       0 in the root bucket")
	require.Contains(t, r.stdout, "orders  -      -")
	r = tm("store", "show", dir, "--feed", "orders", "--namespace", "ledger")
	expect(t, r, exitOK)
	require.Contains(t, r.stdout, "keys       3 in the root bucket")
	require.Contains(t, r.stdout, "orders  5      30")
}

func TestStoreShowRefusals(t *testing.T) {
	r := tm("store", "show", t.TempDir())
	expect(t, r, exitFail)
	require.Contains(t, r.stderr, "not a store directory")

	dir := makeStore(t, state.Bolt, "")
	st, err := state.OpenDir(dir, nil)
	require.NoError(t, err)
	defer st.Close()
	r = tm("store", "show", dir, "--wait", "50ms")
	expect(t, r, exitFail)
	require.Contains(t, r.stderr, "running server")

	r = tm("store", "show", dir, "--config", "no-such.yaml")
	expect(t, r, exitFail)
	require.Contains(t, r.stderr, "no-such.yaml")
}
