package state

// engine is a backend: a sorted key/value space that commits a set of writes
// in one durable transaction. The store above it does everything else
// (staging, de-duplication, batching, outputs), so a new backend only has
// to implement these few methods and pass the conformance suite.
type engine interface {
	// get returns a copy of the value of key, and whether it exists.
	get(key []byte) ([]byte, bool, error)
	// scan calls fn for every key with the prefix, in key order. k and v are
	// valid only during the call.
	scan(prefix []byte, fn func(k, v []byte) error) error
	// commit writes ws in one transaction and makes it durable before it
	// returns. On error nothing of ws may be visible after a reopen.
	commit(ws []write) error
	// close releases the backend.
	close() error
	// limits returns the longest key (the store's prefix included) and
	// the longest value the backend stores, 0 for no limit. The store
	// refuses a longer write inside Apply (see TooLargeError), so that no
	// commit fails on it.
	limits() (maxKey, maxValue int)
}

// write is one change of a committed transaction.
type write struct {
	key, val []byte
	del      bool
}
