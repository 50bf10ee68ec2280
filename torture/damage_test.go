package torture

import (
	"encoding/binary"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// TestDamagedFiles is the corruption scenario: a ledger run to its end,
// then one damage to its data folder (bit flips at random offsets, zeroed
// pages, truncations, deleted files; in state.bolt, in Pebble's files, in
// output.csv, in STORE), then the ledger run again as a child process.
// Each damage ends in one of two ways: the run fails at once with an error
// that names the damage (a file or folder of the store, and what to do),
// or the run succeeds and `ledger check` finds the state exact (or itself
// fails naming the damage, for a Pebble block no line of the run read).
// Never a panic or a fault, never exit 0 with a wrong state.
func TestDamagedFiles(t *testing.T) {
	track(t)
	lines := pick(20_000, 100_000)
	flips := pick(6, 60)
	for _, v := range []struct {
		name, store string
		args        []string
	}{
		{"bbolt", "bbolt", nil},
		// A bbolt file larger than the check before the run covers is
		// checked while the run starts, its first save waiting for it.
		{"bbolt-checked-while-running", "bbolt", []string{"--verify-max-bytes", "1"}},
		{"pebble", "pebble", nil},
	} {
		store := v.store
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			rng := newRand(t)
			dir := tempDir(t)
			input := filepath.Join(dir, "ledger.csv")
			base := filepath.Join(dir, "base")
			// Accounts enough for a tree of several levels of pages in
			// state.bolt.
			genAccounts(t, input, lines, damageAccounts, rng.Uint64(), 1)
			figures.inputs.Add(1)
			runToEnd(t, dir, runArgs(input, base, "--store", store, "--batch", "500")...)
			checkExact(t, base, input)
			// Lines the damaged runs read and apply: each run commits, so
			// that what it read from the damaged store would be saved.
			more := filepath.Join(dir, "more.csv")
			genAccounts(t, more, lines/10, damageAccounts, rng.Uint64(), int64(lines)+1)
			b, err := os.ReadFile(more)
			if err != nil {
				t.Fatal(err)
			}
			appendFile(t, input, b)

			var damages []damage
			for range flips {
				damages = append(damages, flipDamage(rng, storeFiles(store)))
			}
			damages = append(damages,
				zeroDamage(rng, storeFiles(store)),
				zeroDamage(rng, storeFiles(store)),
				truncDamage(rng, storeFiles(store)),
				truncDamage(rng, storeFiles(store)),
				deleteDamage(rng, storeFiles(store)),
				flipDamage(rng, only("output.csv")),
				zeroDamage(rng, only("output.csv")),
				truncDamage(rng, only("output.csv")),
				deleteDamage(rng, only("output.csv")),
				flipDamage(rng, only("STORE")),
			)
			if store == "pebble" {
				// Pebble takes a damaged MANIFEST record for the log's end.
				damages = append(damages, manifestDamage(rng), manifestDamage(rng))
			}
			if store == "bbolt" {
				// Damage bbolt itself does not see: keys silently absent.
				damages = append(damages, pageCountDamage(rng, "leaf"), pageCountDamage(rng, "leaf"), pageCountDamage(rng, "branch"))
			}
			if long {
				for range 10 {
					damages = append(damages, zeroDamage(rng, storeFiles(store)), truncDamage(rng, storeFiles(store)),
						deleteDamage(rng, storeFiles(store)), flipDamage(rng, only("output.csv")))
				}
			}
			var named, exact int
			for i, d := range damages {
				data := filepath.Join(dir, fmt.Sprintf("data%03d", i))
				copyTree(t, base, data)
				what := d(t, data)
				figures.faults.Add(1)
				c := start(t, dir, runArgs(input, data, append([]string{"--store", store}, v.args...)...)...)
				err := c.wait()
				out := c.stderr.String()
				if bad := crashed(out); bad != "" {
					t.Fatalf("%s: the ledger %s:\n%s", what, bad, tail(out))
				}
				if err != nil {
					if !namesDamage(out, data) {
						t.Errorf("%s: the run failed (%v) without an error that names the damaged store and what to do:\n%s", what, err, tail(out))
					}
					named++
					continue
				}
				r, cerr := checkRun(data, input)
				switch {
				case cerr == nil && r == "":
					exact++
				case cerr != nil && namesDamage(r, data) && crashed(r) == "":
					named++ // found by check's reads (Pebble's block checksums)
				default:
					t.Errorf("%s: the run exited 0, and the state is not exact (%v):\n%s", what, cerr, r)
				}
			}
			t.Logf("%s: %d damages: %d named errors, %d exact states", v.name, len(damages), named, exact)
		})
	}
}

// damageAccounts is how many accounts the damaged ledgers hold.
const damageAccounts = 3000

// genAccounts writes a generated ledger of lines over accounts to path.
func genAccounts(t *testing.T, path string, lines, accounts int, seed uint64, firstID int64) {
	t.Helper()
	cmd := exec.Command(ledgerExe, "gen", "--lines", strconv.Itoa(lines), "--accounts", strconv.Itoa(accounts),
		"--seed", strconv.FormatUint(seed, 10), "--first-id", strconv.FormatInt(firstID, 10), "--out", path)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ledger gen: %v\n%s", err, out)
	}
}

// damage damages the data folder and says what it did.
type damage func(t *testing.T, data string) string

// storeFiles picks the backend's files of a data folder.
func storeFiles(store string) func(string) bool {
	return func(rel string) bool {
		if store == "bbolt" {
			return rel == "state.bolt"
		}
		return strings.HasPrefix(rel, "pebble"+string(filepath.Separator)) && !strings.HasSuffix(rel, "LOCK")
	}
}

func only(name string) func(string) bool { return func(rel string) bool { return rel == name } }

// pickFile returns a file of data that match selects, at random.
func pickFile(t *testing.T, rng *rand.Rand, data string, match func(string) bool) (string, []byte) {
	t.Helper()
	var files []string
	err := filepath.WalkDir(data, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(data, p)
		if fi, err := d.Info(); err == nil && fi.Size() > 0 && match(rel) {
			files = append(files, rel)
		}
		return nil
	})
	if err != nil || len(files) == 0 {
		t.Fatalf("no file to damage in %s (%v)", data, err)
	}
	slices.Sort(files)
	rel := files[rng.IntN(len(files))]
	b, err := os.ReadFile(filepath.Join(data, rel))
	if err != nil {
		t.Fatal(err)
	}
	return rel, b
}

// Each damage draws its randomness when it is made, so that the table is
// the same for a seed whatever the files hold.
func flipDamage(rng *rand.Rand, match func(string) bool) damage {
	seed := rng.Uint64()
	return func(t *testing.T, data string) string {
		r := newRandFrom(seed)
		rel, b := pickFile(t, r, data, match)
		off, bit := r.IntN(len(b)), r.IntN(8)
		b[off] ^= 1 << bit
		write(t, filepath.Join(data, rel), b)
		return fmt.Sprintf("bit %d flipped at %d of %s (%d bytes)", bit, off, rel, len(b))
	}
}

func zeroDamage(rng *rand.Rand, match func(string) bool) damage {
	seed := rng.Uint64()
	return func(t *testing.T, data string) string {
		r := newRandFrom(seed)
		rel, b := pickFile(t, r, data, match)
		at := r.IntN(len(b)) &^ 4095
		clear(b[at:min(len(b), at+4096)])
		write(t, filepath.Join(data, rel), b)
		return fmt.Sprintf("4096 bytes zeroed at %d of %s (%d bytes)", at, rel, len(b))
	}
}

func truncDamage(rng *rand.Rand, match func(string) bool) damage {
	seed := rng.Uint64()
	return func(t *testing.T, data string) string {
		r := newRandFrom(seed)
		rel, b := pickFile(t, r, data, match)
		n := r.IntN(len(b))
		write(t, filepath.Join(data, rel), b[:n])
		return fmt.Sprintf("%s (%d bytes) cut to %d", rel, len(b), n)
	}
}

func deleteDamage(rng *rand.Rand, match func(string) bool) damage {
	seed := rng.Uint64()
	return func(t *testing.T, data string) string {
		rel, _ := pickFile(t, newRandFrom(seed), data, match)
		if err := os.Remove(filepath.Join(data, rel)); err != nil {
			t.Fatal(err)
		}
		return rel + " deleted"
	}
}

// pageCountDamage lowers by one the element count of a page of kind
// ("leaf" or "branch") that state.bolt's tree uses, by bbolt's own account:
// the page's last key (or child) is then gone without bbolt noticing.
func pageCountDamage(rng *rand.Rand, kind string) damage {
	seed := rng.Uint64()
	return func(t *testing.T, data string) string {
		path := filepath.Join(data, "state.bolt")
		db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		var ids []int
		err = db.View(func(tx *bolt.Tx) error {
			for id := 2; ; id++ {
				pi, err := tx.Page(id)
				if err != nil || pi == nil {
					return err
				}
				if pi.Type == kind && pi.Count > 1 {
					ids = append(ids, id)
				}
			}
		})
		ps := db.Info().PageSize
		if cerr := db.Close(); err == nil {
			err = cerr
		}
		if err != nil || len(ids) == 0 {
			t.Fatalf("no %s page in %s to damage (%v)", kind, path, err)
		}
		id := ids[newRandFrom(seed).IntN(len(ids))]
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		n := binary.NativeEndian.Uint16(b[id*ps+10:]) // bbolt's page header: id, flags, count
		binary.NativeEndian.PutUint16(b[id*ps+10:], n-1)
		write(t, path, b)
		return fmt.Sprintf("the element count of %s page %d of state.bolt lowered from %d to %d", kind, id, n, n-1)
	}
}

// manifestDamage flips a bit in the newest MANIFEST of pebble/, short of
// its last record: Pebble would take the record for the end of the log and
// open an older version of its tables.
func manifestDamage(rng *rand.Rand) damage {
	seed := rng.Uint64()
	return func(t *testing.T, data string) string {
		names, err := filepath.Glob(filepath.Join(data, "pebble", "MANIFEST-*"))
		if err != nil || len(names) == 0 {
			t.Fatalf("no MANIFEST in %s/pebble (%v)", data, err)
		}
		slices.Sort(names) // zero-padded numbers: the newest last
		path := names[len(names)-1]
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		r := newRandFrom(seed)
		off, bit := r.IntN(len(b)/2+1), r.IntN(8)
		b[off] ^= 1 << bit
		write(t, path, b)
		return fmt.Sprintf("bit %d flipped at %d of %s (%d bytes)", bit, off, filepath.Base(path), len(b))
	}
}

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// crashed says how the output shows a crash (a Go panic, a fault), or "".
func crashed(out string) string {
	for _, s := range []string{"panic:", "SIGSEGV", "SIGBUS", "unexpected fault address", "goroutine 1 ["} {
		if strings.Contains(out, s) {
			return "crashed (" + s + ")"
		}
	}
	// The runtime's, at the start of a line (the framework's log never
	// says it; a message may quote one, as Pebble's "reported a fatal
	// error").
	if strings.HasPrefix(out, "fatal error:") || strings.Contains(out, "\nfatal error:") {
		return "crashed (fatal error:)"
	}
	return ""
}

// namesDamage reports whether out says which store is damaged (its
// folder, or a file in it) and what to do.
func namesDamage(out, data string) bool {
	lower := strings.ToLower(out)
	return strings.Contains(out, data) &&
		(strings.Contains(lower, "damaged") || strings.Contains(lower, "corrupt") || strings.Contains(lower, "missing")) &&
		(strings.Contains(lower, "backup") || strings.Contains(lower, "remove"))
}

// checkRun runs `ledger check`: "" and nil when the state is exact, else
// its report and an error.
func checkRun(data, input string) (string, error) {
	out, err := exec.Command(ledgerExe, "check", "--data", data, "--input", input).CombinedOutput()
	if err != nil {
		return string(out), err
	}
	return "", nil
}
