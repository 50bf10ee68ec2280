package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The table of workers, in the database of the stores (the first schema of
// the search_path). One row a worker of a job: its heartbeat, timed by the
// server's clock as the stores' leases are, and the partitions it holds.
// It is advisory: a partition's owner is its store's lease holder, and a
// worker that reads the table wrong at worst tries a partition whose lease
// is held (and is refused) or leaves one free a little longer.
//
//	tidemark_workers  job, worker: the key
//	                  instance: this run of the worker (a random id), so
//	                    that a second process of the same name is refused
//	                  claims: JSON, the partitions held or being taken
//	                  started, heartbeat_until
const sqlWorkersTable = `CREATE TABLE IF NOT EXISTS tidemark_workers (
	job text NOT NULL,
	worker text NOT NULL,
	instance text NOT NULL,
	claims text NOT NULL,
	started timestamptz NOT NULL,
	heartbeat_until timestamptz NOT NULL,
	PRIMARY KEY (job, worker)
)`

// workersSchemaLock serializes the creation of the table by workers that
// start at once ("tidemark" + 1: not the stores' lock).
const workersSchemaLock = 0x7469_6465_6d61_726c

const (
	// sqlRegister makes or takes this worker's row: taken only when the
	// row's heartbeat ran out (another process of the same name is dead)
	// or it is this instance's own.
	sqlRegister = `INSERT INTO tidemark_workers (job, worker, instance, claims, started, heartbeat_until)
		VALUES ($1, $2, $3, '[]', now(), now() + $4 * interval '1 millisecond')
		ON CONFLICT (job, worker) DO UPDATE SET instance = excluded.instance, claims = '[]', started = now(), heartbeat_until = excluded.heartbeat_until
		WHERE tidemark_workers.heartbeat_until < now() OR tidemark_workers.instance = excluded.instance
		RETURNING instance`
	sqlHolderOf = `SELECT instance, extract(epoch FROM heartbeat_until - now()) FROM tidemark_workers WHERE job = $1 AND worker = $2`
	sqlBeat     = `UPDATE tidemark_workers SET claims = $4, heartbeat_until = now() + $5 * interval '1 millisecond'
		WHERE job = $1 AND worker = $2 AND instance = $3`
	sqlWorkers = `SELECT worker, claims, heartbeat_until > now(), extract(epoch FROM heartbeat_until - now()) FROM tidemark_workers WHERE job = $1 ORDER BY worker`
	sqlLeave   = `DELETE FROM tidemark_workers WHERE job = $1 AND worker = $2 AND instance = $3`
	// sqlTidy forgets workers dead for a day.
	sqlTidy = `DELETE FROM tidemark_workers WHERE job = $1 AND heartbeat_until < now() - interval '1 day'`
)

// claim is one partition a worker holds or is taking, as the table has it.
type claim struct {
	Partition int    `json:"p"`
	Token     int64  `json:"token,omitempty"`
	State     string `json:"state"`
}

// memberRow is a worker as the table has it.
type memberRow struct {
	name   string
	claims []claim
	alive  bool
	left   time.Duration // until its heartbeat runs out (negative: dead since)
}

// members is this worker's side of the table.
type members struct {
	pool     *pgxpool.Pool
	job      string
	worker   string
	instance string
	lease    time.Duration
	timeout  time.Duration
}

func newInstance() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// openMembers connects to the database and makes the table if needed.
func openMembers(ctx context.Context, dsn, job, worker string, lease time.Duration) (*members, error) {
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("cluster: database %s: %w", redact(dsn), err)
	}
	pc.MaxConns = 2
	if pc.ConnConfig.RuntimeParams["application_name"] == "" {
		pc.ConnConfig.RuntimeParams["application_name"] = "tidemark worker " + worker
	}
	m := &members{job: job, worker: worker, instance: newInstance(), lease: lease, timeout: max(lease, 5*time.Second)}
	c, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	m.pool, err = pgxpool.NewWithConfig(c, pc)
	if err != nil {
		return nil, fmt.Errorf("cluster: database %s: %w", redact(dsn), err)
	}
	err = pgx.BeginFunc(c, m.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(c, `SELECT pg_advisory_xact_lock($1)`, int64(workersSchemaLock)); err != nil {
			return err
		}
		_, err := tx.Exec(c, sqlWorkersTable)
		return err
	})
	if err != nil {
		m.pool.Close()
		return nil, fmt.Errorf("cluster: database %s: create the table of workers: %w", redact(dsn), err)
	}
	return m, nil
}

// register makes this worker's row. A row of the same name whose
// heartbeat is live (the process before this one, killed a moment ago, or
// another process of the same name) is waited for up to wait; still live
// then, it is ErrWorkerExists.
func (m *members) register(ctx context.Context, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		c, cancel := context.WithTimeout(ctx, m.timeout)
		var inst string
		err := m.pool.QueryRow(c, sqlRegister, m.job, m.worker, m.instance, m.lease.Milliseconds()).Scan(&inst)
		if err == nil {
			_, _ = m.pool.Exec(c, sqlTidy, m.job)
			cancel()
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			cancel()
			return fmt.Errorf("cluster: job %s: register worker %s: %w", m.job, m.worker, err)
		}
		var secs float64
		err = m.pool.QueryRow(c, sqlHolderOf, m.job, m.worker).Scan(&inst, &secs)
		cancel()
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("cluster: job %s: register worker %s: %w", m.job, m.worker, err)
		}
		left := time.Duration(secs * float64(time.Second))
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: job %s, worker %s (instance %s, heartbeat for %.1fs more): give each worker its own name, or stop the other one",
				ErrWorkerExists, m.job, m.worker, inst, secs)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(max(left, 10*time.Millisecond), 250*time.Millisecond)):
		}
	}
}

// beat renews the heartbeat with the claims, and reads every worker of the
// job. Another instance of the same name that took the row over is
// ErrWorkerExists.
func (m *members) beat(ctx context.Context, claims []claim) ([]memberRow, error) {
	c, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	js, err := json.Marshal(claims)
	if err != nil {
		return nil, err
	}
	tag, err := m.pool.Exec(c, sqlBeat, m.job, m.worker, m.instance, string(js), m.lease.Milliseconds())
	if err != nil {
		return nil, fmt.Errorf("cluster: job %s: heartbeat of worker %s: %w", m.job, m.worker, err)
	}
	if tag.RowsAffected() == 0 {
		// The row is gone (a tidy-up after a long pause, or an operator)
		// or another instance has it.
		if err := m.register(c, 0); err != nil {
			return nil, err
		}
		if _, err := m.pool.Exec(c, sqlBeat, m.job, m.worker, m.instance, string(js), m.lease.Milliseconds()); err != nil {
			return nil, fmt.Errorf("cluster: job %s: heartbeat of worker %s: %w", m.job, m.worker, err)
		}
	}
	return m.read(c)
}

// read returns every worker of the job.
func (m *members) read(ctx context.Context) ([]memberRow, error) {
	rows, err := m.pool.Query(ctx, sqlWorkers, m.job)
	if err != nil {
		return nil, fmt.Errorf("cluster: job %s: read the workers: %w", m.job, err)
	}
	var out []memberRow
	for rows.Next() {
		var r memberRow
		var js string
		var secs float64
		if err := rows.Scan(&r.name, &js, &r.alive, &secs); err != nil {
			rows.Close()
			return nil, fmt.Errorf("cluster: job %s: read the workers: %w", m.job, err)
		}
		r.left = time.Duration(secs * float64(time.Second))
		// A row another version wrote unreadably counts as claiming nothing.
		_ = json.Unmarshal([]byte(js), &r.claims)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cluster: job %s: read the workers: %w", m.job, err)
	}
	return out, nil
}

// leave removes this worker's row, so that the others count it out at
// once.
func (m *members) leave() error {
	c, cancel := context.WithTimeout(context.Background(), m.timeout)
	defer cancel()
	_, err := m.pool.Exec(c, sqlLeave, m.job, m.worker, m.instance)
	if err != nil {
		return fmt.Errorf("cluster: job %s: remove worker %s from the table: %w", m.job, m.worker, err)
	}
	return nil
}

func (m *members) close() { m.pool.Close() }
