package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestGenDeterministic(t *testing.T) {
	var a, b, c bytes.Buffer
	o := GenOptions{Lines: 500, Accounts: 7, Seed: 3}
	if err := Gen(&a, o); err != nil {
		t.Fatal(err)
	}
	if err := Gen(&b, o); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("the same options gave different ledgers")
	}
	o.Seed = 4
	if err := Gen(&c, o); err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(a.Bytes(), c.Bytes()) {
		t.Fatal("another seed gave the same ledger")
	}
}

func TestGenLines(t *testing.T) {
	var buf bytes.Buffer
	if err := Gen(&buf, GenOptions{Lines: 1000, Accounts: 25, Seed: 1, FirstID: 100}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 1000 {
		t.Fatalf("%d lines, want 1000", len(lines))
	}
	accounts := map[string]bool{}
	for i, l := range lines {
		e, err := ParseLine([]byte(l))
		if err != nil {
			t.Fatalf("line %d %q: %v", i+1, l, err)
		}
		if e.ID != int64(100+i) {
			t.Fatalf("line %d has id %d, want %d", i+1, e.ID, 100+i)
		}
		accounts[e.Account] = true
	}
	if len(accounts) != 25 {
		t.Fatalf("%d accounts, want 25", len(accounts))
	}
}

func TestGenMalformed(t *testing.T) {
	var buf bytes.Buffer
	if err := Gen(&buf, GenOptions{Lines: 120, Accounts: 3, Seed: 1, MalformedEvery: 10}); err != nil {
		t.Fatal(err)
	}
	m := NewModel()
	if _, err := m.ReadFrom(&buf); err != nil {
		t.Fatal(err)
	}
	if m.Lines != 120 || m.Malformed != 12 || m.Applied != 108 {
		t.Fatalf("lines %d, malformed %d, applied %d; want 120, 12, 108", m.Lines, m.Malformed, m.Applied)
	}
}

func TestGenCommand(t *testing.T) {
	out := filepath.Join(t.TempDir(), "l.csv")
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"gen", "--lines", "50", "--seed", "9", "--out", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	Gen(&want, GenOptions{Lines: 50, Accounts: 20, Seed: 9})
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatal("gen --out wrote something else than Gen")
	}
	stdout.Reset()
	if code := Main([]string{"gen", "--lines", "50", "--seed", "9"}, &stdout, &stderr); code != 0 || !bytes.Equal(stdout.Bytes(), want.Bytes()) {
		t.Fatalf("gen to stdout: exit %d, %d bytes", code, stdout.Len())
	}
	if code := Main([]string{"gen", "--lines", "-1"}, &stdout, &stderr); code != 2 {
		t.Fatalf("gen --lines -1: exit %d, want 2", code)
	}
}
