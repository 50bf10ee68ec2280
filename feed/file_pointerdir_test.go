package feed

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidemark-go/tidemark/feed/pointer"
)

func TestPointerPath(t *testing.T) {
	for _, c := range []struct{ input, dir, want string }{
		{"/data/in.csv", "", "/data/in.csv.readPointer"},
		{"in.csv", "", "in.csv.readPointer"},
		{"/data/in.csv", "/var/lib/feed", "/var/lib/feed/in.csv.readPointer"},
		{"/data/in.csv", "state", "state/in.csv.readPointer"},
	} {
		if got := pointer.Path(c.input, c.dir); got != c.want {
			t.Errorf("pointer.Path(%q, %q) = %q, want %q", c.input, c.dir, got, c.want)
		}
	}
}

// TestPointerDir: with a pointer folder of its own, the pointer file lives
// there (the folder created when missing, with a note), nothing is written
// beside the input, and a restart resumes from it.
func TestPointerDir(t *testing.T) {
	p := input(t, genLines("a", 0, 10))
	dir := filepath.Join(t.TempDir(), "state", "pointers")
	s := open(t, p, Config{PointerDir: dir})
	if len(s.log.find(slog.LevelInfo, "created the pointer folder")) != 1 {
		t.Fatalf("log:\n%s", s.log)
	}
	g := s.drain()
	if err := s.Commit(g[4].Epoch, g[4].Position); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ptr := filepath.Join(dir, "in.log"+pointer.Suffix)
	res, err := pointer.Open(ptr, pointer.Options{Logger: slog.New(slog.DiscardHandler)}).Load()
	if err != nil || !res.Found || res.Record.Position != 5*32 {
		t.Fatalf("pointer in the pointer folder: %+v %v", res, err)
	}
	if _, err := os.Stat(p + pointer.Suffix); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a pointer file beside the input: %v", err)
	}
	s = open(t, p, Config{PointerDir: dir})
	if g := s.drain(); len(g) != 5 || g[0].Position != 6*32 || g[0].Epoch != res.Record.Epoch {
		t.Fatalf("restart: %+v", g)
	}
	if n := len(s.log.find(slog.LevelInfo, "created the pointer folder")); n != 0 {
		t.Fatalf("created the folder again:\n%s", s.log)
	}
}

// TestPointerDirTwoPrograms: two programs follow one input, each with its
// own pointer folder: each reads every line and keeps its own pointer;
// with one folder they conflict.
func TestPointerDirTwoPrograms(t *testing.T) {
	p := input(t, genLines("a", 0, 10))
	d1, d2 := filepath.Join(t.TempDir(), "one"), filepath.Join(t.TempDir(), "two")
	s1, s2 := open(t, p, Config{PointerDir: d1}), open(t, p, Config{PointerDir: d2})
	g1, g2 := s1.drain(), s2.drain()
	if len(g1) != 10 || len(g2) != 10 {
		t.Fatalf("%d and %d lines", len(g1), len(g2))
	}
	if err := s1.Commit(g1[2].Epoch, g1[2].Position); err != nil {
		t.Fatal(err)
	}
	if err := s2.Commit(g2[7].Epoch, g2[7].Position); err != nil {
		t.Fatal(err)
	}
	for dir, want := range map[string]int64{d1: 3 * 32, d2: 8 * 32} {
		res, err := pointer.Open(pointer.Path(p, dir), pointer.Options{}).Load()
		if err != nil || res.Record.Position != want {
			t.Fatalf("%s: %+v %v, want %d", dir, res, err, want)
		}
	}
	_, err := NewFileSource(Config{Path: p, PointerDir: d1})
	if !errors.Is(err, ErrPointerLocked) || !strings.Contains(err.Error(), pointer.Path(p, d1)) {
		t.Fatalf("a third program on the first one's folder: %v", err)
	}
}

// TestPointerDirNotAFolder: a PointerDir that names a file is a
// configuration error.
func TestPointerDirNotAFolder(t *testing.T) {
	p := input(t, "a\n")
	if _, err := NewFileSource(Config{Path: p, PointerDir: p}); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "not a folder") {
		t.Fatalf("err %v", err)
	}
}

// TestPointerDirRenamedAway: the input renamed away while stopped is
// found in the input's folder when the pointer lives elsewhere.
func TestPointerDirRenamedAway(t *testing.T) {
	a, b := genLines("a", 0, 100), genLines("b", 0, 10)
	p := input(t, a)
	dir := t.TempDir()
	s := open(t, p, Config{PointerDir: dir})
	g := s.waitLines(30)
	if err := s.Commit(g[29].Epoch, g[29].Position); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	rename(t, p, p+".1")
	write(t, p, b)
	s = open(t, p, Config{PointerDir: dir})
	g = s.takeCommit(70 + 10)
	if wantLines(t, "renamed file", g[:70], a, 30*32) != g[0].Epoch {
		t.Fatal("epoch")
	}
	wantLines(t, "new file", g[70:], b, 0)
}
