package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"

	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark-go/tidemark/bench"
	"github.com/tidemark-go/tidemark/internal/pgtest"
)

// TestMain stops the PostgreSQL cluster the tests started (pgtest).
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m).Run()) }

// The naive program applies every line once across runs: a second run
// over the same input reads only what was appended, an output past its
// committed length (a batch whose commit never happened) is cut back, and
// both variants, on the three databases, end with the balances of a
// model and one output line per input line (PostgreSQL: output rows, one
// a batch, that follow each other).
func TestNaiveLedger(t *testing.T) {
	for _, store := range []string{"bbolt", "pebble", "postgres"} {
		for _, mode := range []string{"map", "bounded"} {
			t.Run(store+"/"+mode, func(t *testing.T) {
				dsn := ""
				if store == "postgres" {
					dsn = pgtest.Shared(t).Schema(t)
				}
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
				if n, err := run(in, data, store, dsn, mode == "map", 1000); err != nil || n != 2501 {
					t.Fatalf("first run: %d lines, %v", n, err)
				}
				// Bytes of a batch that never committed (in output.csv; a
				// database that keeps the output has none), then more
				// lines.
				out := filepath.Join(data, "output.csv")
				if dsn == "" {
					f, err := os.OpenFile(out, os.O_WRONLY|os.O_APPEND, 0)
					if err != nil {
						t.Fatal(err)
					}
					fmt.Fprintf(f, "999999,account-00000001,5,5\n")
					f.Close()
				}
				f, err := os.OpenFile(in, os.O_WRONLY|os.O_APPEND, 0)
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
				if n, err := run(in, data, store, dsn, mode == "map", 1000); err != nil || n != 1700 {
					t.Fatalf("second run: %d lines, %v", n, err)
				}
				if n, err := run(in, data, store, dsn, mode == "map", 1000); err != nil || n != 0 {
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
				got := readOutput(t, out, dsn)
				if string(got) != wantOut.String() {
					t.Fatalf("output.csv differs from the model: %d bytes, want %d", len(got), wantOut.Len())
				}
				d := openDB(t, store, data, dsn)
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

func openDB(t *testing.T, store, data, dsn string) db {
	t.Helper()
	var d db
	var err error
	switch store {
	case "bbolt":
		d, err = openBolt(filepath.Join(data, "naive.bolt"))
	case "pebble":
		d, err = openPebble(filepath.Join(data, "naive.pebble"))
	default:
		d, err = openPG(dsn)
	}
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// readOutput returns the program's output: output.csv, or with dsn the
// rows of naive_output in order, each starting where the one before ended.
func readOutput(t *testing.T, path, dsn string) []byte {
	t.Helper()
	if dsn == "" {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT at, lines FROM naive_output ORDER BY at`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []byte
	for rows.Next() {
		var at int64
		var lines []byte
		if err := rows.Scan(&at, &lines); err != nil {
			t.Fatal(err)
		}
		if at != int64(len(out)) {
			t.Fatalf("an output row at %d follows %d bytes", at, len(out))
		}
		out = append(out, lines...)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
