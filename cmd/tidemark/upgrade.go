package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/tidemark-go/tidemark/state"
)

// storeUpgrade converts a store to the newest format of its backend
// (state.Upgrade): checksums for the values of a store of format 1, a
// bucket per table for a bbolt store of format 1 to 3, rows under a sid
// for a PostgreSQL store of format 1 to 3.
func storeUpgrade(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("store upgrade", flag.ContinueOnError)
	wait := fs.Duration("wait", 2*time.Second, "how long to wait for another process to release the store")
	pos, err := parse("store", fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErrorf("store", "store upgrade needs one argument, the store's folder DIR, got %d", len(pos))
	}
	dir := pos[0]
	w := *wait
	if w <= 0 {
		w = time.Nanosecond
	}
	up, err := state.Upgrade(dir, &state.Options{LockTimeout: w, Logger: discardLogger()})
	switch {
	case errors.Is(err, state.ErrLocked):
		return fmt.Errorf("store upgrade %s: %w; it is open by a running server: stop it first", dir, err)
	case errors.Is(err, state.ErrNotStore):
		return fmt.Errorf("store upgrade %s: %w; is DIR the directory given to state.Open?", dir, err)
	case err != nil:
		return fmt.Errorf("store upgrade %s: %w", dir, err)
	case up:
		fmt.Fprintf(stdout, "%s: upgraded to the newest format of its backend: every value carries its checksum (format 3), a bbolt store keeps each table's keys in a bucket of their own (format 4), a PostgreSQL store its rows under a sid (format 5)\n", dir)
	default:
		fmt.Fprintf(stdout, "%s: already of the newest format of its backend (every value carries its checksum; a bbolt store's tables are in buckets of their own; a PostgreSQL store's rows are under a sid): nothing to do\n", dir)
	}
	return nil
}
