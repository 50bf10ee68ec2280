package feed

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzDecodePointer feeds arbitrary bytes to the record decoder and to the
// whole-file analysis of Load. Neither may panic; a record that decodes
// re-encodes to the same bytes; a file's result is one of its valid slots, a
// legacy count that is not negative, or not found with a reason. The seed
// corpus is in testdata/fuzz/FuzzDecodePointer (see TestPointerFixtures).
//
//	go test ./feed -run '^$' -fuzz FuzzDecodePointer -fuzztime 60s -fuzzminimizetime 1s
//
// The seeds are whole 8 KiB files; without -fuzzminimizetime the fuzzer
// spends most of its time minimizing them.
func FuzzDecodePointer(f *testing.F) {
	for _, fx := range pointerFixtures() {
		f.Add(fx.data)
	}
	f.Add(record(testPointer(1, 1), 1))
	pf := OpenPointerFile("fuzz"+PointerSuffix, PointerFileOptions{Logger: quiet})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, seq, err := decodeRecord(b)
		if err != nil {
			if !errors.Is(err, ErrCorruptPointer) {
				t.Fatalf("decode error %v does not wrap ErrCorruptPointer", err)
			}
			if p != (Pointer{}) {
				t.Fatalf("decode returned %+v with its error", p)
			}
		} else {
			if err := checkPointer(p); err != nil {
				t.Fatalf("decoded a pointer that cannot be stored: %+v: %v", p, err)
			}
			if enc := appendRecord(nil, p, seq); !bytes.Equal(enc, b[:PointerRecordSize]) {
				t.Fatalf("re-encoding differs:\n in %x\nout %x", b[:PointerRecordSize], enc)
			}
			if q, err := DecodePointer(EncodePointer(nil, p)); err != nil || q != p {
				t.Fatalf("EncodePointer/DecodePointer round trip: %+v, %v; want %+v", q, err, p)
			}
		}

		data := b[:min(len(b), PointerFileSize)]
		st := parseState(data, int64(len(b)))
		res := pf.describe(st, data)
		if res.Reason == "" {
			t.Fatal("no reason")
		}
		switch {
		case res.Found:
			if res.Legacy || res.Missing {
				t.Fatalf("contradictory result %+v", res)
			}
			ok := false
			for _, s := range st.slots {
				if s.valid && s.p == res.Pointer && s.seq == st.slots[st.best].seq {
					ok = true
				}
				if s.valid && s.seq > st.slots[st.best].seq {
					t.Fatalf("Load did not pick the highest write sequence")
				}
			}
			if !ok {
				t.Fatalf("found %+v, which is not the best valid slot", res.Pointer)
			}
		case res.Legacy:
			if len(b) != LegacyPointerSize || res.Pointer.Position < 0 || bytes.HasPrefix(b, pointerMagic[:]) {
				t.Fatalf("legacy result %+v from %d bytes", res, len(b))
			}
		default:
			if res.Pointer != (Pointer{}) {
				t.Fatalf("not found, yet a pointer: %+v", res)
			}
		}
	})
}
