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
	cfg := tidemarktest.Config{Feed: "orders", Processors: func() framework.Processors {
		return framework.Processors{"counter": &countLinesInRuns{runs: &runs}}
	}}
	lines := []string{"o-1", "o-2", "o-1", "o-3", "o-1", "o-2", "o-4", "o-1"}
	tidemarktest.CheckExactlyOnce(t, cfg, lines, nil, func(h *tidemarktest.Harness) any {
		var n [4]int64
		h.View("", func(tx *state.Tx) error {
			for i := range n {
				n[i], _ = tx.Bucket("counts").GetInt64([]byte(fmt.Sprintf("o-%d", i+1)))
			}
			return nil
		})
		return n
	})
	if runs.Load() == 0 {
		t.Fatal("HandleBatch was never handed more than one line")
	}
}
