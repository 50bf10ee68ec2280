package pointer

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzDecode feeds arbitrary bytes to the record decoder and to the
// whole-file analysis of Load. Neither may panic; a record that decodes
// re-encodes to the same bytes; a file's result is one of its valid slots, a
// legacy count that is not negative, or not found with a reason. The seed
// corpus is in testdata/fuzz/FuzzDecode (see TestPointerFixtures).
//
//	go test ./feed -run '^$' -fuzz FuzzDecode -fuzztime 60s -fuzzminimizetime 1s
//
// The seeds are whole 8 KiB files; without -fuzzminimizetime the fuzzer
// spends most of its time minimizing them.
func FuzzDecode(f *testing.F) {
	for _, fx := range pointerFixtures() {
		f.Add(fx.data)
	}
	f.Add(record(testPointer(1, 1), 1))
	pf := Open("fuzz"+Suffix, Options{Logger: quiet})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, seq, err := decodeRecord(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decode error %v does not wrap ErrCorrupt", err)
			}
			if p != (Record{}) {
				t.Fatalf("decode returned %+v with its error", p)
			}
		} else {
			if err := checkPointer(p); err != nil {
				t.Fatalf("decoded a pointer that cannot be stored: %+v: %v", p, err)
			}
			if enc := appendRecord(nil, p, seq); !bytes.Equal(enc, b[:RecordSize]) {
				t.Fatalf("re-encoding differs:\n in %x\nout %x", b[:RecordSize], enc)
			}
			if q, err := Decode(Encode(nil, p)); err != nil || q != p {
				t.Fatalf("Encode/Decode round trip: %+v, %v; want %+v", q, err, p)
			}
		}

		data := b[:min(len(b), FileSize)]
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
				if s.valid && s.p == res.Record && s.seq == st.slots[st.best].seq {
					ok = true
				}
				if s.valid && s.seq > st.slots[st.best].seq {
					t.Fatalf("Load did not pick the highest write sequence")
				}
			}
			if !ok {
				t.Fatalf("found %+v, which is not the best valid slot", res.Record)
			}
		case res.Legacy:
			if len(b) != LegacySize || res.Record.Position < 0 || bytes.HasPrefix(b, pointerMagic[:]) {
				t.Fatalf("legacy result %+v from %d bytes", res, len(b))
			}
		default:
			if res.Record != (Record{}) {
				t.Fatalf("not found, yet a pointer: %+v", res)
			}
		}
	})
}
