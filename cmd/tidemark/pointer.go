package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/feed"
	"github.com/tidemark-go/tidemark/feed/pointer"
	"github.com/tidemark-go/tidemark/vfs"
)

const pointerHelp = `Usage:
  tidemark pointer show FILE.readPointer [--input PATH]
  tidemark pointer set FILE.readPointer --position N [--force] [--input PATH]
  tidemark pointer migrate FILE.readPointer [--utf16] [--dry-run] [--input PATH]

A pointer file <input>.readPointer holds how far a COMMITTED feed has
committed its input: an epoch (the name of the position space), a byte
position, and what identifies the input (device and inode, a hash of its
first bytes, a hash of the bytes just before the position).

show     prints the pointer (version, epoch, position, file identity,
         fingerprint length, both slots) and checks it against the input
         next to it (the path without ".readPointer"): its size, the hash of
         its first bytes, the hash of the bytes before the position, its
         identity. It says where the feed will resume. It changes nothing.

set      writes position N under a new epoch. N must be a line start (0, or
         just after a newline) unless --force, and not past the end of the
         input. Stop the feed first: set refuses a pointer file that a
         running feed holds (its lock), and says which process holds it.
         Why a new epoch: a position set by hand did not come from the lines
         the feed committed, so it starts a new position space. A store then
         sees the lines after N as a new epoch, never as lines it applied
         (unless it recognises the same file by its lineage), and the
         pointer file, which only moves forward within an epoch, accepts a
         position behind the old one.

migrate  converts a legacy 1024-byte pointer (written by the product tidemark
         replaces) to the current format, as the feed would on its first
         start: the stored count is taken as a byte offset, moved to the next
         line start if it falls inside a line, and written under a new epoch.
         The legacy count is in UTF-16 code units: after non-ASCII text it
         falls short of what was processed, and the lines in between would
         be delivered again. --utf16 converts the count to the byte offset of
         that many UTF-16 units of the input instead. --dry-run prints what
         it would do and writes nothing. Like set, it refuses a pointer file
         that a running feed holds.

--input PATH names the input when the pointer file is not beside it (a
feed with a pointer folder of its own, pointerDir); by default the input
is the pointer's path without ".readPointer".

set and migrate lock the pointer file while they write it, as a feed does:
a feed that starts meanwhile fails, saying the pointer is held.
`

func runPointer(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return usageErrorf("pointer", "pointer needs a subcommand: show, set or migrate")
	}
	switch args[0] {
	case "show":
		return pointerShow(args[1:], stdout)
	case "set":
		return pointerSet(args[1:], stdout)
	case "migrate":
		return pointerMigrate(args[1:], stdout)
	case "-h", "-help", "--help", "help":
		return &usageError{cmd: "pointer"}
	}
	return usageErrorf("pointer", "unknown pointer subcommand %q", args[0])
}

// pointerArg parses the one positional argument FILE.readPointer and returns
// it and its input's path: input when given (--input), else the pointer's
// path without its suffix.
func pointerArg(pos []string, input string) (string, string, error) {
	if len(pos) != 1 {
		return "", "", usageErrorf("pointer", "want one pointer file, got %d arguments", len(pos))
	}
	p := pos[0]
	beside, ok := strings.CutSuffix(p, pointer.Suffix)
	if !ok || filepath.Base(beside) == "" {
		return "", "", usageErrorf("pointer", "%s is not a pointer file name: it must end with %s (the input's name plus %s)", p, pointer.Suffix, pointer.Suffix)
	}
	if input == "" {
		return p, beside, nil
	}
	if filepath.Base(input)+pointer.Suffix != filepath.Base(p) {
		return "", "", usageErrorf("pointer", "%s is not the pointer file of input %s: a feed names it %s", p, input, filepath.Base(input)+pointer.Suffix)
	}
	return p, input, nil
}

// lockPointer takes the pointer file's lock, as a feed does, so that no
// feed runs on it while the tool writes it. A pointer that a feed holds is
// refused, naming the holder; the caller closes the returned file, which
// releases the lock.
func lockPointer(path, verb string) (*pointer.File, error) {
	pf := pointer.Open(path, pointer.Options{Sync: feed.SyncEveryCommit, Logger: discardLogger()})
	err := pf.Lock()
	if err == nil {
		return pf, nil
	}
	pf.Close()
	if errors.Is(err, feed.ErrPointerLocked) {
		holder := "another process"
		var le *vfs.LockedError
		if errors.As(err, &le) {
			holder = le.Holder()
		}
		return nil, fmt.Errorf("%s %s: a feed is running on it (the pointer file is held by %s): stop the feed first, then run this again; a running feed would overwrite the pointer at its next commit", verb, path, holder)
	}
	return nil, fmt.Errorf("%s %s: %w", verb, path, err)
}

// loadPointer loads the pointer file at path without changing anything: it
// loads a copy, since pointer.File.Load removes a leftover temporary file.
func loadPointer(path string) (pointer.LoadResult, []byte, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return pointer.LoadResult{Missing: true, Reason: fmt.Sprintf("pointer file %s does not exist", path)}, nil, nil
	}
	if err != nil {
		return pointer.LoadResult{}, nil, fmt.Errorf("read pointer file %s: %w", path, err)
	}
	dir, err := os.MkdirTemp("", "tidemark-pointer-")
	if err != nil {
		return pointer.LoadResult{}, nil, fmt.Errorf("make a temporary copy of pointer file %s: %w", path, err)
	}
	defer os.RemoveAll(dir)
	cp := filepath.Join(dir, "copy"+pointer.Suffix)
	if err := os.WriteFile(cp, data, 0o600); err != nil {
		return pointer.LoadResult{}, nil, fmt.Errorf("make a temporary copy of pointer file %s: %w", path, err)
	}
	pf := pointer.Open(cp, pointer.Options{Logger: discardLogger()})
	defer pf.Close()
	res, err := pf.Load()
	if err != nil {
		return pointer.LoadResult{}, nil, fmt.Errorf("load pointer file %s: %w", path, err)
	}
	res.Reason = strings.ReplaceAll(res.Reason, cp, path)
	return res, data, nil
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// inputFile is what the tool knows of an input file.
type inputFile struct {
	path  string
	f     *os.File
	size  int64
	id    tidemark.Identity
	hasID bool
	head  []byte // the first min(size, MaxFingerprintLen) bytes
}

// openInput opens the input and reads its head.
func openInput(path string) (*inputFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat input %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("input %s is not a regular file", path)
	}
	in := &inputFile{path: path, f: f, size: fi.Size()}
	in.id, in.hasID = fileIdentity(fi)
	in.head = make([]byte, min(in.size, pointer.MaxFingerprintLen))
	if _, err := f.ReadAt(in.head, 0); err != nil && !errors.Is(err, io.EOF) {
		f.Close()
		return nil, fmt.Errorf("read the first bytes of input %s: %w", path, err)
	}
	return in, nil
}

func (in *inputFile) Close() error { return in.f.Close() }

// hashBefore returns the hash of the n bytes before pos.
func (in *inputFile) hashBefore(pos int64, n int) (uint64, error) {
	b := make([]byte, n)
	if _, err := in.f.ReadAt(b, pos-int64(n)); err != nil {
		return 0, fmt.Errorf("read input %s before position %d: %w", in.path, pos, err)
	}
	return pointer.HashBytes(b), nil
}

// lineStart reports whether pos is a line start: 0, or just after '\n'.
func (in *inputFile) lineStart(pos int64) (bool, error) {
	if pos == 0 {
		return true, nil
	}
	var b [1]byte
	if _, err := in.f.ReadAt(b[:], pos-1); err != nil {
		return false, fmt.Errorf("read input %s at %d: %w", in.path, pos-1, err)
	}
	return b[0] == '\n', nil
}

// nextLineStart returns the first line start at or after pos, and false
// when the input has no newline at or after pos (its last line is
// incomplete).
func (in *inputFile) nextLineStart(pos int64) (int64, bool, error) {
	if ok, err := in.lineStart(pos); err != nil || ok {
		return pos, ok, err
	}
	buf := make([]byte, 64<<10)
	for off := pos; off < in.size; {
		n, err := in.f.ReadAt(buf, off)
		if i := bytes.IndexByte(buf[:n], '\n'); i >= 0 {
			return off + int64(i) + 1, true, nil
		}
		off += int64(n)
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return 0, false, fmt.Errorf("read input %s at %d: %w", in.path, off, err)
		}
	}
	return 0, false, nil
}

// prevLineStart returns the start of the line that holds pos.
func (in *inputFile) prevLineStart(pos int64) (int64, error) {
	for pos > 0 {
		from := max(0, pos-64<<10)
		b := make([]byte, pos-from)
		if _, err := in.f.ReadAt(b, from); err != nil {
			return 0, fmt.Errorf("read input %s at %d: %w", in.path, from, err)
		}
		if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
			return from + int64(i) + 1, nil
		}
		pos = from
	}
	return 0, nil
}

// pointerAt computes the pointer of the input at pos, as the file source
// stores it: the identity, the hash of the first min(size, 4096) bytes, and
// the hash of the min(pos, 64) bytes before pos.
func (in *inputFile) pointerAt(epoch uint64, pos int64) (pointer.Record, error) {
	p := pointer.Record{
		Epoch:       epoch,
		Position:    pos,
		Identity:    in.id,
		Fingerprint: tidemark.Fingerprint{Len: len(in.head), Hash: pointer.HashBytes(in.head)},
	}
	if n := int(min(pointer.MaxTailLen, pos)); n > 0 {
		h, err := in.hashBefore(pos, n)
		if err != nil {
			return pointer.Record{}, err
		}
		p.TailLen, p.TailHash = n, h
	}
	return p, nil
}

// utf16Offset returns the byte offset of the input after count UTF-16 code
// units of its text decoded as UTF-8 (an invalid byte counts as one unit, a
// replacement character), whether count ends inside a character (a
// surrogate pair), and false when the input holds fewer units.
func (in *inputFile) utf16Offset(count int64) (int64, bool, bool, error) {
	br := bufio.NewReaderSize(io.NewSectionReader(in.f, 0, in.size), 64<<10)
	var units, off int64
	for units < count {
		r, size, err := br.ReadRune()
		if errors.Is(err, io.EOF) {
			return 0, false, false, nil
		}
		if err != nil {
			return 0, false, false, fmt.Errorf("read input %s at %d: %w", in.path, off, err)
		}
		units++
		if r >= 0x10000 {
			units++
		}
		off += int64(size)
	}
	return off, units > count, true, nil
}

func epochString(e uint64) string {
	if e == 0 {
		return "0"
	}
	t := time.Unix(0, int64(e)).UTC()
	if e < 1<<63 && t.Year() >= 2000 && t.Year() < 2200 {
		return fmt.Sprintf("%d (%s)", e, t.Format(time.RFC3339Nano))
	}
	return fmt.Sprint(e)
}

// slotInfo describes the two slots of a current-format file, marking the
// one Load uses (the valid one with the higher write sequence).
func slotInfo(data []byte) []string {
	var out []string
	used, best := -1, uint64(0)
	for i := 0; i < 2; i++ {
		off := i * pointer.SlotSize
		name := string(rune('A' + i))
		if off+pointer.RecordSize > len(data) {
			out = append(out, "slot "+name+": absent (the file is too short)")
			continue
		}
		rec := data[off : off+pointer.RecordSize]
		if bytes.Count(rec, []byte{0}) == len(rec) {
			out = append(out, "slot "+name+": empty")
			continue
		}
		p, err := pointer.Decode(rec)
		if err != nil {
			out = append(out, fmt.Sprintf("slot %s: invalid: %v", name, err))
			continue
		}
		seq := binary.LittleEndian.Uint64(rec[8:16]) // the write sequence (see pointer.File)
		if used < 0 || seq > best {
			used, best = i, seq
		}
		out = append(out, fmt.Sprintf("slot %s: write %d, epoch %d, position %d", name, seq, p.Epoch, p.Position))
	}
	if used >= 0 {
		out[used] += " (used)"
	}
	return out
}

func pointerShow(args []string, stdout io.Writer) error {
	fset := flag.NewFlagSet("pointer show", flag.ContinueOnError)
	inputFlag := fset.String("input", "", "the input, when the pointer file is not beside it")
	pos, err := parse("pointer", fset, args)
	if err != nil {
		return err
	}
	path, inputPath, err := pointerArg(pos, *inputFlag)
	if err != nil {
		return err
	}
	res, data, err := loadPointer(path)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	row := func(k, format string, args ...any) { fmt.Fprintf(w, "%s\t%s\n", k, fmt.Sprintf(format, args...)) }
	row("pointer file", "%s (%d bytes)", path, len(data))
	switch {
	case res.Missing:
		row("format", "none: the file does not exist")
	case res.Legacy:
		row("format", "legacy (%d bytes, written by the product tidemark replaces): a count of UTF-16 code units, no epoch", pointer.LegacySize)
		row("count", "%d", res.Record.Position)
	case !res.Found:
		row("format", "no valid record: %s", res.Reason)
		for _, s := range slotInfo(data) {
			row("", "%s", s)
		}
	default:
		p := res.Record
		row("format", "version %d", pointer.Version)
		row("epoch", "%s", epochString(p.Epoch))
		row("position", "%d", p.Position)
		row("identity", "device %d, inode %d", p.Identity.Dev, p.Identity.Ino)
		row("fingerprint", "first %d bytes, hash %016x", p.Fingerprint.Len, p.Fingerprint.Hash)
		row("tail", "%d bytes before the position, hash %016x", p.TailLen, p.TailHash)
		for _, s := range slotInfo(data) {
			row("", "%s", s)
		}
	}
	row("", "")
	in, err := openInput(inputPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		row("input", "%s does not exist", inputPath)
		row("verdict", "the feed waits for the input; then %s", startWithout(res))
		return w.Flush()
	case err != nil:
		row("input", "%v", err)
		return errors.Join(w.Flush(), fmt.Errorf("check pointer %s against its input: %w", path, err))
	}
	defer in.Close()
	if in.hasID {
		row("input", "%s (%d bytes, device %d, inode %d)", inputPath, in.size, in.id.Dev, in.id.Ino)
	} else {
		row("input", "%s (%d bytes)", inputPath, in.size)
	}
	verdict, err := checkAgainst(in, res, row)
	if err != nil {
		return errors.Join(w.Flush(), err)
	}
	row("verdict", "%s", verdict)
	return w.Flush()
}

// startWithout says where a feed starts with a pointer that does not match
// (or before the input exists).
func startWithout(res pointer.LoadResult) string {
	switch {
	case res.Missing:
		return "reads it from 0 under a new epoch (no pointer file)"
	case res.Legacy:
		return "migrates the legacy count when the input is there"
	case !res.Found:
		return "reads it from 0 under a new epoch (no valid record)"
	}
	return "compares it with the pointer"
}

// checkAgainst prints the checks of the pointer against the input and
// returns where the feed will resume, as the file source decides at open.
func checkAgainst(in *inputFile, res pointer.LoadResult, row func(k, format string, args ...any)) (string, error) {
	switch {
	case res.Missing, !res.Found && !res.Legacy:
		return "the feed reads the input from 0 under a new epoch", nil
	case res.Legacy:
		count := res.Record.Position
		if count > in.size {
			row("size", "MISMATCH: the input (%d bytes) is shorter than the count %d", in.size, count)
			return "the feed reads the input from 0 under a new epoch (truncated or replaced since)", nil
		}
		next, ok, err := in.nextLineStart(count)
		if err != nil {
			return "", err
		}
		verdict := fmt.Sprintf("the feed migrates it: resumes at %d under a new epoch", count)
		if next != count {
			if ok {
				verdict = fmt.Sprintf("the feed migrates it: %d is inside a line; it resumes at the next line start %d under a new epoch", count, next)
			} else {
				verdict = fmt.Sprintf("the feed migrates it: %d is inside the last, unterminated line; it resumes after that line's newline under a new epoch", count)
			}
		}
		if hint, err := utf16Hint(in, count); err != nil {
			return "", err
		} else if hint != "" {
			row("note", "%s", hint)
		}
		return verdict + " (tidemark pointer migrate does the same now)", nil
	}
	p := res.Record
	why := ""
	if in.size >= p.Position {
		row("size", "ok: %d bytes, not shorter than the position %d", in.size, p.Position)
	} else {
		row("size", "MISMATCH: %d bytes, shorter than the position %d", in.size, p.Position)
		why = "the input is shorter than the position: truncated"
	}
	switch {
	case in.size < int64(p.Fingerprint.Len):
		row("fingerprint", "MISMATCH: the input is shorter than the %d fingerprinted bytes", p.Fingerprint.Len)
		why = first(why, "the input is shorter than its fingerprinted bytes: truncated")
	case pointer.HashBytes(in.head[:p.Fingerprint.Len]) != p.Fingerprint.Hash:
		row("fingerprint", "MISMATCH: the first %d bytes differ", p.Fingerprint.Len)
		why = first(why, "the first bytes of the input differ: replaced or rewritten")
	default:
		row("fingerprint", "ok: the first %d bytes match", p.Fingerprint.Len)
	}
	switch {
	case p.TailLen == 0:
		row("tail", "none stored")
	case in.size < p.Position:
		row("tail", "not checked: the input is shorter than the position")
	default:
		h, err := in.hashBefore(p.Position, p.TailLen)
		if err != nil {
			return "", err
		}
		if h == p.TailHash {
			row("tail", "ok: the %d bytes before the position match", p.TailLen)
		} else {
			row("tail", "MISMATCH: the %d bytes before the position differ", p.TailLen)
			why = first(why, "the bytes before the position differ: replaced or rewritten")
		}
	}
	if in.size >= p.Position {
		ok, err := in.lineStart(p.Position)
		if err != nil {
			return "", err
		}
		if ok {
			row("line start", "ok: the position is a line start")
		} else {
			row("line start", "NO: the position is inside a line (set by hand with --force?)")
		}
	}
	idSame := true
	switch {
	case !in.hasID:
		row("identity", "not checked: this platform has no file identity")
	case p.Identity == (tidemark.Identity{}):
		row("identity", "not checked: none stored")
	case p.Identity == in.id:
		row("identity", "ok: same device and inode")
	default:
		idSame = false
		row("identity", "DIFFERS: the pointer names device %d, inode %d", p.Identity.Dev, p.Identity.Ino)
	}
	if why != "" {
		return fmt.Sprintf("does not match (%s): the feed reads the input from 0 under a new epoch", why), nil
	}
	if !idSame {
		return fmt.Sprintf("matches by content: the feed resumes at %d in epoch %d, with a warning that the input is another file with the same bytes", p.Position, p.Epoch), nil
	}
	return fmt.Sprintf("matches: the feed resumes at %d in epoch %d", p.Position, p.Epoch), nil
}

func first(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// utf16Hint explains, when the input has non-ASCII text before the legacy
// count, where the count lands once read as UTF-16 code units.
func utf16Hint(in *inputFile, count int64) (string, error) {
	end := min(count, in.size)
	b := make([]byte, end)
	if _, err := in.f.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("read input %s: %w", in.path, err)
	}
	ascii := true
	for _, c := range b {
		if c >= 0x80 {
			ascii = false
			break
		}
	}
	if ascii {
		return "", nil
	}
	off, _, ok, err := in.utf16Offset(count)
	if err != nil {
		return "", err
	}
	if !ok {
		return fmt.Sprintf("the input has non-ASCII text before the count; read as UTF-16 code units (what the legacy product stored) the count %d is past the end of the input", count), nil
	}
	return fmt.Sprintf("the input has non-ASCII text before the count; the legacy count is in UTF-16 code units, which end at byte %d, not %d: taken as a byte offset, the lines in between are delivered again under the new epoch (migrate --utf16 resumes at byte %d instead)", off, count, off), nil
}

func pointerSet(args []string, stdout io.Writer) error {
	fset := flag.NewFlagSet("pointer set", flag.ContinueOnError)
	position := fset.Int64("position", -1, "the byte position to set: a line start")
	force := fset.Bool("force", false, "accept a position inside a line")
	inputFlag := fset.String("input", "", "the input, when the pointer file is not beside it")
	pos, err := parse("pointer", fset, args)
	if err != nil {
		return err
	}
	path, inputPath, err := pointerArg(pos, *inputFlag)
	if err != nil {
		return err
	}
	if *position < 0 {
		return usageErrorf("pointer", "pointer set needs --position N, a byte offset >= 0")
	}
	target := *position
	pf, err := lockPointer(path, "set pointer")
	if err != nil {
		return err
	}
	defer pf.Close()
	in, err := openInput(inputPath)
	if err != nil {
		return fmt.Errorf("set pointer %s: open its input: %w; the position is checked against the input, which must exist", path, err)
	}
	defer in.Close()
	if target > in.size {
		return fmt.Errorf("set pointer %s: position %d is past the end of the input %s (%d bytes); choose a position at most %d", path, target, inputPath, in.size, in.size)
	}
	if ok, err := in.lineStart(target); err != nil {
		return err
	} else if !ok && !*force {
		prev, err := in.prevLineStart(target)
		if err != nil {
			return err
		}
		msg := fmt.Sprintf("set pointer %s: position %d is inside a line of %s (the byte before it is not a newline): the feed would deliver the rest of that line as a line. The line starts at %d", path, target, inputPath, prev)
		if next, ok, err := in.nextLineStart(target); err != nil {
			return err
		} else if ok {
			msg += fmt.Sprintf(" and the next one at %d", next)
		}
		return errors.New(msg + "; use a line start, or --force to set it anyway")
	}
	old, _, err := loadPointer(path)
	if err != nil {
		return err
	}
	var prev uint64
	if old.Found {
		prev = old.Record.Epoch
	}
	epoch := pointer.NewEpoch(prev, time.Now())
	if err := storePointer(pf, in, epoch, target); err != nil {
		return err
	}
	was := "no valid pointer before"
	switch {
	case old.Found:
		was = fmt.Sprintf("was epoch %d, position %d", old.Record.Epoch, old.Record.Position)
	case old.Legacy:
		was = fmt.Sprintf("was a legacy pointer, count %d", old.Record.Position)
	}
	fmt.Fprintf(stdout, "set %s: position %d under the new epoch %d (%s)\n", path, target, epoch, was)
	return nil
}

// storePointer writes the pointer of in at pos under epoch through pf (which
// holds the lock), durably, closes pf, and reads the pointer back.
func storePointer(pf *pointer.File, in *inputFile, epoch uint64, pos int64) error {
	path := pf.Path()
	p, err := in.pointerAt(epoch, pos)
	if err != nil {
		return err
	}
	if err := errors.Join(pf.Store(p), pf.Close()); err != nil {
		return fmt.Errorf("write pointer %s: %w", path, err)
	}
	back, _, err := loadPointer(path)
	if err != nil {
		return err
	}
	if !back.Found || back.Record != p {
		return fmt.Errorf("write pointer %s: reading it back found %+v (%s), not what was written; check the disk", path, back.Record, back.Reason)
	}
	return nil
}

func pointerMigrate(args []string, stdout io.Writer) error {
	var mig *pointer.File // holds the lock while migrating
	fset := flag.NewFlagSet("pointer migrate", flag.ContinueOnError)
	utf16 := fset.Bool("utf16", false, "convert the legacy count of UTF-16 code units to a byte offset of the input")
	dryRun := fset.Bool("dry-run", false, "print what would be done; write nothing")
	inputFlag := fset.String("input", "", "the input, when the pointer file is not beside it")
	pos, err := parse("pointer", fset, args)
	if err != nil {
		return err
	}
	path, inputPath, err := pointerArg(pos, *inputFlag)
	if err != nil {
		return err
	}
	if _, err := os.Stat(path); err == nil && !*dryRun {
		pf, err := lockPointer(path, "migrate")
		if err != nil {
			return err
		}
		defer pf.Close()
		mig = pf
	}
	res, _, err := loadPointer(path)
	if err != nil {
		return err
	}
	switch {
	case res.Missing:
		return fmt.Errorf("migrate %s: no such pointer file; nothing to migrate (the feed reads its input from 0 under a new epoch)", path)
	case res.Found:
		return fmt.Errorf("migrate %s: not a legacy pointer: it is already in the current format (version %d, epoch %d, position %d); nothing to do. To move it, use tidemark pointer set", path, pointer.Version, res.Record.Epoch, res.Record.Position)
	case !res.Legacy:
		return fmt.Errorf("migrate %s: not a legacy pointer (a legacy pointer is exactly %d bytes and holds a count >= 0): %s. The feed would read its input from 0 under a new epoch; to resume elsewhere, write a pointer with tidemark pointer set", path, pointer.LegacySize, res.Reason)
	}
	count := res.Record.Position
	in, err := openInput(inputPath)
	if err != nil {
		return fmt.Errorf("migrate %s: open its input: %w; the count is resolved against the input, which must exist", path, err)
	}
	defer in.Close()
	var steps []string
	offset := count
	if *utf16 {
		off, mid, ok, err := in.utf16Offset(count)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("migrate %s: the input %s holds fewer than %d UTF-16 code units: it was truncated or replaced since the legacy product wrote the count; delete the pointer to read from 0, or write one with tidemark pointer set", path, inputPath, count)
		}
		offset = off
		steps = append(steps, fmt.Sprintf("count %d UTF-16 code units ends at byte offset %d", count, off))
		if mid {
			steps = append(steps, "inside a character")
		}
	} else {
		steps = append(steps, fmt.Sprintf("count %d taken as byte offset %d", count, count))
	}
	if offset > in.size {
		return fmt.Errorf("migrate %s: byte offset %d is past the end of the input %s (%d bytes): it was truncated or replaced since; delete the pointer to read from 0, or write one with tidemark pointer set", path, offset, inputPath, in.size)
	}
	target, ok, err := in.nextLineStart(offset)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("migrate %s: byte offset %d is inside the last line of %s, which has no newline yet; wait until it is complete, or set the start of that line with tidemark pointer set", path, offset, inputPath)
	}
	if target != offset {
		steps = append(steps, fmt.Sprintf("inside a line: moved to the next line start %d", target))
	} else {
		steps = append(steps, "a line start")
	}
	var hint string
	if !*utf16 {
		if hint, err = utf16Hint(in, count); err != nil {
			return err
		}
	}
	epoch := pointer.NewEpoch(0, time.Now())
	verb := "migrated"
	if *dryRun {
		verb = "would migrate"
	} else if mig == nil {
		return fmt.Errorf("migrate %s: the pointer file appeared while the tool looked at it: a feed may be starting on it; run this again", path)
	} else if err := storePointer(mig, in, epoch, target); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s legacy pointer %s: %s; position %d under the new epoch %d\n", verb, path, strings.Join(steps, "; "), target, epoch)
	if hint != "" {
		fmt.Fprintf(stdout, "note: %s\n", hint)
	}
	return nil
}
