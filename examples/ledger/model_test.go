package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
)

func TestModelFraming(t *testing.T) {
	in := "1,a,10\r\n" + // CRLF
		"2,b,-3\n" +
		"\n" + // empty: malformed
		"junk\n" +
		"3,a,5\n" +
		"4,a,1000" // no newline yet: not a line
	m := NewModel()
	n, err := m.ReadFrom(iotest.OneByteReader(strings.NewReader(in)))
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(len(in)) {
		t.Fatalf("read %d bytes, want %d", n, len(in))
	}
	if m.Lines != 5 || m.Malformed != 2 || m.Applied != 3 || m.Total != 12 {
		t.Fatalf("lines %d malformed %d applied %d total %d; want 5 2 3 12", m.Lines, m.Malformed, m.Applied, m.Total)
	}
	if m.Balances["a"] != 15 || m.Balances["b"] != -3 || len(m.Balances) != 2 {
		t.Fatalf("balances %v", m.Balances)
	}
	if m.IDs[4] != 0 || m.IDs[1] != 1 {
		t.Fatalf("ids %v", m.IDs)
	}
}

func TestModelOversize(t *testing.T) {
	long := "1,a," + strings.Repeat("1", maxLineBytes) + "\n"
	fits := "2,a," + strings.Repeat("0", maxLineBytes-6) + "1\r\n" // exactly maxLineBytes before "\r\n"
	m := NewModel()
	if _, err := m.ReadFrom(strings.NewReader(long + fits + "3,b,7\n")); err != nil {
		t.Fatal(err)
	}
	if m.Lines != 3 || m.Oversize != 1 || m.Applied != 2 || m.Total != 8 {
		t.Fatalf("lines %d oversize %d applied %d total %d; want 3 1 2 8", m.Lines, m.Oversize, m.Applied, m.Total)
	}
}

func TestModelOfConcatenates(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	os.WriteFile(a, []byte("1,x,1\n2,y,2\n"), 0o644)
	os.WriteFile(b, []byte("3,x,3\n"), 0o644)
	m, err := ModelOf(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if m.Applied != 3 || m.Balances["x"] != 4 {
		t.Fatalf("applied %d, x %d", m.Applied, m.Balances["x"])
	}
	if _, err := ModelOf(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("no error for a missing input")
	}
}

func TestReadOutput(t *testing.T) {
	path := filepath.Join(t.TempDir(), "output.csv")
	s, err := ReadOutput(path)
	if err != nil || s.Lines != 0 {
		t.Fatalf("missing output: %+v, %v", s, err)
	}
	os.WriteFile(path, []byte("1,a,5,5\n2,a,5,10\n1,a,5,15\nbad\n3,a,1"), 0o644)
	s, err = ReadOutput(path)
	if err != nil {
		t.Fatal(err)
	}
	if s.Lines != 4 || s.Bad != 1 || s.IDs[1] != 2 || s.IDs[2] != 1 || s.IDs[3] != 0 || s.Partial != 5 || s.Unfollowed != 0 || s.Last["a"] != 15 {
		t.Fatalf("%+v", s)
	}
	// A line whose balance does not follow the account's previous one.
	os.WriteFile(path, []byte("1,a,5,5\n2,b,1,1\n3,a,5,11\n4,a,1,12\n"), 0o644)
	s, _ = ReadOutput(path)
	if s.Unfollowed != 1 || s.Last["a"] != 12 {
		t.Fatalf("%+v", s)
	}
	m := NewModel()
	m.ReadFrom(strings.NewReader("1,a,5\n2,b,1\n3,a,5\n4,a,1\n"))
	r := Compare(m, LedgerState{Applied: 4, Total: 12, Balances: map[string]int64{"a": 11, "b": 1}}, s, 0, nil)
	if r.Unfollowed != 1 || r.Stale != 1 {
		t.Fatalf("%+v", r)
	}
	var buf bytes.Buffer
	r.Write(&buf)
	if !strings.Contains(buf.String(), "output lines whose balance does not follow: 1, accounts whose last output balance is not the state's: 1\n") {
		t.Fatalf("report:\n%s", buf.String())
	}
}

func TestCompare(t *testing.T) {
	m := NewModel()
	m.ReadFrom(strings.NewReader("1,a,10\n2,b,20\n3,a,-5\n4,c,1\nbad\n"))
	exact := LedgerState{Applied: 4, Total: 26, Balances: map[string]int64{"a": 5, "b": 20, "c": 1}}
	out := &OutputSummary{IDs: map[int64]int{1: 1, 2: 1, 3: 1, 4: 1}}
	r := Compare(m, exact, out, 1, nil)
	if !r.OK() || r.Missing != 0 || r.Twice != 0 {
		t.Fatalf("exact state: %+v", r)
	}
	var buf bytes.Buffer
	r.Write(&buf)
	want := "lines missing: 0, output lines written twice: 0\nstate: applied 4 (expected 4), total 26 (expected 26)\n"
	if buf.String() != want {
		t.Fatalf("report:\n%s\nwant:\n%s", buf.String(), want)
	}

	// Line 3 applied twice, line 4 missing, an unknown id, a reject missing.
	twice := LedgerState{Applied: 4, Total: 20, Balances: map[string]int64{"a": 0, "b": 20}}
	out = &OutputSummary{IDs: map[int64]int{1: 1, 2: 1, 3: 2, 9: 1}}
	r = Compare(m, twice, out, 0, nil)
	if r.OK() || r.Missing != 1 || r.Twice != 1 || r.Unknown != 1 {
		t.Fatalf("%+v", r)
	}
	buf.Reset()
	r.Write(&buf)
	want = "lines missing: 1, output lines written twice: 1\n" +
		"state: applied 4 (expected 4), total 20 (expected 26)\n" +
		"balance a: 0 (expected 5)\n" +
		"balance c: 0 (expected 1)\n" +
		"output lines not in the input: 1\n" +
		"rejected lines: 0 (expected 1)\n"
	if buf.String() != want {
		t.Fatalf("report:\n%s\nwant:\n%s", buf.String(), want)
	}

	// Only a balance off: not exact.
	off := LedgerState{Applied: 4, Total: 26, Balances: map[string]int64{"a": 6, "b": 19, "c": 1}}
	r = Compare(m, off, &OutputSummary{IDs: map[int64]int{1: 1, 2: 1, 3: 1, 4: 1}}, 1, nil)
	if r.OK() || len(r.BalanceDiffs()) != 2 {
		t.Fatalf("%+v %v", r, r.BalanceDiffs())
	}
}

// A well-formed line that the run rejected (in rejects.csv with its
// reason) is left out of the model: not missing, not in the expected
// state, and said in the report. A refusal of a line the input does not
// hold leaves the model as it is, and the rejects do not match.
func TestCompareRefused(t *testing.T) {
	input := "1,a,10\n2," + strings.Repeat("x", 40) + ",7\n3,a,-5\nbad\n"
	refused := []Refused{{Entry: Entry{ID: 2, Account: strings.Repeat("x", 40), Amount: 7}, Epoch: 9, Position: 57, Reason: "key too large"}}
	state := LedgerState{Applied: 2, Total: 5, Balances: map[string]int64{"a": 5}}
	out := &OutputSummary{IDs: map[int64]int{1: 1, 3: 1}}
	m := NewModel()
	m.ReadFrom(strings.NewReader(input))
	r := Compare(m, state, out, 2, refused)
	if !r.OK() || r.Refused != 1 || r.Rejects != r.WantRejects {
		t.Fatalf("%+v", r)
	}
	var buf bytes.Buffer
	r.Write(&buf)
	if want := "well-formed lines rejected by the run (in rejects.csv, left out of the expected state): 1, first: line 2 (position 57 of epoch 9): key too large\n"; !strings.HasSuffix(buf.String(), want) {
		t.Fatalf("report:\n%s\nwant it to end with:\n%s", buf.String(), want)
	}

	m = NewModel()
	m.ReadFrom(strings.NewReader(input))
	refused[0].ID = 4
	r = Compare(m, state, out, 2, refused)
	if r.OK() || r.Refused != 0 || r.Missing != 1 || r.Rejects == r.WantRejects {
		t.Fatalf("a refusal of a line not in the input: %+v", r)
	}
}
