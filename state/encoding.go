package state

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strings"

	"github.com/tidemark-go/tidemark"
)

// Key space, shared by every backend (all integers big-endian or uvarint):
//
//	'v'                                    → "tidemark-state 3"  (format version, see formats)
//	'd' uvarint(len ns) ns uvarint(len b) b key → value        (data)
//	'a' uvarint(len ns) ns feed            → lineage record   (applied position)
//	'o' name                               → uint64 length    (committed output length)
//	's' uvarint(len ns) ns uvarint(len b) b → table schema     (see Schema)
//	'O' uvarint(len name) name uint64 off  → bytes            (output bytes at off, for an
//	                                                            engine that keeps outputs)
//
// A lineage record:
//
//	+------+---------+----------+-----+-----+-------+--------+---------+----------+--------+
//	| 0x01 | epoch   | position | dev | ino | fpLen | fpHash | tailLen | tailHash | crc32c |
//	| 1 B  | 8 B     | 8 B      | 8 B | 8 B | 4 B   | 8 B    | 4 B     | 8 B      | 4 B    |
//	+------+---------+----------+-----+-----+-------+--------+---------+----------+--------+
//
// The CRC-32C (Castagnoli) covers every byte before it. From format 2 on,
// every value but the format version is followed by a checksum of its key
// and bytes (see checksum.go). A bbolt store of format 4 keeps the data
// keys of each table in a bucket of their own, without the table's prefix
// (see bolt_tables.go): its engine reads and writes them as this key
// space says, and everything above the engine sees no difference.
const (
	tagVersion = 'v'
	tagData    = 'd'
	tagApplied = 'a'
	tagOutput  = 'o'
	tagSchema  = 's'
	// tagOutputData keys the output bytes of an engine without local
	// files (see outputsInEngine).
	tagOutputData = 'O'

	// formatVersion is the format of a new Pebble or PostgreSQL store
	// (format 3, see formats in upgrade.go): every value carries a
	// checksum (see sumEngine), and a file output's record may hold its
	// last batch's tail. formatV2 (checksums, no tails) and formatV1 (no
	// checksums) are the formats before, still read and written.
	formatVersion = "tidemark-state 3"
	formatV2      = "tidemark-state 2"
	formatV1      = "tidemark-state 1"
	// formatV4 is the format of a new bbolt store: format 3, each table's
	// keys in a bucket of their own (see bolt_tables.go).
	formatV4 = "tidemark-state 4"
	// formatV5 is the format of a new PostgreSQL store: format 3, its
	// rows in tidemark_data under its sid (see pgSchema).
	formatV5   = "tidemark-state 5"
	lineageV1  = 1
	lineageLen = 1 + 8 + 8 + 8 + 8 + 4 + 8 + 4 + 8 + 4
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

func appendName(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// nameLen reads the length appendName put before a name at the start of
// b: the length n and the bytes w of its uvarint, w <= 0 when b does not
// start with one that appendName writes (cut short, longer than the
// value needs, which a damaged key may be and no store writes) or when
// the name would run past the end of b. The name is b[w:w+int(n)].
func nameLen(b []byte) (n uint64, w int) {
	n, w = binary.Uvarint(b)
	var buf [binary.MaxVarintLen64]byte
	if w <= 0 || w != len(binary.AppendUvarint(buf[:0], n)) || n > uint64(len(b)-w) {
		return 0, -1
	}
	return n, w
}

// dataPrefix is the prefix of every key of bucket b in namespace ns.
func dataPrefix(ns, b string) []byte {
	p := make([]byte, 0, 3+len(ns)+len(b))
	p = append(p, tagData)
	p = appendName(p, ns)
	return appendName(p, b)
}

func appliedPrefix(ns string) []byte {
	return appendName([]byte{tagApplied}, ns)
}

// fileSep separates a feed's name from the name of one of its files in an
// applied key: a feed that follows a set of files keeps one record per
// file (tidemark.Delivery.File). A feed's name never holds it.
const fileSep = '\x1f'

// appliedKey is the key of the applied record of file of feed in ns (file
// "" for a feed of one file: the key of the format before file sets).
func appliedKey(ns, feed, file string) []byte {
	k := append(appliedPrefix(ns), feed...)
	if file != "" {
		k = append(append(k, fileSep), file...)
	}
	return k
}

// parseAppliedKey splits an applied key into namespace, feed and file.
func parseAppliedKey(k []byte) (ns, feed, file string, ok bool) {
	if len(k) == 0 || k[0] != tagApplied {
		return "", "", "", false
	}
	n, w := nameLen(k[1:])
	if w <= 0 {
		return "", "", "", false
	}
	rest := k[1+w:]
	feed = string(rest[n:])
	if i := strings.IndexByte(feed, fileSep); i >= 0 {
		feed, file = feed[:i], feed[i+1:]
	}
	return string(rest[:n]), feed, file, true
}

func outputKey(name string) []byte { return append([]byte{tagOutput}, name...) }

// outputDataPrefix is the prefix of the chunks of output name.
func outputDataPrefix(name string) []byte { return appendName([]byte{tagOutputData}, name) }

// outputChunkKey keys the chunk of output name that starts at off: the
// chunks of an output sort by offset.
func outputChunkKey(name string, off int64) []byte {
	return binary.BigEndian.AppendUint64(outputDataPrefix(name), uint64(off))
}

func isOutputChunk(k []byte) bool { return len(k) > 0 && k[0] == tagOutputData }

func encodeLineage(l tidemark.Lineage) []byte {
	b := make([]byte, 0, lineageLen)
	b = append(b, lineageV1)
	b = binary.BigEndian.AppendUint64(b, l.Epoch)
	b = binary.BigEndian.AppendUint64(b, uint64(l.Position))
	b = binary.BigEndian.AppendUint64(b, l.Identity.Dev)
	b = binary.BigEndian.AppendUint64(b, l.Identity.Ino)
	b = binary.BigEndian.AppendUint32(b, uint32(l.Fingerprint.Len))
	b = binary.BigEndian.AppendUint64(b, l.Fingerprint.Hash)
	b = binary.BigEndian.AppendUint32(b, uint32(l.TailLen))
	b = binary.BigEndian.AppendUint64(b, l.TailHash)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
}

func decodeLineage(b []byte) (tidemark.Lineage, error) {
	var l tidemark.Lineage
	if len(b) != lineageLen || b[0] != lineageV1 {
		return l, fmt.Errorf("lineage record of %d bytes, version %d: %w", len(b), first(b), ErrCorrupt)
	}
	if got, want := crc32.Checksum(b[:lineageLen-4], crcTable), binary.BigEndian.Uint32(b[lineageLen-4:]); got != want {
		return l, fmt.Errorf("lineage record checksum %08x, want %08x: %w", got, want, ErrCorrupt)
	}
	be := binary.BigEndian
	l.Epoch = be.Uint64(b[1:])
	l.Position = int64(be.Uint64(b[9:]))
	l.Identity.Dev = be.Uint64(b[17:])
	l.Identity.Ino = be.Uint64(b[25:])
	l.Fingerprint.Len = int(be.Uint32(b[33:]))
	l.Fingerprint.Hash = be.Uint64(b[37:])
	l.TailLen = int(be.Uint32(b[45:]))
	l.TailHash = be.Uint64(b[49:])
	return l, nil
}

func first(b []byte) int {
	if len(b) == 0 {
		return -1
	}
	return int(b[0])
}

func encodeInt64(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }

func decodeInt64(b []byte) (int64, bool) {
	if len(b) != 8 {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(b)), true
}

func hasPrefix(b, prefix []byte) bool { return bytes.HasPrefix(b, prefix) }

// prefixEnd returns the smallest key greater than every key with prefix, or
// nil when there is none.
func prefixEnd(prefix []byte) []byte {
	end := append([]byte{}, prefix...)
	for i := len(end) - 1; i >= 0; i-- {
		end[i]++
		if end[i] != 0 {
			return end[:i+1]
		}
	}
	return nil
}
