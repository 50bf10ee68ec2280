package state

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestValueDamageThroughIterationSnapshotAndBackup flips one bit of a
// stored value (in its bytes, and in its checksum) and reads it every way
// but Get: an iteration inside View and Apply (forward and reverse, a
// table's), a snapshot's Get and iteration, and a backup. Each fails with
// a *CorruptError naming the store, its file, the namespace, bucket and
// key; the backup leaves no folder behind. The same damage to an
// output's committed length and to an applied record fails a backup and a
// snapshot's Feeds the same way.
func TestValueDamageThroughIterationSnapshotAndBackup(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		// open makes the store of a test: "alice" and "bob" in bucket
		// "balances" of namespace "ns", an output line, all durable; then
		// damage changes the stored bytes. With reopen, the store opens
		// again without the check at open (bbolt's), so that the reads
		// meet the damage; without, the damage happens under the open store
		// (the records an open reads, it checks itself).
		open := func(t *testing.T, reopen bool, damage func(c *core)) Store {
			dir := t.TempDir()
			s := mustOpen(t, be, dir, testOpts())
			if _, err := s.Namespace("ns").Apply(t.Context(), del("orders", 1, 1), func(tx *Tx) error {
				if _, err := testBalances.Add(tx, "alice", 100); err != nil {
					return err
				}
				if _, err := testBalances.Add(tx, "bob", 7); err != nil {
					return err
				}
				_, err := fmt.Fprintln(tx.Output("out.csv"), "alice,100")
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if err := s.Flush(t.Context()); err != nil {
				t.Fatal(err)
			}
			damage(s.(*nsStore).c)
			if !reopen {
				return s
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			o := testOpts()
			o.VerifyMaxBytes = -1
			return mustOpen(t, be, dir, o)
		}
		alice := append(dataPrefix("ns", "balances"), "alice"...)
		reads := []struct {
			name string
			read func(t *testing.T, s Store) error
		}{
			{"All in View", func(t *testing.T, s Store) error {
				return s.Namespace("ns").View(func(tx *Tx) error {
					for range tx.Bucket("balances").All() {
					}
					return nil
				})
			}},
			{"ReversePrefix in Apply", func(t *testing.T, s Store) error {
				_, err := s.Namespace("ns").Apply(t.Context(), del("orders", 1, 2), func(tx *Tx) error {
					for range tx.Bucket("balances").ReversePrefix([]byte("a")) {
					}
					return nil
				})
				return err
			}},
			{"a table's All in View", func(t *testing.T, s Store) error {
				return s.Namespace("ns").View(func(tx *Tx) error {
					for range testBalances.All(tx) {
					}
					return tx.Err()
				})
			}},
			{"Get in a snapshot", func(t *testing.T, s Store) error {
				return s.Namespace("ns").Snapshot(t.Context(), func(tx *Tx) error {
					_, _, err := tx.Bucket("balances").Get([]byte("alice"))
					return err
				})
			}},
			{"Range in a snapshot", func(t *testing.T, s Store) error {
				return s.Namespace("ns").Snapshot(t.Context(), func(tx *Tx) error {
					for range tx.Bucket("balances").Range([]byte("a"), []byte("b")) {
					}
					return nil
				})
			}},
			{"Backup", func(t *testing.T, s Store) error {
				to := filepath.Join(t.TempDir(), "backup")
				err := s.Backup(t.Context(), to)
				checkNoBackup(t, to)
				return err
			}},
		}
		for _, d := range []struct {
			name string
			at   int
		}{{"bit in the value", 0}, {"bit in the checksum", -1}} {
			for _, r := range reads {
				t.Run(d.name+"/"+r.name, func(t *testing.T) {
					s := open(t, true, func(c *core) { damageValue(t, c, alice, d.at) })
					checkCorrupt(t, r.read(t, s), s, "ns", "balances", `"alice"`)
					// The store stays usable for what is not damaged.
					err := s.Namespace("ns").View(func(tx *Tx) error {
						n, _, err := testBalances.Get(tx, "bob")
						if err == nil && n != 7 {
							t.Errorf("bob = %d, want 7", n)
						}
						return err
					})
					if err != nil {
						t.Fatal(err)
					}
				})
			}
		}
		t.Run("output length of an open store/Backup", func(t *testing.T) {
			s := open(t, false, func(c *core) { damageValue(t, c, outputKey("out.csv"), 0) })
			to := filepath.Join(t.TempDir(), "backup")
			err := s.Backup(t.Context(), to)
			checkNoBackup(t, to)
			checkCorruptRecord(t, err, s, `committed length of output "out.csv"`)
		})
		t.Run("applied record of an open store/Feeds in a snapshot", func(t *testing.T) {
			s := open(t, false, func(c *core) { damageValue(t, c, appliedKey("ns", "orders", ""), 0) })
			err := s.Namespace("ns").Snapshot(t.Context(), func(tx *Tx) error {
				_, err := tx.Feeds()
				return err
			})
			checkCorruptRecord(t, err, s, `applied position of feed "orders" in namespace "ns"`)
		})
	})
}

// checkNoBackup checks that a failed backup left nothing at to, nor a
// temporary folder beside it.
func checkNoBackup(t *testing.T, to string) {
	t.Helper()
	if _, err := os.Stat(to); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed backup left %s: %v", to, err)
	}
	if es, _ := os.ReadDir(filepath.Dir(to)); len(es) > 0 {
		t.Errorf("a failed backup left %s in %s", es[0].Name(), filepath.Dir(to))
	}
}

// checkCorruptRecord checks that err is a *CorruptError of the record
// named record of the store s, naming its file and what to do.
func checkCorruptRecord(t *testing.T, err error, s Store, record string) {
	t.Helper()
	var ce *CorruptError
	if !errors.Is(err, ErrCorrupt) || !errors.As(err, &ce) {
		t.Fatalf("err = %v; want a *CorruptError wrapping ErrCorrupt", err)
	}
	msg := err.Error()
	for _, want := range []string{s.Dir(), record, "backup"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not name %s", msg, want)
		}
	}
	if s.Backend() == Bolt && !strings.Contains(msg, "state.bolt") {
		t.Errorf("error %q does not name the file", msg)
	}
}

// TestBoltDamageThroughSnapshotAndBackupIsNamed damages state.bolt (zeroed
// pages, bit flips) and reads it, without the check at open, through a
// snapshot (Get and iteration), an iteration in View, and a backup: each
// read ends in the values the store committed, or in an error that wraps
// ErrCorrupt and names the file, never a panic or a fault.
func TestBoltDamageThroughSnapshotAndBackupIsNamed(t *testing.T) {
	t.Parallel()
	orig := t.TempDir()
	makeDamageStore(t, orig)
	data, err := os.ReadFile(filepath.Join(orig, boltFile))
	if err != nil {
		t.Fatal(err)
	}
	store, err := os.ReadFile(filepath.Join(orig, storeFile))
	if err != nil {
		t.Fatal(err)
	}
	const page = 4096
	type damage struct {
		name string
		fn   func([]byte)
	}
	var damages []damage
	pages := len(data) / page
	for _, p := range []int{2, 3, 4, pages / 4, pages / 2, 3 * pages / 4, pages - 2, pages - 1} {
		damages = append(damages, damage{fmt.Sprintf("zero page %d", p), func(b []byte) { clear(b[p*page : min(len(b), (p+1)*page)]) }})
	}
	for i := range 20 {
		off := 2*page + (i*7919*page+i*131)%(len(data)-2*page)
		damages = append(damages, damage{fmt.Sprintf("flip a bit at %d", off), func(b []byte) { b[off] ^= 0x10 }})
	}
	reads := []struct {
		name string
		read func(s Store) error
	}{
		{"snapshot", func(s Store) error {
			return s.Snapshot(t.Context(), func(tx *Tx) error {
				for k, v := range tx.Bucket("acct").All() {
					if _, ok := decodeInt64(v); !ok {
						return fmt.Errorf("%s = %x in a snapshot", k, v)
					}
				}
				for i := 0; i < boltDamageKeys; i += 97 {
					if _, _, err := tx.Bucket("acct").Get(fmt.Appendf(nil, "account-%05d", i)); err != nil {
						return err
					}
				}
				return nil
			})
		}},
		{"iteration in View", func(s Store) error {
			return s.View(func(tx *Tx) error {
				for range tx.Bucket("acct").Reverse() {
				}
				return nil
			})
		}},
		{"backup", func(s Store) error { return s.Backup(t.Context(), filepath.Join(t.TempDir(), "b")) }},
	}
	var named int
	for _, d := range damages {
		for _, r := range reads {
			dir := t.TempDir()
			b := append([]byte{}, data...)
			d.fn(b)
			if err := os.WriteFile(filepath.Join(dir, boltFile), b, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, storeFile), store, 0o644); err != nil {
				t.Fatal(err)
			}
			o := testOpts()
			o.VerifyMaxBytes = -1
			s, err := OpenBolt(dir, o)
			if err == nil {
				err = r.read(s)
				err = errors.Join(err, s.Close())
			}
			switch {
			case err == nil:
			case !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), filepath.Join(dir, boltFile)):
				t.Errorf("%s, %s: %v; want an error wrapping ErrCorrupt that names the file", d.name, r.name, err)
			default:
				named++
			}
		}
	}
	t.Logf("%d damages × %d reads: %d named errors", len(damages), len(reads), named)
}
