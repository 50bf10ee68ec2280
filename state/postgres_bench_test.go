package state

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidemark-go/tidemark"
)

// BenchmarkPostgresBareLedger is the baseline of BenchmarkApplyLedger on
// PostgreSQL: a bare pgx loop that commits, per batch of lines, the keys
// the store's batch holds (100 balances, the count, the total and the
// feed's record), with one upsert in one pipelined transaction, and no
// fence, no staging and no read. lines/s is batch/commit time.
func BenchmarkPostgresBareLedger(b *testing.B) {
	for _, size := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			dir := b.TempDir()
			pgSchemaFor(b, dir)
			dsn, err := pgDSN(dir)
			if err != nil {
				b.Fatal(err)
			}
			pool, err := pgxpool.New(context.Background(), dsn)
			if err != nil {
				b.Fatal(err)
			}
			defer pool.Close()
			bal := newBucketInfo("ledger", "balances").prefix
			root := newBucketInfo("ledger", "").prefix
			var keys, vals [][]byte
			for i := range 100 {
				keys = append(keys, fmt.Appendf(append([]byte{}, bal...), "account-holder-%05d", i))
			}
			keys = append(keys, append(append([]byte{}, root...), "applied"...), append(append([]byte{}, root...), "total"...), appliedKey("ledger", "f", ""))
			for range keys {
				vals = append(vals, make([]byte, 8))
			}
			vals[len(vals)-1] = make([]byte, lineageLen)
			ctx := context.Background()
			n := 0
			commit := func() {
				for _, v := range vals {
					binary.BigEndian.PutUint64(v, uint64(n))
				}
				batch := &pgx.Batch{}
				batch.Queue("BEGIN")
				batch.Queue(sqlUpsert, dir, keys, vals)
				batch.Queue("COMMIT")
				if err := pool.SendBatch(ctx, batch).Close(); err != nil {
					b.Fatal(err)
				}
			}
			for b.Loop() {
				n++
				if n%size == 0 {
					commit()
				}
			}
			commit()
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "lines/s")
		})
	}
}

// BenchmarkPostgresDistinctKeys: each line adds to one of 1,000,000
// accounts in turn, so that each batch of 10,000 lines changes 10,000
// keys (inserted in the first pass over the accounts, updated after).
// keys/s is the store's rate of distinct keys made durable. Run it with
// -benchtime 2000000x to cover every account twice.
func BenchmarkPostgresDistinctKeys(b *testing.B) {
	o := &Options{Logger: quietLogger(), Unbound: true, BatchSize: 10000, BatchInterval: time.Hour}
	s, err := openPGDir(b.TempDir(), o)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ns := s.Namespace("ledger")
	ctx := context.Background()
	const accounts = 1000000
	var key []byte
	n := 0
	fn := func(tx *Tx) error {
		key = fmt.Appendf(key[:0], "account-%07d", n%accounts)
		_, err := tx.Bucket("balances").AddInt64(key, 1)
		return err
	}
	for b.Loop() {
		n++
		if _, err := ns.Apply(ctx, del("f", 1, n), fn); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "keys/s")
	b.ReportMetric(float64(s.Stats().Commits), "commits")
	b.ReportMetric(float64(pgEngineOf(s).reads.Load()), "server-reads")
}

// BenchmarkPostgresColdRead measures a read inside Apply of a durable key
// that no batch in memory holds: a round trip to the server without the
// read cache (cache=0), a lookup in memory with it (the store preloaded
// its keys at open).
func BenchmarkPostgresColdRead(b *testing.B) {
	const keys = 20000
	dir := b.TempDir()
	o := &Options{Logger: quietLogger(), Unbound: true, BatchSize: 10000, BatchInterval: time.Hour}
	s, err := openPGDir(dir, o)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for i := range keys {
		if _, err := s.Apply(ctx, del("f", 1, i+1), func(tx *Tx) error {
			return tx.PutInt64(fmt.Appendf(nil, "k%06d", i), int64(i))
		}); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	for _, cache := range []string{"0", "256MB"} {
		b.Run("cache="+cache, func(b *testing.B) {
			s, err := Open(pgSpec(b, dir, "cache", cache), o)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			n := 0
			for b.Loop() {
				n++
				if _, err := s.Apply(ctx, tidemark.Delivery{Feed: "r", Seq: uint64(n)}, func(tx *Tx) error {
					_, err := tx.GetInt64(fmt.Appendf(nil, "k%06d", n%keys))
					return err
				}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(pgEngineOf(s).reads.Load())/float64(n), "server-reads/op")
		})
	}
}
