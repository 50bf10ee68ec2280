package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-go/tidemark/internal/pgtest"
)

// pgFileDSN returns a database of t's own for a file run with its state
// in PostgreSQL: a schema of the shared test server, and a lease of 1 s,
// so that the restart of a killed run waits 1 s for it, not 15.
func pgFileDSN(t *testing.T) string {
	t.Helper()
	return pgtest.WithParam(pgtest.Shared(t).Schema(t), "lease", "1s")
}

// runFile runs `ledger run args` as a child process to its end and
// returns its stderr; it fails t unless the run exits 0.
func runFile(t *testing.T, exe string, args []string, dir string, run int) string {
	t.Helper()
	logPath := filepath.Join(dir, "run"+strings.Repeat("+", run)+".log")
	c, err := startChild(exe, args, logPath)
	if err != nil {
		t.Fatal(err)
	}
	err = c.wait(childTimeout)
	log, _ := os.ReadFile(logPath)
	if err != nil {
		t.Fatalf("run %d: %v\n%s", run, err, log)
	}
	return string(log)
}

// TestPostgresFileRun: `ledger run --store postgres://…` on a file keeps
// its state and its outputs in the database: check verifies it like a
// bbolt folder, a restart on a grown input reads only the new lines (none
// skipped, none applied twice), and `ledger output` prints output.csv.
func TestPostgresFileRun(t *testing.T) {
	exe := ledgerExe(t)
	db := pgFileDSN(t)
	dir := t.TempDir()
	input, data := filepath.Join(dir, "ledger.csv"), filepath.Join(dir, "data")
	if err := GenFile(input, GenOptions{Lines: 20000, Accounts: 50, Seed: 11, MalformedEvery: 97}); err != nil {
		t.Fatal(err)
	}
	args := []string{"--input", input, "--data", data, "--store", db, "--progress", "none"}
	log := runFile(t, exe, args, dir, 1)
	if !strings.Contains(log, "20000 lines read") || !strings.Contains(log, "0 skipped as already applied") {
		t.Fatalf("first run:\n%s", log)
	}
	folder, err := readPGFolder(data)
	if err != nil || folder == nil || !strings.HasPrefix(folder.Store, pgStorePrefix+"data/") {
		t.Fatalf("the data folder's POSTGRES file: %+v, %v", folder, err)
	}
	if !strings.Contains(folder.Database, "lease=1s") {
		t.Fatalf("POSTGRES records database %q, want the DSN given", folder.Database)
	}
	if _, err := os.Stat(filepath.Join(data, outputFile)); !os.IsNotExist(err) {
		t.Fatalf("a postgres run wrote %s in its data folder (%v): its outputs are rows of the store", outputFile, err)
	}
	r := checkExact(t, data, input)
	if r.State.Applied == 0 || r.Rejects == 0 {
		t.Fatalf("applied %d, rejected %d: want both", r.State.Applied, r.Rejects)
	}

	// The input grows: the restart reads the new lines only.
	more := filepath.Join(dir, "more.csv")
	if err := GenFile(more, GenOptions{Lines: 5000, Accounts: 50, Seed: 12, FirstID: 20001, MalformedEvery: 97}); err != nil {
		t.Fatal(err)
	}
	appendFile(t, input, more)
	log = runFile(t, exe, args, dir, 2)
	if !strings.Contains(log, "5000 lines read") || !strings.Contains(log, "0 skipped as already applied") {
		t.Fatalf("the restart read something twice, or not the new lines:\n%s", log)
	}
	checkExact(t, data, input)
	// Nothing new: nothing read. The folder's recorded database serves
	// when --store is left out.
	noStore := []string{"--input", input, "--data", data, "--progress", "none"}
	if log = runFile(t, exe, noStore, dir, 3); !strings.Contains(log, "0 lines read") {
		t.Fatalf("a run over nothing new:\n%s", log)
	}

	final := checkExact(t, data, input)
	code, out, errs := runMain("output", "--data", data)
	if code != 0 || int64(strings.Count(out, "\n")) != final.State.Applied {
		t.Fatalf("output: exit %d, %d lines, want %d: %s", code, strings.Count(out, "\n"), final.State.Applied, errs)
	}
	sum, err := ReadOutputFrom(strings.NewReader(out))
	if err != nil || sum.Bad != 0 || sum.Unfollowed != 0 {
		t.Fatalf("ledger output: %+v, %v", sum, err)
	}
	code, out, errs = runMain("output", "--data", data, "--name", rejectsFile)
	if code != 0 || strings.Count(out, "\n") != final.Rejects {
		t.Fatalf("output --name %s: exit %d: %d records, want %d: %s", rejectsFile, code, strings.Count(out, "\n"), final.Rejects, errs)
	}
	if code, out, errs := runMain("check", "--input", input, "--data", data, "--store", db); code != 0 || !strings.Contains(out, "lines missing: 0, output lines written twice: 0") {
		t.Fatalf("check --store: exit %d: %s%s", code, out, errs)
	}
	if code, out, errs := runMain("balances", "--data", data); code != 0 || !strings.Contains(out, "applied ") {
		t.Fatalf("balances: exit %d: %s%s", code, out, errs)
	}
}

// appendFile appends the file from to the file to.
func appendFile(t *testing.T, to, from string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	appendTo(t, to, b)
}

// TestPostgresFileMistakes: the plausible mistakes of a file run with its
// state in PostgreSQL each end in an error that says what to do, and none
// reads a line.
func TestPostgresFileMistakes(t *testing.T) {
	exe := ledgerExe(t)
	db := pgFileDSN(t)
	other := pgFileDSN(t) // another schema: another database, to the store
	dir := t.TempDir()
	input := filepath.Join(dir, "ledger.csv")
	if err := GenFile(input, GenOptions{Lines: 3000, Accounts: 7, Seed: 5}); err != nil {
		t.Fatal(err)
	}
	// A bbolt folder and a postgres one, each run once.
	boltData, pgData := filepath.Join(dir, "bolt"), filepath.Join(dir, "pg")
	runFile(t, exe, []string{"--input", input, "--data", boltData, "--pointer-dir", filepath.Join(dir, "pb"), "--progress", "none"}, dir, 1)
	pgArgs := []string{"--input", input, "--data", pgData, "--pointer-dir", filepath.Join(dir, "pp"), "--progress", "none"}
	runFile(t, exe, append(pgArgs, "--store", db), dir, 2)

	cases := []struct {
		name string
		args []string
		want string
	}{
		{"a bbolt folder run with --store postgres://", []string{"run", "--input", input, "--data", boltData, "--pointer-dir", filepath.Join(dir, "pb"), "--store", db}, "holds a local store"},
		{"a postgres folder run with --store bbolt", append([]string{"run", "--store", "bbolt"}, pgArgs...), "keeps its state in PostgreSQL"},
		{"a postgres folder run with another database", append([]string{"run", "--store", other}, pgArgs...), "which --store"},
		{"a DSN naming the store", append([]string{"run", "--store", pgtest.WithParam(db, "store", "x")}, pgArgs...), "no store= parameter"},
		{"a DSN of no server", append([]string{"run", "--store", "postgres://nobody@127.0.0.1:1/none?connect_timeout=5"}, pgArgs...), "connect to --store"},
		{"check against another database", []string{"check", "--input", input, "--data", pgData, "--store", other}, "does not hold"},
	}
	for _, c := range cases {
		code, out, errs := runMain(c.args...)
		if code == 0 || !strings.Contains(errs, c.want) {
			t.Errorf("%s: exit %d, want an error saying %q:\n%s%s", c.name, code, c.want, out, errs)
		}
	}
	// None of them touched the stores: both are still exact.
	checkExact(t, boltData, input)
	checkExact(t, pgData, input)

	// A second process on the same folder while a run holds it (paced,
	// on an input that grew).
	more := filepath.Join(dir, "more.csv")
	if err := GenFile(more, GenOptions{Lines: 2000, Accounts: 7, Seed: 6, FirstID: 3001}); err != nil {
		t.Fatal(err)
	}
	appendFile(t, input, more)
	// 2,000 lines at 5 ms each: 10 s, longer than an open waits for a live
	// lease (the lease, 1 s, and 5 s).
	c, err := startChild(exe, append(pgArgs, "--pace", "5ms"), filepath.Join(dir, "paced.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !c.waitApplied(3100, childTimeout) {
		t.Fatalf("the paced run saved nothing new: %v", c.wait(childTimeout))
	}
	code, out, errs := runMain(append([]string{"run", "--pointer-dir", filepath.Join(dir, "pq")}, pgArgs[:4]...)...)
	if code == 0 || !strings.Contains(errs, "in use by another ledger process") {
		t.Errorf("a second run on the folder: exit %d, want the folder's lock:\n%s%s", code, out, errs)
	}
	// A copy of the folder names the same store: a run on it, and a check,
	// while the first run holds the store's lease, wait for the lease
	// (1 s and 5 s), then fail naming its owner. Both at once.
	copied := filepath.Join(dir, "copied")
	if err := os.MkdirAll(copied, 0o755); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(pgData, pgFolderFile)); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(filepath.Join(copied, pgFolderFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	checked := make(chan string, 1)
	go func() {
		code, _, errs := runMain("check", "--input", input, "--data", pgData)
		checked <- fmt.Sprintf("exit %d: %s", code, errs)
	}()
	code, out, errs = runMain("run", "--input", input, "--data", copied, "--pointer-dir", filepath.Join(dir, "pc"), "--progress", "none")
	if code == 0 || !strings.Contains(errs, "owned by") || !strings.Contains(errs, "is leased by") {
		t.Errorf("a run on a copy of the folder while the first holds the store: exit %d, want the lease's owner:\n%s%s", code, out, errs)
	}
	if res := <-checked; !strings.Contains(res, "a ledger run holds the store") || strings.HasPrefix(res, "exit 0") {
		t.Errorf("check while a run holds the store: %s", res)
	}
	t.Logf("the run on the copy and the check refused after %v", time.Since(start).Round(time.Millisecond))
	if c.exitedNow() {
		t.Fatalf("the paced run ended before the refusals were seen: they prove nothing: %v", c.wait(childTimeout))
	}
	c.kill()
	// The restart waits for the killed run's lease, says so, and ends the
	// ledger exactly.
	log := runFile(t, exe, pgArgs, dir, 3)
	if !strings.Contains(log, "is leased by") {
		t.Logf("the restart found the lease run out already:\n%s", log)
	}
	checkExact(t, pgData, input)
}

// TestPostgresOutputOfBoltFolder: ledger output prints a bbolt folder's
// output.csv too, byte for byte.
func TestPostgresOutputOfBoltFolder(t *testing.T) {
	dir := t.TempDir()
	input, data := filepath.Join(dir, "ledger.csv"), filepath.Join(dir, "data")
	if err := GenFile(input, GenOptions{Lines: 300, Accounts: 5, Seed: 2}); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := runMain("run", "--input", input, "--data", data, "--progress", "none"); code != 0 {
		t.Fatalf("run: %s", errs)
	}
	code, out, errs := runMain("output", "--data", data)
	want, _ := os.ReadFile(filepath.Join(data, outputFile))
	if code != 0 || !bytes.Equal([]byte(out), want) || len(want) == 0 {
		t.Fatalf("output: exit %d, %d bytes, want %d: %s", code, len(out), len(want), errs)
	}
}

// FuzzReadPGFolder: a data folder's POSTGRES file, whatever its bytes,
// reads as a store and a database, or as an error; never a panic, never
// an empty name. What it reads is written back (writePGFolder) and read
// again the same.
func FuzzReadPGFolder(f *testing.F) {
	f.Add([]byte("# tidemark ledger\nstore=ledger-file/data/0123456789abcdef\ndatabase=postgres://u@h:5432/db\n"))
	f.Add([]byte("store=a=b\r\ndatabase=\nstore=\ndatabase=x"))
	f.Add([]byte("database=postgres://u@h/db?sslmode=disable\nstore= spaced \nother=1\nnoequals\n"))
	f.Add([]byte("store=x\n" + strings.Repeat("y", 70000) + "\ndatabase=z\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, pgFolderFile), data, 0o644); err != nil {
			t.Fatal(err)
		}
		pf, err := readPGFolder(dir)
		if err != nil {
			if pf != nil {
				t.Fatalf("readPGFolder(%q): %+v with the error %v", data, pf, err)
			}
			return
		}
		if pf == nil || pf.Store == "" || pf.Database == "" || strings.ContainsAny(pf.Store+pf.Database, "\n") {
			t.Fatalf("readPGFolder(%q) = %+v: want a store and a database, each one line", data, pf)
		}
		if strings.HasSuffix(pf.Store, "\r") || strings.HasSuffix(pf.Database, "\r") {
			return // a line's \r is read as its end: written back, it is lost
		}
		if err := writePGFolder(dir, pf); err != nil {
			t.Fatal(err)
		}
		again, err := readPGFolder(dir)
		if err != nil || *again != *pf {
			t.Fatalf("readPGFolder(%q) = %+v; written back and read again: %+v, %v", data, pf, again, err)
		}
	})
}

// A POSTGRES file with a line too long to read is damaged, even when its
// store and database came before it.
func TestReadPGFolderLongLine(t *testing.T) {
	dir := t.TempDir()
	data := "store=ledger-file/d/00\ndatabase=postgres://u@h/db\n" + strings.Repeat("x", 70000) + "\n"
	if err := os.WriteFile(filepath.Join(dir, pgFolderFile), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if pf, err := readPGFolder(dir); err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("readPGFolder of a file with a line of 70,000 bytes: %+v, %v; want the error of a damaged file", pf, err)
	}
}
