package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// rejectRecordMax bounds the record of one rejected empty line in
// rejects.csv: its epoch, position and reason, no more.
const rejectRecordMax = 80

// The row: a 1 MB file of empty lines made a 93 MB rejects.csv,
// 1,000,002 log lines and 108 MB of RSS (one record and one log line per
// reject, every reject's key kept in memory). Now each reject is one short
// record, the log reports the rejects a few times a second, and the
// memory of a run does not grow with the number of rejects: a run of
// 1,000,000 rejects peaks near a run of 100,000.
func TestManyRejectsAreBounded(t *testing.T) {
	exe := ledgerExe(t)
	dir := t.TempDir()
	run := func(n int) (rssKB int64) {
		t.Helper()
		input := filepath.Join(dir, fmt.Sprintf("empty-%d.csv", n))
		data := filepath.Join(dir, fmt.Sprintf("data-%d", n))
		if err := os.WriteFile(input, bytes.Repeat([]byte{'\n'}, n), 0o644); err != nil {
			t.Fatal(err)
		}
		c, log := runToEnd(t, exe, []string{"--input", input, "--data", data, "--progress", "none"}, filepath.Join(dir, fmt.Sprintf("run-%d.log", n)), childTimeout)
		if c.err != nil {
			t.Fatalf("%d empty lines: %v\n%s", n, c.err, tail(log, 2000))
		}
		size := fileSize(t, filepath.Join(data, rejectsFile))
		if size > int64(n)*rejectRecordMax {
			t.Errorf("%d empty lines (%d bytes): rejects.csv is %d bytes, more than %d a line", n, n, size, rejectRecordMax)
		}
		rejects, _, err := CountRejects(filepath.Join(data, rejectsFile))
		if err != nil || rejects != n {
			t.Errorf("%d empty lines: %d rejects recorded (%v)", n, rejects, err)
		}
		// The log records (the events on stdout, one a save, are not
		// the log's).
		records := strings.Count(log, "level=")
		if records > 200 {
			t.Errorf("%d empty lines: %d log records, first:\n%s", n, records, head(log, 2000))
		}
		ru, ok := c.cmd.ProcessState.SysUsage().(*syscall.Rusage)
		if !ok {
			t.Fatal("no resource usage of the child")
		}
		t.Logf("%d empty lines: rejects.csv %d bytes, %d log records, peak RSS %d KB", n, size, records, ru.Maxrss)
		return ru.Maxrss
	}
	small := run(100_000)
	big := run(1_000_000)
	// A key kept per reject is 900,000 more keys: tens of MB.
	if grown := big - small; grown > 32<<10 {
		t.Errorf("peak RSS grew by %d KB from 100,000 to 1,000,000 rejects (%d KB to %d KB): the run keeps something per reject", grown, small, big)
	}
}

func head(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// rejectsInput writes a ledger of n lines, every third malformed, with
// lines longer than the maximum at a third, at two thirds and at the end.
func rejectsInput(t *testing.T, path string, n int, seed uint64) {
	t.Helper()
	if err := GenFile(path, GenOptions{Lines: n, Accounts: 20, Seed: seed, MalformedEvery: 3}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(b, []byte{'\n'})
	long := append(bytes.Repeat([]byte{'x'}, maxLineBytes+maxLineBytes/2), '\n')
	var out []byte
	for i, l := range lines {
		if i == len(lines)/3 || i == 2*len(lines)/3 {
			out = append(out, long...)
		}
		out = append(out, l...)
	}
	out = append(out, long...)
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// The reject log is exactly once across kills: a run of a ledger where
// every third line is malformed, with lines too long between them and at
// the end, is killed with SIGKILL at several moments chosen by the saves,
// then settles; rejects.csv holds each rejected line once, the state is
// exact, for both stores.
func TestRejectsExactlyOnceAcrossKills(t *testing.T) {
	exe := ledgerExe(t)
	for _, store := range []string{"bbolt", "pebble"} {
		t.Run(store, func(t *testing.T) {
			dir := t.TempDir()
			input := filepath.Join(dir, "ledger.csv")
			data := filepath.Join(dir, "data")
			const n = 30_000 // 20,000 well-formed
			rejectsInput(t, input, n, 7)
			base := []string{"--input", input, "--data", data, "--store", store, "--progress", "none", "--batch", "50"}
			run := 0
			for _, threshold := range []int64{500, 3000, 6500, 9000, 13500, 17000} {
				run++
				killAfterSaved(t, exe, base, dir, run, threshold)
			}
			settle(t, exe, base, dir, &run)
			r := checkExact(t, data, input)
			if r.WantRejects != n/3+3 {
				t.Fatalf("the model expects %d rejects, want %d", r.WantRejects, n/3+3)
			}
			t.Logf("%d kills; %d lines applied, %d rejects recorded once each", run-1, r.State.Applied, r.Rejects)
		})
	}
}
