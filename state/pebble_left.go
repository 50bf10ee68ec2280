package state

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	iofs "io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	pebblevfs "github.com/cockroachdb/pebble/v2/vfs"
)

// A restart need not check the levels of a Pebble database the store
// itself left checked.
//
// A Pebble database of at most VerifyMaxBytes is opened read-only at open
// and its levels checked (pebbleEngine.check, db.CheckLevels): every key
// in order, every block read and its checksum checked. That costs about
// 2 µs a key: 0.2 s at 100,000 keys, 1.2 s at 1,000,000, for a process
// that may restart to apply one line.
//
// So a store that closes cleanly, with its database checked (at this open,
// made by it, or vouched for by the record of the previous close) and never
// found damaged, records how it left the database's files: pebbleLeftFile,
// in the store's folder, lists every file of pebble/ (the LOCK aside) with
// its size, modification time, device and inode. The store first sets each
// file's modification time a second back, so that any later write to it
// gives it a newer one, however coarse the file system's clock. The record
// is removed at the next open, before Pebble writes anything. An open that
// finds the files exactly so (the same names, sizes, times and inodes)
// does not check the levels before it opens; it reads the whole database
// in the background instead, a second after the open (every block's
// checksum and every value's), and damage found there fails the store as
// any damage does. Anything else (no record, a file added, removed, written
// or replaced, a crash: the record was removed at open) and the levels are
// checked before the open, as before. The record is not synced (see
// writeRecord).
//
// What that gives up: damage at rest that changes nothing the record
// compares (a bit flipped by the disk under an unchanged inode and
// modification time) is found by Pebble's checksum of the block when it is
// read, or by the background read, not before the open. A database larger
// than VerifyMaxBytes was never checked at open, and is not recorded.

// pebbleLeftFile names the record in the store's folder.
const pebbleLeftFile = "state.pebble.checked"

const pebbleLeftHeader = "tidemark pebble database left checked"

// pebbleLeft is how a store left the files of its Pebble database, in
// the order of their names.
type pebbleLeft []pebbleLeftFileState

// pebbleLeftFileState is one file of a pebbleLeft.
type pebbleLeftFileState struct {
	name string
	fileState
}

func (l pebbleLeft) String() string {
	var b strings.Builder
	b.WriteString(pebbleLeftHeader + "\n")
	for _, f := range l {
		fmt.Fprintf(&b, "file %s size %d mtime %d dev %d ino %d\n", f.name, f.size, f.mtime, f.dev, f.ino)
	}
	return b.String()
}

// parsePebbleLeft parses a record written by pebbleLeft.String.
func parsePebbleLeft(data []byte) (pebbleLeft, bool) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	if !sc.Scan() || sc.Text() != pebbleLeftHeader {
		return nil, false
	}
	var l pebbleLeft
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 10 || f[0] != "file" || f[2] != "size" || f[4] != "mtime" || f[6] != "dev" || f[8] != "ino" {
			return nil, false
		}
		s := pebbleLeftFileState{name: f[1]}
		var errs [4]error
		s.size, errs[0] = strconv.ParseInt(f[3], 10, 64)
		s.mtime, errs[1] = strconv.ParseInt(f[5], 10, 64)
		s.dev, errs[2] = strconv.ParseUint(f[7], 10, 64)
		s.ino, errs[3] = strconv.ParseUint(f[9], 10, 64)
		if errors.Join(errs[:]...) != nil || (len(l) > 0 && l[len(l)-1].name >= s.name) {
			return nil, false
		}
		l = append(l, s)
	}
	return l, sc.Err() == nil && len(l) > 0
}

// statPebbleLeft returns the state of the files of the database at path.
// ok is false where the file system gives no inode.
func statPebbleLeft(path string) (l pebbleLeft, ok bool, err error) {
	es, err := os.ReadDir(path)
	if err != nil {
		return nil, false, err
	}
	for _, de := range es {
		if de.Name() == "LOCK" {
			continue
		}
		fi, err := os.Lstat(filepath.Join(path, de.Name()))
		if err != nil {
			return nil, false, err
		}
		s, ok := stateOf(fi)
		if !ok || !fi.Mode().IsRegular() {
			return nil, false, nil
		}
		l = append(l, pebbleLeftFileState{name: de.Name(), fileState: s})
	}
	slices.SortFunc(l, func(a, b pebbleLeftFileState) int { return strings.Compare(a.name, b.name) })
	return l, len(l) > 0, nil
}

// recordsLeft reports whether the engine reads and writes the record: its
// files are the operating system's (a test's file system may not be).
// With VerifyMaxBytes negative, nothing is checked: an open removes the
// record and trusts none, and a close writes none.
func (e *pebbleEngine) recordsLeft() bool { return e.fs == pebblevfs.Default }

// takeLeft reports whether the database is as the record in the store's
// folder says the store left it checked, and removes the record: Pebble's
// open writes to the database (a new MANIFEST, a new WAL), and a crash from
// here on must leave no record of a state the files are no longer in.
func (e *pebbleEngine) takeLeft() bool {
	path := filepath.Join(e.dir, pebbleLeftFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	rec, ok := parsePebbleLeft(data)
	now, nowOK, serr := statPebbleLeft(e.path)
	if err := os.Remove(path); err != nil && !errors.Is(err, iofs.ErrNotExist) {
		e.log.Warn("state: could not remove the record of the checked Pebble database: its levels are checked at open", "store", e.dir, "file", path, "err", err)
		return false
	}
	return ok && nowOK && serr == nil && slices.Equal(rec, now)
}

// recordLeft writes the record once the database is closed. Each file's
// modification time goes a second back first, so that a later write gives
// it another. A record that cannot be written is a warning: the next open
// checks the levels.
func (e *pebbleEngine) recordLeft() {
	path := filepath.Join(e.dir, pebbleLeftFile)
	err := func() error {
		back := time.Now().Add(-time.Second)
		es, err := os.ReadDir(e.path)
		if err != nil {
			return err
		}
		for _, de := range es {
			if de.Name() == "LOCK" {
				continue
			}
			if err := os.Chtimes(filepath.Join(e.path, de.Name()), back, back); err != nil {
				return err
			}
		}
		l, ok, err := statPebbleLeft(e.path)
		if err != nil || !ok {
			return err
		}
		return writeRecord(path, l.String())
	}()
	if err != nil {
		_ = os.Remove(path)
		e.log.Warn("state: could not record the checked Pebble database: the next open checks its levels", "store", e.dir, "file", path, "err", err)
	}
}

// writeRecord writes data to path through a temporary file renamed over
// it. It does not sync: a record lost or torn by a crash of the machine
// does not parse or does not match its files, and only means a check at
// the next open (the files it describes were synced before it).
func writeRecord(path, data string) error {
	tmp := path + ".tmp"
	err := os.WriteFile(tmp, []byte(data), 0o644)
	if err == nil {
		err = os.Rename(tmp, path)
	}
	return err
}

// pebbleBgCheck is the read of a database left checked, in the background
// (see checkLeftInBackground).
type pebbleBgCheck struct {
	done chan struct{} // closed with err set
	err  error
	stop chan struct{} // closed by close to end the read
}

// checkLeftInBackground reads the whole database a moment after an open
// that found it as the store left it checked, so that damage at rest that
// the record cannot see is found without a read of it: every block read
// checks its checksum, value checks every value (nil: none). Damage found
// fails the store (fail) and every later read of the engine. Nothing waits
// for the read; close ends it.
func (e *pebbleEngine) checkLeftInBackground(value func(k, v []byte) error, log *slog.Logger, fail func(error)) {
	bg := &pebbleBgCheck{done: make(chan struct{}), stop: make(chan struct{})}
	e.bg = bg
	go func() {
		defer close(bg.done)
		if !delayed(nil, bg.stop) {
			return
		}
		start := time.Now()
		keys, err := e.readAll(value, bg.stop)
		switch {
		case errors.Is(err, errCheckStopped):
		case err != nil:
			e.vouched.Store(false)
			ce := (*CorruptError)(nil)
			if !errors.As(err, &ce) {
				// Pebble's iterator does not always keep the mark of its
				// corruption errors (a block's checksum): whatever stops a
				// read of the whole database is damage to it.
				ce = &CorruptError{Backend: Pebble, Dir: e.dir, File: e.path, Record: "the Pebble database",
					Detail: "a read of every block stopped (" + firstLine(err.Error()) + ")"}
				err = errors.Join(ce, err)
			}
			log.Error("state: the background read of the Pebble database found damage: the store refuses every read and commit from now on",
				"store", e.dir, "path", e.path, "err", err)
			bg.err = err
			fail(err)
			e.broken.CompareAndSwap(nil, ce)
		default:
			log.Info("state: the Pebble database passed its background read", "store", e.dir, "path", e.path, "keys", keys, "took", time.Since(start).Round(time.Millisecond))
		}
	}()
}

// readAll reads every key and value of the database, value checking each
// value, until stop is closed (errCheckStopped).
func (e *pebbleEngine) readAll(value func(k, v []byte) error, stop <-chan struct{}) (n int, err error) {
	defer e.recoverFatal(&err)
	it, err := e.db.NewIter(nil)
	if err != nil {
		return 0, e.damaged(err)
	}
	for it.First(); it.Valid(); it.Next() {
		if n++; n%1024 == 0 {
			select {
			case <-stop:
				return n, errors.Join(errCheckStopped, it.Close())
			default:
			}
		}
		v, err := it.ValueAndErr()
		if err == nil && value != nil {
			err = value(it.Key(), v)
		}
		if err != nil {
			return n, errors.Join(e.damaged(err), it.Close())
		}
	}
	return n, e.damaged(it.Close())
}

// stopChecking ends the background read, if any, and waits for it.
func (e *pebbleEngine) stopChecking() {
	if e.bg != nil {
		stopAndWait(e.bg.stop, e.bg.done)
	}
}

// brokenErr is the damage the background read found, nil before: every
// later call of the engine returns it.
func (e *pebbleEngine) brokenErr() error {
	if ce := e.broken.Load(); ce != nil {
		return ce
	}
	return nil
}
