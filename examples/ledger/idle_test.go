package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A `ledger run --follow` on an input it has applied whole, with a bbolt
// file larger than --verify-max-bytes: the file is checked while the run
// waits for new lines. The check finds damage (an account's stored key
// changed by a bit: bbolt alone would read it without a word), and the
// run stops at once with exit 1 and an error naming the data folder's
// file and what to do. It used to run on, idle, its store failed, until a new
// line came or it was stopped.
func TestFollowIdleStoreFoundDamaged(t *testing.T) {
	exe := ledgerExe(t)
	dir := t.TempDir()
	input, data := filepath.Join(dir, "ledger.csv"), filepath.Join(dir, "data")
	// Accounts enough for several leaf pages.
	if err := GenFile(input, GenOptions{Lines: 6_000, Accounts: 3_000, Seed: 17}); err != nil {
		t.Fatal(err)
	}
	args := []string{"--input", input, "--data", data, "--store", "bbolt", "--progress", "none"}
	mustSettle(t, exe, args, filepath.Join(dir, "run1.log"))
	file := filepath.Join(data, "state.bolt")
	damageAccountKey(t, input, file)

	c, log := runToEnd(t, exe, append(args, "--follow", "--verify-max-bytes", "1"), filepath.Join(dir, "run2.log"), promptly)
	expectFailure(t, c, log, file, "is damaged", "backup")
	// The check may find the damage before the open returns (a step of
	// the open waits for it); once the store is open, the server's stop is
	// the store's failure, said as such.
	if !strings.Contains(log, "open its store") && (!strings.Contains(log, "store failed") || !strings.Contains(log, "group="+groupName)) {
		t.Errorf("the server started, and the log does not say that the store of group %s failed:\n%s", groupName, log)
	}
}

// damageAccountKey flips a bit in the last byte of every copy of the
// account name of input's first line in the bbolt file at path: the
// stored keys of that account no longer match their values' checksums
// (bbolt itself sees nothing). Open reads no account, so only the check
// of the file finds it.
func damageAccountKey(t *testing.T, input, path string) {
	t.Helper()
	in, err := os.ReadFile(input)
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := bytes.Cut(in, []byte("\n"))
	fields := bytes.Split(first, []byte(","))
	if len(fields) < 3 || len(fields[1]) == 0 {
		t.Fatalf("the first line %q names no account", first)
	}
	name := fields[1]
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for at := 0; ; {
		i := bytes.Index(b[at:], name)
		if i < 0 {
			break
		}
		b[at+i+len(name)-1] ^= 1
		at += i + len(name)
		n++
	}
	if n == 0 {
		t.Fatalf("account %q is not in %s", name, path)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
