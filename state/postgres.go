package state

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Postgres is the backend that keeps a store in a PostgreSQL database (see
// [OpenPostgres]).
const Postgres = "postgres"

// Defaults of a PostgreSQL store, changed by parameters of its DSN.
const (
	// DefaultLease is how long a PostgreSQL store's lease lasts without a
	// commit or a renewal (DSN parameter lease=DURATION).
	DefaultLease = 15 * time.Second
	// DefaultReadCache is the memory a PostgreSQL store's read cache of
	// durable keys and values takes at most (DSN parameter cache=BYTES):
	// its entries' live bytes are at most half of it, the Go heap's room
	// to grow between collections the other half.
	DefaultReadCache = 256 << 20
)

// Limits of the PostgreSQL backend. A key is the whole key the store
// writes: the namespace's and the bucket's names, a few bytes of framing,
// and the key given to the Tx.
const (
	// pgMaxStoreName is the longest store name, in bytes.
	pgMaxStoreName = 200
	// pgMaxKey is the longest key, in bytes: a btree entry of (store,
	// key) must fit in a third of an 8 KB page (2704 bytes), and the
	// store's name takes up to pgMaxStoreName of it.
	pgMaxKey = 2400
	// pgMaxValue is the largest value, in bytes (PostgreSQL's own limit
	// for a bytea is 1 GB; one statement carries the value whole).
	pgMaxValue = 64 << 20
)

// limits are the btree's (see pgMaxKey) and a bound of one statement's.
func (e *pgEngine) limits() (maxKey, maxValue int) { return pgMaxKey, pgMaxValue }

// ErrFenced is wrapped (inside [ErrFailed]) by the error of a commit that
// a PostgreSQL store refused because another owner took the store over:
// its lease ran out (the process was paused, or cut off from the database
// for longer than the lease) and another process opened the store. Nothing
// of the refused batch is visible. The process must stop using the store;
// the new owner resumes from what is durable.
var ErrFenced = errors.New("state: the store was taken over by another owner")

// The SQL objects of the backend, in the schema the connection's
// search_path names first.
//
//	tidemark_data   one row a key of a store of format 5: (sid, k) → v;
//	                k in the key space of encoding.go, so bytea's
//	                bytewise order is the key order
//	tidemark_ids    one row a store of format 5: its name and its sid
//	tidemark_kv     one row a key of a store of format 1 to 3: (store,
//	                k) → v; and the format record of a store of format 5
//	                (store, 'v'), for the versions before it
//	tidemark_owner  one row a store: the lease (owner, lease_until, token)
//	                and the number of commits
//	tidemark_fence  the check every commit starts with
//
// A store of format 5 (made by this version) keeps its rows in
// tidemark_data under a number of four bytes, its sid, instead of under
// its name (as long as the name: 36 bytes for examples/ledger's), so that
// every row and every entry of the primary key's index is smaller, and
// the server's work a key less: 300,000 lines of random accounts into a
// store of 1,000,000, 5 runs alternated (2026-12-07), 3.39 to 3.51 s of the
// server's CPU against 3.98 to 4.44 s for rows keyed by name (see
// doc.go). Its format record is in both tables: in tidemark_data with its
// other keys (a scan, a backup reads it), and in tidemark_kv, where a
// version before format 5 looks for a store's rows: that version finds the
// record of a format newer than it knows, and refuses the store, instead
// of taking a store without rows for a new one. The two are written in
// the same transaction.
var pgSchema = []string{
	`CREATE TABLE IF NOT EXISTS tidemark_data (
		sid integer NOT NULL,
		k bytea NOT NULL,
		v bytea NOT NULL,
		PRIMARY KEY (sid, k)
	) WITH (fillfactor = 80)`,
	`CREATE TABLE IF NOT EXISTS tidemark_ids (
		store text PRIMARY KEY,
		sid integer GENERATED ALWAYS AS IDENTITY UNIQUE
	)`,
	`CREATE TABLE IF NOT EXISTS tidemark_kv (
		store text NOT NULL,
		k bytea NOT NULL,
		v bytea NOT NULL,
		PRIMARY KEY (store, k)
	) WITH (fillfactor = 80)`,
	`CREATE TABLE IF NOT EXISTS tidemark_owner (
		store text PRIMARY KEY,
		token bigint NOT NULL,
		commits bigint NOT NULL,
		owner text NOT NULL,
		lease_until timestamptz NOT NULL,
		acquired timestamptz
	) WITH (fillfactor = 50)`,
	// tidemark_fence counts a commit of the lease holder and extends its
	// lease, or raises TMFEN (and so aborts the transaction) when token is
	// not the store's current one, or commits is not the number of commits
	// made so far: another owner took over, or a commit this owner thought
	// durable was lost.
	`CREATE OR REPLACE FUNCTION tidemark_fence(p_store text, p_token bigint, p_commits bigint, p_lease_ms bigint)
	RETURNS void LANGUAGE plpgsql AS $$
	DECLARE
		cur tidemark_owner%ROWTYPE;
	BEGIN
		UPDATE tidemark_owner SET commits = commits + 1, lease_until = now() + p_lease_ms * interval '1 millisecond'
		 WHERE store = p_store AND token = p_token AND commits = p_commits;
		IF NOT FOUND THEN
			SELECT * INTO cur FROM tidemark_owner WHERE store = p_store;
			RAISE EXCEPTION 'tidemark store % is fenced: this owner holds lease token % at commit %, the store is at token % commit % (owner %)',
				p_store, p_token, p_commits, cur.token, cur.commits, cur.owner USING ERRCODE = 'TMFEN';
		END IF;
	END $$`,
}

// pgSchemaLock is the advisory lock that serializes processes creating the
// schema at once (CREATE ... IF NOT EXISTS is not safe against that).
const pgSchemaLock = 0x7469_6465_6d61_726b // "tidemark"

// pgFenceCode is the SQLSTATE tidemark_fence raises.
const pgFenceCode = "TMFEN"

// pgUniqueViolation is the SQLSTATE of an insert of a key in the table.
const pgUniqueViolation = "23505"

// SQL of the engine.
const (
	sqlFence = `SELECT tidemark_fence($1, $2, $3, $4)`
	// sqlToastCompression sets the session's compression of large values
	// (the output chunks) to the method $1 where the server has it, and is
	// a no-op where it has not (a server before 14, or built without it).
	sqlToastCompression = `SELECT set_config('default_toast_compression', $1, false) FROM pg_settings
		WHERE name = 'default_toast_compression' AND $1 = ANY(enumvals)`
	// sqlMarker reads the format record of a store in tidemark_kv, and
	// sqlAnyRow whether the store has a row there (see pgEngine.layOut).
	sqlMarker = `SELECT v FROM tidemark_kv WHERE store = $1 AND k = 'v'::bytea`
	sqlAnyRow = `SELECT EXISTS (SELECT 1 FROM tidemark_kv WHERE store = $1)`
	sqlSid    = `SELECT sid FROM tidemark_ids WHERE store = $1`
	sqlNewSid = `INSERT INTO tidemark_ids (store) VALUES ($1) ON CONFLICT (store) DO NOTHING`
	// sqlSetMarker writes the format record of a store of format 5 in
	// tidemark_kv (see pgSchema).
	sqlSetMarker = `INSERT INTO tidemark_kv (store, k, v) VALUES ($1, 'v'::bytea, $2) ON CONFLICT (store, k) DO UPDATE SET v = excluded.v`
	// The take-over: a store whose lease ran out (or was released) gets
	// this owner and the next token.
	sqlCreateOwner = `INSERT INTO tidemark_owner (store, token, commits, owner, lease_until) VALUES ($1, 0, 0, '', '-infinity')
		ON CONFLICT (store) DO NOTHING`
	sqlTakeOver = `UPDATE tidemark_owner SET token = token + 1, owner = $2, lease_until = now() + $3 * interval '1 millisecond', acquired = now()
		WHERE store = $1 AND lease_until < now() RETURNING token, commits`
	sqlHolder  = `SELECT owner, token, extract(epoch FROM lease_until - now()) FROM tidemark_owner WHERE store = $1`
	sqlRenew   = `UPDATE tidemark_owner SET lease_until = now() + $3 * interval '1 millisecond' WHERE store = $1 AND token = $2`
	sqlRelease = `UPDATE tidemark_owner SET lease_until = '-infinity' WHERE store = $1 AND token = $2`
)

// pgRows are the statements on a store's rows, in the table of its
// layout: by name (tidemark_kv) or by sid (tidemark_data), see pgSchema.
// $1 is the store's name or sid.
type pgRows struct {
	table, col string
	upsert     string
	// insert writes keys the store knows are not in the table (see
	// pgCache.split): a plain insert costs the server about 0.6 of an
	// upsert a key.
	insert, del, get, scan, scanTo string
	// preloadPage reads a page of the preload (see preloadPage): the keys
	// after $2, output chunks aside, in key order.
	preloadPage string
	// estimate is the server's plan of a read of every row of the store,
	// whose estimate of its rows sizes the preload's map (estimateRows).
	estimate string
}

func newPGRows(table, col string) *pgRows {
	f := func(sql string) string { return strings.NewReplacer("TABLE", table, "COL", col).Replace(sql) }
	return &pgRows{
		table: table, col: col,
		upsert: f(`INSERT INTO TABLE (COL, k, v) SELECT $1, t.k, t.v FROM unnest($2::bytea[], $3::bytea[]) AS t(k, v)
		ON CONFLICT (COL, k) DO UPDATE SET v = excluded.v`),
		insert:      f(`INSERT INTO TABLE (COL, k, v) SELECT $1, t.k, t.v FROM unnest($2::bytea[], $3::bytea[]) AS t(k, v)`),
		del:         f(`DELETE FROM TABLE WHERE COL = $1 AND k = ANY($2::bytea[])`),
		get:         f(`SELECT v FROM TABLE WHERE COL = $1 AND k = $2`),
		scan:        f(`SELECT k, v FROM TABLE WHERE COL = $1 AND k >= $2 ORDER BY k`),
		scanTo:      f(`SELECT k, v FROM TABLE WHERE COL = $1 AND k >= $2 AND k < $3 ORDER BY k`),
		preloadPage: f(`SELECT k, v FROM TABLE WHERE COL = $1 AND k > $2 AND (k < $3 OR k >= $4) ORDER BY k LIMIT $5`),
		estimate:    f(`EXPLAIN (FORMAT JSON) SELECT 1 FROM TABLE WHERE COL = $1`),
	}
}

var (
	pgRowsByName = newPGRows("tidemark_kv", "store")
	pgRowsBySid  = newPGRows("tidemark_data", "sid")
)

// pgStatementBytes is about the most keys and values one upsert carries;
// a batch that changes more is written by several statements of the same
// transaction.
const pgStatementBytes = 16 << 20

// pgConfig is what a DSN says, parameters of the store taken out.
type pgConfig struct {
	pool  *pgxpool.Config
	store string
	lease time.Duration
	cache int
}

// parsePostgres parses dsn (a URL or a keyword/value string) and takes out
// the store's own parameters: store (if store is ""), lease and cache.
func parsePostgres(dsn, store string) (*pgConfig, error) {
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("open postgres store: parse DSN: %w", err)
	}
	cfg := &pgConfig{pool: pc, store: store, lease: DefaultLease, cache: DefaultReadCache}
	rp := pc.ConnConfig.RuntimeParams
	if v, ok := rp["store"]; ok {
		if store == "" {
			cfg.store = v
		} else if v != store {
			return nil, fmt.Errorf("open postgres store %q: the DSN names store %q", store, v)
		}
		delete(rp, "store")
	}
	if v, ok := rp["lease"]; ok {
		d, err := time.ParseDuration(v)
		if err != nil || d < 100*time.Millisecond {
			return nil, fmt.Errorf("open postgres store %q: lease=%q: want a duration of at least 100ms, such as 15s", cfg.store, v)
		}
		cfg.lease = d
		delete(rp, "lease")
	}
	if v, ok := rp["cache"]; ok {
		n, err := parseBytes(v)
		if err != nil {
			return nil, fmt.Errorf("open postgres store %q: cache=%q: %w", cfg.store, v, err)
		}
		cfg.cache = n
		delete(rp, "cache")
	}
	switch {
	case cfg.store == "":
		return nil, fmt.Errorf("open postgres store: no store name: give one, or add store=NAME to the DSN: %w", ErrNotStore)
	case len(cfg.store) > pgMaxStoreName || !utf8.ValidString(cfg.store) || strings.ContainsRune(cfg.store, 0):
		return nil, fmt.Errorf("open postgres store %q: a store name is valid UTF-8 without NUL, at most %d bytes: %w", cfg.store, pgMaxStoreName, ErrNotStore)
	}
	// Every commit waits for its WAL to be flushed, whatever the server's
	// default: a commit acknowledged and then lost would let the feed move
	// past lines the store does not hold.
	rp["synchronous_commit"] = "on"
	// A session of the store is never idle inside a transaction (a commit
	// is sent whole): one that is, is of a process paused in the middle of
	// sending it, and holds the lease row's lock. The server ends it, so
	// that a new owner can take over once the lease ran out.
	if _, ok := rp["idle_in_transaction_session_timeout"]; !ok {
		rp["idle_in_transaction_session_timeout"] = strconv.FormatInt(cfg.lease.Milliseconds(), 10)
	}
	// The store's reads walk the primary key's index (store, k): a page of
	// keys in order (the preload's, a cursor's) stops at its limit. With
	// bitmap scans the server, on a table it has no statistics of yet (a
	// new store's, until autovacuum analyzes it), guesses a few rows and
	// reads every key of the store after the page's first through a
	// bitmap of the index, then sorts them, for each page: 54 ms a page of
	// 10,000 at 100,000 keys where the walk takes 3 ms, a preload of 0.2 s,
	// and a quadratic one at 10,000,000 keys
	// (TestPostgresPagesWalkTheIndex).
	if _, ok := rp["enable_bitmapscan"]; !ok {
		rp["enable_bitmapscan"] = "off"
	}
	// The output chunks, a batch's bytes of an output in one value, are
	// most of what a store writes, and the server compresses each one.
	// With its default, pglz, the server spent 3.5 to 3.7 s of CPU on the
	// 1,000,000 lines of `ledger run` at 10,000 accounts; with lz4, 2.6 to
	// 3.1 s, for chunks a fifth larger (68 % of the output's bytes against
	// 56 %). A session of the store compresses with lz4 where the server
	// has it (sqlToastCompression), unless the DSN names a method; values
	// written before keep theirs.
	if _, ok := rp["default_toast_compression"]; !ok {
		pc.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
			// One round trip: no statement to prepare for a connection's
			// first and only use of it.
			if _, err := conn.Exec(ctx, sqlToastCompression, pgx.QueryExecModeSimpleProtocol, "lz4"); err != nil {
				return fmt.Errorf("set default_toast_compression: %w", err)
			}
			return nil
		}
	}
	if _, ok := rp["application_name"]; !ok {
		rp["application_name"] = "tidemark store " + cfg.store
	}
	if pc.MaxConns > 4 {
		pc.MaxConns = 4 // the committer, the reads, the lease
	}
	return cfg, nil
}

// parseBytes parses a size: digits, optionally followed by B, KB, MB, GB
// (powers of 1024; KiB, MiB and GiB too).
func parseBytes(s string) (int, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	mult := 1
	for _, u := range []struct {
		suffix string
		m      int
	}{{"KIB", 1 << 10}, {"MIB", 1 << 20}, {"GIB", 1 << 30}, {"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30}, {"B", 1}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.m
			break
		}
	}
	n, err := strconv.Atoi(t)
	if err != nil || n < 0 {
		return 0, errors.New("want a size such as 256MB, or 0 for no cache")
	}
	return n * mult, nil
}

// OpenPostgres opens or creates the store named store in the PostgreSQL
// database of dsn, and takes it over: the store is owned through a lease
// (see the package documentation, "PostgreSQL"), and only its owner can
// commit. dsn is a URL ("postgres://user@host:5432/db?sslmode=disable") or
// a keyword/value string that pgx accepts; its parameters lease=DURATION
// (default [DefaultLease]) and cache=BYTES (default [DefaultReadCache])
// are the store's, and store=NAME names the store when store is "".
//
// When another owner's lease is live, OpenPostgres waits up to
// opts.LockTimeout for it to end, then fails with an error that names the
// owner and wraps [ErrLocked]. The tables are created if they do not exist
// (in the first schema of the search_path). A nil opts means the defaults.
func OpenPostgres(dsn, store string, opts *Options) (Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	cfg, err := parsePostgres(dsn, store)
	if err != nil {
		return nil, err
	}
	eng, err := openPGEngine(cfg, &o)
	if err != nil {
		return nil, err
	}
	c, err := newCore(Postgres, eng.dir(), &o, o.fs(), eng)
	if err != nil {
		return nil, errors.Join(err, eng.close())
	}
	return newNS(c, ""), nil
}

// openPostgresSpec opens the store of a spec "postgres://…?store=NAME".
func openPostgresSpec(spec string, opts *Options) (Store, error) {
	if u, err := url.Parse(spec); err != nil || u.Query().Get("store") == "" {
		return nil, fmt.Errorf("open store %q: a postgres store is named by a URL with a store parameter, postgres://user@host/db?store=NAME: %w", redactDSN(spec), ErrNotStore)
	}
	return OpenPostgres(spec, "", opts)
}

// redactDSN returns dsn without its password, for messages.
func redactDSN(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
			return u.String()
		}
	}
	return dsn
}

// pgEngine is the PostgreSQL engine of one store.
type pgEngine struct {
	pool    *pgxpool.Pool
	store   string
	owner   string // this process's name in the lease
	lease   time.Duration
	timeout time.Duration // of one statement or transaction
	log     *slog.Logger

	// mu serializes commits and lease renewals, and guards what follows.
	mu      sync.Mutex
	token   int64 // the lease token this owner holds
	commits int64 // the commits of the store so far
	// dead is set once a commit failed or the lease was lost: no commit
	// is tried again.
	dead    error
	renewed time.Time // when the lease was last extended (sent)

	// rows are the statements on the store's rows, id the store's name
	// or sid in them (see layOut); marked says that a store of format 5
	// has its format record in tidemark_kv.
	rows   *pgRows
	id     any
	marked bool

	cache pgCache
	// reads counts the reads that went to the server.
	reads atomic.Int64
	// view is the lease as LeaseOf reports it, published under mu at each
	// change, so that it is read without waiting for a commit in flight.
	view atomic.Pointer[Lease]

	stop chan struct{}
	done chan struct{}
	// stopPreload ends the preload, preloaded is closed once it ended
	// (see startPreload).
	stopPreload context.CancelFunc
	preloaded   chan struct{}
	hooks       *hooks
}

// newOwnerName names this process in the lease: host, pid and a random
// suffix, so that two opens in one process are two owners.
func newOwnerName() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

func openPGEngine(cfg *pgConfig, o *Options) (*pgEngine, error) {
	e := &pgEngine{
		store:   cfg.store,
		owner:   newOwnerName(),
		lease:   cfg.lease,
		timeout: max(2*cfg.lease, 30*time.Second),
		log:     o.logger(),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	// The budget is the memory the cache takes: its entries' live bytes
	// are at most half of it, since the Go heap grows to twice its live
	// size between collections (GOGC=100), as for the value cache.
	e.cache.max = cfg.cache / 2
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg.pool)
	if err != nil {
		return nil, fmt.Errorf("open postgres store %q: %w", e.store, err)
	}
	e.pool = pool
	fail := func(err error) (*pgEngine, error) {
		pool.Close()
		return nil, err
	}
	if err := e.createSchema(ctx); err != nil {
		return fail(fmt.Errorf("open postgres store %q: create its tables: %w", e.store, err))
	}
	if err := e.takeOver(o.lockTimeout()); err != nil {
		return fail(err)
	}
	e.hooks = o.hooks
	if err := e.layOut(ctx); err != nil {
		return fail(errors.Join(err, e.release()))
	}
	e.startPreload()
	go e.renewer()
	return e, nil
}

func (e *pgEngine) dir() string { return Postgres + ":" + e.store }

// layOut finds where the store's rows are (see pgSchema), before anything
// reads them: by sid in tidemark_data when its format record in
// tidemark_kv names format 5, or when the store is new (no row of it in
// tidemark_kv); by name in tidemark_kv otherwise (format 1 to 3, or a
// format newer than this version knows, which the open then refuses at
// the record). A store whose record names format 5 and that has no sid
// is damaged: its rows cannot be found, and it is not taken for a new
// store, whose lines would all be applied again.
func (e *pgEngine) layOut(ctx context.Context) error {
	if e.hooks != nil && e.hooks.pgByName {
		e.rows, e.id = pgRowsByName, e.store
		return nil
	}
	var marker []byte
	err := e.pool.QueryRow(ctx, sqlMarker, e.store).Scan(&marker)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		var rows bool
		if err := e.pool.QueryRow(ctx, sqlAnyRow, e.store).Scan(&rows); err != nil {
			return fmt.Errorf("open postgres store %q: find its rows: %w", e.store, err)
		}
		if rows {
			e.rows, e.id = pgRowsByName, e.store
			return nil
		}
		// A new store (or one of format 5 whose record in tidemark_kv
		// was deleted: its sid is kept, and the record written again,
		// see keepMarker).
		if _, err := e.pool.Exec(ctx, sqlNewSid, e.store); err != nil {
			return fmt.Errorf("open postgres store %q: give it a sid: %w", e.store, err)
		}
	case err != nil:
		return fmt.Errorf("open postgres store %q: read its format record: %w", e.store, err)
	case string(marker) != formatV5:
		e.rows, e.id = pgRowsByName, e.store
		return nil
	default:
		e.marked = true
	}
	var sid int32
	err = e.pool.QueryRow(ctx, sqlSid, e.store).Scan(&sid)
	if errors.Is(err, pgx.ErrNoRows) {
		return &CorruptError{Backend: Postgres, Dir: e.dir(), File: "tidemark_ids", Record: "the store's sid",
			Detail: "its format record in tidemark_kv names format 5, whose rows are in tidemark_data under the store's sid, and tidemark_ids has no row of the store (deleted by hand?): its rows cannot be found; restore tidemark_ids from a backup of the database"}
	}
	if err != nil {
		return fmt.Errorf("open postgres store %q: read its sid: %w", e.store, err)
	}
	e.rows, e.id = pgRowsBySid, sid
	return nil
}

// moveToSid moves the rows of a store of format 3 from tidemark_kv to
// tidemark_data under a new sid, and makes its format record, in both
// tables, name format 5: one transaction, which the fence ends (not
// begins), so that a move that outlasted the lease, whose store another
// owner took over meanwhile (and reads by name), is refused whole. It
// returns the rows moved. Upgrade runs it with nothing else using the
// store; it holds mu for the whole move.
func (e *pgEngine) moveToSid() (rows int64, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.dead != nil {
		return 0, e.dead
	}
	// No deadline: 10,000,000 rows take longer than a commit may.
	ctx := context.Background()
	start := time.Now()
	var sid int32
	err = pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, sqlNewSid, e.store); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, sqlSid, e.store).Scan(&sid); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `INSERT INTO tidemark_data (sid, k, v)
			SELECT $2, k, CASE WHEN k = 'v'::bytea THEN $3 ELSE v END FROM tidemark_kv WHERE store = $1`, e.store, sid, []byte(formatV5))
		if err != nil {
			return err
		}
		rows = tag.RowsAffected()
		if _, err := tx.Exec(ctx, `DELETE FROM tidemark_kv WHERE store = $1 AND k <> 'v'::bytea`, e.store); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, sqlSetMarker, e.store, []byte(formatV5)); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, sqlFence, e.store, e.token, e.commits, e.lease.Milliseconds())
		return err
	})
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == pgFenceCode {
			err = fmt.Errorf("%s: %w", pe.Message, ErrFenced)
		}
		// The engine is done: the layout of a move whose COMMIT's reply
		// was lost is not known here (the next open reads it).
		e.dead = fmt.Errorf("postgres store %q: move its rows into tidemark_data: %w; the move is one transaction: it moved nothing, unless only its COMMIT's reply was lost, and the next open finds the rows where the store's format record in tidemark_kv says", e.store, err)
		e.publish()
		return 0, e.dead
	}
	e.commits++
	e.publish()
	e.renewed = start // the fence extended the lease from the transaction's start
	e.rows, e.id, e.marked = pgRowsBySid, sid, true
	return rows, nil
}

// bySid reports whether the store keeps its rows by sid (format 5).
func (e *pgEngine) bySid() bool { return e.rows == pgRowsBySid }

// keepMarker writes the format record of a store of format 5 in
// tidemark_kv when it is not there (see layOut).
func (e *pgEngine) keepMarker() error {
	if e.marked {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	if _, err := e.pool.Exec(ctx, sqlSetMarker, e.store, []byte(formatV5)); err != nil {
		return fmt.Errorf("open postgres store %q: write its format record in tidemark_kv: %w", e.store, err)
	}
	e.marked = true
	return nil
}

// publish makes the lease as it is now what LeaseOf reports. The first
// error that ended it is kept (a release after a fence says fenced). e.mu
// held.
func (e *pgEngine) publish() {
	l := &Lease{Store: e.store, Owner: e.owner, Token: e.token, Commits: e.commits, Lost: e.dead}
	if old := e.view.Load(); old != nil && old.Lost != nil {
		l.Lost = old.Lost
	}
	e.view.Store(l)
}

// createSchema creates the tables and the function if one is missing,
// holding an advisory lock so that concurrent creators do not collide.
func (e *pgEngine) createSchema(ctx context.Context) error {
	var ok bool
	err := e.pool.QueryRow(ctx, `SELECT to_regclass('tidemark_kv') IS NOT NULL AND to_regclass('tidemark_owner') IS NOT NULL
		AND to_regclass('tidemark_data') IS NOT NULL AND to_regclass('tidemark_ids') IS NOT NULL
		AND to_regprocedure('tidemark_fence(text,bigint,bigint,bigint)') IS NOT NULL`).Scan(&ok)
	if err != nil || ok {
		return err
	}
	return pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(pgSchemaLock)); err != nil {
			return err
		}
		for _, q := range pgSchema {
			if _, err := tx.Exec(ctx, q); err != nil {
				return err
			}
		}
		return nil
	})
}

// takeOver takes the store's lease with the next token, waiting up to
// wait for a live lease of another owner to end.
func (e *pgEngine) takeOver(wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
		ok, holder, left, err := e.tryTakeOver(ctx)
		cancel()
		if err != nil {
			return fmt.Errorf("open postgres store %q: take its lease: %w", e.store, err)
		}
		if ok {
			return nil
		}
		now := time.Now()
		if now.After(deadline) {
			return fmt.Errorf("open postgres store %q: owned by %s, whose lease ends in %v (waited %v); stop that process, or wait for its lease to end: %w",
				e.store, holder, left.Round(time.Millisecond), wait, ErrLocked)
		}
		time.Sleep(min(max(left, 5*time.Millisecond), 100*time.Millisecond, time.Until(deadline)+time.Millisecond))
	}
}

func (e *pgEngine) tryTakeOver(ctx context.Context) (ok bool, holder string, left time.Duration, err error) {
	if _, err := e.pool.Exec(ctx, sqlCreateOwner, e.store); err != nil {
		return false, "", 0, err
	}
	var token, commits int64
	err = e.pool.QueryRow(ctx, sqlTakeOver, e.store, e.owner, e.lease.Milliseconds()).Scan(&token, &commits)
	if err == nil {
		e.mu.Lock()
		e.token, e.commits, e.renewed = token, commits, time.Now()
		e.publish()
		e.mu.Unlock()
		e.log.Info("state: postgres store taken over", "store", e.store, "owner", e.owner, "token", token, "commits", commits, "lease", e.lease)
		return true, "", 0, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return false, "", 0, err
	}
	var secs float64
	if err := e.pool.QueryRow(ctx, sqlHolder, e.store).Scan(&holder, &token, &secs); err != nil {
		return false, "", 0, err
	}
	return false, fmt.Sprintf("%s (lease token %d)", holder, token), time.Duration(secs * float64(time.Second)), nil
}

// renewer extends the lease every third of its length when no commit did.
func (e *pgEngine) renewer() {
	defer close(e.done)
	t := time.NewTicker(e.lease / 3)
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-t.C:
		}
		e.mu.Lock()
		if e.dead == nil && time.Since(e.renewed) >= e.lease/3 {
			e.renew()
		}
		e.mu.Unlock()
	}
}

// renew extends the lease. e.mu held.
func (e *pgEngine) renew() {
	sent := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), e.lease/3)
	defer cancel()
	tag, err := e.pool.Exec(ctx, sqlRenew, e.store, e.token, e.lease.Milliseconds())
	switch {
	case err != nil:
		e.log.Warn("state: postgres store could not renew its lease; trying again", "store", e.store, "err", err)
	case tag.RowsAffected() == 0:
		e.dead = fmt.Errorf("postgres store %q: lease token %d was taken over by another owner while the store was idle: %w", e.store, e.token, ErrFenced)
		e.publish()
		e.log.Error("state: postgres store lost its lease; its next commit fails", "store", e.store, "token", e.token)
	default:
		e.renewed = sent
	}
}

// release ends the lease, so that the next owner need not wait for it to
// run out. It is safe after a failed commit too: the release is
// conditional on the token, and a commit in doubt changes nothing it
// relies on. An error is returned only for an engine that had not failed.
func (e *pgEngine) release() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	_, err := e.pool.Exec(ctx, sqlRelease, e.store, e.token)
	failed := e.dead != nil
	e.dead = ErrClosed
	e.publish()
	if err != nil && !failed {
		return fmt.Errorf("postgres store %q: release the lease: %w", e.store, err)
	}
	return nil
}

func (e *pgEngine) get(key []byte) ([]byte, bool, error) {
	cacheable := !isOutputChunk(key)
	if cacheable {
		if v, ok, hit := e.cache.get(key); hit {
			return v, ok, nil
		}
	}
	e.reads.Add(1)
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	var v []byte
	err := e.pool.QueryRow(ctx, e.rows.get, e.id, key).Scan(&v)
	found := err == nil
	if errors.Is(err, pgx.ErrNoRows) {
		err = nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("postgres store %q: read key %q: %w", e.store, key, err)
	}
	if v == nil && found {
		v = []byte{}
	}
	if cacheable {
		e.cache.fill(key, v, found)
	}
	return v, found, nil
}

func (e *pgEngine) scan(prefix []byte, fn func(k, v []byte) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	var rows pgx.Rows
	var err error
	if end := prefixEnd(prefix); end != nil {
		rows, err = e.pool.Query(ctx, e.rows.scanTo, e.id, prefix, end)
	} else {
		rows, err = e.pool.Query(ctx, e.rows.scan, e.id, prefix)
	}
	if err != nil {
		return fmt.Errorf("postgres store %q: scan %q: %w", e.store, prefix, err)
	}
	defer rows.Close()
	for rows.Next() {
		raw := rows.RawValues()
		if err := fn(raw[0], raw[1]); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("postgres store %q: scan %q: %w", e.store, prefix, err)
	}
	return nil
}

// commit writes ws in one transaction, pipelined in one round trip:
//
//	BEGIN
//	SELECT tidemark_fence(store, token, commits, lease)  -- or TMFEN: abort
//	INSERT … SELECT … unnest(keys, values)                -- keys known new
//	INSERT … SELECT … unnest(keys, values) ON CONFLICT DO UPDATE  -- the others
//	DELETE … WHERE k = ANY(keys)
//	COMMIT
//
// (each statement once or more, see pgStatementBytes; keys in order, see
// pgCache.split).
//
// Any error (the fence, a statement, a connection lost before COMMIT's
// reply) fails the commit and the engine for good: a commit in doubt is a
// failed commit, and the store's owner restarts and reloads what is
// durable.
func (e *pgEngine) commit(ws []write) error { return e.commitSent(ws, nil) }

// commitSent is commit, calling sent (if not nil) once the transaction's
// statements are sent, before their replies are read (see sentCommitter).
func (e *pgEngine) commitSent(ws []write, sent func()) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.dead != nil {
		return e.dead
	}
	for _, w := range ws {
		if len(w.key) > pgMaxKey || len(w.val) > pgMaxValue {
			return fmt.Errorf("postgres store %q: key of %d bytes, value of %d (the most are %d and %d): %w",
				e.store, len(w.key), len(w.val), pgMaxKey, pgMaxValue, ErrTooLarge)
		}
	}
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(sqlFence, e.store, e.token, e.commits, e.lease.Milliseconds())
	ins, ups, dels := e.cache.split(ws)
	queue := func(sql string, idx []int) {
		var keys, vals [][]byte
		size := 0
		for _, i := range idx {
			w := ws[i]
			if size+len(w.key)+len(w.val) > pgStatementBytes && len(keys) > 0 {
				b.Queue(sql, e.id, keys, vals)
				keys, vals, size = nil, nil, 0
			}
			val := w.val
			if val == nil {
				val = []byte{} // an empty value is not NULL
			}
			keys, vals, size = append(keys, w.key), append(vals, val), size+len(w.key)+len(w.val)
		}
		if len(keys) > 0 {
			b.Queue(sql, e.id, keys, vals)
		}
	}
	queue(e.rows.insert, ins)
	queue(e.rows.upsert, ups)
	if len(dels) > 0 {
		keys := make([][]byte, len(dels))
		for j, i := range dels {
			keys[j] = ws[i].key
		}
		b.Queue(e.rows.del, e.id, keys)
	}
	if e.rows == pgRowsBySid {
		// The format record goes in tidemark_kv too (see pgSchema).
		for _, w := range ws {
			if isVersionKey(w.key) && !w.del {
				b.Queue(sqlSetMarker, e.store, w.val)
			}
		}
	}
	b.Queue("COMMIT")
	start := time.Now()
	if err := e.send(b, sent); err != nil {
		e.dead = err
		e.publish()
		return err
	}
	e.commits++
	e.publish()
	e.renewed = start
	e.cache.commit(ws)
	return nil
}

// send runs the batch b and checks that its last statement committed. It
// calls sent, if not nil, once b is sent.
func (e *pgEngine) send(b *pgx.Batch, sent func()) error {
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	conn, err := e.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("postgres store %q: connect: %w", e.store, err)
	}
	br := conn.SendBatch(ctx, b) // returns once b is written
	if e.hooks != nil && e.hooks.pgSent != nil {
		e.hooks.pgSent()
	}
	if sent != nil {
		sent()
	}
	var tag pgconn.CommandTag
	for range b.Len() {
		if tag, err = br.Exec(); err != nil {
			break
		}
	}
	err = errors.Join(err, br.Close())
	if err == nil && tag.String() != "COMMIT" {
		err = fmt.Errorf("the transaction ended with %q", tag.String())
	}
	if err != nil {
		// The connection may be in a transaction, or in doubt: never
		// reuse it.
		_ = conn.Conn().Close(context.Background())
	}
	conn.Release()
	if err == nil {
		return nil
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == pgFenceCode {
		return fmt.Errorf("postgres store %q: commit refused: %s: %w", e.store, pe.Message, ErrFenced)
	}
	if errors.As(err, &pe) && pe.Code == pgUniqueViolation {
		return fmt.Errorf("postgres store %q: commit (lease token %d, commit %d): a key this store never wrote, or deleted, is in the table: "+
			"the table was written behind the store's back (by hand, or by a process that does not hold the lease); nothing of the batch was committed; reopen the store: %w",
			e.store, e.token, e.commits+1, err)
	}
	return fmt.Errorf("postgres store %q: commit (lease token %d, commit %d): %w", e.store, e.token, e.commits+1, err)
}

func (e *pgEngine) close() error {
	e.stopPreload()
	<-e.preloaded
	close(e.stop)
	<-e.done
	err := e.release()
	e.pool.Close()
	return err
}

// startPreload reads every key of the store (output chunks aside) into
// the read cache while they fit in it, on a goroutine of its own: once it
// has them all, a read of a key not in the cache needs no round trip, the
// key does not exist (the cache is complete). The open does not wait for
// it: a store of 10,000,000 keys has its first delivery at once rather
// than once 256 MiB of rows came in (1.1 s for a store of 1,000,000 keys).
// Until it ends the cache is incomplete, and a read it does not hold goes
// to the server, as with a cache too small for the store.
//
// The rows come from snapshots that a commit made while they come in
// makes older: the cache notes the keys of each commit meanwhile
// (pgCache.loading), and the preload puts no key the cache holds or a
// commit wrote. Each page's query has the store's statement timeout; the
// whole fill has none (a cache= that holds a store of 10,000,000 keys
// takes longer than one). Once it has read pgPresizePages pages, it sizes
// the cache's map for the rows the server estimates the store holds
// (estimateRows, pgCache.presize).
func (e *pgEngine) startPreload() {
	ctx, cancel := context.WithCancel(context.Background())
	e.stopPreload, e.preloaded = cancel, make(chan struct{})
	if e.cache.max <= 0 {
		close(e.preloaded)
		return
	}
	// Before the query: a commit from here on is noted.
	e.cache.startLoading()
	go func() {
		defer close(e.preloaded)
		defer cancel()
		fit, err := e.preload(ctx)
		if err != nil && ctx.Err() == nil {
			e.log.Warn("postgres store: reading the store into the read cache failed; reads go to the server until the cache holds the keys they ask for", "store", e.store, "err", err)
		}
		e.cache.endLoading(fit && err == nil)
	}()
}

// estimateRows returns the server's estimate of the rows the store holds:
// its planner's, from the table's statistics (a store's share of it where
// the table holds several), without reading a row; 0 when it gives none.
// The statistics are those autovacuum last gathered: a store that grew
// since is underestimated, and the map then grows as it would have.
func (e *pgEngine) estimateRows(ctx context.Context) int64 {
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	var out string
	if err := e.pool.QueryRow(ctx, e.rows.estimate, e.id).Scan(&out); err != nil {
		return 0
	}
	var plan []struct {
		Plan struct {
			Rows float64 `json:"Plan Rows"`
		}
	}
	if json.Unmarshal([]byte(out), &plan) != nil || len(plan) == 0 {
		return 0
	}
	return int64(plan[0].Plan.Rows)
}

// pgPreloadEntryMin is the least an entry of the read cache costs of its
// budget (pgCacheOverhead and a short key and value): a map sized for the
// budget over it never holds more entries than the budget has room for.
const pgPreloadEntryMin = pgCacheOverhead + 32

// pgPreloadHint is the entries the preload's map is made for: the rows
// the server estimates est, at most what the cache's budget has room for
// (statistics of another store's rows, or of rows since deleted, do not
// take more of the memory than the budget gives).
func pgPreloadHint(est, budget int64) int64 {
	return entriesHint(est, budget, pgPreloadEntryMin)
}

// pgPreloadPage is the most rows one query of the preload reads: the
// preload reads the store a page at a time, in key order, so that
// stopping it (a store that closes, a cache that is full) never waits for
// the rest of a query. A cancelled query is drained to its end by pgx
// (pgconn's asyncClose): a restart on a store of 10,000,000 keys whose
// one query was cancelled at the close took 3.2 s.
const pgPreloadPage = 10_000

// preload reads the store's keys into the cache (see startPreload) and
// reports whether they all fit. Each page is read in a snapshot of its
// own: a key that a commit changed since the preload began is one the
// cache noted (pgCache.skip), and any other has the same value in every
// snapshot since.
func (e *pgEngine) preload(ctx context.Context) (fit bool, err error) {
	// The last key read; none is "" (every key has a tag). Not nil: pgx
	// sends a nil slice as NULL, and k > NULL holds for no row.
	after := []byte{}
	limit := pgPreloadPage
	if e.hooks != nil && e.hooks.pgPreloadPage > 0 {
		limit = e.hooks.pgPreloadPage
	}
	n := 0
	for pages := 1; ; pages++ {
		page, full, err := e.preloadPage(ctx, &after, limit, &n)
		switch {
		case err != nil:
			return false, err
		case full:
			return false, nil
		case page < limit:
			return true, nil
		}
		if pages == pgPresizePages {
			e.cache.presize(pgPreloadHint(e.estimateRows(ctx), int64(e.cache.max)))
		}
	}
}

// pgPresizePages is the pages the preload reads before it sizes the
// cache's map for the whole store (100,000 rows at pgPreloadPage): a store
// that holds fewer keys fills a map that grows as they come, at little
// cost, and a run that closes the store before, such as a restart that
// applies a few lines, does not pay for the map of a large one (made at
// the preload's start for 880,000 entries, the default cache's room, the
// map took a restart on a store of 1,000,000 keys with one new line from
// 29 to 57 ms to 65 to 79 ms: its close waited for the allocation).
const pgPresizePages = 10

// preloadPage reads the page of at most limit keys after *after into the
// cache, moves *after to its last key and counts them in *n. full says
// the cache had no room for one (the rest is not read).
func (e *pgEngine) preloadPage(ctx context.Context, after *[]byte, limit int, n *int) (page int, full bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	rows, err := e.pool.Query(ctx, e.rows.preloadPage, e.id, *after, []byte{tagOutputData}, []byte{tagOutputData + 1}, limit)
	if err != nil {
		return 0, false, fmt.Errorf("open postgres store %q: load its keys: %w", e.store, err)
	}
	defer rows.Close()
	for rows.Next() {
		raw := rows.RawValues()
		if !e.cache.load(raw[0], raw[1]) {
			return page, true, nil // the rest would not fit: not read
		}
		*after = append((*after)[:0], raw[0]...)
		page++
		if *n++; e.hooks != nil && e.hooks.pgPreloadRow != nil {
			e.hooks.pgPreloadRow(*n)
		}
	}
	if err := rows.Err(); err != nil {
		return page, false, fmt.Errorf("open postgres store %q: load its keys: %w", e.store, err)
	}
	return page, false, nil
}

// outputsInEngine says that the engine keeps outputs in its own key space
// (see Output): a database shared by machines has no local files.
func (e *pgEngine) outputsInEngine() {}

// pgCache is the read cache of a PostgreSQL store: durable values by key.
// It is safe because every write of the store goes through this engine
// (another owner is fenced), and it is updated once a commit is durable.
// When complete, it holds every key of the store but the output chunks.
type pgCache struct {
	mu       sync.Mutex
	m        map[string]pgCached
	bytes    int
	max      int
	complete bool
	// loading is set while the preload runs: skip holds the keys that
	// commits wrote meanwhile, which the preload's rows may hold older
	// values of, and lost is set if trim dropped entries meanwhile (the
	// cache does not hold every key then).
	loading bool
	skip    map[string]struct{}
	lost    bool
	// sized is the entries the map was last made for (presize).
	sized int
}

type pgCached struct {
	v  []byte
	ok bool
}

// pgCacheOverhead is about what an entry costs beyond its key and value:
// the map's slot and its share of the map's room, and the rounding of the
// key's and the value's allocations. Measured for ledger keys (33 bytes)
// and values (12): 92 to 117 bytes (TestPgCacheMemory).
const pgCacheOverhead = 120

// get returns the cached value of key: hit is false when the database
// must be asked.
func (c *pgCache) get(key []byte) (v []byte, ok, hit bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, found := c.m[string(key)]; found {
		if !e.ok {
			return nil, false, true
		}
		return append([]byte{}, e.v...), true, true
	}
	return nil, false, c.complete
}

// split sorts the writes of a commit by key (a btree takes keys in order
// with fewer pages touched a key: about 0.8 of the time in random order
// for 10,000 new keys) and divides them: ins, the keys the cache knows
// are not in the table (it is complete, and holds them absent or not at
// all), ups the other keys written, dels the keys deleted, each a list of
// indexes into ws.
//
// A key is absent from the table if the cache says so: every write of the
// store goes through this engine, under its lease, and the cache takes
// each commit once it is durable (commit, after send). Were the table
// written behind the store's back, the insert of such a key fails the
// commit (a unique violation), and the store with it: never silently.
func (c *pgCache) split(ws []write) (ins, ups, dels []int) {
	order := make([]int, len(ws))
	for i := range order {
		order[i] = i
	}
	// The committer hands the writes sorted (writeOrder): sorted again
	// only when they are not.
	if !slices.IsSortedFunc(ws, func(a, b write) int { return bytes.Compare(a.key, b.key) }) {
		slices.SortFunc(order, func(a, b int) int { return bytes.Compare(ws[a].key, ws[b].key) })
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, i := range order {
		w := ws[i]
		switch {
		case w.del:
			dels = append(dels, i)
		case c.complete && !isOutputChunk(w.key) && !c.m[string(w.key)].ok:
			ins = append(ins, i)
		default:
			ups = append(ups, i)
		}
	}
	return ins, ups, dels
}

// startLoading begins a preload (see pgEngine.startPreload).
func (c *pgCache) startLoading() {
	c.mu.Lock()
	c.loading, c.skip, c.lost = true, make(map[string]struct{}), false
	c.mu.Unlock()
}

// presize gives the cache a map made for hint entries, with the entries it
// holds (commits may have put some since the preload began), when the one
// it has is made for fewer than a quarter of them: the preload then puts
// its rows without the map growing as they come. Measured: ledger run,
// 300,000 lines into a store of 1,000,000 keys with a cache for all of
// them, 6 rounds alternated (2026-12-07), the map made after the
// preload's tenth page (pgPresizePages): 5.17 to 6.08 s against 5.26 to
// 7.14 s (growing the map was 0.6 s of the run's 3.3 s of CPU).
func (c *pgCache) presize(hint int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if hint <= int64(4*max(c.sized, len(c.m))) {
		return
	}
	m := make(map[string]pgCached, hint)
	maps.Copy(m, c.m)
	c.m, c.sized = m, int(hint)
}

// load adds a key the preload read, unless the cache holds it or a commit
// wrote it since the preload began: the row may be older. It returns false
// when the key does not fit.
func (c *pgCache) load(k, v []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[string(k)]; ok {
		return true
	}
	if _, ok := c.skip[string(k)]; ok {
		return true
	}
	if c.bytes+len(k)+len(v)+pgCacheOverhead > c.max {
		return false
	}
	c.put(k, v, true)
	return true
}

// endLoading ends a preload: the cache is complete if every key fit and
// none was dropped meanwhile.
func (c *pgCache) endLoading(fit bool) {
	c.mu.Lock()
	c.complete = fit && !c.lost
	c.loading, c.skip = false, nil
	c.mu.Unlock()
}

// fill caches what a read found.
func (c *pgCache) fill(k, v []byte, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.max > 0 {
		c.put(k, v, ok)
		c.trim()
	}
}

// commit applies the writes of a durable commit.
func (c *pgCache) commit(ws []write) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.max <= 0 {
		return
	}
	for _, w := range ws {
		if isOutputChunk(w.key) {
			continue
		}
		if c.loading {
			c.skip[string(w.key)] = struct{}{}
		}
		if w.del && c.complete {
			c.drop(w.key)
			continue
		}
		c.put(w.key, w.val, !w.del)
	}
	c.trim()
}

// put sets key's entry. c.mu held. A value of the same length as the
// cached one is written over it in place (get hands out copies): a
// balance changed by each commit costs no allocation and no map write
// (deleting and adding every key of a commit, each with a new key string
// and value, was 17 % of ledger run's CPU at 10,000 accounts).
func (c *pgCache) put(k, v []byte, ok bool) {
	if c.m == nil {
		c.m = make(map[string]pgCached)
	}
	if e, found := c.m[string(k)]; found {
		if ok && e.ok && len(e.v) == len(v) {
			copy(e.v, v)
			return
		}
		c.bytes -= len(k) + len(e.v) + pgCacheOverhead
		delete(c.m, string(k))
	}
	e := pgCached{ok: ok}
	if ok {
		e.v = append(make([]byte, 0, len(v)), v...)
	}
	c.m[string(k)] = e
	c.bytes += len(k) + len(e.v) + pgCacheOverhead
}

// drop removes key's entry. c.mu held.
func (c *pgCache) drop(k []byte) {
	if e, found := c.m[string(k)]; found {
		c.bytes -= len(k) + len(e.v) + pgCacheOverhead
		delete(c.m, string(k))
	}
}

// trim evicts entries (the map's iteration order is random enough) once
// the cache is over its size, down to three quarters of it. An evicted key
// is read from the database again, so the cache is no longer complete.
// c.mu held.
func (c *pgCache) trim() {
	if c.bytes <= c.max {
		return
	}
	c.complete = false
	c.lost = c.lost || c.loading
	// Into a new map, as the value cache does (valueCache.evict): a Go
	// map does not give back the room of deleted entries, and the cache
	// took 1.7 times its limit under commits of new keys
	// (TestPgCacheMemory).
	target := c.max / 4 * 3
	m := make(map[string]pgCached, int(int64(len(c.m))*int64(target)/int64(c.bytes)))
	for k, e := range c.m {
		if c.bytes > target {
			c.bytes -= len(k) + len(e.v) + pgCacheOverhead
			continue
		}
		m[k] = e
	}
	c.m, c.sized = m, 0
}
