package framework_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/state"
	"github.com/tidemark-go/tidemark/tidemarktest"
)

// counts is a table of the group's store: a count (int64) per line.
var counts = state.NewTable("counts", state.Bytes{}, state.Int64{})

// countLines is the smallest exactly-once processor: it counts the lines of
// the orders feed per order in its group's store. The framework opened the
// store, binds it to the feed, and resumes the feed from what it holds.
type countLines struct{ st state.Store }

func (c *countLines) Start(ctx context.Context, fc *framework.Context) error {
	st, err := fc.Store()
	if err != nil {
		return err
	}
	c.st = st
	return fc.Subscribe("orders")
}

func (c *countLines) Handle(ctx context.Context, d tidemark.Delivery, line []byte) error {
	_, err := c.st.Apply(ctx, d, func(tx *state.Tx) error { // skipped if already applied
		_, err := counts.Add(tx, line, 1)
		return err
	})
	return err
}

// runOrders runs the counter over the file until the feed has settled.
func runOrders(input, data string) error {
	srv, err := framework.New(framework.Config{
		Feeds:        []framework.FeedConfig{{Name: "orders", File: &framework.FileConfig{Filename: input}}},
		Groups:       []framework.GroupConfig{{Name: "orders-agent", Processors: []string{"counter"}, Store: "bbolt:" + data}},
		UntilSettled: true, // a batch run; leave it out to tail the file until ctx is done
	}, framework.Processors{"counter": &countLines{}})
	if err != nil {
		return err
	}
	return srv.Run(context.Background())
}

// A processor that keeps its state in its group's store counts every line
// once: across restarts, and even when the store's folder is deleted
// (the feed then reads the input from its start again).
func Example_exactlyOnce() {
	dir, _ := os.MkdirTemp("", "tidemark-example")
	defer os.RemoveAll(dir)
	input, data := filepath.Join(dir, "orders.csv"), filepath.Join(dir, "state")
	_ = os.WriteFile(input, []byte("o-1\no-2\no-1\n"), 0o644)

	show := func(when string) {
		st, _ := state.OpenDir(data, nil)
		defer st.Close()
		_ = st.View(func(tx *state.Tx) error {
			a, _, _ := counts.Get(tx, []byte("o-1"))
			b, _, _ := counts.Get(tx, []byte("o-2"))
			fmt.Printf("%s: o-1 %d, o-2 %d\n", when, a, b)
			return nil
		})
	}
	if err := runOrders(input, data); err != nil {
		fmt.Println(err)
	}
	show("first run")

	f, _ := os.OpenFile(input, os.O_APPEND|os.O_WRONLY, 0)
	_, _ = f.WriteString("o-2\n")
	_ = f.Close()
	if err := runOrders(input, data); err != nil {
		fmt.Println(err)
	}
	show("after an append and a restart")

	_ = os.RemoveAll(data) // start over: the feed's pointer is ahead of an empty store
	if err := runOrders(input, data); err != nil {
		fmt.Println(err)
	}
	show("after deleting the store")
	// Output:
	// first run: o-1 2, o-2 1
	// after an append and a restart: o-1 2, o-2 2
	// after deleting the store: o-1 2, o-2 2
}

// The README's test of the smallest processor with the test kit, as
// written there.
func TestCounterIsExactlyOnce(t *testing.T) {
	cfg := tidemarktest.Config{Feed: "orders", Processors: func() framework.Processors {
		return framework.Processors{"counter": &countLines{}}
	}}
	tidemarktest.CheckExactlyOnce(t, cfg, []string{"o-1", "o-2", "o-1"}, nil, func(h *tidemarktest.Harness) any {
		var n int64
		h.View("", func(tx *state.Tx) error { n, _ = tx.Bucket("counts").GetInt64([]byte("o-1")); return nil })
		return n
	})
}

// countLinesInRuns is countLines handed the lines in runs, as the README
// shows it: a BatchHandler that applies a run with ApplyEach, each line
// its own transaction, skipped if already applied.
type countLinesInRuns struct {
	countLines
	runs *atomic.Int64 // HandleBatch calls of more than one line
}

func (c *countLinesInRuns) HandleBatch(ctx context.Context, b *framework.Batch) (int, error) {
	if b.Len() > 1 {
		c.runs.Add(1)
	}
	return c.st.ApplyEach(ctx, b.Len(), b.Delivery, func(tx *state.Tx, i int) error {
		_, err := counts.Add(tx, b.Line(i), 1)
		return err
	})
}

// The README's HandleBatch, through the test kit's restarts and crashes:
// the counts are those of one run, and the runs were runs.
func TestCounterInRunsIsExactlyOnce(t *testing.T) {
	var runs atomic.Int64
	checkCountsExactlyOnce(t, func() framework.Processor { return &countLinesInRuns{runs: &runs} })
	if runs.Load() == 0 {
		t.Fatal("HandleBatch was never handed more than one line")
	}
}

// checkCountsExactlyOnce runs the counter that newCounter makes through
// the test kit's restarts and crashes: the counts of the orders, and the
// total of lines ("lines", of a counter that keeps one), must be those of
// one run.
func checkCountsExactlyOnce(t *testing.T, newCounter func() framework.Processor) {
	t.Helper()
	cfg := tidemarktest.Config{Feed: "orders", Processors: func() framework.Processors {
		return framework.Processors{"counter": newCounter()}
	}}
	lines := []string{"o-1", "o-2", "o-1", "o-3", "o-1", "o-2", "o-4", "o-1"}
	tidemarktest.CheckExactlyOnce(t, cfg, lines, nil, func(h *tidemarktest.Harness) any {
		var n [5]int64
		h.View("", func(tx *state.Tx) error {
			for i := range 4 {
				n[i], _ = tx.Bucket("counts").GetInt64([]byte(fmt.Sprintf("o-%d", i+1)))
			}
			n[4], _ = tx.GetInt64([]byte("lines"))
			return nil
		})
		return n
	})
}

// countLinesByRun is countLines applying each run of the lines it is
// handed in one transaction (ApplyRuns), the run's count of lines added
// to a total once; a run that fails goes again line by line (ApplyEach).
type countLinesByRun struct {
	countLines
	multi *atomic.Int64 // transactions of more than one line
}

func (c *countLinesByRun) HandleBatch(ctx context.Context, b *framework.Batch) (int, error) {
	done, err := c.st.ApplyRuns(ctx, b.Len(), b.Delivery, func(tx *state.Tx, from, to int) error {
		if to-from > 1 {
			c.multi.Add(1)
		}
		for i := from; i < to; i++ {
			if _, err := counts.Add(tx, b.Line(i), 1); err != nil {
				return err
			}
		}
		_, err := tx.AddInt64([]byte("lines"), int64(to-from))
		return err
	})
	if err == nil {
		return done, nil
	}
	n, err := c.st.ApplyEach(ctx, b.Len()-done, func(i int) *tidemark.Delivery { return b.Delivery(done + i) }, func(tx *state.Tx, i int) error {
		if _, err := counts.Add(tx, b.Line(done+i), 1); err != nil {
			return err
		}
		_, err := tx.AddInt64([]byte("lines"), 1)
		return err
	})
	return done + n, err
}

// A processor that applies its runs of lines in one transaction each,
// through the test kit's restarts and crashes: the counts and the total
// are those of one run, and some transactions held several lines.
func TestCounterByRunIsExactlyOnce(t *testing.T) {
	var multi atomic.Int64
	checkCountsExactlyOnce(t, func() framework.Processor { return &countLinesByRun{multi: &multi} })
	if multi.Load() == 0 {
		t.Fatal("no transaction of ApplyRuns held more than one line")
	}
}
