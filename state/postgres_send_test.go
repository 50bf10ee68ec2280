package state

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestPostgresParkedApplyWakesOnceTheNextCommitIsSent: with a PostgreSQL
// store, an Apply that waits for a full batch to be cut (back-pressure) is
// woken once the commit of that batch is on its way to the server, not
// when the commit before it ends; and the fold of the batch just committed
// into the value cache begins then too. On a machine of two cores the
// Apply's goroutine and the fold otherwise took a core from the committer
// while it prepared the next commit, and the server waited meanwhile.
func TestPostgresParkedApplyWakesOnceTheNextCommitIsSent(t *testing.T) {
	var (
		mu     sync.Mutex
		events []string
	)
	note := func(e string) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}
	has := func(e string) bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(events, e)
	}
	g := newGate()
	commits := 0
	o := testOpts()
	o.BatchSize = 2
	o.hooks = &hooks{
		beforeCommit: func() {
			commits++ // the committer's
			if commits == 1 {
				g.hook()
				return
			}
			if commits == 2 {
				// Give the parked Apply, or the fold of the first batch,
				// the chance to run before this commit is sent: neither
				// may (the wait then ends at its bound).
				deadline := time.Now().Add(500 * time.Millisecond)
				for time.Now().Before(deadline) && !has("apply returned") && !has("fold") {
					time.Sleep(time.Millisecond)
				}
			}
		},
		pgSent: func() { note("sent") },
		beforeFold: func() {
			if !has("fold") {
				note("fold")
			}
		},
	}
	s := mustOpen(t, backend{Postgres, openPGDir, true}, t.TempDir(), o)
	t.Cleanup(g.open)
	returned := parkApply(t, s, g, func(_ bool, err error) {
		if err != nil {
			t.Error(err)
		}
		note("apply returned")
	})
	note("opened")
	g.open()
	<-returned
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := slices.Clone(events)
	mu.Unlock()
	// The sends after the gate opened: the first batch's, the second's.
	sent, n := -1, 0
	for i := slices.Index(got, "opened"); i >= 0 && i < len(got); i++ {
		if got[i] == "sent" {
			if n++; n == 2 {
				sent = i
				break
			}
		}
	}
	if sent < 0 {
		t.Fatalf("events %q: the second batch's commit was not sent", got)
	}
	for _, e := range []string{"apply returned", "fold"} {
		if i := slices.Index(got, e); i < sent {
			t.Errorf("events %q: %q before the second batch's commit was sent", got, e)
		}
	}
}

// TestPostgresParkedApplyWokenWhenTheNextCommitFails: the Apply parked for
// a batch that the committer cut, and whose wake waits for the commit of
// that batch to be sent, is woken with the store's error when that commit
// fails before anything is sent (here, its connection pool closed): it
// does not wait for ever.
func TestPostgresParkedApplyWokenWhenTheNextCommitFails(t *testing.T) {
	g := newGate()
	commits := 0
	var e *pgEngine
	o := testOpts()
	o.BatchSize = 2
	o.hooks = &hooks{beforeCommit: func() {
		commits++ // the committer's
		switch commits {
		case 1:
			g.hook()
		case 2:
			e.pool.Close() // the commit cannot get a connection
		}
	}}
	s, err := openPGDir(t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	e = pgEngineOf(s)
	t.Cleanup(func() { g.open(); _ = s.Close() })
	var applyErr error
	returned := parkApply(t, s, g, func(_ bool, err error) { applyErr = err })
	g.open()
	select {
	case <-returned:
		if err := applyErr; !errors.Is(err, ErrFailed) {
			t.Fatalf("the parked Apply returned %v; want an error wrapping ErrFailed", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the parked Apply was not woken after the commit of its batch failed")
	}
}
