package state

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/tidemark-go/tidemark"
)

// errLine is the error of the function of a line the model fails.
var errLine = errors.New("the line's function failed")

// eachLine is what the model applies for one delivered line n: a count,
// a sum, a key of seven, and the line's number appended to an output. A
// line the model fails (fails(n)) writes first, then fails: nothing of it
// may stay.
func eachLine(tx *Tx, n int64, fail bool) error {
	if _, err := tx.AddInt64([]byte("count"), 1); err != nil {
		return err
	}
	if _, err := tx.AddInt64([]byte("sum"), n); err != nil {
		return err
	}
	if _, err := tx.Bucket("mod").AddInt64([]byte{byte('a' + n%7)}, n); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(tx.Output("out"), "%d\n", n); err != nil {
		return err
	}
	if fail {
		return errLine
	}
	return nil
}

// eachState is what a model run leaves in a store: the keys eachLine
// writes, the recorded position, the stats, the committed output.
type eachState struct {
	count, sum       int64
	mod              [7]int64
	applied          tidemark.Lineage
	appliedN, skippd uint64
	out              string
}

func readEachState(t *testing.T, be backend, dir string, s Store) eachState {
	t.Helper()
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var st eachState
	st.count, st.sum = getInt(t, s, "count"), getInt(t, s, "sum")
	err := s.View(func(tx *Tx) error {
		for i := range st.mod {
			v, err := tx.Bucket("mod").GetInt64([]byte{byte('a' + i)})
			if err != nil {
				return err
			}
			st.mod[i] = v
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	st.applied, _ = s.Applied("f")
	stats := s.Stats()
	st.appliedN, st.skippd = stats.Applied, stats.Skipped
	st.out = string(readOutput(t, be, dir, "out"))
	return st
}

// withRedeliveries returns n deliveries of feed "f" in epoch 1: mostly
// the next line, and about one time in every a step back of 1 to 5 lines
// (re-deliveries); and the line after the last.
func withRedeliveries(rng *rand.Rand, n, every int) ([]tidemark.Delivery, int) {
	var ds []tidemark.Delivery
	next := 1
	for len(ds) < n {
		if rng.IntN(every) == 0 && next > 5 {
			back := 1 + rng.IntN(5)
			for k := next - back; k < next; k++ {
				ds = append(ds, del("f", 1, k))
			}
			continue
		}
		ds = append(ds, del("f", 1, next))
		next++
	}
	return ds, next
}

// openModelPair opens two stores of be with copies of o, each in a folder
// of its own with the output "out" declared: one for the model's Apply
// calls, one for the calls it is checked against.
func openModelPair(t *testing.T, be backend, o *Options) (a, b Store, dirA, dirB string) {
	t.Helper()
	dirA, dirB = t.TempDir(), t.TempDir()
	oa, ob := *o, *o
	a, b = mustOpen(t, be, dirA, &oa), mustOpen(t, be, dirB, &ob)
	for _, s := range []Store{a, b} {
		if _, err := s.Output("out"); err != nil {
			t.Fatal(err)
		}
	}
	return a, b, dirA, dirB
}

// applyModel applies ds to s with Apply, one call a line, the function of
// each eachLine (failing where fails says), appends to ran the lines whose
// function ran, and returns how many failed.
func applyModel(t *testing.T, s Store, ds []tidemark.Delivery, fails func(d *tidemark.Delivery) bool, ran *[]int64) int {
	t.Helper()
	failed := 0
	for i := range ds {
		d := ds[i]
		n := d.Position / lineLen
		_, err := s.Apply(context.Background(), d, func(tx *Tx) error {
			if ran != nil {
				*ran = append(*ran, n)
			}
			return eachLine(tx, n, fails(&d))
		})
		if errors.Is(err, errLine) {
			failed++
		} else if err != nil {
			t.Fatalf("Apply of line %d: %v", n, err)
		}
	}
	return failed
}

// applyCalls applies ds to s in calls of apply of 1 to longest lines,
// as a caller whose failure policy goes on after a line that fails: a
// call must apply every line of it, or fail on a line that fails (its
// index returned with errLine), after which the next call begins with the
// line after it. One call in about ten is followed by a Flush. It returns
// how many calls, and how many lines failed.
func applyCalls(t *testing.T, rng *rand.Rand, s Store, ds []tidemark.Delivery, longest int, fails func(d *tidemark.Delivery) bool, apply func(call []tidemark.Delivery) (int, error)) (calls, failed int) {
	t.Helper()
	for i := 0; i < len(ds); {
		call := ds[i:min(len(ds), i+1+rng.IntN(longest))]
		calls++
		done, err := apply(call)
		switch {
		case err == nil && done == len(call):
			i += done
		case errors.Is(err, errLine) && done < len(call) && fails(&call[done]):
			// The failed line is not applied; the caller goes on after it.
			failed++
			i += done + 1
		default:
			t.Fatalf("%d lines from line %d: done %d, err %v", len(call), call[0].Position/lineLen, done, err)
		}
		if rng.IntN(10) == 0 {
			if err := s.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
	return calls, failed
}

// TestApplyEachMatchesApply runs the same deliveries through Apply, one
// call a line, and through ApplyEach in runs of random length, into two
// stores of each backend, and checks that they end alike: the state, the
// recorded position, the counts of applied and skipped lines, the output,
// and the lines whose function ran. The deliveries go forward with
// re-deliveries of earlier lines (a restart's), lines whose function
// fails after writing (the caller goes on after them, as a failure policy
// that skips a line does), and batches small enough that runs are cut in
// their middle.
func TestApplyEachMatchesApply(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		for seed := range uint64(4) {
			t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 17))
				ds, _ := withRedeliveries(rng, 600, 20)
				fails := func(d *tidemark.Delivery) bool { return (d.Position/lineLen)%13 == 5 }
				o := testOpts()
				o.BatchSize = 7 + int(seed)
				a, b, dirA, dirB := openModelPair(t, be, o)
				ctx := context.Background()

				// The model: a line past the recorded position is applied
				// unless its function fails, which leaves the position.
				var want []int64
				var last int64
				for i := range ds {
					if p := ds[i].Position; p > last && !fails(&ds[i]) {
						want = append(want, p/lineLen)
						last = p
					}
				}

				var ranA, ranB []int64
				failedA := applyModel(t, a, ds, fails, &ranA)

				calls, failedB := applyCalls(t, rng, b, ds, 40, fails, func(run []tidemark.Delivery) (int, error) {
					return b.ApplyEach(ctx, len(run), func(j int) *tidemark.Delivery { return &run[j] }, func(tx *Tx, j int) error {
						n := run[j].Position / lineLen
						ranB = append(ranB, n)
						return eachLine(tx, n, fails(&run[j]))
					})
				})
				if calls >= len(ds)/2 {
					t.Fatalf("%d calls for %d lines: the runs are not runs", calls, len(ds))
				}

				if failedA != failedB {
					t.Fatalf("%d lines failed with Apply, %d with ApplyEach", failedA, failedB)
				}
				if fmt.Sprint(ranA) != fmt.Sprint(ranB) {
					t.Fatalf("functions ran for lines\n%v with Apply,\n%v with ApplyEach", ranA, ranB)
				}
				sa, sb := readEachState(t, be, dirA, a), readEachState(t, be, dirB, b)
				if sa != sb {
					t.Fatalf("Apply left %+v,\nApplyEach %+v", sa, sb)
				}
				var wantOut string
				var wantSum int64
				for _, n := range want {
					wantOut += fmt.Sprintf("%d\n", n)
					wantSum += n
				}
				if sb.count != int64(len(want)) || sb.sum != wantSum || sb.out != wantOut || sb.applied.Position != last {
					t.Fatalf("ApplyEach left count %d, sum %d, position %d, output %q; the model %d, %d, %d, %q",
						sb.count, sb.sum, sb.applied.Position, sb.out, len(want), wantSum, last, wantOut)
				}
				if sa.skippd == 0 || failedA == 0 {
					t.Fatalf("the model skipped %d lines and applied %d of %d functions run: it must skip and fail some", sa.skippd, sa.count, len(ranA))
				}
			})
		}
	})
}

// TestApplyEachPanic: a function that panics in the middle of a run
// leaves the lines before it staged and nothing of its own, and the store
// serves the next call (the token is released).
func TestApplyEachPanic(t *testing.T) {
	forEachLocalBackend(t, func(t *testing.T, be backend) {
		dir := t.TempDir()
		s := mustOpen(t, be, dir, testOpts())
		if _, err := s.Output("out"); err != nil {
			t.Fatal(err)
		}
		ds := []tidemark.Delivery{del("f", 1, 1), del("f", 1, 2), del("f", 1, 3), del("f", 1, 4)}
		func() {
			defer func() {
				if r := recover(); r != "line 3" {
					t.Fatalf("recovered %v, want the panic of line 3", r)
				}
			}()
			_, _ = s.ApplyEach(context.Background(), len(ds), func(i int) *tidemark.Delivery { return &ds[i] }, func(tx *Tx, i int) error {
				n := ds[i].Position / lineLen
				if err := eachLine(tx, n, false); err != nil {
					return err
				}
				if n == 3 {
					panic("line 3")
				}
				return nil
			})
		}()
		// The lines before the panic are staged with their position: a
		// batch that held their changes without it would apply them
		// again after a restart.
		wantDurable(t, s, 2, "after a panic on line 3")
		// Lines 3 and 4 again, in a new call: the token was released.
		rest := ds[2:]
		done, err := s.ApplyEach(context.Background(), len(rest), func(i int) *tidemark.Delivery { return &rest[i] }, func(tx *Tx, i int) error {
			return eachLine(tx, rest[i].Position/lineLen, false)
		})
		if done != 2 || err != nil {
			t.Fatalf("ApplyEach after the panic: done %d, err %v", done, err)
		}
		st := readEachState(t, be, dir, s)
		if st.count != 4 || st.sum != 10 || st.out != "1\n2\n3\n4\n" || st.applied.Position != 4*lineLen {
			t.Fatalf("after a panic on line 3 and lines 3 and 4 again: %+v", st)
		}
	})
}

// wantDurable flushes s and fails t unless lines 1 to n of the model are
// durable (its position and count), and no more: what a test expects
// after what.
func wantDurable(t *testing.T, s Store, n int, after string) {
	t.Helper()
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if a, _ := s.Applied("f"); a.Position != int64(n)*lineLen || getInt(t, s, "count") != int64(n) {
		t.Fatalf("%s: position %d and count %d durable, want line %d's (%d) and %d", after, a.Position, getInt(t, s, "count"), n, int64(n)*lineLen, n)
	}
}

// TestApplyEachEdges: no lines is nothing; a run that is all
// re-deliveries calls no function; a store that is closed fails the
// first line.
func TestApplyEachEdges(t *testing.T) {
	forEachLocalBackend(t, func(t *testing.T, be backend) {
		s := mustOpen(t, be, t.TempDir(), testOpts())
		ctx := context.Background()
		if done, err := s.ApplyEach(ctx, 0, nil, nil); done != 0 || err != nil {
			t.Fatalf("no lines: %d, %v", done, err)
		}
		ds := []tidemark.Delivery{del("f", 1, 1), del("f", 1, 2)}
		at := func(i int) *tidemark.Delivery { return &ds[i] }
		ran := 0
		fn := func(tx *Tx, i int) error { ran++; _, err := tx.AddInt64([]byte("count"), 1); return err }
		if done, err := s.ApplyEach(ctx, 2, at, fn); done != 2 || err != nil || ran != 2 {
			t.Fatalf("two lines: done %d, err %v, %d functions ran", done, err, ran)
		}
		if done, err := s.ApplyEach(ctx, 2, at, fn); done != 2 || err != nil || ran != 2 {
			t.Fatalf("the two lines again: done %d, err %v, %d functions ran (want none more)", done, err, ran)
		}
		if st := s.Stats(); st.Applied != 2 || st.Skipped != 2 {
			t.Fatalf("stats %+v, want 2 applied and 2 skipped", st)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		ds = []tidemark.Delivery{del("f", 1, 3)}
		if done, err := s.ApplyEach(ctx, 1, at, fn); done != 0 || !errors.Is(err, ErrClosed) {
			t.Fatalf("after Close: done %d, err %v, want 0 and ErrClosed", done, err)
		}
	})
}
