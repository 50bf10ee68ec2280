package tidemark_test

import (
	"fmt"

	"github.com/tidemark-go/tidemark"
)

// A processor that keeps a running total in memory skips the lines
// re-delivered to it.
func ExampleTracker() {
	tr := tidemark.NewTracker()
	total := 0
	deliveries := []tidemark.Delivery{
		{Feed: "orders", Epoch: 1, Position: 6},
		{Feed: "orders", Epoch: 1, Position: 12},
		{Feed: "orders", Epoch: 1, Position: 6}, // re-delivered
		{Feed: "orders", Epoch: 1, Position: 18},
	}
	for i, d := range deliveries {
		applied, _ := tr.Apply(d, func() error {
			total += i + 1
			return nil
		})
		fmt.Println(d.Position, applied)
	}
	fmt.Println("total", total, "last", tr.Last("orders").Position)
	// Output:
	// 6 true
	// 12 true
	// 6 false
	// 18 true
	// total 7 last 18
}

func ExampleAlreadyApplied() {
	last := tidemark.Applied{Epoch: 4, Position: 120}
	fmt.Println(tidemark.AlreadyApplied(tidemark.Delivery{Epoch: 4, Position: 120}, last))
	fmt.Println(tidemark.AlreadyApplied(tidemark.Delivery{Epoch: 4, Position: 121}, last))
	fmt.Println(tidemark.AlreadyApplied(tidemark.Delivery{Epoch: 5, Position: 10}, last))
	// Output:
	// true
	// false
	// false
}
