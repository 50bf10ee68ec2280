package state

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// A restart need not read the whole output file it left checked, and must
// read the whole of one changed while it was closed.
//
// An open checks an output file's committed bytes against the CRC-32C the
// store recorded with them. For a file larger than VerifyMaxBytes that is
// exactly as the store left it at its last clean close, the open checks
// only the last batch's bytes and leaves the rest to a check in the
// background a second later (checkInBackground): a restart that applies a
// few lines does not read 380 MB. Any other file is read whole before the
// open returns, so that a byte changed while the store was closed (an
// editor, a copy or a restore over it, a test damaging it) is found before
// a line is applied, by a run of any length: a check left to the
// background would never run in a run shorter than its delay.
//
// "Exactly as left" is the record outputsLeftFile, beside the outputs:
// written at a clean close (everything flushed, the store never failed,
// each file checked at its open or vouched for by the record before, and
// its background check, if it ran, clean), it holds each file's size, its
// modification time (set a second back first, so that any later write
// moves it, however coarse the file system's clock), its device and inode,
// as bbolt's state.bolt.checked does for its file. An open removes the
// record once it has read it, so that a crash, or damage the background
// check found in a run that then died, leaves none. The record is written
// without a sync: one lost or torn by a crash of the machine only means a
// whole check at the next open.
//
// What that gives up: damage at rest that changes no field of the record
// (a bit flipped by the disk under an unchanged inode and modification
// time) is found by the background check, a second into the run, not
// before the first commits; it fails the store then.

// outputsLeftFile names the record of the output files left checked.
const outputsLeftFile = "state.outputs.checked"

const outputsLeftHeader = "tidemark output files left checked"

// fileState is what each record of a file left checked compares (the
// outputs' here, bbolt's in boltleft.go, Pebble's in pebble_left.go): the
// file's size, modification time, device and inode.
type fileState struct {
	size, mtime int64
	dev, ino    uint64
}

// stateOf returns the state of the file fi describes; ok is false where
// the file system gives no inode.
func stateOf(fi fs.FileInfo) (s fileState, ok bool) {
	dev, ino, ok := fileID(fi)
	return fileState{size: fi.Size(), mtime: fi.ModTime().UnixNano(), dev: dev, ino: ino}, ok
}

// outputLeft is how a store left an output file (its size never 0 in a
// record).
type outputLeft struct{ fileState }

// statOutputLeft returns the state of the file at path; the zero
// outputLeft when it cannot tell (no file, no inode).
func statOutputLeft(path string) outputLeft {
	fi, err := os.Stat(path)
	if err != nil {
		return outputLeft{}
	}
	s, ok := stateOf(fi)
	if !ok {
		return outputLeft{}
	}
	return outputLeft{s}
}

// leaveOutput sets the closed file's modification time a second back and
// returns its state; the zero outputLeft when either fails.
func leaveOutput(path string) outputLeft {
	back := time.Now().Add(-time.Second)
	if err := os.Chtimes(path, back, back); err != nil {
		return outputLeft{}
	}
	return statOutputLeft(path)
}

// outputsLeft reads the record of the last clean close, by output name:
// none (nil) when it is missing or does not parse.
func (c *core) outputsLeft() map[string]outputLeft {
	data, err := os.ReadFile(filepath.Join(c.dir, outputsLeftFile))
	if err != nil {
		return nil
	}
	left, ok := parseOutputsLeft(data)
	if !ok {
		return nil
	}
	return left
}

// parseOutputsLeft parses a record written by formatOutputsLeft.
func parseOutputsLeft(data []byte) (map[string]outputLeft, bool) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	if !sc.Scan() || sc.Text() != outputsLeftHeader {
		return nil, false
	}
	left := make(map[string]outputLeft)
	for sc.Scan() {
		var name string
		var l outputLeft
		n, err := fmt.Sscanf(sc.Text(), "%q %d %d %d %d", &name, &l.size, &l.mtime, &l.dev, &l.ino)
		if err != nil || n != 5 || l.size <= 0 {
			return nil, false
		}
		left[name] = l
	}
	return left, sc.Err() == nil
}

// formatOutputsLeft is the record of left.
func formatOutputsLeft(left map[string]outputLeft) string {
	var b strings.Builder
	b.WriteString(outputsLeftHeader + "\n")
	for name, l := range left {
		fmt.Fprintf(&b, "%s %d %d %d %d\n", strconv.Quote(name), l.size, l.mtime, l.dev, l.ino)
	}
	return b.String()
}

// recordOutputsLeft writes the record of left when write is set and left
// holds a file, and removes the record otherwise. A record that cannot be
// written is a warning: the next open checks the files whole.
func (c *core) recordOutputsLeft(left map[string]outputLeft, write bool) {
	path := filepath.Join(c.dir, outputsLeftFile)
	var err error
	if write && len(left) > 0 {
		err = writeRecord(path, formatOutputsLeft(left))
	} else if _, serr := os.Lstat(path); serr != nil {
		return // none to remove (or no folder: the engine keeps the outputs)
	} else if err = os.Remove(path); errors.Is(err, fs.ErrNotExist) {
		err = nil
	}
	if err != nil {
		c.log.Warn("state: could not record how the store left its output files: the next open checks them whole", "store", c.dir, "file", path, "err", err)
	}
}
