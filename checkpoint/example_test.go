package checkpoint_test

import (
	"fmt"
	"sync"

	"github.com/tidemark-go/tidemark/checkpoint"
)

// A processor that saves in batches holds its group's commits until each
// batch is durable. Here the framework's part (Bind, and the queue's
// progress) is played by a counter.
func Example() {
	reg := checkpoint.NewSet()
	cp := reg.Hold("orders", "orders-agent") // before the feed delivers

	var finished uint64 // the queue: items finished so far
	reg.Bind("orders", "orders-agent", func() checkpoint.Mark {
		return checkpoint.Mark{Count: finished, Seq: finished, Epoch: 1, Position: int64(finished) * 10}
	})

	var wg sync.WaitGroup
	for line := uint64(1); line <= 250; line++ {
		// Inside the handler of line: the mark excludes it.
		if line%100 == 0 {
			m := cp.Mark()
			wg.Add(1)
			go func() { // the batch is saved asynchronously
				defer wg.Done()
				cp.DurableThrough(m)
			}()
			wg.Wait()
		}
		finished = line // the handler returned
	}
	d, held := cp.Durable()
	fmt.Printf("held %v, durable through item %d at position %d\n", held, d.Count, d.Position)
	// Output: held true, durable through item 199 at position 1990
}
