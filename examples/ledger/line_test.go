package main

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParseLine(t *testing.T) {
	good := []struct {
		line string
		want Entry
	}{
		{"1,alice,100", Entry{1, "alice", 100}},
		{"42,bob,-250", Entry{42, "bob", -250}},
		{"7,carol,+5", Entry{7, "carol", 5}},
		{"9,zoë,0", Entry{9, "zoë", 0}},
		{"3, spaced name ,1", Entry{3, " spaced name ", 1}},
		{"9223372036854775807,max,-9223372036854775808", Entry{1<<63 - 1, "max", -1 << 63}},
		{"5,a,007", Entry{5, "a", 7}},
		{"6,a,-0", Entry{6, "a", 0}},
		{"8,a,+9223372036854775807", Entry{8, "a", 1<<63 - 1}},
		{"10,a,-0000000000000000000009223372036854775808", Entry{10, "a", -1 << 63}},
	}
	for _, tc := range good {
		got, err := ParseLine([]byte(tc.line))
		if err != nil || got != tc.want {
			t.Errorf("ParseLine(%q) = %+v, %v; want %+v", tc.line, got, err, tc.want)
		}
	}
	bad := []string{
		"",
		"1",
		"1,alice",
		"1,alice,100,extra",
		"1,alice,100,",
		",alice,100",
		"0,alice,100",
		"01,alice,100",
		"-1,alice,100",
		"+1,alice,100",
		"1.5,alice,100",
		"x1,alice,100",
		"9223372036854775808,alice,100",
		"1,,100",
		"1,alice,",
		"1,alice,-",
		"1,alice,12.50",
		"1,alice,1e3",
		"1,alice, 100",
		"1,alice,100 ",
		"1,alice,0x10",
		"1,alice,1_000",
		"1,alice,9223372036854775808",
		"1,alice,-9223372036854775809",
		"1,alice,+9223372036854775808",
		"1,alice,99999999999999999999999",
		"1,alice,99999999999999999999x",
		"1,alice,+",
		"1,alice,--1",
		"1,\xff\xfe,100",
		"1,alice,100\r",
	}
	for _, line := range bad {
		e, err := ParseLine([]byte(line))
		if err == nil {
			t.Errorf("ParseLine(%q) = %+v, want an error", line, e)
			continue
		}
		if !errors.Is(err, errMalformed) {
			t.Errorf("ParseLine(%q) error %v does not wrap errMalformed", line, err)
		}
	}
}

func TestAppendLineRoundTrip(t *testing.T) {
	for _, e := range []Entry{{1, "a", 0}, {123, "zoë", -5}, {1<<63 - 1, "x y", -1 << 63}} {
		line := AppendLine(nil, e)
		if line[len(line)-1] != '\n' {
			t.Fatalf("AppendLine(%+v) = %q: no newline", e, line)
		}
		got, err := ParseLine(line[:len(line)-1])
		if err != nil || got != e {
			t.Errorf("round trip of %+v: %+v, %v", e, got, err)
		}
	}
}

func TestOutputRoundTrip(t *testing.T) {
	o := OutputLine{Entry{12, "olivia", -300}, 4500}
	line := AppendOutput(nil, o)
	if string(line) != "12,olivia,-300,4500\n" {
		t.Fatalf("AppendOutput = %q", line)
	}
	got, err := ParseOutput(line[:len(line)-1])
	if err != nil || got != o {
		t.Fatalf("ParseOutput = %+v, %v", got, err)
	}
	for _, bad := range []string{"12,olivia,-300", "12,olivia,-300,", "12,olivia,-300,x"} {
		if _, err := ParseOutput([]byte(bad)); err == nil {
			t.Errorf("ParseOutput(%q): no error", bad)
		}
	}
}

// FuzzParseLine checks that ParseLine never panics, that every error is
// malformed, and that what it accepts is what the format allows and prints
// back to a line that parses to the same entry.
func FuzzParseLine(f *testing.F) {
	for _, s := range []string{"1,alice,100", "2,zoë,-5", "3,a,+0", "0,a,1", "1,,1", "1,a,1,1", "1,a,99999999999999999999", "1,\xff,1",
		"1,a,0", "1,a,-0", "1,a,007", "123456789012345678,a,-123456789012345678", "1234567890123456789,a,1", "1,a,1234567890123456789", "1,a,-"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		checkCanonical(t, line)
		e, err := ParseLine(line)
		if err != nil {
			if !errors.Is(err, errMalformed) {
				t.Fatalf("ParseLine(%q): error %v does not wrap errMalformed", line, err)
			}
			return
		}
		if e.ID <= 0 || e.Account == "" || strings.Contains(e.Account, ",") || !utf8.ValidString(e.Account) {
			t.Fatalf("ParseLine(%q) accepted %+v", line, e)
		}
		if strings.Count(string(line), ",") != 2 {
			t.Fatalf("ParseLine(%q) accepted a line without exactly 3 fields", line)
		}
		out := AppendLine(nil, e)
		again, err := ParseLine(out[:len(out)-1])
		if err != nil || again != e {
			t.Fatalf("ParseLine(%q) = %+v; printed back as %q it parses to %+v, %v", line, e, out, again, err)
		}
	})
}

// FuzzParseOutput checks the parser of output.csv's lines (ledger check and
// the demonstration read the file back from disk): it never panics, every
// error is malformed, and a line it accepts is one AppendOutput writes for
// what it read, up to the spellings of the numbers the line format allows
// (a '+' sign, leading zeros), which parse to the same line again.
func FuzzParseOutput(f *testing.F) {
	for _, s := range []string{"1,alice,100,100", "2,zoë,-5,95", "3,a,+0,007", "1,alice,100", "1,alice,100,", "1,,1,1", "1,a,1,99999999999999999999", "1,\xff,1,1", ",,,", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		o, err := ParseOutput(line)
		if err != nil {
			if !errors.Is(err, errMalformed) {
				t.Fatalf("ParseOutput(%q): error %v does not wrap errMalformed", line, err)
			}
			return
		}
		out := AppendOutput(nil, o)
		again, err := ParseOutput(out[:len(out)-1])
		if err != nil || again != o {
			t.Fatalf("ParseOutput(%q) = %+v; written back as %q it parses to %+v, %v", line, o, out, again, err)
		}
	})
}

// FuzzParseAmount checks the ledger's amount parser against strconv: a
// field of an optional sign and decimal digits is accepted exactly when
// strconv.ParseInt takes it, with the same value; anything else is
// malformed.
func FuzzParseAmount(f *testing.F) {
	for _, s := range []string{"0", "-1", "+7", "007", "9223372036854775807", "-9223372036854775808", "9223372036854775808", "-", "1x", "99999999999999999999x"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := parseAmount(b)
		digits := strings.TrimLeft(string(b), "+-")
		wellFormed := len(b)-len(digits) <= 1 && digits != "" && strings.Trim(digits, "0123456789") == ""
		want, serr := strconv.ParseInt(string(b), 10, 64)
		switch {
		case wellFormed && serr == nil:
			if err != nil || got != want {
				t.Fatalf("parseAmount(%q) = %d, %v; strconv says %d", b, got, err, want)
			}
		case err == nil:
			t.Fatalf("parseAmount(%q) = %d; want an error (strconv: %v)", b, got, serr)
		case !errors.Is(err, errMalformed):
			t.Fatalf("parseAmount(%q): error %v does not wrap errMalformed", b, err)
		}
	})
}

// TestParseCanonical holds the one-pass parser to the checked one: a line
// it takes parses to the same entry, and is the line AppendLine writes for
// it (the ledger's output line starts with its bytes); the lines it leaves
// to the checked parser include every non-canonical spelling.
func TestParseCanonical(t *testing.T) {
	for _, tc := range []struct {
		line string
		ok   bool
	}{
		{"1,alice,100", true}, {"42,bob,-7", true}, {"1,a,0", true},
		{"123456789012345678,a,-123456789012345678", true},
		{"1,a,+5", false}, {"1,a,007", false}, {"1,a,-0", false}, {"1,a,-", false}, {"1,a,", false},
		{"1,zoë,1", true}, {"7,ünïcödé,-3", true},
		{"01,a,1", false}, {"1,\xff,1", false}, {"1,zo\xc3,1", false}, {"1,,1", false}, {"1,a,1,1", false}, {"1,a", false}, {"", false},
		{"1234567890123456789,a,1", false}, {"1,a,1234567890123456789", false}, {"1,a,1x", false},
	} {
		_, _, _, ok := parseCanonical([]byte(tc.line))
		if ok != tc.ok {
			t.Errorf("parseCanonical(%q) ok = %v, want %v", tc.line, ok, tc.ok)
		}
		checkCanonical(t, []byte(tc.line))
	}
}

// checkCanonical checks parseCanonical on line against parseChecked.
func checkCanonical(t *testing.T, line []byte) {
	t.Helper()
	id, account, amount, ok := parseCanonical(line)
	if !ok {
		return
	}
	id2, account2, amount2, err := parseChecked(line)
	if err != nil || id != id2 || string(account) != string(account2) || amount != amount2 {
		t.Fatalf("parseCanonical(%q) = %d %q %d; parseChecked: %d %q %d, %v", line, id, account, amount, id2, account2, amount2, err)
	}
	if out := AppendLine(nil, Entry{ID: id, Account: string(account), Amount: amount}); string(out) != string(line)+"\n" {
		t.Fatalf("parseCanonical took %q, which AppendLine writes as %q", line, out)
	}
}
