package pointer

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/vfs"
)

// testPointer returns a distinct, valid pointer for each i.
func testPointer(epoch uint64, i int) Record {
	return Record{
		Epoch:       epoch,
		Position:    int64(i)*100 + 64,
		Identity:    tidemark.Identity{Dev: 2049, Ino: 1234567},
		Fingerprint: tidemark.Fingerprint{Len: 4096, Hash: 0x0123456789abcdef},
		TailLen:     64,
		TailHash:    uint64(i) * 0x9e3779b97f4a7c15,
	}
}

// record returns p's record with write sequence seq.
func record(p Record, seq uint64) []byte { return appendRecord(nil, p, seq) }

// image returns a pointer file holding a in slot A and b in slot B (nil
// leaves a slot zero).
func image(a, b []byte) []byte {
	img := make([]byte, FileSize)
	copy(img, a)
	copy(img[SlotSize:], b)
	return img
}

// reseal recomputes the checksum of the record at the start of b.
func reseal(b []byte) []byte {
	binary.LittleEndian.PutUint32(b[RecordSize-4:], crc32.Checksum(b[:RecordSize-4], crcTable))
	return b
}

// legacyFile returns a legacy pointer file holding count.
func legacyFile(count int64) []byte {
	b := make([]byte, LegacySize)
	binary.BigEndian.PutUint64(b, uint64(count))
	return b
}

// TestPointerRecordGolden pins the byte layout documented on File.
func TestPointerRecordGolden(t *testing.T) {
	p := Record{
		Epoch:       0x1122334455667788,
		Position:    0x0102030405060708,
		Identity:    tidemark.Identity{Dev: 0x21, Ino: 0x22},
		Fingerprint: tidemark.Fingerprint{Len: 4096, Hash: 0x31},
		TailLen:     64,
		TailHash:    0x41,
	}
	got := record(p, 0x51)
	want := "54444d50" + "0100" + "5000" + // magic, version 1, length 80
		"5100000000000000" + // write sequence
		"8877665544332211" + // epoch
		"0807060504030201" + // position
		"2100000000000000" + "2200000000000000" + // dev, ino
		"3100000000000000" + "4100000000000000" + // fingerprint hash, tail hash
		"00100000" + "40000000" + "00000000" // fingerprint len, tail len, reserved
	if hex.EncodeToString(got[:76]) != want {
		t.Fatalf("record layout changed:\n got %x\nwant %s", got[:76], want)
	}
	if crc := binary.LittleEndian.Uint32(got[76:]); crc != crc32.Checksum(got[:76], crc32.MakeTable(crc32.Castagnoli)) {
		t.Fatalf("checksum %08x is not CRC-32C of bytes 0..75", crc)
	}
	if len(got) != RecordSize {
		t.Fatalf("record is %d bytes, want %d", len(got), RecordSize)
	}
	if enc := Encode([]byte("prefix"), p); !bytes.Equal(enc[6:], record(p, 0)) || string(enc[:6]) != "prefix" {
		t.Fatalf("Encode does not append a sequence-0 record to dst")
	}
}

func TestDecodePointer(t *testing.T) {
	p := testPointer(1000, 3)
	valid := record(p, 9)
	mutate := func(f func(b []byte)) []byte {
		b := bytes.Clone(valid)
		f(b)
		return b
	}
	type tc struct {
		name    string
		in      []byte
		wantErr string // "" means it decodes to p
	}
	tests := []tc{
		{"valid", valid, ""},
		{"valid with trailing bytes", append(bytes.Clone(valid), 1, 2, 3), ""},
		{"NULs", make([]byte, RecordSize), "bad magic"},
		{"bad magic", mutate(func(b []byte) { b[0] = 'X' }), "bad magic"},
		{"bad checksum", mutate(func(b []byte) { b[79] ^= 0xff }), "checksum mismatch"},
		{"flipped position", mutate(func(b []byte) { b[24] ^= 1 }), "checksum mismatch"},
		{"unknown version", mutate(func(b []byte) { b[4] = 2; reseal(b) }), "unknown version 2"},
		{"version 0", mutate(func(b []byte) { b[4] = 0; reseal(b) }), "unknown version 0"},
		{"bad record length", mutate(func(b []byte) { b[6] = 81; reseal(b) }), "record length 81"},
		{"reserved set", mutate(func(b []byte) { b[72] = 1; reseal(b) }), "reserved"},
		{"fingerprint too long", mutate(func(b []byte) { binary.LittleEndian.PutUint32(b[64:], 4097); reseal(b) }), "out of range"},
		{"tail too long", mutate(func(b []byte) { binary.LittleEndian.PutUint32(b[68:], 65); reseal(b) }), "out of range"},
		{"negative position", mutate(func(b []byte) { binary.LittleEndian.PutUint64(b[24:], uint64(1<<63)); reseal(b) }), "negative position"},
		{"tail beyond position", mutate(func(b []byte) { binary.LittleEndian.PutUint64(b[24:], 10); reseal(b) }), "tail length 64 beyond position 10"},
		{"legacy ASCII count", legacyFile(12), "bad magic"},
		{"legacy negative count", legacyFile(-1), "bad magic"},
	}
	for n := range RecordSize {
		want := "truncated"
		if n < 8 {
			want = "shorter than a record header"
		}
		tests = append(tests, tc{"truncated to " + strconv.Itoa(n), valid[:n], want})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Decode(tc.in)
			if tc.wantErr == "" {
				if err != nil || got != p {
					t.Fatalf("Decode = %+v, %v; want %+v", got, err, p)
				}
				return
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Decode = %+v, %v; want an error wrapping ErrCorrupt", got, err)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %q does not say %q", err, tc.wantErr)
			}
			if got != (Record{}) {
				t.Fatalf("Decode returned %+v with its error", got)
			}
		})
	}
}

// writeFile writes b at path, creating the directory.
func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestPointerLoad(t *testing.T) {
	p1, p2 := testPointer(1000, 1), testPointer(1000, 2)
	a1, b2 := record(p1, 1), record(p2, 2)
	ours1024 := image(a1, nil)[:LegacySize]
	oursBadCRC1024 := bytes.Clone(ours1024)
	oursBadCRC1024[30] ^= 1
	unknownA := reseal(func() []byte { b := bytes.Clone(a1); b[4] = 9; return b }())
	badB := bytes.Clone(b2)
	badB[79] ^= 0x80
	type want struct {
		found, missing, legacy, empty bool
		p                             Record
		reason                        string
	}
	tests := []struct {
		name  string
		file  []byte // nil: no file
		extra map[string][]byte
		want  want
	}{
		{"missing", nil, nil, want{missing: true, reason: "does not exist"}},
		{"empty", []byte{}, nil, want{empty: true, reason: "is empty"}},
		{"1 byte", []byte{1}, nil, want{reason: "1 bytes long, shorter than 8"}},
		{"7 bytes", []byte("TDMP\x01\x00P"), nil, want{reason: "7 bytes long, shorter than 8"}},
		{"slot A only", image(a1, nil), nil, want{found: true, p: p1, reason: "slot A, write 1"}},
		{"both slots, B newer", image(a1, b2), nil, want{found: true, p: p2, reason: "slot B, write 2"}},
		{"both slots, A newer", image(record(p2, 4), record(p1, 3)), nil, want{found: true, p: p2, reason: "slot A, write 4"}},
		{"B corrupt falls back to A", image(a1, badB), nil, want{found: true, p: p1, reason: "slot B: feed: corrupt pointer record: checksum mismatch"}},
		{"A unknown version, B valid", image(unknownA, b2), nil, want{found: true, p: p2, reason: "slot B"}},
		{"only an unknown version", image(unknownA, nil), nil, want{reason: "unknown version 9"}},
		{"both corrupt", image(badB, badB), nil, want{reason: "holds no valid record"}},
		{"file of NULs", make([]byte, FileSize), nil, want{reason: "holds only NUL bytes"}},
		{"short file of NULs", make([]byte, 100), nil, want{reason: "holds only NUL bytes"}},
		{"torn slot A of a new file", a1[:50], nil, want{reason: "truncated: 50 of 80 bytes"}},
		{"truncated after slot A", image(a1, b2)[:SlotSize+40], nil, want{found: true, p: p1}},
		{"our format, 1024 bytes, is not legacy", ours1024, nil, want{found: true, p: p1}},
		{"our format, 1024 bytes, corrupt, is not legacy", oursBadCRC1024, nil, want{reason: "checksum mismatch"}},
		{"legacy ASCII", legacyFile(12), nil, want{legacy: true, p: Record{Position: 12}, reason: "legacy pointer file"}},
		{"legacy zero", legacyFile(0), nil, want{legacy: true, p: Record{Position: 0}}},
		{"legacy negative", legacyFile(-5), nil, want{reason: "negative count -5"}},
		{"1023 bytes is not legacy", legacyFile(12)[:1023], nil, want{reason: "holds no valid record"}},
		{"1025 bytes is not legacy", append(legacyFile(12), 0), nil, want{reason: "holds no valid record"}},
		{"larger than a pointer file", append(image(a1, b2), make([]byte, 100)...), nil, want{found: true, p: p2}},
		{"leftover temp file is ignored", image(a1, nil), map[string][]byte{TempSuffix: image(b2, nil)}, want{found: true, p: p1}},
		{"leftover temp file without pointer", nil, map[string][]byte{TempSuffix: image(b2, nil)}, want{missing: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "input.csv"+Suffix)
			if tc.file != nil {
				writeFile(t, path, tc.file)
			}
			for suffix, b := range tc.extra {
				writeFile(t, path+suffix, b)
			}
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			res, err := Open(path, Options{Logger: log}).Load()
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if _, ok := tc.extra[TempSuffix]; ok && !strings.Contains(logs.String(), path+TempSuffix) {
				t.Fatalf("removing the temporary file was not logged with its name: %q", logs.String())
			}
			w := tc.want
			if res.Found != w.found || res.Missing != w.missing || res.Legacy != w.legacy || res.Empty != w.empty || res.Record != w.p {
				t.Fatalf("Load = %+v\nwant found=%v missing=%v legacy=%v empty=%v pointer=%+v", res, w.found, w.missing, w.legacy, w.empty, w.p)
			}
			if !strings.Contains(res.Reason, w.reason) {
				t.Fatalf("reason %q does not say %q", res.Reason, w.reason)
			}
			if !res.Found && !res.Legacy && !strings.Contains(res.Reason, path) {
				t.Fatalf("reason %q does not name the file", res.Reason)
			}
			if _, err := os.Stat(path + TempSuffix); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("leftover temporary file not removed: %v", err)
			}
		})
	}
}

func TestPointerLoadUnreadable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "in"+Suffix)
	writeFile(t, path, image(record(testPointer(1, 1), 1), nil))
	c := &vfs.Counter{Match: func(op vfs.Op, _ string) bool { return op == vfs.OpOpen || op == vfs.OpRead }, FailAt: 1, Sticky: true}
	pf := Open(path, Options{FS: vfs.Inject(vfs.Default(), c.Injector())})
	_, err := pf.Load()
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "remove it") {
		t.Fatalf("Load of an unreadable file = %v; want an error naming the file and what to do", err)
	}
	c2 := &vfs.Counter{Match: func(op vfs.Op, _ string) bool { return op == vfs.OpRead }, FailAt: 1, Sticky: true}
	pf = Open(path, Options{FS: vfs.Inject(vfs.Default(), c2.Injector())})
	if _, err := pf.Load(); err == nil || !errors.Is(err, vfs.ErrInjected.Err) {
		t.Fatalf("Load with a failing read = %v; want the I/O error", err)
	}
}

// slotsOf decodes both slots of a pointer file's bytes.
func slotsOf(t *testing.T, b []byte) fileState {
	t.Helper()
	return parseState(b, int64(len(b)))
}

func TestPointerStoreCreatesAndAlternates(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "in"+Suffix)
	pf := Open(path, Options{})
	defer pf.Close()
	for i := 1; i <= 6; i++ {
		p := testPointer(1000, i)
		if err := pf.Store(p); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != FileSize {
			t.Fatalf("after store %d the file is %d bytes, want %d", i, len(b), FileSize)
		}
		st := slotsOf(t, b)
		// Write i lands in slot A for odd i, B for even i.
		slot := (i - 1) % 2
		if st.best != slot || st.slots[slot].seq != uint64(i) || st.slots[slot].p != p {
			t.Fatalf("after store %d: best slot %d seq %d, want slot %d seq %d", i, st.best, st.slots[st.best].seq, slot, i)
		}
		if i > 1 && (!st.slots[1-slot].valid || st.slots[1-slot].p != testPointer(1000, i-1)) {
			t.Fatalf("after store %d the other slot lost the previous record: %v", i, st.slots[1-slot].err)
		}
		if _, err := os.Stat(path + TempSuffix); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("temporary file left behind: %v", err)
		}
	}
	// A new File continues the sequence.
	if err := pf.Close(); err != nil {
		t.Fatal(err)
	}
	pf2 := Open(path, Options{})
	if err := pf2.Store(testPointer(1000, 7)); err != nil {
		t.Fatal(err)
	}
	pf2.Close()
	b, _ := os.ReadFile(path)
	if st := slotsOf(t, b); st.best != 0 || st.slots[0].seq != 7 {
		t.Fatalf("reopened store wrote slot %d seq %d, want slot A seq 7", st.best, st.slots[st.best].seq)
	}
}

func TestPointerStoreReplacesForeignFiles(t *testing.T) {
	for name, content := range map[string][]byte{
		"legacy":     legacyFile(77),
		"empty":      {},
		"NULs":       make([]byte, FileSize),
		"corrupt":    image([]byte("TDMP garbage"), nil),
		"short ours": image(record(testPointer(5, 1), 1), nil)[:LegacySize],
		"large junk": bytes.Repeat([]byte("x"), 20000),
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "in"+Suffix)
			writeFile(t, path, content)
			pf := Open(path, Options{})
			if _, err := pf.Load(); err != nil {
				t.Fatal(err)
			}
			p := testPointer(uint64(time.Now().UnixNano()), 1)
			if err := pf.Store(p); err != nil {
				t.Fatal(err)
			}
			pf.Close()
			b, _ := os.ReadFile(path)
			if len(b) != FileSize {
				t.Fatalf("file is %d bytes, want %d", len(b), FileSize)
			}
			res, err := Open(path, Options{}).Load()
			if err != nil || !res.Found || res.Record != p {
				t.Fatalf("Load = %+v, %v; want %+v", res, err, p)
			}
		})
	}
}

func TestPointerStoreForwardOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "in"+Suffix)
	writes := &vfs.Counter{Match: func(op vfs.Op, _ string) bool { return op == vfs.OpWrite }}
	pf := Open(path, Options{FS: vfs.Inject(vfs.Default(), writes.Injector())})
	defer pf.Close()
	at := func(epoch uint64, pos int64) Record { return Record{Epoch: epoch, Position: pos} }
	steps := []struct {
		p     Record
		write bool
		want  Record // on disk afterwards
	}{
		{at(10, 100), true, at(10, 100)},
		{at(10, 50), false, at(10, 100)},  // lower in the same epoch: ignored
		{at(10, 100), false, at(10, 100)}, // the same record again: nothing to write
		{at(10, 101), true, at(10, 101)},
		{Record{Epoch: 10, Position: 101, Identity: tidemark.Identity{Ino: 9}}, true, Record{Epoch: 10, Position: 101, Identity: tidemark.Identity{Ino: 9}}}, // same position, new identity
		{at(11, 0), true, at(11, 0)},     // a new epoch starts lower
		{at(11, 0), false, at(11, 0)},    // repeated
		{at(10, 500), true, at(10, 500)}, // another epoch: the source decides
		{at(10, 400), false, at(10, 500)},
	}
	for i, s := range steps {
		before := writes.Count()
		if err := pf.Store(s.p); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if wrote := writes.Count() > before; wrote != s.write {
			t.Fatalf("step %d: Store(%+v) wrote=%v, want %v", i, s.p, wrote, s.write)
		}
		res, err := Open(path, Options{}).Load()
		if err != nil || res.Record != s.want {
			t.Fatalf("step %d: Load = %+v, %v; want %+v", i, res.Record, err, s.want)
		}
	}
	// A fresh File applies the rule against the record on disk,
	// whether or not Load was called first.
	for _, load := range []bool{true, false} {
		pf2 := Open(path, Options{FS: vfs.Inject(vfs.Default(), writes.Injector())})
		if load {
			if _, err := pf2.Load(); err != nil {
				t.Fatal(err)
			}
		}
		before := writes.Count()
		if err := pf2.Store(at(10, 499)); err != nil {
			t.Fatal(err)
		}
		if writes.Count() != before {
			t.Fatalf("load=%v: a lower position in the epoch on disk was written", load)
		}
		pf2.Close()
	}
}

func TestPointerStoreRejectsInvalid(t *testing.T) {
	pf := Open(filepath.Join(t.TempDir(), "in"+Suffix), Options{})
	defer pf.Close()
	for _, p := range []Record{
		{Position: -1},
		{Position: 10, Fingerprint: tidemark.Fingerprint{Len: 4097}},
		{Position: 10, Fingerprint: tidemark.Fingerprint{Len: -1}},
		{Position: 100, TailLen: 65},
		{Position: 10, TailLen: 11},
	} {
		if err := pf.Store(p); !errors.Is(err, ErrInvalid) {
			t.Errorf("Store(%+v) = %v, want ErrInvalid", p, err)
		}
	}
}

func TestPointerClosed(t *testing.T) {
	pf := Open(filepath.Join(t.TempDir(), "in"+Suffix), Options{})
	if err := pf.Store(testPointer(1, 1)); err != nil {
		t.Fatal(err)
	}
	if err := pf.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pf.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	if err := pf.Store(testPointer(1, 2)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Store after Close = %v", err)
	}
	if _, err := pf.Load(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Load after Close = %v", err)
	}
	if err := pf.Sync(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Sync after Close = %v", err)
	}
	if err := pf.SyncIfDue(); !errors.Is(err, ErrClosed) {
		t.Fatalf("SyncIfDue after Close = %v", err)
	}
}

// TestPointerTornAtEveryByte tears each in-place write at every byte: the
// new slot holds the first k bytes of the new record and the rest of what it
// held before. Load must return the previous record, or the new one once
// all of it is there, never anything else.
func TestPointerTornAtEveryByte(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "in"+Suffix)
	pf := Open(path, Options{})
	defer pf.Close()
	prev := testPointer(1000, 0)
	if err := pf.Store(prev); err != nil {
		t.Fatal(err)
	}
	torn := filepath.Join(dir, "torn"+Suffix)
	for i := 1; i <= 5; i++ {
		p := testPointer(1000, i)
		if i == 4 {
			p = testPointer(2000, 0) // a new epoch, lower position
		}
		before, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		slot, rec := 1-pf.keep, record(p, pf.seq+1)
		for k := 0; k <= len(rec); k++ {
			b := bytes.Clone(before)
			copy(b[slot*SlotSize:], rec[:k])
			tornFS := newCrashFS()
			tornFS.put(torn, b)
			res, err := Open(torn, Options{FS: tornFS}).Load()
			if err != nil {
				t.Fatal(err)
			}
			want := prev
			if k == len(rec) {
				want = p
			}
			if !res.Found || res.Record != want {
				t.Fatalf("store %d torn at byte %d: Load = %+v, want %+v", i, k, res, want)
			}
		}
		if err := pf.Store(p); err != nil {
			t.Fatal(err)
		}
		// The simulation above matches what Store really wrote.
		after, _ := os.ReadFile(path)
		want := bytes.Clone(before)
		copy(want[slot*SlotSize:], rec)
		if !bytes.Equal(after, want) {
			t.Fatalf("store %d did not write exactly record %x to slot %c", i, rec, slotName(slot))
		}
		prev = p
	}
}

// TestPointerTornAnyBytes mixes old and new bytes of a slot at random (a
// write torn by sectors written out of order).
func TestPointerTornAnyBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	old := record(testPointer(1000, 1), 1)
	keep := record(testPointer(1000, 2), 2)
	rec := record(testPointer(1000, 3), 3)
	for range 3000 {
		slot := make([]byte, RecordSize)
		for i := range slot {
			slot[i] = old[i]
			if rng.IntN(2) == 0 {
				slot[i] = rec[i]
			}
		}
		st := parseState(image(slot, keep), FileSize)
		got := st.slots[st.best].p
		if got != testPointer(1000, 2) && got != testPointer(1000, 3) && got != testPointer(1000, 1) {
			t.Fatalf("torn slot %x gave %+v", slot, got)
		}
		if got == testPointer(1000, 1) {
			t.Fatalf("a torn slot decoded as its old record, which is older than the kept one")
		}
	}
}

// TestPointerBitRot flips every bit, and some groups of bits, of every byte
// of both records (CRC-32C detects every burst of up to 32 bits): the
// checksum detects it and Load falls back to the other slot.
func TestPointerBitRot(t *testing.T) {
	pa, pb := testPointer(1000, 5), testPointer(1000, 6)
	clean := image(record(pa, 5), record(pb, 6))
	for slot, other := range []Record{pb, pa} {
		for off := range RecordSize {
			for _, x := range []int{1, 2, 4, 8, 16, 32, 64, 128, 0xff, 0x55, 0xaa, 0x0f, 0xf0, 0x3c, 0x81} {
				b := bytes.Clone(clean)
				b[slot*SlotSize+off] ^= byte(x)
				st := parseState(b, FileSize)
				if st.slots[slot].valid {
					t.Fatalf("slot %c byte %d ^ %#x not detected", slotName(slot), off, x)
				}
				if st.best != 1-slot || st.slots[st.best].p != other {
					t.Fatalf("slot %c byte %d ^ %#x: did not fall back to the other slot", slotName(slot), off, x)
				}
			}
		}
	}
	// Random multi-byte rot through Load on a real file: never a pointer
	// that was not stored.
	rng := rand.New(rand.NewPCG(5, 6))
	path := filepath.Join(t.TempDir(), "in"+Suffix)
	for range 200 {
		b := bytes.Clone(clean)
		for range 1 + rng.IntN(4) {
			slot := rng.IntN(2)
			b[slot*SlotSize+rng.IntN(RecordSize)] ^= byte(1 + rng.IntN(255))
		}
		writeFile(t, path, b)
		res, err := Open(path, Options{}).Load()
		if err != nil {
			t.Fatal(err)
		}
		if res.Found && res.Record != pa && res.Record != pb {
			t.Fatalf("bit rot gave a pointer never stored: %+v", res.Record)
		}
		if !res.Found && !strings.Contains(res.Reason, "checksum") {
			t.Fatalf("both slots rotten, reason %q does not say checksum", res.Reason)
		}
	}
}

// syncCounter counts the syncs of the pointer file itself.
func syncCounter(path string) *vfs.Counter {
	return &vfs.Counter{Match: func(op vfs.Op, p string) bool { return op == vfs.OpSync && p == path }}
}

func TestPointerSyncEveryCommit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "in"+Suffix)
	syncs := syncCounter(path)
	pf := Open(path, Options{FS: vfs.Inject(vfs.Default(), syncs.Injector())})
	if err := pf.Store(testPointer(1, 0)); err != nil { // creates through the temp file
		t.Fatal(err)
	}
	for i := 1; i <= 5; i++ {
		if err := pf.Store(testPointer(1, i)); err != nil {
			t.Fatal(err)
		}
		if syncs.Count() != i {
			t.Fatalf("after %d in-place stores: %d syncs", i, syncs.Count())
		}
	}
	if err := pf.Store(testPointer(1, 2)); err != nil { // ignored
		t.Fatal(err)
	}
	if err := pf.Close(); err != nil {
		t.Fatal(err)
	}
	if syncs.Count() != 5 {
		t.Fatalf("an ignored store or Close synced: %d syncs", syncs.Count())
	}
}

func TestPointerSyncNever(t *testing.T) {
	path := filepath.Join(t.TempDir(), "in"+Suffix)
	syncs := syncCounter(path)
	pf := Open(path, Options{FS: vfs.Inject(vfs.Default(), syncs.Injector()), Sync: SyncNever})
	for i := range 6 {
		if err := pf.Store(testPointer(1, i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := pf.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := pf.Close(); err != nil {
		t.Fatal(err)
	}
	if syncs.Count() != 0 {
		t.Fatalf("SyncNever synced the pointer file %d times", syncs.Count())
	}
	b, _ := os.ReadFile(path)
	if st := slotsOf(t, b); st.slots[st.best].p != testPointer(1, 5) || !st.slots[1-st.best].valid {
		t.Fatalf("SyncNever does not alternate slots: %+v", st)
	}
}

func TestPointerSyncInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "in"+Suffix)
		syncs := syncCounter(path)
		pf := Open(path, Options{
			FS:           vfs.Inject(vfs.Default(), syncs.Injector()),
			Sync:         SyncInterval,
			SyncInterval: 100 * time.Millisecond,
		})
		store := func(i int) {
			t.Helper()
			if err := pf.Store(testPointer(1, i)); err != nil {
				t.Fatal(err)
			}
		}
		expect := func(n int, what string) {
			t.Helper()
			if syncs.Count() != n {
				t.Fatalf("%s: %d syncs, want %d", what, syncs.Count(), n)
			}
		}
		store(0) // creation is always durable
		expect(0, "creation")
		store(1) // in place; the interval since creation has not passed
		expect(0, "store within the interval")
		time.Sleep(40 * time.Millisecond)
		store(2)
		store(3)
		expect(0, "stores within the interval")
		// Writes between syncs all go to the slot that is not durable.
		b, _ := os.ReadFile(path)
		if st := slotsOf(t, b); st.slots[0].p != testPointer(1, 0) || st.slots[1].p != testPointer(1, 3) {
			t.Fatalf("unsynced writes touched the durable slot: A=%+v B=%+v", st.slots[0].p, st.slots[1].p)
		}
		time.Sleep(60 * time.Millisecond)
		store(4) // the interval has passed: this store syncs
		expect(1, "store after the interval")
		store(5)
		expect(1, "store right after a sync")
		time.Sleep(100 * time.Millisecond)
		if err := pf.Store(testPointer(1, 5)); err != nil { // a repeat still syncs what is due
			t.Fatal(err)
		}
		expect(2, "repeated store after the interval")
		store(6)
		if err := pf.Sync(); err != nil {
			t.Fatal(err)
		}
		expect(3, "Sync")
		if err := pf.Sync(); err != nil {
			t.Fatal(err)
		}
		expect(3, "Sync with nothing pending")
		store(7)
		if err := pf.SyncIfDue(); err != nil {
			t.Fatal(err)
		}
		expect(3, "SyncIfDue within the interval")
		time.Sleep(100 * time.Millisecond)
		if err := pf.SyncIfDue(); err != nil {
			t.Fatal(err)
		}
		expect(4, "SyncIfDue after the interval")
		if err := pf.SyncIfDue(); err != nil {
			t.Fatal(err)
		}
		expect(4, "SyncIfDue with nothing pending")
		store(8)
		if err := pf.Close(); err != nil {
			t.Fatal(err)
		}
		expect(5, "Close with a pending write")
	})
}

func TestPointerSyncIntervalDefault(t *testing.T) {
	pf := Open("x", Options{Sync: SyncInterval})
	if pf.interval != DefaultSyncInterval {
		t.Fatalf("interval %v, want %v", pf.interval, DefaultSyncInterval)
	}
	for p, want := range map[SyncPolicy]string{SyncEveryCommit: "every commit", SyncInterval: "interval", SyncNever: "never", 9: "SyncPolicy(9)"} {
		if p.String() != want {
			t.Errorf("%d.String() = %q, want %q", int(p), p.String(), want)
		}
	}
}

// TestPointerOperations pins the protocol: creation goes through the
// temporary file, a rename and a directory sync; a commit in place is one
// write and one fdatasync of the pointer file, nothing else.
func TestPointerOperations(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "in"+Suffix)
	tmp := path + TempSuffix
	var ops []string
	trace := func(op vfs.Op, p string) error {
		ops = append(ops, string(op)+" "+strings.NewReplacer(tmp, "TMP", path, "PTR", dir, "DIR").Replace(p))
		return nil
	}
	pf := Open(path, Options{FS: vfs.Inject(vfs.Default(), trace)})
	defer pf.Close()
	expect := func(what string, want ...string) {
		t.Helper()
		if strings.Join(ops, ", ") != strings.Join(want, ", ") {
			t.Fatalf("%s:\n got %s\nwant %s", what, strings.Join(ops, ", "), strings.Join(want, ", "))
		}
		ops = nil
	}
	if err := pf.Store(testPointer(1, 1)); err != nil {
		t.Fatal(err)
	}
	expect("creation",
		"open PTR", // prepare: is there a file?
		"open TMP", "write TMP", "sync TMP", "rename PTR", "syncdir DIR",
		"open PTR") // reopened for writing in place
	for i := 2; i < 5; i++ {
		if err := pf.Store(testPointer(1, i)); err != nil {
			t.Fatal(err)
		}
		expect("commit in place", "write PTR", "sync PTR")
	}
	if _, err := pf.Load(); err != nil {
		t.Fatal(err)
	}
	expect("load", "stat TMP", "open PTR", "read PTR")
}
