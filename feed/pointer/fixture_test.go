package pointer

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/tidemark-go/tidemark"
)

// updateFixtures rewrites testdata/pointer and the fuzz seed corpus:
//
//	go test ./feed/pointer -run TestPointerFixtures -update
//
// The flag is shared with any other golden-file test of the package.
var updateFixtures = boolFlag("update", "rewrite golden files and fixtures")

// boolFlag defines a bool flag, or reuses one defined before under the same
// name (another test file of the package may define -update too).
func boolFlag(name, usage string) func() bool {
	if f := flag.Lookup(name); f != nil {
		return func() bool { return f.Value.String() == "true" }
	}
	b := flag.Bool(name, false, usage)
	return func() bool { return *b }
}

const (
	pointerFixtureDir = "../../testdata/pointer"
	pointerFuzzDir    = "testdata/fuzz/FuzzDecode"
)

// pointerFixture is one pointer file of testdata/pointer, what it is, and
// what Load must make of it.
type pointerFixture struct {
	name   string
	desc   string
	data   []byte
	found  bool
	legacy bool
	pos    int64
	reason string // a part of LoadResult.Reason
}

// utf16Count is what the legacy product stored after reading text: its
// length in UTF-16 code units.
func utf16Count(text string) int64 { return int64(len(utf16.Encode([]rune(text)))) }

func fixturePointer(text string) Record {
	tail := text[max(0, len(text)-MaxTailLen):]
	return Record{
		Epoch:       1764400000000000000,
		Position:    int64(len(text)),
		Identity:    tidemark.Identity{Dev: 2049, Ino: 131074},
		Fingerprint: tidemark.Fingerprint{Len: len(text), Hash: HashBytes([]byte(text))},
		TailLen:     len(tail),
		TailHash:    HashBytes([]byte(tail)),
	}
}

func pointerFixtures() []pointerFixture {
	a := record(fixturePointer("hello\n"), 1)
	b := record(fixturePointer("hello\nworld\n"), 2)
	current := image(a, b)
	torn := bytes.Clone(current)
	copy(torn, record(fixturePointer("hello\nworld\nagain\n"), 3)[:37])
	badCRC := bytes.Clone(current)
	badCRC[30] ^= 0x04
	badCRC[SlotSize+30] ^= 0x04
	v2 := image(reseal(func() []byte { r := bytes.Clone(a); r[4] = 2; return r }()), nil)
	const twoByte, fourByte = "héllo\nwörld\n", "😀 a\n😀 b\n"
	fx := []pointerFixture{
		{name: "current", data: current, found: true, pos: 12, reason: "slot B, write 2",
			desc: "Current format (version 1), both slots valid: slot A write 1 at position 6 (after `hello\\n`), slot B write 2 at position 12 (after `hello\\nworld\\n`). Load uses slot B: position 12."},
		{name: "current-new", data: image(a, nil), found: true, pos: 6, reason: "slot A, write 1",
			desc: "Current format as first created: slot A write 1 at position 6, slot B zeros. Position 6."},
		{name: "current-1024", data: current[:LegacySize], found: true, pos: 6, reason: "slot A, write 1",
			desc: "A current-format file cut to 1024 bytes (slot A only). It starts with the magic, so it is not a legacy file: position 6."},
		{name: "torn", data: torn, found: true, pos: 12, reason: "slot A: feed: corrupt pointer record: checksum mismatch",
			desc: "Write 3 (position 18) torn after 37 of its 80 bytes in slot A, over write 1. Slot A fails its checksum; Load falls back to slot B: position 12."},
		{name: "torn-new-file", data: a[:50], reason: "truncated: 50 of 80 bytes",
			desc: "The first 50 bytes of a record and nothing else. No valid record: not found; the source starts at 0 under a new epoch with a warning."},
		{name: "nul-8192", data: make([]byte, FileSize), reason: "holds only NUL bytes",
			desc: "8192 NUL bytes (a file whose blocks were allocated but never written). Not found."},
		{name: "nul-100", data: make([]byte, 100), reason: "holds only NUL bytes",
			desc: "100 NUL bytes. Not found."},
		{name: "nul-1024", data: make([]byte, LegacySize), legacy: true, pos: 0, reason: "legacy pointer file",
			desc: "1024 NUL bytes: a legacy file holding count 0. Legacy, position 0."},
		{name: "bad-checksum", data: badCRC, reason: "checksum mismatch",
			desc: "Both slots of `current` with one bit flipped in each (byte 30 of each record). Not found; the reason names the checksum."},
		{name: "unknown-version", data: v2, reason: "unknown version 2",
			desc: "Slot A claims version 2 (checksum recomputed), slot B zeros. Not found; the reason says `unknown version 2`."},
		{name: "legacy-ascii", data: legacyFile(utf16Count("hello\nworld\n")), legacy: true, pos: 12, reason: "count 12",
			desc: "Legacy 1024-byte file: big-endian count 12 after the ASCII text `hello\\nworld\\n` (12 bytes, 12 UTF-16 units). Legacy, position 12: a line start."},
		{name: "legacy-utf8-2byte", data: legacyFile(utf16Count(twoByte)), legacy: true, pos: 12, reason: "count 12",
			desc: "Legacy file after `héllo\\nwörld\\n` (14 bytes of UTF-8, 12 UTF-16 units, 2-byte characters). Legacy, count 12; as a byte offset it falls inside the second line, so the source resumes after its terminator at 14."},
		{name: "legacy-utf8-4byte", data: legacyFile(utf16Count(fourByte[:7])), legacy: true, pos: 5, reason: "count 5",
			desc: "Legacy file after the first line of `😀 a\\n😀 b\\n` (7 bytes of UTF-8, 5 UTF-16 units: the emoji is a surrogate pair). Legacy, count 5; byte 5 is inside the first line, so the source resumes at 7."},
		{name: "legacy-negative", data: legacyFile(-1), reason: "negative count -1",
			desc: "Legacy file holding count -1. Not found; the reason says `negative count`."},
	}
	for n := range minFileSize {
		reason := fmt.Sprintf("%d bytes long, shorter than 8", n)
		desc := fmt.Sprintf("The first %d bytes of `current`. Shorter than 8 bytes: not found, with a warning.", n)
		if n == 0 {
			reason = "is empty"
			desc = "An empty file: what a source leaves that took the pointer's lock (creating the file) and stopped before its first write. Not found, Empty; the source starts as without a pointer file, with a note, not a warning."
		}
		fx = append(fx, pointerFixture{name: fmt.Sprintf("short-%d", n), data: current[:n], reason: reason, desc: desc})
	}
	return fx
}

// TestPointerFixtures checks that the committed fixtures and fuzz seeds are
// what pointerFixtures generates, and that each loads as described.
func TestPointerFixtures(t *testing.T) {
	fx := pointerFixtures()
	if updateFixtures() {
		writeFixtures(t, fx)
	}
	readme, err := os.ReadFile(filepath.Join(pointerFixtureDir, "README.md"))
	if err != nil {
		t.Fatalf("%v (regenerate with -update)", err)
	}
	if string(readme) != fixtureReadme(fx) {
		t.Errorf("%s/README.md is stale (regenerate with -update)", pointerFixtureDir)
	}
	for _, f := range fx {
		t.Run(f.name, func(t *testing.T) {
			path := filepath.Join(pointerFixtureDir, f.name+".bin")
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (regenerate with -update)", err)
			}
			if !bytes.Equal(data, f.data) {
				t.Fatalf("%s differs from what the fixture table generates (regenerate with -update)", path)
			}
			seed, err := os.ReadFile(filepath.Join(pointerFuzzDir, f.name))
			if err != nil || string(seed) != fuzzSeed(f.data) {
				t.Fatalf("fuzz seed %s is missing or stale (regenerate with -update): %v", f.name, err)
			}
			// Load reads a copy, so that it cannot remove or change anything.
			cp := filepath.Join(t.TempDir(), "in"+Suffix)
			writeFile(t, cp, data)
			res, err := Open(cp, Options{Logger: quiet}).Load()
			if err != nil {
				t.Fatal(err)
			}
			if res.Found != f.found || res.Legacy != f.legacy || ((f.found || f.legacy) && res.Record.Position != f.pos) {
				t.Fatalf("Load = %+v; want found=%v legacy=%v position %d", res, f.found, f.legacy, f.pos)
			}
			if !strings.Contains(res.Reason, f.reason) {
				t.Fatalf("reason %q does not say %q", res.Reason, f.reason)
			}
		})
	}
}

func fuzzSeed(data []byte) string { return fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", data) }

func fixtureReadme(fx []pointerFixture) string {
	var b strings.Builder
	b.WriteString(`# Pointer file fixtures

Pointer files (` + "`<input>" + Suffix + "`" + `) of every kind the feed package must read:
the current format, torn, corrupt, NUL-filled, too short, and legacy files
written by the product tidemark replaces. The format is documented on
` + "`pointer.File`" + ` (feed/pointer/pointer.go). Each file is checked by
` + "`TestPointerFixtures`" + ` in feed/pointer/fixture_test.go, which also keeps
the same bytes as the seed corpus of ` + "`FuzzDecode`" + `
(feed/pointer/testdata/fuzz/FuzzDecode). Do not edit these files by hand;
regenerate them with

    go test ./feed/pointer -run TestPointerFixtures -update

All current-format fixtures describe an input starting with ` + "`hello\\nworld\\n`" + `:
epoch 1764400000000000000, device 2049, inode 131074, fingerprint over the
text so far, tail hash over the (up to 64) bytes before the position.

| file | what it is, and what Load makes of it |
|---|---|
`)
	for _, f := range fx {
		fmt.Fprintf(&b, "| `%s.bin` (%d bytes) | %s |\n", f.name, len(f.data), f.desc)
	}
	return b.String()
}

func writeFixtures(t *testing.T, fx []pointerFixture) {
	t.Helper()
	for _, dir := range []string{pointerFixtureDir, pointerFuzzDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range fx {
		if err := os.WriteFile(filepath.Join(pointerFixtureDir, f.name+".bin"), f.data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pointerFuzzDir, f.name), []byte(fuzzSeed(f.data)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(pointerFixtureDir, "README.md"), []byte(fixtureReadme(fx)), 0o644); err != nil {
		t.Fatal(err)
	}
}
