package state

import "context"

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
	// cursor returns a cursor over the keys in [lo, hi) (see reader). The
	// store iterates it inside Apply and View, where the only change the
	// backend can see meanwhile is the commit of a batch that the store
	// overlays anyway (see iter.go): so the cursor may read in pages, each
	// from the backend as it is then, and hold nothing between them.
	cursor(lo, hi []byte, reverse bool) cursor
	// snapshot returns a consistent read-only view of the durable state:
	// nothing committed after it is seen. It must not block commits for
	// long (see Store.Snapshot).
	snapshot(ctx context.Context) (snapshot, error)
	// backup writes a consistent copy of the backend's data into the new
	// store folder dir (state.bolt, or pebble/), as a store of kind it
	// returns, and returns the committed lengths of the outputs in the
	// copy. An engine without local files writes the bytes of its outputs
	// to files in dir too (see Store.Backup).
	// verify checks a value read from the backend and returns it without
	// its checksum (see sumEngine); nil means the values are as written.
	backup(ctx context.Context, dir string, verify func(k, v []byte) ([]byte, error)) (kind string, outputs map[string]int64, err error)
	// commit writes ws in one transaction and makes it durable before it
	// returns. On error nothing of ws may be visible after a reopen. ws,
	// its keys and its values are the caller's once commit returns: the
	// committer uses their memory again for its next commit.
	commit(ws []write) error
	// close releases the backend.
	close() error
	// limits returns the longest key (the store's prefix included) and
	// the longest value the backend stores, 0 for no limit. The store
	// refuses a longer write inside Apply (see TooLargeError), so that no
	// commit fails on it.
	limits() (maxKey, maxValue int)
}

// A sentCommitter is an engine whose commit sends a request to a server
// and waits for its reply (PostgreSQL). commitSent is its commit, which
// calls sent, on the caller's goroutine, once the request is on its way
// and before the reply is read: the server works on the commit from then
// on, and the store lets its other goroutines run (see core.released).
// sent is not called if the commit fails before its request is sent.
type sentCommitter interface {
	commitSent(ws []write, sent func()) error
}

// commitTo commits ws to e, calling sent once the request is sent if e
// is a sentCommitter (and sent is not nil).
func commitTo(e engine, ws []write, sent func()) error {
	if sc, ok := e.(sentCommitter); ok && sent != nil {
		return sc.commitSent(ws, sent)
	}
	return e.commit(ws)
}

// write is one change of a committed transaction.
type write struct {
	key, val []byte
	del      bool
	// summed says that val ends with its checksum already (see
	// sumEngine): the values of a batch sorted ahead (core.presort).
	summed bool
}

// snapshot is a consistent read-only view of a backend's durable state.
type snapshot interface {
	reader
	// close releases the snapshot.
	close() error
}
