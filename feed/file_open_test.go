package feed

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/feed/pointer"
	"github.com/tidemark-go/tidemark/vfs"
)

// firstRun reads all of p with a Committed source, commits the last line,
// closes, and returns the epoch and position committed.
func firstRun(t *testing.T, p string) (uint64, int64) {
	t.Helper()
	s := open(t, p, Config{})
	g := s.drain()
	if len(g) == 0 {
		t.Fatal("first run read nothing")
	}
	last := g[len(g)-1]
	if err := s.Commit(last.Epoch, last.Position); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return last.Epoch, last.Position
}

func replaceByRename(t *testing.T, p, content string) {
	t.Helper()
	write(t, p+".tmp", content)
	if err := os.Rename(p+".tmp", p); err != nil {
		t.Fatal(err)
	}
}

// TestOpenTable: every row of the open-time decision table.
func TestOpenTable(t *testing.T) {
	const initial = "alpha\nbravo\n"
	big := strings.Repeat(strings.Repeat("x", 49)+"\n", 100) // 5000 bytes
	tests := []struct {
		name    string
		initial string
		mutate  func(t *testing.T, p string)
		kept    bool
		first   string // first line delivered after the restart ("" for none)
		pos     int64  // its position
		level   slog.Level
		msg     string // expected log message part; "" for no warning or info
	}{
		{name: "appended", mutate: func(t *testing.T, p string) { appendTo(t, p, "charlie\n") },
			kept: true, first: "charlie", pos: 20},
		{name: "times changed", mutate: func(t *testing.T, p string) {
			old := time.Now().Add(-time.Hour)
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
		}, kept: true},
		{name: "truncated", mutate: func(t *testing.T, p string) { write(t, p, "alpha\n") },
			first: "alpha", pos: 6, level: slog.LevelWarn, msg: "does not match its pointer"},
		{name: "pointer past the end", mutate: func(t *testing.T, p string) { write(t, p, ""); appendTo(t, p, "z\n") },
			first: "z", pos: 2, level: slog.LevelWarn, msg: "does not match its pointer"},
		{name: "other leading bytes", mutate: func(t *testing.T, p string) { write(t, p, "ALPHA\nbravo\n") },
			first: "ALPHA", pos: 6, level: slog.LevelWarn, msg: "does not match its pointer"},
		{name: "rewritten in place keeping the first 4 KB and the length", initial: big, mutate: func(t *testing.T, p string) {
			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt([]byte("Y"), 4990); err != nil {
				t.Fatal(err)
			}
		}, first: strings.Repeat("x", 49), pos: 50, level: slog.LevelWarn, msg: "does not match its pointer"},
		{name: "another identity, same leading bytes, not shorter", mutate: func(t *testing.T, p string) {
			replaceByRename(t, p, initial+"charlie\n")
		}, kept: true, first: "charlie", pos: 20, level: slog.LevelWarn, msg: "identity changed"},
		{name: "pointer missing", mutate: func(t *testing.T, p string) { os.Remove(p + pointer.Suffix) },
			first: "alpha", pos: 6, level: slog.LevelInfo, msg: "no pointer file"},
		{name: "pointer empty (made to be locked, never written)", mutate: func(t *testing.T, p string) { write(t, p+pointer.Suffix, "") },
			first: "alpha", pos: 6, level: slog.LevelInfo, msg: "holds no record yet"},
		{name: "pointer shorter than 8 bytes", mutate: func(t *testing.T, p string) { write(t, p+pointer.Suffix, "TDMP\x01") },
			first: "alpha", pos: 6, level: slog.LevelWarn, msg: "no valid record"},
		{name: "pointer all NULs", mutate: func(t *testing.T, p string) { write(t, p+pointer.Suffix, string(make([]byte, pointer.FileSize))) },
			first: "alpha", pos: 6, level: slog.LevelWarn, msg: "no valid record"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			content := initial
			if tt.initial != "" {
				content = tt.initial
			}
			p := input(t, content)
			epoch, pos := firstRun(t, p)
			tt.mutate(t, p)
			s := open(t, p, Config{})
			g := s.drain()
			st := s.Status()
			if tt.kept {
				if st.Epoch != epoch || st.CommittedPosition != pos {
					t.Fatalf("epoch %d position %d, want kept %d %d", st.Epoch, st.CommittedPosition, epoch, pos)
				}
			} else if st.Epoch <= epoch {
				t.Fatalf("epoch %d, want a new one above %d", st.Epoch, epoch)
			}
			if tt.first == "" {
				if len(g) != 0 {
					t.Fatalf("delivered %+v", g)
				}
			} else if len(g) == 0 || g[0].Line != tt.first || g[0].Position != tt.pos || g[0].Epoch != st.Epoch {
				t.Fatalf("first line %+v, want %q at %d", g, tt.first, tt.pos)
			}
			if tt.msg == "" {
				if s.log.count(slog.LevelWarn)+s.log.count(slog.LevelInfo) != 0 {
					t.Fatalf("unexpected log:\n%s", s.log)
				}
			} else {
				recs := s.log.find(tt.level, tt.msg)
				if len(recs) != 1 {
					t.Fatalf("want one %s %q; log:\n%s", tt.level, tt.msg, s.log)
				}
				if a := attrs(recs[0]); a["pointer"].String() != p+pointer.Suffix {
					t.Fatalf("the log must name the pointer file: %v", a)
				}
			}
			if !tt.kept {
				// The new epoch is stored at once, with this file's identity.
				res := loadPointer(t, p)
				if !res.Found || res.Record.Epoch != st.Epoch || res.Record.Identity != identityOf(t, p) {
					t.Fatalf("pointer %+v, status %+v", res, st)
				}
			}
		})
	}
}

func writeLegacy(t *testing.T, p string, count int64) {
	t.Helper()
	b := make([]byte, pointer.LegacySize)
	binary.BigEndian.PutUint64(b, uint64(count))
	write(t, p+pointer.Suffix, string(b))
}

// TestLegacyPointer: the count of the product tidemark replaces is taken as a
// byte offset and resumed at a line start.
func TestLegacyPointer(t *testing.T) {
	tests := []struct {
		name    string
		content string
		count   int64
		first   string
		pos     int64
		warn    bool
	}{
		{"at a line start", "ab\ncd\nef\n", 3, "cd", 6, false},
		{"inside a line", "ab\ncd\nef\n", 4, "ef", 9, false},
		{"zero", "ab\ncd\n", 0, "ab", 3, false},
		{"at the end", "ab\ncd\n", 6, "", 0, false},
		{"past the end", "ab\ncd\n", 100, "ab", 3, true},
		// "héllo\n" is 6 UTF-16 code units and 7 bytes.
		{"after 2-byte UTF-8", "héllo\nworld\n", 6, "world", 13, false},
		// "😀😀\n" is 5 UTF-16 code units and 9 bytes.
		{"after 4-byte UTF-8", "😀😀\nnext\n", 5, "next", 14, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := input(t, tt.content)
			writeLegacy(t, p, tt.count)
			s := open(t, p, Config{})
			g := s.drain()
			if tt.first == "" {
				if len(g) != 0 {
					t.Fatalf("delivered %+v", g)
				}
			} else if len(g) == 0 || g[0].Line != tt.first || g[0].Position != tt.pos {
				t.Fatalf("got %+v, want %q at %d", g, tt.first, tt.pos)
			}
			st := s.Status()
			if st.Epoch == 0 {
				t.Fatal("no epoch")
			}
			if tt.warn {
				if len(s.log.find(slog.LevelWarn, "legacy pointer is past the end")) != 1 {
					t.Fatalf("log:\n%s", s.log)
				}
				return
			}
			if len(s.log.find(slog.LevelInfo, "migrating legacy pointer")) != 1 {
				t.Fatalf("log:\n%s", s.log)
			}
			// The migrated position is committed at once under the new epoch.
			res := loadPointer(t, p)
			want := tt.count
			if tt.name == "inside a line" || strings.HasPrefix(tt.name, "after") {
				want = tt.pos - int64(len(tt.first)) - 1
			}
			if !res.Found || res.Record.Epoch != st.Epoch || res.Record.Position != want {
				t.Fatalf("pointer %+v, want epoch %d position %d", res, st.Epoch, want)
			}
		})
	}
}

// TestLegacyPointerInsideUnterminatedLine: the migration waits for the line's
// terminator: the legacy file stays until then.
func TestLegacyPointerInsideUnterminatedLine(t *testing.T) {
	p := input(t, "ab\ncd")
	writeLegacy(t, p, 4)
	s := open(t, p, Config{})
	if g := s.drain(); len(g) != 0 {
		t.Fatalf("%+v", g)
	}
	if res := loadPointer(t, p); !res.Legacy {
		t.Fatalf("the legacy pointer must stay until a line start is known: %+v", res)
	}
	appendTo(t, p, "\nef\n")
	g := s.drain()
	if len(g) != 1 || g[0].Line != "ef" || g[0].Position != 9 {
		t.Fatalf("%+v", g)
	}
	if res := loadPointer(t, p); !res.Found || res.Record.Position != 6 || res.Record.Epoch != g[0].Epoch {
		t.Fatalf("pointer %+v", res)
	}
}

// TestFingerprintCoversPrefixFingerprinted: a file fingerprinted when it was
// short is compared on that prefix after it grows, and the fingerprint is
// extended by later commits.
func TestFingerprintCoversPrefixFingerprinted(t *testing.T) {
	p := input(t, "ab\n")
	epoch, _ := firstRun(t, p)
	if res := loadPointer(t, p); res.Record.Fingerprint.Len != 3 {
		t.Fatalf("pointer %+v", res)
	}
	more := strings.Repeat(strings.Repeat("y", 99)+"\n", 50)
	appendTo(t, p, more)
	s := open(t, p, Config{})
	g := s.drain()
	if len(g) != 50 || g[0].Epoch != epoch || g[0].Position != 103 {
		t.Fatalf("got %d lines, first %+v", len(g), g[0])
	}
	if err := s.Commit(epoch, g[49].Position); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	res := loadPointer(t, p)
	if res.Record.Fingerprint.Len != pointer.MaxFingerprintLen || res.Record.Fingerprint.Hash != pointer.HashBytes(b[:pointer.MaxFingerprintLen]) {
		t.Fatalf("fingerprint not extended: %+v", res.Record.Fingerprint)
	}
}

// TestPointerLoadErrorIsReturnedAndRetried: a pointer file that cannot be
// read is not guessed around: Poll returns the error naming it, and the
// next Poll tries again. One that cannot even be opened (a folder at its
// path) fails NewFileSource, which locks it.
func TestPointerLoadErrorIsReturnedAndRetried(t *testing.T) {
	p := input(t, "a\nb\n")
	if err := os.Mkdir(p+pointer.Suffix, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := NewFileSource(Config{Path: p}); err == nil || !strings.Contains(err.Error(), p+pointer.Suffix) {
		t.Fatalf("a folder at the pointer's path: err %v", err)
	}
	if err := os.Remove(p + pointer.Suffix); err != nil {
		t.Fatal(err)
	}
	s := open(t, p, Config{})
	g := s.drain()
	if err := s.Commit(g[0].Epoch, g[0].Position); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	c := &vfs.Counter{Match: func(op vfs.Op, name string) bool { return op == vfs.OpRead && name == p+pointer.Suffix }, FailAt: 1}
	s = open(t, p, Config{FS: vfs.Inject(vfs.Default(), c.Injector())})
	_, err := s.poll()
	if err == nil || !strings.Contains(err.Error(), p+pointer.Suffix) {
		t.Fatalf("err %v", err)
	}
	if g := s.drain(); fmt.Sprint(lines(g)) != "[b]" {
		t.Fatalf("%+v", g)
	}
}

// TestFingerprintStoredBeforeDelivery: an epoch started on an empty (or
// short) file stores its pointer again, with a fingerprint of the bytes
// read, before it delivers their lines: so a file replaced while the source
// is down, before any commit, is not taken for the one whose lines a store
// may already have applied.
func TestFingerprintStoredBeforeDelivery(t *testing.T) {
	p := input(t, "")
	write(t, p, "")
	s := open(t, p, Config{})
	s.drain()
	epoch := s.Status().Epoch
	if res := loadPointer(t, p); res.Record.Fingerprint.Len != 0 || res.Record.Epoch != epoch {
		t.Fatalf("pointer %+v", res.Record)
	}
	appendTo(t, p, "a\nb\n")
	if g := s.drain(); len(g) != 2 {
		t.Fatalf("%+v", g)
	}
	res := loadPointer(t, p)
	if res.Record.Fingerprint != (tidemark.Fingerprint{Len: 4, Hash: pointer.HashBytes([]byte("a\nb\n"))}) || res.Record.Position != 0 || res.Record.Epoch != epoch {
		t.Fatalf("pointer %+v", res.Record)
	}
	s.Close() // no commit: as after a crash
	replaceByRename(t, p, "x\ny\nz\n")
	s2 := open(t, p, Config{})
	g := s2.drain()
	if len(g) != 3 || g[0].Line != "x" || g[0].Epoch <= epoch {
		t.Fatalf("the replaced file must start a new epoch from 0: %+v", g)
	}
	if len(s2.log.find(slog.LevelWarn, "does not match its pointer")) != 1 {
		t.Fatalf("log:\n%s", s2.log)
	}
}
