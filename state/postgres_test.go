package state

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-go/tidemark/internal/pgtest"
)

// pgEngineOf returns the engine of a PostgreSQL store.
func pgEngineOf(s Store) *pgEngine { return s.(*nsStore).c.rawEngine().(*pgEngine) }

// waitLeaseExpired waits until the lease of the store of dir has run out
// by the server's clock.
func waitLeaseExpired(t *testing.T, dir string) {
	t.Helper()
	conn := pgConn(t, dir)
	waitFor(t, "the lease to run out", func() bool {
		var over bool
		err := conn.QueryRow(context.Background(), "SELECT lease_until < now() FROM tidemark_owner WHERE store = $1", dir).Scan(&over)
		return err == nil && over
	})
}

// stopRenewals stops the renewer of e, as if its process were paused; the
// store's Close still works.
func stopRenewals(e *pgEngine) {
	close(e.stop)
	<-e.done
	e.stop, e.done = make(chan struct{}), make(chan struct{})
	go func() { <-e.stop; close(e.done) }()
}

func TestPostgresSpec(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(pgSpec(t, dir, "lease", "2s", "cache", "1MB"), &Options{Logger: quietLogger(), Unbound: true})
	if err != nil {
		t.Fatal(err)
	}
	e := pgEngineOf(s)
	if s.Backend() != Postgres || s.Dir() != "postgres:"+dir || e.lease != 2*time.Second || e.cache.max != 1<<19 {
		t.Fatalf("backend %s dir %s lease %v cache %d", s.Backend(), s.Dir(), e.lease, e.cache.max)
	}
	applyLine(t, s, del("f", 1, 1))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	dsn, _ := pgDSN(dir)
	for _, tc := range []struct {
		spec string
		want string
		is   error
	}{
		{dsn, "store parameter", ErrNotStore},
		{pgtest.WithParam(dsn, "store", strings.Repeat("s", pgMaxStoreName+1)), "at most 200 bytes", ErrNotStore},
		{pgSpec(t, dir, "lease", "soon"), "lease", nil},
		{pgSpec(t, dir, "cache", "lots"), "cache", nil},
		{"postgres://u:secret@127.0.0.1:1/db?store=x&connect_timeout=1", "127.0.0.1", nil},
	} {
		_, err := Open(tc.spec, &Options{Logger: quietLogger()})
		if err == nil || !strings.Contains(err.Error(), tc.want) || (tc.is != nil && !errors.Is(err, tc.is)) || strings.Contains(err.Error(), "secret") {
			t.Errorf("Open(%q): %v; want an error naming %q", tc.spec, err, tc.want)
		}
	}
	// OpenPostgres takes the name, or the DSN's, not two different ones.
	if _, err := OpenPostgres(pgSpec(t, dir), "other", nil); err == nil || !strings.Contains(err.Error(), "names store") {
		t.Fatalf("two store names: %v", err)
	}
}

// TestPostgresFenceRefusesAStaleOwnersCommit: an owner whose lease ran out
// (its renewals stopped, as in a paused process) is taken over; its next
// commit reaches the server and is refused by the fence in the same
// transaction: ErrFenced, and nothing of it is visible.
func TestPostgresFenceRefusesAStaleOwnersCommit(t *testing.T) {
	dir := t.TempDir()
	o := &Options{Logger: quietLogger(), Unbound: true, BatchSize: 1 << 20, BatchInterval: time.Hour}
	a, ea := pgStaleOwner(t, dir, o)

	// The new owner's lease is long: the check that it still holds it at
	// the end must not depend on the timing of its renewals.
	b, err := Open(pgSpec(t, dir, "lease", "1m"), o)
	if err != nil {
		t.Fatalf("take-over after the lease ran out: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	if eb := pgEngineOf(b); eb.token != ea.token+1 {
		t.Fatalf("the new owner's token %d, the old one's %d: want the next", eb.token, ea.token)
	}
	applyLine(t, b, del("f", 1, 2))
	if err := b.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}

	// The stale owner goes on: its commit is sent and refused.
	if _, err := a.Apply(context.Background(), del("f", 1, 2), func(tx *Tx) error {
		return tx.Put([]byte("stale"), []byte("x"))
	}); err != nil {
		t.Fatal(err)
	}
	err = a.Flush(context.Background())
	if !errors.Is(err, ErrFailed) || !errors.Is(err, ErrFenced) || !strings.Contains(err.Error(), "fenced") {
		t.Fatalf("the stale owner's Flush: %v; want ErrFailed wrapping ErrFenced", err)
	}
	if _, err := a.Apply(context.Background(), del("f", 1, 3), func(tx *Tx) error { return nil }); !errors.Is(err, ErrFenced) {
		t.Fatalf("Apply after the fence: %v", err)
	}
	var n int
	rs, id := pgRowsOf(t, dir)
	if err := pgConn(t, dir).QueryRow(context.Background(), "SELECT count(*) FROM "+rs.table+" WHERE "+rs.col+" = $1 AND k = $2", id, append(newBucketInfo("", "").prefix, "stale"...)).Scan(&n); err != nil || n != 0 {
		t.Fatalf("the refused batch's key is in the table (%d rows, %v)", n, err)
	}
	if err := a.Close(); !errors.Is(err, ErrFailed) {
		t.Fatalf("Close of the fenced store: %v", err)
	}
	// The new owner is unharmed: it commits on, and its lease was not
	// released by the old one's Close.
	applyLine(t, b, del("f", 1, 3))
	if err := b.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := getInt(t, b, "count"); got != 3 {
		t.Fatalf("count = %d, want 3", got)
	}
	o2 := *o
	o2.LockTimeout = 50 * time.Millisecond
	if _, err := Open(pgSpec(t, dir, "lease", "300ms"), &o2); !errors.Is(err, ErrLocked) {
		t.Fatalf("open while the new owner holds the lease: %v", err)
	}
}

// TestPostgresIdleOwnerLearnsItLostTheLease: an idle store whose lease was
// taken over finds out at its next renewal; its next commit fails without
// being sent.
func TestPostgresIdleOwnerLearnsItLostTheLease(t *testing.T) {
	dir := t.TempDir()
	a, ea := pgOwner(t, dir, &Options{Logger: quietLogger(), Unbound: true})
	// Take the lease away behind the owner's back (an operator, or a
	// clock that jumped): the token moves on.
	pgExec(t, dir, "UPDATE tidemark_owner SET token = token + 1, owner = 'someone else' WHERE store = $1", dir)
	waitFor(t, "the renewal to find the lease gone", func() bool {
		ea.mu.Lock()
		defer ea.mu.Unlock()
		return errors.Is(ea.dead, ErrFenced)
	})
	applyLine(t, a, del("f", 1, 2))
	if err := a.Flush(context.Background()); !errors.Is(err, ErrFenced) || !strings.Contains(err.Error(), "idle") {
		t.Fatalf("Flush after the lease was lost: %v", err)
	}
}

// TestPostgresLostCommitIsCaught: the commit count is checked with the
// token, so a commit the owner took for durable and the server lost (an
// asynchronous commit and a crash, a restored backup) stops the store
// rather than committing the next batch on top of the hole.
func TestPostgresLostCommitIsCaught(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, backends()[2], dir, &Options{Unbound: true, BatchSize: 1 << 20, BatchInterval: time.Hour})
	applyLine(t, s, del("f", 1, 1))
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	pgExec(t, dir, "UPDATE tidemark_owner SET commits = commits - 1 WHERE store = $1", dir)
	applyLine(t, s, del("f", 1, 2))
	if err := s.Flush(context.Background()); !errors.Is(err, ErrFenced) || !strings.Contains(err.Error(), "commit") {
		t.Fatalf("commit after a lost one: %v", err)
	}
}

// TestPostgresOpenWaitsForALeaseToRunOut: a store whose owner died without
// releasing it (no Close) opens once the lease ran out; an open that gives
// up first names the owner.
func TestPostgresOpenWaitsForALeaseToRunOut(t *testing.T) {
	dir := t.TempDir()
	spec := pgSpec(t, dir, "lease", "1s")
	a, err := Open(spec, &Options{Logger: quietLogger(), Unbound: true})
	if err != nil {
		t.Fatal(err)
	}
	applyLine(t, a, del("f", 1, 1))
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	ea := pgEngineOf(a)
	owner := ea.owner
	stopRenewals(ea) // the owner dies: no renewal, no release
	ea.pool.Close()
	t.Cleanup(func() { a.Close() })
	_, err = Open(spec, &Options{Logger: quietLogger(), LockTimeout: 10 * time.Millisecond})
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), owner) {
		t.Fatalf("open under a live lease: %v; want ErrLocked naming %s", err, owner)
	}
	start := time.Now()
	b, err := Open(spec, &Options{Logger: quietLogger(), Unbound: true, LockTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	t.Logf("took over %v after the first try", time.Since(start))
	if got := getInt(t, b, "count"); got != 1 {
		t.Fatalf("count = %d after the take-over", got)
	}
}

// TestPostgresStoresOfOneDatabaseAreSeparate: two stores of different
// names in one schema have their own keys, positions, outputs and leases.
func TestPostgresStoresOfOneDatabaseAreSeparate(t *testing.T) {
	dsn := pgtest.Shared(t).Schema(t)
	o := &Options{Logger: quietLogger(), Unbound: true}
	a, err := OpenPostgres(dsn, "orders/0", o)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := OpenPostgres(dsn, "orders/1", o)
	if err != nil {
		t.Fatalf("a second store while the first is open: %v", err)
	}
	defer b.Close()
	ctx := context.Background()
	for n := 1; n <= 3; n++ {
		applyLine(t, a, del("f", 1, n))
		if _, err := a.Apply(ctx, del("g", 1, n), func(tx *Tx) error {
			_, err := fmt.Fprintf(tx.Output("out.csv"), "a%d\n", n)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	applyLine(t, b, del("f", 1, 1))
	if !applyLine(t, b, del("f", 1, 2)) {
		t.Fatal("store b skipped a line only a applied")
	}
	for _, s := range []Store{a, b} {
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if ca, cb := getInt(t, a, "count"), getInt(t, b, "count"); ca != 3 || cb != 2 {
		t.Fatalf("counts %d and %d, want 3 and 2", ca, cb)
	}
	la, _ := a.Applied("f")
	lb, _ := b.Applied("f")
	if la.Position != 30 || lb.Position != 20 {
		t.Fatalf("positions %d and %d", la.Position, lb.Position)
	}
	if _, ok := b.Applied("g"); ok {
		t.Fatal("store b has a's position of feed g")
	}
	ob, err := b.Output("out.csv")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := ob.WriteTo(&buf); err != nil || buf.Len() != 0 {
		t.Fatalf("store b's output holds %q (%v)", buf.String(), err)
	}
	oa, _ := a.Output("out.csv")
	if _, err := oa.WriteTo(&buf); err != nil || buf.String() != "a1\na2\na3\n" {
		t.Fatalf("store a's output = %q (%v)", buf.String(), err)
	}
}

// TestPostgresConcurrentCreators: processes that open stores in a fresh
// schema at the same moment all create it, or find it, without error.
func TestPostgresConcurrentCreators(t *testing.T) {
	dsn := pgtest.Shared(t).Schema(t)
	errs := make(chan error, 6)
	for i := range cap(errs) {
		go func() {
			s, err := OpenPostgres(dsn, fmt.Sprint("s", i), &Options{Logger: quietLogger()})
			if err == nil {
				err = s.Close()
			}
			errs <- err
		}()
	}
	for range cap(errs) {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// TestPostgresOutputRowsAreChecked: an output whose rows were changed
// outside the store is reported as corrupt when read back.
func TestPostgresOutputRowsAreChecked(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, backends()[2], dir, &Options{Unbound: true, BatchSize: 1 << 20, BatchInterval: time.Hour})
	for n := 1; n <= 2; n++ {
		if _, err := s.Apply(context.Background(), del("f", 1, n), func(tx *Tx) error {
			_, err := fmt.Fprintf(tx.Output("out.csv"), "line %d\n", n)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if err := s.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	o, _ := s.Output("out.csv")
	rs, id := pgRowsOf(t, dir)
	pgExec(t, dir, "DELETE FROM "+rs.table+" WHERE "+rs.col+" = $1 AND k = $2", id, outputChunkKey("out.csv", 0))
	var buf bytes.Buffer
	if _, err := o.WriteTo(&buf); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "out.csv") {
		t.Fatalf("WriteTo with a chunk missing: %v", err)
	}
}

// TestPostgresLimitsHoldForTheLongestStoreName: a key at the limit, of
// bytes that do not compress, commits under the longest store name; the
// server itself refuses a key much past the limit (so the limit is about
// right, not arbitrary).
func TestPostgresLimitsHoldForTheLongestStoreName(t *testing.T) {
	dsn := pgtest.Shared(t).Schema(t)
	s, err := OpenPostgres(dsn, strings.Repeat("n", pgMaxStoreName), &Options{Logger: quietLogger(), Unbound: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	e := pgEngineOf(s)
	key := make([]byte, pgMaxKey)
	rand.Read(key)
	if err := e.commit([]write{{key: key, val: []byte("v")}}); err != nil {
		t.Fatalf("a random key of %d bytes: %v", len(key), err)
	}
	// Past the engine's limit, straight to the server.
	long := make([]byte, 2800)
	rand.Read(long)
	_, err = pgConnTo(t, dsn).Exec(context.Background(), "INSERT INTO tidemark_kv VALUES ($1, $2, '')", strings.Repeat("n", pgMaxStoreName), long)
	if err == nil || !strings.Contains(err.Error(), "index row") {
		t.Fatalf("the server took a key of %d bytes: %v", len(long), err)
	}
}

// TestPostgresReadCache: reads of durable keys inside Apply cost no round
// trip once the store preloaded them; with a cache too small for the
// store, reads go to the server and still see the right values.
func TestPostgresReadCache(t *testing.T) {
	dir := t.TempDir()
	const keys = 500
	s := mustOpen(t, backends()[2], dir, &Options{Unbound: true, BatchSize: 100, BatchInterval: time.Hour})
	model := map[string]int64{}
	apply := func(s Store, n int) {
		t.Helper()
		k, _ := rand.Int(rand.Reader, big.NewInt(keys))
		key := fmt.Sprint("acct-", k)
		if _, err := s.Apply(context.Background(), del("f", 1, n), func(tx *Tx) error {
			v, err := tx.Bucket("b").AddInt64([]byte(key), int64(n))
			if err == nil && v != model[key]+int64(n) {
				err = fmt.Errorf("line %d: %s = %d, want %d", n, key, v, model[key]+int64(n))
			}
			if n%7 == 0 {
				err = errors.Join(err, tx.Bucket("b").Delete([]byte(key)))
				delete(model, key)
				return err
			}
			model[key] += int64(n)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	for ; n < 2000; n++ {
		apply(s, n+1)
	}
	s.Close()
	for _, tc := range []struct {
		cache     string
		roundTrip bool
	}{{"256MB", false}, {"2KB", true}, {"0", true}} {
		s, err := Open(pgSpec(t, dir, "cache", tc.cache), &Options{Logger: quietLogger(), Unbound: true, BatchSize: 100, BatchInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		e := pgEngineOf(s)
		<-e.preloaded // the open does not wait for it
		r0 := e.reads.Load()
		for range 1000 {
			n++
			apply(s, n)
		}
		if reads := e.reads.Load() - r0; (reads > 0) != tc.roundTrip {
			t.Errorf("cache %s: %d reads from the server", tc.cache, reads)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPostgresKeyWrittenBehindTheStoreFailsTheCommit: a store whose read
// cache holds every key inserts the keys it knows are new with a plain
// INSERT. A row put in its table by hand meanwhile fails the commit that
// inserts that key (and the store: ErrFailed), with an error that says
// so; nothing of the batch is committed.
func TestPostgresKeyWrittenBehindTheStoreFailsTheCommit(t *testing.T) {
	dir := t.TempDir()
	o := &Options{Logger: quietLogger(), Unbound: true, BatchSize: 1 << 20, BatchInterval: time.Hour}
	s, err := Open(pgSpec(t, dir), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	put := func(n int, key string) {
		t.Helper()
		if _, err := s.Apply(context.Background(), del("f", 1, n), func(tx *Tx) error {
			_, err := tx.AddInt64([]byte(key), 1)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	// A key made, deleted and made again, each in a batch of its own, is
	// inserted again (the cache forgot it at the delete).
	put(1, "a")
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(context.Background(), del("f", 1, 2), func(tx *Tx) error { return tx.Delete([]byte("a")) }); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	put(3, "a")
	if err := s.Flush(context.Background()); err != nil {
		t.Fatalf("insert of a key deleted before: %v", err)
	}
	if got := getInt(t, s, "a"); got != 1 {
		t.Fatalf("a = %d, want 1", got)
	}

	key := append(newBucketInfo("", "").prefix, "b"...)
	rs, id := pgRowsOf(t, dir)
	pgExec(t, dir, "INSERT INTO "+rs.table+" ("+rs.col+", k, v) VALUES ($1, $2, $3)", id, key, []byte("by hand"))
	put(4, "b")
	put(5, "a")
	err = s.Flush(context.Background())
	if !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), "behind the store's back") {
		t.Fatalf("Flush of a batch inserting a key put in the table by hand: %v; want ErrFailed saying the table was written behind the store's back", err)
	}
	var v []byte
	if err := pgConn(t, dir).QueryRow(context.Background(), rs.get, id, key).Scan(&v); err != nil || string(v) != "by hand" {
		t.Fatalf("the row put by hand: %q, %v", v, err)
	}
	s.Close()
	s2, err := Open(pgSpec(t, dir), o)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if got := getInt(t, s2, "a"); got != 1 {
		t.Fatalf("after the failed commit, a = %d: want 1 (nothing of the batch committed)", got)
	}
}

// TestPgCachePutInPlace: a value of the cached length is written over the
// cached one, and what get handed out before keeps its bytes; another
// length or an absent key replaces the entry, and the size follows.
func TestPgCachePutInPlace(t *testing.T) {
	c := &pgCache{max: 1 << 20}
	c.put([]byte("k"), []byte("12345678"), true)
	size := c.bytes
	before, _, _ := c.get([]byte("k"))
	c.put([]byte("k"), []byte("87654321"), true)
	if v, ok, hit := c.get([]byte("k")); string(v) != "87654321" || !ok || !hit {
		t.Fatalf("after a put of the same length: %q %v %v", v, ok, hit)
	}
	if string(before) != "12345678" || c.bytes != size {
		t.Fatalf("a value handed out before changed to %q, or the size to %d (want %d)", before, c.bytes, size)
	}
	c.put([]byte("k"), []byte("123"), true)
	if v, _, _ := c.get([]byte("k")); string(v) != "123" || c.bytes != size-5 {
		t.Fatalf("after a shorter put: %q, size %d, want %d", v, c.bytes, size-5)
	}
	c.put([]byte("k"), nil, false)
	if v, ok, hit := c.get([]byte("k")); v != nil || ok || !hit || c.bytes != size-8 {
		t.Fatalf("after an absent put: %q %v %v, size %d, want %d", v, ok, hit, c.bytes, size-8)
	}
	c.put([]byte("k"), []byte("abcdefgh"), true)
	if v, ok, _ := c.get([]byte("k")); string(v) != "abcdefgh" || !ok || c.bytes != size || len(c.m) != 1 {
		t.Fatalf("after a put over an absent key: %q %v, size %d (want %d), %d entries", v, ok, c.bytes, size, len(c.m))
	}
}

// BenchmarkPgCacheCommit: a ledger's commit of 6,300 changed balances of
// 10,000 into a PostgreSQL store's read cache that holds them all.
func BenchmarkPgCacheCommit(b *testing.B) {
	c := &pgCache{max: 1 << 30, complete: true}
	var ws []write
	for i := range 10000 {
		k := fmt.Appendf(nil, "d\x06ledger\x08balancesacct-%d", i)
		c.put(k, []byte("123456789012"), true)
		if i%100 < 63 {
			ws = append(ws, write{key: k, val: []byte("210987654321")})
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		c.commit(ws)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(ws)), "ns/key")
}

// pgCache.split puts the writes in key order whether or not they come
// sorted, and divides them by what the cache knows.
func TestPgCacheSplitOrders(t *testing.T) {
	c := &pgCache{max: 1 << 20, complete: true}
	c.put([]byte("d-b"), []byte("1"), true)
	ws := []write{{key: []byte("d-c"), val: []byte("3")}, {key: []byte("d-a"), del: true}, {key: []byte("d-b"), val: []byte("2")}, {key: []byte("d-d"), val: []byte("4")}}
	for _, order := range [][]int{{0, 1, 2, 3}, {1, 2, 0, 3}} {
		in := make([]write, len(ws))
		for i, j := range order {
			in[i] = ws[j]
		}
		ins, ups, dels := c.split(in)
		keys := func(idx []int) (s []string) {
			for _, i := range idx {
				s = append(s, string(in[i].key))
			}
			return s
		}
		if got := fmt.Sprint(keys(ins), keys(ups), keys(dels)); got != "[d-c d-d] [d-b] [d-a]" {
			t.Errorf("writes in the order %v: split into %s, want [d-c d-d] [d-b] [d-a]", order, got)
		}
	}
}

// TestPostgresOutputChunksCompressWithLZ4: an output chunk is stored
// compressed with lz4 where the server has it (PostgreSQL 14 and later,
// built with lz4, as Debian's, the PGDG packages and the official images
// are): with the server's own default, pglz, 1,000,000 lines of ledger
// run took the server 0.9 to 1.1 s of CPU against 0.3 s at 20 accounts,
// and 3.5 to 3.7 s against 2.6 to 3.1 s at 10,000. A store
// whose DSN sets default_toast_compression keeps the DSN's method, and the
// statement that asks for lz4 is a no-op on a server without it.
func TestPostgresOutputChunksCompressWithLZ4(t *testing.T) {
	ctx := context.Background()
	var line strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&line, "%d,account-%d,%d\n", i, i%97, i*7)
	}
	chunk := func(t *testing.T, dir string, params ...string) string {
		t.Helper()
		s, err := Open(pgSpec(t, dir, params...), &Options{Logger: quietLogger(), Unbound: true})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if _, err := s.Apply(ctx, del("f", 1, 1), func(tx *Tx) error {
			_, err := io.WriteString(tx.Output("out.csv"), line.String())
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		o, _ := s.Output("out.csv")
		var got bytes.Buffer
		if _, err := o.WriteTo(&got); err != nil || got.String() != line.String() {
			t.Fatalf("output read back: %d bytes, %v; want the %d written", got.Len(), err, line.Len())
		}
		var method *string
		rs, id := pgRowsOf(t, dir)
		if err := pgConn(t, dir).QueryRow(ctx, "SELECT pg_column_compression(v) FROM "+rs.table+" WHERE "+rs.col+" = $1 AND k = $2",
			id, outputChunkKey("out.csv", 0)).Scan(&method); err != nil {
			t.Fatal(err)
		}
		if method == nil {
			t.Fatalf("the chunk of %d bytes is stored uncompressed", line.Len())
		}
		return *method
	}
	var lz4 bool
	if err := pgConn(t, t.TempDir()).QueryRow(ctx,
		"SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'").Scan(&lz4); err != nil {
		t.Fatal(err)
	}
	want := "pglz"
	if lz4 {
		want = "lz4"
	} else {
		t.Logf("this server has no lz4: the chunks keep its default, pglz")
	}
	if got := chunk(t, t.TempDir()); got != want {
		t.Errorf("a chunk is compressed with %s, want %s", got, want)
	}
	if got := chunk(t, t.TempDir(), "default_toast_compression", "pglz"); got != "pglz" {
		t.Errorf("with default_toast_compression=pglz in the DSN, a chunk is compressed with %s, want pglz", got)
	}
	// A method the server lacks changes nothing and fails nothing.
	conn := pgConn(t, t.TempDir())
	setting := func() string {
		t.Helper()
		var v string
		if err := conn.QueryRow(ctx, "SHOW default_toast_compression").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	before := setting()
	if _, err := conn.Exec(ctx, sqlToastCompression, "no-such-method"); err != nil {
		t.Fatalf("asking for a method the server lacks: %v", err)
	}
	if after := setting(); after != before {
		t.Fatalf("default_toast_compression %q after asking for a method the server lacks, want %q as before", after, before)
	}
}
