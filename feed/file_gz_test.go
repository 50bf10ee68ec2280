package feed

import (
	"bytes"
	"compress/gzip"
	"os"
	"strings"
	"testing"
)

// This file tests compressed files: a rotated file compressed by logrotate
// (name.gz), and a compressed input, read decompressed, with positions in
// the decompressed stream.

// gzipBytes returns content compressed.
func gzipBytes(t *testing.T, content string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write([]byte(content)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// compress does what gzip does to name: writes name.gz with name's
// content and modification time, then removes name.
func compress(t *testing.T, name string) {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name+".gz", gzipBytes(t, string(b)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(name+".gz", fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(name); err != nil {
		t.Fatal(err)
	}
}

// TestCompressedRotatedWhileStopped: the file the pointer names is rotated
// and compressed while the source is stopped, and rotated once more: the
// restart finds it by its (decompressed) content, reads the rest of it
// from the pointer in the pointer's epoch, then the newer files.
func TestCompressedRotatedWhileStopped(t *testing.T) {
	a, b, c := genLines("a", 0, 300), genLines("b", 0, 200), genLines("c", 0, 50)
	p := input(t, a)
	epoch := stopAfter(t, p, 100)
	rotateNumbered(t, p)
	write(t, p, b)
	rotateNumbered(t, p) // a at .2, b at .1
	compress(t, p+".2")
	compress(t, p+".1")
	write(t, p, c)
	s := open(t, p, rotatedConfig())
	g := s.collect()
	wantGenerations(t, g, 100*32, a, b, c)
	if g[0].Epoch != epoch {
		t.Fatalf("the compressed file read in epoch %d, not the pointer's %d", g[0].Epoch, epoch)
	}
	s.Close()
	s = open(t, p, rotatedConfig())
	if g := s.collect(); len(g) != 0 {
		t.Fatalf("delivered again: %v", lines(g))
	}
}

// TestCompressedHalfWritten: while gzip writes name.gz, name is still
// there: the source reads name, never the partial name.gz. A partial .gz
// without its original is not read until it is complete.
func TestCompressedHalfWritten(t *testing.T) {
	a, b := genLines("a", 0, 300), genLines("b", 0, 20)
	p := input(t, a)
	stopAfter(t, p, 100)
	rotateNumbered(t, p)
	whole := gzipBytes(t, a)
	if err := os.WriteFile(p+".1.gz", whole[:len(whole)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	write(t, p, b)
	s := open(t, p, rotatedConfig())
	wantGenerations(t, s.collect(), 100*32, a, b)
	s.Close()

	// The compression completes: nothing is read again.
	if err := os.WriteFile(p+".1.gz", whole, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(p + ".1"); err != nil {
		t.Fatal(err)
	}
	s = open(t, p, rotatedConfig())
	if g := s.collect(); len(g) != 0 {
		t.Fatalf("delivered again: %v", lines(g))
	}
}

// TestCompressedInput: an input that is itself compressed is read
// decompressed, positions in the decompressed stream; a restart resumes
// inside it; one still being written is waited for.
func TestCompressedInput(t *testing.T) {
	a := genLines("a", 0, 5000) // 160,000 bytes: more than the read buffer
	p := input(t, "") + ".gz"
	whole := gzipBytes(t, a)
	if err := os.WriteFile(p, whole[:len(whole)/3], 0o644); err != nil {
		t.Fatal(err)
	}
	s := open(t, p, Config{})
	if g, err := s.poll(); err != nil || len(g) != 0 {
		t.Fatalf("a half-written compressed input delivered %d lines, %v", len(g), err)
	}
	if st := s.Status(); st.State != StateWaiting || !strings.Contains(st.Detail, "to be complete") {
		t.Fatalf("status %+v", st)
	}
	if err := os.WriteFile(p, whole, 0o644); err != nil {
		t.Fatal(err)
	}
	g := s.takeCommit(1000)
	epoch := wantLines(t, "first run", g, a[:g[len(g)-1].Position], 0)
	committed := g[len(g)-1].Position
	s.Close()

	s = open(t, p, Config{})
	g = s.collect()
	if wantLines(t, "second run", g, a, committed) != epoch {
		t.Fatalf("the restart changed the epoch: %d, want %d", g[0].Epoch, epoch)
	}
}

// TestCompressedWhileBeingRead: the rotated file the source is finishing is
// compressed (and removed) while it reads it: it reads its open file to
// its end, and moves to the next file, without reading the compressed
// copy again.
func TestCompressedWhileBeingRead(t *testing.T) {
	a, b := genLines("a", 0, 4000), genLines("b", 0, 100)
	p := input(t, a)
	s := open(t, p, rotatedConfig())
	first := s.takeCommit(64)
	rotateNumbered(t, p)
	write(t, p, b)
	compress(t, p+".1")
	all := append(first, s.collect()...)
	wantGenerations(t, all, 0, a, b)
}
