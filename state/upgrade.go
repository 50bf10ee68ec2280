package state

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
)

// The formats a store's format record ('v') names, each a superset of the
// one before, so that this version reads and writes all four:
//
//	1  "tidemark-state 1"  values without checksums
//	2  "tidemark-state 2"  every value but the format record carries its
//	                       CRC-32C (checksum.go)
//	3  "tidemark-state 3"  as 2; a file output's record may also hold where
//	                       its last batch's bytes start and the CRC-32C of
//	                       the bytes before them (24 bytes, see outputRec),
//	                       which a version that knows only format 2 refuses
//	                       as a corrupt record
//	4  "tidemark-state 4"  bbolt stores only: as 3, and each table's keys
//	                       are in a bucket of their own, named by the
//	                       table, without the table's prefix
//	                       (bolt_tables.go); a version that knows only
//	                       format 3 refuses it at its format record
//	5  "tidemark-state 5"  PostgreSQL stores only: as 3, and the store's
//	                       rows are in tidemark_data under its sid, a
//	                       number, instead of in tidemark_kv under its
//	                       name; its format record is in both tables
//	                       (see pgSchema), and a version that knows
//	                       only format 4 refuses it at the record
//
// A new bbolt store is of format 4, a new PostgreSQL store of format 5, a
// new Pebble store of format 3 (formats 4 and 5 would change nothing in
// it). A PostgreSQL store of an earlier format keeps its rows in
// tidemark_kv, and is read and written there. A bbolt store of an
// earlier format keeps its keys where they are (in the store's bucket,
// each with its table's prefix) until it is upgraded ([Upgrade]), which
// moves them into their tables' buckets (moveTables). A store of format 2 becomes one of
// format 3 with the first commit that writes a record with a tail: the
// format
// record goes in the same transaction (sumEngine.commit), so that a
// version that knows only format 2 fails on the format record, before it
// reads anything else, and never tells its user to remove a sound store.
// A store of format 1 is given no tails (its files are checked whole at
// each open) until it is upgraded ([Upgrade]), which makes it one of
// format 3 (a bbolt store: 4). A format record of a newer format than newestFormat fails the
// open with [ErrNewerFormat].
const newestFormat = 5

// formatNumber returns the format a format record names: N of
// "tidemark-state N", or B of an upgrade under way, "tidemark-state A to
// B, through …". ok is false for a record of neither shape.
func formatNumber(v []byte) (n int, ok bool) {
	rest, found := strings.CutPrefix(string(v), "tidemark-state ")
	if !found {
		return 0, false
	}
	if a, b, upgrading := strings.Cut(rest, " to "); upgrading {
		if _, err := strconv.Atoi(a); err != nil {
			return 0, false
		}
		rest, _, _ = strings.Cut(b, ",")
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n <= 0 {
		return 0, false
	}
	return n, true
}

// newerFormat is the error of an open that finds a format record of a
// format newer than the newest this version knows (newest).
func newerFormat(dir string, v []byte, n, newest int) error {
	return fmt.Errorf("open store %s: written by a newer tidemark (format %d, format record %q; this version knows formats 1 to %d); run that version or newer (if no newer tidemark ever wrote to this folder, its format record is damaged: restore the folder from a backup; do not remove it, which would apply every line again): %w",
		dir, n, v, newest, ErrNewerFormat)
}

// formatUpgrading is the format record of a store of format 1 whose
// upgrade to format 2 is under way: it is followed by the last key whose
// value carries its checksum. The keys up to it are of format 2, those
// after it of format 1; the next open finishes the upgrade before
// anything reads the store.
const formatUpgrading = "tidemark-state 1 to 2, through "

// formatMoving is the format record of a bbolt store whose upgrade from
// format 3 to format 4 is under way: it is followed by the last data key
// moved into its table's bucket. The data keys up to it are in their
// tables' buckets, those after it in the store's bucket; the next open
// finishes the move before anything reads the store. A version that
// knows only format 3 refuses the record (it names format 4).
const formatMoving = "tidemark-state 3 to 4, through "

// The upgrade commits its changes in chunks of at most this many values
// or bytes, each with the format record that says how far it got: memory
// stays bounded whatever the store's size, and a crash loses at most one
// chunk's work.
const (
	upgradeChunk      = 20000
	upgradeChunkBytes = 8 << 20
)

// Upgrade converts the store named by config (see [Open]) to the newest
// format of its backend, in place, and returns whether the store needed
// it. A store of format 1, written before values carried checksums,
// gets them: every value gets the CRC-32C of its key and bytes that the
// store checks on every read (format 3). A bbolt store of format 1, 2 or
// 3 also gets a bucket per table (format 4): every data key moves into its
// table's bucket, without the table's prefix, as a new bbolt store keeps
// them (smaller, shallower trees, faster commits and lookups). A
// PostgreSQL store of format 1 to 3 also gets a sid (format 5): its rows
// move from tidemark_kv, under its name, to tidemark_data, under the sid,
// in one transaction (see pgSchema; the server does less for each key). A
// Pebble store of format 2 or 3 needs nothing (one of format 2 becomes
// one of format 3 by itself, see formats). The store must not be
// open elsewhere (Upgrade holds its lock). A bbolt file is checked first
// (see [Options].VerifyMaxBytes): a damaged file is not given checksums
// that would vouch for it, nor copied into another layout. The upgrade
// commits in chunks, each with a record of how far it got, so that it
// survives a crash or a kill at any moment: the next Open (or Upgrade)
// finishes it before the store serves a read. A store of an older format
// opens and works without it; once upgraded, it can no longer be opened
// by a version of tidemark from before its new format: such a version
// fails on the store's format record.
func Upgrade(config string, opts *Options) (upgraded bool, err error) {
	s, err := Open(config, opts)
	if err != nil {
		return false, err
	}
	c := s.(*nsStore).c
	defer func() {
		if cerr := c.close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	sums := c.eng.(*sumEngine)
	be, _ := c.rawEngine().(*boltEngine)
	move := be != nil && !be.tables
	pe, _ := c.rawEngine().(*pgEngine)
	movePG := pe != nil && !pe.bySid()
	if sums.sums && !move && !movePG {
		return false, nil
	}
	c.stopPreload()
	if err := c.checkedFully(); err != nil {
		return false, err
	}
	if !sums.sums {
		if err := c.upgradeV1(nil); err != nil {
			return false, err
		}
		sums.setFormat(3)
		c.log.Info("state: the store was upgraded to format 3: its values carry checksums", "store", c.dir, "backend", c.kind)
	}
	if move {
		if err := c.moveTables(be); err != nil {
			return false, err
		}
		sums.setFormat(3)
		c.log.Info("state: the store was upgraded to format 4: each table's keys are in a bucket of their own", "store", c.dir, "backend", c.kind)
	}
	if movePG {
		n, err := pe.moveToSid()
		if err != nil {
			return false, fmt.Errorf("upgrade store %s to format 5: %w", c.dir, err)
		}
		c.log.Info("state: the store was upgraded to format 5: its rows are in tidemark_data under its sid", "store", c.dir, "backend", c.kind, "rows", n)
	}
	return true, nil
}

// moveTables moves the data keys of a bbolt store of format 3 (or 2) into
// their tables' buckets (moveToTables), in chunks, each with the format
// record that says how far it got (formatMoving); the last one records
// format 4. It runs in Upgrade, or at the open that finds the move under
// way: nothing else uses the store meanwhile.
func (c *core) moveTables(be *boltEngine) error {
	var after []byte
	for {
		last, done, err := be.moveToTables(after, upgradeChunk, upgradeChunkBytes, func(last []byte, done bool) []byte {
			if done {
				return []byte(formatV4)
			}
			return append([]byte(formatMoving), last...)
		})
		if err != nil {
			return fmt.Errorf("upgrade store %s to format 4: move the tables' keys into their buckets: %w", c.dir, err)
		}
		if h := c.opts.hooks; h != nil && h.afterUpgradeChunk != nil {
			h.afterUpgradeChunk()
		}
		if done {
			break
		}
		after = last
	}
	be.useTables()
	be.updateKeyCap(0, 0)
	return nil
}

// upgradeFrom returns the key an interrupted upgrade got through, from the
// format record v, and whether v is such a record.
func upgradeFrom(v []byte) ([]byte, bool) {
	if !strings.HasPrefix(string(v), formatUpgrading) {
		return nil, false
	}
	return bytes.Clone(v[len(formatUpgrading):]), true
}

// upgradeV1 gives the values of the keys after after (all, for nil) their
// checksums, in key order, in chunks; the last chunk records format 3 (a
// store of format 1 holds no record with a tail, and every record of
// format 2 is one of format 3), or, in a bbolt store, formatMoving with
// no key: the move of its tables' keys into their buckets (moveTables)
// follows, and a kill before it ends is finished by the next open. A
// chunk before it records formatUpgrading, whose "1 to 2" an interrupted
// upgrade of any version wrote.
// It reads and writes the backend under the checksums: nothing else may
// use the store meanwhile (it runs in Upgrade, or at open).
func (c *core) upgradeV1(after []byte) error {
	raw := c.rawEngine()
	var lo []byte
	if after != nil {
		lo = append(bytes.Clone(after), 0) // the first key after it
	}
	cur := raw.cursor(lo, nil, false)
	var ws []write
	size := 0
	commit := func(version string) error {
		ws = append(ws, write{key: []byte{tagVersion}, val: []byte(version)})
		err := raw.commit(ws)
		ws, size = ws[:0], 0
		if h := c.opts.hooks; err == nil && h != nil && h.afterUpgradeChunk != nil {
			h.afterUpgradeChunk()
		}
		return err
	}
	for cur.next() {
		k, v := cur.key(), cur.value()
		if isVersionKey(k) {
			continue
		}
		val := binary.BigEndian.AppendUint32(append(make([]byte, 0, len(v)+sumLen), v...), valueSum(k, v))
		ws = append(ws, write{key: bytes.Clone(k), val: val})
		size += len(k) + len(val)
		if len(ws) >= upgradeChunk || size >= upgradeChunkBytes {
			if err := commit(formatUpgrading + string(k)); err != nil {
				_ = cur.close()
				return fmt.Errorf("upgrade store %s to format 3: %w", c.dir, err)
			}
		}
	}
	if err := cur.close(); err != nil {
		return fmt.Errorf("upgrade store %s to format 3: read: %w", c.dir, err)
	}
	final := formatVersion
	if _, ok := raw.(*boltEngine); ok {
		final = formatMoving
	}
	if err := commit(final); err != nil {
		return fmt.Errorf("upgrade store %s to format 3: %w", c.dir, err)
	}
	return nil
}

// heldTail is called by the open for each output record with a tail it
// reads: in a store of format 2 (written by a version between 3b47141 and
// format 3), the next commit records format 3 (see sumEngine.owed). A
// store of format 1 keeps its format record: it cannot say format 3
// without the checksums.
func (c *core) heldTail() {
	if s, ok := c.eng.(*sumEngine); ok && s.sums && !s.format3.Load() {
		s.owed.Store(true)
	}
}
