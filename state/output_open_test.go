package state

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tidemark-go/tidemark/vfs"
)

// readCountFS counts the bytes read from the files named name.
type readCountFS struct {
	vfs.FS
	name string
	n    atomic.Int64
}

func (f *readCountFS) OpenFile(path string, flag int, perm fs.FileMode) (vfs.File, error) {
	file, err := f.FS.OpenFile(path, flag, perm)
	if err != nil || filepath.Base(path) != f.name {
		return file, err
	}
	return &readCountFile{File: file, n: &f.n}, nil
}

type readCountFile struct {
	vfs.File
	n *atomic.Int64
}

func (f *readCountFile) Read(p []byte) (int, error) {
	n, err := f.File.Read(p)
	f.n.Add(int64(n))
	return n, err
}

func (f *readCountFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(p, off)
	f.n.Add(int64(n))
	return n, err
}

// Output files of the open tests: 20 batches of 100 lines of 100 bytes,
// above outputVerifyMax.
const (
	outputLineLen   = 100
	outputBatch     = 100
	outputBatches   = 20
	outputVerifyMax = 64 << 10
)

// writeOutputBatches writes the test's output file to the store in dir.
func writeOutputBatches(t *testing.T, be backend, dir string) (size int64) {
	t.Helper()
	s := mustOpen(t, be, dir, testOpts())
	line := strings.Repeat("x", outputLineLen-1) + "\n"
	for n := 1; n <= outputBatch*outputBatches; n++ {
		if _, err := s.Apply(t.Context(), del("f", 1, n), func(tx *Tx) error {
			_, err := tx.Output("out.csv").Write([]byte(line))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if n%outputBatch == 0 {
			if err := s.Flush(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return outputLineLen * outputBatch * outputBatches
}

// heldOutputCheck returns options of VerifyMaxBytes max on fsys whose
// background check of an output waits for hold (or the store's close)
// before it reads the file.
func heldOutputCheck(fsys vfs.FS, max int64, hold <-chan struct{}) *Options {
	o := testOpts()
	o.FS, o.VerifyMaxBytes = fsys, max
	o.hooks = &hooks{outputCheck: func(stop <-chan struct{}) {
		select {
		case <-hold:
		case <-stop:
		}
	}}
	return o
}

// TestOutputOpenReadsOnlyItsLastBatch: an open of a store whose output
// file is larger than VerifyMaxBytes reads only the bytes of the file's
// last batch (and checks them), and the whole file in the background; a
// file of at most VerifyMaxBytes is read whole before the open returns.
func TestOutputOpenReadsOnlyItsLastBatch(t *testing.T) {
	forEachLocalBackend(t, func(t *testing.T, be backend) {
		dir := t.TempDir()
		size := writeOutputBatches(t, be, dir)
		last := int64(outputLineLen * outputBatch)

		hold := make(chan struct{})
		cfs := &readCountFS{FS: vfs.Default(), name: "out.csv"}
		s := mustOpen(t, be, dir, heldOutputCheck(cfs, outputVerifyMax, hold))
		if got := cfs.n.Load(); got != last {
			t.Fatalf("the open read %d bytes of out.csv (%d bytes, its last batch %d): want its last batch only", got, size, last)
		}
		o := s.(*nsStore).c.outputs["out.csv"]
		if o == nil || o.bg == nil {
			t.Fatal("no check of out.csv in the background")
		}
		o.bg.start()
		close(hold)
		<-o.bg.done
		if o.bg.err != nil {
			t.Fatalf("background check of an intact out.csv: %v", o.bg.err)
		}
		if got := cfs.n.Load(); got != last+size-last {
			t.Fatalf("the open and the background check read %d bytes of out.csv, want %d: the whole file once", got, size)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}

		cfs.n.Store(0)
		s = mustOpen(t, be, dir, heldOutputCheck(cfs, size, nil))
		if got := cfs.n.Load(); got != size {
			t.Fatalf("the open of a store with VerifyMaxBytes %d read %d bytes of its out.csv of %d, want all", size, got, size)
		}
		if o := s.(*nsStore).c.outputs["out.csv"]; o.bg != nil {
			t.Fatal("out.csv, checked at open, is checked again in the background")
		}
	})
}

// flipByte changes the byte at off of the file at path.
func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[off] ^= 0x01
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// flipByteAtRest is flipByte that leaves the file's modification time as
// it was, as a bit flipped by the disk would.
func flipByteAtRest(t *testing.T, path string, off int64) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	flipByte(t, path, off)
	if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
}

// TestOutputChangedWhileClosedIsCheckedWholeAtOpen: an output file larger
// than VerifyMaxBytes that was changed while the store was closed (its
// modification time moved) is read whole by the open, which fails on
// damage anywhere in it, however short the run: a check left to the
// background never runs in a run shorter than its delay, and each such
// run would commit on top of the damage and exit 0. A file that was not
// changed is read only at its last batch; and a store that failed leaves
// no record, so its next open reads the whole file.
func TestOutputChangedWhileClosedIsCheckedWholeAtOpen(t *testing.T) {
	forEachLocalBackend(t, func(t *testing.T, be backend) {
		dir := t.TempDir()
		size := writeOutputBatches(t, be, dir)
		last := int64(outputLineLen * outputBatch)
		path := filepath.Join(dir, "out.csv")
		cfs := &readCountFS{FS: vfs.Default(), name: "out.csv"}
		reopen := func() (int64, error) {
			t.Helper()
			cfs.n.Store(0)
			s, err := be.open(dir, heldOutputCheck(cfs, outputVerifyMax, nil))
			if err != nil {
				return cfs.n.Load(), err
			}
			return cfs.n.Load(), s.Close()
		}
		if n, err := reopen(); err != nil || n != last {
			t.Fatalf("open of the store as it was left: read %d bytes of out.csv (%v); want its last batch, %d", n, err, last)
		}
		// A run that does not close (a crash) leaves no record: the next
		// open reads the whole file.
		s, err := be.open(dir, heldOutputCheck(cfs, outputVerifyMax, nil))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(dir, outputsLeftFile)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("the record of the files left checked is still there while the store is open (%v): a crash now would leave it", err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}

		flipByte(t, path, 5000)
		for run := range 3 {
			n, err := reopen()
			var ce *CorruptError
			if !errors.As(err, &ce) || ce.File != path {
				t.Fatalf("run %d on out.csv with byte 5000 changed while the store was closed: read %d of %d bytes, err %v; want a *CorruptError naming %s at the open", run, n, size, err, path)
			}
		}
		flipByte(t, path, 5000) // back: a new modification time, so read whole
		if n, err := reopen(); err != nil || n != size {
			t.Fatalf("open after the file was restored: read %d bytes (%v); want all %d", n, err, size)
		}
		if n, err := reopen(); err != nil || n != last {
			t.Fatalf("open after a clean close: read %d bytes (%v); want its last batch, %d", n, err, last)
		}
	})
}

// TestOutputDamageFoundInTheBackgroundFailsTheStore: damage to an output
// file larger than VerifyMaxBytes before its last batch is found by the
// check in the background, which fails the store (a *CorruptError naming
// the file) and a backup; damage in its last batch fails the open.
func TestOutputDamageFoundInTheBackgroundFailsTheStore(t *testing.T) {
	forEachLocalBackend(t, func(t *testing.T, be backend) {
		dir := t.TempDir()
		size := writeOutputBatches(t, be, dir)
		path := filepath.Join(dir, "out.csv")
		isDamage := func(err error) bool {
			var ce *CorruptError
			return errors.As(err, &ce) && ce.File == path && strings.Contains(err.Error(), "backup")
		}

		// Damage at rest: the file's size, time and inode as the store
		// left them, so that only the check of its bytes can find it.
		flipByteAtRest(t, path, 5000)
		hold := make(chan struct{})
		s := mustOpen(t, be, dir, heldOutputCheck(vfs.Default(), outputVerifyMax, hold))
		o := s.(*nsStore).c.outputs["out.csv"]
		close(hold)
		err := s.Backup(t.Context(), filepath.Join(t.TempDir(), "copy"))
		if !isDamage(err) {
			t.Fatalf("backup of a store whose out.csv has byte 5000 changed: %v; want a *CorruptError naming %s", err, path)
		}
		<-o.bg.done
		if !isDamage(o.bg.err) {
			t.Fatalf("background check: %v; want a *CorruptError naming %s", o.bg.err, path)
		}
		_, err = s.Apply(t.Context(), del("f", 1, outputBatch*outputBatches+1), func(tx *Tx) error { return nil })
		if !errors.Is(err, ErrFailed) || !isDamage(err) {
			t.Fatalf("Apply after the damage was found: %v; want ErrFailed and the *CorruptError", err)
		}
		_ = s.Close()           // its error is the store's failure
		flipByte(t, path, 5000) // back

		for _, at := range []int64{size - outputLineLen*outputBatch, size - 1} {
			t.Run(fmt.Sprint("last batch, byte ", at), func(t *testing.T) {
				flipByte(t, path, at)
				defer flipByte(t, path, at)
				_, err := be.open(dir, heldOutputCheck(vfs.Default(), outputVerifyMax, nil))
				if !isDamage(err) {
					t.Fatalf("open with byte %d of out.csv (%d bytes) changed: %v; want a *CorruptError naming %s", at, size, err, path)
				}
			})
		}
	})
}
