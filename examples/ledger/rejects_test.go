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

func TestRejectLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), rejectsFile)
	l, err := OpenRejectLog(path)
	if err != nil {
		t.Fatal(err)
	}
	if wrote, err := l.Add(7, 10, "bad", []byte("x,\"y\"\rz")); !wrote || err != nil {
		t.Fatalf("first add: %v %v", wrote, err)
	}
	if wrote, _ := l.Add(7, 10, "bad", []byte("again")); wrote {
		t.Fatal("the same epoch and position written twice")
	}
	l.Add(8, 10, "bad", []byte("other epoch"))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// A record torn by a crash is cut off on open; the others are known.
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("9,44,torn")
	f.Close()
	if n, _, _ := CountRejects(path); n != 2 {
		t.Fatalf("CountRejects with a torn record = %d, want 2 (a torn record does not count)", n)
	}
	l, err = OpenRejectLog(path)
	if err != nil {
		t.Fatal(err)
	}
	if l.Len() != 2 {
		t.Fatalf("reopened log has %d records, want 2", l.Len())
	}
	if wrote, _ := l.Add(7, 10, "bad", nil); wrote {
		t.Fatal("a record of the previous run written again")
	}
	if wrote, _ := l.Add(9, 44, "bad", []byte("whole")); !wrote {
		t.Fatal("the torn record was not written again")
	}
	l.Close()
	if n, _, err := CountRejects(path); n != 3 || err != nil {
		t.Fatalf("CountRejects = %d, %v; want 3", n, err)
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
		seen, end, err := readRejects(bytes.NewReader(data), func(rejectKey, string, string) {})
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
		seen2, end2, err := readRejects(bytes.NewReader(again), func(rk rejectKey, reason, l string) {
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
