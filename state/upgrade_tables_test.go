package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// tablesKeys are keys a table may hold that the tables' buckets store
// otherwise (innerKey) or that sort first: an empty key is stored as the
// table's bucket's name would be in the store's bucket.
var tablesKeys = []string{"", "\x00", "\x00a", "k1", "k2"}

// makeFormat3 makes a bbolt store of format 3 in dir, as versions before
// format 4 made it (every data key in the store's bucket, after its
// table's prefix): three lines of feed "f" (applyLine), then a line of
// feed "g" that writes upgradeKeys values in table "b" (more than two
// chunks of an upgrade), the keys of tablesKeys in the root table, table
// "a" and table "a" of namespace "n2", and 40 bytes to an output file,
// and a line of feed "g" in namespace "n2" that deletes a table's keys.
// It returns the store's records (rawDump).
func makeFormat3(t *testing.T, dir string) []string {
	t.Helper()
	s := mustOpen(t, boltBackend, dir, format3Opts())
	for n := 1; n <= 3; n++ {
		applyLine(t, s, del("f", 1, n))
	}
	put := func(tx *Tx) error {
		for i := range upgradeKeys {
			if err := tx.Bucket("b").Put(fmt.Appendf(nil, "key-%06d", i), upgradeVal(i)); err != nil {
				return err
			}
		}
		for _, table := range []string{"", "a", "c"} {
			for i, k := range tablesKeys {
				if err := tx.Bucket(table).PutInt64([]byte(k), int64(i)); err != nil {
					return err
				}
			}
		}
		_, err := tx.Output("out.csv").Write([]byte("forty bytes of output, line one, ok!!!\n"))
		return err
	}
	mustApply(t, s, del("g", 1, 1), put)
	n2 := s.Namespace("n2")
	mustApply(t, n2, del("g", 1, 1), put)
	mustApply(t, n2, del("g", 1, 2), deleteKeys("c", tablesKeys))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if v, _ := rawVersion(t, boltBackend, dir); string(v) != formatVersion {
		t.Fatalf("the store made of format 3 says %q", v)
	}
	if flat, tables := boltLayout(t, dir); flat == 0 || len(tables) > 0 {
		t.Fatalf("the store made of format 3 holds %d data keys in its bucket and the buckets %q", flat, tables)
	}
	s = mustOpen(t, boltBackend, dir, testOpts())
	if f := s.Stats().Format; f != 3 {
		t.Fatalf("Stats().Format %d of the store made of format 3", f)
	}
	d := rawDump(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return d
}

var boltBackend = backend{name: Bolt, open: OpenBolt}

// rawDump returns every record of the open store s but its format record,
// as the key space of encoding.go has them (the engine joins a table's
// keys to its prefix), each "key=value" with the value's checksum.
func rawDump(t *testing.T, s Store) []string {
	t.Helper()
	var d []string
	if err := s.(*nsStore).c.rawEngine().scan(nil, func(k, v []byte) error {
		if !isVersionKey(k) {
			d = append(d, fmt.Sprintf("%q=%q", k, v))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return d
}

// boltLayout reads the bbolt file of the closed store in dir through
// bbolt: how many data keys its bucket holds, and the names of the
// buckets in it.
func boltLayout(t *testing.T, dir string) (flat int, tables []string) {
	t.Helper()
	db, err := bolt.Open(filepath.Join(dir, boltFile), 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(boltBucket).ForEach(func(k, v []byte) error {
			switch {
			case v == nil:
				tables = append(tables, string(k))
			case k[0] == tagData:
				flat++
			}
			return nil
		})
	}); err != nil {
		t.Fatal(err)
	}
	return flat, tables
}

// leafFill returns how full the leaf pages of the table's bucket of the
// closed bbolt store in dir are, on average.
func leafFill(t *testing.T, dir string, table []byte) float64 {
	t.Helper()
	db, err := bolt.Open(filepath.Join(dir, boltFile), 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var st bolt.BucketStats
	if err := db.View(func(tx *bolt.Tx) error {
		st = tx.Bucket(boltBucket).Bucket(table).Stats()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if st.LeafPageN == 0 {
		t.Fatalf("table %q has no leaf page", table)
	}
	return float64(st.LeafInuse) / float64(st.LeafPageN*db.Info().PageSize)
}

// wantTables are the tables' buckets of the store makeFormat3 makes, once
// of format 4: table "c" of namespace "n2" lost its keys.
var wantTables = []string{
	string(dataPrefix("", "")), string(dataPrefix("", "a")), string(dataPrefix("", "b")), string(dataPrefix("", "c")),
	string(dataPrefix("n2", "")), string(dataPrefix("n2", "a")), string(dataPrefix("n2", "b")),
}

// checkMoved checks that the store in dir is of format 4 with its records
// those of want (a rawDump of it before), every data key in its table's
// bucket, and that it reads and applies as before.
func checkMoved(t *testing.T, dir string, want []string) {
	t.Helper()
	if v, _ := rawVersion(t, boltBackend, dir); string(v) != formatV4 {
		t.Fatalf("format record %q, want %q", v, formatV4)
	}
	if flat, tables := boltLayout(t, dir); flat > 0 || !slices.Equal(tables, wantTables) {
		t.Fatalf("%d data keys and the buckets %q in the store's bucket, want none and %q", flat, tables, wantTables)
	}
	s := mustOpen(t, boltBackend, dir, testOpts())
	if f := s.Stats().Format; f != 4 {
		t.Fatalf("Stats().Format %d after the upgrade, want 4", f)
	}
	if got := rawDump(t, s); !slices.Equal(got, want) {
		t.Fatalf("the store holds %d records after the upgrade, %d before; first difference: %s", len(got), len(want), firstRecordDiff(got, want))
	}
	if err := s.View(func(tx *Tx) error {
		for i := range upgradeKeys {
			k := fmt.Appendf(nil, "key-%06d", i)
			if v, ok, err := tx.Bucket("b").Get(k); err != nil || !ok || !bytes.Equal(v, upgradeVal(i)) {
				return fmt.Errorf("%s = %q, %v, %v; want %q", k, v, ok, err, upgradeVal(i))
			}
		}
		var got []string
		for k := range tx.Bucket("a").All() {
			got = append(got, string(k))
		}
		if !slices.Equal(got, tablesKeys) {
			return fmt.Errorf("table %q iterates %q, want %q", "a", got, tablesKeys)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := getInt(t, s, "count"); got != 3 {
		t.Fatalf("count %d, want 3", got)
	}
	skipsThenApplies(t, s, del("f", 1, 3), del("f", 1, 4))
	s = reopen(t, boltBackend, dir, s)
	if got := getInt(t, s, "count"); got != 4 {
		t.Fatalf("count %d after a line and a reopen, want 4", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// firstRecordDiff says where the dumps a and b first differ.
func firstRecordDiff(a, b []string) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprintf("%s against %s", a[i], b[i])
		}
	}
	return "one is a prefix of the other"
}

// TestUpgradeToTables upgrades a bbolt store of format 3 to format 4: every
// data key moves into its table's bucket, every record keeps its key (as
// the store reads it) and bytes, and the store applies on from its
// positions. A second Upgrade has nothing to do.
func TestUpgradeToTables(t *testing.T) {
	dir := t.TempDir()
	before := makeFormat3(t, dir)
	// The open of a bbolt store of format 3 says how to upgrade it.
	var logs bytes.Buffer
	o := testOpts()
	o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	if err := mustOpen(t, boltBackend, dir, o).Close(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), `the bbolt store is of format 3, made by a version before format 4`) || !strings.Contains(logs.String(), `tidemark store upgrade DIR`) {
		t.Fatalf("the open of a bbolt store of format 3 logged:\n%s", logs.String())
	}
	if up, err := Upgrade(dir, testOpts()); err != nil || !up {
		t.Fatalf("Upgrade: %v, %v; want an upgrade", up, err)
	}
	checkMoved(t, dir, before)
	// The keys came in order: bbolt would split their pages half full.
	if fill := leafFill(t, dir, dataPrefix("", "b")); fill < 0.8 {
		t.Fatalf("the moved table's leaf pages are %.2f full, want at least 0.8 (moveFill)", fill)
	}
	if up, err := Upgrade(dir, testOpts()); err != nil || up {
		t.Fatalf("second Upgrade: %v, %v; want nothing to do", up, err)
	}
}

// TestUpgradeToTablesUnderway opens a store whose upgrade to format 4 was
// killed after its first chunk: a version that knows only format 3 refuses it at
// its format record (its data keys are in two places), and this version's
// open finishes the move before it reads anything.
func TestUpgradeToTablesUnderway(t *testing.T) {
	dir := t.TempDir()
	before := makeFormat3(t, dir)
	killUpgrade(t, dir, 1, 1)
	v, _ := rawVersion(t, boltBackend, dir)
	if !strings.HasPrefix(string(v), formatMoving) {
		t.Fatalf("format record %q after the first chunk, want %q…", v, formatMoving)
	}
	if flat, tables := boltLayout(t, dir); flat == 0 || len(tables) == 0 {
		t.Fatalf("%d data keys and the buckets %q in the store's bucket after the first chunk: want some of both", flat, tables)
	}
	old := testOpts()
	old.hooks = &hooks{newestFormat: 3}
	if _, err := OpenBolt(dir, old); !errors.Is(err, ErrNewerFormat) {
		t.Fatalf("a version that knows format 3 opens the store half way to format 4: %v", err)
	}
	// This version's open finishes the move.
	if err := mustOpen(t, boltBackend, dir, testOpts()).Close(); err != nil {
		t.Fatal(err)
	}
	checkMoved(t, dir, before)
}

// TestUpgradeToTablesKeyInBothPlaces damages a store whose upgrade to
// format 4 is under way: a key its move has not reached is in its table's
// bucket too, with another value. The open that finishes the move refuses
// the store, naming the key, rather than keep either value.
func TestUpgradeToTablesKeyInBothPlaces(t *testing.T) {
	dir := t.TempDir()
	makeFormat3(t, dir)
	db, err := bolt.Open(filepath.Join(dir, boltFile), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	key := []byte("key-030000")
	if err := db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(boltBucket)
		tb, err := b.CreateBucket(dataPrefix("", "b"))
		if err != nil {
			return err
		}
		v := upgradeVal(7)
		if err := tb.Put(key, binary.BigEndian.AppendUint32(bytes.Clone(v), valueSum(append(dataPrefix("", "b"), key...), v))); err != nil {
			return err
		}
		return b.Put([]byte{tagVersion}, []byte(formatMoving+"d"))
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = OpenBolt(dir, testOpts())
	var ce *CorruptError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "both in the store's bucket and in its table's") || !bytes.Equal(ce.Key, append(dataPrefix("", "b"), key...)) {
		t.Fatalf("open of a store with a key in both places: %v", err)
	}
}
