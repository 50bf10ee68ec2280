package torture

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// TestRotationUnderKills is scenario 2: a writer appends steadily (paced by
// the ledger's progress, a window of lines ahead) and rotates the file:
// rename it away and create a new one; rename it away and create the new
// one only after the ledger has read the old one to its end with no file at
// the path (a gap); and, within a generation, appends made by writing a
// copy to a temporary file and renaming it over the path. The ledger
// follows with --follow and is killed at random moments chosen by
// progress. Every line of every generation is applied exactly once.
//
// A file is renamed away only once its lines are durable in the store: see
// TestRenamedAwayWhileDown for the lines of a file renamed away unread.
func TestRotationUnderKills(t *testing.T) {
	track(t)
	rng := newRand(t)
	dir := tempDir(t)
	input, data := filepath.Join(dir, "in.csv"), filepath.Join(dir, "data")
	gens := pick(6, 24)
	perGen := pick(3000, 10000)
	kills := pick(10, 100)
	const chunk = 100
	window := int64(pick(2000, 5000))
	var files []string
	var genLines [][]byte
	for g := range gens {
		p := filepath.Join(dir, fmt.Sprintf("gen%02d.csv", g))
		gen(t, p, perGen, rng.Uint64(), int64(g)*1_000_000+1, 0)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
		genLines = append(genLines, b)
	}
	figures.inputs.Add(int64(gens))
	total := int64(gens * perGen)
	h := newHub()
	stop := make(chan struct{})
	writerDone := make(chan error, 1)
	var rotations, copies int
	wrng := newRandFrom(rng.Uint64())
	go func() {
		writerDone <- func() error {
			var written int64
			for g, b := range genLines {
				if g > 0 {
					// Rotate once the old file's lines are durable.
					if !h.wait(written, stop) {
						return nil
					}
					rotated := fmt.Sprintf("%s.%d", input, g)
					if err := os.Rename(input, rotated); err != nil {
						return err
					}
					rotations++
					if g%2 == 0 {
						// A gap: the path has no file until the
						// ledger has been seen at the old end again.
						if !h.wait(written, stop) {
							return nil
						}
					}
				}
				for off := 0; off < len(b); {
					n := off
					for i := 0; i < chunk && n < len(b); i++ {
						n += bytes.IndexByte(b[n:], '\n') + 1
					}
					if !h.wait(written-window, stop) {
						return nil
					}
					if off > 0 && wrng.IntN(5) == 0 {
						if err := appendByCopy(input, b[off:n]); err != nil {
							return err
						}
						copies++
					} else if err := appendTo(input, b[off:n]); err != nil {
						return err
					}
					written += int64(countLines(b[off:n]))
					off = n
				}
			}
			return nil
		}()
	}()
	defer close(stop)

	var applied int64
	for k := 0; k < kills; k++ {
		share := (total - applied) / int64(kills-k+1)
		threshold := applied + 1 + rng.Int64N(max(1, 2*share))
		args := runArgs(input, data, "--follow", "--batch", strconv.Itoa([]int{10, 100, 1000}[rng.IntN(3)]))
		c := startHub(t, dir, h, args...)
		if !c.waitApplied(threshold) {
			c.stop()
			t.Fatalf("kill %d: the ledger did not reach %d applied lines: %v\n%s", k, threshold, c.lastDurable(), tail(c.stderr.String()))
		}
		c.kill()
		c.checkNotAhead()
		applied = c.lastDurable()["applied"]
	}
	c := startHub(t, dir, h, runArgs(input, data, "--follow")...)
	if !c.waitApplied(total) {
		c.stop()
		t.Fatalf("the ledger did not reach %d applied lines: %v\n%s", total, c.lastDurable(), tail(c.stderr.String()))
	}
	if err := <-writerDone; err != nil {
		t.Fatal(err)
	}
	if err := c.stop(); err != nil {
		t.Fatal(err)
	}
	c.checkNotAhead()
	checkExact(t, data, files...)
	t.Logf("%d generations of %d lines, %d rotations, %d appends by copy-and-rename, %d kills", gens, perGen, rotations, copies, kills)
}

// TestRenamedAwayWhileDown: the ledger is killed with lines of its file
// unread, the file is renamed away (once, or twice: in.csv -> in.csv.1 ->
// in.csv.2) and a new one created, and the ledger restarted. Defect D2
// (RELIABILITY.md, fixed in cf52a5f): the unread lines of the renamed file
// were never read. The feed must find the renamed file by its identity,
// finish it, then read the new file: every line of both exactly once.
func TestRenamedAwayWhileDown(t *testing.T) {
	track(t)
	rng := newRand(t)
	for _, renames := range []int{1, 2} {
		t.Run(fmt.Sprintf("renamed %d times", renames), func(t *testing.T) {
			dir := tempDir(t)
			input, data := filepath.Join(dir, "in.csv"), filepath.Join(dir, "data")
			a, b := filepath.Join(dir, "a.csv"), filepath.Join(dir, "b.csv")
			gen(t, a, 5000, rng.Uint64(), 1, 0)
			gen(t, b, 1000, rng.Uint64(), 1_000_000, 0)
			figures.inputs.Add(2)
			copyFile(t, a, input)
			c := start(t, dir, runArgs(input, data, "--follow", "--batch", "50")...)
			if !c.waitApplied(1000 + int64(rng.IntN(2000))) {
				t.Fatal("the first run did not get going")
			}
			c.kill()
			done := appliedCount(t, data)
			name := input
			for i := 1; i <= renames; i++ {
				next := fmt.Sprintf("%s.%d", input, i)
				if err := os.Rename(name, next); err != nil {
					t.Fatal(err)
				}
				name = next
			}
			copyFile(t, b, input)
			follow(t, dir, 6000, runArgs(input, data)...)
			t.Logf("killed with %d of 5000 lines applied, renamed %d times", done, renames)
			checkExact(t, data, a, b)
		})
	}
}

// firstLines returns the first n lines of b.
func firstLines(b []byte, n int) []byte {
	off := 0
	for range n {
		off += bytes.IndexByte(b[off:], '\n') + 1
	}
	return b[:off]
}

// appendTo appends b to path with O_APPEND.
func appendTo(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// appendByCopy appends b the way some writers do: a copy of the file with b
// added, written to a temporary file and renamed over the path.
func appendByCopy(path string, b []byte) error {
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	tmp := path + ".writing"
	if err := os.WriteFile(tmp, append(old, b...), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
