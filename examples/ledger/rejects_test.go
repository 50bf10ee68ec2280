package main

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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

// The durable event counts the lines the ledger applied, from its durable
// state: rejected lines, which the store applies too (their records go
// through its output), are not counted, and the lines of earlier runs are.
// Every event's count is exactly the well-formed lines before its position.
func TestDurableEventCountsLedgerLines(t *testing.T) {
	for _, store := range []string{"bbolt", "pebble"} {
		for _, dedupe := range []string{"true", "false"} {
			t.Run(store+"/dedupe="+dedupe, func(t *testing.T) {
				dir := t.TempDir()
				input := filepath.Join(dir, "ledger.csv")
				data := filepath.Join(dir, "data")
				run := func(before, after int64) {
					t.Helper()
					var out, errb bytes.Buffer
					args := []string{"run", "--input", input, "--data", data, "--store", store, "--dedupe=" + dedupe, "--progress", "none", "--events", "--batch", "3"}
					if code := Main(args, &out, &errb); code != 0 {
						t.Fatalf("exit %d\n%s", code, errb.String())
					}
					b, err := os.ReadFile(input)
					if err != nil {
						t.Fatal(err)
					}
					events := 0
					for _, line := range strings.Split(out.String(), "\n") {
						ev, ok := parseEvent(line)
						if !ok || ev.kind != evDurable {
							continue
						}
						events++
						pos, applied := ev.fields["position"], ev.fields["applied"]
						if want := wellFormedBefore(b, pos); applied != want {
							t.Errorf("%q: %d lines applied, but %d well-formed lines end at or before position %d", line, applied, want, pos)
						}
						if applied < before || applied > after {
							t.Errorf("%q: %d lines applied, want %d to %d (the well-formed lines of the runs before, to those of this one)", line, applied, before, after)
						}
					}
					if events == 0 {
						t.Fatalf("no durable event:\n%s", out.String())
					}
				}
				// 40 lines, every fifth malformed.
				var b strings.Builder
				for i := range 40 {
					if i%5 == 4 {
						b.WriteString("not a ledger line\n")
						continue
					}
					fmt.Fprintf(&b, "%d,acct%d,%d\n", i, i%3, i+1)
				}
				if err := os.WriteFile(input, []byte(b.String()), 0o644); err != nil {
					t.Fatal(err)
				}
				first := wellFormedBefore([]byte(b.String()), int64(b.Len()))
				if first == 0 || first == 40 {
					t.Fatalf("%d of 40 lines well-formed: the test needs some of each", first)
				}
				run(0, first)
				// A second run on more lines: the count goes on from the
				// first run's.
				f, err := os.OpenFile(input, os.O_APPEND|os.O_WRONLY, 0)
				if err != nil {
					t.Fatal(err)
				}
				fmt.Fprintf(f, "40,acct1,5\nbad\n41,acct2,6\n")
				if err := f.Close(); err != nil {
					t.Fatal(err)
				}
				run(first, first+2)
			})
		}
	}
}

// wellFormedBefore counts the ledger lines of b that end at or before pos.
func wellFormedBefore(b []byte, pos int64) int64 {
	var n, start int64
	for start < pos {
		i := bytes.IndexByte(b[start:], '\n')
		if i < 0 || start+int64(i)+1 > pos {
			break
		}
		if _, err := ParseLine(b[start : start+int64(i)]); err == nil {
			n++
		}
		start += int64(i) + 1
	}
	return n
}
