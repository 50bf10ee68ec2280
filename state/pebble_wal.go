package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/cockroachdb/pebble/v2/record"
	pebblevfs "github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/wal"
)

// What Pebble does with a damaged WAL, and what the store adds.
//
// Pebble replays its write-ahead logs at open. In any log but the newest, a
// record that does not verify is an error. In the newest it may be the
// write a crash cut short, so Pebble reads ahead: when a later record of
// the log says (by the offset synced before it was written, the WAL sync
// chunks of FormatWALSyncChunks) that the damaged one had been synced, the
// damage is an error too. Otherwise Pebble takes the damage for the end of
// the log and drops what follows, without a word. Its read-ahead starts at
// the next 32 KiB block, so a damaged record in the last block of the
// newest log (all of a small log: a few hundred small batches) always
// ends the log in silence, and the batches from there on are lost.
//
// The store makes that loss loud. Before Pebble opens, it reads the newest
// log as Pebble will, and when the log ends at a record that does not
// verify, it looks at the bytes from there on for chunks of the same log
// that do. It logs a warning naming the file and the offset: the batches
// from there on are lost, and the feeds re-read their lines (the store is
// what a feed resumes from). The state stays consistent (every batch is one
// Pebble batch, and the replay stops between two): the store is behind,
// never ahead of what it holds.
//
// A clean Close flushes Pebble's memtable, so that a store closed cleanly
// keeps nothing in its log: damage to the log between two runs loses
// nothing then.

// walDamage is what checkWAL found at the end of the newest log.
type walDamage struct {
	file   string
	offset int64 // of the record that does not verify
	// later counts the records of the log after it whose first chunk
	// verifies; vouched those of them that say the damaged record had been
	// synced.
	later, vouched int
	// ofLog is set when the bytes at offset are a chunk header of this
	// log (damaged or cut short), not zeros or a recycled log's data.
	ofLog bool
	// confirmed is set when Pebble's own read-ahead proves the damage:
	// Pebble refuses to open, and the store's error names the place.
	confirmed bool
}

// checkWAL reads the newest WAL of the Pebble database in dir. It returns
// nil when the log ends cleanly, or ends at bytes that are not this log's
// (zeros, the old records of a recycled file).
func checkWAL(fs pebblevfs.FS, dir string) (*walDamage, error) {
	logs, err := wal.Scan(wal.Dir{FS: fs, Dirname: dir})
	if err != nil || len(logs) == 0 {
		return nil, err
	}
	ll := logs[len(logs)-1]
	rr := ll.OpenForRead()
	defer rr.Close()
	for {
		r, off, err := rr.NextRecord()
		if err == nil {
			_, err = io.Copy(io.Discard, r)
		}
		if err == nil {
			continue
		}
		switch {
		case errors.Is(err, record.ErrInvalidChunk) || errors.Is(err, record.ErrZeroedChunk):
			return &walDamage{file: off.PhysicalFile, offset: off.Physical, confirmed: true}, nil
		case errors.Is(err, record.ErrUnexpectedEOF):
			return scanTail(fs, off.PhysicalFile, off.Physical, uint32(ll.Num))
		case errors.Is(err, io.EOF):
			return nil, nil
		}
		return nil, err
	}
}

// scanTail looks at the bytes of file from off, where a record of log num
// does not verify, for the chunks of the log that do. See the chunk
// formats in Pebble's record package: a header of CRC (4 bytes), size (2),
// type (1), log number (4, recyclable and WAL sync chunks), synced offset
// (8, WAL sync chunks), then the payload, within a 32 KiB block.
func scanTail(fs pebblevfs.FS, file string, off int64, num uint32) (*walDamage, error) {
	f, err := fs.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if off >= st.Size() {
		return nil, nil
	}
	tail := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(tail, off); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	d := &walDamage{file: file, offset: off}
	var lognum [4]byte
	binary.LittleEndian.PutUint32(lognum[:], num)
	d.ofLog = len(tail) >= walRecyclableHeader && string(tail[7:11]) == string(lognum[:]) && walChunkHeader(tail[6]) > 0
	for i := 1; i+walRecyclableHeader <= len(tail); i++ {
		if string(tail[i+7:i+11]) != string(lognum[:]) {
			continue
		}
		hs := walChunkHeader(tail[i+6])
		if t := tail[i+6]; t != 5 && t != 6 && t != 9 && t != 10 {
			continue // not the start of a record (full or first chunk)
		}
		pos := off + int64(i)
		n := int(binary.LittleEndian.Uint16(tail[i+4:]))
		if hs == 0 || i+hs+n > len(tail) || pos%walBlock+int64(hs+n) > walBlock {
			continue
		}
		if walCRC(tail[i+6:i+hs+n]) != binary.LittleEndian.Uint32(tail[i:]) {
			continue
		}
		d.later++
		if hs == walSyncHeader && int64(binary.LittleEndian.Uint64(tail[i+11:])) > off {
			d.vouched++
		}
		i += hs + n - 1
	}
	if d.later == 0 && !d.ofLog {
		return nil, nil
	}
	return d, nil
}

// The record format's constants (Pebble's record package).
const (
	walBlock            = 32 << 10
	walRecyclableHeader = 11
	walSyncHeader       = 19
)

// walChunkHeader returns the header length of a chunk of type t that
// carries a log number, 0 for any other type.
func walChunkHeader(t byte) int {
	switch {
	case t >= 5 && t <= 8: // recyclable full, first, middle, last
		return walRecyclableHeader
	case t >= 9 && t <= 12: // WAL sync full, first, middle, last
		return walSyncHeader
	}
	return 0
}

// walCRC is the checksum of a chunk: CRC-32C, masked as LevelDB's.
func walCRC(b []byte) uint32 {
	c := crc32.Checksum(b, crcTable)
	return (c>>15 | c<<17) + 0xa282ead8
}

// warning is the message of the damage, for the log.
func (d *walDamage) warning() string {
	switch {
	case d.vouched > 0:
		return fmt.Sprintf("state: pebble's WAL %s is damaged at offset %d: %d later records of it verify, %d of them written after the damaged one was synced, so this is damage, not a write cut by a crash; Pebble replays the log only up to the damage: the batches from there on are lost, and the feeds re-read their lines from what the store holds. Check the disk",
			d.file, d.offset, d.later, d.vouched)
	case d.later > 0:
		return fmt.Sprintf("state: pebble's WAL %s has a record at offset %d that does not verify, and %d later records that do: Pebble replays the log only up to the damage: the batches from there on are lost, and the feeds re-read their lines from what the store holds",
			d.file, d.offset, d.later)
	}
	return fmt.Sprintf("state: pebble's WAL %s ends with a record that does not verify, at offset %d (a write cut by a crash or a power loss, or a damaged byte): its batch is lost if it was durable, and the feeds re-read its lines from what the store holds",
		d.file, d.offset)
}
