// Package pgtest gives tests a real PostgreSQL server without any setup.
//
// A test binary that uses it wraps its TestMain with [Main]. The first test
// that asks for the server ([Shared], [SchemaDSN]) starts a throwaway
// cluster: initdb into a folder under the temporary directory (as the
// postgres user when the tests run as root), a free port on 127.0.0.1 and a
// unix socket in that folder, fsync on. It runs until the tests end, when
// Main stops it and removes its folder: one cluster per test binary (it
// takes about a second and a half to make). Tests isolate themselves by
// schema ([Server.Schema]): each gets a DSN whose search_path is a schema
// of its own.
//
// When $TIDEMARK_PG_DSN names a server, the tests use it instead, and no
// cluster is started for the shared server. Tests that stop and restart a
// server ([NewCluster]) always get a cluster of their own, which needs
// PostgreSQL's programs: $TIDEMARK_PG_BIN, or the newest
// /usr/lib/postgresql/N/bin with N >= 15, or initdb on PATH.
//
// A cluster never outlives its test binary: its postmaster gets SIGQUIT
// (an immediate shutdown) when the binary dies, even by SIGKILL, and a
// folder left behind by a binary that is gone is removed the next time a
// cluster starts.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Server is a PostgreSQL server for tests: the shared cluster of the test
// binary, or the one $TIDEMARK_PG_DSN names.
type Server struct {
	// dsn is of the database the tests use.
	dsn string
	// Cluster is the cluster this process runs, nil for a server named by
	// $TIDEMARK_PG_DSN.
	Cluster *Cluster
}

// testDB is the database the shared cluster makes for the tests.
const testDB = "tidemark"

var (
	mainUsed atomic.Bool

	sharedMu  sync.Mutex
	shared    *Server
	sharedErr error

	// The template data directory clusters are copied from, and every
	// cluster started, to remove at the end.
	tmplMu   sync.Mutex
	template *Cluster
	clusters []*Cluster

	// Schemas made on a server named by $TIDEMARK_PG_DSN, dropped at the
	// end.
	schemasMu sync.Mutex
	schemas   = map[string]bool{}
	schemaN   atomic.Int64
)

// Main returns m with a Run that, once the tests ran, stops and removes
// the clusters they started. Use it in TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m).Run()) }
//
// or goleak.VerifyTestMain(pgtest.Main(m)).
func Main(m interface{ Run() int }) interface{ Run() int } { return runner{m} }

type runner struct{ m interface{ Run() int } }

func (r runner) Run() int {
	mainUsed.Store(true)
	code := r.m.Run()
	if err := shutdown(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// shutdown stops every cluster and drops the schemas made on an outside
// server.
func shutdown() error {
	var errs []error
	sharedMu.Lock()
	if s := shared; s != nil && s.Cluster == nil {
		schemasMu.Lock()
		if len(schemas) > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			conn, err := pgx.Connect(ctx, s.dsn)
			if err == nil {
				for name := range schemas {
					if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
						errs = append(errs, fmt.Errorf("pgtest: drop schema %s: %w", name, err))
					}
				}
				conn.Close(ctx)
			} else {
				errs = append(errs, fmt.Errorf("pgtest: drop the test schemas: %w", err))
			}
			cancel()
		}
		schemasMu.Unlock()
	}
	shared, sharedErr = nil, errors.New("pgtest: the tests have ended")
	sharedMu.Unlock()
	tmplMu.Lock()
	defer tmplMu.Unlock()
	for _, c := range clusters {
		if err := c.Remove(); err != nil {
			errs = append(errs, err)
		}
	}
	clusters = nil
	if template != nil {
		errs = append(errs, os.RemoveAll(template.dir))
		template = nil
	}
	return errors.Join(errs...)
}

// startCluster makes and starts a cluster, copied from the template
// (made at the first call).
func startCluster() (*Cluster, error) {
	if !mainUsed.Load() {
		return nil, errors.New("pgtest: the test binary's TestMain must run the tests through pgtest.Main, which removes the clusters at the end")
	}
	tmplMu.Lock()
	if template == nil {
		t, err := newCluster("")
		if err != nil {
			tmplMu.Unlock()
			return nil, err
		}
		template = t
	}
	src := template.dataDir()
	tmplMu.Unlock()
	c, err := newCluster(src)
	if err != nil {
		return nil, err
	}
	if err := c.Start(); err != nil {
		return nil, errors.Join(err, c.Remove())
	}
	tmplMu.Lock()
	clusters = append(clusters, c)
	tmplMu.Unlock()
	return c, nil
}

// sharedServer returns the shared server, starting it at the first call.
func sharedServer() (*Server, error) {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared != nil || sharedErr != nil {
		return shared, sharedErr
	}
	if dsn := os.Getenv(EnvDSN); dsn != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			sharedErr = fmt.Errorf("pgtest: connect to $%s: %w", EnvDSN, err)
			return nil, sharedErr
		}
		conn.Close(ctx)
		shared = &Server{dsn: dsn}
		return shared, nil
	}
	c, err := startCluster()
	if err != nil {
		sharedErr = err
		return nil, err
	}
	if err := createDatabase(c.DSN("postgres"), testDB); err != nil {
		sharedErr = err
		return nil, err
	}
	shared = &Server{dsn: c.DSN(testDB), Cluster: c}
	return shared, nil
}

func createDatabase(dsn, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("pgtest: create database %s: %w", name, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("pgtest: create database %s: %w", name, err)
	}
	return nil
}

// Shared returns the test binary's server, starting the cluster at the
// first call. It fails the test when no server can be had.
func Shared(t testing.TB) *Server {
	t.Helper()
	s, err := sharedServer()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// DSN returns the URL (or keyword/value string, for some $TIDEMARK_PG_DSN)
// of the server's test database.
func (s *Server) DSN() string { return s.dsn }

// Schema makes a schema of t's own and returns a DSN whose search_path is
// it: tables a test creates through it are its own. On a server named by
// $TIDEMARK_PG_DSN the schema is dropped when t ends.
func (s *Server) Schema(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("t%d_%d", os.Getpid(), schemaN.Add(1))
	dsn, err := s.schema(name)
	if err != nil {
		t.Fatal(err)
	}
	if s.Cluster == nil {
		t.Cleanup(func() {
			if err := s.dropSchema(name); err != nil {
				t.Error(err)
			}
		})
	}
	return dsn
}

// schema makes the schema name if it does not exist and returns the DSN
// that uses it.
func (s *Server) schema(name string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.dsn)
	if err != nil {
		return "", fmt.Errorf("pgtest: create schema %s: %w", name, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("pgtest: create schema %s: %w", name, err)
	}
	if s.Cluster == nil {
		schemasMu.Lock()
		schemas[name] = true
		schemasMu.Unlock()
	}
	return WithParam(s.dsn, "search_path", name), nil
}

func (s *Server) dropSchema(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.dsn)
	if err != nil {
		return fmt.Errorf("pgtest: drop schema %s: %w", name, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
		return fmt.Errorf("pgtest: drop schema %s: %w", name, err)
	}
	schemasMu.Lock()
	delete(schemas, name)
	schemasMu.Unlock()
	return nil
}

// SchemaDSN returns the DSN of the schema name on the shared server,
// making it if needed: for helpers that have no testing.TB, such as the
// open function of a table of backends. The same name gives the same
// schema, in this process and in the children it starts with the
// environment of [Env]. On an outside server the schema is dropped when
// the tests end.
func SchemaDSN(name string) (string, error) {
	s, err := sharedServer()
	if err != nil {
		return "", err
	}
	return s.schema(name)
}

// Env returns the environment variable that makes a child process (the
// test binary run again, to be killed) use this process's shared server,
// starting it if needed: "TIDEMARK_PG_DSN=...".
func Env() (string, error) {
	s, err := sharedServer()
	if err != nil {
		return "", err
	}
	return EnvDSN + "=" + s.dsn, nil
}

// NewCluster starts a cluster of t's own, removed when t ends: for tests
// that stop, crash and restart the server. Its database "postgres" is
// empty.
func NewCluster(t testing.TB) *Cluster {
	t.Helper()
	c, err := startCluster()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Remove(); err != nil {
			t.Error(err)
		}
		tmplMu.Lock()
		for i, x := range clusters {
			if x == c {
				clusters = append(clusters[:i], clusters[i+1:]...)
				break
			}
		}
		tmplMu.Unlock()
	})
	return c
}

// WithParam returns dsn with the connection parameter key set to value.
// dsn is a URL (postgres://...) or a keyword/value string.
func WithParam(dsn, key, value string) string {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		q := u.Query()
		q.Set(key, value)
		u.RawQuery = q.Encode()
		return u.String()
	}
	return fmt.Sprintf("%s %s='%s'", dsn, key, strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(value))
}

// Backends returns the pids of the server processes serving connections
// whose application_name starts with prefix.
func Backends(ctx context.Context, dsn, prefix string) ([]int, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("pgtest: list backends: %w", err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE starts_with(application_name, $1) AND pid <> pg_backend_pid() ORDER BY pid", prefix)
	if err != nil {
		return nil, fmt.Errorf("pgtest: list backends: %w", err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil, fmt.Errorf("pgtest: list backends: %w", err)
	}
	return pids, nil
}

// Terminate ends the server processes pids with pg_terminate_backend: their
// clients see the connection closed, in the middle of whatever they were
// doing. It returns how many it ended.
func Terminate(ctx context.Context, dsn string, pids ...int) (int, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, fmt.Errorf("pgtest: terminate backends: %w", err)
	}
	defer conn.Close(ctx)
	n := 0
	for _, pid := range pids {
		var ok bool
		if err := conn.QueryRow(ctx, "SELECT pg_terminate_backend($1)", pid).Scan(&ok); err != nil {
			return n, fmt.Errorf("pgtest: terminate backend %d: %w", pid, err)
		}
		if ok {
			n++
		}
	}
	return n, nil
}
