package framework_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/framework"
)

// printer prints every line of the feed it subscribes to.
type printer struct{}

func (printer) Start(_ context.Context, fc *framework.Context) error {
	return fc.Subscribe("orders")
}

func (printer) Handle(_ context.Context, d tidemark.Delivery, line []byte) error {
	fmt.Printf("seq %d, position %d: %s\n", d.Seq, d.Position, line)
	return nil
}

// A server over a file: it reads the lines, hands them to the printer, and
// stops cleanly once the feed has settled (untilSettled: a batch run).
func Example() {
	dir, _ := os.MkdirTemp("", "tidemark-example")
	defer os.RemoveAll(dir)
	input := filepath.Join(dir, "orders.csv")
	_ = os.WriteFile(input, []byte("o-1,10\no-2,25\no-3,5\n"), 0o644)

	cfg, err := framework.LoadConfig(strings.NewReader(`
untilSettled: true
eventFeeds:
  - name: orders
    filename: ` + input + `
    readStrategy: COMMITTED
    overload: {policy: PAUSE}
processorGroups:
  - agentName: orders-agent
    processors: [printer]
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	s, err := framework.New(cfg, framework.Processors{"printer": printer{}})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := s.Run(context.Background()); err != nil {
		fmt.Println(err)
	}
	// Output:
	// seq 1, position 7: o-1,10
	// seq 2, position 14: o-2,25
	// seq 3, position 20: o-3,5
}

// A program's main: SIGTERM (and Ctrl-C) stop the server cleanly: the
// feeds stop reading, the groups drain, the stores save, and what was
// finished is committed. A second signal exits at once.
func Example_signals() {
	cfg := framework.Config{
		Feeds:  []framework.FeedConfig{{Name: "orders", File: &framework.FileConfig{Filename: "orders.csv"}}},
		Groups: []framework.GroupConfig{{Name: "orders-agent", Processors: []string{"printer"}}},
	}
	s, err := framework.New(cfg, framework.Processors{"printer": printer{}})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := s.SignalContext(context.Background())
	defer stop()
	if err := s.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// A host holds a group's commits until its own saves are durable, with the
// server's checkpoint of (feed, group).
func ExampleServer_Checkpoint() {
	dir, _ := os.MkdirTemp("", "tidemark-example")
	defer os.RemoveAll(dir)
	input := filepath.Join(dir, "orders.csv")
	_ = os.WriteFile(input, []byte("o-1,10\no-2,25\no-3,5\n"), 0o644)

	cfg := framework.Config{
		Feeds:  []framework.FeedConfig{{Name: "orders", File: &framework.FileConfig{Filename: input}, Overload: framework.OverloadConfig{Policy: framework.Pause}}},
		Groups: []framework.GroupConfig{{Name: "orders-agent", Processors: []string{"quiet"}}},
	}
	s, _ := framework.New(cfg, framework.Processors{"quiet": quiet{}})
	cp := s.Checkpoint("orders", "orders-agent") // before Start: nothing is committed unheld
	ctx := context.Background()
	_ = s.Start(ctx)
	_ = s.WaitSettled(ctx, "orders")

	m := cp.Mark() // everything the group finished so far
	// ... make the effects of those lines durable, then:
	cp.DurableThrough(m)
	_ = s.Stop(ctx) // the stop's commit moves the pointer to the mark
	st, _ := s.FeedStatus("orders")
	fmt.Printf("finished %d lines, committed through position %d\n", m.Count, st.LastCommitPosition)
	// Output: finished 3 lines, committed through position 20
}

type quiet struct{}

func (quiet) Start(_ context.Context, fc *framework.Context) error    { return fc.Subscribe("orders") }
func (quiet) Handle(context.Context, tidemark.Delivery, []byte) error { return nil }

// batchPrinter prints the lines of orders, a run of them a call.
type batchPrinter struct{ printer }

// HandleBatch handles the lines of b in order: it finishes them all, or
// returns the index of the line that failed with its error.
func (batchPrinter) HandleBatch(_ context.Context, b *framework.Batch) (int, error) {
	fmt.Printf("a run of %d lines\n", b.Len())
	for i := range b.Len() {
		d := b.Delivery(i)
		if _, err := fmt.Printf("  seq %d, position %d: %s\n", d.Seq, d.Position, b.Line(i)); err != nil {
			return i, err // lines before i are finished; line i goes through the failure policy
		}
	}
	return b.Len(), nil
}

// A processor that is also a BatchHandler gets the lines in runs, one
// HandleBatch call for the lines the feed read at once, when it is alone
// on its queue and the server has no Observer; its Handle (printer's) is
// what the retries of a failed line and the fallback after a panic call.
func ExampleBatchHandler() {
	dir, _ := os.MkdirTemp("", "tidemark-example")
	defer os.RemoveAll(dir)
	input := filepath.Join(dir, "orders.csv")
	_ = os.WriteFile(input, []byte("o-1,10\no-2,25\no-3,5\n"), 0o644)

	cfg := framework.Config{
		Feeds:        []framework.FeedConfig{{Name: "orders", File: &framework.FileConfig{Filename: input}, Overload: framework.OverloadConfig{Policy: framework.Pause}}},
		Groups:       []framework.GroupConfig{{Name: "orders-agent", Processors: []string{"printer"}}},
		UntilSettled: true,
	}
	s, err := framework.New(cfg, framework.Processors{"printer": batchPrinter{}})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := s.Run(context.Background()); err != nil {
		fmt.Println(err)
	}
	// Output:
	// a run of 3 lines
	//   seq 1, position 7: o-1,10
	//   seq 2, position 14: o-2,25
	//   seq 3, position 20: o-3,5
}
