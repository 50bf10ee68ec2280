package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark-go/tidemark/state"
)

// A file run with its state in PostgreSQL: `ledger run --input PATH --data
// DIR --store postgres://USER@HOST:PORT/DB`. The data folder keeps no
// state then: the balances, the counters, the store's record of the last
// line applied and the outputs output.csv and rejects.csv are rows of the
// store state.OpenPostgres opens in that database, written in one
// transaction a save. The folder holds the file POSTGRES, which names the
// store and the database (its password left out), and the feed's pointer
// stays where a file run keeps it (beside the input, or --pointer-dir).
//
// The store's name is "ledger-file/BASE/RANDOM": BASE the data folder's
// name, RANDOM 16 hex digits drawn when the folder is made. Two data
// folders on one database never share a store, whatever their names, and
// a folder that is moved keeps its store.
//
// The outputs are in the database: `ledger output --data DIR` writes
// output.csv's committed bytes to stdout (--name rejects.csv the reject
// log's), and `ledger check` and `ledger balances` read the store, as they
// read a bbolt or Pebble folder's.
//
// The mistakes this catches:
//   - a folder that holds a bbolt or Pebble store, run with --store
//     postgres://, and a PostgreSQL folder run with --store bbolt or
//     pebble: a folder keeps its backend (an error, not a new empty store);
//   - a PostgreSQL folder run with a DSN of another database (or another
//     search_path) than the one its store is in: the store is not there,
//     and the run ends with an error that names the database the folder
//     was made with, instead of applying the whole input again to a new,
//     empty store;
//   - a second run on the same folder: the folder is locked (flock) by the
//     first; two folders' runs never share a store (and a second process
//     that opens the store by its name waits for the first's lease, then
//     fails, see state.OpenPostgres).
//
// A run killed with SIGKILL keeps its store's lease until it runs out
// (state.DefaultLease, or the DSN's lease=DURATION): the restart waits for
// it, saying so on stderr.

// pgFolderFile, in a data folder, names the folder's PostgreSQL store.
const pgFolderFile = "POSTGRES"

// pgStorePrefix begins the name of every file run's store (a partitioned
// run's stores are JOB/STREAM/P).
const pgStorePrefix = "ledger-file/"

// pgFolder is what a data folder's POSTGRES file says.
type pgFolder struct {
	// Store is the store's name in the database.
	Store string
	// Database is the DSN of the folder's first run, its password left
	// out: the database the store is in.
	Database string
}

// isPostgresURL reports whether s is a postgres:// or postgresql:// URL.
func isPostgresURL(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// readPGFolder reads dir's POSTGRES file; nil when dir has none.
func readPGFolder(dir string) (*pgFolder, error) {
	path := filepath.Join(dir, pgFolderFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	f := &pgFolder{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		switch {
		case !ok:
		case k == "store":
			f.Store = v
		case k == "database":
			f.Database = v
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w: the file is damaged; it names the folder's PostgreSQL store (%s…): write it again with the store's name and its database's DSN", path, err, pgStorePrefix)
	}
	if f.Store == "" || f.Database == "" {
		return nil, fmt.Errorf("%s: no store= or database= line: the file is damaged; it names the folder's PostgreSQL store (%s…): write it again with the store's name and its database's DSN", path, pgStorePrefix)
	}
	return f, nil
}

// writePGFolder writes dir's POSTGRES file durably (a temporary file
// synced, renamed, the folder synced).
func writePGFolder(dir string, f *pgFolder) error {
	path := filepath.Join(dir, pgFolderFile)
	text := fmt.Sprintf("# tidemark ledger: this data folder's state is in PostgreSQL, in the store below (see ledger run -h)\nstore=%s\ndatabase=%s\n", f.Store, f.Database)
	tmp := path + ".tmp"
	err := writeSynced(tmp, []byte(text))
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		return fmt.Errorf("record the data folder's PostgreSQL store in %s: %w", path, err)
	}
	return nil
}

func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

// newPGStoreName draws the store name of a new data folder dir.
func newPGStoreName(dir string) string {
	base := filepath.Base(filepath.Clean(dir))
	if abs, err := filepath.Abs(dir); err == nil {
		base = filepath.Base(abs)
	}
	if len(base) > 64 {
		base = base[:64]
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return pgStorePrefix + base + "/" + hex.EncodeToString(b[:])
}

// pgDSN is a postgres:// URL as the ledger takes it: the store's own
// parameters (lease, cache) kept apart from the connection's, and no
// store parameter (the ledger names the store).
type pgDSN struct {
	u     *url.URL
	lease time.Duration
}

// parsePGDSN parses a --store postgres://… URL.
func parsePGDSN(s string) (*pgDSN, error) {
	u, err := url.Parse(s)
	if err != nil || !isPostgresURL(s) {
		return nil, fmt.Errorf("--store %q: want a URL postgres://USER@HOST:PORT/DB", redactURL(s))
	}
	q := u.Query()
	if q.Has("store") {
		return nil, fmt.Errorf("--store %s: no store= parameter: the ledger names the data folder's store itself (in DIR/%s)", redactURL(s), pgFolderFile)
	}
	d := &pgDSN{u: u, lease: state.DefaultLease}
	if v := q.Get("lease"); v != "" {
		l, err := time.ParseDuration(v)
		if err != nil {
			return nil, fmt.Errorf("--store %s: lease=%q: want a duration such as 15s", redactURL(s), v)
		}
		d.lease = l
	}
	return d, nil
}

// store returns the spec of store name in d's database (state.Open).
func (d *pgDSN) store(name string) string {
	u := *d.u
	q := u.Query()
	q.Set("store", name)
	u.RawQuery = q.Encode()
	return u.String()
}

// conn returns the DSN of a plain connection: without the store's own
// parameters.
func (d *pgDSN) conn() string {
	u := *d.u
	q := u.Query()
	q.Del("lease")
	q.Del("cache")
	u.RawQuery = q.Encode()
	return u.String()
}

// recorded returns the DSN without its password, as POSTGRES records it.
func (d *pgDSN) recorded() string {
	u := *d.u
	if u.User != nil {
		u.User = url.User(u.User.Username())
	}
	return u.String()
}

// lockTimeout is how long an open waits for another owner's lease: the
// lease and a margin, so that the restart of a run that was killed
// (whose lease nobody released) waits it out instead of failing.
func (d *pgDSN) lockTimeout() time.Duration { return d.lease + 5*time.Second }

// pgHolder is a store's row in tidemark_owner, as probePG finds it.
type pgHolder struct {
	exists bool          // the store is in the database
	owner  string        // the lease's owner, "" when released
	left   time.Duration // until the lease runs out; <= 0 when it has
}

// probePG looks the store name up in d's database, without opening it.
func probePG(ctx context.Context, d *pgDSN, name string) (pgHolder, error) {
	var h pgHolder
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, d.conn())
	if err != nil {
		return h, fmt.Errorf("connect to --store %s: %w", redactURL(d.u.String()), err)
	}
	defer conn.Close(context.Background())
	var tables bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('tidemark_owner') IS NOT NULL`).Scan(&tables); err != nil || !tables {
		return h, err
	}
	var secs float64
	err = conn.QueryRow(ctx, `SELECT owner, CASE WHEN lease_until > now() THEN extract(epoch FROM lease_until - now())::float8 ELSE 0 END FROM tidemark_owner WHERE store = $1`, name).Scan(&h.owner, &secs)
	if errors.Is(err, pgx.ErrNoRows) {
		return h, nil
	}
	if err != nil {
		return h, fmt.Errorf("look store %q up in --store %s: %w", name, redactURL(d.u.String()), err)
	}
	h.exists = true
	if secs > 0 {
		h.left = time.Duration(secs * float64(time.Second))
	}
	return h, nil
}

// pgRun is the PostgreSQL side of a file run: its data folder (locked for
// the run) and its store.
type pgRun struct {
	dir    string
	dsn    *pgDSN
	folder *pgFolder
	isNew  bool     // the folder gets its POSTGRES file once the store is open
	lock   *os.File // the data folder, flocked
}

// preparePGRun decides where the state of a file run on data folder dir
// lives when either dir names a PostgreSQL store or flag (--store, set
// says it was given) is a postgres:// URL; nil when neither is so. It
// locks the folder for the run: close the pgRun at its end.
func preparePGRun(ctx context.Context, dir, flag string, set bool, stderr func(format string, args ...any)) (*pgRun, error) {
	folder, err := readPGFolder(dir)
	if err != nil {
		return nil, err
	}
	_, statErr := os.Stat(filepath.Join(dir, "STORE"))
	hasLocal := statErr == nil
	switch {
	case hasLocal && isPostgresURL(flag):
		return nil, fmt.Errorf("data folder %s holds a local store (%s), and --store names a PostgreSQL database: a data folder keeps the backend it was made with; give a new --data folder for a PostgreSQL run, or leave --store out", dir, filepath.Join(dir, "STORE"))
	case folder == nil && !isPostgresURL(flag):
		return nil, nil
	case folder != nil && set && !isPostgresURL(flag):
		return nil, fmt.Errorf("data folder %s keeps its state in PostgreSQL (store %s, database %s, see %s), not in --store %s: give that database's --store postgres://…, or a new --data folder", dir, folder.Store, folder.Database, filepath.Join(dir, pgFolderFile), flag)
	}
	r := &pgRun{dir: dir, folder: folder}
	dsn := flag
	if folder != nil && !set {
		dsn = folder.Database // its password from PGPASSWORD or ~/.pgpass
	}
	if r.dsn, err = parsePGDSN(dsn); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("data folder: %w", err)
	}
	if r.lock, err = lockFolder(dir); err != nil {
		return nil, err
	}
	fail := func(err error) (*pgRun, error) {
		r.close()
		return nil, err
	}
	if folder == nil {
		r.isNew = true
		r.folder = &pgFolder{Store: newPGStoreName(dir), Database: r.dsn.recorded()}
	}
	h, err := probePG(ctx, r.dsn, r.folder.Store)
	if err != nil && folder != nil && !set {
		err = fmt.Errorf("%w (the database %s records; it keeps no password: give it with PGPASSWORD or ~/.pgpass, or give --store)", err, filepath.Join(dir, pgFolderFile))
	}
	if err != nil {
		return fail(err)
	}
	switch {
	case r.isNew && h.exists:
		return fail(fmt.Errorf("store %s is already in --store %s: run again (a new folder draws a new name)", r.folder.Store, redactURL(dsn)))
	case !r.isNew && !h.exists:
		return fail(fmt.Errorf("data folder %s keeps its state in store %s, which --store %s does not hold: the folder was made with database %s; give that one (a DSN of the same database and search_path), or a new --data folder; nothing was read",
			dir, r.folder.Store, redactURL(dsn), r.folder.Database))
	case h.owner != "" && h.left > 0:
		stderr("ledger: store %s is leased by %s for %v more (a run that was killed keeps its lease until it runs out; a live one renews it): waiting up to %v for it\n",
			r.folder.Store, h.owner, h.left.Round(time.Millisecond), r.dsn.lockTimeout())
	}
	return r, nil
}

// spec is the store's spec for framework.GroupConfig.Store.
func (r *pgRun) spec() string { return r.dsn.store(r.folder.Store) }

// opened records a new folder's store in its POSTGRES file, once the
// store is open (and so in the database).
func (r *pgRun) opened() error {
	if !r.isNew {
		return nil
	}
	r.isNew = false
	return writePGFolder(r.dir, r.folder)
}

func (r *pgRun) close() {
	if r.lock != nil {
		r.lock.Close() // drops the flock
		r.lock = nil
	}
}

// lockFolder takes an exclusive flock on the folder dir, without waiting.
func lockFolder(dir string) (*os.File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("data folder: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("data folder %s is in use by another ledger process (it holds the folder's lock): stop it, or give this run a --data folder of its own: %w", dir, state.ErrLocked)
		}
		return nil, fmt.Errorf("lock data folder %s: %w", dir, err)
	}
	return f, nil
}

// openPGFolder opens the store a PostgreSQL data folder names, in dsn's
// database ("" for the one the folder records).
func openPGFolder(dir string, folder *pgFolder, dsn string) (state.Store, error) {
	if dsn == "" {
		dsn = folder.Database
	}
	d, err := parsePGDSN(dsn)
	if err != nil {
		return nil, err
	}
	h, err := probePG(context.Background(), d, folder.Store)
	if err != nil {
		return nil, err
	}
	if !h.exists {
		return nil, fmt.Errorf("data folder %s keeps its state in store %s, which %s does not hold: the folder was made with database %s; give that one", dir, folder.Store, redactURL(dsn), folder.Database)
	}
	st, err := state.OpenPostgres(d.store(folder.Store), "", &state.Options{LockTimeout: d.lockTimeout(), Logger: discardLogger()})
	if errors.Is(err, state.ErrLocked) {
		err = fmt.Errorf("%w (a ledger run holds the store: stop it, or wait for the lease of one that was killed)", err)
	}
	return st, err
}
