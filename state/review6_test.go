package state

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	pebblevfs "github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/tidemark-go/tidemark/checkpoint"
	"github.com/tidemark-go/tidemark/vfs"
)

// powerOutFS is the file system of a store's output file that can lose
// power: it keeps, besides the file itself, the bytes the file held at its
// last sync (what surely survives a power cut). Before each write to the
// file it calls before, which may take a copy of the disk as a power cut
// leaves it (lost).
type powerOutFS struct {
	vfs.FS
	name   string // the output file's base name
	before func()

	mu      sync.Mutex
	durable []byte // the file's bytes at its last sync
}

func (p *powerOutFS) OpenFile(name string, flag int, perm fs.FileMode) (vfs.File, error) {
	f, err := p.FS.OpenFile(name, flag, perm)
	if err != nil || filepath.Base(name) != p.name {
		return f, err
	}
	return &powerOutFile{File: f, p: p}, nil
}

// lost returns the output file's bytes after a power cut, in one of three
// ways a disk may leave them: 0, only what was synced; 1, every byte
// written (the unsynced ones survived); 2, the file's length as written but
// the unsynced bytes zero (the size reached the disk, not the data).
func (p *powerOutFS) lost(path string, how int) []byte {
	p.mu.Lock()
	d := bytes.Clone(p.durable)
	p.mu.Unlock()
	now, err := os.ReadFile(path)
	if err != nil {
		panic(err)
	}
	switch how {
	case 1:
		return now
	case 2:
		if len(now) > len(d) {
			d = append(d, make([]byte, len(now)-len(d))...)
		}
	}
	return d
}

type powerOutFile struct {
	vfs.File
	p *powerOutFS
}

func (f *powerOutFile) WriteAt(b []byte, off int64) (int, error) {
	f.p.before()
	return f.File.WriteAt(b, off)
}

func (f *powerOutFile) Write(b []byte) (int, error) {
	f.p.before()
	return f.File.Write(b)
}

func (f *powerOutFile) synced() error {
	b, err := os.ReadFile(f.Name())
	if err != nil {
		return err
	}
	f.p.mu.Lock()
	f.p.durable = b
	f.p.mu.Unlock()
	return nil
}

func (f *powerOutFile) Sync() error {
	if err := f.File.Sync(); err != nil {
		return err
	}
	return f.synced()
}

func (f *powerOutFile) Datasync() error {
	if err := f.File.Datasync(); err != nil {
		return err
	}
	return f.synced()
}

func (f *powerOutFile) Truncate(size int64) error {
	if err := f.File.Truncate(size); err != nil {
		return err
	}
	// The store syncs after it cuts; until then the cut may be lost, which
	// leaves bytes past the committed length, cut again at the next open.
	return nil
}

// review6Record is line n's output record: 1,000 bytes, so that a batch
// of 150 lines holds 2 chunks' worth (aheadChunk) for the output's writer.
func review6Record(n int) []byte { return fmt.Appendf(nil, "%0999d\n", n) }

// TestPowerLossWhileAnOutputIsWrittenAhead is the crash-at-every-write loop
// with an output file whose bytes are written ahead while their batch
// fills (5f958a2): the power is lost before write k, of Pebble's files or
// of the output file (a write ahead by the output's writer goroutine, or
// the commit's write of the rest), k = 0, 1, 2, ... until the workload
// finishes first; the output is left as a disk may leave it (by k modulo
// 3: only the synced bytes, every byte written, or the written length with
// the unsynced bytes zero). The reopened store must agree with itself: its
// output file is exactly the records of the lines up to the recorded
// position, each once (nothing lost, nothing twice, no byte of a batch
// that did not commit), and no mark declared durable before the cut is
// ahead of it. With VerifyMaxBytes below the file's size an open checks
// only the last batch's bytes (c95efe0), and a backup waits for the check
// of the rest.
func TestPowerLossWhileAnOutputIsWrittenAhead(t *testing.T) {
	const (
		lines = 450 // 3 batches of 150 lines, 150 KB each
		batch = 150
		name  = "out.csv"
	)
	var want []byte
	for n := 1; n <= lines; n++ {
		want = append(want, review6Record(n)...)
	}
	{
		rng := rand.New(rand.NewPCG(6, 6))
		var (
			mu       sync.Mutex
			mem      *pebblevfs.MemFS
			crashed  *pebblevfs.MemFS
			outAfter []byte
			cp       *checkpoint.Checkpoint
			atCrash  uint64
			dir      string
			index    atomic.Int32
		)
		how := 0
		crash := func(pfs *powerOutFS) {
			if index.Add(-1) != -1 {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			atCrash = durableCount(cp)
			crashed = mem.CrashClone(pebblevfs.CrashCloneCfg{UnsyncedDataPercent: 0, RNG: rng})
			outAfter = pfs.lost(filepath.Join(dir, name), how)
		}
		var writes int32
		for k := int32(0); ; k++ {
			how = int(k % 3)
			mu.Lock()
			mem = pebblevfs.NewCrashableMem()
			crashed, outAfter = nil, nil
			dir = t.TempDir()
			var p progress
			cp = hold("f", &p)
			mu.Unlock()
			index.Store(math.MaxInt32)
			pfs := &powerOutFS{FS: vfs.Default(), name: name}
			pfs.before = func() { crash(pfs) }
			inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
				if op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
					crash(pfs)
				}
				return nil
			})
			o := testOpts()
			o.BatchSize = batch
			o.FS = pfs
			o.pebbleFS = errorfs.Wrap(mem, inj)
			o.VerifyMaxBytes = 64 << 10
			s, err := OpenPebble(dir, o)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Output(name); err != nil {
				t.Fatal(err)
			}
			s.Bind("f", cp)
			// The power is lost after the open and the declaration, which
			// made both durable.
			index.Store(k)
			for n := 1; n <= lines; n++ {
				if _, err := s.Apply(context.Background(), del("f", 1, n), func(tx *Tx) error {
					if _, err := tx.AddInt64([]byte("count"), 1); err != nil {
						return err
					}
					_, err := tx.Output(name).Write(review6Record(n))
					return err
				}); err != nil {
					t.Fatalf("how %d k=%d: apply line %d: %v", how, k, n, err)
				}
				p.finish()
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			c, out, durable := crashed, outAfter, atCrash
			mu.Unlock()
			if c == nil {
				writes = k
				break
			}
			// Power back on: the output file is what the disk held.
			if err := os.WriteFile(filepath.Join(dir, name), out, 0o644); err != nil {
				t.Fatal(err)
			}
			o = testOpts()
			o.pebbleFS = c
			o.VerifyMaxBytes = 64 << 10
			s, err = OpenPebble(dir, o)
			if err != nil {
				t.Fatalf("how %d k=%d: reopen after the power loss (output left %d bytes): %v", how, k, len(out), err)
			}
			l, _ := s.Applied("f")
			n := l.Position / lineLen
			if count := getInt(t, s, "count"); count != n {
				t.Fatalf("how %d k=%d: count %d, recorded position is line %d", how, k, count, n)
			}
			if uint64(n) < durable {
				t.Fatalf("how %d k=%d: a mark of %d lines was declared durable, %d survived", how, k, durable, n)
			}
			if err := s.Backup(context.Background(), filepath.Join(t.TempDir(), "backup")); err != nil {
				t.Fatalf("how %d k=%d: backup after the power loss: %v", how, k, err)
			}
			got, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			if w := want[:n*1000]; !bytes.Equal(got, w) {
				t.Fatalf("how %d k=%d: after the power loss the output holds %d bytes, want the %d records of lines 1..%d (%d bytes); first difference at byte %d",
					how, k, len(got), n, n, len(w), firstDiff(got, w))
			}
			if err := s.Close(); err != nil && !errors.Is(err, context.Canceled) {
				t.Fatal(err)
			}
		}
		if writes < 10 {
			t.Fatalf("the workload finished before write %d: the loop cut the power at too few moments to mean anything", writes)
		}
		t.Logf("power cut before each of %d writes", writes)
	}
}

// TestBoltCheckWhileCommitsRunIsNoDamage: the background check of a bbolt
// file the store left checked does not hold commits back, so commits may
// write over both meta pages between the start of its read transaction and
// its read of them. That is no damage: the check begins again (and after
// metaAttempts tries holds the commits for that read), and the store stays
// usable. Before, two commits in that moment failed a healthy store as
// damaged ("neither meta page is the one of transaction 5 that bbolt
// opened"), telling its user to remove the whole folder: found by
// TestCrashWithBatchesStaged/bbolt under -race, and in 0.5 s by a loop of
// Apply and Flush beside a Backup.
func TestBoltCheckWhileCommitsRunIsNoDamage(t *testing.T) {
	be := backends()[0]
	if be.name != Bolt {
		t.Fatalf("backends()[0] is %s, want bbolt", be.name)
	}
	dir := t.TempDir()
	s := mustOpen(t, be, dir, testOpts())
	for n := 1; n <= 100; n++ {
		applyLine(t, s, del("f", 1, n))
	}
	if err := s.Close(); err != nil { // left checked
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		s2    Store
		calls int
		line  = 100
	)
	o := testOpts()
	o.hooks = &hooks{boltCheckBegun: func() {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls > metaAttempts {
			return // the check holds the commits now: one would wait for it
		}
		// Two commits: both meta pages are of later transactions.
		for range 2 {
			line++
			applyLine(t, s2, del("f", 1, line))
			if err := s2.Flush(context.Background()); err != nil {
				t.Errorf("flush line %d while the check began: %v", line, err)
			}
		}
	}}
	mu.Lock()
	s2 = mustOpen(t, be, dir, o)
	mu.Unlock()
	// A backup starts the check at once and waits for it.
	if err := s2.Backup(context.Background(), filepath.Join(t.TempDir(), "backup")); err != nil {
		t.Fatalf("backup of a healthy store while commits ran: %v", err)
	}
	mu.Lock()
	got, last := calls, line
	mu.Unlock()
	if got != metaAttempts+1 {
		t.Fatalf("the check began %d times, want %d (%d tries, then one holding the commits)", got, metaAttempts+1, metaAttempts)
	}
	applyLine(t, s2, del("f", 1, last+1))
	if err := s2.Flush(context.Background()); err != nil {
		t.Fatalf("flush after the check: %v", err)
	}
	if n := getInt(t, s2, "count"); n != int64(last+1) {
		t.Fatalf("count %d, want %d", n, last+1)
	}
}
