package state

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// The store's format record against what it holds (see formats in
// upgrade.go): a version that knows only format 2 refuses an output
// record with a tail (24 bytes) as corrupt, and tells its user to restore
// or remove the folder, which would apply every line again. Every store
// that holds such a record must say format 3, so that such a version fails
// on the format record first.

// acceptedByFormat2 is the format check of a version that knows formats 1
// and 2 (core.load before format 3): the format records it reads on from.
func acceptedByFormat2(v []byte) bool {
	s := string(v)
	return s == "tidemark-state 2" || s == "tidemark-state 1" || strings.HasPrefix(s, "tidemark-state 1 to 2, through ")
}

// formatRecord returns the format record of the open store s.
func formatRecord(t *testing.T, s Store) string {
	t.Helper()
	v, ok, err := s.(*nsStore).c.rawEngine().get([]byte{tagVersion})
	if err != nil || !ok {
		t.Fatalf("format record: %q %v %v", v, ok, err)
	}
	return string(v)
}

// outputRecords returns the lengths of the output records of the open
// store s (without their checksums), by output name.
func outputRecords(t *testing.T, s Store) map[string]int {
	t.Helper()
	lens := map[string]int{}
	if err := s.(*nsStore).c.eng.scan([]byte{tagOutput}, func(k, v []byte) error {
		lens[string(k[1:])] = len(v)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return lens
}

// checkFormatTrue fails t when s holds an output record with a tail and a
// format record that a version knowing only format 2 reads on from.
func checkFormatTrue(t *testing.T, s Store) {
	t.Helper()
	v := formatRecord(t, s)
	for name, n := range outputRecords(t, s) {
		if n == outputRecTailLen && (acceptedByFormat2([]byte(v)) || (v != formatVersion && v != formatV4)) {
			t.Fatalf("output %q has a record with a tail (%d bytes) in a store of format record %q: a version that knows only format 2 reads on and refuses the record as corrupt", name, n, v)
		}
	}
}

// writeOutputLine applies line n, which counts itself and writes one
// output line to out.csv, and flushes.
func writeOutputLine(t *testing.T, s Store, n int) { writeLine(t, s, n, true) }

// writeLine applies line n, which counts itself and, with output, writes
// one output line to out.csv, and flushes.
func writeLine(t *testing.T, s Store, n int, output bool) {
	t.Helper()
	if _, err := s.Apply(t.Context(), del("f", 1, n), func(tx *Tx) error {
		if _, err := tx.AddInt64([]byte("count"), 1); err != nil || !output {
			return err
		}
		_, err := tx.Output("out.csv").Write([]byte("line\n"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// makeFormat2 makes the open store s one that a version of format 2 from
// before 3b47141 wrote: format record 2, each output record of 12 bytes
// (the length and its checksum, no tail), or left with its tail (tails:
// as a version between 3b47141 and format 3 wrote it).
func makeFormat2(t *testing.T, s Store, tails bool) {
	t.Helper()
	c := s.(*nsStore).c
	ws := []write{{key: []byte{tagVersion}, val: []byte(formatV2)}}
	if err := c.eng.scan([]byte{tagOutput}, func(k, v []byte) error {
		if len(v) == outputRecTailLen && !tails {
			ws = append(ws, write{key: bytes.Clone(k), val: bytes.Clone(v[:outputRecSumLen])})
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.eng.commit(ws); err != nil {
		t.Fatal(err)
	}
}

// openFormat2 makes in dir a store of format 2 with one output line (see
// makeFormat2), closes it and opens it again.
func openFormat2(t *testing.T, be backend, dir string, tails bool) Store {
	t.Helper()
	s := mustOpen(t, be, dir, format3Opts())
	writeOutputLine(t, s, 1)
	makeFormat2(t, s, tails)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return mustOpen(t, be, dir, testOpts())
}

// TestNewStoreIsOfFormat3: a new store says format 3 (4 for bbolt) from
// its first commit, and its output records have tails; a version that
// knows only format 2 refuses its format record.
func TestNewStoreIsOfFormat3(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		dir := t.TempDir()
		s := mustOpen(t, be, dir, testOpts())
		want := newFormatRecord(be)
		if v := formatRecord(t, s); v != want || acceptedByFormat2([]byte(v)) {
			t.Fatalf("new store of format record %q, want %q", v, want)
		}
		writeOutputLine(t, s, 1)
		if n := outputRecords(t, s)["out.csv"]; !be.remote && n != outputRecTailLen {
			t.Fatalf("output record of %d bytes, want %d (with its tail)", n, outputRecTailLen)
		}
		checkFormatTrue(t, s)
	})
}

// TestFormat2StoreBecomesFormat3 opens a store of format 2 whose output
// records have no tail (written before 3b47141): it opens as it is, and
// its format record stays 2 (a version of format 2 still opens it) until
// a commit writes an output record with a tail, which records format 3 in
// the same transaction. The output and the state read back whole after
// each step.
func TestFormat2StoreBecomesFormat3(t *testing.T) {
	forEachLocalBackend(t, func(t *testing.T, be backend) {
		dir := t.TempDir()
		s := openFormat2(t, be, dir, false)
		if n := outputRecords(t, s)["out.csv"]; n != outputRecSumLen {
			t.Fatalf("format 2 store: output record of %d bytes, want %d", n, outputRecSumLen)
		}
		if v := formatRecord(t, s); v != formatV2 {
			t.Fatalf("the open changed the format record to %q: a version of format 2 could not open the store any more", v)
		}
		// A line without output: no record with a tail, format 2 kept.
		writeLine(t, s, 2, false)
		if v := formatRecord(t, s); v != formatV2 {
			t.Fatalf("a commit without output records made the format record %q", v)
		}
		// The first record with a tail: format 3 in the same commit.
		s.(*nsStore).c.stopPreload() // it reads through the engine swapped below
		sums := s.(*nsStore).c.eng.(*sumEngine)
		rec := &recorder{engine: sums.engine}
		sums.engine = rec
		writeOutputLine(t, s, 3)
		sums.engine = rec.engine
		var with int
		for _, ws := range rec.commits {
			tail, version := false, ""
			for _, w := range ws {
				if isVersionKey(w.key) {
					version = string(w.val)
				}
				if w.key[0] == tagOutput && len(w.val) == outputRecTailLen+sumLen {
					tail = true
				}
			}
			if tail {
				with++
				if version != formatVersion {
					t.Fatalf("the commit of the first output record with a tail writes format record %q, want %q in the same transaction", version, formatVersion)
				}
			}
		}
		if with != 1 {
			t.Fatalf("%d commits with an output record with a tail, want 1", with)
		}
		checkFormatTrue(t, s)
		if v := formatRecord(t, s); v != formatVersion {
			t.Fatalf("format record %q after an output record with a tail, want %q", v, formatVersion)
		}
		// Later commits write the record no more.
		rec = &recorder{engine: sums.engine}
		sums.engine = rec
		writeOutputLine(t, s, 4)
		sums.engine = rec.engine
		for _, ws := range rec.commits {
			for _, w := range ws {
				if isVersionKey(w.key) {
					t.Fatal("a commit after format 3 was recorded writes the format record again")
				}
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = mustOpen(t, be, dir, testOpts())
		checkFormatTrue(t, s)
		if got := getInt(t, s, "count"); got != 4 {
			t.Fatalf("count %d, want 4", got)
		}
		if got := string(readOutput(t, be, dir, "out.csv")); got != strings.Repeat("line\n", 3) {
			t.Fatalf("output %q, want 3 lines", got)
		}
	})
}

// TestFormat2StoreHoldingTailsBecomesFormat3: a store of format 2 that
// holds output records with tails already (written by a version between
// 3b47141 and format 3) records format 3 with its next commit, whatever
// that commit writes.
func TestFormat2StoreHoldingTailsBecomesFormat3(t *testing.T) {
	forEachLocalBackend(t, func(t *testing.T, be backend) {
		s := openFormat2(t, be, t.TempDir(), true)
		if v := formatRecord(t, s); v != formatV2 {
			t.Fatalf("format record %q at open, want %q left", v, formatV2)
		}
		writeLine(t, s, 2, false)
		checkFormatTrue(t, s)
		if v := formatRecord(t, s); v != formatVersion {
			t.Fatalf("format record %q after the first commit, want %q", v, formatVersion)
		}
	})
}

// commitFailEngine fails every commit once fail is set.
type commitFailEngine struct {
	engine
	mu   sync.Mutex
	fail bool
}

var errCommitFails = errors.New("injected: the commit fails")

func (f *commitFailEngine) commit(ws []write) error {
	f.mu.Lock()
	fail := f.fail
	f.mu.Unlock()
	if fail {
		return errCommitFails
	}
	return f.engine.commit(ws)
}

// TestFormat3RecordedOnlyWithItsRecord: the commit that carries format 3
// with the first output record with a tail fails (a crash before it, or
// an I/O error in it): neither is written, the store opens again as of
// format 2 with the record it had, and the commit that next writes an
// output record with a tail carries format 3 again.
func TestFormat3RecordedOnlyWithItsRecord(t *testing.T) {
	forEachLocalBackend(t, func(t *testing.T, be backend) {
		dir := t.TempDir()
		s := openFormat2(t, be, dir, false)
		s.(*nsStore).c.stopPreload() // it reads through the engine swapped below
		sums := s.(*nsStore).c.eng.(*sumEngine)
		fe := &commitFailEngine{engine: sums.engine, fail: true}
		sums.engine = fe
		if _, err := s.Apply(t.Context(), del("f", 1, 2), func(tx *Tx) error {
			_, err := tx.Output("out.csv").Write([]byte("line\n"))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if err := s.Flush(t.Context()); !errors.Is(err, errCommitFails) {
			t.Fatalf("flush: %v, want the injected failure", err)
		}
		if sums.format3.Load() {
			t.Fatal("format 3 taken as recorded after its commit failed")
		}
		fe.mu.Lock()
		fe.fail = false
		fe.mu.Unlock()
		if v := formatRecord(t, s); v != formatV2 {
			t.Fatalf("format record %q after the failed commit, want %q", v, formatV2)
		}
		if n := outputRecords(t, s)["out.csv"]; n != outputRecSumLen {
			t.Fatalf("output record of %d bytes after the failed commit, want %d", n, outputRecSumLen)
		}
		_ = s.Close()

		s = mustOpen(t, be, dir, testOpts())
		if v := formatRecord(t, s); v != formatV2 {
			t.Fatalf("format record %q after a reopen, want %q", v, formatV2)
		}
		writeOutputLine(t, s, 2)
		checkFormatTrue(t, s)
		if got := string(readOutput(t, be, dir, "out.csv")); got != "line\nline\n" {
			t.Fatalf("output %q, want 2 lines", got)
		}
	})
}

// TestFormat1StoreGetsNoTails: a store of format 1 cannot say format 3
// (that would promise checksums): its output records are written without
// tails, and its format record stays 1.
func TestFormat1StoreGetsNoTails(t *testing.T) {
	forEachLocalBackend(t, func(t *testing.T, be backend) {
		dir := t.TempDir()
		s := mustOpen(t, be, dir, format3Opts())
		c := s.(*nsStore).c
		if err := c.rawEngine().commit([]write{{key: []byte{tagVersion}, val: []byte(formatV1)}}); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = mustOpen(t, be, dir, testOpts())
		writeOutputLine(t, s, 1)
		writeOutputLine(t, s, 2)
		if v := formatRecord(t, s); v != formatV1 {
			t.Fatalf("format record %q, want %q kept", v, formatV1)
		}
		if n := outputRecords(t, s)["out.csv"]; n != outputRecSumLen {
			t.Fatalf("output record of %d bytes in a store of format 1, want %d (no tail)", n, outputRecSumLen)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = mustOpen(t, be, dir, testOpts())
		if got := string(readOutput(t, be, dir, "out.csv")); got != "line\nline\n" {
			t.Fatalf("output %q, want 2 lines", got)
		}
	})
}

// TestNewerFormatIsRefusedFirst: a store whose format record names a
// format newer than the version knows fails the open with ErrNewerFormat
// (not ErrCorrupt: nothing is damaged), saying which format and what to
// do, before anything else of the store is read: here a record this
// version would take for damage. A store of format 3 opened as a version
// that knows only format 2 (hooks.newestFormat) is refused the same way.
func TestNewerFormatIsRefusedFirst(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		for _, tc := range []struct {
			name, record string
			newest       int
			format       string
		}{
			{"format 6", "tidemark-state 6", 0, "format 6"},
			{"upgrade to 6 under way", "tidemark-state 5 to 6, through k", 0, "format 6"},
			{"format 12", "tidemark-state 12", 0, "format 12"},
			// The store's own format record (4 for bbolt, 3 for the
			// others), opened as a version of the format before.
			{"its format opened as a version of the one before", "", -1, ""},
			{"format 3 opened as a version of format 2", formatVersion, 2, "format 3"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				dir := t.TempDir()
				s := mustOpen(t, be, dir, testOpts())
				writeOutputLine(t, s, 1)
				c := s.(*nsStore).c
				if tc.record == "" {
					tc.record = formatRecord(t, s)
					n, _ := formatNumber([]byte(tc.record))
					tc.newest, tc.format = n-1, fmt.Sprintf("format %d", n)
				}
				if tc.record == formatVersion && be.name == Bolt {
					// A bbolt store of format 3 keeps its data keys in the
					// store's bucket: made so.
					if err := s.Close(); err != nil {
						t.Fatal(err)
					}
					s = mustOpen(t, be, t.TempDir(), format3Opts())
					dir = s.(*nsStore).c.dir
					writeOutputLine(t, s, 1)
					c = s.(*nsStore).c
				}
				ws := []write{{key: []byte{tagVersion}, val: []byte(tc.record)}}
				if tc.newest == 0 {
					// A record of the newer format that this one would refuse.
					ws = append(ws, write{key: appliedKey("", "g", ""), val: []byte{9, 9, 9}})
				}
				if err := c.rawEngine().commit(ws); err != nil {
					t.Fatal(err)
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				o := testOpts()
				o.hooks = &hooks{newestFormat: tc.newest}
				s, err := be.open(dir, o)
				if err == nil {
					s.Close()
					t.Fatal("a store of a newer format opened")
				}
				if !errors.Is(err, ErrNewerFormat) || errors.Is(err, ErrCorrupt) {
					t.Fatalf("open: %v; want ErrNewerFormat, not ErrCorrupt", err)
				}
				for _, want := range []string{"written by a newer tidemark (" + tc.format, "run that version or newer", dir} {
					if !strings.Contains(err.Error(), want) {
						t.Fatalf("open: %v; want it to say %q", err, want)
					}
				}
				// Nothing was changed: this version opens a store of
				// format 3 as before.
				if tc.newest != 0 {
					s := mustOpen(t, be, dir, testOpts())
					checkFormatTrue(t, s)
				}
			})
		}
	})
}

// newFormatRecord is the format record of a new store of be: format 4
// for bbolt, 3 for the others.
func newFormatRecord(be backend) string {
	switch be.name {
	case Bolt:
		return formatV4
	case Postgres:
		return formatV5
	}
	return formatVersion
}

// TestFormat5IsPostgresOnly: a format record of format 5 in a bbolt or
// Pebble store is damage, refused at the open (a PostgreSQL store of
// format 5: see TestPostgresNewStoreKeepsItsRowsBySid).
func TestFormat5IsPostgresOnly(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		if be.name == Postgres {
			return
		}
		dir := t.TempDir()
		refuseFormatRecord(t, be, dir, mustOpen(t, be, dir, testOpts()), formatV5, "a format only PostgreSQL stores have")
	})
}

// TestFormat4IsBboltsOnly: a bbolt store of format 4 (a new one, see
// TestNewStoreIsOfFormat3) opens again as one; a format record of format
// 4 in a Pebble or PostgreSQL store is damage, refused at the open.
func TestFormat4IsBboltsOnly(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		dir := t.TempDir()
		s := mustOpen(t, be, dir, testOpts())
		if be.name == Bolt {
			writeLine(t, s, 1, false)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = mustOpen(t, be, dir, testOpts())
			defer s.Close()
			if v, n := formatRecord(t, s), getInt(t, s, "count"); v != formatV4 || n != 1 {
				t.Fatalf("reopened: format record %q, count %d; want %q, 1", v, n, formatV4)
			}
			return
		}
		refuseFormatRecord(t, be, dir, s, formatV4, "a format only bbolt stores have")
	})
}

// refuseFormatRecord writes the format record record in s (of be, in
// dir), closes it, and checks that the open that follows fails with
// ErrCorrupt, saying want.
func refuseFormatRecord(t *testing.T, be backend, dir string, s Store, record, want string) {
	t.Helper()
	if err := s.(*nsStore).c.rawEngine().commit([]write{{key: []byte{tagVersion}, val: []byte(record)}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := be.open(dir, testOpts())
	if err == nil {
		s.Close()
		t.Fatalf("a %s store of format record %q opened", be.name, record)
	}
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), want) {
		t.Fatalf("open: %v; want ErrCorrupt, saying %q", err, want)
	}
}

// TestFormatNumber reads the format of a format record.
func TestFormatNumber(t *testing.T) {
	for _, tc := range []struct {
		v  string
		n  int
		ok bool
	}{
		{formatV1, 1, true},
		{formatV2, 2, true},
		{formatVersion, 3, true},
		{formatUpgrading + "dxyz", 2, true},
		{formatV4, 4, true},
		{"tidemark-state 3 to 4, through \x00k", 4, true},
		{"tidemark-state 9", 9, true},
		{"tidemark-state", 0, false},
		{"tidemark-state x", 0, false},
		{"tidemark-state 0", 0, false},
		{"tidemark-state -2", 0, false},
		{"tidemark-state x to 4, through k", 0, false},
		{"other 3", 0, false},
		{"", 0, false},
	} {
		n, ok := formatNumber([]byte(tc.v))
		if n != tc.n || ok != tc.ok {
			t.Errorf("formatNumber(%q) = %d, %v; want %d, %v", tc.v, n, ok, tc.n, tc.ok)
		}
	}
}
