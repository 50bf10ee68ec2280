package state

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	pebblevfs "github.com/cockroachdb/pebble/v2/vfs"

	"github.com/tidemark-go/tidemark/vfs"
)

// FuzzScanTail: the store's reader of the tail of Pebble's newest WAL reads
// bytes from disk that a crash, a disk or a user may have damaged in any
// way. It never panics, never reports damage before the offset it was
// given, and counts no more vouching records than records.
func FuzzScanTail(f *testing.F) {
	// A chunk header of log 7 (recyclable full chunk, type 5), a WAL sync
	// chunk (type 9), zeros, and noise.
	f.Add([]byte{0, 0, 0, 0, 3, 0, 5, 7, 0, 0, 0, 'a', 'b', 'c'}, uint32(7), uint8(0))
	f.Add(append([]byte{1, 2, 3, 4, 4, 0, 9, 7, 0, 0, 0}, make([]byte, 12)...), uint32(7), uint8(0))
	f.Add(make([]byte, 64), uint32(1), uint8(3))
	f.Add([]byte(strings.Repeat("\xff", 100)), uint32(0xffffffff), uint8(50))
	f.Fuzz(func(t *testing.T, data []byte, num uint32, skip uint8) {
		fs := pebblevfs.NewMem()
		name := "000007.log"
		w, err := fs.Create(name, pebblevfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(data); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		off := int64(skip)
		d, err := scanTail(fs, name, off, num)
		if err != nil {
			t.Fatalf("scanTail: %v", err)
		}
		if d == nil {
			return
		}
		if d.offset != off || d.file != name {
			t.Fatalf("damage at %s:%d, asked from %d", d.file, d.offset, off)
		}
		if d.vouched > d.later || d.later < 0 {
			t.Fatalf("%d vouching records of %d", d.vouched, d.later)
		}
	})
}

// FuzzReadStoreFile: the STORE file is read back from disk; whatever it
// holds, the reader returns a backend name or an error, never panics, and
// a name only for the two-line format it writes.
func FuzzReadStoreFile(f *testing.F) {
	f.Add([]byte("tidemark state store\nbackend bbolt\n"))
	f.Add([]byte("tidemark state store\r\nbackend pebble\r\n"))
	f.Add([]byte("tidemark state store\n"))
	f.Add([]byte{})
	f.Add([]byte("\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := writeRaw(filepath.Join(dir, storeFile), data); err != nil {
			t.Fatal(err)
		}
		kind, err := readStoreFile(vfs.Default(), dir)
		if err != nil {
			return
		}
		if !strings.HasPrefix(strings.TrimSpace(string(data)), "tidemark state store") {
			t.Fatalf("backend %q read from %q", kind, data)
		}
	})
}

func writeRaw(path string, data []byte) error {
	f, err := vfs.Default().OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
