package main

import (
	"bytes"
	"encoding/csv"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// CountRejects counts every whole record: a torn last one does not count,
// a line recorded twice counts twice.
func TestCountRejects(t *testing.T) {
	path := filepath.Join(t.TempDir(), rejectsFile)
	if err := os.WriteFile(path, []byte("7,10,bad,\"x,\"\"y\"\"\rz\"\n8,10,bad,other epoch\n8,10,bad,other epoch\n9,44,torn"), 0o644); err != nil {
		t.Fatal(err)
	}
	if n, _, err := CountRejects(path); n != 3 || err != nil {
		t.Fatalf("CountRejects = %d, %v; want 3 (the torn record does not count, the repeated one does)", n, err)
	}
	if n, _, err := CountRejects(filepath.Join(t.TempDir(), "none")); n != 0 || err != nil {
		t.Fatalf("missing log: %d, %v", n, err)
	}
}

func TestParseEvent(t *testing.T) {
	ev, ok := parseEvent("durable epoch=18446744073709551615 position=22 applied=3")
	if !ok || ev.kind != evDurable || ev.fields["position"] != 22 || ev.fields["applied"] != 3 || uint64(ev.fields["epoch"]) != 1<<64-1 {
		t.Fatalf("%+v %v", ev, ok)
	}
	for _, bad := range []string{"", "progress x=1", "durable x", "durable x=y"} {
		if _, ok := parseEvent(bad); ok {
			t.Errorf("parseEvent(%q) ok", bad)
		}
	}
}

// FuzzReadRejects: whatever a reject log holds (a crash can tear its last
// record, a disk can garble it), reading it never fails from memory, stops
// at a line boundary, and a record the log writes after that boundary is
// read back, its reason and line as written, whatever the line holds.
func FuzzReadRejects(f *testing.F) {
	f.Add([]byte("1764000000000000000,37,malformed line,\"a,b\"\n"), uint64(7), int64(120), []byte("x,\"y\"\r"))
	f.Add([]byte("1,2,reason,line\n1,2,reason,line\n3,4,torn"), uint64(1), int64(2), []byte(""))
	f.Add([]byte("\n\n,,\nx,y,z\n-1,5,r,l\n"), uint64(0), int64(-1), []byte("\xff\x00"))
	f.Fuzz(func(t *testing.T, data []byte, epoch uint64, pos int64, line []byte) {
		seen, _, end, err := readRejects(bytes.NewReader(data), func(rejectKey, string, string) {})
		if err != nil {
			t.Fatalf("readRejects(%q): %v", data, err)
		}
		if end < 0 || end > int64(len(data)) || (end > 0 && data[end-1] != '\n') {
			t.Fatalf("readRejects(%q): end %d is not a line boundary", data, end)
		}
		if bytes.IndexByte(data[end:], '\n') >= 0 {
			t.Fatalf("readRejects(%q): end %d leaves a whole line unread", data, end)
		}
		// The ledger rejects lines without their "\n": a line never holds one.
		line = bytes.ReplaceAll(line, []byte("\n"), nil)
		var rec bytes.Buffer
		w := csv.NewWriter(&rec)
		if err := w.Write([]string{strconv.FormatUint(epoch, 10), strconv.FormatInt(pos, 10), "malformed line", string(line)}); err != nil {
			t.Fatal(err)
		}
		w.Flush()
		again := append(slices.Clip(data[:end]), rec.Bytes()...)
		k := rejectKey{epoch, pos}
		var got []string
		seen2, _, end2, err := readRejects(bytes.NewReader(again), func(rk rejectKey, reason, l string) {
			if rk == k {
				got = []string{reason, l}
			}
		})
		if err != nil || end2 != int64(len(again)) {
			t.Fatalf("after appending %q: end %d of %d, err %v", rec.Bytes(), end2, len(again), err)
		}
		if !seen2[k] {
			t.Fatalf("the record %q appended to %q is not read back", rec.Bytes(), data[:end])
		}
		if !seen[k] && (got == nil || got[0] != "malformed line" || got[1] != string(line)) {
			t.Fatalf("the record %q appended to %q reads back as %q", rec.Bytes(), data[:end], got)
		}
		for k := range seen {
			if !seen2[k] {
				t.Fatalf("key %+v of the log is lost by appending a record", k)
			}
		}
	})
}
