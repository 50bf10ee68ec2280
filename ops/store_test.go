package ops_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/ops"
	"github.com/tidemark-go/tidemark/state"
)

type order struct {
	Item string `json:"item"`
	Qty  int    `json:"qty"`
}

// ShowStore decodes by the recorded codecs (int64 keys, negative ones
// first; JSON and uint64 values), pages with From and Next in the keys'
// own terms, selects by Prefix, counts with Count, and lists the buckets
// alone with a negative Limit.
func TestShowStoreDecodesAndPages(t *testing.T) {
	for _, backend := range []string{state.Bolt, state.Pebble} {
		t.Run(backend, func(t *testing.T) {
			st, err := state.Open(backend+":"+filepath.Join(t.TempDir(), "s"), &state.Options{Sync: true})
			require.NoError(t, err)
			defer st.Close()
			orders := state.NewTable("orders", state.Int64{}, state.JSON[order]{})
			seen := state.NewTable("seen", state.String{}, state.Uint64{})
			ctx := context.Background()
			_, err = st.Namespace("shop").Apply(ctx, tidemark.Delivery{Feed: "in", Epoch: 1, Position: 10}, func(tx *state.Tx) error {
				for _, id := range []int64{7, -2, 30, 0} {
					if err := orders.Put(tx, id, order{Item: "pen", Qty: int(id)}); err != nil {
						return err
					}
				}
				if _, err := seen.Add(tx, "pen", 4); err != nil {
					return err
				}
				return seen.Put(tx, "penny", 1)
			})
			require.NoError(t, err)

			ls, err := ops.ShowStore(ctx, "s", st, ops.ShowOptions{Limit: 2})
			require.NoError(t, err)
			require.Len(t, ls.Namespaces, 1)
			ns := ls.Namespaces[0]
			require.Equal(t, "shop", ns.Name)
			require.Equal(t, []ops.AppliedRecord{{Feed: "in", Epoch: 1, Position: 10}}, ns.Applied)
			require.Len(t, ns.Buckets, 2)
			o := ns.Buckets[0]
			require.Equal(t, "orders", o.Name)
			require.Equal(t, "int64", o.KeyCodec)
			require.Equal(t, "json", o.ValueCodec)
			require.Equal(t, []ops.Entry{{Key: "-2", Value: `{"item":"pen","qty":-2}`}, {Key: "0", Value: `{"item":"pen","qty":0}`}}, o.Entries)
			require.Equal(t, "7", o.Next)
			require.Equal(t, int64(-1), o.Count)

			ls, err = ops.ShowStore(ctx, "s", st, ops.ShowOptions{Buckets: []string{"orders"}, From: o.Next, Count: true})
			require.NoError(t, err)
			o = ls.Namespaces[0].Buckets[0]
			require.Equal(t, []ops.Entry{{Key: "7", Value: `{"item":"pen","qty":7}`}, {Key: "30", Value: `{"item":"pen","qty":30}`}}, o.Entries)
			require.Empty(t, o.Next)
			require.Equal(t, int64(2), o.Count, "counted from From on")

			ls, err = ops.ShowStore(ctx, "s", st, ops.ShowOptions{Namespaces: []string{"shop"}, Buckets: []string{"seen"}, Prefix: "penn"})
			require.NoError(t, err)
			require.Equal(t, []ops.Entry{{Key: "penny", Value: "1"}}, ls.Namespaces[0].Buckets[0].Entries)

			_, err = ops.ShowStore(ctx, "s", st, ops.ShowOptions{Buckets: []string{"orders"}, From: "seven"})
			require.ErrorContains(t, err, "int64: give a number")

			ls, err = ops.ShowStore(ctx, "s", st, ops.ShowOptions{Limit: -1, Count: true})
			require.NoError(t, err)
			require.Empty(t, ls.Namespaces[0].Buckets[0].Entries)
			require.Equal(t, int64(4), ls.Namespaces[0].Buckets[0].Count)
			require.Equal(t, int64(2), ls.Namespaces[0].Buckets[1].Count)
		})
	}
}

// A value damaged under a running store (a bit of state.bolt flipped
// behind bbolt, which has no checksum of its own) fails ShowStore and a
// backup with the store's *CorruptError naming the key, not a listing
// with a wrong value.
func TestShowStoreAndBackupOfADamagedValue(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "s")
	st, err := state.Open(state.Bolt+":"+dir, &state.Options{Sync: true})
	require.NoError(t, err)
	defer st.Close()
	seen := state.NewTable("seen", state.String{}, state.Uint64{})
	ctx := context.Background()
	_, err = st.Apply(ctx, tidemark.Delivery{Feed: "in", Epoch: 1, Position: 10}, func(tx *state.Tx) error {
		return seen.Put(tx, "pen", 0x0102030405060708)
	})
	require.NoError(t, err)
	require.NoError(t, st.Flush(ctx))

	f, err := os.OpenFile(filepath.Join(dir, "state.bolt"), os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	b, err := io.ReadAll(f)
	require.NoError(t, err)
	i := bytes.Index(b, []byte("pen\x01\x02\x03\x04\x05\x06\x07\x08"))
	require.GreaterOrEqual(t, i, 0)
	_, err = f.WriteAt([]byte{0x11}, int64(i+3))
	require.NoError(t, err)

	_, err = ops.ShowStore(ctx, "s", st, ops.ShowOptions{})
	require.ErrorIs(t, err, state.ErrCorrupt)
	var ce *state.CorruptError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "seen", ce.Bucket)
	require.ErrorContains(t, err, `key "pen"`)
	err = st.Backup(ctx, filepath.Join(t.TempDir(), "copy"))
	require.ErrorIs(t, err, state.ErrCorrupt)
	require.ErrorContains(t, err, `key "pen"`)
}
