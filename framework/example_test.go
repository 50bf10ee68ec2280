package framework_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/tidemark-go/tidemark/dedupe"
	"github.com/tidemark-go/tidemark/framework"
)

// printer prints every line of the feed it subscribes to.
type printer struct{}

func (printer) Start(_ context.Context, fc *framework.Context) error {
	return fc.Subscribe("orders")
}

func (printer) Handle(_ context.Context, d dedupe.Delivery, line []byte) error {
	fmt.Printf("seq %d, position %d: %s\n", d.Seq, d.Position, line)
	return nil
}

// A server over a file: it reads the lines, hands them to the printer, and
// stops cleanly once the feed has settled.
func Example() {
	dir, _ := os.MkdirTemp("", "tidemark-example")
	defer os.RemoveAll(dir)
	input := filepath.Join(dir, "orders.csv")
	_ = os.WriteFile(input, []byte("o-1,10\no-2,25\no-3,5\n"), 0o644)

	cfg, err := framework.LoadConfig(strings.NewReader(`
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
	s, err := framework.New(cfg, framework.Registry{"printer": printer{}})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	if err := s.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	if err := s.WaitSettled(ctx, "orders"); err != nil {
		fmt.Println(err)
	}
	if err := s.Stop(ctx); err != nil {
		fmt.Println(err)
	}
	// Output:
	// seq 1, position 7: o-1,10
	// seq 2, position 14: o-2,25
	// seq 3, position 20: o-3,5
}
