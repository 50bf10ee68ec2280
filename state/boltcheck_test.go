package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// boltPages lists the pages of a bbolt file in use, by bbolt's own
// account: the leaves of the store's bucket (more than one element), its
// branches, and the freelist page.
type boltPages struct {
	ps               int
	leaves, branches []int
	freelist         int
}

func listBoltPages(t *testing.T, path string) boltPages {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil) // tx.Page wants the freelist
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	bp := boltPages{ps: db.Info().PageSize}
	err = db.View(func(tx *bolt.Tx) error {
		for id := 2; ; id++ {
			pi, err := tx.Page(id)
			if err != nil {
				return err
			}
			if pi == nil {
				break
			}
			switch {
			case pi.Type == "leaf" && pi.Count > 1:
				bp.leaves = append(bp.leaves, id)
			case pi.Type == "branch":
				bp.branches = append(bp.branches, id)
			case pi.Type == "freelist":
				bp.freelist = id
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return bp
}

// boltKeys reads the store's bucket of the bbolt file at path with bbolt
// alone: how many keys a scan sees, and how many of the damage store's
// keys a lookup finds.
func boltKeys(path string) (scanned, found int, err error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		return 0, 0, err
	}
	defer db.Close()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("bbolt panicked: %v", r)
		}
	}()
	err = db.View(func(tx *bolt.Tx) error {
		// The damage store is of format 4: its keys are in their table's
		// bucket, read as the store reads them.
		b := tx.Bucket(boltBucket)
		c := newBoltCursor(b, true)
		for k, _ := c.Seek(dataPrefix("", "acct")); k != nil && bytes.HasPrefix(k, dataPrefix("", "acct")); k, _ = c.Next() {
			scanned++
		}
		for i := range boltDamageKeys {
			if tableGet(b, append(dataPrefix("", "acct"), fmt.Sprintf("account-%05d", i)...), true) != nil {
				found++
			}
		}
		return nil
	})
	return scanned, found, err
}

var le = binary.NativeEndian

// TestBoltPageDamageIsNeverCommitted damages the pages of a bbolt file in
// ways bbolt itself does not see (it reads the file without a panic, and
// a key is silently absent, or a page in use is free), and runs a line
// that reads and adds to every key: with the file checked at open, and
// with it checked in the background (a file larger than VerifyMaxBytes).
// Each run ends in an error wrapping ErrCorrupt that names the file, and
// the file is as it was: nothing read from it was committed.
func TestBoltPageDamageIsNeverCommitted(t *testing.T) {
	t.Parallel()
	orig := t.TempDir()
	makeDamageStore(t, orig)
	path := filepath.Join(orig, boltFile)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if scanned, found, err := boltKeys(path); err != nil || scanned != boltDamageKeys || found != boltDamageKeys {
		t.Fatalf("bbolt alone, before any damage: %d keys scanned, %d found, %v; want %d", scanned, found, err, boltDamageKeys)
	}
	bp := listBoltPages(t, path)
	if len(bp.leaves) < 4 || len(bp.branches) < 1 || bp.freelist == 0 {
		t.Fatalf("the store's tree is too small to damage: %+v", bp)
	}
	ps := bp.ps
	leaf := bp.leaves[len(bp.leaves)/2]
	// The branch with the most children.
	branch := slices.MaxFunc(bp.branches, func(a, b int) int {
		return int(le.Uint16(data[a*ps+10:])) - int(le.Uint16(data[b*ps+10:]))
	})
	u16 := func(b []byte, page, off int, delta int) {
		le.PutUint16(b[page*ps+off:], uint16(int(le.Uint16(b[page*ps+off:]))+delta))
	}
	// branchKey returns the offset in the file of element i's key.
	branchKey := func(b []byte, i int) (off, n int) {
		el := branch*ps + 16 + 16*i
		return el + int(le.Uint32(b[el:])), int(le.Uint32(b[el+4:]))
	}
	damages := []struct {
		name    string
		missing bool // bbolt alone loses keys, without an error
		fn      func(b []byte)
	}{
		{"a leaf's element count one less", true, func(b []byte) { u16(b, leaf, 10, -1) }},
		{"a leaf's element count one more", false, func(b []byte) { u16(b, leaf, 10, +1) }},
		{"a branch's element count one less", true, func(b []byte) { u16(b, branch, 10, -1) }},
		{"a branch's pointer names its next child", true, func(b []byte) {
			copy(b[branch*ps+16+16+8:branch*ps+16+16+16], b[branch*ps+16+32+8:branch*ps+16+32+16])
		}},
		{"a branch's key raised", true, func(b []byte) {
			off, n := branchKey(b, 1)
			b[off+n-1]++
		}},
		{"a leaf's last key raised", true, func(b []byte) {
			count := int(le.Uint16(b[leaf*ps+10:]))
			el := leaf*ps + 16 + 16*(count-1)
			off := el + int(le.Uint32(b[el+4:])) + int(le.Uint32(b[el+8:])) - 1
			b[off]++
		}},
		{"the freelist holds a leaf in use", false, func(b []byte) {
			le.PutUint64(b[bp.freelist*ps+16:], uint64(leaf))
		}},
		{"a leaf's page id names another page", false, func(b []byte) {
			le.PutUint64(b[leaf*ps:], uint64(bp.leaves[0]))
		}},
	}
	for _, d := range damages {
		damaged := append([]byte{}, data...)
		d.fn(damaged)
		for _, mode := range []struct {
			name  string
			max   int64
			chunk int
		}{{"checked at open", 0, 0}, {"checked in the background", 1, 0}, {"checked at open, each level a page at a time", 0, 1}} {
			t.Run(d.name+"/"+mode.name, func(t *testing.T) {
				dir := t.TempDir()
				store, err := os.ReadFile(filepath.Join(orig, storeFile))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, storeFile), store, 0o644); err != nil {
					t.Fatal(err)
				}
				file := filepath.Join(dir, boltFile)
				if err := os.WriteFile(file, damaged, 0o600); err != nil {
					t.Fatal(err)
				}
				if d.missing {
					// The damage is one bbolt cannot see: a key is gone.
					scanned, found, err := boltKeys(file)
					if err != nil || (scanned == boltDamageKeys && found == boltDamageKeys) {
						t.Fatalf("bbolt alone: %d keys scanned, %d found, %v: want a key lost silently", scanned, found, err)
					}
				}
				o := testOpts()
				o.VerifyMaxBytes = mode.max
				if mode.chunk > 0 {
					o.hooks = &hooks{boltWalkChunk: mode.chunk}
				}
				err = runOnDamaged(t, dir, o)
				if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "backup") {
					t.Errorf("run on the damaged file: %v; want an error wrapping ErrCorrupt that names %s and what to do", err, file)
				}
				after, err := os.ReadFile(file)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(after, damaged) {
					t.Errorf("the damaged file was written: something read from it was committed")
				}
				// Reads for operators wait for the check too: a snapshot
				// (a status page, store show) and a backup never show or
				// copy what a damaged file holds.
				snapErr, backupErr := readOnDamaged(t, dir, o)
				for what, err := range map[string]error{"a snapshot": snapErr, "a backup": backupErr} {
					if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), file) {
						t.Errorf("%s of the damaged store: %v; want an error wrapping ErrCorrupt that names %s", what, err, file)
					}
				}
			})
		}
	}
}

// readOnDamaged opens the store in dir and reads every key in a snapshot,
// then backs it up into a new folder: their errors.
func readOnDamaged(t *testing.T, dir string, o *Options) (snapErr, backupErr error) {
	s, err := OpenBolt(dir, o)
	if err != nil {
		return err, err
	}
	snapErr = s.Snapshot(t.Context(), func(tx *Tx) error {
		n := 0
		for range tx.Bucket("acct").All() {
			n++
		}
		if err := tx.Err(); err != nil {
			return err
		}
		if n != boltDamageKeys {
			return fmt.Errorf("the snapshot holds %d keys of %d, and no error", n, boltDamageKeys)
		}
		return nil
	})
	backupErr = s.Backup(t.Context(), filepath.Join(t.TempDir(), "backup"))
	return snapErr, errors.Join(backupErr, s.Close())
}

// runOnDamaged opens the store in dir, applies line 3 (every key plus 1)
// and flushes it: the first error.
func runOnDamaged(t *testing.T, dir string, o *Options) error {
	s, err := OpenBolt(dir, o)
	if err != nil {
		return err
	}
	_, err = s.Apply(t.Context(), del("f", 1, 3), func(tx *Tx) error {
		for i := range boltDamageKeys {
			if _, err := tx.Bucket("acct").AddInt64(fmt.Appendf(nil, "account-%05d", i), 1); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		err = s.Flush(t.Context())
	}
	return errors.Join(err, s.Close())
}

// TestBoltCheckPassesWhatBboltWrites checks the files bbolt writes for a
// store's changes of every shape: keys put and deleted at random (pages
// split, merged and freed), values spanning several pages, a bucket
// small enough to be inline, and one emptied. A check that refused a
// healthy file would stop a healthy store.
func TestBoltCheckPassesWhatBboltWrites(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := mustOpen(t, backend{name: Bolt, open: OpenBolt}, dir, testOpts())
	e := s.(*nsStore).c.rawEngine().(*boltEngine)
	check := func(when string) {
		t.Helper()
		e.hooks = nil
		whole, err := e.checkFile(nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		// Each level a page at a time (see walkChunk): the same pages.
		e.hooks = &hooks{boltWalkChunk: 1}
		chunked, err := e.checkFile(nil, nil)
		if err != nil || chunked != whole {
			t.Fatalf("%s, each level a page at a time: %d pages, %v; want the %d pages of the whole levels", when, chunked, err, whole)
		}
	}
	check("a new store")
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 20 {
		var ws []write
		for range rng.IntN(1500) {
			k := append(dataPrefix("", "b"), fmt.Sprintf("key-%06d", rng.IntN(6000))...)
			switch r := rng.IntN(10); {
			case r < 3:
				ws = append(ws, write{key: k, del: true})
			case r == 3:
				ws = append(ws, write{key: k, val: bytes.Repeat([]byte{byte(round)}, 1+rng.IntN(20000))})
			default:
				ws = append(ws, write{key: k, val: []byte(fmt.Sprint(rng.Int64()))})
			}
		}
		slices.SortStableFunc(ws, func(a, b write) int { return bytes.Compare(a.key, b.key) })
		ws = slices.CompactFunc(ws, func(a, b write) bool { return bytes.Equal(a.key, b.key) })
		if err := e.commit(ws); err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("round %d", round))
	}
	// Everything deleted: the tree shrinks back to one leaf.
	var ws []write
	if err := e.scan(nil, func(k, v []byte) error {
		if !isVersionKey(k) {
			ws = append(ws, write{key: bytes.Clone(k), del: true})
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := e.commit(ws); err != nil {
		t.Fatal(err)
	}
	check("everything deleted")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// countingReaderAt counts the bytes read through it, and the furthest
// byte a read reached.
type countingReaderAt struct {
	r         *os.File
	read, end int64
}

func (c *countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.read += int64(n)
	c.end = max(c.end, off+int64(len(p)))
	return n, err
}

// TestBoltCheckReadsOnlyItsPages: the check of a small store reads its
// pages, and nothing of the file past them. bbolt grows its file ahead
// of its pages (a new store's is 16 MiB): a check that read a megabyte
// for the meta pages took a few milliseconds of every start of a program
// on a new or small store, and the allocation of that megabyte a
// collection of the garbage.
func TestBoltCheckReadsOnlyItsPages(t *testing.T) {
	t.Parallel()
	for _, keys := range []int{0, 3, 2000} {
		t.Run(fmt.Sprintf("keys=%d", keys), func(t *testing.T) {
			dir := t.TempDir()
			s := mustOpen(t, backend{name: Bolt, open: OpenBolt}, dir, testOpts())
			e := s.(*nsStore).c.rawEngine().(*boltEngine)
			var ws []write
			for i := range keys {
				ws = append(ws, write{key: append(dataPrefix("", "b"), fmt.Sprintf("key-%06d", i)...), val: []byte(fmt.Sprint(i))})
			}
			if err := e.commit(ws); err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(e.path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			fi, err := f.Stat()
			if err != nil {
				t.Fatal(err)
			}
			tx, err := e.db.Begin(false)
			if err != nil {
				t.Fatal(err)
			}
			pages := int64(tx.Size()) // the pages of the transaction's meta page, in bytes
			cr := &countingReaderAt{r: f}
			ck := &boltCheck{e: e, f: cr, ps: uint64(e.db.Info().PageSize), chunk: walkChunk}
			err = ck.run(uint64(tx.ID()))
			_ = tx.Rollback()
			if err != nil {
				t.Fatal(err)
			}
			if fi.Size() <= pages {
				t.Fatalf("the file (%d bytes) is no larger than its pages (%d bytes): the test tells nothing", fi.Size(), pages)
			}
			if cr.end > pages || cr.read > pages {
				t.Fatalf("the check read %d bytes, up to byte %d, of a file of %d bytes whose pages end at byte %d", cr.read, cr.end, fi.Size(), pages)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
