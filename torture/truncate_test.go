package torture

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestTruncation is scenario 3. After each change the ledger must hold
// exactly the lines of every version of the file, in order: a truncated or
// rewritten file is read from 0 under a new epoch (its lines are new), never
// resumed at the old position.
func TestTruncation(t *testing.T) {
	track(t)
	rng := newRand(t)

	t.Run("stopped, regrown past the old position with other content", func(t *testing.T) {
		dir := tempDir(t)
		input, data := filepath.Join(dir, "in.csv"), filepath.Join(dir, "data")
		a := filepath.Join(dir, "a.csv")
		b := filepath.Join(dir, "b.csv")
		gen(t, a, 300, rng.Uint64(), 1, 0)
		gen(t, b, 900, rng.Uint64(), 10_000, 0) // longer than a
		copyFile(t, a, input)
		runToEnd(t, dir, runArgs(input, data)...)
		checkExact(t, data, a)
		rewriteInPlace(t, input, b)
		figures.inputs.Add(2)
		runToEnd(t, dir, runArgs(input, data)...)
		checkExact(t, data, a, b)
	})

	// While running, the truncation must be seen before the file grows
	// past the position read (see TestTruncatedAndRegrownWithinOnePoll for
	// the other order): the new version is shorter, its lines are applied,
	// then it grows past the old position.
	for _, kill := range []bool{false, true} {
		name := "while running, rewritten shorter, then grown past the old position"
		if kill {
			name = "killed while reading the new version"
		}
		t.Run(name, func(t *testing.T) {
			dir := tempDir(t)
			input, data := filepath.Join(dir, "in.csv"), filepath.Join(dir, "data")
			v0, v1, v2 := filepath.Join(dir, "v0.csv"), filepath.Join(dir, "v1.csv"), filepath.Join(dir, "v2.csv")
			gen(t, v0, 500, rng.Uint64(), 1, 0)
			gen(t, v1, 100, rng.Uint64(), 10_000, 0)
			gen(t, v2, 3000, rng.Uint64(), 20_000, 0)
			figures.inputs.Add(3)
			copyFile(t, v0, input)
			args := runArgs(input, data, "--batch", "50")
			c := start(t, dir, append(args, "--follow")...)
			if !c.waitApplied(500) {
				t.Fatalf("first version not applied: %v", c.lastDurable())
			}
			rewriteInPlace(t, input, v1)
			if !c.waitApplied(600) {
				t.Fatalf("the shorter version was not read from 0: %v\n%s", c.lastDurable(), tail(c.stderr.String()))
			}
			b, err := os.ReadFile(v2)
			if err != nil {
				t.Fatal(err)
			}
			appendFile(t, input, b)
			if kill {
				if !c.waitApplied(600 + 1 + int64(rng.IntN(2900))) {
					t.Fatalf("the grown version was not read: %v", c.lastDurable())
				}
				c.kill()
				c.checkNotAhead()
				checkPointerOnDisk(t, input, data)
				follow(t, dir, 3600, args...)
			} else {
				if !c.waitApplied(3600) {
					t.Fatalf("the grown version was not read: %v", c.lastDurable())
				}
				if err := c.stop(); err != nil {
					t.Fatal(err)
				}
				c.checkNotAhead()
			}
			checkExact(t, data, v0, v1, v2)
		})
	}

	t.Run("same first 4 KB, other content after", func(t *testing.T) {
		dir := tempDir(t)
		input, data := filepath.Join(dir, "in.csv"), filepath.Join(dir, "data")
		prefix := genBytes(t, dir, 400, rng.Uint64(), 1) // about 6 KB
		if len(prefix) < 4096 {
			t.Fatalf("prefix of %d bytes", len(prefix))
		}
		a, b := filepath.Join(dir, "a.csv"), filepath.Join(dir, "b.csv")
		writeFile(t, a, append(append([]byte{}, prefix...), genBytes(t, dir, 300, rng.Uint64(), 10_000)...))
		writeFile(t, b, append(append([]byte{}, prefix...), genBytes(t, dir, 600, rng.Uint64(), 20_000)...))
		figures.inputs.Add(2)
		copyFile(t, a, input)
		runToEnd(t, dir, runArgs(input, data)...)
		checkExact(t, data, a)
		rewriteInPlace(t, input, b)
		runToEnd(t, dir, runArgs(input, data)...)
		// The new content differs just before the old position: the file
		// is new, read from 0, its first 400 lines are new lines too.
		checkExact(t, data, a, b)
	})
}

// TestInodeReuse is scenario 4: a file deleted and another created at the
// path, shorter or longer, while the ledger is stopped (on ext4 and tmpfs
// the new file often gets the freed inode: the test records whether it
// did). The new file is read from 0 under a new epoch: nothing skipped.
func TestInodeReuse(t *testing.T) {
	track(t)
	rng := newRand(t)
	reused, tries := 0, 0
	sizes := []int{50, 3000, 300} // shorter, longer, about the same
	if long {
		for range 7 {
			sizes = append(sizes, 1+rng.IntN(5000))
		}
	}
	for i, n := range sizes {
		tries++
		dir := tempDir(t)
		input, data := filepath.Join(dir, "in.csv"), filepath.Join(dir, "data")
		a, b := filepath.Join(dir, "a.csv"), filepath.Join(dir, "b.csv")
		gen(t, a, 300, rng.Uint64(), 1, 0)
		gen(t, b, n, rng.Uint64(), 10_000, 0)
		figures.inputs.Add(2)
		copyFile(t, a, input)
		runToEnd(t, dir, runArgs(input, data)...)
		checkExact(t, data, a)
		before := inode(t, input)
		if err := os.Remove(input); err != nil {
			t.Fatal(err)
		}
		copyFile(t, b, input)
		after := inode(t, input)
		if before == after {
			reused++
		}
		t.Logf("case %d (%d lines after 300): inode %d then %d (reused: %v)", i, n, before, after, before == after)
		runToEnd(t, dir, runArgs(input, data)...)
		checkExact(t, data, a, b)
	}
	t.Logf("inode reused in %d of %d cases", reused, tries)
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// rewriteInPlace truncates path to 0 and writes src's bytes into the same
// file (same inode).
func rewriteInPlace(t *testing.T, path, src string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
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

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestTruncatedAndRegrownWithinOnePoll: a file truncated and rewritten in
// place with longer content between two polls of a running ledger (one
// O_TRUNC open and one write), then, in a second round, the ledger killed
// while it reads the new version. Defect D1 (RELIABILITY.md, fixed in
// cf52a5f): the feed compared only the size with its position, took the
// rewrite for growth and read the new content from the old offset; a
// restart then applied the lines read twice. The new version must be read
// from 0 under a new epoch, every line once.
func TestTruncatedAndRegrownWithinOnePoll(t *testing.T) {
	track(t)
	for _, kill := range []bool{false, true} {
		t.Run(map[bool]string{false: "stopped after", true: "killed while reading the new version"}[kill], func(t *testing.T) {
			truncatedAndRegrown(t, kill)
		})
	}
}

func truncatedAndRegrown(t *testing.T, kill bool) {
	rng := newRand(t)
	dir := tempDir(t)
	input, data := filepath.Join(dir, "in.csv"), filepath.Join(dir, "data")
	a, b := filepath.Join(dir, "a.csv"), filepath.Join(dir, "b.csv")
	gen(t, a, 2000, rng.Uint64(), 1, 0)
	gen(t, b, 3000, rng.Uint64(), 10_000, 0)
	figures.inputs.Add(2)
	copyFile(t, a, input)
	c := start(t, dir, runArgs(input, data, "--follow")...)
	if !c.waitApplied(2000) {
		t.Fatal("first version not applied")
	}
	rewriteInPlace(t, input, b)
	fi, err := os.Stat(input)
	if err != nil {
		t.Fatal(err)
	}
	if kill {
		if !c.waitApplied(2000 + 1 + int64(rng.IntN(2900))) {
			t.Fatalf("the new version was not read: %v", c.lastDurable())
		}
		c.kill()
		c.checkNotAhead()
		checkPointerOnDisk(t, input, data)
	} else {
		// Wait until the feed has read to the new end, in whichever epoch.
		if !c.waitFor(func(d map[string]int64, _ int) bool { return d["position"] >= fi.Size() }) {
			t.Fatalf("the new version was not read to its end: %v", c.lastDurable())
		}
		if err := c.stop(); err != nil {
			t.Fatal(err)
		}
	}
	follow(t, dir, 5000, runArgs(input, data)...)
	checkExact(t, data, a, b)
}
