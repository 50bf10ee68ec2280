package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"github.com/stretchr/testify/require"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/tidemark-go/tidemark/feed"
	"github.com/tidemark-go/tidemark/feed/pointer"
)

func TestMain(m *testing.M) {
	if v := os.Getenv(holderEnv); v != "" {
		holdPointer(v)
	}
	if v := os.Getenv(feedEnv); v != "" {
		runFeed(v)
	}
	goleak.VerifyTestMain(m)
}

// result is what one run of the command printed and returned.
type result struct {
	code           int
	stdout, stderr string
}

// tm runs the command in-process.
func tm(args ...string) result {
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return result{code, out.String(), errb.String()}
}

func (r result) String() string {
	return "exit " + string(rune('0'+r.code)) + "\nstdout:\n" + r.stdout + "\nstderr:\n" + r.stderr
}

// expect fails the test unless r exited with code.
func expect(t *testing.T, r result, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("want exit %d, got\n%s", code, r)
	}
}

// pair copies a pointer fixture of testdata/pointer and an input of
// testdata/cli into a temporary directory as in.log.readPointer and in.log,
// and returns the pointer's path. An empty name leaves that file out.
func pair(t *testing.T, pointerFixture, inputFixture string) string {
	t.Helper()
	dir := t.TempDir()
	ptr := filepath.Join(dir, "in.log"+pointer.Suffix)
	if pointerFixture != "" {
		copyFile(t, filepath.Join("..", "..", "testdata", "pointer", pointerFixture), ptr)
	}
	if inputFixture != "" {
		copyFile(t, filepath.Join("..", "..", "testdata", "cli", inputFixture), filepath.Join(dir, "in.log"))
	}
	return ptr
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(to, b, 0o644))
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

// legacyPointer writes a legacy 1024-byte pointer holding count.
func legacyPointer(t *testing.T, path string, count int64) {
	t.Helper()
	b := make([]byte, pointer.LegacySize)
	binary.BigEndian.PutUint64(b, uint64(count))
	require.NoError(t, os.WriteFile(path, b, 0o644))
}

// resume opens the input of the pointer with a COMMITTED file source, as a
// feed does at start, and returns the first line it delivers (and its
// epoch and position), or the zero Item when it delivers none.
func resume(t *testing.T, ptr string) (feed.Item, string) {
	t.Helper()
	src, err := feed.NewFileSource(feed.Config{Path: strings.TrimSuffix(ptr, pointer.Suffix)})
	require.NoError(t, err)
	defer func() { require.NoError(t, src.Close()) }()
	items := make([]feed.Item, 16)
	n, err := src.Poll(context.Background(), items)
	require.NoError(t, err)
	if n == 0 {
		return feed.Item{}, ""
	}
	return items[0], string(items[0].Line)
}

// commitFirst opens the input of the pointer with a COMMITTED file source
// and commits its first line.
func commitFirst(t *testing.T, ptr string) {
	t.Helper()
	src, err := feed.NewFileSource(feed.Config{Path: strings.TrimSuffix(ptr, pointer.Suffix)})
	require.NoError(t, err)
	defer func() { require.NoError(t, src.Close()) }()
	items := make([]feed.Item, 1)
	n, err := src.Poll(context.Background(), items)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.NoError(t, src.Commit(items[0].Epoch, items[0].Position))
}

func TestUsageAndHelp(t *testing.T) {
	r := tm()
	expect(t, r, exitUsage)
	require.Contains(t, r.stderr, "tidemark pointer show")

	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		r = tm(args...)
		expect(t, r, exitOK)
		require.Contains(t, r.stdout, "Usage:")
		require.Contains(t, r.stdout, "Exit status")
	}
	for cmd, want := range map[string]string{
		"pointer": "Why a new epoch",
		"status":  "GET /status",
		"release": "POST /feeds/FEED/release",
		"store":   "POST /stores/NAME/backup",
	} {
		r = tm("help", cmd)
		expect(t, r, exitOK)
		require.Contains(t, r.stdout, want)
	}
	expect(t, tm("help", "nope"), exitUsage)

	for _, args := range [][]string{
		{"nope"},
		{"pointer"},
		{"pointer", "frob", "x.readPointer"},
		{"pointer", "show"},
		{"pointer", "show", "a.readPointer", "b.readPointer"},
		{"pointer", "show", "not-a-pointer.txt"},
		{"pointer", "set", "in.log.readPointer"},
		{"pointer", "set", "in.log.readPointer", "--position", "x"},
		{"pointer", "show", "in.log.readPointer", "--nope"},
		{"status"},
		{"status", "extra", "--addr", "127.0.0.1:1"},
		{"release", "--addr", "127.0.0.1:1", "--feed", "f"},
		{"store"},
		{"store", "show"},
	} {
		r = tm(args...)
		expect(t, r, exitUsage)
		require.Contains(t, r.stderr, "Usage:", "%q", args)
	}
	r = tm("pointer", "show", "not-a-pointer.txt")
	require.Contains(t, r.stderr, "must end with .readPointer")
	r = tm("pointer", "set", "in.log.readPointer", "--help")
	expect(t, r, exitUsage)
	require.NotContains(t, r.stderr, "tidemark: help requested")
}

// Flags may come after the positional argument, and before it.
func TestFlagsAnywhere(t *testing.T) {
	ptr := pair(t, "current.bin", "hello.txt")
	expect(t, tm("pointer", "set", ptr, "--position", "6"), exitOK)
	expect(t, tm("pointer", "set", "--position", "12", ptr), exitOK)
	expect(t, tm("pointer", "set", "--position", "18", "--", ptr), exitOK)
	it, _ := resume(t, ptr)
	require.EqualValues(t, 0, it.Position, "nothing after 18")
}

func TestPointerShowCurrent(t *testing.T) {
	ptr := pair(t, "current.bin", "hello.txt")
	// A leftover temporary file: show must not remove it, nor change the
	// pointer (it loads a copy).
	tmp := ptr + pointer.TempSuffix
	require.NoError(t, os.WriteFile(tmp, []byte("leftover"), 0o644))
	before := readFile(t, ptr)

	r := tm("pointer", "show", ptr)
	expect(t, r, exitOK)
	for _, want := range []string{
		"(8192 bytes)",
		"version 1",
		"epoch         1764400000000000000 (2025-11-29T07:06:40Z)",
		"position      12",
		"device 2049, inode 131074",
		"first 12 bytes",
		"12 bytes before the position",
		"slot A: write 1, epoch 1764400000000000000, position 6\n",
		"slot B: write 2, epoch 1764400000000000000, position 12 (used)",
		"size          ok: 18 bytes, not shorter than the position 12",
		"fingerprint   ok: the first 12 bytes match",
		"tail          ok",
		"line start    ok",
		"identity      DIFFERS: the pointer names device 2049, inode 131074",
		"verdict       matches by content: the feed resumes at 12 in epoch 1764400000000000000, with a warning",
	} {
		require.Contains(t, r.stdout, want)
	}
	require.Equal(t, before, readFile(t, ptr), "show changed the pointer file")
	_, err := os.Stat(tmp)
	require.NoError(t, err, "show removed the temporary file")

	// The verdict is the file source's: it resumes at 12 in the same epoch.
	require.NoError(t, os.Remove(tmp))
	it, line := resume(t, ptr)
	require.Equal(t, "third", line)
	require.EqualValues(t, uint64(1764400000000000000), it.Epoch)
}

func TestPointerShowTornAndNew(t *testing.T) {
	r := tm("pointer", "show", pair(t, "torn.bin", "hello.txt"))
	expect(t, r, exitOK)
	require.Contains(t, r.stdout, "slot A: invalid: feed: corrupt pointer record")
	require.Contains(t, r.stdout, "position 12 (used)")
	require.Contains(t, r.stdout, "matches by content: the feed resumes at 12")

	r = tm("pointer", "show", pair(t, "current-new.bin", "hello.txt"))
	expect(t, r, exitOK)
	require.Contains(t, r.stdout, "slot B: empty")
	require.Contains(t, r.stdout, "position 6 (used)")
	require.Contains(t, r.stdout, "the feed resumes at 6")
}

func TestPointerShowMismatch(t *testing.T) {
	ptr := pair(t, "current.bin", "")
	input := strings.TrimSuffix(ptr, pointer.Suffix)

	require.NoError(t, os.WriteFile(input, []byte("HELLO\nworld\nthird\n"), 0o644))
	r := tm("pointer", "show", ptr)
	expect(t, r, exitOK)
	require.Contains(t, r.stdout, "fingerprint   MISMATCH: the first 12 bytes differ")
	require.Contains(t, r.stdout, "verdict       does not match (the first bytes of the input differ: replaced or rewritten): the feed reads the input from 0 under a new epoch")
	it, line := resume(t, ptr)
	require.Equal(t, "HELLO", line, "the source agrees: it starts over")
	require.True(t, it.Epoch != 1764400000000000000)

	copyFile(t, filepath.Join("..", "..", "testdata", "pointer", "current.bin"), ptr)
	require.NoError(t, os.WriteFile(input, []byte("hello\n"), 0o644))
	r = tm("pointer", "show", ptr)
	expect(t, r, exitOK)
	require.Contains(t, r.stdout, "size          MISMATCH: 6 bytes, shorter than the position 12")
	require.Contains(t, r.stdout, "truncated): the feed reads the input from 0 under a new epoch")

	copyFile(t, filepath.Join("..", "..", "testdata", "pointer", "current.bin"), ptr)
	require.NoError(t, os.WriteFile(input, []byte("hello\nWORLD\nthird\n"), 0o644))
	r = tm("pointer", "show", ptr)
	expect(t, r, exitOK)
	require.Contains(t, r.stdout, "fingerprint   MISMATCH")

	require.NoError(t, os.Remove(input))
	r = tm("pointer", "show", ptr)
	expect(t, r, exitOK)
	require.Contains(t, r.stdout, "does not exist")
	require.Contains(t, r.stdout, "the feed waits for the input")
}

func TestPointerShowNoRecord(t *testing.T) {
	for fixture, want := range map[string]string{
		"bad-checksum.bin":    "checksum",
		"nul-8192.bin":        "no valid record",
		"unknown-version.bin": "unknown version 2",
		"short-3.bin":         "shorter than",
		"legacy-negative.bin": "negative count",
		"torn-new-file.bin":   "no valid record",
	} {
		r := tm("pointer", "show", pair(t, fixture, "hello.txt"))
		expect(t, r, exitOK)
		require.Contains(t, r.stdout, want, fixture)
		require.Contains(t, r.stdout, "the feed reads the input from 0 under a new epoch", fixture)
	}
	r := tm("pointer", "show", pair(t, "", "hello.txt"))
	expect(t, r, exitOK)
	require.Contains(t, r.stdout, "none: the file does not exist")
}

func TestPointerShowLegacy(t *testing.T) {
	r := tm("pointer", "show", pair(t, "legacy-ascii.bin", "hello.txt"))
	expect(t, r, exitOK)
	require.Contains(t, r.stdout, "legacy (1024 bytes")
	require.Contains(t, r.stdout, "count         12")
	require.Contains(t, r.stdout, "the feed migrates it: resumes at 12 under a new epoch")
	require.NotContains(t, r.stdout, "non-ASCII")

	r = tm("pointer", "show", pair(t, "nul-1024.bin", "hello.txt"))
	expect(t, r, exitOK)
	require.Contains(t, r.stdout, "count         0")

	r = tm("pointer", "show", pair(t, "legacy-utf8-2byte.bin", "utf8-2byte.txt"))
	expect(t, r, exitOK)
	require.Contains(t, r.stdout, "12 is inside a line; it resumes at the next line start 14")
	require.Contains(t, r.stdout, "which end at byte 14, not 12")

	r = tm("pointer", "show", pair(t, "legacy-utf8-4byte.bin", "utf8-4byte.txt"))
	expect(t, r, exitOK)
	require.Contains(t, r.stdout, "5 is inside a line; it resumes at the next line start 7")
	require.Contains(t, r.stdout, "which end at byte 7, not 5")

	ptr := pair(t, "legacy-ascii.bin", "")
	require.NoError(t, os.WriteFile(strings.TrimSuffix(ptr, pointer.Suffix), []byte("short\n"), 0o644))
	r = tm("pointer", "show", ptr)
	expect(t, r, exitOK)
	require.Contains(t, r.stdout, "shorter than the count 12")
}

func TestPointerSet(t *testing.T) {
	ptr := pair(t, "current.bin", "hello.txt")
	before := readFile(t, ptr)

	// Inside a line: refused, with the line starts around it.
	r := tm("pointer", "set", ptr, "--position", "8")
	expect(t, r, exitFail)
	require.Contains(t, r.stderr, "position 8 is inside a line")
	require.Contains(t, r.stderr, "The line starts at 6 and the next one at 12")
	require.Equal(t, before, readFile(t, ptr), "a refused set changed the pointer")

	// Past the end: refused, even forced.
	r = tm("pointer", "set", ptr, "--position", "19", "--force")
	expect(t, r, exitFail)
	require.Contains(t, r.stderr, "past the end of the input")
	require.Equal(t, before, readFile(t, ptr))

	// Backwards, to a line start: a new epoch, and the feed resumes there.
	r = tm("pointer", "set", ptr, "--position", "6")
	expect(t, r, exitOK)
	require.Contains(t, r.stdout, "position 6 under the new epoch")
	require.Contains(t, r.stdout, "was epoch 1764400000000000000, position 12")
	res, _, err := loadPointer(ptr)
	require.NoError(t, err)
	require.True(t, res.Found)
	require.EqualValues(t, 6, res.Record.Position)
	require.True(t, res.Record.Epoch > 1764400000000000000, "the epoch is new")
	it, line := resume(t, ptr)
	require.Equal(t, "world", line)
	require.Equal(t, res.Record.Epoch, it.Epoch)
	require.EqualValues(t, 12, it.Position)
	r = tm("pointer", "show", ptr)
	require.Contains(t, r.stdout, "verdict       matches: the feed resumes at 6")
	require.Contains(t, r.stdout, "identity      ok")
	// The identity and fingerprint written are the file source's own: a
	// commit by the source records the same.
	set := res.Record
	commitFirst(t, ptr)
	res, _, err = loadPointer(ptr)
	require.NoError(t, err)
	require.EqualValues(t, 12, res.Record.Position)
	require.Equal(t, set.Epoch, res.Record.Epoch)
	require.Equal(t, set.Identity, res.Record.Identity)
	require.Equal(t, set.Fingerprint, res.Record.Fingerprint)
	require.Equal(t, set.TailLen+6, res.Record.TailLen)

	// The end of the input and 0 are line starts.
	prev := res.Record.Epoch
	expect(t, tm("pointer", "set", ptr, "--position", "18"), exitOK)
	res, _, err = loadPointer(ptr)
	require.NoError(t, err)
	require.EqualValues(t, 18, res.Record.Position)
	require.True(t, res.Record.Epoch > prev, "every set starts a new epoch")
	it, _ = resume(t, ptr)
	require.EqualValues(t, 0, it.Position, "nothing to deliver after the end")
	expect(t, tm("pointer", "set", ptr, "--position", "0"), exitOK)
	_, line = resume(t, ptr)
	require.Equal(t, "hello", line)

	// Forced inside a line: the feed delivers the rest of the line.
	r = tm("pointer", "set", ptr, "--position", "8", "--force")
	expect(t, r, exitOK)
	_, line = resume(t, ptr)
	require.Equal(t, "rld", line)
	r = tm("pointer", "show", ptr)
	require.Contains(t, r.stdout, "line start    NO")
}

func TestPointerSetOverLegacyAndCorrupt(t *testing.T) {
	for _, fixture := range []string{"legacy-ascii.bin", "bad-checksum.bin", "short-2.bin", ""} {
		ptr := pair(t, fixture, "hello.txt")
		r := tm("pointer", "set", ptr, "--position", "12")
		expect(t, r, exitOK)
		_, line := resume(t, ptr)
		require.Equal(t, "third", line, fixture)
	}
	ptr := pair(t, "current.bin", "")
	r := tm("pointer", "set", ptr, "--position", "0")
	expect(t, r, exitFail)
	require.Contains(t, r.stderr, "must exist")
}

func TestPointerMigrate(t *testing.T) {
	// ASCII: the count is the byte offset, a line start.
	ptr := pair(t, "legacy-ascii.bin", "hello.txt")
	r := tm("pointer", "migrate", ptr)
	expect(t, r, exitOK)
	require.Contains(t, r.stdout, "migrated legacy pointer")
	require.Contains(t, r.stdout, "count 12 taken as byte offset 12; a line start; position 12 under the new epoch")
	require.NotContains(t, r.stdout, "note:")
	res, _, err := loadPointer(ptr)
	require.NoError(t, err)
	require.True(t, res.Found)
	require.EqualValues(t, 12, res.Record.Position)
	require.True(t, res.Record.Epoch != 0)
	it, line := resume(t, ptr)
	require.Equal(t, "third", line)
	require.Equal(t, res.Record.Epoch, it.Epoch)

	// Again: refused, it is not legacy any more.
	r = tm("pointer", "migrate", ptr)
	expect(t, r, exitFail)
	require.Contains(t, r.stderr, "not a legacy pointer: it is already in the current format")
	require.Contains(t, r.stderr, "pointer set")

	// Inside a line: moved to the next line start, as the feed would.
	ptr = pair(t, "legacy-utf8-4byte.bin", "utf8-4byte.txt")
	r = tm("pointer", "migrate", ptr)
	expect(t, r, exitOK)
	require.Contains(t, r.stdout, "count 5 taken as byte offset 5; inside a line: moved to the next line start 7; position 7")
	require.Contains(t, r.stdout, "note: the input has non-ASCII text")
	_, line = resume(t, ptr)
	require.Equal(t, "😀 b", line)
}

// After non-ASCII text the count as bytes is short; --utf16 resumes where
// the legacy product stopped.
func TestPointerMigrateUTF16(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "in.log")
	ptr := input + pointer.Suffix
	// "ééé\n" is 4 UTF-16 units in 7 bytes; "ab\n" 3 units. The legacy
	// product read both lines: count 7. As a byte offset 7 is the start of
	// "ab", which would be delivered again.
	require.NoError(t, os.WriteFile(input, []byte("ééé\nab\ncd\n"), 0o644))
	legacyPointer(t, ptr, 7)

	r := tm("pointer", "show", ptr)
	require.Contains(t, r.stdout, "which end at byte 10, not 7")

	r = tm("pointer", "migrate", ptr, "--dry-run")
	expect(t, r, exitOK)
	require.Contains(t, r.stdout, "would migrate legacy pointer")
	require.Contains(t, r.stdout, "position 7 under")
	require.Contains(t, r.stdout, "note: the input has non-ASCII text before the count; the legacy count is in UTF-16 code units, which end at byte 10, not 7")
	res, _, err := loadPointer(ptr)
	require.NoError(t, err)
	require.True(t, res.Legacy, "a dry run wrote nothing")

	r = tm("pointer", "migrate", "--utf16", ptr)
	expect(t, r, exitOK)
	require.Contains(t, r.stdout, "count 7 UTF-16 code units ends at byte offset 10; a line start; position 10")
	_, line := resume(t, ptr)
	require.Equal(t, "cd", line)

	// A count inside a surrogate pair ends inside a character, hence a line.
	require.NoError(t, os.WriteFile(input, []byte("😀x\nnext\n"), 0o644))
	legacyPointer(t, ptr, 1)
	r = tm("pointer", "migrate", "--utf16", ptr)
	expect(t, r, exitOK)
	require.Contains(t, r.stdout, "inside a character; inside a line: moved to the next line start 6")

	// More units than the input holds: refused.
	legacyPointer(t, ptr, 100)
	r = tm("pointer", "migrate", "--utf16", ptr)
	expect(t, r, exitFail)
	require.Contains(t, r.stderr, "fewer than 100 UTF-16 code units")
}

func TestPointerMigrateRefusals(t *testing.T) {
	r := tm("pointer", "migrate", pair(t, "", "hello.txt"))
	expect(t, r, exitFail)
	require.Contains(t, r.stderr, "no such pointer file")

	r = tm("pointer", "migrate", pair(t, "bad-checksum.bin", "hello.txt"))
	expect(t, r, exitFail)
	require.Contains(t, r.stderr, "not a legacy pointer")
	require.Contains(t, r.stderr, "checksum")

	ptr := pair(t, "legacy-ascii.bin", "")
	r = tm("pointer", "migrate", ptr)
	expect(t, r, exitFail)
	require.Contains(t, r.stderr, "must exist")

	// Past the end of the input.
	input := strings.TrimSuffix(ptr, pointer.Suffix)
	require.NoError(t, os.WriteFile(input, []byte("hello\n"), 0o644))
	before := readFile(t, ptr)
	r = tm("pointer", "migrate", ptr)
	expect(t, r, exitFail)
	require.Contains(t, r.stderr, "past the end of the input")
	require.Equal(t, before, readFile(t, ptr))

	// Inside the last line, which has no newline yet.
	require.NoError(t, os.WriteFile(input, []byte("hello\nworld and more"), 0o644))
	r = tm("pointer", "migrate", ptr)
	expect(t, r, exitFail)
	require.Contains(t, r.stderr, "no newline yet")
	require.Equal(t, before, readFile(t, ptr))
}
