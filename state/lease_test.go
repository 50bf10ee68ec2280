package state

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestLeaseOf follows a PostgreSQL store's lease as LeaseOf reports it:
// held with a token after Open, the commits counted, a take-over by a
// second owner with the next token, the first owner's loss found by its
// idle renewal (ErrFenced, kept after its Close), and no lease for a
// store of another backend.
func TestLeaseOf(t *testing.T) {
	dir := t.TempDir()
	o := &Options{Logger: quietLogger(), Unbound: true}
	a, err := Open(pgSpec(t, dir, "lease", "300ms"), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	la, ok := LeaseOf(a)
	if !ok || la.Token < 1 || la.Owner == "" || la.Store != dir || la.Lost != nil {
		t.Fatalf("LeaseOf after Open = %+v, %v; want a held lease with a token", la, ok)
	}
	applyLine(t, a, del("f", 1, 1))
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if l, _ := LeaseOf(a); l.Commits != la.Commits+1 || l.Token != la.Token {
		t.Fatalf("LeaseOf after a commit = %+v; want commits %d, token %d", l, la.Commits+1, la.Token)
	}
	stopRenewals(pgEngineOf(a)) // a paused process renews nothing
	waitLeaseExpired(t, dir)
	b, err := Open(pgSpec(t, dir, "lease", "1m"), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	lb, _ := LeaseOf(b)
	if lb.Token != la.Token+1 || lb.Owner == la.Owner || lb.Lost != nil {
		t.Fatalf("the new owner's lease %+v; the old one's %+v: want the next token", lb, la)
	}
	// The old owner wakes up: its renewal finds the lease gone.
	ea := pgEngineOf(a)
	close(ea.stop) // ends stopRenewals' stand-in
	<-ea.done
	ea.stop, ea.done = make(chan struct{}), make(chan struct{})
	go ea.renewer()
	waitFor(t, "the old owner to learn it lost the lease", func() bool {
		l, _ := LeaseOf(a)
		return errors.Is(l.Lost, ErrFenced)
	})
	if err := a.Close(); err != nil && !errors.Is(err, ErrFenced) {
		t.Fatalf("Close of the fenced store: %v", err)
	}
	if l, _ := LeaseOf(a); !errors.Is(l.Lost, ErrFenced) {
		t.Fatalf("after Close, Lost = %v; want the fence kept", l.Lost)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if l, _ := LeaseOf(b); !errors.Is(l.Lost, ErrClosed) {
		t.Fatalf("after a clean Close, Lost = %v; want ErrClosed", l.Lost)
	}
	bolt, err := Open(Bolt+":"+t.TempDir(), &Options{Logger: quietLogger(), LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer bolt.Close()
	if l, ok := LeaseOf(bolt); ok {
		t.Fatalf("LeaseOf a bbolt store = %+v, true; want false", l)
	}
}
