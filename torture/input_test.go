package torture

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// TestBadInput is scenario 7: each kind of bad input between good lines.
// The ledger settles (no crash, no stall), every good line around it is
// applied exactly once, and every bad line is rejected once (rejects.csv)
// instead of silently vanishing. The outcome of each case is in
// RELIABILITY.md.
func TestBadInput(t *testing.T) {
	track(t)
	rng := newRand(t)
	garbage := make([]byte, 4096)
	for i := range garbage {
		garbage[i] = byte(rng.IntN(256))
	}
	garbage = bytes.ReplaceAll(garbage, []byte{'\n'}, []byte{'#'})
	cases := []struct {
		name string
		bad  []byte
	}{
		{"binary garbage", append(garbage, '\n')},
		{"NUL bytes", []byte("\x00\x00\x00\x00\n\x00\n900001,acc\x00unt,5\n")},
		{"invalid UTF-8", []byte("900002,\xff\xfe\xfd,5\n\xc3\x28\n")},
		{"10 MB line", append(bytes.Repeat([]byte("900003,"), 10<<20/7), '\n')},
		{"empty lines", []byte("\n\n\n")},
		{"CRLF-only lines", []byte("\r\n\r\n\r\n")},
		{"mixed endings", []byte("900004,a,1\r\n900005,b,2\n900006,c,3\r\n\r900007,d,4\n900008,e,5\r900009,f,6\n")},
		{"lone CR inside a line", []byte("900010,a,1\r\r\n")},
		{"huge and negative amounts", []byte("900011,a,9223372036854775807\n900012,a,-9223372036854775808\n900013,a,9223372036854775808\n")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := tempDir(t)
			input := filepath.Join(dir, "in.csv")
			data := filepath.Join(dir, "data")
			var b []byte
			b = append(b, genBytes(t, dir, 100, rng.Uint64(), 1)...)
			b = append(b, tc.bad...)
			b = append(b, genBytes(t, dir, 100, rng.Uint64(), 1000)...)
			if err := os.WriteFile(input, b, 0o644); err != nil {
				t.Fatal(err)
			}
			figures.inputs.Add(1)
			runToEnd(t, dir, runArgs(input, data)...)
			checkExact(t, data, input)
			lines, good := lineStats(t, input)
			if got, want := rejects(t, data), lines-good; got != want {
				t.Fatalf("rejects.csv holds %d records, want %d (one per bad line)", got, want)
			}
			// A second run reads nothing again and rejects nothing twice.
			runToEnd(t, dir, runArgs(input, data)...)
			checkExact(t, data, input)
			if got, want := rejects(t, data), lines-good; got != want {
				t.Fatalf("after a restart rejects.csv holds %d records, want %d", got, want)
			}
		})
	}
}

// TestUnterminatedLastLine is scenario 7's last case: a last line without
// its newline is not applied; completed after a restart, it is applied once,
// whole.
func TestUnterminatedLastLine(t *testing.T) {
	track(t)
	rng := newRand(t)
	for _, follow_ := range []bool{false, true} {
		name := "settled"
		if follow_ {
			name = "follow"
		}
		t.Run(name, func(t *testing.T) {
			dir := tempDir(t)
			input := filepath.Join(dir, "in.csv")
			data := filepath.Join(dir, "data")
			head := genBytes(t, dir, 200, rng.Uint64(), 1)
			if err := os.WriteFile(input, append(head, "900001,partial,12"...), 0o644); err != nil {
				t.Fatal(err)
			}
			figures.inputs.Add(1)
			if follow_ {
				follow(t, dir, 200, runArgs(input, data)...)
			} else {
				runToEnd(t, dir, runArgs(input, data)...)
			}
			r := checkExact(t, data, input)
			if r.applied != 200 {
				t.Fatalf("applied %d, want the 200 complete lines only", r.applied)
			}
			appendFile(t, input, []byte("34\n900002,after,1\n"))
			if follow_ {
				follow(t, dir, 202, runArgs(input, data)...)
			} else {
				runToEnd(t, dir, runArgs(input, data)...)
			}
			r = checkExact(t, data, input)
			if r.applied != 202 || r.wantT != r.total {
				t.Fatalf("applied %d (want 202), total %d (want %d)", r.applied, r.total, r.wantT)
			}
		})
	}
}

var _ = rand.New
