package state

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// pgRowCount returns the rows of table whose col is id, in the schema of
// dir.
func pgRowCount(t *testing.T, dir, table, col string, id any) int {
	t.Helper()
	var n int
	if err := pgConn(t, dir).QueryRow(context.Background(), "SELECT count(*) FROM "+table+" WHERE "+col+" = $1", id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// pgMarker returns the format record of the store of dir in tidemark_kv,
// "" for none.
func pgMarker(t *testing.T, dir string) string {
	t.Helper()
	var v []byte
	err := pgConn(t, dir).QueryRow(context.Background(), sqlMarker, dir).Scan(&v)
	if err != nil && !strings.Contains(err.Error(), "no rows") {
		t.Fatal(err)
	}
	return string(v)
}

// TestPostgresNewStoreKeepsItsRowsBySid: a new PostgreSQL store is of
// format 5: its rows in tidemark_data under its sid, its format record
// there and in tidemark_kv (where a version before format 5 looks), and
// nothing else of it in tidemark_kv. It reopens as it was.
func TestPostgresNewStoreKeepsItsRowsBySid(t *testing.T) {
	dir := t.TempDir()
	be := backend{name: Postgres, open: openPGDir}
	s := mustOpen(t, be, dir, testOpts())
	for i := 1; i <= 3; i++ {
		applyLine(t, s, del("f", 1, i))
	}
	if err := s.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	e := pgEngineOf(s)
	if !e.bySid() || s.Stats().Format != 5 {
		t.Fatalf("a new store keeps its rows by name, or says format %d, want 5", s.Stats().Format)
	}
	rs, id := pgRowsOf(t, dir)
	if rs != pgRowsBySid {
		t.Fatal("tidemark_ids has no row of the new store")
	}
	if n := pgRowCount(t, dir, "tidemark_kv", "store", dir); n != 1 {
		t.Fatalf("%d rows of the store in tidemark_kv, want its format record alone", n)
	}
	if m := pgMarker(t, dir); m != formatV5 {
		t.Fatalf("format record in tidemark_kv %q, want %q", m, formatV5)
	}
	var v []byte
	if err := pgConn(t, dir).QueryRow(t.Context(), rs.get, id, []byte{tagVersion}).Scan(&v); err != nil || string(v) != formatV5 {
		t.Fatalf("format record in tidemark_data %q (%v), want %q", v, err, formatV5)
	}
	if n := pgRowCount(t, dir, "tidemark_data", "sid", id); n < 3 {
		t.Fatalf("%d rows of the store in tidemark_data", n)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, be, dir, testOpts())
	defer s.Close()
	if v := getInt(t, s, "count"); v != 3 {
		t.Fatalf("count %d after the reopen, want 3", v)
	}
	applyLine(t, s, del("f", 1, 4))
	if err := s.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := pgRowCount(t, dir, "tidemark_kv", "store", dir); n != 1 {
		t.Fatalf("%d rows of the store in tidemark_kv after a commit of the reopened store, want 1", n)
	}
}

// pgOneLineStore makes a PostgreSQL store opened with o, applies line 1
// to it and closes it, and returns its name.
func pgOneLineStore(t *testing.T, o *Options) string {
	t.Helper()
	dir := t.TempDir()
	s := mustOpen(t, backend{name: Postgres, open: openPGDir}, dir, o)
	applyLine(t, s, del("f", 1, 1))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestPostgresStoreByNameStaysByName: a store of format 3, made by a
// version before format 5 (format3Opts), is read and written where it
// is, under its name in tidemark_kv, and stays of format 3.
func TestPostgresStoreByNameStaysByName(t *testing.T) {
	be := backend{name: Postgres, open: openPGDir}
	dir := pgOneLineStore(t, format3Opts())
	s := mustOpen(t, be, dir, testOpts())
	defer s.Close()
	if pgEngineOf(s).bySid() {
		t.Fatal("a store of format 3 opened by sid")
	}
	applyLine(t, s, del("f", 1, 2))
	if err := s.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if v := getInt(t, s, "count"); v != 2 {
		t.Fatalf("count %d, want 2", v)
	}
	if m := pgMarker(t, dir); m != formatVersion {
		t.Fatalf("format record %q, want %q", m, formatVersion)
	}
	if rs, _ := pgRowsOf(t, dir); rs != pgRowsByName {
		t.Fatal("the store of format 3 got a sid")
	}
	if n := pgRowCount(t, dir, "tidemark_kv", "store", dir); n < 3 {
		t.Fatalf("%d rows of the store in tidemark_kv", n)
	}
}

// TestPostgresFormat5RefusedByAnOlderVersion: a version before format 5
// (it reads the store's rows by name, and knows formats up to 4) finds
// the store's format record in tidemark_kv and refuses the store with
// ErrNewerFormat, writing nothing, instead of taking it for a new store
// and applying every line again.
func TestPostgresFormat5RefusedByAnOlderVersion(t *testing.T) {
	be := backend{name: Postgres, open: openPGDir}
	dir := pgOneLineStore(t, testOpts())
	_, id := pgRowsOf(t, dir)
	rows := pgRowCount(t, dir, "tidemark_data", "sid", id)
	o := testOpts()
	o.hooks = &hooks{pgByName: true, newestFormat: 4}
	if s, err := be.open(dir, o); !errors.Is(err, ErrNewerFormat) {
		if err == nil {
			s.Close()
		}
		t.Fatalf("open by a version that knows formats up to 4: %v, want ErrNewerFormat", err)
	}
	if n := pgRowCount(t, dir, "tidemark_kv", "store", dir); n != 1 {
		t.Fatalf("%d rows of the store in tidemark_kv after the refused open, want its format record alone", n)
	}
	if n := pgRowCount(t, dir, "tidemark_data", "sid", id); n != rows {
		t.Fatalf("%d rows in tidemark_data after the refused open, want %d", n, rows)
	}
	s := mustOpen(t, be, dir, testOpts())
	defer s.Close()
	if v := getInt(t, s, "count"); v != 1 {
		t.Fatalf("count %d, want 1", v)
	}
}

// TestPostgresFormat5Damaged: a store of format 5 whose sid row is gone
// cannot find its rows: the open fails with ErrCorrupt, and the store is
// not taken for a new one. One whose format record in tidemark_kv is gone
// finds its rows by its sid, and writes the record again.
func TestPostgresFormat5Damaged(t *testing.T) {
	be := backend{name: Postgres, open: openPGDir}
	t.Run("sid", func(t *testing.T) {
		dir := pgOneLineStore(t, testOpts())
		pgExec(t, dir, "DELETE FROM tidemark_ids WHERE store = $1", dir)
		s, err := be.open(dir, testOpts())
		if err == nil {
			s.Close()
		}
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "tidemark_ids") {
			t.Fatalf("open without the sid: %v, want ErrCorrupt naming tidemark_ids", err)
		}
		var n int
		if err := pgConn(t, dir).QueryRow(t.Context(), "SELECT count(*) FROM tidemark_ids").Scan(&n); err != nil || n != 0 {
			t.Fatalf("%d sids after the failed open (%v): the store was given a new one", n, err)
		}
	})
	t.Run("marker", func(t *testing.T) {
		dir := pgOneLineStore(t, testOpts())
		pgExec(t, dir, "DELETE FROM tidemark_kv WHERE store = $1", dir)
		s := mustOpen(t, be, dir, testOpts())
		defer s.Close()
		if v := getInt(t, s, "count"); v != 1 {
			t.Fatalf("count %d, want 1", v)
		}
		if m := pgMarker(t, dir); m != formatV5 {
			t.Fatalf("format record in tidemark_kv %q after the open, want %q written again", m, formatV5)
		}
	})
}

// pgFormat3Store makes a PostgreSQL store of format 3, by name, as a
// version before format 5 made it, of five lines, and returns its name,
// its backend, and its rows in tidemark_kv.
func pgFormat3Store(t *testing.T) (string, backend, int) {
	t.Helper()
	dir := t.TempDir()
	be := backend{name: Postgres, open: openPGDir}
	s := mustOpen(t, be, dir, format3Opts())
	for i := 1; i <= 5; i++ {
		applyLine(t, s, del("f", 1, i))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, be, pgRowCount(t, dir, "tidemark_kv", "store", dir)
}

// TestPostgresUpgradeMovesRowsToASid: Upgrade moves the rows of a store of
// format 3 (by name) into tidemark_data under a new sid in one
// transaction, and makes its format record name format 5 in both tables;
// the store then reads as before, and a second Upgrade has nothing to do.
func TestPostgresUpgradeMovesRowsToASid(t *testing.T) {
	dir, be, rows := pgFormat3Store(t)
	spec := pgSpec(t, dir)
	up, err := Upgrade(spec, &Options{Logger: quietLogger()})
	if err != nil || !up {
		t.Fatalf("Upgrade of a store of format 3: %v, %v; want it upgraded", up, err)
	}
	rs, id := pgRowsOf(t, dir)
	if rs != pgRowsBySid {
		t.Fatal("no sid after the upgrade")
	}
	if n := pgRowCount(t, dir, "tidemark_data", "sid", id); n != rows {
		t.Fatalf("%d rows in tidemark_data after the upgrade, want the %d of tidemark_kv before it", n, rows)
	}
	if n := pgRowCount(t, dir, "tidemark_kv", "store", dir); n != 1 {
		t.Fatalf("%d rows of the store left in tidemark_kv, want its format record alone", n)
	}
	if m := pgMarker(t, dir); m != formatV5 {
		t.Fatalf("format record in tidemark_kv %q, want %q", m, formatV5)
	}
	s := mustOpen(t, be, dir, testOpts())
	if !pgEngineOf(s).bySid() {
		t.Fatal("the upgraded store opened by name")
	}
	if v := getInt(t, s, "count"); v != 5 {
		t.Fatalf("count %d after the upgrade, want 5", v)
	}
	applyLine(t, s, del("f", 1, 6))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if up, err := Upgrade(spec, &Options{Logger: quietLogger()}); err != nil || up {
		t.Fatalf("second Upgrade: %v, %v; want nothing to do", up, err)
	}
}

// TestPostgresMoveRefusedOnceTakenOver: a move whose store another owner
// took over (its lease ran out while it moved) is refused by the fence at
// its end, whole: nothing moved, no sid given, the store by name as the
// new owner reads it.
func TestPostgresMoveRefusedOnceTakenOver(t *testing.T) {
	dir := t.TempDir()
	o := &Options{Logger: quietLogger(), Unbound: true, BatchSize: 1 << 20, BatchInterval: time.Hour, hooks: &hooks{pgByName: true}}
	_, ea := pgStaleOwner(t, dir, o)
	b, err := Open(pgSpec(t, dir, "lease", "1m"), &Options{Logger: quietLogger(), Unbound: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if pgEngineOf(b).bySid() {
		t.Fatal("the store of format 3 opened by sid")
	}
	rows := pgRowCount(t, dir, "tidemark_kv", "store", dir)
	if _, err := ea.moveToSid(); !errors.Is(err, ErrFenced) {
		t.Fatalf("move by the owner that was taken over: %v, want ErrFenced", err)
	}
	if ea.bySid() {
		t.Fatal("the refused move left the engine by sid")
	}
	if n := pgRowCount(t, dir, "tidemark_kv", "store", dir); n != rows {
		t.Fatalf("%d rows in tidemark_kv after the refused move, want %d", n, rows)
	}
	if rs, _ := pgRowsOf(t, dir); rs != pgRowsByName {
		t.Fatal("the refused move gave the store a sid")
	}
	if v := getInt(t, b, "count"); v != 1 {
		t.Fatalf("the new owner reads count %d, want 1", v)
	}
}

// TestPostgresUpgradeCutOffMovesNothing: an Upgrade whose connection is
// cut in the middle of the move (its server process terminated, as when
// the process or its machine dies) moves nothing: the store stays of
// format 3, by name, with every row, and the next Upgrade moves it.
func TestPostgresUpgradeCutOffMovesNothing(t *testing.T) {
	dir, be, rows := pgFormat3Store(t)
	heal := pgSlowInserts(t, dir, "tidemark_data", "")
	spec := pgSpec(t, dir)
	done := make(chan error, 1)
	go func() {
		_, err := Upgrade(spec, &Options{Logger: quietLogger()})
		done <- err
	}()
	pgTerminateSleeper(t, dir, "the move to reach the trigger")
	if err := <-done; err == nil || !strings.Contains(err.Error(), "moved nothing") {
		t.Fatalf("Upgrade cut off in its move: %v; want an error saying it moved nothing", err)
	}
	heal()
	if n := pgRowCount(t, dir, "tidemark_kv", "store", dir); n != rows {
		t.Fatalf("%d rows in tidemark_kv after the cut-off move, want %d", n, rows)
	}
	if m := pgMarker(t, dir); m != formatVersion {
		t.Fatalf("format record %q after the cut-off move, want %q", m, formatVersion)
	}
	if rs, _ := pgRowsOf(t, dir); rs != pgRowsByName {
		t.Fatal("the cut-off move left the store a sid")
	}
	s := mustOpen(t, be, dir, &Options{Logger: quietLogger(), Unbound: true, LockTimeout: time.Minute})
	if pgEngineOf(s).bySid() || getInt(t, s, "count") != 5 {
		t.Fatalf("after the cut-off move: by sid %v, count %d; want by name, 5", pgEngineOf(s).bySid(), getInt(t, s, "count"))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if up, err := Upgrade(spec, &Options{Logger: quietLogger()}); err != nil || !up {
		t.Fatalf("Upgrade after the cut-off one: %v, %v", up, err)
	}
	s = mustOpen(t, be, dir, testOpts())
	defer s.Close()
	if !pgEngineOf(s).bySid() || getInt(t, s, "count") != 5 {
		t.Fatalf("after the upgrade: by sid %v, count %d; want by sid, 5", pgEngineOf(s).bySid(), getInt(t, s, "count"))
	}
}
