package state

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tidemark-go/tidemark/internal/pgtest"
)

// The PostgreSQL row of the conformance table: the "directory" of a test
// names a store of that name in a schema of the test server of its own
// (made at the first open), so that a test can add a trigger to its
// tables without touching another's.

// pgSchemaOf returns the schema of the store of dir.
func pgSchemaOf(dir string) string { return fmt.Sprintf("d%016x", fnv64([]byte(dir))) }

// pgDSN returns the DSN of the schema of dir, making the schema.
func pgDSN(dir string) (string, error) { return pgtest.SchemaDSN(pgSchemaOf(dir)) }

// pgSpec returns the spec that Open takes for the store of dir, with the
// DSN parameters params (key, value, ...).
func pgSpec(t testing.TB, dir string, params ...string) string {
	t.Helper()
	dsn, err := pgDSN(dir)
	if err != nil {
		t.Fatal(err)
	}
	dsn = pgtest.WithParam(dsn, "store", dir)
	for i := 0; i+1 < len(params); i += 2 {
		dsn = pgtest.WithParam(dsn, params[i], params[i+1])
	}
	return dsn
}

func openPGDir(dir string, o *Options) (Store, error) {
	dsn, err := pgDSN(dir)
	if err != nil {
		return nil, err
	}
	return OpenPostgres(dsn, dir, o)
}

// pgConn connects to the schema of dir.
func pgConn(t testing.TB, dir string) *pgx.Conn {
	t.Helper()
	dsn, err := pgDSN(dir)
	if err != nil {
		t.Fatal(err)
	}
	return pgConnTo(t, dsn)
}

// pgConnTo connects to dsn, for the test.
func pgConnTo(t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// pgExec runs sql in the schema of dir.
func pgExec(t testing.TB, dir, sql string, args ...any) pgconn.CommandTag {
	t.Helper()
	tag, err := pgConn(t, dir).Exec(context.Background(), sql, args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return tag
}

// pgReadOutput returns the committed bytes of output name of the store
// of dir, read from its rows.
func pgReadOutput(t testing.TB, dir, name string) []byte {
	t.Helper()
	conn := pgConn(t, dir)
	ctx := context.Background()
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass('tidemark_kv') IS NOT NULL").Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if !exists {
		return nil
	}
	var lenb []byte
	rs, id := pgRowsOf(t, dir)
	err := conn.QueryRow(ctx, rs.get, id, outputKey(name)).Scan(&lenb)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	// Every value carries its checksum (format 2).
	n, ok := decodeInt64(lenb[:max(0, len(lenb)-sumLen)])
	if !ok {
		t.Fatalf("output %s: length record %x", name, lenb)
	}
	prefix := outputDataPrefix(name)
	rows, err := conn.Query(ctx, rs.scanTo, id, prefix, prefixEnd(prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []byte
	for rows.Next() {
		var k, v []byte
		if err := rows.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		if at := int64(binary.BigEndian.Uint64(k[len(prefix):])); at != int64(len(out)) {
			t.Fatalf("output %s: chunk at %d after %d bytes", name, at, len(out))
		}
		out = append(out, v[:len(v)-sumLen]...)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if int64(len(out)) < n {
		t.Fatalf("output %s: %d bytes of chunks, %d committed", name, len(out), n)
	}
	return out[:n]
}

// pgSchemaFor makes the store tables in the schema of dir, as a store's
// first open would.
func pgSchemaFor(t testing.TB, dir string) {
	t.Helper()
	conn := pgConn(t, dir)
	for _, q := range pgSchema {
		if _, err := conn.Exec(context.Background(), q); err != nil {
			t.Fatal(err)
		}
	}
}

// pgFault makes the server fail the commits of the store of dir that
// write a chunk of output name: the failAt-th such chunk and, if sticky,
// every later one. The error raised has SQLSTATE code (53100 is
// disk_full). It returns the function that removes the fault.
func pgFault(t testing.TB, dir, name string, failAt int, sticky bool, code string) (heal func()) {
	t.Helper()
	pgSchemaFor(t, dir)
	op := "="
	if sticky {
		op = ">="
	}
	prefix := outputDataPrefix(name)
	pgExec(t, dir, `CREATE SEQUENCE tidemark_fault_seq`)
	pgExec(t, dir, fmt.Sprintf(`CREATE FUNCTION tidemark_fault() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF nextval('tidemark_fault_seq') %s %d THEN
				RAISE EXCEPTION 'injected fault writing output %%', TG_ARGV[0] USING ERRCODE = '%s';
			END IF;
			RETURN NEW;
		END $$`, op, failAt, code))
	// On the rows of either layout (see pgSchema): the schema of dir holds
	// one store.
	for _, table := range []string{"tidemark_kv", "tidemark_data"} {
		pgExec(t, dir, fmt.Sprintf(`CREATE TRIGGER tidemark_fault BEFORE INSERT ON %s FOR EACH ROW
		WHEN (substring(NEW.k FROM 1 FOR %d) = '\x%x'::bytea) EXECUTE FUNCTION tidemark_fault('%s')`,
			table, len(prefix), prefix, name))
	}
	return func() {
		pgExec(t, dir, `DROP TRIGGER tidemark_fault ON tidemark_kv`)
		pgExec(t, dir, `DROP TRIGGER tidemark_fault ON tidemark_data`)
	}
}

// pgOwner opens the store of dir with o and a lease of 300 ms, applies
// line 1 and makes it durable, and returns the store and its engine.
func pgOwner(t *testing.T, dir string, o *Options) (Store, *pgEngine) {
	t.Helper()
	a, err := Open(pgSpec(t, dir, "lease", "300ms"), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	applyLine(t, a, del("f", 1, 1))
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	return a, pgEngineOf(a)
}

// pgStaleOwner is pgOwner, whose renewals then stop, as in a paused
// process, and whose lease it waits to run out: the next open takes the
// store over.
func pgStaleOwner(t *testing.T, dir string, o *Options) (Store, *pgEngine) {
	t.Helper()
	a, ea := pgOwner(t, dir, o)
	stopRenewals(ea) // a paused process renews nothing
	waitLeaseExpired(t, dir)
	return a, ea
}

// pgSlowInserts makes every insert into table of the schema of dir whose
// row matches when (SQL over NEW; "" for every row) sleep for an hour, and
// returns the function that ends that.
func pgSlowInserts(t testing.TB, dir, table, when string) (heal func()) {
	t.Helper()
	pgExec(t, dir, `CREATE FUNCTION tidemark_slow() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN PERFORM pg_sleep(3600); RETURN NEW; END $$`)
	if when != "" {
		when = "WHEN (" + when + ") "
	}
	pgExec(t, dir, `CREATE TRIGGER tidemark_slow BEFORE INSERT ON `+table+` FOR EACH ROW `+when+`EXECUTE FUNCTION tidemark_slow()`)
	return func() { pgExec(t, dir, `DROP TRIGGER tidemark_slow ON `+table) }
}

// pgTerminateSleeper waits (saying what for) until a session of a store
// sleeps in the trigger of pgSlowInserts, and terminates its server
// process, as when the store's process or its machine dies.
func pgTerminateSleeper(t testing.TB, dir, what string) {
	t.Helper()
	ctx := context.Background()
	conn := pgConn(t, dir)
	var pid int
	waitFor(t, what, func() bool {
		// (application_name is cut at 63 bytes: the test's schema and
		// trigger are its own, the sleep tells the session.)
		err := conn.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE starts_with(application_name, 'tidemark store ') AND wait_event = 'PgSleep'`).Scan(&pid)
		return err == nil
	})
	dsn, _ := pgDSN(dir)
	if n, err := pgtest.Terminate(ctx, dsn, pid); n != 1 || err != nil {
		t.Fatalf("terminate %d: %d, %v", pid, n, err)
	}
}

// pgRowsOf returns the statements on the rows of the store of dir, and
// its name or sid in them (see pgSchema).
func pgRowsOf(t testing.TB, dir string) (*pgRows, any) {
	t.Helper()
	var sid int32
	err := pgConn(t, dir).QueryRow(context.Background(), "SELECT sid FROM tidemark_ids WHERE store = $1", dir).Scan(&sid)
	if errors.Is(err, pgx.ErrNoRows) {
		return pgRowsByName, dir
	}
	if err != nil {
		t.Fatal(err)
	}
	return pgRowsBySid, sid
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// pgCode reports whether err wraps a PostgreSQL error of SQLSTATE code.
func pgCode(err error, code string) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == code
}
