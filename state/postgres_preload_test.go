package state

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// pgPreloadStore makes a PostgreSQL store in dir holding keys keys of
// bucket "b", key i holding i, and closes it.
func pgPreloadStore(t *testing.T, dir string, keys int) {
	t.Helper()
	preloadStore(t, backends()[2], dir, keys)
}

// openHeld opens the PostgreSQL store of dir with the DSN parameters
// params, its fill reading pages of 7 rows and held at its first row until
// release is called (the store is closed at the end of t), and no value
// cache in the core: each read the batches do not answer asks the
// engine, whose read cache is the one tested. It fails t if the fill
// ended without a row.
func openHeld(t *testing.T, dir string, params ...string) (s Store, e *pgEngine, release func()) {
	t.Helper()
	held, released := make(chan struct{}), make(chan struct{})
	var once, releasing sync.Once
	o := &Options{Logger: quietLogger(), Unbound: true, BatchInterval: time.Hour, CacheSize: -1, hooks: &hooks{pgPreloadPage: 7, pgPreloadRow: func(n int) {
		once.Do(func() { close(held); <-released })
	}}}
	s, err := Open(pgSpec(t, dir, params...), o)
	if err != nil {
		t.Fatal(err)
	}
	release = func() { releasing.Do(func() { close(released) }) }
	t.Cleanup(func() { release(); _ = s.Close() })
	e = pgEngineOf(s)
	select {
	case <-held:
	case <-e.preloaded:
		t.Fatal("the preload ended without reading a row")
	}
	return s, e, release
}

// TestPostgresPreloadInTheBackground: the open of a PostgreSQL store does
// not wait for its read cache's preload, and a line applied while the
// preload runs reads from the server; once the preload is done (every
// key fit), a read costs no round trip.
func TestPostgresPreloadInTheBackground(t *testing.T) {
	dir := t.TempDir()
	const keys = 300
	pgPreloadStore(t, dir, keys)
	s, e, release := openHeld(t, dir) // the open returned with the fill at its first row
	apply := func(n int) {
		t.Helper()
		if _, err := s.Apply(context.Background(), del("f", 1, n), func(tx *Tx) error {
			v, err := tx.Bucket("b").GetInt64([]byte("key-0123"))
			if err == nil && v != 123 {
				err = fmt.Errorf("key-0123 = %d, want 123", v)
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	r0 := e.reads.Load()
	apply(2)
	if e.reads.Load() == r0 {
		t.Fatal("a read while the preload runs did not go to the server")
	}
	release()
	<-e.preloaded
	if !e.cache.complete {
		t.Fatal("the cache is not complete after a preload that fit")
	}
	r0 = e.reads.Load()
	apply(3)
	if _, err := s.Apply(context.Background(), del("f", 1, 4), func(tx *Tx) error {
		for i := range keys {
			v, err := tx.Bucket("b").GetInt64(fmt.Appendf(nil, "key-%04d", i))
			if err != nil || v != int64(i) {
				return fmt.Errorf("key-%04d = %d, %v, want %d", i, v, err, i)
			}
		}
		_, ok, err := tx.Bucket("b").Get([]byte("no-such-key"))
		if ok {
			return fmt.Errorf("no-such-key found")
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if n := e.reads.Load() - r0; n != 0 {
		t.Fatalf("%d reads from the server after a complete preload", n)
	}
}

// TestPostgresPreloadKeepsNewerValues: commits made while the preload
// streams its rows, which are older, win; with a cache that drops entries
// meanwhile (its budget is smaller than the store), a dropped key is not
// put back from the preload's older row, and the cache does not call
// itself complete (a key it does not hold would be inserted, and the
// commit fail). Every value read afterwards is the newest, and commits go
// on.
func TestPostgresPreloadKeepsNewerValues(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cache    string
		complete bool
	}{{"fits", "256MB", true}, {"drops", "20KB", false}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			const keys = 300
			pgPreloadStore(t, dir, keys)
			s, e, release := openHeld(t, dir, "cache", tc.cache)
			model := make([]int64, keys)
			for i := range model {
				model[i] = int64(i)
			}
			line := 1
			addAll := func(delta int64) {
				t.Helper()
				line++
				if _, err := s.Apply(context.Background(), del("f", 1, line), func(tx *Tx) error {
					for i := range keys {
						v, err := tx.Bucket("b").AddInt64(fmt.Appendf(nil, "key-%04d", i), delta)
						if err != nil {
							return err
						}
						if v != model[i]+delta {
							return fmt.Errorf("key-%04d = %d, want %d", i, v, model[i]+delta)
						}
					}
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				for i := range model {
					model[i] += delta
				}
				if err := s.Flush(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			addAll(1000) // committed while the preload holds older rows
			// A commit of another key, so that the last one committed
			// (which a read asks before the engine) holds none of them.
			line++
			if _, err := s.Apply(context.Background(), del("f", 1, line), func(tx *Tx) error {
				return tx.Bucket("other").PutInt64([]byte("k"), 1)
			}); err != nil {
				t.Fatal(err)
			}
			if err := s.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			release()
			<-e.preloaded
			if e.cache.complete != tc.complete {
				t.Fatalf("cache complete %v after the preload, want %v", e.cache.complete, tc.complete)
			}
			addAll(1) // reads every key: the newest values, from the cache or the server
			line++
			if _, err := s.Apply(context.Background(), del("f", 1, line), func(tx *Tx) error {
				return tx.Bucket("b").PutInt64([]byte("new-key"), 7)
			}); err != nil {
				t.Fatal(err)
			}
			if err := s.Flush(context.Background()); err != nil {
				t.Fatalf("a commit after the preload: %v", err)
			}
		})
	}
}

// TestPgCacheMemory: the read cache's live heap stays within what it
// counts, which stays within its limit (half the DSN's cache=, see
// openPGEngine), whether its entries come from the preload, which stops
// when the next does not fit, or from commits and reads, after which it
// drops entries.
func TestPgCacheMemory(t *testing.T) {
	live := liveHeap
	val := make([]byte, 12) // an int64 and its checksum
	for _, way := range []string{"preload", "presized preload", "commits"} {
		t.Run(way, func(t *testing.T) {
			const limit = 8 << 20
			h0 := live()
			c := &pgCache{max: limit}
			if way == "presized preload" {
				// As the preload of a store the server says holds far
				// more keys than the budget has room for.
				c.presize(pgPreloadHint(10_000_000, limit))
			}
			key := []byte("\x01ledger\x00balances\x00account-00000000")
			var most int64
			for i := range 300_000 {
				key = strconv.AppendInt(key[:len(key)-8], 10_000_000+int64(i), 10)[:len(key)]
				if way != "commits" {
					if !c.load(key, val) {
						break
					}
				} else {
					c.commit([]write{{key: key, val: val}})
				}
				if i%20_000 == 19_999 {
					most = max(most, live()-h0)
				}
			}
			most = max(most, live()-h0)
			if c.bytes > c.max {
				t.Errorf("counted %d bytes, over the limit %d", c.bytes, c.max)
			}
			t.Logf("%s: %d entries, %d bytes counted; live heap at most %d (%.2f of the limit)", way, len(c.m), c.bytes, most, float64(most)/float64(c.max))
			if most > int64(c.max) {
				t.Errorf("the cache's live heap reached %d bytes, over its limit of %d", most, c.max)
			}
			runtime.KeepAlive(c)
		})
	}
}

// TestPostgresPagesWalkTheIndex holds the plans of the store's pages of
// keys in order, the preload's and a cursor's, on a table the server has
// no statistics of yet (a new store's, before autovacuum analyzed it),
// through the store's own connections: the server guesses a few rows, and
// with bitmap scans it would read every key of the store after the page's
// first and sort them for each page (54 ms a page of 10,000 at 100,000
// keys, where the page itself takes 3 ms). Each page must walk the primary
// key's index in order and stop at its limit.
func TestPostgresPagesWalkTheIndex(t *testing.T) {
	dir := t.TempDir()
	pgPreloadStore(t, dir, 30_000)
	s, err := Open(pgSpec(t, dir), &Options{Logger: quietLogger(), Unbound: true, BatchInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	e := pgEngineOf(s)
	ctx := context.Background()
	// A page of the most keys of a cursor without an upper bound, past
	// the first key of table "b". (With both bounds the server guesses
	// one row, and walks the index.)
	pfx := dataPrefix("", "b")
	cursor := &pager{lo: pfx, want: maxPage, started: true, last: pfx}
	cursorSQL, cursorArgs := e.pageQuery(cursor)
	for _, q := range []struct {
		what string
		sql  string
		args []any
	}{
		{"a page of a cursor", cursorSQL, cursorArgs},
		{"a page of the preload", e.rows.preloadPage, []any{e.id, []byte{}, []byte{tagOutputData}, []byte{tagOutputData + 1}, pgPreloadPage}},
	} {
		rows, err := e.pool.Query(ctx, "EXPLAIN "+q.sql, q.args...)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, line)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		text := strings.Join(plan, "\n")
		if !strings.Contains(text, "Index Scan using "+e.rows.table+"_pkey") || strings.Contains(text, "Sort") || strings.Contains(text, "Bitmap") {
			t.Fatalf("%s, on a table without statistics, is planned as\n%s\nwant an index scan of the primary key, without a sort", q.what, text)
		}
	}
}

// TestPostgresPreloadSizesItsMap: the preload makes the read cache's map
// for the keys the server's statistics say the store holds, so that the
// rows it reads go in without the map growing as they come (ledger run
// over a store of 1,000,000 keys spent 0.6 s of CPU, a fifth of its own,
// growing it).
func TestPostgresPreloadSizesItsMap(t *testing.T) {
	dir := t.TempDir()
	const keys = 20_000
	pgPreloadStore(t, dir, keys)
	// The statistics autovacuum gathers once a table has grown.
	if _, err := pgConn(t, dir).Exec(t.Context(), "ANALYZE tidemark_data"); err != nil {
		t.Fatal(err)
	}
	// Pages of 100 rows: the map is sized once ten of them came in.
	s, err := Open(pgSpec(t, dir), &Options{Logger: quietLogger(), Unbound: true, BatchInterval: time.Hour, CacheSize: -1, hooks: &hooks{pgPreloadPage: 100}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	e := pgEngineOf(s)
	<-e.preloaded
	e.cache.mu.Lock()
	sized, n, complete := e.cache.sized, len(e.cache.m), e.cache.complete
	e.cache.mu.Unlock()
	if !complete || n < keys {
		t.Fatalf("the preload read %d entries (complete %v), want every one of %d keys", n, complete, keys)
	}
	if sized < keys/2 || sized > 2*keys {
		t.Errorf("the read cache's map was made for %d entries in the preload of %d keys; want it sized for them (within a factor of two) once ten pages came in", sized, keys)
	}
}

// The preload's map is made for the rows the server estimates, never for
// more entries than the read cache's budget has room for; presizing keeps
// what the cache holds (a commit's keys, put since the preload began).
func TestPgCachePresize(t *testing.T) {
	// The hint is preloadHint's rule (TestPreloadHint) at the read
	// cache's cost of an entry.
	if got, want := pgPreloadHint(10_000_000, 16<<20), int64(16<<20)/pgPreloadEntryMin; got != want {
		t.Errorf("a store of 10,000,000 rows, a budget of 16 MiB: hint %d, want %d", got, want)
	}
	if got := pgPreloadHint(1000, 1<<30); got != 1000 {
		t.Errorf("a store of 1,000 rows, a budget of 1 GiB: hint %d, want 1000", got)
	}
	c := &pgCache{max: 1 << 20}
	c.startLoading()
	c.commit([]write{{key: []byte("a"), val: []byte("1")}, {key: []byte("b"), del: true}})
	bytes := c.bytes
	c.presize(5000)
	if c.sized != 5000 {
		t.Errorf("made for %d entries, want 5000", c.sized)
	}
	if v, ok, hit := c.get([]byte("a")); !hit || !ok || string(v) != "1" {
		t.Errorf("a: %q %v %v after presize", v, ok, hit)
	}
	if _, ok, hit := c.get([]byte("b")); !hit || ok {
		t.Errorf("b: %v %v after presize, want a known absence", ok, hit)
	}
	if c.bytes != bytes || len(c.m) != 2 {
		t.Errorf("%d bytes, %d entries after presize; want %d, 2", c.bytes, len(c.m), bytes)
	}
	c.presize(1000) // fewer than made for: the map stays
	if c.sized != 5000 {
		t.Errorf("a smaller hint made the map again for %d entries", c.sized)
	}
}

// TestPostgresPreloadStoppedEarlyMakesNoMap: a store closed while its
// preload reads its first pages (a restart that applies a few lines) does
// not make the read cache's map for the whole store, which its close
// would wait for.
func TestPostgresPreloadStoppedEarlyMakesNoMap(t *testing.T) {
	dir := t.TempDir()
	pgPreloadStore(t, dir, 300)
	if _, err := pgConn(t, dir).Exec(t.Context(), "ANALYZE tidemark_data"); err != nil {
		t.Fatal(err)
	}
	_, e, release := openHeld(t, dir) // held at the first row of its first page
	e.stopPreload()                   // as the store's close does first
	release()
	<-e.preloaded
	e.cache.mu.Lock()
	sized := e.cache.sized
	e.cache.mu.Unlock()
	if sized != 0 {
		t.Errorf("a preload stopped at its first page made the map for %d entries; want none made ahead", sized)
	}
}
