package state

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	pebblevfs "github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/wal"
)

// The WAL tests flip a real byte in the real WAL of a Pebble store that a
// child process wrote and was killed in (SIGKILL, so that the WAL holds
// the batches: a clean Close would flush them into a table), then reopen
// the store and check what it says, and that what it reports applied is
// what it holds.

const (
	envWALChild = "TIDEMARK_STATE_WAL_CHILD"
	walLines    = 350
	walBatch    = 10
)

// TestWALChild is the child; it does nothing in a normal run. It applies
// walLines lines to the Pebble store in WAL_DIR, each writing its own key
// with a 300-byte value, in batches of walBatch, flushes, prints
// "flushed" and waits to be killed; or, with WAL_CLOSE=1, closes the
// store, prints "closed" and exits.
func TestWALChild(t *testing.T) {
	if os.Getenv(envWALChild) == "" {
		return
	}
	o := &Options{Logger: quietLogger(), BatchSize: walBatch, BatchInterval: 1 << 40, Unbound: true}
	s, err := OpenPebble(os.Getenv("WAL_DIR"), o)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	val := bytes.Repeat([]byte("v"), 300)
	for n := 1; n <= walLines; n++ {
		_, err := s.Apply(context.Background(), del("f", 1, n), func(tx *Tx) error {
			if _, err := tx.AddInt64([]byte("count"), 1); err != nil {
				return err
			}
			return tx.Bucket("lines").Put([]byte(strconv.Itoa(n)), val)
		})
		if err != nil {
			fmt.Println("error", err)
			os.Exit(2)
		}
	}
	if os.Getenv("WAL_CLOSE") == "1" {
		if err := s.Close(); err != nil {
			fmt.Println("error", err)
			os.Exit(2)
		}
		fmt.Println("closed")
		os.Exit(0)
	}
	if err := s.Flush(context.Background()); err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	fmt.Println("flushed")
	select {} // wait for the kill
}

// walStore makes a Pebble store in a new folder (made and closed once, so
// that the child's WAL is not the database's first), runs the child in it
// and kills it once it flushed (or lets it close the store, if closed). It
// returns the folder.
func walStore(t *testing.T, closed bool) string {
	t.Helper()
	dir := t.TempDir()
	s := mustOpen(t, backendNamed(Pebble), dir, testOpts())
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestWALChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), envWALChild+"=1", "WAL_DIR="+dir, "WAL_CLOSE="+map[bool]string{true: "1", false: "0"}[closed])
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if line := sc.Text(); line == "flushed" || line == "closed" {
			break
		} else {
			t.Fatalf("child: %s", line)
		}
	}
	if !closed {
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	io.Copy(io.Discard, out)
	if err := cmd.Wait(); closed && err != nil {
		t.Fatalf("child: %v", err)
	}
	return dir
}

// walRecords returns the newest WAL of the store in dir and the offsets
// of its records, as Pebble reads them.
func walRecords(t *testing.T, dir string) (string, []int64) {
	t.Helper()
	logs, err := wal.Scan(wal.Dir{FS: pebblevfs.Default, Dirname: filepath.Join(dir, pebbleDir)})
	if err != nil || len(logs) == 0 {
		t.Fatalf("no WAL in %s: %v", dir, err)
	}
	rr := logs[len(logs)-1].OpenForRead()
	defer rr.Close()
	var file string
	var offs []int64
	for {
		r, off, err := rr.NextRecord()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("reading the WAL before the damage: %v", err)
			}
			return file, offs
		}
		io.Copy(io.Discard, r)
		file = off.PhysicalFile
		offs = append(offs, off.Physical)
	}
}

// flip flips a bit of the byte at off in file.
func flip(t *testing.T, file string, off int64) {
	t.Helper()
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x10
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// lockedBuffer is a log's destination that Pebble's goroutines may write
// to as well.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// checkHeld opens the store in dir and checks that what it reports applied
// is what it holds: the count, and the key of every line up to it and of
// none after. It returns the line applied and the store's log.
func checkHeld(t *testing.T, dir string) (int64, string) {
	t.Helper()
	var logs lockedBuffer
	o := testOpts()
	o.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := OpenDir(dir, o)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	l, _ := s.Applied("f")
	n := l.Position / lineLen
	if count := getInt(t, s, "count"); count != n {
		t.Fatalf("count %d, but the store reports line %d applied", count, n)
	}
	err = s.View(func(tx *Tx) error {
		for m := int64(1); m <= walLines; m++ {
			_, ok, err := tx.Bucket("lines").Get([]byte(strconv.FormatInt(m, 10)))
			if err != nil {
				return err
			}
			if ok != (m <= n) {
				return fmt.Errorf("line %d held: %v, with line %d reported applied", m, ok, n)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n, logs.String()
}

// TestPebbleWALDamage is "one flipped byte in Pebble's WAL between two
// runs: the store silently lost its last batches". Pebble takes damage in
// the last 32 KiB of its newest WAL for the log's end and drops the rest
// in silence; the store now says so, naming the file and the offset, and
// what it reports applied is never ahead of what it holds. Damage that
// later synced records prove (an earlier block) is an error naming the
// file. And a store closed cleanly keeps nothing in its WAL.
func TestPebbleWALDamage(t *testing.T) {
	t.Run("undamaged", func(t *testing.T) {
		t.Parallel()
		dir := walStore(t, false)
		if n, logs := checkHeld(t, dir); n != walLines || logs != "" {
			t.Fatalf("after the kill: line %d applied, want %d; log: %s", n, walLines, logs)
		}
	})
	for _, tc := range []struct {
		name string
		// at picks the record to damage among the WAL's records.
		at func(file string, offs []int64) int
		// later says whether records of the log follow the damaged one.
		later bool
	}{
		{"last record", func(_ string, offs []int64) int { return len(offs) - 1 }, false},
		{"a record of the last block", func(file string, offs []int64) int {
			// The file's last block: the last record may end in a block
			// after the one it starts in.
			last := (fileSize(file) - 1) / walBlock
			for i, off := range offs {
				if off/walBlock == last && off%walBlock > 0 && i < len(offs)-3 {
					return i
				}
			}
			return -1
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := walStore(t, false)
			file, offs := walRecords(t, dir)
			i := tc.at(file, offs)
			if i < 0 || offs[len(offs)-1] < walBlock {
				t.Fatalf("the WAL's %d records (the last at %d) do not fit the case", len(offs), offs[len(offs)-1])
			}
			// In the payload, past the chunk's header of 19 bytes.
			flip(t, file, offs[i]+walSyncHeader+8)
			n, logs := checkHeld(t, dir)
			if n >= walLines {
				t.Fatalf("line %d applied after the damage: the damage was not where the test thought", n)
			}
			t.Logf("damaged record %d of %d at %d: line %d applied; the store said: %s", i+1, len(offs), offs[i], n, logs)
			for _, want := range []string{"WARN", file, "offset=" + strconv.FormatInt(offs[i], 10), "re-read"} {
				if !strings.Contains(logs, want) {
					t.Fatalf("the store's log does not say %q:\n%s", want, logs)
				}
			}
			if tc.later != strings.Contains(logs, "later records") {
				t.Fatalf("the log does not tell whether later records follow (%v):\n%s", tc.later, logs)
			}
			// The next open finds the log Pebble rewrote: no warning.
			if _, logs := checkHeld(t, dir); logs != "" {
				t.Fatalf("the second reopen warns again: %s", logs)
			}
		})
	}
	t.Run("an earlier block", func(t *testing.T) {
		t.Parallel()
		dir := walStore(t, false)
		file, offs := walRecords(t, dir)
		if offs[len(offs)-1] < walBlock {
			t.Fatalf("the WAL is shorter than a block")
		}
		flip(t, file, offs[2]+walSyncHeader+8)
		_, err := OpenDir(dir, testOpts())
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("reopen with a damaged record in the WAL's first block: %v", err)
		}
		t.Logf("the store said: %v", err)
		for _, want := range []string{file, "offset " + strconv.FormatInt(offs[2], 10), "backup", "remove the whole folder"} {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("the error does not say %q: %v", want, err)
			}
		}
	})
	t.Run("clean close", func(t *testing.T) {
		t.Parallel()
		dir := walStore(t, true)
		// Every byte of every WAL flipped: nothing the store holds is in one.
		logs, err := wal.Scan(wal.Dir{FS: pebblevfs.Default, Dirname: filepath.Join(dir, pebbleDir)})
		if err != nil {
			t.Fatal(err)
		}
		for _, ll := range logs {
			for i := 0; i < ll.NumSegments(); i++ {
				_, path := ll.SegmentLocation(i)
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				for j := range b {
					b[j] ^= 0xff
				}
				if err := os.WriteFile(path, b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		if n, _ := checkHeld(t, dir); n != walLines {
			t.Fatalf("after a clean close and a damaged WAL: line %d applied, want %d", n, walLines)
		}
	})
}

func fileSize(p string) int64 { fi, _ := os.Stat(p); return fi.Size() }
