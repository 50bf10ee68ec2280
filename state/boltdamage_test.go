package state

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// boltDamageKeys is how many values the damaged store holds: enough for
// a tree of several levels of pages.
const boltDamageKeys = 3000

// makeDamageStore makes a bbolt store in dir of two committed lines of
// feed "f": line 1 puts every key to 1, line 2 adds 1 to each.
func makeDamageStore(t *testing.T, dir string) {
	t.Helper()
	s := mustOpen(t, backend{name: Bolt, open: OpenBolt}, dir, testOpts())
	for n := 1; n <= 2; n++ {
		applyFlush(t, s, del("f", 1, n), func(tx *Tx) error {
			for i := range boltDamageKeys {
				if _, err := tx.Bucket("acct").AddInt64(fmt.Appendf(nil, "account-%05d", i), 1); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// readDamaged opens the store of dir and reads all of it: every value by
// a scan and by a lookup. It returns the first error, or whether the
// state is one the store committed: no line, line 1 or line 2 applied,
// every value equal to the count of lines.
func readDamaged(dir string) (consistent bool, what string, err error) {
	s, err := OpenBolt(dir, testOpts())
	if err != nil {
		return false, "", err
	}
	defer s.Close()
	var lines int64
	if l, ok := s.Applied("f"); ok {
		lines = l.Position / lineLen
	}
	seen := 0
	err = s.View(func(tx *Tx) error {
		b := tx.Bucket("acct")
		if err := b.ForEach(func(k, v []byte) error {
			seen++
			if n, ok := decodeInt64(v); !ok || n != lines {
				what = fmt.Sprintf("%s = %x after %d lines", k, v, lines)
			}
			return nil
		}); err != nil {
			return err
		}
		for i := range boltDamageKeys {
			n, err := b.GetInt64(fmt.Appendf(nil, "account-%05d", i))
			if err != nil {
				return err
			}
			if n != lines && what == "" {
				what = fmt.Sprintf("account-%05d = %d after %d lines", i, n, lines)
			}
		}
		return nil
	})
	if err != nil {
		return false, "", err
	}
	if want := map[bool]int{true: 0, false: boltDamageKeys}[lines == 0]; seen != want && what == "" {
		what = fmt.Sprintf("%d values after %d lines, want %d", seen, lines, want)
	}
	return what == "", what, nil
}

// TestBoltFileDamageIsNamed damages state.bolt in many ways: bit flips at
// random offsets, zeroed pages, truncations. Each open and full read ends
// in a state the store committed, or in an error that wraps ErrCorrupt
// (or ErrStoreMissing, for a file cut to nothing) and names the file:
// never a panic or fault, never a wrong value.
func TestBoltFileDamageIsNamed(t *testing.T) {
	t.Parallel()
	orig := t.TempDir()
	makeDamageStore(t, orig)
	data, err := os.ReadFile(filepath.Join(orig, boltFile))
	if err != nil {
		t.Fatal(err)
	}
	const page = 4096
	type damage struct {
		name string
		fn   func([]byte) []byte
	}
	var damages []damage
	pages := len(data) / page
	for _, p := range []int{0, 1, 2, 3, 4, pages / 4, pages / 2, 3 * pages / 4, pages - 2, pages - 1} {
		damages = append(damages, damage{fmt.Sprintf("zero page %d", p), func(b []byte) []byte {
			clear(b[p*page : min(len(b), (p+1)*page)])
			return b
		}})
	}
	damages = append(damages, damage{"zero both meta pages", func(b []byte) []byte { clear(b[:2*page]); return b }})
	for _, n := range []int{0, 100, page, 2 * page, 3*page + 17, len(data) / 2, len(data) - page, len(data) - 1} {
		damages = append(damages, damage{fmt.Sprintf("truncate to %d", n), func(b []byte) []byte { return b[:n] }})
	}
	rng := rand.New(rand.NewPCG(15, 15))
	flips := 40 // make test; make torture flips more
	if os.Getenv("TIDEMARK_TORTURE") != "" {
		flips = 400
	}
	for range flips {
		off, bit := rng.IntN(len(data)), rng.IntN(8)
		damages = append(damages, damage{fmt.Sprintf("flip bit %d at %d", bit, off), func(b []byte) []byte { b[off] ^= 1 << bit; return b }})
	}
	var named, exact int
	for _, d := range damages {
		dir := t.TempDir()
		for _, name := range []string{storeFile} {
			b, err := os.ReadFile(filepath.Join(orig, name))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, boltFile), d.fn(append([]byte{}, data...)), 0o600); err != nil {
			t.Fatal(err)
		}
		ok, what, err := readDamaged(dir)
		switch {
		case errors.Is(err, ErrStoreMissing):
			named++
		case err != nil:
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), filepath.Join(dir, boltFile)) || !strings.Contains(err.Error(), "backup") {
				t.Errorf("%s: %v; want an error wrapping ErrCorrupt that names the file and what to do", d.name, err)
			}
			named++
		case !ok:
			t.Errorf("%s: no error, and a state the store never committed: %s", d.name, what)
		default:
			exact++
		}
	}
	t.Logf("%d damages: %d named errors, %d committed states", len(damages), named, exact)
}
