package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// FuzzBoltCheck feeds the check of a bbolt file damaged bytes of a real
// one: it must never panic, and a file it passes must read in bbolt as
// the check saw it: every key a scan of the store's bucket finds is found
// again by a lookup, with the same value, and the scan finds as many keys
// as the check walked. A file the check passes but bbolt reads otherwise
// is the silent wrong answer the check is there to prevent. Each file is
// checked as a store of format 3 (its data keys in the store's bucket)
// and as one of format 4 (each table's keys in a bucket of their own,
// read through the engine's tableCursor and tableGet), and as one whose
// upgrade from format 3 to 4 is under way (movesAsChecked: a file that
// passes in both layouts at once must move into a format-4 file that
// passes too, with the same values, or the move must name the damage);
// the seeds are stores of all three.
func FuzzBoltCheck(f *testing.F) {
	const moving = 34 // a seed whose upgrade from format 3 to 4 is under way
	for _, seed := range []struct {
		keys   int
		format int
	}{{3, 3}, {400, 3}, {3, 4}, {400, 4}, {400, moving}} {
		dir := f.TempDir()
		o := testOpts()
		if seed.format != 4 {
			o = format3Opts()
		}
		s, err := OpenBolt(dir, o)
		if err != nil {
			f.Fatal(err)
		}
		e := s.(*nsStore).c.rawEngine()
		var ws []write
		for i := range seed.keys {
			// Keys of three tables (one empty key among them), in order.
			k := append(dataPrefix("", []string{"", "a", "b"}[i%3]), fmt.Sprintf("key-%05d", i)...)
			if i == 1 {
				k = dataPrefix("", "a")
			}
			ws = append(ws, write{key: k, val: []byte(fmt.Sprint(i * i))})
		}
		slices.SortFunc(ws, func(a, b write) int { return bytes.Compare(a.key, b.key) })
		if err := e.commit(ws); err != nil {
			f.Fatal(err)
		}
		if err := e.commit(ws[:len(ws)/2]); err != nil { // pages freed
			f.Fatal(err)
		}
		if seed.format == moving {
			// An upgrade to format 4 that moved the first 150 keys.
			be := e.(*boltEngine)
			if _, _, err := be.moveToTables(nil, 150, 1<<20, func(last []byte, done bool) []byte { return append([]byte(formatMoving), last...) }); err != nil {
				f.Fatal(err)
			}
		}
		if err := s.Close(); err != nil {
			f.Fatal(err)
		}
		data, err := os.ReadFile(filepath.Join(dir, boltFile))
		if err != nil {
			f.Fatal(err)
		}
		// bbolt grows its file ahead of its pages (to 16 MiB at once): a
		// seed of the whole file would be past maxFuzzFile, and return
		// before the check. The pages past the meta page's count are
		// never read.
		_, pages, ok := bboltMeta(data, 4096)
		if !ok || pages*4096 > maxFuzzFile {
			f.Fatalf("the seed store's file (%d bytes) has no valid meta page, or more than %d bytes of pages (%d pages)", len(data), maxFuzzFile, pages)
		}
		data = data[:pages*4096]
		// The undamaged seed passes the check of its format, so that the
		// fuzzing starts from files that reach bbolt's reading below.
		txid, _, _ := bboltMeta(data, 4096)
		ck := &boltCheck{e: &boltEngine{dir: "seed", path: "seed/" + boltFile, tables: seed.format == 4, moving: seed.format == moving}, f: bytes.NewReader(data), ps: 4096, value: func(k, v []byte) error { return nil }}
		if err := ck.run(txid); err != nil {
			f.Fatalf("the seed store's file, format %d, %d keys, cut to its %d pages: %v", seed.format, seed.keys, pages, err)
		}
		f.Add(data)
		for _, at := range []int{2*4096 + 10, 3*4096 + 10, 3*4096 + 20} {
			if at < len(data) {
				b := bytes.Clone(data)
				b[at]--
				f.Add(b)
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		const ps = 4096
		if len(data) < 2*ps || len(data) > maxFuzzFile {
			return
		}
		txid, _, ok := bboltMeta(data, ps)
		if !ok {
			return
		}
		for _, tables := range []bool{false, true} {
			walked := 0
			ck := &boltCheck{e: &boltEngine{dir: "fuzz", path: "fuzz/" + boltFile, tables: tables}, f: bytes.NewReader(data), ps: ps,
				value: func(k, v []byte) error { walked++; return nil }}
			if ck.run(txid) != nil {
				continue
			}
			if err := readsAsChecked(t, data, tables, walked); err != nil {
				t.Fatalf("format 4 (tables) %v: %v", tables, err)
			}
		}
		movesAsChecked(t, data, txid)
	})
}

// movesAsChecked checks the bbolt file data as a store whose upgrade to
// format 4 is under way (its data keys in both places); when the check
// passes, the move finishes (moveToTables, in chunks of 7 keys) or fails
// naming damage, and a finished one leaves a file that passes the check
// of format 4 with as many values, which reads as checked.
func movesAsChecked(t *testing.T, data []byte, txid uint64) {
	const ps = 4096
	walked := 0
	ck := &boltCheck{e: &boltEngine{dir: "fuzz", path: "fuzz/" + boltFile, moving: true}, f: bytes.NewReader(data), ps: ps,
		value: func(k, v []byte) error { walked++; return nil }}
	if ck.run(txid) != nil {
		return
	}
	path := filepath.Join(t.TempDir(), boltFile)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := func() (db *bolt.DB, err error) {
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("bbolt panicked opening it: %v", r)
			}
		}()
		return bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	}()
	if err != nil {
		return // refused: named, not silent
	}
	e := &boltEngine{db: db, dir: "fuzz", path: path}
	var after []byte
	var moveErr error
	for done := false; !done && moveErr == nil && db.View(func(tx *bolt.Tx) error {
		if tx.Bucket(boltBucket) == nil {
			return errors.New("no bucket")
		}
		return nil
	}) == nil; {
		after, done, moveErr = e.moveToTables(after, 7, 1<<20, func(last []byte, done bool) []byte { return []byte(formatV4) })
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if moveErr != nil {
		if ce := (*CorruptError)(nil); !errors.As(moveErr, &ce) {
			t.Fatalf("the check of the layout under way passed the file, and the move failed without naming damage: %v", moveErr)
		}
		return
	}
	moved, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	txid, _, ok := bboltMeta(moved, ps)
	if !ok {
		t.Fatal("the moved file has no valid meta page")
	}
	after4 := 0
	ck = &boltCheck{e: &boltEngine{dir: "fuzz", path: path, tables: true}, f: bytes.NewReader(moved), ps: ps,
		value: func(k, v []byte) error { after4++; return nil }}
	if err := ck.run(txid); err != nil {
		t.Fatalf("the check of the layout under way passed the file, and the check of format 4 refuses it moved: %v", err)
	}
	if after4 != walked {
		t.Fatalf("the check of the layout under way walked %d values, and that of format 4 %d once they moved", walked, after4)
	}
	if err := readsAsChecked(t, moved, true, walked); err != nil {
		t.Fatalf("moved to format 4: %v", err)
	}
}

// readsAsChecked reads the bbolt file data, which the check passed walking
// walked values, as a store of format 4 (tables) or 3 does: a scan finds
// as many keys, and a lookup of each finds the value the scan found.
func readsAsChecked(t *testing.T, data []byte, tables bool, walked int) (err error) {
	path := filepath.Join(t.TempDir(), boltFile)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the check passed the file, and bbolt panicked reading it: %v", r)
		}
	}()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return nil // refused: named, not silent
	}
	defer db.Close()
	return db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(boltBucket)
		if b == nil {
			if walked > 0 {
				return fmt.Errorf("the check passed the file walking %d values, and bbolt finds no bucket %q", walked, boltBucket)
			}
			// A store without its bucket is refused by openBolt (the
			// folder's STORE file says it was made): named, not
			// silent.
			return nil
		}
		scanned := 0
		c := newBoltCursor(b, tables)
		for k, v := c.First(); k != nil; k, v = c.Next() {
			scanned++
			if got := tableGet(b, k, tables); !bytes.Equal(got, v) {
				return fmt.Errorf("the check passed the file, and a lookup of key %q finds %q where the scan found %q", k, got, v)
			}
		}
		if scanned != walked {
			return fmt.Errorf("the check passed the file walking %d values, and bbolt's scan finds %d", walked, scanned)
		}
		return nil
	})
}

// maxFuzzFile is the largest file FuzzBoltCheck checks.
const maxFuzzFile = 1 << 20

// bboltMeta returns the transaction bbolt opens a file at, that of its
// valid meta page with the highest id, and the page count that meta page
// gives.
func bboltMeta(data []byte, ps int) (txid uint64, pages int, found bool) {
	var best uint64
	for id := range 2 {
		m := data[id*ps+bbHeader:]
		if binary.NativeEndian.Uint32(m) != bbMagic || binary.NativeEndian.Uint32(m[4:]) != bbVersion || binary.NativeEndian.Uint32(m[8:]) != uint32(ps) {
			continue
		}
		h := fnv.New64a()
		h.Write(m[:bbMetaSum])
		if h.Sum64() != binary.NativeEndian.Uint64(m[bbMetaSum:]) {
			continue
		}
		if tx := binary.NativeEndian.Uint64(m[48:]); !found || tx > best {
			best, found = tx, true
			pages = int(min(binary.NativeEndian.Uint64(m[40:]), uint64(len(data)/ps)))
		}
	}
	return best, pages, found
}
