package torture

import (
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
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
	for _, store := range []string{"bbolt", "pebble"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			rng := newRand(t)
			dir := tempDir(t)
			input := filepath.Join(dir, "ledger.csv")
			base := filepath.Join(dir, "base")
			gen(t, input, lines, rng.Uint64(), 1, 0)
			figures.inputs.Add(1)
			runToEnd(t, dir, runArgs(input, base, "--store", store, "--batch", "500")...)
			checkExact(t, base, input)

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
				c := start(t, dir, runArgs(input, data, "--store", store)...)
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
			t.Logf("%s: %d damages: %d named errors, %d exact states", store, len(damages), named, exact)
		})
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

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// crashed says how the output shows a crash (a Go panic, a fault), or "".
func crashed(out string) string {
	for _, s := range []string{"panic:", "SIGSEGV", "SIGBUS", "unexpected fault address", "goroutine 1 [", "fatal error:"} {
		if strings.Contains(out, s) {
			return "crashed (" + s + ")"
		}
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
