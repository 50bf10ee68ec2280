package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/record"
	pebblevfs "github.com/cockroachdb/pebble/v2/vfs"
)

// What Pebble does with a damaged MANIFEST, and what the store adds.
//
// The MANIFEST is the log of Pebble's version edits: which tables make up
// each level, the next file number, the oldest WAL not yet flushed. Pebble
// writes it in the record format (chunks of 32 KiB blocks, each with a
// CRC-32C), and at open it replays the edits up to the first record that
// does not verify, taking that record for the end of the log (a write a
// crash cut short: version_set.go, versionSet.load). A damaged record in
// the middle of it, or the first one, therefore opens an older version of
// the database without a word: the tables added after the damage are no
// longer in it, and Pebble deletes their files as obsolete at open; a
// table the older version lists may be gone, or its number reused by a
// new table, and Pebble's compactions then panic in their own goroutines
// (a key out of order), where no recover reaches. The store reads the
// MANIFEST before Pebble does: a record that does not verify, followed by
// records that do, or a first record that does not verify (Pebble writes
// and syncs a new MANIFEST whole before it names it current), is damage,
// and the open fails with a [*CorruptError] before Pebble touches a file.
// A last record that does not verify, with nothing valid after it, is
// what a crash leaves: Pebble drops that one edit (its tables are made
// again from the WALs it kept) and the store logs a warning.

// manifestDamage is what checkManifest found.
type manifestDamage struct {
	file         string
	offset       int64 // of the first record that does not verify
	first        bool  // it is the MANIFEST's first record
	records      int   // that verify before it
	later        int   // chunks that verify after it
	lastTornOnly bool  // nothing after it verifies: the tail a crash leaves
}

// checkManifest reads the current MANIFEST of the Pebble database at path
// as Pebble will. It returns nil when every record verifies.
func checkManifest(fs pebblevfs.FS, path string) (*manifestDamage, error) {
	desc, err := pebble.Peek(path, fs)
	if err != nil || !desc.Exists || desc.ManifestFilename == "" {
		return nil, err
	}
	f, err := fs.Open(desc.ManifestFilename)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rr := record.NewReader(f, 0)
	n := 0
	for {
		off := rr.Offset()
		r, err := rr.Next()
		if err == nil {
			_, err = io.Copy(io.Discard, r)
		}
		switch {
		case err == nil:
			n++
			continue
		case errors.Is(err, io.EOF) && n > 0:
			return nil, nil
		case errors.Is(err, io.EOF) || record.IsInvalidRecord(err):
		default:
			return nil, err
		}
		d := &manifestDamage{file: desc.ManifestFilename, offset: off, first: n == 0, records: n}
		d.later, err = laterChunks(fs, desc.ManifestFilename, off)
		if err != nil {
			return nil, err
		}
		d.lastTornOnly = !d.first && d.later == 0
		return d, nil
	}
}

// laterChunks counts the chunks of the record format (legacy header: CRC
// 4 bytes, size 2, type 1, full or first chunk) that verify in file after
// off.
func laterChunks(fs pebblevfs.FS, file string, off int64) (int, error) {
	f, err := fs.Open(file)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	if off >= st.Size() {
		return 0, nil
	}
	tail := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(tail, off); err != nil && !errors.Is(err, io.EOF) {
		return 0, err
	}
	const header = 7
	later := 0
	for i := 1; i+header <= len(tail); i++ {
		if t := tail[i+6]; t != 1 && t != 2 {
			continue
		}
		n := int(binary.LittleEndian.Uint16(tail[i+4:]))
		pos := off + int64(i)
		if n == 0 || i+header+n > len(tail) || pos%walBlock+int64(header+n) > walBlock {
			continue
		}
		if walCRC(tail[i+6:i+header+n]) != binary.LittleEndian.Uint32(tail[i:]) {
			continue
		}
		later++
		i += header + n - 1
	}
	return later, nil
}

// err is the error of damage Pebble must not open past.
func (d *manifestDamage) err(dir, path string) *CorruptError {
	what := fmt.Sprintf("its record at offset %d does not verify, and %d records after it do", d.offset, d.later)
	if d.first {
		what = fmt.Sprintf("its first record (at offset %d) does not verify", d.offset)
	}
	return &CorruptError{Backend: Pebble, Dir: dir, File: d.file, Record: "the Pebble database's MANIFEST (its list of tables)",
		Detail: what + ": Pebble would take the damage for the log's end, open an older version of the database and delete the tables recorded after it; the store did not let Pebble open it, and nothing in " + path + " was changed"}
}
