package main

// The mistakes of issue 12, made with the real ledger program as a user
// makes them: a deleted data folder, a restored backup, a damaged Pebble
// WAL, an account too long for the store, an input that is not a file, a
// store whose data is gone. Each ends exact (ledger check: nothing
// missing, nothing twice, state exact) or in a clear error and a non-zero
// exit, never in a silent exit 0.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/wal"
)

// promptly bounds a run that must end by itself at once (an error at
// start); a safety net, never what a test waits for.
const promptly = time.Minute

// runToEnd runs `ledger run args` in a child process until it exits and
// returns it with its log (stderr and events).
func runToEnd(t *testing.T, exe string, args []string, logPath string, timeout time.Duration) (*child, string) {
	t.Helper()
	c, err := startChild(exe, args, logPath)
	if err != nil {
		t.Fatal(err)
	}
	c.wait(timeout)
	return c, readLog(t, c)
}

// readLog returns what the child wrote to its log so far.
func readLog(t *testing.T, c *child) string {
	t.Helper()
	b, err := os.ReadFile(c.logFile.Name())
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// exitCode is the child's exit code: 0, the code it exited with, or -1
// when a signal ended it.
func exitCode(c *child) int {
	var ee *exec.ExitError
	switch {
	case c.err == nil:
		return 0
	case errors.As(c.err, &ee):
		return ee.ExitCode()
	}
	return -1
}

// mustSettle runs `ledger run args` to its end and fails t unless it
// exited 0; it returns the done event and the log.
func mustSettle(t *testing.T, exe string, args []string, logPath string) (map[string]int64, string) {
	t.Helper()
	c, log := runToEnd(t, exe, args, logPath, childTimeout)
	if c.err != nil {
		t.Fatalf("ledger run %s: %v\n%s", strings.Join(args, " "), c.err, log)
	}
	if ahead, err := realAhead(args[1], c.aheadEvents()); err != nil || ahead {
		t.Fatalf("the pointer was ahead of the state: %v %v", c.aheadEvents(), err)
	}
	d := c.doneEvent()
	if d == nil {
		t.Fatalf("no done event:\n%s", log)
	}
	return d, log
}

// checkCommand runs `ledger check` as the user does and fails t unless it
// exits 0 with nothing missing and nothing twice; then checkExact.
func checkCommand(t *testing.T, exe, data string, inputs ...string) string {
	t.Helper()
	args := []string{"check", "--data", data}
	for _, in := range inputs {
		args = append(args, "--input", in)
	}
	out, err := exec.Command(exe, args...).CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "lines missing: 0, output lines written twice: 0\n") {
		t.Fatalf("ledger check: %v\n%s", err, out)
	}
	checkExact(t, data, inputs...)
	return string(out)
}

// expectFailure fails t unless the child exited with exitFailed and its
// log holds every one of wants.
func expectFailure(t *testing.T, c *child, log string, wants ...string) {
	t.Helper()
	if code := exitCode(c); code != exitFailed {
		t.Fatalf("exit %d (%v), want %d:\n%s", code, c.err, exitFailed, log)
	}
	for _, w := range wants {
		if !strings.Contains(log, w) {
			t.Errorf("the log does not say %q:\n%s", w, log)
		}
	}
}

// fileSize returns the size of the file at path.
func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// The warning of a feed that reads from below its pointer because a store
// is behind it (feed.FileSource.ResumeFrom).
const rewindWarning = "level=WARN msg=\"feed: a store is behind the pointer"

// Deleting the data folder to start over used to read nothing (the pointer
// was at the end: "settled: 0 lines read", exit 0, every line missing).
// The store has no record of the feed now, so the feed reads the input
// from its start, says so at WARN, and every line is applied once.
func TestDeletedDataFolder(t *testing.T) {
	exe := ledgerExe(t)
	for _, store := range []string{"bbolt", "pebble"} {
		t.Run(store, func(t *testing.T) {
			dir := t.TempDir()
			input, data := filepath.Join(dir, "my.csv"), filepath.Join(dir, "my-data")
			if err := GenFile(input, GenOptions{Lines: 20_000, Accounts: 30, Seed: 21, MalformedEvery: 499}); err != nil {
				t.Fatal(err)
			}
			args := []string{"--input", input, "--data", data, "--store", store, "--progress", "none"}
			mustSettle(t, exe, args, filepath.Join(dir, "run1.log"))
			if err := os.RemoveAll(data); err != nil {
				t.Fatal(err)
			}
			done, log := mustSettle(t, exe, args, filepath.Join(dir, "run2.log"))
			if done["lines"] != 20_000 || done["skipped"] != 0 {
				t.Fatalf("after deleting the data folder: %v, want all 20000 lines read again, none skipped\n%s", done, log)
			}
			for _, want := range []string{rewindWarning, "the store has no record of the feed: reading the input from its start"} {
				if !strings.Contains(log, want) {
					t.Errorf("the run does not warn %q:\n%s", want, log)
				}
			}
			checkCommand(t, exe, data, input)
		})
	}
}

// Restoring the data folder from an older backup used to lose every line
// between the backup and the pointer. The backup is taken while the run is
// down part way (killed by SIGKILL once 8000 lines are saved), the run
// then goes to the end, and the backup is put back: the next run reads
// from exactly where the backup's store is, warns, and ends exact.
func TestRestoredBackup(t *testing.T) {
	exe := ledgerExe(t)
	for _, store := range []string{"bbolt", "pebble"} {
		t.Run(store, func(t *testing.T) {
			dir := t.TempDir()
			input, data, backup := filepath.Join(dir, "ledger.csv"), filepath.Join(dir, "data"), filepath.Join(dir, "backup")
			if err := GenFile(input, GenOptions{Lines: 30_000, Accounts: 40, Seed: 22, MalformedEvery: 997}); err != nil {
				t.Fatal(err)
			}
			args := []string{"--input", input, "--data", data, "--store", store, "--progress", "none"}
			// Killed by SIGKILL right after the save that holds 8000 lines.
			c, err := startChild(exe, append(append([]string{}, args...), "--batch", "1000", "--die-after-save", "8000"), filepath.Join(dir, "run1.log"))
			if err != nil {
				t.Fatal(err)
			}
			if c.wait(childTimeout); !c.killed() {
				t.Fatalf("run 1 was not killed part way: %v", c.err)
			}
			info := checkNotAhead(t, c, input, data, false)
			if err := os.CopyFS(backup, os.DirFS(data)); err != nil {
				t.Fatal(err)
			}
			mustSettle(t, exe, args, filepath.Join(dir, "run2.log"))
			checkExact(t, data, input)

			if err := os.RemoveAll(data); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(backup, data); err != nil {
				t.Fatal(err)
			}
			done, log := mustSettle(t, exe, args, filepath.Join(dir, "run3.log"))
			after, err := linesBetween(input, info.Applied.Position, fileSize(t, input))
			if err != nil {
				t.Fatal(err)
			}
			if done["lines"] != int64(after) || done["skipped"] != 0 {
				t.Fatalf("after restoring the backup (saved position %d): %v, want the %d lines after it read, none skipped\n%s", info.Applied.Position, done, after, log)
			}
			if !strings.Contains(log, rewindWarning) {
				t.Errorf("the run does not warn that the store is behind the pointer:\n%s", log)
			}
			checkCommand(t, exe, data, input)
		})
	}
}

// lastWALRecord returns the newest WAL of the Pebble database in dir and
// the offsets of its last record: where it starts and where the log ends.
func lastWALRecord(t *testing.T, dir string) (path string, start, end int64) {
	t.Helper()
	logs, err := wal.Scan(wal.Dir{FS: vfs.Default, Dirname: dir})
	if err != nil || len(logs) == 0 {
		t.Fatalf("the WALs of %s: %d, %v", dir, len(logs), err)
	}
	r := logs[len(logs)-1].OpenForRead()
	defer r.Close()
	start = -1
	for {
		rec, off, err := r.NextRecord()
		if err == nil {
			_, err = io.Copy(io.Discard, rec)
		}
		if errors.Is(err, io.EOF) {
			if start < 0 {
				t.Fatalf("the newest WAL of %s holds no record", dir)
			}
			return path, start, off.Physical
		}
		if err != nil {
			t.Fatalf("read the WAL %s at %d: %v", off.PhysicalFile, off.Physical, err)
		}
		path, start = off.PhysicalFile, off.Physical
	}
}

// One flipped byte in Pebble's WAL between two runs used to lose the last
// batches in silence while the pointer was past them. The run is killed
// once it has caught up with its input (every line saved, the pointer at
// the end, nothing in flight), so that the WAL's last record is a batch
// the pointer has passed; a byte inside that record is flipped. The next
// run reads the lost batch's lines again and ends exact.
func TestPebbleWALByteFlipped(t *testing.T) {
	exe := ledgerExe(t)
	dir := t.TempDir()
	input, data := filepath.Join(dir, "ledger.csv"), filepath.Join(dir, "data")
	const lines = 10_000
	if err := GenFile(input, GenOptions{Lines: lines, Accounts: 25, Seed: 23}); err != nil {
		t.Fatal(err)
	}
	args := []string{"--input", input, "--data", data, "--store", "pebble", "--progress", "none"}
	c, err := startChild(exe, append(append([]string{}, args...), "--follow", "--batch", "500"), filepath.Join(dir, "run1.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !c.waitApplied(lines, childTimeout) {
		t.Fatalf("run 1 never saved %d lines: %v", lines, c.wait(childTimeout))
	}
	size := fileSize(t, input)
	caughtUp := func() bool {
		for _, p := range pointerSlots(input + ".readPointer") {
			if p.Position == size {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(childTimeout); !caughtUp(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) || c.exitedNow() {
			t.Fatalf("the pointer never reached the end of the input (%d): %v", size, c.err)
		}
	}
	c.kill()
	if !c.killed() {
		t.Fatalf("run 1 was not killed: %v", c.err)
	}
	if ptr, err := loadPointer(input); err != nil || ptr.Position != size {
		t.Fatalf("the pointer after the kill: %+v %v, want %d", ptr, err, size)
	}

	walPath, start, end := lastWALRecord(t, filepath.Join(data, "pebble"))
	flip := start + (end-start)/2
	f, err := os.OpenFile(walPath, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, flip); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x40
	if _, err := f.WriteAt(b, flip); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("flipped the byte at %d of %s (its last record: %d..%d)", flip, walPath, start, end)

	done, log := mustSettle(t, exe, args, filepath.Join(dir, "run2.log"))
	if done["lines"] == 0 {
		t.Fatalf("the run after the damage read no line: the store lost nothing? %v\n%s", done, log)
	}
	if !strings.Contains(log, rewindWarning) {
		t.Errorf("the run does not warn that the store is behind the pointer:\n%s", log)
	}
	// The store says so, naming the file and where (state: pebble_wal.go).
	if want := fmt.Sprintf("state: pebble's WAL %s ends with a record that does not verify, at offset %d", walPath, start); !strings.Contains(log, want) || !strings.Contains(log, "level=WARN msg=\"state: pebble's WAL") {
		t.Errorf("the run does not report the damage (%q):\n%s", want, log)
	}
	t.Logf("the run after the damage read %d lines again", done["lines"])
	checkCommand(t, exe, data, input)
}

// A well-formed line whose account is 40,000 bytes, longer than a bbolt
// key can be, used to fail its batch's commit on every restart (a crash
// loop). The store refuses it in Apply now: the line is rejected into
// rejects.csv with the reason, the others are saved, the run settles with
// exit 0, a restart reads nothing again, and ledger check accounts for the
// rejected line. Pebble takes the key: there the line is applied.
func TestAccountTooLongForTheStore(t *testing.T) {
	exe := ledgerExe(t)
	var gen bytes.Buffer
	if err := Gen(&gen, GenOptions{Lines: 5000, Accounts: 10, Seed: 24}); err != nil {
		t.Fatal(err)
	}
	head := gen.Bytes()[:bytes.Index(gen.Bytes(), []byte("\n2501,"))+1]
	long := "5001," + strings.Repeat("a", 40_000) + ",4200\n"
	in := append(append(append([]byte{}, head...), long...), gen.Bytes()[len(head):]...)
	longEnd := int64(len(head) + len(long))
	for _, tc := range []struct {
		store   string
		refused int
	}{{"bbolt", 1}, {"pebble", 0}} {
		t.Run(tc.store, func(t *testing.T) {
			dir := t.TempDir()
			input, data := filepath.Join(dir, "ledger.csv"), filepath.Join(dir, "data")
			if err := os.WriteFile(input, in, 0o644); err != nil {
				t.Fatal(err)
			}
			args := []string{"--input", input, "--data", data, "--store", tc.store, "--progress", "none"}
			done, log := mustSettle(t, exe, args, filepath.Join(dir, "run1.log"))
			if done["lines"] != 5001 || done["applied"] != int64(5001-tc.refused) || done["rejected"] != int64(tc.refused) {
				t.Fatalf("%v, want 5001 lines, %d rejected\n%s", done, tc.refused, log)
			}
			r, err := CheckDir(data, input)
			if err != nil {
				t.Fatal(err)
			}
			if !r.OK() || r.Refused != tc.refused || r.Rejects != r.WantRejects || r.Twice != 0 {
				t.Fatalf("check: %+v", r)
			}
			if tc.refused == 1 {
				if !strings.Contains(r.FirstRefusal, fmt.Sprintf("line 5001 (position %d of epoch ", longEnd)) || !strings.Contains(r.FirstRefusal, "is longer than bbolt takes (32768 bytes)") {
					t.Errorf("the refusal does not name the line and say why: %s", r.FirstRefusal)
				}
				out, err := exec.Command(exe, "check", "--input", input, "--data", data).CombinedOutput()
				if err != nil || !strings.HasPrefix(string(out), "lines missing: 0, output lines written twice: 0\n") ||
					!strings.Contains(string(out), "well-formed lines rejected by the run (in rejects.csv, left out of the expected state): 1, first: line 5001") {
					t.Fatalf("ledger check: %v\n%s", err, out)
				}
			} else {
				checkCommand(t, exe, data, input)
			}
			done, log = mustSettle(t, exe, args, filepath.Join(dir, "run2.log"))
			if done["lines"] != 0 || done["applied"] != 0 {
				t.Fatalf("the restart read lines again: %v\n%s", done, log)
			}
		})
	}
}

// noPointerFile fails t if path has a pointer file (removing it, so that
// a regression does not leave /dev/zero.readPointer behind).
func noPointerFile(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Lstat(path + ".readPointer"); err == nil {
		os.Remove(path + ".readPointer")
		t.Errorf("a pointer file was created for %s", path)
	}
}

// A FIFO, /dev/zero or a directory as the input used to block in open(),
// spin, or retry forever, ignoring SIGTERM, and (as root) create
// /dev/zero.readPointer. Each is refused at start now, with an error that
// names the path and what it is, exit 1, and no pointer file, batch run or
// --follow.
func TestInputNotARegularFile(t *testing.T) {
	exe := ledgerExe(t)
	dir := t.TempDir()
	fifo := filepath.Join(dir, "ledger.fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	folder := filepath.Join(dir, "folder")
	if err := os.Mkdir(folder, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat("/dev/zero.readPointer"); err == nil {
		t.Fatal("/dev/zero.readPointer exists before the test: remove it")
	}
	for _, tc := range []struct{ name, path, kind string }{
		{"fifo", fifo, "is a FIFO (named pipe)"},
		{"dev-zero", "/dev/zero", "is a character device"},
		{"directory", folder, "is a directory"},
	} {
		for _, mode := range [][]string{nil, {"--follow"}} {
			t.Run(tc.name+strings.Join(mode, ""), func(t *testing.T) {
				data := filepath.Join(t.TempDir(), "data")
				args := append([]string{"--input", tc.path, "--data", data, "--progress", "none"}, mode...)
				c, log := runToEnd(t, exe, args, filepath.Join(t.TempDir(), "run.log"), promptly)
				expectFailure(t, c, log, tc.path+" "+tc.kind)
				noPointerFile(t, tc.path)
			})
		}
	}
}

// waitLog waits until the child's log holds s, and fails t if the child
// exits first.
func waitLog(t *testing.T, c *child, s string) {
	t.Helper()
	for deadline := time.Now().Add(childTimeout); !strings.Contains(readLog(t, c), s); time.Sleep(time.Millisecond) {
		if c.exitedNow() || time.Now().After(deadline) {
			t.Fatalf("the log never said %q (exit %v):\n%s", s, c.err, readLog(t, c))
		}
	}
}

// A run with --follow on an input that is not there yet waits for it,
// saying so at WARN with the path, and SIGTERM stops it cleanly. When a
// FIFO appears at the path, the run ends with an error naming it.
func TestFollowMissingInput(t *testing.T) {
	exe := ledgerExe(t)
	dir := t.TempDir()
	input := filepath.Join(dir, "ledger.csv")
	const waiting = "input does not exist; waiting for it"
	run := func(name string) *child {
		c, err := startChild(exe, []string{"--input", input, "--data", filepath.Join(dir, name), "--follow", "--progress", "none"}, filepath.Join(dir, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		waitLog(t, c, waiting)
		if log := readLog(t, c); !strings.Contains(log, "level=WARN") || !strings.Contains(log, input) {
			t.Fatalf("the warning does not name the input:\n%s", log)
		}
		return c
	}

	c := run("term")
	if err := c.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := c.wait(promptly); err != nil {
		t.Fatalf("SIGTERM while waiting for the input: %v\n%s", err, readLog(t, c))
	}

	c = run("fifo")
	if err := syscall.Mkfifo(input, 0o644); err != nil {
		t.Fatal(err)
	}
	c.wait(promptly)
	expectFailure(t, c, readLog(t, c), input+" is a FIFO (named pipe)")
}

// A typo in --input: a batch run ends at once, exit 1, naming the path.
func TestTypoInput(t *testing.T) {
	exe := ledgerExe(t)
	dir := t.TempDir()
	typo := filepath.Join(dir, "ledgr.csv")
	c, log := runToEnd(t, exe, []string{"--input", typo, "--data", filepath.Join(dir, "data"), "--progress", "none"}, filepath.Join(dir, "run.log"), promptly)
	expectFailure(t, c, log, typo, "no such file or directory")
}

// A data folder whose STORE file is there but whose store is not (deleted,
// or STORE edited to name the other backend) used to get a new, empty
// store, output.csv cut to 0 and every line missing, exit 0. The run now
// fails at start, saying what is wrong and what to do, and leaves the
// folder as it was, byte for byte.
func TestStoreDataMissing(t *testing.T) {
	exe := ledgerExe(t)
	for _, tc := range []struct {
		name, store string
		damage      func(data string) error
		wants       []string
	}{
		{"state.bolt deleted", "bbolt", func(data string) error { return os.Remove(filepath.Join(data, "state.bolt")) },
			[]string{"its STORE file names a bbolt store, but state.bolt", "restore the folder from a backup, or remove the whole folder to start over"}},
		{"pebble deleted", "pebble", func(data string) error { return os.RemoveAll(filepath.Join(data, "pebble")) },
			[]string{"its STORE file names a pebble store, but the Pebble database in pebble/ is missing", "restore the folder from a backup, or remove the whole folder to start over"}},
		{"STORE says pebble", "bbolt", func(data string) error { return editStore(data, "bbolt", "pebble") },
			[]string{"its STORE file names a pebble store, but the folder holds a bbolt store (state.bolt)", `put back "backend bbolt"`}},
		{"STORE says bbolt", "pebble", func(data string) error { return editStore(data, "pebble", "bbolt") },
			[]string{"its STORE file names a bbolt store, but the folder holds a Pebble database (pebble/)", `put back "backend pebble"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			input, data := filepath.Join(dir, "ledger.csv"), filepath.Join(dir, "data")
			if err := GenFile(input, GenOptions{Lines: 20_000, Accounts: 12, Seed: 25, MalformedEvery: 101}); err != nil {
				t.Fatal(err)
			}
			args := []string{"--input", input, "--data", data, "--store", tc.store, "--progress", "none"}
			mustSettle(t, exe, args, filepath.Join(dir, "run1.log"))
			if err := tc.damage(data); err != nil {
				t.Fatal(err)
			}
			before := snapshotDir(t, data)
			c, log := runToEnd(t, exe, args, filepath.Join(dir, "run2.log"), promptly)
			expectFailure(t, c, log, append([]string{"open store " + data}, tc.wants...)...)
			if after := snapshotDir(t, data); !equalSnapshots(before, after) {
				t.Fatalf("the failed run changed the folder:\nbefore %v\nafter  %v", names(before), names(after))
			}
		})
	}
}

// editStore replaces the backend named in the data folder's STORE file.
func editStore(data, from, to string) error {
	p := filepath.Join(data, "STORE")
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	edited := bytes.Replace(b, []byte("backend "+from), []byte("backend "+to), 1)
	if bytes.Equal(edited, b) {
		return fmt.Errorf("STORE does not name %s: %q", from, b)
	}
	return os.WriteFile(p, edited, 0o644)
}

// snapshotDir returns the contents of every regular file under dir, by
// path relative to dir (the LOCK files left out: locking touches them).
func snapshotDir(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := make(map[string][]byte)
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == "LOCK" {
			return err
		}
		b, err := os.ReadFile(path)
		rel, _ := filepath.Rel(dir, path)
		files[rel] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func equalSnapshots(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}

func names(m map[string][]byte) []string {
	var out []string
	for _, k := range sortedKeys(m) {
		out = append(out, fmt.Sprintf("%s (%d bytes)", k, len(m[k])))
	}
	return out
}

// Two `ledger run` on one input with two data folders at once used to share
// one pointer file: the second started at the first's pointer and missed
// lines, and the pointer moved backwards. The pointer file is locked by the
// run that follows it now: the second fails at start, naming the pointer
// file and the first's process; the first, killed with SIGKILL (paced, it
// is still reading then, on all but a very loaded machine) and restarted,
// ends exact; so does the second, run once the first is done.
func TestTwoRunsOnOneInput(t *testing.T) {
	exe := ledgerExe(t)
	dir := t.TempDir()
	input := filepath.Join(dir, "ledger.csv")
	first, second := filepath.Join(dir, "data1"), filepath.Join(dir, "data2")
	if err := GenFile(input, GenOptions{Lines: 50_000, Accounts: 30, Seed: 26, MalformedEvery: 501}); err != nil {
		t.Fatal(err)
	}
	args := func(data string) []string {
		return []string{"--input", input, "--data", data, "--progress", "none"}
	}
	c1, err := startChild(exe, append(args(first), "--follow", "--batch", "1000", "--pace", "50us"), filepath.Join(dir, "first.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !c1.waitApplied(5000, childTimeout) {
		t.Fatalf("the first run never saved 5000 lines: %v", c1.wait(childTimeout))
	}
	c2, log := runToEnd(t, exe, args(second), filepath.Join(dir, "second.log"), promptly)
	expectFailure(t, c2, log, fmt.Sprintf("%s.readPointer is held by process %d", input, c1.cmd.Process.Pid),
		"give this one a pointer file of its own", "--pointer-dir DIR")

	c1.kill()
	if !c1.killed() {
		t.Fatalf("the first run was not killed: %v", c1.err)
	}
	checkNotAhead(t, c1, input, first, false)
	mustSettle(t, exe, args(first), filepath.Join(dir, "first-again.log"))
	checkCommand(t, exe, first, input)
	mustSettle(t, exe, args(second), filepath.Join(dir, "second-again.log"))
	checkCommand(t, exe, second, input)
}

// Two runs on one input at once, each with its own data folder and its own
// pointer folder (--pointer-dir): both follow the whole input and end
// exact, and no pointer file is made beside the input.
func TestTwoRunsWithTheirOwnPointerDirs(t *testing.T) {
	exe := ledgerExe(t)
	dir := t.TempDir()
	input := filepath.Join(dir, "ledger.csv")
	const lines = 20_000
	if err := GenFile(input, GenOptions{Lines: lines, Accounts: 30, Seed: 27, MalformedEvery: 333}); err != nil {
		t.Fatal(err)
	}
	m, err := ModelOf(input)
	if err != nil {
		t.Fatal(err)
	}
	var runs []*child
	for i := 1; i <= 2; i++ {
		data, pointers := filepath.Join(dir, fmt.Sprintf("data%d", i)), filepath.Join(dir, fmt.Sprintf("pointers%d", i))
		c, err := startChild(exe, []string{"--input", input, "--data", data, "--pointer-dir", pointers, "--follow", "--batch", "1000", "--progress", "none"},
			filepath.Join(dir, fmt.Sprintf("run%d.log", i)))
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, c)
	}
	for i, c := range runs {
		if !c.waitApplied(m.Applied, childTimeout) {
			t.Fatalf("run %d never saved the %d lines: %v\n%s", i+1, m.Applied, c.wait(childTimeout), readLog(t, c))
		}
	}
	for i, c := range runs {
		if err := c.signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := c.wait(childTimeout); err != nil {
			t.Fatalf("run %d: %v\n%s", i+1, err, readLog(t, c))
		}
		if ahead, err := realAhead(input, c.aheadEvents()); err != nil || ahead {
			t.Fatalf("run %d: the pointer was ahead of the state: %v %v", i+1, c.aheadEvents(), err)
		}
		pointers := filepath.Join(dir, fmt.Sprintf("pointers%d", i+1))
		if _, err := os.Stat(filepath.Join(pointers, "ledger.csv.readPointer")); err != nil {
			t.Errorf("run %d has no pointer file in its folder: %v", i+1, err)
		}
		checkCommand(t, exe, filepath.Join(dir, fmt.Sprintf("data%d", i+1)), input)
	}
	noPointerFile(t, input)
}
