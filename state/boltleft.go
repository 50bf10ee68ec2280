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

	bolt "go.etcd.io/bbolt"
)

// A restart need not wait for the check of a file the store itself left
// checked.
//
// The check of a bbolt file (boltcheck.go) reads the whole file: 1.4 GiB
// for 10,000,000 values, 5 to 7 s on a loaded machine, and a file larger
// than VerifyMaxBytes is checked in the background with its first commit
// held until the check passed. A process that restarts on such a store to
// apply a few lines waited for all of it; on a smaller file, the open
// itself waited for the check (a twentieth of a second at 100,000 values,
// a run of a few thousand lines pays it whole).
//
// So a store that closes cleanly, with its file checked (at this open, or
// vouched for by the record of the previous close) and never found
// damaged, records how it left the file: boltLeftFile, beside it, holds
// the file's size, its modification time, its device and inode, and the
// transaction of its meta page. The store first sets the file's
// modification time a second back, so that any later write to the file
// (another program, an editor, a copy over it, a test damaging it) gives
// it a newer one, however coarse the file system's clock. The next open
// that finds the file exactly so (same size, time, inode and transaction),
// whatever its size, still checks the whole file in the background (a
// second after the open, or at once when a snapshot, a backup or an
// upgrade waits for it), and damage it finds fails the store as before;
// but its open and its commits do not wait for the check. The record is
// written without a sync: one lost or torn by a crash of the machine only
// means a check before the next commit.
// Anything else (no record, a record of another state of the file, a crash
// after a commit, a file copied or restored: another inode) and the
// commits wait, as before.
//
// What that gives up: damage at rest that changes no byte of what the
// record compares (a bit flipped by the disk under an unchanged inode and
// modification time) is found by the background check, not before the
// first commits; the store fails then, and its folder must be restored
// from a backup, as for any damage. The record is removed when the check
// finds damage, so the next open waits again.

// boltLeftFile names the record beside the bbolt file.
const boltLeftFile = boltFile + ".checked"

const boltLeftHeader = "tidemark bbolt file left checked"

// boltLeft is how a store left its bbolt file.
type boltLeft struct {
	fileState
	txid uint64
}

func (l boltLeft) String() string {
	return fmt.Sprintf("%s\nsize %d\nmtime %d\ndev %d\nino %d\ntxid %d\n", boltLeftHeader, l.size, l.mtime, l.dev, l.ino, l.txid)
}

// statLeft returns the state of the file at path, as committed by txid.
func statLeft(path string, txid uint64) (boltLeft, bool, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return boltLeft{}, false, err
	}
	s, ok := stateOf(fi)
	return boltLeft{fileState: s, txid: txid}, ok, nil
}

// parseLeft parses a record written by boltLeft.String.
func parseLeft(data []byte) (boltLeft, bool) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	if !sc.Scan() || sc.Text() != boltLeftHeader {
		return boltLeft{}, false
	}
	var l boltLeft
	fields := map[string]func(string) error{
		"size":  func(s string) (err error) { l.size, err = strconv.ParseInt(s, 10, 64); return },
		"mtime": func(s string) (err error) { l.mtime, err = strconv.ParseInt(s, 10, 64); return },
		"dev":   func(s string) (err error) { l.dev, err = strconv.ParseUint(s, 10, 64); return },
		"ino":   func(s string) (err error) { l.ino, err = strconv.ParseUint(s, 10, 64); return },
		"txid":  func(s string) (err error) { l.txid, err = strconv.ParseUint(s, 10, 64); return },
	}
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		set := fields[name]
		if !ok || set == nil || set(val) != nil {
			return boltLeft{}, false
		}
		delete(fields, name)
	}
	return l, len(fields) == 0
}

// leftChecked reports whether the file is as the record beside it says the
// store left it, checked.
func (e *boltEngine) leftChecked() bool {
	data, err := os.ReadFile(filepath.Join(e.dir, boltLeftFile))
	if err != nil {
		return false
	}
	rec, ok := parseLeft(data)
	if !ok {
		return false
	}
	var txid uint64
	if err := e.db.View(func(tx *bolt.Tx) error { txid = uint64(tx.ID()); return nil }); err != nil {
		return false
	}
	now, ok, err := statLeft(e.path, txid)
	return err == nil && ok && now == rec
}

// forgetLeft removes the record: the file was found damaged.
func (e *boltEngine) forgetLeft() {
	if err := os.Remove(filepath.Join(e.dir, boltLeftFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		e.log().Warn("state: could not remove the record of the checked bbolt file; remove it by hand before the next start", "store", e.dir, "file", filepath.Join(e.dir, boltLeftFile), "err", err)
	}
}

// recordLeft writes the record once the database is closed: its caller
// read txid before the close. The file's modification time goes a second
// back first, so that a later write gives it another. A record that cannot
// be written is a warning: the next open waits for its check.
func (e *boltEngine) recordLeft(txid uint64) {
	path := filepath.Join(e.dir, boltLeftFile)
	err := func() error {
		back := time.Now().Add(-time.Second)
		if err := os.Chtimes(e.path, back, back); err != nil {
			return err
		}
		l, ok, err := statLeft(e.path, txid)
		if err != nil || !ok {
			return errors.Join(err, os.Remove(path))
		}
		return writeRecord(path, l.String())
	}()
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		e.log().Warn("state: could not record the checked bbolt file: the next open waits for its check before it commits", "store", e.dir, "file", path, "err", err)
	}
}
