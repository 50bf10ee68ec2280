package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/ops"
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
			if err := tx.Put([]byte(fmt.Sprintf("k%d", i)), []byte("v\x00")); err != nil {
				return err
			}
			if i <= 2 {
				_, err := balances.Add(tx, fmt.Sprintf("a%d", i), int64(100*i))
				return err
			}
			return nil
		})
		require.NoError(t, err)
		require.True(t, applied)
	}
	require.NoError(t, st.Close())
	return dir
}

var balances = state.NewTable("accounts", state.String{}, state.Int64{})

func TestStoreShow(t *testing.T) {
	for _, backend := range []string{state.Bolt, state.Pebble} {
		t.Run(backend, func(t *testing.T) {
			dir := makeStore(t, backend, "")
			r := tm("store", "show", dir, "--feed", "orders", "--feed", "audit")
			expect(t, r, exitOK)
			for _, want := range []string{
				"backend  " + backend,
				`namespace "" (the default)`,
				`bucket "" (the root bucket) (raw bytes: no table recorded its codecs)`,
				`"k1"  "v\x00"`,
				`bucket "accounts" (keys string, values int64)`,
				"    a1  100\n    a2  200\n",
			} {
				require.Contains(t, r.stdout, want)
			}
			require.Regexp(t, `orders +- +5 +30 `, r.stdout)
			require.Regexp(t, `audit +- +- +- `, r.stdout)

			// The feeds of a server config.
			r = tm("store", "show", "--config", filepath.Join("..", "..", "testdata", "cli", "server.yaml"), dir)
			expect(t, r, exitOK)
			require.Regexp(t, `orders +- +5 +30 `, r.stdout)
			require.Contains(t, r.stdout, "audit ")

			// Limits: one key per bucket, and where to go on.
			r = tm("store", "show", dir, "--limit", "1", "--bucket", "accounts", "--count")
			expect(t, r, exitOK)
			require.Contains(t, r.stdout, "(keys string, values int64; 2 keys)")
			require.Contains(t, r.stdout, "    a1  100\n    ... more: --from a2\n")
			require.NotContains(t, r.stdout, "k1")
			r = tm("store", "show", dir, "--from", "a2", "--bucket", "accounts")
			expect(t, r, exitOK)
			require.Contains(t, r.stdout, "    a2  200\n")
			require.NotContains(t, r.stdout, "a1")
			r = tm("store", "show", dir, "--prefix", "k", "--limit", "2", "--bucket", "")
			expect(t, r, exitOK)
			require.Contains(t, r.stdout, `"k2"`)
			require.NotContains(t, r.stdout, `"k3"`)
			require.Contains(t, r.stdout, "more: --from k3")

			// JSON.
			r = tm("store", "show", dir, "--json")
			expect(t, r, exitOK)
			var ls ops.StoreListing
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &ls))
			require.Len(t, ls.Namespaces, 1)
			require.Equal(t, []ops.Entry{{Key: "a1", Value: "100"}, {Key: "a2", Value: "200"}}, ls.Namespaces[0].Buckets[1].Entries)
		})
	}
}

func TestStoreShowNamespace(t *testing.T) {
	dir := makeStore(t, state.Bolt, "ledger")
	r := tm("store", "show", dir, "--feed", "orders", "--namespace", "")
	expect(t, r, exitOK)
	require.Regexp(t, `orders +- +- +- `, r.stdout)
	require.NotContains(t, r.stdout, "a1")
	r = tm("store", "show", dir, "--feed", "orders", "--namespace", "ledger")
	expect(t, r, exitOK)
	require.Contains(t, r.stdout, `namespace "ledger"`)
	require.Regexp(t, `orders +- +5 +30 `, r.stdout)
	require.Contains(t, r.stdout, "    a2  200\n")
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
	require.Contains(t, r.stderr, "--addr")
	r = tm("store", "backup", dir, filepath.Join(t.TempDir(), "b"), "--wait", "50ms")
	expect(t, r, exitFail)
	require.Contains(t, r.stderr, "running server")

	r = tm("store", "show", dir, "--config", "no-such.yaml")
	expect(t, r, exitFail)
	require.Contains(t, r.stderr, "no-such.yaml")

	expect(t, tm("store", "backup", dir), exitUsage)
	expect(t, tm("store", "show"), exitUsage)
}

// A stopped store's backup opens as a store with the same state; a second
// backup into the same folder is refused.
func TestStoreBackupOfAStoppedStore(t *testing.T) {
	for _, backend := range []string{state.Bolt, state.Pebble} {
		t.Run(backend, func(t *testing.T) {
			dir := makeStore(t, backend, "")
			dest := filepath.Join(t.TempDir(), "copy")
			r := tm("store", "backup", dir, dest)
			expect(t, r, exitOK)
			require.Contains(t, r.stdout, "written to "+dest)
			r = tm("store", "show", dest, "--feed", "orders")
			expect(t, r, exitOK)
			require.Regexp(t, `orders +- +5 +30 `, r.stdout)
			require.Contains(t, r.stdout, "    a2  200\n")
			r = tm("store", "backup", dir, dest)
			expect(t, r, exitFail)
			require.Contains(t, r.stderr, "not empty")
		})
	}
}

// A damaged value of a stopped store fails store show and store backup
// with exit 1 and an error naming the key and what to do; no backup folder
// is made.
func TestStoreShowAndBackupOfADamagedStore(t *testing.T) {
	dir := makeStore(t, state.Bolt, "")
	path := filepath.Join(dir, "state.bolt")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	// bbolt keeps a leaf's key and value side by side, and has no
	// checksum of its own: a flipped bit of the value is found by the
	// store's. Every copy of the leaf is damaged: bbolt writes a changed
	// page elsewhere and leaves the old copy in a free page, and which
	// copy comes first in the file depends on the commits that made it.
	n := 0
	for i := 0; ; n++ {
		k := strings.Index(string(b[i:]), "k2v\x00")
		if k < 0 {
			break
		}
		b[i+k+2] ^= 0x01
		i += k + 4
	}
	require.Greater(t, n, 0, "value of k2 not found in %s", path)
	require.NoError(t, os.WriteFile(path, b, 0o600))

	r := tm("store", "show", dir)
	expect(t, r, exitFail)
	require.Contains(t, r.stderr, `key "k2"`)
	require.Contains(t, r.stderr, "damaged")
	require.Contains(t, r.stderr, "backup")
	dest := filepath.Join(t.TempDir(), "copy")
	r = tm("store", "backup", dir, dest)
	expect(t, r, exitFail)
	require.Contains(t, r.stderr, `key "k2"`)
	require.NoDirExists(t, dest)
}

// tableProc adds 1 to the balance of account line%30 in a table for every
// line of feed "in", and counts the lines in the root bucket.
type tableProc struct{ st state.Store }

func (p *tableProc) Start(_ context.Context, fc *framework.Context) error {
	st, err := fc.Store()
	p.st = st
	if err != nil {
		return err
	}
	return fc.Subscribe("in")
}

func (p *tableProc) Handle(ctx context.Context, d tidemark.Delivery, line []byte) error {
	var n int
	if _, err := fmt.Sscanf(string(line), "line-%d", &n); err != nil {
		return err
	}
	_, err := p.st.Apply(ctx, d, func(tx *state.Tx) error {
		if _, err := balances.Add(tx, fmt.Sprintf("acct-%02d", n%30), 1); err != nil {
			return err
		}
		_, err := tx.AddInt64([]byte("lines"), 1)
		return err
	})
	return err
}

// store show and store backup of a running server, through its operator
// listener (with a token): the store is listed and copied while the
// server holds it, and the copy opens with the state and the applied
// position of the lines processed.
func TestStoreShowAndBackupOfARunningServer(t *testing.T) {
	for _, backend := range []string{state.Bolt, state.Pebble} {
		t.Run(backend, func(t *testing.T) {
			dir := t.TempDir()
			input := filepath.Join(dir, "in.log")
			var sb strings.Builder
			for i := 1; i <= 300; i++ {
				fmt.Fprintf(&sb, "line-%04d\n", i)
			}
			require.NoError(t, os.WriteFile(input, []byte(sb.String()), 0o644))
			storeDir := filepath.Join(dir, "state")
			srv, err := framework.New(framework.Config{
				Feeds: []framework.FeedConfig{{Name: "in", File: &framework.FileConfig{Filename: input}, Idle: framework.FixedIdle(time.Millisecond)}},
				Groups: []framework.GroupConfig{{Name: "ledger", Processors: []string{"p"}, Store: backend + ":" + storeDir,
					StoreOptions: &state.Options{BatchInterval: 5 * time.Millisecond}}},
			}, framework.Processors{"p": &tableProc{}})
			require.NoError(t, err)
			require.NoError(t, srv.Start(context.Background()))
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				defer cancel()
				_ = srv.Stop(ctx)
			})
			l, err := ops.New(ops.Config{Server: srv, Token: "s3cret"})
			require.NoError(t, err)
			require.NoError(t, l.Start(context.Background()))
			t.Cleanup(func() { require.NoError(t, l.Close()) })
			addr := l.Addr().String()
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			require.NoError(t, srv.WaitSettled(ctx, "in"))
			size := int64(sb.Len())
			st, err := srv.Store("ledger")
			require.NoError(t, err)
			waitFor(t, "the last line durable", func() bool { l, ok := st.Applied("in"); return ok && l.Position == size })

			// The server holds the store: the folder cannot be opened.
			r := tm("store", "show", storeDir, "--wait", "50ms")
			expect(t, r, exitFail)
			require.Contains(t, r.stderr, "--addr")

			// Without the token: refused.
			r = tm("store", "show", "--addr", addr)
			expect(t, r, exitFail)
			require.Contains(t, r.stderr, "401")

			r = tm("store", "show", "--addr", addr, "--token", "s3cret", "--limit", "5", "--count")
			expect(t, r, exitOK)
			require.Contains(t, r.stdout, "store    "+storeDir)
			require.Contains(t, r.stdout, `bucket "accounts" (keys string, values int64; 30 keys)`)
			require.Contains(t, r.stdout, "    acct-00  10\n    acct-01  10\n")
			require.Contains(t, r.stdout, "    ... more: --from acct-05\n")
			require.Regexp(t, fmt.Sprintf(`in +- +\d+ +%d `, size), r.stdout)
			require.Contains(t, r.stdout, `"lines"  "\x00\x00\x00\x00\x00\x00\x01,"`) // 300, undecoded

			r = tm("store", "show", "--addr", addr, "--token", "s3cret", "--store", "ledger", "--bucket", "accounts", "--from", "acct-28")
			expect(t, r, exitOK)
			require.Contains(t, r.stdout, "    acct-28  10\n    acct-29  10\n")
			require.NotContains(t, r.stdout, "acct-27")
			require.NotContains(t, r.stdout, "more:")

			r = tm("store", "show", "--addr", addr, "--token", "s3cret", "--limit", "200000")
			expect(t, r, exitFail)
			require.Contains(t, r.stderr, "at most 100000 keys per bucket")

			r = tm("store", "show", "--addr", addr, "--token", "s3cret", "--store", "nope")
			expect(t, r, exitFail)
			require.Contains(t, r.stderr, `unknown store "nope"`)
			require.Contains(t, r.stderr, "ledger")

			// A relative folder would be the server's working folder's.
			r = tm("store", "backup", "--addr", addr, "--token", "s3cret", "copy")
			expect(t, r, exitUsage)
			require.Contains(t, r.stderr, "absolute")

			dest := filepath.Join(t.TempDir(), "copy")
			r = tm("store", "backup", "--addr", addr, "--token", "s3cret", dest)
			expect(t, r, exitOK)
			require.Contains(t, r.stdout, `backup of store "ledger" written to `+dest)
			r = tm("store", "backup", "--addr", addr, "--token", "s3cret", dest)
			expect(t, r, exitFail)
			require.Contains(t, r.stderr, "409")

			// The copy is a store of its own, with the state and the
			// position.
			r = tm("store", "show", dest, "--bucket", "accounts", "--count", "--limit", "-1")
			expect(t, r, exitOK)
			require.Contains(t, r.stdout, "30 keys")
			require.Regexp(t, fmt.Sprintf(`in +- +\d+ +%d `, size), r.stdout)
			cp, err := state.OpenDir(dest, nil)
			require.NoError(t, err)
			err = cp.View(func(tx *state.Tx) error {
				n, err := tx.GetInt64([]byte("lines"))
				if err == nil && n != 300 {
					err = fmt.Errorf("the copy counts %d lines", n)
				}
				return err
			})
			require.NoError(t, errors.Join(err, cp.Close()))
		})
	}
}
