package ops_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/ops"
)

// printer is a processor that subscribes to the orders feed.
type printer struct{}

func (printer) Start(_ context.Context, fc *framework.Context) error { return fc.Subscribe("orders") }

func (printer) Handle(context.Context, tidemark.Delivery, []byte) error { return nil }

// A server with one file feed, and its operator listener on 127.0.0.1.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "tidemark-ops-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	input := filepath.Join(dir, "orders.log")
	if err := os.WriteFile(input, []byte("first\nsecond\n"), 0o644); err != nil {
		panic(err)
	}

	srv, err := framework.New(framework.Config{
		Feeds:  []framework.FeedConfig{{Name: "orders", File: &framework.FileConfig{Filename: input}}},
		Groups: []framework.GroupConfig{{Name: "orders-agent", Processors: []string{"printer"}}},
	}, framework.Processors{"printer": printer{}})
	if err != nil {
		panic(err)
	}
	if err := srv.Start(ctx); err != nil {
		panic(err)
	}
	defer srv.Stop(ctx)
	if err := srv.WaitSettled(ctx, "orders"); err != nil {
		panic(err)
	}

	l, err := ops.New(ops.Config{Server: srv, Feeds: []string{"orders"}})
	if err != nil {
		panic(err)
	}
	if err := l.Start(ctx); err != nil {
		panic(err)
	}
	defer l.Close()

	resp, err := client.Get("http://" + l.Addr().String() + "/status")
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	var r ops.Report
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		panic(err)
	}
	f := r.Feeds[0]
	fmt.Printf("%s: %s, read to %d of %d bytes, settled %v\n", f.Name, f.State, f.ReadPosition, f.FileSize, f.Settled)
	// Output: orders: caught up, read to 13 of 13 bytes, settled true
}

// Report.Health is the verdict of /readyz and of tidemark status --check.
func ExampleReport_Health() {
	r := ops.Report{
		Feeds: []ops.FeedReport{
			{Name: "orders", State: "caught up"},
			{Name: "payments", State: "behind", Stalled: true, StallReason: "no live consumer"},
		},
		Groups: []ops.GroupReport{{Name: "ledger", State: "running"}},
	}
	h := r.Health()
	fmt.Println("ready:", h.Ready())
	for _, c := range h.Problems() {
		fmt.Println(c)
	}
	// Output:
	// ready: false
	// feed payments: stalled: no live consumer
}
