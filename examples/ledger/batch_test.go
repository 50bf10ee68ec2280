package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunRefusesAKeyTooLargeInARun: a well-formed line whose account the
// store cannot hold (longer than bbolt's 32 KiB keys), in the middle of
// the lines that HandleBatch applies in one ApplyEach, is rejected into
// rejects.csv with its reason, and nothing else is lost or applied twice:
// the lines before it in the run stay applied, those after it are applied
// by the next call. A second run over the file changes nothing.
func TestRunRefusesAKeyTooLargeInARun(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "ledger.csv")
	data := filepath.Join(dir, "data")
	var b bytes.Buffer
	Gen(&b, GenOptions{Lines: 3000, Accounts: 7, Seed: 11})
	lines := strings.SplitAfter(b.String(), "\n")
	var in strings.Builder
	for i, l := range lines {
		in.WriteString(l)
		if i == 1500 {
			fmt.Fprintf(&in, "9000001,%s,5\n", strings.Repeat("x", 40_000))
		}
	}
	if err := os.WriteFile(input, []byte(in.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	for run := 1; run <= 2; run++ {
		code, _, stderr := runLedger(t, "run", "--input", input, "--data", data, "--store", "bbolt", "--progress", "none")
		if code != 0 {
			t.Fatalf("run %d: exit %d\n%s", run, code, stderr)
		}
		r, err := CheckDir(data, input)
		if err != nil {
			t.Fatal(err)
		}
		if !r.OK() || r.Twice != 0 || r.Unknown != 0 || r.Refused != 1 || r.Rejects != 1 || r.State.Applied != 3000 {
			var w strings.Builder
			r.Write(&w)
			t.Fatalf("run %d: want 3000 lines applied once and the line too large refused:\n%s\n%s", run, w.String(), stderr)
		}
		if !strings.Contains(r.FirstRefusal, "line 9000001") {
			t.Fatalf("run %d: the refusal is of %s, want line 9000001", run, r.FirstRefusal)
		}
	}
}
