package torture

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/tidemark-go/tidemark/feed/pointer"
)

// TestPowerLoss is scenario 10: the ledger runs with its input, pointer
// file and data folder on powerFS, a FUSE file system that keeps only what
// was fsynced. At random moments (chosen by progress) the ledger is killed
// and the power is cut: the file system is rebuilt from what was durable,
// and the ledger restarted. What the ledger had reported durable must have
// survived; after the last cut a run to the end leaves nothing lost and
// nothing applied twice.
func TestPowerLoss(t *testing.T) {
	track(t)
	lines := pick(15_000, 100_000)
	cuts := pick(4, 40)
	for _, store := range []string{"bbolt", "pebble"} {
		t.Run(store, func(t *testing.T) {
			rng := newRand(t)
			dir := tempDir(t)
			m := mountPowerFS(t, filepath.Join(dir, "mnt"))
			if m == nil {
				return
			}
			src := filepath.Join(dir, "ledger.csv")
			gen(t, src, lines, rng.Uint64(), 1, 997)
			figures.inputs.Add(1)
			input := filepath.Join(m.dir, "ledger.csv")
			data := filepath.Join(m.dir, "data")
			b, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			writeDurable(t, input, b)
			want := int64(lines - lines/997)
			var applied int64
			for k := 0; k < cuts; k++ {
				share := (want - applied) / int64(cuts-k+1)
				threshold := min(want, applied+1+rng.Int64N(max(1, 2*share)))
				args := runArgs(input, data, "--store", store, "--batch", strconv.Itoa([]int{20, 500, 2000}[rng.IntN(3)]))
				c := start(t, dir, args...)
				if !c.waitApplied(threshold) {
					if err := c.wait(); err != nil {
						t.Fatalf("cut %d: the ledger did not reach %d applied lines: %v %v\n%s", k, threshold, c.lastDurable(), err, tail(c.stderr.String()))
					}
					c.checkNotAhead()
					break // it settled first: nothing left to cut
				}
				c.kill()
				c.checkNotAhead()
				// What the ledger reported durable: every well-formed line
				// before its durable position, which is its applied count
				// (read from the same snapshot of its durable state).
				last := c.lastDurable()
				pos := last["position"]
				reported := wellFormedBefore(b, pos)
				if last["applied"] != reported {
					t.Fatalf("cut %d: the ledger reported %d lines applied at position %d, where %d well-formed lines end", k, last["applied"], pos, reported)
				}
				m.cut()
				if _, err := os.Stat(input); err != nil {
					t.Fatalf("cut %d: the input is gone after the power cut: %v", k, err)
				}
				got := appliedCount(t, data)
				if got < reported {
					t.Fatalf("cut %d: the ledger reported position %d durable (%d well-formed lines before it), %d applied lines survived the power cut", k, pos, reported, got)
				}
				// Compare pointer and store on a copy: opening the store in
				// this process would map it (bbolt), and a page fault on a
				// file this same process serves over FUSE can deadlock
				// with the garbage collector.
				scratch := filepath.Join(dir, "scratch"+strconv.Itoa(k))
				copyTree(t, data, filepath.Join(scratch, "data"))
				copyFile(t, input, filepath.Join(scratch, "ledger.csv"))
				copyFile(t, input+pointer.Suffix, filepath.Join(scratch, "ledger.csv"+pointer.Suffix))
				checkPointerOnDisk(t, filepath.Join(scratch, "ledger.csv"), filepath.Join(scratch, "data"))
				os.RemoveAll(scratch)
				applied = got
			}
			runToEnd(t, dir, runArgs(input, data, "--store", store)...)
			checkExact(t, data, input)
			t.Logf("%s: %d power cuts, %d lines", store, cuts, lines)
		})
	}
}

// writeDurable writes a file and syncs it and its folder.
func writeDurable(t *testing.T, path string, b []byte) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	d.Close()
}

// TestPowerFSKeepsOnlyWhatWasSynced checks the power-loss file system
// itself: unsynced data and unjournaled names are lost at a cut, synced
// ones survive.
func TestPowerFSKeepsOnlyWhatWasSynced(t *testing.T) {
	track(t)
	m := mountPowerFS(t, filepath.Join(t.TempDir(), "mnt"))
	if m == nil {
		return
	}
	p := func(name string) string { return filepath.Join(m.dir, name) }
	writeDurable(t, p("synced"), []byte("one\n"))
	// Appended, not synced: lost.
	appendFile(t, p("synced"), []byte("two\n"))
	// Created and written, never synced, no fsync after: lost.
	writeFile(t, p("unsynced"), []byte("x"))
	m.cut()
	if b, err := os.ReadFile(p("synced")); err != nil || string(b) != "one\n" {
		t.Fatalf("synced file after the cut: %q, %v", b, err)
	}
	if _, err := os.Stat(p("unsynced")); !os.IsNotExist(err) {
		t.Fatalf("a never-synced new file survived the cut: %v", err)
	}
	// A rename made durable by an fsync of another file; its data synced
	// before.
	writeDurable(t, p("tmp"), []byte("new\n"))
	if err := os.Rename(p("tmp"), p("synced")); err != nil {
		t.Fatal(err)
	}
	writeDurable(t, p("other"), nil)
	// A rename with no fsync after it: undone.
	if err := os.Rename(p("other"), p("renamed")); err != nil {
		t.Fatal(err)
	}
	// Written at an offset and truncated, unsynced: undone.
	f, err := os.OpenFile(p("synced"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("NEW"), 0)
	f.Truncate(2)
	f.Close()
	ino := inode(t, p("synced"))
	m.cut()
	if got := inode(t, p("synced")); got != ino {
		t.Fatalf("inode %d became %d across the cut", ino, got)
	}
	if b, err := os.ReadFile(p("synced")); err != nil || string(b) != "new\n" {
		t.Fatalf("renamed-over file after the cut: %q, %v", b, err)
	}
	if _, err := os.Stat(p("other")); err != nil {
		t.Fatalf("the unjournaled rename was not undone: %v", err)
	}
	if _, err := os.Stat(p("renamed")); !os.IsNotExist(err) {
		t.Fatalf("the unjournaled rename survived: %v", err)
	}
}

// wellFormedBefore counts the well-formed lines of input that end, with
// their newline, at or before pos.
func wellFormedBefore(input []byte, pos int64) int64 {
	var n, off int64
	for _, line := range bytes.SplitAfter(input[:min(pos, int64(len(input)))], []byte{'\n'}) {
		off += int64(len(line))
		if off > pos || len(line) == 0 || line[len(line)-1] != '\n' {
			break
		}
		if wellFormed(line[:len(line)-1]) {
			n++
		}
	}
	return n
}
