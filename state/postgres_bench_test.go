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
			pool := bareLedgerPool(b, dir)
			l := newBareLedger()
			ctx := context.Background()
			cpu0 := cpuTime()
			for b.Loop() {
				l.line()
				if l.n%size == 0 {
					if err := l.commit(ctx, pool, dir); err != nil {
						b.Fatal(err)
					}
				}
			}
			if l.n%size != 0 {
				if err := l.commit(ctx, pool, dir); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(l.n), "cpu-ns/line")
			b.ReportMetric(float64(l.n)/b.Elapsed().Seconds(), "lines/s")
		})
	}
}

// bareLedgerAccounts is the number of balances of benchLedger's lines.
const bareLedgerAccounts = 100

// bareLedger is BenchmarkPostgresBareLedger's program: benchLedger's
// lines folded in memory, and the keys of a batch written by hand.
type bareLedger struct {
	names    [][]byte       // the accounts the lines name (benchLedger's keys)
	slot     map[string]int // an account's index in balances
	keys     [][]byte       // the store's keys: balances, applied, total, the feed's record
	vals     [][]byte       // their values, rewritten by each commit
	balances []int64
	changed  []bool // the balances the batch changed
	count    int64
	total    int64
	n        int      // the lines folded
	ks, vs   [][]byte // the keys and values of the commit
}

func newBareLedger() *bareLedger {
	l := &bareLedger{slot: make(map[string]int, bareLedgerAccounts)}
	bal := newBucketInfo("ledger", "balances").prefix
	root := newBucketInfo("ledger", "").prefix
	for i := range bareLedgerAccounts {
		name := fmt.Appendf(nil, "account-holder-%05d", i)
		l.names = append(l.names, name)
		l.slot[string(name)] = i
		l.keys = append(l.keys, append(append([]byte{}, bal...), name...))
	}
	l.keys = append(l.keys, append(append([]byte{}, root...), "applied"...), append(append([]byte{}, root...), "total"...), appliedKey("ledger", "f", ""))
	for range l.keys {
		l.vals = append(l.vals, make([]byte, 8+sumLen))
	}
	l.vals[len(l.vals)-1] = make([]byte, lineageLen+sumLen)
	l.balances = make([]int64, bareLedgerAccounts)
	l.changed = make([]bool, bareLedgerAccounts)
	return l
}

// line folds the next line: benchLedger's function, on plain memory.
func (l *bareLedger) line() {
	l.n++
	i := l.slot[string(l.names[(l.n*7919)%bareLedgerAccounts])]
	l.balances[i] += int64(l.n)
	l.changed[i] = true
	l.count++
	l.total += int64(l.n)
}

// commit writes the final values of the keys the lines since the last
// commit changed, and the feed's position, in one transaction of one
// round trip, and waits for it.
func (l *bareLedger) commit(ctx context.Context, pool *pgxpool.Pool, store string) error {
	l.ks, l.vs = l.ks[:0], l.vs[:0]
	for i := range bareLedgerAccounts {
		if l.changed[i] {
			binary.BigEndian.PutUint64(l.vals[i], uint64(l.balances[i]))
			l.ks, l.vs = append(l.ks, l.keys[i]), append(l.vs, l.vals[i])
			l.changed[i] = false
		}
	}
	binary.BigEndian.PutUint64(l.vals[bareLedgerAccounts], uint64(l.count))
	binary.BigEndian.PutUint64(l.vals[bareLedgerAccounts+1], uint64(l.total))
	binary.BigEndian.PutUint64(l.vals[bareLedgerAccounts+2][9:], uint64(l.n*lineLen)) // the lineage's position (see del)
	l.ks, l.vs = append(l.ks, l.keys[bareLedgerAccounts:]...), append(l.vs, l.vals[bareLedgerAccounts:]...)
	batch := &pgx.Batch{}
	batch.Queue("BEGIN")
	batch.Queue(pgRowsByName.upsert, store, l.ks, l.vs)
	batch.Queue("COMMIT")
	return pool.SendBatch(ctx, batch).Close()
}

// bareLedgerPool makes the store tables in the schema of dir and connects
// to it.
func bareLedgerPool(t testing.TB, dir string) *pgxpool.Pool {
	t.Helper()
	pgSchemaFor(t, dir)
	dsn, err := pgDSN(dir)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
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

// The bare loop that BenchmarkPostgresBareLedger holds the store against
// writes what the store writes for benchLedger's lines: the same keys
// (the store has its format record besides), the same balances and
// counters, the feed's position.
func TestPostgresBareLedgerWritesWhatTheStoreWrites(t *testing.T) {
	const lines, size = 2500, 1000
	ctx := context.Background()
	sdir := t.TempDir()
	s, err := openPGDir(sdir, &Options{Logger: quietLogger(), Unbound: true, BatchSize: size, BatchInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ns := s.Namespace("ledger")
	var n int
	fn := ledgerLine(newBareLedger().names, &n)
	for n = 1; n <= lines; n++ {
		if _, err := ns.Apply(ctx, del("f", 1, n), fn); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	bdir := t.TempDir()
	pool := bareLedgerPool(t, bdir)
	l := newBareLedger()
	for l.n < lines {
		l.line()
		if l.n%size == 0 || l.n == lines {
			if err := l.commit(ctx, pool, bdir); err != nil {
				t.Fatal(err)
			}
		}
	}

	rows := func(dir string) map[string][]byte {
		m := map[string][]byte{}
		r, id := pgRowsOf(t, dir)
		rs, err := pgConn(t, dir).Query(ctx, "SELECT k, v FROM "+r.table+" WHERE "+r.col+" = $1", id)
		if err != nil {
			t.Fatal(err)
		}
		defer rs.Close()
		for rs.Next() {
			var k, v []byte
			if err := rs.Scan(&k, &v); err != nil {
				t.Fatal(err)
			}
			m[string(k)] = v
		}
		if err := rs.Err(); err != nil {
			t.Fatal(err)
		}
		return m
	}
	stored, bare := rows(sdir), rows(bdir)
	if len(bare) != bareLedgerAccounts+3 {
		t.Fatalf("the bare loop wrote %d keys, want %d", len(bare), bareLedgerAccounts+3)
	}
	record := string(appliedKey("ledger", "f", ""))
	for k, bv := range bare {
		sv, ok := stored[k]
		switch {
		case !ok:
			t.Errorf("the bare loop wrote key %q, the store did not", k)
		case len(sv) != len(bv):
			t.Errorf("key %q: the store's value is %d bytes, the bare loop's %d", k, len(sv), len(bv))
		case k == record:
			lin, err := decodeLineage(sv[:len(sv)-sumLen])
			if err != nil {
				t.Fatal(err)
			}
			if pos := int64(binary.BigEndian.Uint64(bv[9:])); lin.Position != pos || pos != lines*lineLen {
				t.Errorf("the feed's position: the store's %d, the bare loop's %d, want %d", lin.Position, pos, lines*lineLen)
			}
		default:
			sn, _ := decodeInt64(sv[:8])
			bn, _ := decodeInt64(bv[:8])
			if sn != bn {
				t.Errorf("key %q: the store holds %d, the bare loop %d", k, sn, bn)
			}
		}
	}
	for k := range stored {
		if _, ok := bare[k]; !ok && k != string([]byte{tagVersion}) {
			t.Errorf("the store wrote key %q, the bare loop did not", k)
		}
	}
}
