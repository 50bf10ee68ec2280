package state

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
)

// formatUpgrading is the format record of a store of format 1 whose
// upgrade to format 2 is under way: it is followed by the last key whose
// value carries its checksum. The keys up to it are of format 2, those
// after it of format 1; the next open finishes the upgrade before
// anything reads the store.
const formatUpgrading = "tidemark-state 1 to 2, through "

// The upgrade commits its changes in chunks of at most this many values
// or bytes, each with the format record that says how far it got: memory
// stays bounded whatever the store's size, and a crash loses at most one
// chunk's work.
const (
	upgradeChunk      = 20000
	upgradeChunkBytes = 8 << 20
)

// Upgrade converts the store named by config (see [Open]) from format 1,
// written before values carried checksums, to the current format, in
// place: every value gets the CRC-32C of its key and bytes that the store
// checks on every read. It returns whether the store needed it. The store
// must not be open elsewhere (Upgrade holds its lock). A bbolt file is
// checked first (see [Options].VerifyMaxBytes): a damaged file is not
// given checksums that would vouch for it. The upgrade commits in chunks,
// each with a record of how far it got, so that it survives a crash or a
// kill at any moment: the next Open (or Upgrade) finishes it before the
// store serves a read. A store of format 1 opens and works without it;
// once upgraded, it can no longer be opened by a version of tidemark from
// before format 2.
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
	if c.eng.(*sumEngine).sums {
		return false, nil
	}
	if err := c.checkedFully(); err != nil {
		return false, err
	}
	if err := c.upgradeV1(nil); err != nil {
		return false, err
	}
	c.eng.(*sumEngine).sums = true
	c.log.Info("state: the store was upgraded to format 2: its values carry checksums", "store", c.dir, "backend", c.kind)
	return true, nil
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
// checksums, in key order, in chunks; the last chunk records format 2.
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
				return fmt.Errorf("upgrade store %s to format 2: %w", c.dir, err)
			}
		}
	}
	if err := cur.close(); err != nil {
		return fmt.Errorf("upgrade store %s to format 2: read: %w", c.dir, err)
	}
	if err := commit(formatVersion); err != nil {
		return fmt.Errorf("upgrade store %s to format 2: %w", c.dir, err)
	}
	return nil
}
