package state

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
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

// checkUpgraded opens the store in dir and checks that it is of format 2,
// every value of the backend carries its checksum, and every value and
// the applied position are those of the format 1 store.
func checkUpgraded(t *testing.T, be backend, dir string) {
	t.Helper()
	s := mustOpen(t, be, dir, testOpts())
	defer s.Close()
	c := s.(*nsStore).c
	sums := c.eng.(*sumEngine)
	if v, _, err := c.rawEngine().get([]byte{tagVersion}); err != nil || string(v) != formatVersion || !sums.sums {
		t.Fatalf("format %q (%v), checksums %v; want %q", v, err, sums.sums, formatVersion)
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
}

// TestUpgrade upgrades a store of format 1 to format 2 in place: every
// value gets its checksum and keeps its bytes; a second Upgrade has
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
		for _, tc := range []struct{ killAt, hold int }{{1, 1}, {1, 0}, {2, 0}} {
			killAt := tc.killAt
			t.Run(fmt.Sprintf("after chunk %d, held %v", killAt, tc.hold > 0), func(t *testing.T) {
				dir := t.TempDir()
				makeFormat1(t, be, dir)
				cmd := exec.Command(os.Args[0], "-test.run=^TestUpgradeChild$", "-test.count=1")
				cmd.Env = append(os.Environ(), envUpgradeChild+"=1", "UPGRADE_DIR="+dir, "UPGRADE_HOLD_AT="+strconv.Itoa(tc.hold))
				out, err := cmd.StdoutPipe()
				if err != nil {
					t.Fatal(err)
				}
				cmd.Stderr = os.Stderr
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				killed := false
				sc := bufio.NewScanner(out)
				for sc.Scan() {
					line := sc.Text()
					if bytes.HasPrefix([]byte(line), []byte("error")) {
						t.Errorf("child: %s", line)
					}
					if !killed && line == fmt.Sprintf("chunk %d", killAt) {
						if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
							t.Fatal(err)
						}
						killed = true
					}
				}
				_ = cmd.Wait()
				if !killed {
					t.Fatalf("the upgrade finished before chunk %d", killAt)
				}
				v, _ := rawVersion(t, be, dir)
				if _, ok := upgradeFrom(v); !ok && (tc.hold > 0 || string(v) != formatVersion) {
					t.Fatalf("format record %q after the kill", v)
				}
				checkUpgraded(t, be, dir)
			})
		}
	})
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
