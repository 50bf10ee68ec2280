package torture

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/feed/pointer"
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
// A file is renamed away as soon as the pointer names it, read to its end
// or not (the case of defects D4 and D5, RELIABILITY.md). The writer never
// rotates twice before the feed has opened the file in
// between: that file would be skipped, a documented limit. "The pointer
// names it" means a pointer record written after the file came to the
// path names its inode: a record from before may name the same inode
// number for another file, freed since (see pointerNames).
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
	// early counts the rotations that a check of the inode alone would
	// have made before a record named the file (see pointerNames).
	var early int
	wrng := newRandFrom(rng.Uint64())
	j := newJournal(input, perGen)
	go func() {
		writerDone <- func() error {
			var written int64
			// made is the file at the path: its inode, and the write
			// sequence of the pointer file once it was there.
			var made madeFile
			for g, b := range genLines {
				if g > 0 {
					// Rotate as soon as the pointer names the current
					// file, without waiting for the reader to finish it:
					// a kill now leaves lines of the renamed file unread
					// or not yet durable. D4 lost the lines not yet
					// durable at the switch; D5 lost the unread lines of
					// a file renamed away after an append by copy and
					// rename (the pointer named the replaced copy's
					// inode). Both are fixed; this checks they stay so.
					if ok, err := waitPointerNames(input, made, h, stop, &early); !ok {
						return err
					}
					rotated := fmt.Sprintf("%s.%d", input, g)
					if err := os.Rename(input, rotated); err != nil {
						return err
					}
					rotations++
					j.rotated(g, rotated)
					if g%2 == 0 {
						// A gap: the path has no file until the
						// ledger has read everything written so far,
						// or has been restarted (a feed started while
						// its path is missing waits for the file, and
						// only then finds the renamed one).
						if !h.waitOrRestart(written, h.startedCount(), stop) {
							return nil
						}
						j.note("gen %d: the gap ends", g)
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
					how := "append"
					_, before, _ := newestPointer(input + pointer.Suffix)
					if off > 0 && wrng.IntN(5) == 0 {
						if err := appendByCopy(input, b[off:n]); err != nil {
							return err
						}
						copies++
						how = "copy-and-rename"
					} else if err := appendTo(input, b[off:n]); err != nil {
						return err
					}
					made = made.after(input, before)
					j.chunk(g, int(written)-g*perGen, countLines(b[off:n]), how, h)
					written += int64(countLines(b[off:n]))
					off = n
				}
			}
			return nil
		}()
	}()
	defer close(stop)

	var applied int64
	for k := 0; k < kills && applied < total; k++ {
		share := (total - applied) / int64(kills-k+1)
		threshold := min(total, applied+1+rng.Int64N(max(1, 2*share)))
		// INFO: the feed's decisions at each rotation, copy and restart.
		args := runArgs(input, data, "--follow", "--log-level", "info", "--batch", strconv.Itoa([]int{10, 100, 1000}[rng.IntN(3)]))
		c := startHub(t, dir, h, args...)
		if !c.waitApplied(threshold) {
			c.stop()
			t.Fatalf("kill %d: the ledger did not reach %d applied lines: %v\n%s", k, threshold, c.lastDurable(), tail(c.stderr.String()))
		}
		c.kill()
		c.checkNotAhead()
		applied = c.lastDurable()["applied"]
		j.note("run %d killed at %d applied (durable %v)", figures.runs.Load(), applied, c.lastDurable())
	}
	c := startHub(t, dir, h, runArgs(input, data, "--follow", "--log-level", "info")...)
	if err := <-writerDone; err != nil {
		t.Fatal(err)
	}
	// All applied, or (lines lost) the last file read to its end.
	last := int64(len(genLines[len(genLines)-1]))
	if !c.waitFor(func(d map[string]int64, _ int) bool { return d["applied"] >= total || d["position"] == last }) {
		c.stop()
		t.Fatalf("the ledger did not reach %d applied lines: %v\n%s", total, c.lastDurable(), tail(c.stderr.String()))
	}
	if err := c.stop(); err != nil {
		t.Fatal(err)
	}
	c.checkNotAhead()
	if r := check(t, data, files...); !r.ok {
		// Which chunks of which files are missing, and what the writer
		// and the runs did around them, before checkExact fails.
		j.report(t, r, filepath.Join(data, "output.csv"), gens)
	}
	checkExact(t, data, files...)
	t.Logf("%d generations of %d lines, %d rotations (%d of them waited for a record naming the file while an older one named its inode number), %d appends by copy-and-rename, %d kills",
		gens, perGen, rotations, early, copies, kills)
}

// journal is what the writer of TestRotationUnderKills did, for the
// report of a failure: each chunk (its generation, lines, how it was
// written, the inode at the path after it, the run then), each rotation
// (with the pointer record the writer saw) and each kill.
type journal struct {
	input  string
	perGen int
	start  time.Time

	mu     sync.Mutex
	notes  []string
	chunks []journalChunk
}

type journalChunk struct {
	gen, first, n int // lines first+1 .. first+n of generation gen
	how           string
	ino           uint64 // at the path after the write
	at            time.Duration
	run           int64 // the log file of the run started last (runNNNN.log)
	applied       int64
}

func newJournal(input string, perGen int) *journal {
	return &journal{input: input, perGen: perGen, start: time.Now()}
}

func (j *journal) note(format string, args ...any) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.notes = append(j.notes, fmt.Sprintf("%8.3fs ", time.Since(j.start).Seconds())+fmt.Sprintf(format, args...))
}

func (j *journal) chunk(gen, first, n int, how string, h *hub) {
	var ino uint64
	if fi, err := os.Stat(j.input); err == nil {
		ino = fi.Sys().(*syscall.Stat_t).Ino
	}
	h.mu.Lock()
	applied := h.applied
	h.mu.Unlock()
	j.mu.Lock()
	defer j.mu.Unlock()
	j.chunks = append(j.chunks, journalChunk{gen: gen, first: first, n: n, how: how, ino: ino, at: time.Since(j.start), run: figures.runs.Load(), applied: applied})
}

func (j *journal) rotated(gen int, to string) {
	var ino uint64
	if fi, err := os.Stat(to); err == nil {
		ino = fi.Sys().(*syscall.Stat_t).Ino
	}
	p, seq, _ := newestPointer(j.input + pointer.Suffix)
	j.note("gen %d: %s renamed to %s (inode %d); the pointer then: write %d, epoch %d position %d inode %d (run %d)",
		gen, filepath.Base(j.input), filepath.Base(to), ino, seq, p.Epoch, p.Position, p.Identity.Ino, figures.runs.Load())
}

// report logs the chunks whose lines are missing from the output file
// (ids g*1,000,000+1 on, see the generations), with the writer's notes.
func (j *journal) report(t *testing.T, r report, output string, gens int) {
	t.Helper()
	b, err := os.ReadFile(output)
	if err != nil {
		t.Logf("journal: read %s: %v", output, err)
		return
	}
	seen := map[int64]int{}
	for _, line := range bytes.Split(b, []byte{'\n'}) {
		if i := bytes.IndexByte(line, ','); i > 0 {
			if id, err := strconv.ParseInt(string(line[:i]), 10, 64); err == nil {
				seen[id]++
			}
		}
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	var out strings.Builder
	fmt.Fprintf(&out, "ledger check:\n%s\nchunks with lines missing from the output:\n", r.out)
	for _, c := range j.chunks {
		missing := 0
		for i := c.first + 1; i <= c.first+c.n; i++ {
			if seen[int64(c.gen)*1_000_000+int64(i)] == 0 {
				missing++
			}
		}
		if missing > 0 {
			fmt.Fprintf(&out, "  gen %d lines %d-%d: %d of %d missing; written by %s at %.3fs, inode %d after, run%04d.log, %d applied then\n",
				c.gen, c.first+1, c.first+c.n, missing, c.n, c.how, c.at.Seconds(), c.ino, c.run, c.applied)
		}
	}
	out.WriteString("the writer's notes:\n")
	for _, n := range j.notes {
		out.WriteString("  " + n + "\n")
	}
	t.Log(out.String())
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

// madeFile is the file at the writer's path: its inode, and a write
// sequence of the pointer file such that every record after it was
// written once the file was there (0: every record).
type madeFile struct {
	ino uint64
	seq uint64
	// old is the write sequence read before the write that made it: a
	// record at or below it is from before the file.
	old uint64
}

// after returns m for the file at input after a write, given before, the
// pointer file's write sequence read before it: when the write put another
// file there (a copy renamed over the path, a new file), its inode and the
// sequence after which records were written with the file there. That is
// before when no record was written meanwhile (then any record after it
// came once the file was there), else the sequence read now (a record of
// the moment of the rename may name the file replaced).
func (m madeFile) after(input string, before uint64) madeFile {
	fi, err := os.Stat(input)
	if err != nil {
		return madeFile{}
	}
	ino := fi.Sys().(*syscall.Stat_t).Ino
	if ino == m.ino {
		return m
	}
	_, now, _ := newestPointer(input + pointer.Suffix)
	if now == before {
		return madeFile{ino: ino, seq: before, old: before}
	}
	return madeFile{ino: ino, seq: now, old: before}
}

// pointerNames reports whether the pointer record p, of write sequence
// seq, names the file made: its inode, in a record written after the file
// came to the path. Its inode alone does not tell: the pointer may still
// name a copy that a copy-and-rename replaced, freed once the ledger that
// read it was killed, and whose inode number the next copy took. The
// writer then renamed away a file no ledger had opened, and the restart,
// not finding the pointer's file, read the new one from 0: the lines of
// the copies it never saw were lost (a long run at load 17-22: 2,100 lines,
// the last 21 chunks of a generation, written while the restarted ledger
// opened the store; the kill had freed the inode, the writer's next copy
// took it, and the writer rotated before the new run wrote its first
// pointer record).
func pointerNames(p pointer.Record, seq uint64, made madeFile) bool {
	return made.ino != 0 && p.Identity.Ino == made.ino && seq > made.seq
}

// waitPointerNames waits until a record of input's pointer file written
// since the file at input was made names it (see pointerNames), polling
// the pointer file each time the ledger reports progress; false when stop
// is closed, or with an error when the file at input is not the one made.
// It adds 1 to *early when a record from before the file named its inode
// number meanwhile (an inode-only check would have taken it).
func waitPointerNames(input string, made madeFile, h *hub, stop <-chan struct{}, early *int) (bool, error) {
	counted := false
	for {
		fi, err := os.Stat(input)
		if err != nil {
			return false, err
		}
		if ino := fi.Sys().(*syscall.Stat_t).Ino; ino != made.ino {
			return false, fmt.Errorf("the writer's path %s is inode %d, not the file it made (%d)", input, ino, made.ino)
		}
		p, seq, ok := newestPointer(input + pointer.Suffix)
		if ok && pointerNames(p, seq, made) {
			return true, nil
		}
		if ok && p.Identity.Ino == made.ino && seq <= made.old && !counted {
			counted = true
			*early++
		}
		h.mu.Lock()
		ch := h.changed
		h.mu.Unlock()
		select {
		case <-ch:
		case <-stop:
			return false, nil
		case <-time.After(50 * time.Millisecond): // the commit may follow the last durable event
		}
	}
}

// newestPointer decodes the valid record of a pointer file with the higher
// write sequence, and returns that sequence, without the pointer file's
// writer knowing.
func newestPointer(path string) (pointer.Record, uint64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return pointer.Record{}, 0, false
	}
	var best pointer.Record
	var bestSeq uint64
	found := false
	for off := 0; off+pointer.RecordSize <= len(b) && off <= pointer.SlotSize; off += pointer.SlotSize {
		p, err := pointer.Decode(b[off:])
		if err != nil {
			continue
		}
		if seq := binary.LittleEndian.Uint64(b[off+8:]); !found || seq > bestSeq {
			best, bestSeq, found = p, seq, true
		}
	}
	return best, bestSeq, found
}

// TestRotationWriterWaitsForARecordOfTheFile: the writer of
// TestRotationUnderKills renames a file away only once a pointer record
// written since the file came to the path names it. A record from before
// it that names the same inode number, as of a copy that a copy-and-rename
// replaced and the next copy's inode reused, does not count: with the
// inode alone the writer rotated a file no ledger had opened (a long run
// lost the last 2,100 lines of a generation).
func TestRotationWriterWaitsForARecordOfTheFile(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "in.csv")
	if err := appendTo(input, []byte("1,a,1\n")); err != nil {
		t.Fatal(err)
	}
	pf := pointer.Open(input+pointer.Suffix, pointer.Options{})
	defer pf.Close()
	pos := int64(0)
	store := func(ino uint64) {
		t.Helper()
		pos++ // a new record each time
		if err := pf.Store(pointer.Record{Epoch: 1, Position: pos, Identity: tidemark.Identity{Ino: ino}}); err != nil {
			t.Fatal(err)
		}
	}
	var made madeFile
	_, before, _ := newestPointer(input + pointer.Suffix)
	made = made.after(input, before)
	// The file made: a copy renamed over the path (another inode).
	_, before, _ = newestPointer(input + pointer.Suffix)
	if err := appendByCopy(input, []byte("2,a,1\n")); err != nil {
		t.Fatal(err)
	}
	first := made
	made = made.after(input, before)
	if made.ino == first.ino || made.seq != before {
		t.Fatalf("after a copy: %+v (before %+v, pointer write %d)", made, first, before)
	}
	// A record written before the copy came, naming its inode number:
	// here made as if the copy had come after it.
	store(made.ino)
	_, seq, _ := newestPointer(input + pointer.Suffix)
	stale := madeFile{ino: made.ino, seq: seq, old: seq}
	h := newHub()
	stop := make(chan struct{})
	time.AfterFunc(300*time.Millisecond, func() { close(stop) })
	var early int
	if ok, err := waitPointerNames(input, stale, h, stop, &early); ok || err != nil || early != 1 {
		t.Fatalf("a record written before the file came was taken for one naming it: %v %v (counted %d)", ok, err, early)
	}
	// The next record names it: the writer goes on.
	store(made.ino)
	if ok, err := waitPointerNames(input, stale, h, make(chan struct{}), &early); !ok || err != nil {
		t.Fatalf("a record written since the file came names it, and the writer did not see it: %v %v", ok, err)
	}
	// A record of another inode does not count either.
	store(made.ino + 1)
	if p, seq, _ := newestPointer(input + pointer.Suffix); pointerNames(p, seq, made) {
		t.Fatal("a record naming another inode was taken for one naming the file")
	}
}
