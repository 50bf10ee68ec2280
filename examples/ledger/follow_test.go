package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// followServer is `ledger run --follow` in a child process that a test
// kills and restarts.
type followServer struct {
	t     *testing.T
	exe   string
	args  []string
	dir   string
	input string
	data  string
	runs  int
	c     *child
}

func (s *followServer) start() {
	s.t.Helper()
	s.runs++
	c, err := startChild(s.exe, s.args, filepath.Join(s.dir, fmt.Sprintf("run%d.log", s.runs)))
	if err != nil {
		s.t.Fatal(err)
	}
	s.c = c
}

// waitApplied waits until the store holds at least n applied lines.
func (s *followServer) waitApplied(n int64) {
	s.t.Helper()
	if !s.c.waitApplied(n, childTimeout) {
		s.t.Fatalf("run %d: %d lines never saved (last %v, exit %v)", s.runs, n, s.c.lastDurable(), s.c.err)
	}
}

func (s *followServer) kill() {
	s.t.Helper()
	s.c.kill()
	if !s.c.killed() {
		s.t.Fatalf("run %d was not killed: %v", s.runs, s.c.err)
	}
	checkNotAhead(s.t, s.c, s.input, s.data, true)
}

// generation is the lines a writer puts in one file at the path.
type generation struct {
	lines []byte
	count int
}

func newGeneration(t *testing.T, firstID int64, n int, seed uint64) generation {
	var b bytes.Buffer
	if err := Gen(&b, GenOptions{Lines: n, Accounts: 30, Seed: seed, FirstID: firstID}); err != nil {
		t.Fatal(err)
	}
	return generation{lines: b.Bytes(), count: n}
}

// chunks splits the generation into pieces of `per` whole lines.
func (g generation) chunks(per int) [][]byte {
	var out [][]byte
	rest := g.lines
	for len(rest) > 0 {
		end, n := 0, 0
		for end < len(rest) && n < per {
			end += bytes.IndexByte(rest[end:], '\n') + 1
			n++
		}
		out = append(out, rest[:end])
		rest = rest[end:]
	}
	return out
}

func appendTo(t *testing.T, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestFollowRotationTruncationKills runs the server with --follow while a
// writer appends to the input, renames it away and starts a new file at the
// path, and, once the server has caught up, truncates it and writes new
// lines. The server is killed twice on the way (once during the first
// file's appends, once after the truncation) and restarted; the writer goes
// on appending while it is down. At the end every line of every generation
// is applied exactly once, and SIGTERM stops the server cleanly with exit 0.
func TestFollowRotationTruncationKills(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "ledger.csv")
	data := filepath.Join(dir, "data")
	s := &followServer{
		t: t, exe: ledgerExe(t), dir: dir, input: input, data: data,
		args: []string{"--input", input, "--data", data, "--follow", "--progress", "none"},
	}
	const per, backlog = 100, 1000
	gens := []generation{
		newGeneration(t, 1, 3000, 1),
		newGeneration(t, 3001, 3000, 2),
		newGeneration(t, 6001, 3000, 3),
	}
	var expected []string
	for i, g := range gens {
		p := filepath.Join(dir, fmt.Sprintf("generation%d.csv", i+1))
		if err := os.WriteFile(p, g.lines, 0o644); err != nil {
			t.Fatal(err)
		}
		expected = append(expected, p)
	}
	var written int64
	// write appends one chunk, keeping the writer at most backlog lines
	// ahead of what the server has saved.
	write := func(chunk []byte) {
		t.Helper()
		s.waitApplied(written - backlog)
		appendTo(t, input, chunk)
		written += int64(bytes.Count(chunk, []byte{'\n'}))
	}

	s.start()
	// Generation 1: appended to the file at the path; killed half way, and
	// a chunk appended while the server is down.
	killAndAppend := func(chunk []byte) {
		s.kill()
		appendTo(t, input, chunk) // appended while the server is down
		written += int64(bytes.Count(chunk, []byte{'\n'}))
		s.start()
	}
	killed := false
	for _, chunk := range gens[0].chunks(per) {
		if !killed && written >= 1500 {
			s.waitApplied(1200)
			killAndAppend(chunk)
			killed = true
			continue
		}
		write(chunk)
	}

	// Generation 2: the file is renamed away and a new one starts at the
	// path, while the server runs.
	if err := os.Rename(input, input+".1"); err != nil {
		t.Fatal(err)
	}
	for _, chunk := range gens[1].chunks(per) {
		write(chunk)
	}
	s.waitApplied(written) // caught up

	// While the server runs and idles, output.csv already holds every line
	// saved: each batch's output is written when the batch is saved.
	out, err := os.ReadFile(filepath.Join(data, outputFile))
	if err != nil {
		t.Fatal(err)
	}
	if n := int64(bytes.Count(out, []byte{'\n'})); n != written {
		t.Fatalf("output.csv of a running, caught-up server has %d lines, want %d", n, written)
	}

	// Generation 3: the file is truncated and new lines written. The first
	// chunk is much shorter than the file was, and the server reads it
	// before more is written, so that the truncation shows.
	if err := os.Truncate(input, 0); err != nil {
		t.Fatal(err)
	}
	chunks := gens[2].chunks(per)
	write(chunks[0])
	s.waitApplied(written)
	killed = false
	for _, chunk := range chunks[1:] {
		if !killed && written >= 7500 {
			s.waitApplied(7200)
			killAndAppend(chunk)
			killed = true
			continue
		}
		write(chunk)
	}
	s.waitApplied(written)
	if written != 9000 {
		t.Fatalf("wrote %d lines, want 9000", written)
	}

	// SIGTERM: a clean stop, exit 0.
	if err := s.c.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := s.c.wait(childTimeout); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	if s.c.doneEvent() == nil {
		t.Fatal("no done event after SIGTERM")
	}
	checkNotAhead(t, s.c, input, data, true)
	r := checkExact(t, data, expected...)
	if r.State.Applied != 9000 {
		t.Fatalf("applied %d, want 9000", r.State.Applied)
	}
	// The clean stop saved and committed everything: a restart applies
	// and skips nothing.
	c, err := startChild(s.exe, []string{"--input", input, "--data", data, "--progress", "none"}, filepath.Join(dir, "final.log"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.wait(childTimeout); err != nil {
		t.Fatalf("final run: %v", err)
	}

	if d := c.doneEvent(); d == nil || d["lines"] != 0 || d["applied"] != 0 || d["skipped"] != 0 {
		t.Fatalf("after a clean stop a restart re-read lines: %v", d)
	}
	t.Logf("%d runs; the server followed %d lines over 3 generations", s.runs, r.State.Applied)
}
