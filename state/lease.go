package state

// Lease is the ownership of a PostgreSQL store as its owner holds it (see
// the package documentation, "PostgreSQL"): what a supervisor that moves
// stores between processes needs to name this owner's generation and to
// notice that it lost the store.
type Lease struct {
	// Store is the store's name.
	Store string
	// Owner is this owner's name in the lease: host, process id and a
	// random suffix, one per open.
	Owner string
	// Token is the lease token this owner took the store with. Every
	// take-over increments it, so a later owner always holds a larger
	// one.
	Token int64
	// Commits is the number of commits of the store so far.
	Commits int64
	// Lost is nil while the lease is held. It is the error that ended it
	// otherwise: the store was taken over by another owner (an error
	// wrapping [ErrFenced]: found by a refused commit or by the renewal of
	// an idle store), a commit failed (the store must be opened again), or
	// the store was closed ([ErrClosed]). Once set it stays set: the store
	// commits nothing more.
	Lost error
}

// LeaseOf returns the lease of st, a store opened on PostgreSQL, and
// false for a store of another backend (its ownership is its folder's
// lock). Safe from any goroutine; it does no I/O and never waits for a commit.
func LeaseOf(st Store) (Lease, bool) {
	ns, ok := st.(*nsStore)
	if !ok {
		return Lease{}, false
	}
	e, ok := ns.c.rawEngine().(*pgEngine)
	if !ok {
		return Lease{}, false
	}
	if l := e.view.Load(); l != nil {
		return *l, true
	}
	return Lease{Store: e.store, Owner: e.owner}, true
}
