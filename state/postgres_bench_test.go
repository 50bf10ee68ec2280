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
// PostgreSQL: what a program written by hand on pgx does with the same
// lines and the same durability. Each line adds to one of the same 100
// balances (found by its name in a map), to a count and to a total, in
// memory. Every batch of lines (1,000 or 10,000, as the store's batches)
// then writes the final values of the keys it changed and the feed's last
// position: the keys the store's batch writes, with values of the same
// lengths (a balance's 8 bytes and the 4 of the store's checksum, left
// zero here), by one upsert in one transaction (BEGIN, the upsert and
// COMMIT pipelined: one round trip), and waits for it, with
// synchronous_commit on (the server's setting, and the store's). It does
// not fence or renew a lease, stage lines through a Tx, log undo records,
// de-duplicate or checksum, and it folds no line while a batch commits
// (the store stages the next batch meanwhile). lines/s is the lines over
// the wall time, the last commit included.
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
			const accounts = 100
			bal := newBucketInfo("ledger", "balances").prefix
			root := newBucketInfo("ledger", "").prefix
			// names are the accounts the lines name (benchLedger's keys),
			// slot their index in the balances.
			names := make([][]byte, accounts)
			slot := make(map[string]int, accounts)
			var keys [][]byte
			for i := range accounts {
				names[i] = fmt.Appendf(nil, "account-holder-%05d", i)
				slot[string(names[i])] = i
				keys = append(keys, append(append([]byte{}, bal...), names[i]...))
			}
			keys = append(keys, append(append([]byte{}, root...), "applied"...), append(append([]byte{}, root...), "total"...), appliedKey("ledger", "f", ""))
			vals := make([][]byte, len(keys))
			for i := range vals {
				vals[i] = make([]byte, 8+sumLen)
			}
			vals[len(vals)-1] = make([]byte, lineageLen+sumLen)
			balances := make([]int64, accounts)
			changed := make([]bool, accounts)
			var count, total int64
			ctx := context.Background()
			n := 0
			var ks, vs [][]byte
			commit := func() {
				ks, vs = ks[:0], vs[:0]
				for i := range accounts {
					if changed[i] {
						binary.BigEndian.PutUint64(vals[i], uint64(balances[i]))
						ks, vs = append(ks, keys[i]), append(vs, vals[i])
						changed[i] = false
					}
				}
				binary.BigEndian.PutUint64(vals[accounts], uint64(count))
				binary.BigEndian.PutUint64(vals[accounts+1], uint64(total))
				binary.BigEndian.PutUint64(vals[accounts+2][9:], uint64(n))
				ks, vs = append(ks, keys[accounts:]...), append(vs, vals[accounts:]...)
				batch := &pgx.Batch{}
				batch.Queue("BEGIN")
				batch.Queue(sqlUpsert, dir, ks, vs)
				batch.Queue("COMMIT")
				if err := pool.SendBatch(ctx, batch).Close(); err != nil {
					b.Fatal(err)
				}
			}
			cpu0 := cpuTime()
			for b.Loop() {
				n++
				i := slot[string(names[(n*7919)%accounts])]
				balances[i] += int64(n)
				changed[i] = true
				count++
				total += int64(n)
				if n%size == 0 {
					commit()
				}
			}
			if n%size != 0 {
				commit()
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(n), "cpu-ns/line")
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
