package state

import (
	"context"
	"fmt"
	"testing"
)

// A table of fixed-size types allocates nothing per call, on every
// backend: Get, Put, Add, Update and Delete of int64 and uint64 keys and
// values, and String keys, inside Apply (staged, sealed and durable
// values read) and View; and an Apply line made of table calls allocates
// nothing either once its keys are staged.
func TestTablesDoNotAllocatePerCall(t *testing.T) {
	byID := NewTable("alloc-id", Int64{}, Int64{})
	counts := NewTable("alloc-count", Uint64{}, Uint64{})
	byName := NewTable("alloc-name", String{}, Int64{})
	names := make([]string, 16)
	for i := range names {
		names[i] = fmt.Sprintf("account-%02d", i)
	}
	// Not parallel: AllocsPerRun counts the allocations of the process.
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) { checkTableAllocs(t, be, byID, counts, byName, names) })
	}
}

func checkTableAllocs(t *testing.T, be backend, byID *Table[int64, int64], counts *Table[uint64, uint64], byName *Table[string, int64], names []string) {
	{
		s := mustOpen(t, be, t.TempDir(), testOpts())
		ns := s.Namespace("n")
		ctx := context.Background()
		line := 0
		apply := func(fn func(tx *Tx) error) {
			t.Helper()
			line++
			if _, err := ns.Apply(ctx, del("f", 1, line), fn); err != nil {
				t.Fatal(err)
			}
		}
		// Durable values for half the keys, staged ones for the rest.
		write := func(lo, hi int) func(tx *Tx) error {
			return func(tx *Tx) error {
				for i := lo; i < hi; i++ {
					if err := byID.Put(tx, int64(i), int64(i)); err != nil {
						return err
					}
					if _, err := counts.Add(tx, uint64(i), 1); err != nil {
						return err
					}
					if _, err := byName.Add(tx, names[i], 1); err != nil {
						return err
					}
				}
				return nil
			}
		}
		apply(write(0, 8))
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		apply(write(8, 16))

		var i int
		var failed error
		calls := func(tx *Tx) {
			i++
			k := int64(i % 16)
			v, ok, err := byID.Get(tx, k)
			if err == nil && !ok {
				err = fmt.Errorf("key %d missing", k)
			}
			if err == nil {
				err = byID.Put(tx, k, v+1)
			}
			if err == nil {
				_, err = counts.Add(tx, uint64(k), 2)
			}
			if err == nil {
				_, err = byName.Update(tx, names[k], func(n int64, _ bool) (int64, error) { return n + 1, nil })
			}
			if err == nil {
				_, _, err = byName.Get(tx, names[(i+3)%16])
			}
			if err == nil {
				err = byID.Delete(tx, 1000+k) // a key that does not exist
			}
			if err != nil && failed == nil {
				failed = err
			}
		}
		var perCall float64
		apply(func(tx *Tx) error {
			calls(tx) // the staging batch's entries exist from here on
			perCall = testing.AllocsPerRun(200, func() { calls(tx) })
			return nil
		})
		if failed != nil {
			t.Fatal(failed)
		}
		if perCall != 0 {
			t.Errorf("table calls inside Apply: %v allocations per run, want 0", perCall)
		}

		var reads float64
		err := ns.View(func(tx *Tx) error {
			reads = testing.AllocsPerRun(200, func() {
				i++
				if _, _, err := byID.Get(tx, int64(i%16)); err != nil && failed == nil {
					failed = err
				}
				if _, _, err := byName.Get(tx, names[i%16]); err != nil && failed == nil {
					failed = err
				}
				if _, _, err := counts.Get(tx, uint64(i%16)); err != nil && failed == nil {
					failed = err
				}
			})
			return nil
		})
		if err != nil || failed != nil {
			t.Fatal(err, failed)
		}
		if reads != 0 {
			t.Errorf("table reads inside View: %v allocations per run, want 0", reads)
		}

		// A whole line of table calls: the Apply included.
		fn := func(tx *Tx) error { calls(tx); return failed }
		perLine := testing.AllocsPerRun(200, func() {
			line++
			if _, err := ns.Apply(ctx, del("f", 1, line), fn); err != nil && failed == nil {
				failed = err
			}
		})
		if failed != nil {
			t.Fatal(failed)
		}
		if perLine != 0 {
			t.Errorf("an Apply line of table calls: %v allocations per line, want 0", perLine)
		}
	}
}
