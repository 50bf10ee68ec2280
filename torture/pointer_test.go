package torture

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidemark-go/tidemark/feed/pointer"
)

// TestTornPointer is scenario 5: the real ledger restarted on a damaged
// pointer file. A run is killed part way; its pointer file and data folder
// are the starting point of every case. Each case damages a copy of the
// pointer file (a write torn at every byte offset of the newest record, bit
// flips, NULs, zero length, a leftover temporary file that claims a position
// far ahead, garbage) and runs the ledger once to the end. It must exit 0
// on that first run (no crash loop) and the state must be exact: the
// position never jumped forward (a jump would lose lines) and the lines
// re-delivered after falling back were skipped, not applied twice.
func TestTornPointer(t *testing.T) {
	track(t)
	rng := newRand(t)
	base := tempDir(t)
	input := filepath.Join(base, "in.csv")
	data := filepath.Join(base, "data")
	const lines = 8000
	gen(t, input, lines, rng.Uint64(), 1, 0)
	figures.inputs.Add(1)
	c := start(t, base, runArgs(input, data, "--batch", "20")...)
	// The kill comes once both slots of the pointer file hold a record:
	// the pointer moves a feed's batch at a time (2,048 lines by default),
	// once every line of it is saved, and its writer takes the newest
	// commit when it writes, so the second record can come after
	// thousands of lines.
	applied := 1000 + int64(rng.IntN(1000))
	if !c.waitFor(func(d map[string]int64, _ int) bool {
		return d["applied"] >= applied && bothSlots(input+pointer.Suffix)
	}) {
		t.Fatalf("the first run did not get going, or never wrote its pointer file's second record: %v", c.lastDurable())
	}
	c.kill()
	c.checkNotAhead()
	checkPointerOnDisk(t, input, data)
	img, err := os.ReadFile(input + pointer.Suffix)
	if err != nil {
		t.Fatal(err)
	}
	if len(img) != pointer.FileSize {
		t.Fatalf("pointer file of %d bytes", len(img))
	}
	newest, older := newestSlot(t, img)
	t.Logf("pointer: slot %d newest (position %d), slot %d older (position %d)", newest,
		slotPointer(img, newest).Position, older, slotPointer(img, older).Position)

	type damage struct {
		name string
		img  []byte // nil: no pointer file
		tmp  []byte // a leftover temporary file, if any
		warn bool   // the log must name the pointer file
	}
	var cases []damage
	recN := img[newest*pointer.SlotSize : newest*pointer.SlotSize+pointer.RecordSize]
	recO := img[older*pointer.SlotSize : older*pointer.SlotSize+pointer.RecordSize]
	for k := 0; k <= pointer.RecordSize; k++ {
		if !long && k%8 != 0 && k != 1 && k != 76 && k != 79 {
			continue
		}
		// The newest record was being written over an older one: its
		// first k bytes are new, the rest is what the slot held before
		// (another valid record: the nastiest leftover for a checksum),
		// or zeros.
		for _, rest := range []string{"old record", "zeros"} {
			d := bytes.Clone(img)
			at := newest * pointer.SlotSize
			copy(d[at:at+k], recN[:k])
			if rest == "zeros" {
				clear(d[at+k : at+pointer.RecordSize])
			} else {
				copy(d[at+k:at+pointer.RecordSize], recO[k:])
			}
			cases = append(cases, damage{name: fmt.Sprintf("torn at byte %d, then %s", k, rest), img: d})
		}
	}
	flips := pick(8, 80)
	for i := 0; i < flips; i++ {
		d := bytes.Clone(img)
		slot := []int{newest, older}[i%2]
		bit := rng.IntN(pointer.RecordSize * 8)
		d[slot*pointer.SlotSize+bit/8] ^= 1 << (bit % 8)
		cases = append(cases, damage{name: fmt.Sprintf("bit %d of slot %d flipped", bit, slot), img: d})
	}
	garbage := make([]byte, pointer.FileSize)
	for i := range garbage {
		garbage[i] = byte(rng.IntN(256))
	}
	// A temporary file left by a crash while the pointer was replaced,
	// claiming the end of the input: it must never be read.
	fi, err := os.Stat(input)
	if err != nil {
		t.Fatal(err)
	}
	ahead := slotPointer(img, newest)
	ahead.Position = fi.Size()
	ahead.TailLen, ahead.TailHash = 0, 0
	tmpImg := make([]byte, pointer.FileSize)
	copy(tmpImg, withSeq(pointer.Encode(nil, ahead), 1<<40))
	cases = append(cases,
		damage{name: "NUL-filled", img: make([]byte, pointer.FileSize), warn: true},
		// What a source leaves that took the pointer's lock (creating the
		// file empty) and was killed before its first write: no record,
		// no damage, so a note rather than a warning.
		damage{name: "zero length", img: []byte{}},
		damage{name: "5 bytes", img: img[:5], warn: true},
		damage{name: "first slot only", img: img[:pointer.SlotSize]},
		damage{name: "cut inside the second record", img: img[:pointer.SlotSize+40]},
		damage{name: "random garbage", img: garbage, warn: true},
		damage{name: "both records torn", img: tearBoth(img), warn: true},
		damage{name: "leftover temporary file claiming the end", img: img, tmp: tmpImg},
		damage{name: "leftover temporary file, pointer missing", img: nil, tmp: tmpImg},
	)
	for i, dm := range cases {
		dir := filepath.Join(base, fmt.Sprintf("case%03d", i))
		in := filepath.Join(dir, "in.csv")
		// A hard link: the same file (identity, bytes) under another
		// path, with a pointer file of its own.
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Link(input, in); err != nil {
			t.Fatal(err)
		}
		copyTree(t, data, filepath.Join(dir, "data"))
		if dm.img != nil {
			writeFile(t, in+pointer.Suffix, dm.img)
		}
		if dm.tmp != nil {
			writeFile(t, in+pointer.Suffix+pointer.TempSuffix, dm.tmp)
		}
		figures.faults.Add(1)
		c := start(t, dir, runArgs(in, filepath.Join(dir, "data"))...)
		err := c.wait()
		c.checkNotAhead()
		if err != nil {
			t.Fatalf("%s: the first run on the damaged pointer failed (%v): a crash loop\n%s", dm.name, err, tail(c.stderr.String()))
		}
		if dm.warn && !strings.Contains(c.stderr.String(), in+pointer.Suffix) {
			t.Errorf("%s: no log line names the pointer file:\n%s", dm.name, tail(c.stderr.String()))
		}
		r := check(t, filepath.Join(dir, "data"), in)
		lost, twice := r.lostAndTwice()
		figures.lost.Add(lost)
		figures.twice.Add(twice)
		if !r.ok || lost != 0 || twice != 0 {
			t.Fatalf("%s: not exact: %d lines lost, %d applied twice\n%s", dm.name, lost, twice, r.out)
		}
		if _, err := os.Stat(in + pointer.Suffix + pointer.TempSuffix); err == nil {
			t.Errorf("%s: the temporary pointer file is still there", dm.name)
		}
		os.RemoveAll(dir)
	}
	t.Logf("%d damaged pointer files, each survived on the first run", len(cases))
}

// bothSlots reports whether both slots of the pointer file at path hold a
// record that decodes.
func bothSlots(path string) bool {
	img, err := os.ReadFile(path)
	if err != nil || len(img) != pointer.FileSize {
		return false
	}
	for i := range 2 {
		if _, err := pointer.Decode(img[i*pointer.SlotSize:]); err != nil {
			return false
		}
	}
	return true
}

func slotPointer(img []byte, slot int) pointer.Record {
	p, _ := pointer.Decode(img[slot*pointer.SlotSize:])
	return p
}

// newestSlot returns the slot holding the record with the higher write
// sequence (bytes 8..16 of a record) and the other one.
func newestSlot(t *testing.T, img []byte) (newest, older int) {
	t.Helper()
	var seq [2]uint64
	for i := range 2 {
		rec := img[i*pointer.SlotSize:]
		if _, err := pointer.Decode(rec); err != nil {
			t.Fatalf("slot %d of the pointer does not decode: %v", i, err)
		}
		seq[i] = binary.LittleEndian.Uint64(rec[8:])
	}
	if seq[0] > seq[1] {
		return 0, 1
	}
	return 1, 0
}

// withSeq sets a record's write sequence and recomputes its checksum
// (layout in feed/pointer/pointer.go).
func withSeq(rec []byte, seq uint64) []byte {
	rec = bytes.Clone(rec)
	binary.LittleEndian.PutUint64(rec[8:], seq)
	n := pointer.RecordSize
	binary.LittleEndian.PutUint32(rec[n-4:], crc32.Checksum(rec[:n-4], crc32.MakeTable(crc32.Castagnoli)))
	return rec
}

func tearBoth(img []byte) []byte {
	d := bytes.Clone(img)
	for s := range 2 {
		clear(d[s*pointer.SlotSize+30 : s*pointer.SlotSize+pointer.RecordSize])
	}
	return d
}

// copyTree copies the regular files of a folder tree.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		if fi.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, fi.Mode().Perm())
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestPointerLostAfterCopy: the input is replaced by a byte-identical copy
// (another inode: restored from a backup, moved across file systems) and
// its pointer file is lost. Defect D3 (RELIABILITY.md, fixed in 7ace409):
// the store's lineage rule demanded the same identity, so every line was
// applied again. Nothing may be applied twice.
func TestPointerLostAfterCopy(t *testing.T) {
	track(t)
	rng := newRand(t)
	dir := tempDir(t)
	input, data := filepath.Join(dir, "in.csv"), filepath.Join(dir, "data")
	gen(t, input, 1000, rng.Uint64(), 1, 0)
	figures.inputs.Add(1)
	runToEnd(t, dir, runArgs(input, data)...)
	checkExact(t, data, input)
	b, err := os.ReadFile(input)
	if err != nil {
		t.Fatal(err)
	}
	// The copy is written while the original exists, so it cannot get
	// the original's inode.
	writeFile(t, input+".copy", b)
	if err := os.Rename(input+".copy", input); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(input + pointer.Suffix); err != nil {
		t.Fatal(err)
	}
	runToEnd(t, dir, runArgs(input, data)...)
	checkExact(t, data, input)
}
