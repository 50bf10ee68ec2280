package state

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// upgradeKeys is how many values the format 1 stores of the upgrade tests
// hold: more than two chunks.
const upgradeKeys = 2*upgradeChunk + 777

func upgradeKey(i int) []byte { return append(dataPrefix("", "b"), fmt.Sprintf("key-%06d", i)...) }
func upgradeVal(i int) []byte { return []byte(fmt.Sprint("value ", i*7)) }

// makeFormat1 makes a store of format 1 in dir, as the version before
// checksums wrote it: upgradeKeys values, and three lines of feed "f".
func makeFormat1(t *testing.T, be backend, dir string) {
	t.Helper()
	s := mustOpen(t, be, dir, format3Opts())
	for n := 1; n <= 3; n++ {
		applyLine(t, s, del("f", 1, n))
	}
	if err := s.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	c := s.(*nsStore).c
	raw := c.rawEngine()
	// Every value without its checksum.
	var ws []write
	if err := raw.scan(nil, func(k, v []byte) error {
		if !isVersionKey(k) {
			ws = append(ws, write{key: bytes.Clone(k), val: bytes.Clone(v[:len(v)-sumLen])})
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for i := range upgradeKeys {
		ws = append(ws, write{key: upgradeKey(i), val: upgradeVal(i)})
	}
	ws = append(ws, write{key: []byte{tagVersion}, val: []byte(formatV1)})
	if err := raw.commit(ws); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// upgradedFormat is the format record of a store of backend be once
// upgraded: a bbolt store's tables are in buckets of their own.
func upgradedFormat(be backend) string {
	if be.name == Bolt {
		return formatV4
	}
	return formatVersion
}

// checkUpgraded opens the store in dir and checks that it is of the
// format of an upgraded store (upgradedFormat), every value of the backend carries its checksum, and every value and
// the applied position are those of the format 1 store.
func checkUpgraded(t *testing.T, be backend, dir string) {
	t.Helper()
	s := mustOpen(t, be, dir, testOpts())
	defer s.Close()
	c := s.(*nsStore).c
	sums := c.eng.(*sumEngine)
	if v, _, err := c.rawEngine().get([]byte{tagVersion}); err != nil || string(v) != upgradedFormat(be) || !sums.sums {
		t.Fatalf("format %q (%v), checksums %v; want %q", v, err, sums.sums, upgradedFormat(be))
	}
	n := 0
	if err := c.rawEngine().scan(nil, func(k, v []byte) error {
		n++
		_, err := sums.verify(k, v)
		return err
	}); err != nil {
		t.Fatalf("a value without its checksum after the upgrade: %v", err)
	}
	err := s.View(func(tx *Tx) error {
		for i := range upgradeKeys {
			v, _, err := tx.Bucket("b").Get(fmt.Appendf(nil, "key-%06d", i))
			if err != nil {
				return err
			}
			if !bytes.Equal(v, upgradeVal(i)) {
				return fmt.Errorf("key-%06d = %q, want %q", i, v, upgradeVal(i))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := getInt(t, s, "count"); got != 3 {
		t.Fatalf("count %d, want 3", got)
	}
	if l, ok := s.Applied("f"); !ok || l.Position != 3*lineLen {
		t.Fatalf("applied %+v %v, want line 3", l, ok)
	}
	if be.name == Bolt {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if flat, tables := boltLayout(t, dir); flat > 0 || len(tables) != 2 {
			t.Fatalf("%d data keys and the buckets %q in the store's bucket after the upgrade, want none and two", flat, tables)
		}
	}
}

// TestUpgrade upgrades a store of format 1 in place: every value gets its
// checksum and keeps its bytes, and a bbolt store's tables get buckets of
// their own (format 4; Pebble: format 3); a second Upgrade has
// nothing to do; a store of format 2 is left as it is.
func TestUpgrade(t *testing.T) {
	forEachLocalBackend(t, func(t *testing.T, be backend) {
		dir := t.TempDir()
		makeFormat1(t, be, dir)
		spec := be.name + ":" + dir
		if up, err := Upgrade(spec, testOpts()); err != nil || !up {
			t.Fatalf("Upgrade: %v, %v; want an upgrade", up, err)
		}
		checkUpgraded(t, be, dir)
		if up, err := Upgrade(dir, testOpts()); err != nil || up {
			t.Fatalf("second Upgrade: %v, %v; want nothing to do", up, err)
		}
	})
}

const envUpgradeChild = "TIDEMARK_STATE_UPGRADE_CHILD"

// TestUpgradeChild is the child of TestUpgradeKilled: it upgrades the
// store in $UPGRADE_DIR and prints a line after each chunk is committed.
func TestUpgradeChild(t *testing.T) {
	if os.Getenv(envUpgradeChild) == "" {
		return
	}
	o := testOpts()
	chunks := 0
	hold, _ := strconv.Atoi(os.Getenv("UPGRADE_HOLD_AT"))
	o.hooks = &hooks{afterUpgradeChunk: func() {
		chunks++
		fmt.Printf("chunk %d\n", chunks)
		if chunks == hold {
			select {} // wait for the kill
		}
	}}
	if _, err := Upgrade(os.Getenv("UPGRADE_DIR"), o); err != nil {
		fmt.Printf("error %v\n", err)
	}
	fmt.Println("done")
}

// TestUpgradeKilled kills an upgrade with SIGKILL: held after its first
// chunk is committed, and running on after its first and second (the kill
// lands in the commit of a later chunk, or between two). The next open
// finishes the upgrade, and every value is the format 1 store's, with its
// checksum.
func TestUpgradeKilled(t *testing.T) {
	forEachLocalBackend(t, func(t *testing.T, be backend) {
		cases := []struct{ killAt, hold int }{{1, 1}, {1, 0}, {2, 0}}
		if be.name == Bolt {
			// Chunks 1 to 3 give the values their checksums, 4 to 6 move
			// them into their tables' buckets.
			cases = append(cases, struct{ killAt, hold int }{4, 4}, struct{ killAt, hold int }{4, 0}, struct{ killAt, hold int }{5, 0})
		}
		for _, tc := range cases {
			killAt := tc.killAt
			t.Run(fmt.Sprintf("after chunk %d, held %v", killAt, tc.hold > 0), func(t *testing.T) {
				dir := t.TempDir()
				makeFormat1(t, be, dir)
				killUpgrade(t, dir, killAt, tc.hold)
				v, _ := rawVersion(t, be, dir)
				_, upgrading := upgradeFrom(v)
				moving := strings.HasPrefix(string(v), formatMoving)
				if !upgrading && !moving && (tc.hold > 0 || string(v) != upgradedFormat(be)) {
					t.Fatalf("format record %q after the kill", v)
				}
				checkUpgraded(t, be, dir)
			})
		}
	})
}

// killUpgrade runs an upgrade of the store in dir in a child process
// (TestUpgradeChild) and kills it with SIGKILL once it committed its
// chunk killAt: held there (hold, the chunk it waits at), or running on.
func killUpgrade(t *testing.T, dir string, killAt, hold int) {
	t.Helper()
	env := append(os.Environ(), envUpgradeChild+"=1", "UPGRADE_DIR="+dir, "UPGRADE_HOLD_AT="+strconv.Itoa(hold))
	if _, killed := runTestChild(t, "TestUpgradeChild", env, func(line string) bool { return line == fmt.Sprintf("chunk %d", killAt) }); !killed {
		t.Fatalf("the upgrade finished before chunk %d", killAt)
	}
}

// rawVersion reads the format record of the store in dir, with the
// store's own open set to leave an interrupted upgrade alone: through the
// backend.
func rawVersion(t *testing.T, be backend, dir string) ([]byte, bool) {
	t.Helper()
	o := testOpts()
	var eng engine
	var err error
	if be.name == Bolt {
		eng, err = openBolt(dir, o)
	} else {
		eng, err = openPebble(dir, o, false)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer eng.close()
	v, ok, err := eng.get([]byte{tagVersion})
	if err != nil {
		t.Fatal(err)
	}
	return v, ok
}
