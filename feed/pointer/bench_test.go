package pointer

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/tidemark-go/tidemark/vfs"
)

// Benchmarks of the pointer file. The cost of a durable commit is
// BenchmarkPointerStore/every-commit; BenchmarkPointerBaseline is the floor:
// one 80-byte WriteAt and one fdatasync of a small file, with no encoding.
// BenchmarkPointerRenameBaseline is the scheme not chosen: write a temporary
// file, fsync, rename, fsync the directory.
//
//	go test ./feed -run '^$' -bench Record -benchtime 2s

func BenchmarkPointerEncode(b *testing.B) {
	p := testPointer(1764400000000000000, 12345)
	buf := make([]byte, 0, RecordSize)
	b.ReportAllocs()
	for b.Loop() {
		buf = Encode(buf[:0], p)
	}
}

func BenchmarkPointerDecode(b *testing.B) {
	rec := record(testPointer(1764400000000000000, 12345), 7)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(rec); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPointerStore(b *testing.B) {
	for _, bc := range []struct {
		name   string
		policy SyncPolicy
	}{
		{"every-commit", SyncEveryCommit},
		{"interval-100ms", SyncInterval},
		{"never", SyncNever},
	} {
		b.Run(bc.name, func(b *testing.B) {
			pf := Open(filepath.Join(b.TempDir(), "in"+Suffix), Options{Sync: bc.policy})
			defer pf.Close()
			if err := pf.Store(testPointer(1, 0)); err != nil { // creation is not measured
				b.Fatal(err)
			}
			i := 1
			b.ReportAllocs()
			for b.Loop() {
				if err := pf.Store(testPointer(1, i)); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

func BenchmarkPointerBaseline(b *testing.B) {
	f, err := os.OpenFile(filepath.Join(b.TempDir(), "baseline"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	vf, _ := vfs.Default().OpenFile(f.Name(), os.O_RDWR, 0)
	defer vf.Close()
	rec := make([]byte, RecordSize)
	if _, err := vf.WriteAt(make([]byte, FileSize), 0); err != nil {
		b.Fatal(err)
	}
	if err := vf.Sync(); err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		rec[0] = byte(i)
		if _, err := vf.WriteAt(rec, int64(i%2)*SlotSize); err != nil {
			b.Fatal(err)
		}
		if err := vf.Datasync(); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkPointerRenameBaseline(b *testing.B) {
	fsys := vfs.Default()
	dir := b.TempDir()
	path := filepath.Join(dir, "in"+Suffix)
	rec := make([]byte, RecordSize)
	for b.Loop() {
		f, err := fsys.OpenFile(path+TempSuffix, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := f.Write(rec); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
		if err := vfs.RenameDurable(fsys, path+TempSuffix, path); err != nil {
			b.Fatal(err)
		}
	}
}
