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

// openModel opens a store of be in a new folder with the output "out"
// declared, and batches of batch deliveries (0: testOpts'), for a test of
// the model's lines (eachLine); it returns the store and its folder.
func openModel(t *testing.T, be backend, batch int) (Store, string) {
	t.Helper()
	dir := t.TempDir()
	o := testOpts()
	if batch > 0 {
		o.BatchSize, o.MaxBatchSize = batch, batch
	}
	s := mustOpen(t, be, dir, o)
	if _, err := s.Output("out"); err != nil {
		t.Fatal(err)
	}
	return s, dir
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
		s, dir := openModel(t, be, 0)
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

// applyRunsThenEach applies ds to s as a processor that applies its lines
// in runs does: with ApplyRuns, and, when a run fails, the lines from the
// run's first on with ApplyEach, which fails on the line that fails and
// keeps the lines before it. It returns how many lines went through and
// the error of the line that failed, as ApplyEach returns them; ran counts
// the lines each function was called for, runs the calls of ApplyRuns's
// function.
func applyRunsThenEach(ctx context.Context, s Namespace, ds []tidemark.Delivery, fn func(tx *Tx, i int) error, ran, runs *int) (int, error) {
	at := func(i int) *tidemark.Delivery { return &ds[i] }
	done, err := s.ApplyRuns(ctx, len(ds), at, func(tx *Tx, from, to int) error {
		*runs++
		for i := from; i < to; i++ {
			*ran++
			if err := fn(tx, i); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		return done, nil
	}
	rest := ds[done:]
	n, err := s.ApplyEach(ctx, len(rest), func(i int) *tidemark.Delivery { return &rest[i] }, func(tx *Tx, i int) error {
		*ran++
		return fn(tx, done+i)
	})
	return done + n, err
}

// TestApplyRunsMatchesApply runs the same deliveries through Apply, one
// call a line, and through ApplyRuns (with ApplyEach after a run that
// fails) in calls of random length, into two stores of each backend, and
// checks that they end alike: the state, the recorded position, the
// counts of applied and skipped lines, the output. The deliveries go
// forward with re-deliveries of earlier lines, lines whose function fails
// after writing (the caller goes on after them), and batches small enough
// that the calls are cut into several runs. Each run's transaction is
// its last line's (Tx.Delivery), and no run is longer than the staging
// batch takes.
func TestApplyRunsMatchesApply(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		for seed := range uint64(4) {
			t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 29))
				ds, next := withRedeliveries(rng, 800, 25)
				fails := func(d *tidemark.Delivery) bool { return (d.Position/lineLen)%31 == 7 }
				batch := 9 + int(seed)
				o := testOpts()
				o.BatchSize, o.MaxBatchSize = batch, batch
				a, b, dirA, dirB := openModelPair(t, be, o)
				ctx := context.Background()
				failedA := applyModel(t, a, ds, fails, nil)

				ran, runs, longest := 0, 0, 0
				calls, failedB := applyCalls(t, rng, b, ds, 60, fails, func(call []tidemark.Delivery) (int, error) {
					return applyRunsThenEach(ctx, b, call, func(tx *Tx, j int) error {
						return eachLine(tx, call[j].Position/lineLen, fails(&call[j]))
					}, &ran, &runs)
				})
				// Each run's length and transaction, from a call of its own.
				last := func() int64 { p, _ := b.Applied("f"); return p.Position }
				if err := b.Flush(ctx); err != nil {
					t.Fatal(err)
				}
				more := make([]tidemark.Delivery, 3*batch)
				for k := range more {
					more[k] = del("f", 1, next+k)
				}
				_, err := b.ApplyRuns(ctx, len(more), func(i int) *tidemark.Delivery { return &more[i] }, func(tx *Tx, from, to int) error {
					longest = max(longest, to-from)
					if d := tx.Delivery(); d != more[to-1] {
						return fmt.Errorf("the run of lines %d to %d has the delivery %+v, want its last line's %+v", from, to-1, d, more[to-1])
					}
					for k := from; k < to; k++ {
						if err := eachLine(tx, more[k].Position/lineLen, false); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				if longest != batch {
					t.Fatalf("the longest run of %d lines after a flush was %d lines, want the batch's %d", len(more), longest, batch)
				}
				applyModel(t, a, more, func(*tidemark.Delivery) bool { return false }, nil)

				if runs >= calls+len(ds)/batch*2 || runs*3 >= len(ds) {
					t.Fatalf("%d runs in %d calls of %d lines: the runs are not runs", runs, calls, len(ds))
				}
				if failedA != failedB {
					t.Fatalf("%d lines failed with Apply, %d with ApplyRuns", failedA, failedB)
				}
				sa, sb := readEachState(t, be, dirA, a), readEachState(t, be, dirB, b)
				if sa != sb {
					t.Fatalf("Apply left %+v,\nApplyRuns %+v", sa, sb)
				}
				if sa.skippd == 0 || failedA == 0 || last() != more[len(more)-1].Position {
					t.Fatalf("the model skipped %d lines, failed %d, ended at %d: it must skip and fail some, and end at %d", sa.skippd, failedA, last(), more[len(more)-1].Position)
				}
			})
		}
	})
}

// TestApplyRunsSplits: a run is lines of one feed, file, epoch and origin
// in increasing positions; a re-delivery is skipped between runs; a line
// without an epoch is a run of its own, even with a position after the
// line before; the files of a set are runs apart, each with its record,
// and so are lines of an epoch on another origin.
func TestApplyRunsSplits(t *testing.T) {
	forEachLocalBackend(t, func(t *testing.T, be backend) {
		s := mustOpen(t, be, t.TempDir(), testOpts())
		ctx := context.Background()
		o1 := &tidemark.Origin{Identity: tidemark.Identity{Dev: 1, Ino: 7}}
		o2 := &tidemark.Origin{Identity: tidemark.Identity{Dev: 1, Ino: 8}}
		ds := []tidemark.Delivery{
			del("f", 1, 1), del("f", 1, 2), del("f", 1, 3),
			del("g", 1, 1), del("g", 1, 2),
			del("f", 1, 2), // a re-delivery
			del("f", 1, 4), del("f", 1, 5),
			del("f", 1, 5), del("f", 1, 4), // re-deliveries
			{Feed: "f", Position: 5 * lineLen}, {Feed: "f", Position: 6 * lineLen}, // no epoch
			del("f", 1, 6),
			// Two files of a set: a record each.
			{Feed: "s", File: "a.log", Epoch: 1, Position: lineLen}, {Feed: "s", File: "a.log", Epoch: 1, Position: 2 * lineLen},
			{Feed: "s", File: "b.log", Epoch: 1, Position: 3 * lineLen},
			// The same epoch opened on another origin: a run apart.
			{Feed: "o", Epoch: 1, Position: lineLen, Origin: o1}, {Feed: "o", Epoch: 1, Position: 2 * lineLen, Origin: o1},
			{Feed: "o", Epoch: 1, Position: 3 * lineLen, Origin: o2},
		}
		var got []string
		done, err := s.ApplyRuns(ctx, len(ds), func(i int) *tidemark.Delivery { return &ds[i] }, func(tx *Tx, from, to int) error {
			got = append(got, fmt.Sprintf("%d-%d", from, to-1))
			_, err := tx.AddInt64([]byte("count"), int64(to-from))
			return err
		})
		if done != len(ds) || err != nil {
			t.Fatalf("done %d, err %v", done, err)
		}
		if want := "[0-2 3-4 6-7 10-10 11-11 12-12 13-14 15-15 16-17 18-18]"; fmt.Sprint(got) != want {
			t.Fatalf("runs %v, want %s", got, want)
		}
		if st := s.Stats(); st.Applied != 16 || st.Skipped != 3 || getInt(t, s, "count") != 16 {
			t.Fatalf("stats %+v, count %d: want 16 applied, 3 skipped, count 16", st, getInt(t, s, "count"))
		}
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if f, _ := s.Applied("f"); f.Position != 6*lineLen {
			t.Fatalf("feed f at %d, want %d", f.Position, 6*lineLen)
		}
		if g, _ := s.Applied("g"); g.Position != 2*lineLen {
			t.Fatalf("feed g at %d, want %d", g.Position, 2*lineLen)
		}
		files := map[string]int64{}
		for _, l := range s.AppliedAll("s") {
			files[l.File] = l.Position
		}
		if files["a.log"] != 2*lineLen || files["b.log"] != 3*lineLen {
			t.Fatalf("the set's files at %v, want a.log at %d and b.log at %d", files, 2*lineLen, 3*lineLen)
		}
	})
}

// TestApplyRunsSync: with Options.Sync every line is a run of its own,
// durable when ApplyRuns goes on to the next.
func TestApplyRunsSync(t *testing.T) {
	forEachLocalBackend(t, func(t *testing.T, be backend) {
		o := testOpts()
		o.Sync = true
		s := mustOpen(t, be, t.TempDir(), o)
		ds := []tidemark.Delivery{del("f", 1, 1), del("f", 1, 2), del("f", 1, 3), del("f", 1, 4)}
		runs := 0
		done, err := s.ApplyRuns(context.Background(), len(ds), func(i int) *tidemark.Delivery { return &ds[i] }, func(tx *Tx, from, to int) error {
			runs++
			if to != from+1 {
				return fmt.Errorf("a run of lines %d to %d under Sync", from, to-1)
			}
			_, err := tx.AddInt64([]byte("count"), 1)
			return err
		})
		if done != len(ds) || err != nil || runs != len(ds) {
			t.Fatalf("done %d, err %v, %d runs", done, err, runs)
		}
		if p, _ := s.Applied("f"); p.Position != 4*lineLen {
			t.Fatalf("%d durable after ApplyRuns returned under Sync, want %d", p.Position, 4*lineLen)
		}
	})
}

// TestApplyRunsFailure: a run whose function fails (or writes what the
// backend refuses) leaves nothing of itself staged, not even the lines
// before the one that failed; the runs before it stay; ApplyRuns returns
// the run's first line.
func TestApplyRunsFailure(t *testing.T) {
	forEachLocalBackend(t, func(t *testing.T, be backend) {
		s, dir := openModel(t, be, 3)
		ctx := context.Background()
		ds := make([]tidemark.Delivery, 6)
		for i := range ds {
			ds[i] = del("f", 1, i+1)
		}
		at := func(i int) *tidemark.Delivery { return &ds[i] }
		done, err := s.ApplyRuns(ctx, len(ds), at, func(tx *Tx, from, to int) error {
			for i := from; i < to; i++ {
				if err := eachLine(tx, ds[i].Position/lineLen, i == 4); err != nil {
					return err
				}
			}
			return nil
		})
		if done != 3 || !errors.Is(err, errLine) {
			t.Fatalf("line 5 fails: done %d, err %v; want 3 (the failed run's first line) and the line's error", done, err)
		}
		st := readEachState(t, be, dir, s)
		if st.count != 3 || st.sum != 6 || st.out != "1\n2\n3\n" || st.applied.Position != 3*lineLen || st.appliedN != 3 {
			t.Fatalf("after the second run failed: %+v, want lines 1 to 3 only", st)
		}

		// A key the backend cannot hold refuses the run, even when the
		// function goes on.
		maxKey, _ := s.(*nsStore).c.rawEngine().limits()
		huge := make([]byte, maxKey+1)
		rest := ds[3:]
		done, err = s.ApplyRuns(ctx, len(rest), func(i int) *tidemark.Delivery { return &rest[i] }, func(tx *Tx, from, to int) error {
			for i := from; i < to; i++ {
				if err := eachLine(tx, rest[i].Position/lineLen, false); err != nil {
					return err
				}
				if i == 1 {
					_ = tx.Put(huge, []byte("v"))
				}
			}
			return nil
		})
		if done != 0 || !errors.Is(err, ErrTooLarge) {
			t.Fatalf("a key too large in the run: done %d, err %v; want 0 and ErrTooLarge", done, err)
		}
		if st := readEachState(t, be, dir, s); st.count != 3 || st.out != "1\n2\n3\n" {
			t.Fatalf("after a refused run: %+v", st)
		}
	})
}

// TestApplyRunsPanic: a function that panics leaves the runs before it
// staged and nothing of its own, and the store serves the next call.
func TestApplyRunsPanic(t *testing.T) {
	forEachLocalBackend(t, func(t *testing.T, be backend) {
		s, dir := openModel(t, be, 2)
		ds := []tidemark.Delivery{del("f", 1, 1), del("f", 1, 2), del("f", 1, 3), del("f", 1, 4)}
		at := func(i int) *tidemark.Delivery { return &ds[i] }
		func() {
			defer func() {
				if r := recover(); r != "line 3" {
					t.Fatalf("recovered %v, want the panic of line 3", r)
				}
			}()
			_, _ = s.ApplyRuns(context.Background(), len(ds), at, func(tx *Tx, from, to int) error {
				for i := from; i < to; i++ {
					if err := eachLine(tx, ds[i].Position/lineLen, false); err != nil {
						return err
					}
					if i == 2 {
						panic("line 3")
					}
				}
				return nil
			})
		}()
		wantDurable(t, s, 2, "after a panic in the run of lines 3 and 4")
		done, err := s.ApplyRuns(context.Background(), len(ds), at, func(tx *Tx, from, to int) error {
			for i := from; i < to; i++ {
				if err := eachLine(tx, ds[i].Position/lineLen, false); err != nil {
					return err
				}
			}
			return nil
		})
		if done != 4 || err != nil {
			t.Fatalf("ApplyRuns after the panic: done %d, err %v", done, err)
		}
		if st := readEachState(t, be, dir, s); st.count != 4 || st.sum != 10 || st.out != "1\n2\n3\n4\n" || st.skippd != 2 {
			t.Fatalf("after a panic on line 3 and the four lines again: %+v", st)
		}
	})
}

// TestApplyRunsEdges: no lines is nothing; a store that is closed fails
// the first line.
func TestApplyRunsEdges(t *testing.T) {
	forEachLocalBackend(t, func(t *testing.T, be backend) {
		s := mustOpen(t, be, t.TempDir(), testOpts())
		ctx := context.Background()
		if done, err := s.ApplyRuns(ctx, 0, nil, nil); done != 0 || err != nil {
			t.Fatalf("no lines: %d, %v", done, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		ds := []tidemark.Delivery{del("f", 1, 1)}
		done, err := s.ApplyRuns(ctx, 1, func(i int) *tidemark.Delivery { return &ds[i] }, func(tx *Tx, from, to int) error { return nil })
		if done != 0 || !errors.Is(err, ErrClosed) {
			t.Fatalf("after Close: done %d, err %v, want 0 and ErrClosed", done, err)
		}
	})
}

// TestApplyRunsMatchesApplyAcrossFeeds is TestApplyRunsMatchesApply with
// the lines of two feeds interleaved, new epochs whose positions start
// again from the first line (a rotation), lines without an epoch, and
// re-deliveries: every place a run must end. The two stores must end
// alike, both feeds' records included.
func TestApplyRunsMatchesApplyAcrossFeeds(t *testing.T) {
	forEachLocalBackend(t, func(t *testing.T, be backend) {
		for seed := range uint64(3) {
			t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 41))
				type feedPos struct {
					epoch uint64
					next  int
				}
				feeds := map[string]*feedPos{"f": {1, 1}, "g": {1, 1}}
				cur := "f"
				var ds []tidemark.Delivery
				for len(ds) < 900 {
					if rng.IntN(12) == 0 {
						cur = map[string]string{"f": "g", "g": "f"}[cur]
					}
					fp := feeds[cur]
					switch r := rng.IntN(60); {
					case r == 0:
						fp.epoch, fp.next = fp.epoch+1, 1
					case r == 1:
						ds = append(ds, tidemark.Delivery{Feed: cur, Position: int64(fp.next) * lineLen})
						continue
					case r < 4 && fp.next > 4:
						for k := fp.next - 1 - rng.IntN(3); k < fp.next; k++ {
							ds = append(ds, del(cur, fp.epoch, k))
						}
						continue
					}
					ds = append(ds, del(cur, fp.epoch, fp.next))
					fp.next++
				}
				fails := func(d *tidemark.Delivery) bool { return (d.Position/lineLen)%37 == 11 }
				o := testOpts()
				o.BatchSize, o.MaxBatchSize = 13+int(seed), 13+int(seed)
				a, b, dirA, dirB := openModelPair(t, be, o)
				ctx := context.Background()
				failedA := applyModel(t, a, ds, fails, nil)
				ran, runs := 0, 0
				_, failedB := applyCalls(t, rng, b, ds, 80, fails, func(call []tidemark.Delivery) (int, error) {
					return applyRunsThenEach(ctx, b, call, func(tx *Tx, j int) error {
						return eachLine(tx, call[j].Position/lineLen, fails(&call[j]))
					}, &ran, &runs)
				})
				if failedA != failedB {
					t.Fatalf("%d lines failed with Apply, %d with ApplyRuns", failedA, failedB)
				}
				if runs*2 >= len(ds) {
					t.Fatalf("%d runs for %d lines: the runs are not runs", runs, len(ds))
				}
				sa, sb := readEachState(t, be, dirA, a), readEachState(t, be, dirB, b)
				if sa != sb {
					t.Fatalf("Apply left %+v,\nApplyRuns %+v", sa, sb)
				}
				ga, _ := a.Applied("g")
				gb, _ := b.Applied("g")
				if ga != gb {
					t.Fatalf("feed g: Apply left %+v, ApplyRuns %+v", ga, gb)
				}
				if sa.skippd == 0 || failedA == 0 || sa.applied.Epoch < 2 {
					t.Fatalf("the model skipped %d lines, failed %d, reached epoch %d of feed f: it must skip, fail and rotate", sa.skippd, failedA, sa.applied.Epoch)
				}
			})
		}
	})
}

// TestApplyRunsKeepToTheKeyCap: a run takes no more lines than the keys
// the backend's commit has memory for leave room for in the staging batch
// (bbolt's keyCap: about 3,000 random keys with the default budget of a
// large store), so that a batch of lines that each change a key of their
// own is cut, as with ApplyEach, at the cap and not a run past it.
func TestApplyRunsKeepToTheKeyCap(t *testing.T) {
	s := mustOpen(t, backendNamed(Bolt), t.TempDir(), testOpts())
	c := s.(*nsStore).c
	const keyCap = 40
	c.keyCap.Store(keyCap)
	ds := make([]tidemark.Delivery, 200)
	for i := range ds {
		ds[i] = del("f", 1, i+1)
	}
	first := 0
	_, err := s.ApplyRuns(context.Background(), len(ds), func(i int) *tidemark.Delivery { return &ds[i] }, func(tx *Tx, from, to int) error {
		if from == 0 {
			first = to
		}
		for i := from; i < to; i++ {
			if err := tx.Put(fmt.Appendf(nil, "key-%d", i), []byte("v")); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if first > keyCap {
		t.Fatalf("the first run took %d lines of a new key each, past the cap of %d keys", first, keyCap)
	}
}
