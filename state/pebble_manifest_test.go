package state

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/record"
	pebblevfs "github.com/cockroachdb/pebble/v2/vfs"
)

// manifestRecords returns the current MANIFEST of the Pebble database of
// the store in dir and the offsets of its records.
func manifestRecords(t *testing.T, dir string) (string, []int64) {
	t.Helper()
	desc, err := pebble.Peek(filepath.Join(dir, pebbleDir), pebblevfs.Default)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(desc.ManifestFilename)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rr := record.NewReader(f, 0)
	var offs []int64
	for {
		off := rr.Offset()
		r, err := rr.Next()
		if errors.Is(err, io.EOF) {
			return desc.ManifestFilename, offs
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, r); err != nil {
			t.Fatal(err)
		}
		offs = append(offs, off)
	}
}

func listNames(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// TestPebbleManifestDamageIsNamed damages a record of the MANIFEST of a
// Pebble store that holds several: the first record, and one in the
// middle, make the open fail with a *CorruptError naming the MANIFEST
// before Pebble changes a file (Pebble would open an older version and
// delete the newer tables); the last record is what a crash may leave:
// the open goes on, and every value reads back as written or the read
// fails naming the damage.
func TestPebbleManifestDamageIsNamed(t *testing.T) {
	t.Parallel()
	orig := t.TempDir()
	be := backend{name: Pebble, open: OpenPebble}
	// Each run's Close flushes Pebble's memtable: one edit, and a table,
	// each.
	for n := 1; n <= 6; n++ {
		s := mustOpen(t, be, orig, testOpts())
		if !applyLine(t, s, del("f", 1, n)) {
			t.Fatalf("line %d skipped", n)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	manifest, offs := manifestRecords(t, orig)
	if len(offs) < 3 {
		t.Fatalf("the MANIFEST holds %d records, want several", len(offs))
	}
	data, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	rel, _ := filepath.Rel(orig, manifest)
	for _, tc := range []struct {
		name  string
		at    int64
		named bool
	}{
		{"the first record", offs[0] + 10, true},
		{"a record in the middle", offs[len(offs)/2] + 10, true},
		{"the last record", offs[len(offs)-1] + 10, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			copyDir(t, orig, dir)
			b := bytes.Clone(data)
			b[tc.at] ^= 0x10
			if err := os.WriteFile(filepath.Join(dir, rel), b, 0o644); err != nil {
				t.Fatal(err)
			}
			before := listNames(t, filepath.Join(dir, pebbleDir))
			s, err := OpenPebble(dir, testOpts())
			if tc.named {
				if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), filepath.Join(dir, rel)) || !strings.Contains(err.Error(), "backup") {
					t.Fatalf("open: %v; want an error wrapping ErrCorrupt that names %s and what to do", err, rel)
				}
				if after := listNames(t, filepath.Join(dir, pebbleDir)); !slices.Equal(before, after) {
					t.Errorf("the failed open changed the database's files: %v, then %v", before, after)
				}
				return
			}
			if err != nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("open: %v; want success or ErrCorrupt", err)
				}
				return
			}
			defer s.Close()
			l, _ := s.Applied("f")
			n := l.Position / lineLen
			var got int64
			err = s.View(func(tx *Tx) error {
				var err error
				got, err = tx.GetInt64([]byte("count"))
				return err
			})
			switch {
			case err != nil && !errors.Is(err, ErrCorrupt):
				t.Fatalf("read: %v", err)
			case err == nil && got != n:
				t.Fatalf("count = %d after %d lines applied: a state the store never committed", got, n)
			}
		})
	}
}

// copyDir copies the files of the folder src, and its folders', to dst.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if fi.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// FuzzCheckManifest feeds the store's check of a Pebble MANIFEST, which
// runs before Pebble opens the database, whatever bytes a damaged disk
// may leave in it: it never panics, never fails on bytes it can read (a
// damaged MANIFEST is damage it describes, not an error of its own), and
// what it describes holds together: the offset of the first record that
// does not verify is in the file, a damaged first record has no record
// that verifies before it, and a torn tail is a damaged record after the
// first with nothing that verifies after it.
func FuzzCheckManifest(f *testing.F) {
	fs := pebblevfs.NewMem()
	db, err := pebble.Open("db", &pebble.Options{FS: fs})
	if err != nil {
		f.Fatal(err)
	}
	for i := range 3 {
		if err := db.Set([]byte{byte(i)}, bytes.Repeat([]byte{byte(i)}, 100), pebble.Sync); err != nil {
			f.Fatal(err)
		}
		if err := db.Flush(); err != nil { // a version edit each
			f.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		f.Fatal(err)
	}
	desc, err := pebble.Peek("db", fs)
	if err != nil {
		f.Fatal(err)
	}
	mf, err := fs.Open(desc.ManifestFilename)
	if err != nil {
		f.Fatal(err)
	}
	manifest, err := io.ReadAll(mf)
	mf.Close()
	if err != nil {
		f.Fatal(err)
	}
	if d, err := checkManifest(fs, "db"); d != nil || err != nil {
		f.Fatalf("the MANIFEST Pebble wrote: damage %+v, %v", d, err)
	}
	put := func(data []byte) error {
		w, err := fs.Create(desc.ManifestFilename, pebblevfs.WriteCategoryUnspecified)
		if err != nil {
			return err
		}
		if _, err := w.Write(data); err != nil {
			return err
		}
		return w.Close()
	}
	f.Add(manifest)
	for _, at := range []int{3, len(manifest) / 2, len(manifest) - 3} {
		b := bytes.Clone(manifest)
		b[at] ^= 0x40
		f.Add(b)
		// Each of these is damage the check describes: the fuzzing
		// starts from both sides of it.
		if err := put(b); err != nil {
			f.Fatal(err)
		}
		if d, err := checkManifest(fs, "db"); d == nil || err != nil {
			f.Fatalf("the MANIFEST with byte %d of %d changed: damage %+v, %v", at, len(b), d, err)
		}
	}
	f.Add(manifest[:len(manifest)-5])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := put(data); err != nil {
			t.Fatal(err)
		}
		d, err := checkManifest(fs, "db")
		if err != nil {
			t.Fatalf("checkManifest of %d bytes: %v", len(data), err)
		}
		if d == nil {
			return
		}
		if d.offset < 0 || d.offset > int64(len(data)) || d.first != (d.records == 0) || d.later < 0 || d.lastTornOnly != (!d.first && d.later == 0) {
			t.Fatalf("checkManifest of %d bytes: %+v", len(data), d)
		}
	})
}
