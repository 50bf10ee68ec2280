package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// PostgreSQL: three tables in the DSN's schema, one connection, and one
// transaction a batch that sends its statements in one round trip (a
// pgx.Batch): the changed balances (one INSERT … ON CONFLICT DO UPDATE
// from arrays), the meta keys, and the batch's output lines as one bytea
// row keyed by its offset in the output. The server's default
// synchronous_commit (on) makes each commit durable before it returns.
type pgDB struct{ conn *pgx.Conn }

var pgSchema = []string{
	`CREATE TABLE IF NOT EXISTS naive_balances (account text PRIMARY KEY, balance bigint NOT NULL)`,
	`CREATE TABLE IF NOT EXISTS naive_meta (k text PRIMARY KEY, v bigint NOT NULL)`,
	`CREATE TABLE IF NOT EXISTS naive_output (at bigint PRIMARY KEY, lines bytea NOT NULL)`,
}

const (
	pgUpsertBalances = `INSERT INTO naive_balances (account, balance) SELECT * FROM unnest($1::text[], $2::bigint[])
		ON CONFLICT (account) DO UPDATE SET balance = excluded.balance`
	pgUpsertMeta = `INSERT INTO naive_meta (k, v) SELECT * FROM unnest($1::text[], $2::bigint[])
		ON CONFLICT (k) DO UPDATE SET v = excluded.v`
	pgInsertOutput = `INSERT INTO naive_output (at, lines) VALUES ($1, $2)`
)

func openPG(dsn string) (*pgDB, error) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	for _, q := range pgSchema {
		if _, err := conn.Exec(ctx, q); err != nil {
			return nil, errors.Join(fmt.Errorf("create the tables: %w", err), conn.Close(ctx))
		}
	}
	return &pgDB{conn: conn}, nil
}

func (p *pgDB) meta(key string) (int64, error) {
	var v int64
	err := p.conn.QueryRow(context.Background(), `SELECT v FROM naive_meta WHERE k = $1`, key).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	return v, err
}

func (p *pgDB) balance(a []byte) (int64, bool, error) {
	var v int64
	err := p.conn.QueryRow(context.Background(), `SELECT balance FROM naive_balances WHERE account = $1`, string(a)).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	return v, err == nil, err
}

func (p *pgDB) all(fn func([]byte, int64)) error {
	rows, err := p.conn.Query(context.Background(), `SELECT account, balance FROM naive_balances`)
	if err != nil {
		return err
	}
	defer rows.Close()
	var a string
	var b int64
	for rows.Next() {
		if err := rows.Scan(&a, &b); err != nil {
			return err
		}
		fn([]byte(a), b)
	}
	return rows.Err()
}

func (p *pgDB) commit(changed []*account, meta map[string]int64) error {
	return p.commitWithOutput(changed, meta, 0, nil)
}

func (p *pgDB) commitWithOutput(changed []*account, meta map[string]int64, at int64, out []byte) error {
	ctx := context.Background()
	names, bals := make([]string, len(changed)), make([]int64, len(changed))
	for i, a := range changed {
		names[i], bals[i] = a.name, a.balance
	}
	var keys []string
	var vals []int64
	for k, v := range meta {
		keys, vals = append(keys, k), append(vals, v)
	}
	return pgx.BeginFunc(ctx, p.conn, func(tx pgx.Tx) error {
		var b pgx.Batch
		b.Queue(pgUpsertBalances, names, bals)
		b.Queue(pgUpsertMeta, keys, vals)
		if len(out) > 0 {
			b.Queue(pgInsertOutput, at, out)
		}
		return tx.SendBatch(ctx, &b).Close()
	})
}

func (p *pgDB) close() error { return p.conn.Close(context.Background()) }
