package state_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/checkpoint"
	"github.com/tidemark-go/tidemark/state"
)

// A processor keeps balances in the store. A re-delivered line is skipped.
//
// A framework group's store is bound to the feed's checkpoint (see
// [state.Store.Bind]); this example has no feed, and reads where to resume
// from the store itself, so it opens the store Unbound.
func Example() {
	dir, _ := os.MkdirTemp("", "state-example")
	defer os.RemoveAll(dir)

	st, err := state.Open("bbolt:"+filepath.Join(dir, "state"), &state.Options{Unbound: true})
	if err != nil {
		log.Fatal(err)
	}
	ledger := st.Namespace("ledger")
	ctx := context.Background()
	lines := []struct {
		d       tidemark.Delivery
		account string
		amount  int64
	}{
		{tidemark.Delivery{Feed: "orders", Epoch: 1, Position: 12}, "alice", 100},
		{tidemark.Delivery{Feed: "orders", Epoch: 1, Position: 24}, "bob", 50},
		{tidemark.Delivery{Feed: "orders", Epoch: 1, Position: 12}, "alice", 100}, // re-delivered
	}
	for _, l := range lines {
		applied, err := ledger.Apply(ctx, l.d, func(tx *state.Tx) error {
			_, err := tx.Bucket("balances").AddInt64([]byte(l.account), l.amount)
			return err
		})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(l.d.Position, "applied:", applied)
	}
	if err := st.Close(); err != nil { // flushes
		log.Fatal(err)
	}

	// A tool opens the store without knowing its backend.
	st, err = state.OpenDir(filepath.Join(dir, "state"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	ledger = st.Namespace("ledger")
	last, _ := ledger.Applied("orders")
	fmt.Println("backend", st.Backend(), "applied through", last.Position)
	ledger.View(func(tx *state.Tx) error {
		return tx.Bucket("balances").ForEach(func(k, v []byte) error {
			n, _ := tx.Bucket("balances").GetInt64(k)
			fmt.Printf("%s %d\n", k, n)
			return nil
		})
	})
	// Output:
	// 12 applied: true
	// 24 applied: true
	// 12 applied: false
	// backend bbolt applied through 24
	// alice 100
	// bob 50
}

// The store declares the group's work durable on the feed's checkpoint
// after each batch commits; the processor writes no checkpoint code.
func ExampleStore_Bind() {
	dir, _ := os.MkdirTemp("", "state-example")
	defer os.RemoveAll(dir)
	st, err := state.Open("pebble:"+dir, &state.Options{BatchSize: 100})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()

	reg := checkpoint.NewSet()
	cp := reg.Hold("orders", "orders-agent")
	var finished atomic.Uint64 // the framework's queue progress, in a real server
	reg.Bind("orders", "orders-agent", func() checkpoint.Mark { return checkpoint.Mark{Count: finished.Load()} })
	st.Bind("orders", cp)

	for n := int64(1); n <= 250; n++ {
		d := tidemark.Delivery{Feed: "orders", Epoch: 1, Position: n * 10}
		if _, err := st.Apply(context.Background(), d, func(tx *state.Tx) error {
			_, err := tx.AddInt64([]byte("lines"), 1)
			return err
		}); err != nil {
			log.Fatal(err)
		}
		finished.Add(1) // the handler returned
	}
	if err := st.Flush(context.Background()); err != nil {
		log.Fatal(err)
	}
	m, held := cp.Durable()
	fmt.Println("durable through", m.Count, "held", held)
	// Output: durable through 250 held true
}

// Output lines are committed with the state: exactly once, even across a
// kill. (Unbound: no feed here; see Example.)
func ExampleTx_Output() {
	dir, _ := os.MkdirTemp("", "state-example")
	defer os.RemoveAll(dir)
	st, err := state.Open("bbolt:"+dir, &state.Options{Unbound: true})
	if err != nil {
		log.Fatal(err)
	}
	for n := int64(1); n <= 3; n++ {
		d := tidemark.Delivery{Feed: "orders", Epoch: 1, Position: n * 10}
		st.Apply(context.Background(), d, func(tx *state.Tx) error {
			_, err := fmt.Fprintf(tx.Output("out.csv"), "line,%d\n", n)
			return err
		})
	}
	st.Close()
	b, _ := os.ReadFile(filepath.Join(dir, "out.csv"))
	fmt.Print(string(b))
	// Output:
	// line,1
	// line,2
	// line,3
}

// The open errors are sentinels, for errors.Is.
func ExampleOpen_errors() {
	_, err := state.Open("lmdb:/tmp/x", nil)
	fmt.Println(errors.Is(err, state.ErrUnknownBackend))
	_, err = state.OpenDir(os.TempDir(), nil)
	fmt.Println(errors.Is(err, state.ErrNotStore))
	// Output:
	// true
	// true
}

// A Counter is a key that every line adds to: the count of lines applied
// and the sum of their amounts, beside each account's balance.
func ExampleCounter() {
	dir, _ := os.MkdirTemp("", "state-counter")
	defer os.RemoveAll(dir)
	st, err := state.Open("pebble:"+filepath.Join(dir, "state"), &state.Options{Unbound: true})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	var (
		balances = state.NewTable("balances", state.String{}, state.Int64{})
		totals   = state.NewTable("", state.String{}, state.Int64{})
		lines    = totals.Counter("lines")
		sum      = totals.Counter("sum")
	)
	ns := st.Namespace("ledger")
	for i, amount := range []int64{100, -30, 55} {
		d := tidemark.Delivery{Feed: "orders", Epoch: 1, Position: int64(i+1) * 10}
		if _, err := ns.Apply(context.Background(), d, func(tx *state.Tx) error {
			if _, err := balances.Add(tx, "alice", amount); err != nil {
				return err
			}
			if _, err := lines.Add(tx, 1); err != nil {
				return err
			}
			_, err := sum.Add(tx, amount)
			return err
		}); err != nil {
			log.Fatal(err)
		}
	}
	ns.View(func(tx *state.Tx) error {
		n, _ := lines.Get(tx)
		total, _, _ := totals.Get(tx, "sum") // the table reads the same value
		fmt.Println("lines", n, "sum", total)
		return nil
	})
	// Output:
	// lines 3 sum 125
}

// A processor handed its lines in batches applies them with ApplyRuns: one
// transaction for each run of them, in which it writes the count of the
// run's lines and the sum of their amounts once. A re-delivered line is
// never handed to the function. (When a run fails, nothing of it is
// staged: a processor applies the rest again with ApplyEach, line by line,
// to keep the lines before the one that fails; see ApplyRuns.)
func ExampleNamespace_applyRuns() {
	dir, _ := os.MkdirTemp("", "state-runs")
	defer os.RemoveAll(dir)
	st, err := state.Open("bbolt:"+filepath.Join(dir, "state"), &state.Options{Unbound: true})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	var (
		balances = state.NewTable("balances", state.String{}, state.Int64{})
		totals   = state.NewTable("", state.String{}, state.Int64{})
		lines    = totals.Counter("lines")
		sum      = totals.Counter("sum")
	)
	type line struct {
		account string
		amount  int64
	}
	ls := []line{{"alice", 100}, {"bob", -30}, {"alice", 55}, {"bob", 40}}
	ds := make([]tidemark.Delivery, len(ls))
	for i := range ds {
		ds[i] = tidemark.Delivery{Feed: "orders", Epoch: 1, Position: int64(i+1) * 10}
	}
	ns := st.Namespace("ledger")
	apply := func(from, to int) {
		at := func(i int) *tidemark.Delivery { return &ds[from+i] }
		_, err := ns.ApplyRuns(context.Background(), to-from, at, func(tx *state.Tx, i, j int) error {
			var total int64
			for _, l := range ls[from+i : from+j] {
				if _, err := balances.Add(tx, l.account, l.amount); err != nil {
					return err
				}
				total += l.amount
			}
			fmt.Printf("lines %d to %d in one transaction, up to position %d\n", from+i+1, from+j, tx.Delivery().Position)
			if _, err := lines.Add(tx, int64(j-i)); err != nil {
				return err
			}
			_, err := sum.Add(tx, total)
			return err
		})
		if err != nil {
			log.Fatal(err)
		}
	}
	apply(0, 2)
	apply(0, 4) // lines 1 and 2 again: re-deliveries, skipped
	ns.View(func(tx *state.Tx) error {
		n, _ := lines.Get(tx)
		total, _ := sum.Get(tx)
		alice, _, _ := balances.Get(tx, "alice")
		fmt.Println("lines", n, "sum", total, "alice", alice)
		return nil
	})
	// Output:
	// lines 1 to 2 in one transaction, up to position 20
	// lines 3 to 4 in one transaction, up to position 40
	// lines 4 sum 165 alice 155
}

// A program that must stay under 64 MiB plus its store's cache budget
// sets the Go runtime's soft memory limit before it opens the store, to
// what MemoryLimit gives (unless GOMEMLIMIT sets one): the store then
// counts what it keeps live once, and caches twice the values. (A Pebble
// store's limit, in a build with cgo, also leaves out Pebble's block cache
// and memtables: 64 MiB at this budget.)
func ExampleMemoryLimit() {
	config, opts := "bbolt:/var/lib/app/state", &state.Options{CacheSize: 32 << 20}
	limit, err := state.MemoryLimit(config, opts)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: %d MiB\n", config, limit>>20)
	// In the program: debug.SetMemoryLimit(limit), then state.Open(config, opts).
	// Output:
	// bbolt:/var/lib/app/state: 88 MiB
}
