package state

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/tidemark-go/tidemark"
)

func (s *nsStore) Snapshot(ctx context.Context, fn func(tx *Tx) error) error {
	c := s.c
	if err := c.checkedFor(ctx, "a snapshot"); err != nil {
		return err
	}
	c.snapMu.RLock()
	defer c.snapMu.RUnlock()
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return ErrClosed
	}
	// Between two commits: a commit's batch is durable when it is seen
	// (see core.write). PostgreSQL shows a transaction only once its
	// commit is durable, and its snapshot may wait for a connection: it
	// does not hold the committer.
	local := c.kind != Postgres
	if local {
		c.commitMu.Lock()
	}
	snap, err := c.eng.snapshot(ctx)
	if local {
		c.commitMu.Unlock()
	}
	if err != nil {
		return fmt.Errorf("snapshot of %s store %s: %w", c.kind, c.dir, err)
	}
	tx := &Tx{txState: &txState{c: c, ns: s.ns, nss: s, readOnly: true, snap: true, rd: snap}}
	err = fn(tx)
	tx.done = true
	if err == nil {
		err = tx.err
	}
	if cerr := snap.close(); cerr != nil {
		err = errors.Join(err, fmt.Errorf("close the snapshot of %s store %s: %w", c.kind, c.dir, cerr))
	}
	return err
}

// What a transaction tells of the store's layout, for tools: the
// namespaces, the buckets of a namespace, and its applied positions. In
// Apply and View they are what is durable and staged; in a snapshot, what
// the snapshot holds.

// Namespaces returns the names of the store's namespaces that hold keys
// or applied positions, sorted ("" is the default namespace).
func (tx *Tx) Namespaces() ([]string, error) {
	if err := tx.check(false); err != nil {
		return nil, err
	}
	nss, err := tx.names([]byte{tagData})
	if err != nil {
		return nil, err
	}
	if tx.snap {
		c := tx.rd.cursor([]byte{tagApplied}, []byte{tagApplied + 1}, false)
		for c.next() {
			ns, _, _, ok := parseAppliedKey(c.key())
			if !ok {
				return nil, errors.Join(fmt.Errorf("applied key %q in store %s: %w", c.key(), tx.c.dir, ErrCorrupt), c.close())
			}
			nss = append(nss, ns)
		}
		if err := c.close(); err != nil {
			return nil, tx.c.readErr(err)
		}
	} else {
		tx.c.mu.Lock()
		for fk, fs := range tx.c.feeds {
			if fs.hasDur {
				nss = append(nss, fk.ns)
			}
		}
		tx.c.mu.Unlock()
	}
	slices.Sort(nss)
	return slices.Compact(nss), nil
}

// Buckets returns the names of the buckets of the transaction's namespace
// that hold keys, sorted ("" is the root bucket).
func (tx *Tx) Buckets() ([]string, error) {
	if err := tx.check(false); err != nil {
		return nil, err
	}
	bs, err := tx.names(appendName([]byte{tagData}, tx.ns))
	slices.Sort(bs)
	return bs, err
}

// Feeds returns the durable applied records of the transaction's
// namespace, by feed: one for a feed of one file, one per file for a feed
// that follows a set of files (sorted by file; Lineage.File names it). In
// Apply and View they are the store's (see [Store.AppliedAll]), in a
// snapshot the snapshot's.
func (tx *Tx) Feeds() (map[string][]tidemark.Lineage, error) {
	if err := tx.check(false); err != nil {
		return nil, err
	}
	out := make(map[string][]tidemark.Lineage)
	if !tx.snap {
		tx.c.mu.Lock()
		for fk, fs := range tx.c.feeds {
			if fk.ns == tx.ns && fs.hasDur {
				l := fs.durable
				l.File = fk.file
				out[fk.feed] = append(out[fk.feed], l)
			}
		}
		tx.c.mu.Unlock()
		for _, ls := range out {
			slices.SortFunc(ls, func(a, b tidemark.Lineage) int { return strings.Compare(a.File, b.File) })
		}
		return out, nil
	}
	p := appliedPrefix(tx.ns)
	c := tx.rd.cursor(p, prefixEnd(p), false)
	for c.next() {
		_, feed, file, ok := parseAppliedKey(c.key())
		l, err := decodeLineage(c.value())
		if !ok || err != nil {
			return nil, errors.Join(fmt.Errorf("applied record %q in store %s: %w", c.key(), tx.c.dir, errors.Join(ErrCorrupt, err)), c.close())
		}
		l.File = file
		out[feed] = append(out[feed], l) // in key order: by file
	}
	if err := c.close(); err != nil {
		return nil, tx.c.readErr(err)
	}
	return out, nil
}

// names returns the distinct names that follow prefix in the keys the
// transaction sees (a uvarint length, then the name), in key order
// (shorter names first): a seek past each name's keys finds the next, so
// the cost is a short read per name, not one per key.
func (tx *Tx) names(prefix []byte) ([]string, error) {
	var out []string
	lo, hi := prefix, prefixEnd(prefix)
	before := tx.err
	for lo != nil {
		var k []byte
		for key := range tx.scan(nil, lo, hi, false) {
			k = append([]byte(nil), key...)
			break
		}
		if tx.err != before {
			return nil, tx.err
		}
		if k == nil {
			break
		}
		n, w := nameLen(k[len(prefix):])
		at := len(prefix) + w
		if w <= 0 {
			return nil, fmt.Errorf("key %q in store %s: %w", k, tx.c.dir, ErrCorrupt)
		}
		out = append(out, string(k[at:at+int(n)]))
		lo = prefixEnd(k[:at+int(n)])
	}
	return out, nil
}
