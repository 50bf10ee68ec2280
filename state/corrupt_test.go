package state

import (
	"errors"
	"strings"
	"testing"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/vfs"
)

// TestCorruptRecordsAreDetected flips bits in an applied-position record,
// and changes the format version: open refuses the store with ErrCorrupt and
// says which record.
func TestCorruptRecordsAreDetected(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		for _, tc := range []struct {
			name    string
			corrupt func(c *core) error
			want    string
		}{
			{"bit flip in a lineage", func(c *core) error {
				v := encodeLineage(tidemark.Lineage{Applied: tidemark.Applied{Epoch: 1, Position: 10}})
				for _, i := range []int{3, 20, lineageLen - 1} {
					v[i] ^= 0x10
				}
				return c.eng.commit([]write{{key: appliedKey("ns", "orders", ""), val: v}})
			}, `feed "orders" in namespace "ns"`},
			{"short lineage", func(c *core) error {
				return c.eng.commit([]write{{key: appliedKey("", "orders", ""), val: []byte{1, 2, 3}}})
			}, `feed "orders"`},
			{"other format", func(c *core) error {
				return c.eng.commit([]write{{key: []byte{tagVersion}, val: []byte("tidemark-state nine")}})
			}, "format"},
			{"bad output length", func(c *core) error {
				return c.eng.commit([]write{{key: outputKey("out.csv"), val: []byte{1}}})
			}, "out.csv"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				dir := t.TempDir()
				s := mustOpen(t, be, dir, testOpts())
				applyLine(t, s, del("orders", 1, 1))
				if err := s.Flush(t.Context()); err != nil {
					t.Fatal(err)
				}
				if err := tc.corrupt(s.(*nsStore).c); err != nil {
					t.Fatal(err)
				}
				s.Close()
				_, err := be.open(dir, testOpts())
				if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), dir) {
					t.Fatalf("open: %v; want ErrCorrupt naming %s and the store", err, tc.want)
				}
			})
		}
	})
}

// TestStoreFileIsWrittenDurably fails each step of writing the STORE file:
// the open fails and says so, and a later open creates the store.
func TestStoreFileIsWrittenDurably(t *testing.T) {
	for _, op := range []vfs.Op{vfs.OpWrite, vfs.OpSync, vfs.OpRename, vfs.OpSyncDir} {
		t.Run(string(op), func(t *testing.T) {
			dir := t.TempDir()
			counter := &vfs.Counter{Match: func(o vfs.Op, _ string) bool { return o == op }, FailAt: 1}
			o := testOpts()
			o.FS = vfs.Inject(vfs.Default(), counter.Injector())
			_, err := OpenBolt(dir, o)
			if err == nil || !strings.Contains(err.Error(), "STORE") {
				t.Fatalf("open with a failing %s: %v", op, err)
			}
			if op != vfs.OpSyncDir { // after a failed directory sync the rename is done
				if _, err := OpenDir(dir, testOpts()); !errors.Is(err, ErrNotStore) {
					t.Fatalf("a half-written STORE was taken for a store: %v", err)
				}
			}
			s, err := OpenBolt(dir, testOpts())
			if err != nil {
				t.Fatal(err)
			}
			s.Close()
		})
	}
}
