package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"strings"
	"testing"

	"github.com/tidemark-go/tidemark/bench"
)

// The naive program applies every line once across runs: a second run
// over the same input reads only what was appended, an output past its
// committed length (a batch whose commit never happened) is cut back, and
// both variants, on both databases, end with the balances of a model and
// one output line per input line.
func TestNaiveLedger(t *testing.T) {
	for _, store := range []string{"bbolt", "pebble"} {
		for _, mode := range []string{"map", "bounded"} {
			t.Run(store+"/"+mode, func(t *testing.T) {
				dir := t.TempDir()
				in, data := filepath.Join(dir, "in.csv"), filepath.Join(dir, "data")
				var input bytes.Buffer
				if err := bench.GenAccounts(&input, 2500, 300, 1, 1); err != nil {
					t.Fatal(err)
				}
				input.WriteString("bad line\n")
				if err := os.WriteFile(in, input.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				if n, err := run(in, data, store, mode == "map", 1000); err != nil || n != 2501 {
					t.Fatalf("first run: %d lines, %v", n, err)
				}
				// Bytes of a batch that never committed, then more lines.
				out := filepath.Join(data, "output.csv")
				f, err := os.OpenFile(out, os.O_WRONLY|os.O_APPEND, 0)
				if err != nil {
					t.Fatal(err)
				}
				fmt.Fprintf(f, "999999,account-00000001,5,5\n")
				f.Close()
				f, err = os.OpenFile(in, os.O_WRONLY|os.O_APPEND, 0)
				if err != nil {
					t.Fatal(err)
				}
				var more bytes.Buffer
				if err := bench.GenAccounts(&more, 1700, 300, 2501, 2); err != nil {
					t.Fatal(err)
				}
				f.Write(more.Bytes())
				f.Close()
				input.Write(more.Bytes())
				if n, err := run(in, data, store, mode == "map", 1000); err != nil || n != 1700 {
					t.Fatalf("second run: %d lines, %v", n, err)
				}
				if n, err := run(in, data, store, mode == "map", 1000); err != nil || n != 0 {
					t.Fatalf("third run, nothing new: %d lines, %v", n, err)
				}

				want := map[string]int64{}
				var wantOut strings.Builder
				for _, l := range strings.Split(strings.TrimSuffix(input.String(), "\n"), "\n") {
					id, acct, amount, ok := parse([]byte(l))
					if !ok {
						continue
					}
					want[string(acct)] += amount
					fmt.Fprintf(&wantOut, "%d,%s,%d,%d\n", id, acct, amount, want[string(acct)])
				}
				got, err := os.ReadFile(out)
				if err != nil {
					t.Fatal(err)
				}
				if string(got) != wantOut.String() {
					t.Fatalf("output.csv differs from the model: %d bytes, want %d", len(got), wantOut.Len())
				}
				d := openDB(t, store, data)
				defer d.close()
				n := 0
				err = d.all(func(a []byte, b int64) {
					n++
					if want[string(a)] != b {
						t.Errorf("balance of %s: %d, want %d", a, b, want[string(a)])
					}
				})
				if err != nil || n != len(want) {
					t.Fatalf("%d balances, want %d; %v", n, len(want), err)
				}
				if off, err := d.meta("offset"); err != nil || off != int64(input.Len()) {
					t.Fatalf("offset %d, want %d; %v", off, input.Len(), err)
				}
				if applied, _ := d.meta("applied"); applied != 4200 {
					t.Fatalf("applied %d, want 4200", applied)
				}
			})
		}
	}
}

func openDB(t *testing.T, store, data string) db {
	t.Helper()
	var d db
	var err error
	if store == "bbolt" {
		d, err = openBolt(filepath.Join(data, "naive.bolt"))
	} else {
		d, err = openPebble(filepath.Join(data, "naive.pebble"))
	}
	if err != nil {
		t.Fatal(err)
	}
	return d
}
