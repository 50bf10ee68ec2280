package tidemarktest_test

import (
	"fmt"

	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/state"
	"github.com/tidemark-go/tidemark/tidemarktest"
)

// A test runs the processor over some lines, makes the feed deliver the
// last ones again as a crash would, restarts it, and reads its table.
func ExampleHarness() {
	var t fakeT // in a test: the *testing.T
	h := tidemarktest.New(&t, tidemarktest.Config{Processors: func() framework.Processors {
		return framework.Processors{"sums": &sums{}}
	}})
	h.Append("alice,10", "bob,5", "alice,7")
	h.Run()
	h.Redeliver(1) // "bob,5" and "alice,7" come again
	h.Run()
	h.View("", func(tx *state.Tx) error {
		a, _ := tx.Bucket("balances").GetInt64([]byte("alice"))
		b, _ := tx.Bucket("balances").GetInt64([]byte("bob"))
		fmt.Printf("alice %d, bob %d\n", a, b)
		return nil
	})
	t.cleanup()
	// Output: alice 17, bob 5
}
