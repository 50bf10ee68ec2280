package state_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/state"
)

// A store in PostgreSQL: the spec names the database and the store; the
// lease makes this process its only writer. (Compiled, not run: it needs
// a server.)
func ExampleOpenPostgres() {
	st, err := state.Open("postgres://tidemark@db.internal:5432/app?sslmode=verify-full&store=ledger/orders/3&lease=15s",
		&state.Options{Unbound: true}) // a framework group's store is bound, and needs no Unbound
	if err != nil {
		log.Fatal(err) // state.ErrLocked: another owner holds the lease
	}
	defer st.Close()
	ledger := st.Namespace("ledger")
	d := tidemark.Delivery{Feed: "orders.3", Epoch: 1, Position: 27}
	if _, err := ledger.Apply(context.Background(), d, func(tx *state.Tx) error {
		_, err := tx.Bucket("balances").AddInt64([]byte("alice"), 100)
		if err == nil {
			_, err = fmt.Fprintf(tx.Output("output.csv"), "alice,100\n")
		}
		return err
	}); err != nil {
		log.Fatal(err) // state.ErrFenced inside state.ErrFailed: taken over
	}
	if err := st.Flush(context.Background()); err != nil {
		log.Fatal(err)
	}
	// The output is rows of the store's table: export it.
	out, _ := st.Output("output.csv")
	if _, err := out.WriteTo(os.Stdout); err != nil {
		log.Fatal(err)
	}
}
