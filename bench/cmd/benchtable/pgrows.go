package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark-go/tidemark/internal/pgtest"
)

// Row 20: the ledger rows on the PostgreSQL store (`ledger run --store
// postgres://…`, its state and output.csv rows of the store) beside
// `naiveledger -store postgres` (pgx, its output rows too), at the numbers
// of accounts of rows 5 and 6, over at most pgMaxLines lines, and its
// restart in row 14. The server is a throwaway cluster the bench starts
// at the row's first use (internal/pgtest: initdb, fsync and
// synchronous_commit on, shared_buffers 64 MB, a unix socket) and stops
// when the bench ends, on an error too (main runs through pgtest.Main);
// $TIDEMARK_PG_DSN names another server instead. Each program's lineage
// has a schema of its own, emptied before each run from the input's start,
// or, at 1,000,000 accounts and more, before the setup run that gives it
// every account (made again by each bench: -setups keeps no rows of a
// server that ends with the bench).

// pgRow is the ledger row of the PostgreSQL store.
const pgRow = "20"

// pgMaxLines is the most lines of a run of row 20: 1,000,000 in make
// bench (not the 5,000,000 of rows 5 and 6), where the naive program's
// bounded variant reads a balance with a round trip for most lines of
// 10,000 accounts (about 30 k lines/s: 3 minutes a run of 5,000,000).
const pgMaxLines = 1_000_000

// pgServer is the server of row 20, once started.
var pgServer struct {
	once    sync.Once
	err     error
	version string
	// pid is the postmaster's, 0 when the server is not on this machine
	// (its CPU is then not measured).
	pid int
	// base is the count of the postmaster's children with no run's
	// client: its own processes (checkpointer, writers, launchers), and
	// one of slack.
	base int
}

// pgSchema returns the DSN of the schema name on the bench's server,
// starting the server at the first call.
func (r *runner) pgSchema(name string) (string, error) {
	dsn, err := pgtest.SchemaDSN(name)
	if err != nil {
		return "", fmt.Errorf("row %s: start PostgreSQL: %w", pgRow, err)
	}
	pgServer.once.Do(func() { pgServer.err = pgFindServer(dsn) })
	if pgServer.err != nil {
		return "", fmt.Errorf("row %s: %w", pgRow, pgServer.err)
	}
	return dsn, nil
}

// pgFindServer reads the server's version and its postmaster's pid: the
// parent of a backend, when /proc has it.
func pgFindServer(dsn string) error {
	return withConn(dsn, pgFind)
}

// withConn calls fn with a connection to dsn, a minute at most.
func withConn(dsn string, fn func(ctx context.Context, conn *pgx.Conn) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return fn(ctx, conn)
}

func pgFind(ctx context.Context, conn *pgx.Conn) error {
	var backend int
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version'), pg_backend_pid()`).Scan(&pgServer.version, &backend); err != nil {
		return err
	}
	if st, ok := readProcStat(backend); ok {
		pgServer.pid = st.ppid
		// This connection's backend is the slack of one (an autovacuum
		// worker, say).
		var err error
		if pgServer.base, _, err = pgChildren(st.ppid); err != nil {
			pgServer.pid = 0
		}
	}
	logf("row %s: PostgreSQL %s, postmaster pid %d, %d processes without a client", pgRow, pgServer.version, pgServer.pid, pgServer.base-1)
	return nil
}

// resetSchema empties the schema of dsn (its search_path): a lineage's
// run from the input's start finds no table of the one before. Then a
// checkpoint, so that the writes of the runs before are on disk and their
// bill (the checkpointer's CPU and syncs) does not land on the next run;
// a server that refuses it (a role without pg_checkpoint) is left as is.
func resetSchema(dsn string) error {
	u, err := url.Parse(dsn)
	if err != nil {
		return err
	}
	schema := u.Query().Get("search_path")
	if schema == "" {
		return fmt.Errorf("reset the schema of %s: no search_path", dsn)
	}
	return withConn(dsn, func(ctx context.Context, conn *pgx.Conn) error {
		id := pgx.Identifier{schema}.Sanitize()
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+id+" CASCADE"); err != nil {
			return fmt.Errorf("reset schema %s: %w", schema, err)
		}
		if _, err := conn.Exec(ctx, "CREATE SCHEMA "+id); err != nil {
			return fmt.Errorf("reset schema %s: %w", schema, err)
		}
		_, _ = conn.Exec(ctx, "CHECKPOINT")
		return nil
	})
}

// procStat is what the bench reads of /proc/PID/stat.
type procStat struct {
	ppid int
	// cpu is utime+stime+cutime+cstime in seconds: the process's CPU and
	// that of its children it has waited for.
	cpu float64
}

// clockTicks is Linux's USER_HZ, the unit of /proc/PID/stat's times.
const clockTicks = 100

func readProcStat(pid int) (procStat, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, false
	}
	// The command is in parentheses and may hold spaces: the fields
	// after its closing one.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); ppid is field 4, utime..cstime 14..17.
	if len(f) < 15 {
		return procStat{}, false
	}
	st := procStat{}
	st.ppid, _ = strconv.Atoi(f[1])
	for _, s := range f[11:15] {
		v, _ := strconv.ParseFloat(s, 64)
		st.cpu += v / clockTicks
	}
	return st, true
}

// pgServerCPU is the CPU seconds the server has used so far, its
// postmaster's and every child's (the backends that ended are in the
// postmaster's children's times once it waited for them); 0 for a
// lineage without a database, or a server whose processes /proc does not
// show. It first waits (at most 2 s) for the backends of a run that just
// ended to exit, so that their CPU is counted.
func (r *runner) pgServerCPU(l *ledgerLine) float64 {
	if l.dsn == "" || pgServer.pid == 0 {
		return 0
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		n, cpu, err := pgChildren(pgServer.pid)
		if err != nil {
			return 0
		}
		if n <= pgServer.base || time.Now().After(deadline) {
			pm, _ := readProcStat(pgServer.pid)
			return pm.cpu + cpu
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// pgChildren counts the children of the postmaster pid and sums their
// CPU seconds.
func pgChildren(pid int) (int, float64, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, 0, err
	}
	n, cpu := 0, 0.0
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readProcStat(p); ok && st.ppid == pid {
			n++
			cpu += st.cpu
		}
	}
	if n == 0 {
		return 0, 0, errors.New("the postmaster has no children")
	}
	return n, cpu, nil
}

// pgNote is row 20's note: the server the two programs share.
func pgNote() string {
	cpu := "its CPU (the postmaster and its processes, from /proc) is given beside each program's own in the note on where the time goes"
	if pgServer.pid == 0 {
		cpu = "its CPU was not measured (its processes are not on this machine)"
	}
	return fmt.Sprintf("Row %s: ledger run --store postgres:// (its state and output.csv rows of its store, state.OpenPostgres) and naiveledger -store postgres (pgx: one transaction a batch of 10,000 lines, its balances, meta keys and output lines as a bytea row, sent in one pgx.Batch) share one PostgreSQL %s server, a throwaway cluster the bench started (fsync on, synchronous_commit on, shared_buffers 64 MB, unix socket), each in a schema of its own, emptied before each run. A program's time is from its exec to its exit; the server's work is part of it, but not of its CPU time: %s. The server's memory is not in row 10. The server compresses the output's bytes: the store's sessions ask for lz4 (state.OpenPostgres does, where the server has it), the naive program's take the server's default, pglz, as a program written plainly does; with pglz the compression was most of the server's work at 20 accounts (bench/RESULTS.md, session 21, gives both programs with each method).",
		pgRow, pgServer.version, cpu)
}
