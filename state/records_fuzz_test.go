package state

import (
	"bytes"
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/tidemark-go/tidemark"
)

// FuzzStoreRecords feeds the decoders of what a store reads back from its
// backend and its folder whatever bytes a damaged disk or a user's edit
// may leave there: a feed's lineage record, an output's record, a table's
// schema, an applied key, and the records of files left checked (bbolt's,
// Pebble's, the outputs'). None may panic; each decoder that takes the
// bytes must give back what its encoder writes again, so that what was
// read is what will be written (a lineage or an output record, exactly
// the same bytes; a schema or a record of files left checked, the same
// value once read again).
func FuzzStoreRecords(f *testing.F) {
	lin := tidemark.Lineage{Applied: tidemark.Applied{Epoch: 7, Position: 1234}}
	lin.Identity.Dev, lin.Identity.Ino = 2049, 77
	lin.Fingerprint.Len, lin.Fingerprint.Hash = 4096, 0xfeedface
	lin.TailLen, lin.TailHash = 64, 0xc0ffee
	f.Add(encodeLineage(lin))
	f.Add(encodeLineage(tidemark.Lineage{}))
	f.Add(outputRec{n: 100}.encode())
	f.Add(outputRec{n: 100, sum: 0xabcdef, hasSum: true}.encode())
	f.Add(outputRec{n: 100, sum: 1, hasSum: true, tail: 40, tailSum: 2, hasTail: true}.encode())
	s := Schema{Key: "string", Value: "int64"}
	f.Add(s.encode())
	f.Add(appliedKey("ledger", "input", ""))
	f.Add(appliedKey("", "input", "app.log.1"))
	f.Add([]byte(boltLeft{fileState: fileState{size: 16805888, mtime: 1796542227177472426, dev: 2049, ino: 12}, txid: 9}.String()))
	f.Add([]byte(pebbleLeft{{name: "000002.log", fileState: fileState{size: 100, mtime: 5, dev: 1, ino: 2}}, {name: "MANIFEST-000001", fileState: fileState{size: 50, mtime: 5, dev: 1, ino: 3}}}.String()))
	f.Add([]byte(formatOutputsLeft(map[string]outputLeft{"output.csv": {fileState{size: 10, mtime: 1, dev: 2, ino: 3}}})))
	f.Add([]byte{})
	f.Add([]byte{tagApplied, 0x80, 0x00}) // an overlong length: found by this target
	f.Fuzz(func(t *testing.T, data []byte) {
		if l, err := decodeLineage(data); err == nil {
			if again := encodeLineage(l); !bytes.Equal(again, data) {
				t.Fatalf("lineage record %x decodes to %+v, which encodes to %x", data, l, again)
			}
		}
		if r, ok := decodeOutputRec(data); ok {
			if again := r.encode(); !bytes.Equal(again, data) {
				t.Fatalf("output record %x decodes to %+v, which encodes to %x", data, r, again)
			}
		}
		if s, ok := decodeSchema(data); ok {
			if again, ok := decodeSchema(s.encode()); !ok || again != s {
				t.Fatalf("schema record %q decodes to %+v, which encodes to %q and decodes to %+v, %v", data, s, s.encode(), again, ok)
			}
		}
		if ns, feed, file, ok := parseAppliedKey(data); ok {
			// A feed's record is keyed without the separator; with it and
			// no file after it is a key no store writes, read as the feed's.
			if again := appliedKey(ns, feed, file); !bytes.Equal(again, data) && (file != "" || !bytes.Equal(append(again, fileSep), data)) {
				t.Fatalf("applied key %q parses to (%q, %q, %q), which keys %q", data, ns, feed, file, again)
			}
		}
		if l, ok := parseLeft(data); ok {
			if again, ok := parseLeft([]byte(l.String())); !ok || again != l {
				t.Fatalf("bbolt record %q parses to %+v, which reads back as %+v, %v", data, l, again, ok)
			}
		}
		if l, ok := parsePebbleLeft(data); ok {
			if again, ok := parsePebbleLeft([]byte(l.String())); !ok || !slices.Equal(again, l) {
				t.Fatalf("Pebble record %q parses to %+v, which reads back as %+v, %v", data, l, again, ok)
			}
		}
		if l, ok := parseOutputsLeft(data); ok {
			if again, ok := parseOutputsLeft([]byte(formatOutputsLeft(l))); !ok || !maps.Equal(again, l) {
				t.Fatalf("outputs record %q parses to %+v, which reads back as %+v, %v", data, l, again, ok)
			}
		}
	})
}

// TestDamagedNameLengths: a key whose name's length is a uvarint no store
// writes (longer than its value needs, or a length past the key) is read
// as damage, not as a name: an output chunk's key whose length wrapped
// to a negative int panicked the copy of a store's outputs (writeChunk),
// and a longer encoding of a length read as the key that encodes it
// plainly (two records of one feed).
func TestDamagedNameLengths(t *testing.T) {
	overlong := []byte{tagApplied, 0x80, 0x00} // 0 in two bytes
	if ns, feed, file, ok := parseAppliedKey(overlong); ok {
		t.Errorf("applied key %q parsed as (%q, %q, %q)", overlong, ns, feed, file)
	}
	if _, _, _, ok := parseAppliedKey(appliedKey("ns", "feed", "")); !ok {
		t.Error("an applied key the store writes does not parse")
	}
	// 2^64-5: int(n) is -5, and 1+w+int(n)+8 the key's 14 bytes.
	huge := append([]byte{tagOutputData}, 0xfb, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 1, 2, 3)
	if err := writeChunk(t.TempDir(), nil, nil, nil, nil, huge, nil); !errors.Is(err, ErrCorrupt) {
		t.Errorf("output chunk key %q: %v, want ErrCorrupt", huge, err)
	}
	if name, _, ok := cutName(huge[1:]); ok {
		t.Errorf("cutName(%q) = %q", huge[1:], name)
	}
}
