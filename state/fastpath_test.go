package state

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// Batches cut by the committer's timer while lines keep coming: each line
// reads the count the line before wrote, whichever batch holds it (the one
// staging, the one committing, the last committed, the backend). A line
// that kept its view of the batches from before a cut would read an old
// count once two cuts have passed.
func TestLinesSeeBatchesCutByTheTimer(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be backend) {
		o := testOpts()
		o.BatchInterval = time.Millisecond
		s := mustOpen(t, be, t.TempDir(), o)
		ctx := context.Background()
		deadline := time.Now().Add(30 * time.Second)
		n := 0
		for s.Stats().Commits < 30 {
			if time.Now().After(deadline) {
				t.Fatalf("%d commits after %d lines and 30 s", s.Stats().Commits, n)
			}
			n++
			_, err := s.Apply(ctx, del("f", 1, n), func(tx *Tx) error {
				c, err := tx.Bucket("b").AddInt64([]byte("count"), 1)
				if err == nil && c != int64(n) {
					err = fmt.Errorf("line %d reads count %d", n, c-1)
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	})
}
