package main

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// A `ledger run --follow` on an input it has applied whole, with a bbolt
// file larger than --verify-max-bytes: the file is checked while the run
// waits for new lines. The check finds damage (a leaf page's element count
// lowered: bbolt alone would lose a key without a word), and the run
// stops at once with exit 1 and an error naming the data folder's file
// and what to do. It used to run on, idle, its store failed, until a new
// line came or it was stopped.
func TestFollowIdleStoreFoundDamaged(t *testing.T) {
	exe := ledgerExe(t)
	dir := t.TempDir()
	input, data := filepath.Join(dir, "ledger.csv"), filepath.Join(dir, "data")
	// Accounts enough for several leaf pages.
	if err := GenFile(input, GenOptions{Lines: 6_000, Accounts: 3_000, Seed: 17}); err != nil {
		t.Fatal(err)
	}
	args := []string{"--input", input, "--data", data, "--store", "bbolt", "--progress", "none"}
	mustSettle(t, exe, args, filepath.Join(dir, "run1.log"))
	file := filepath.Join(data, "state.bolt")
	lowerLeafCount(t, file)

	c, log := runToEnd(t, exe, append(args, "--follow", "--verify-max-bytes", "1"), filepath.Join(dir, "run2.log"), promptly)
	expectFailure(t, c, log, file, "is damaged", "backup", "store failed", "group="+groupName)
}

// lowerLeafCount lowers by one the element count of a leaf page of the
// bbolt file at path that holds more than one element.
func lowerLeafCount(t *testing.T, path string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	leaf := 0
	err = db.View(func(tx *bolt.Tx) error {
		for id := 2; leaf == 0; id++ {
			pi, err := tx.Page(id)
			if err != nil || pi == nil {
				return err
			}
			if pi.Type == "leaf" && pi.Count > 1 {
				leaf = id
			}
		}
		return nil
	})
	ps := db.Info().PageSize
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil || leaf == 0 {
		t.Fatalf("no leaf page of several elements in %s (%v)", path, err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.NativeEndian.Uint16(b[leaf*ps+10:]) // bbolt's page header: id, flags, count
	binary.NativeEndian.PutUint16(b[leaf*ps+10:], n-1)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
