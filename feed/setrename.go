package feed

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/feed/pointer"
)

// This file holds how a file set follows a file renamed to another name
// its patterns match (app.log to app-20261201.log under *.log, or app.log
// to app.1.log): the file keeps its stream (running) or its registry entry
// (stopped), its epoch and its position, under its new name, so that none
// of its lines is read again. A store recognises the lines it applied
// under the old name by the epoch (see the package documentation, "Files
// renamed within a set").
//
// Invariants:
//
//   - one file (identity) is read by at most one stream of the set: a name
//     that names a file a stream holds open is that stream's new name, and
//     never a new file of the set;
//   - a registry entry moves to the file's new name before the old one is
//     forgotten (a crash leaves both, and the next start keeps the one
//     whose name names the file);
//   - a stream leaves a file whose path names another file only once a
//     scan has looked for the file's new name since (mayLeave), and two
//     scans in a row found it at no name of the set (one may list the
//     names before a rename and stat them after): it is never replaced by
//     a new epoch while still a file of the set;
//   - a compressed file whose content may be that of a file of the set
//     still being read is not started until that file is finished: then
//     its entry, if the content matches, is the compressed file's.

// leaveVerdict is a file set's answer to a stream whose path names another
// file than the one it reads (see stream.leaveCheck).
type leaveVerdict int

const (
	// leaveWait: ask again. The set has not looked since, or the file's
	// new name is still taken by another file being read.
	leaveWait leaveVerdict = iota
	// leaveGo: the file is at no name of the set (renamed out of it, or
	// deleted), at two scans in a row: the stream moves on to the file at
	// its path, as a single file's source does.
	leaveGo
	// leaveRetire: the path names another file of the set (renamed
	// there): the stream reads its file to its end and stops; the set
	// then gives the path to that file's stream.
	leaveRetire
)

// mayLeave answers m's stream (see leaveVerdict). The first ask makes the
// next Poll scan.
func (fset *fileSet) mayLeave(m *member) leaveVerdict {
	if !m.asked {
		m.asked, m.askedAt, m.verdict = true, fset.scans, leaveWait
		fset.rescan = true
		return leaveWait
	}
	if fset.scans == m.askedAt {
		fset.rescan = true
		return leaveWait
	}
	v := m.verdict
	if v == leaveGo {
		m.asked = false // a later rename asks again
	}
	return v
}

// follow finds the files of the set renamed since the last scan, among
// names (the names the globs match now), and moves their streams or
// entries to their new names; it answers the streams that asked to leave
// their files. It returns the new names not to start at this scan.
func (fset *fileSet) follow(names []string, first bool) map[string]bool {
	ids := map[string]tidemark.Identity{}
	noID := map[string]bool{}
	stat := func(n string) (tidemark.Identity, bool) {
		if id, ok := ids[n]; ok {
			return id, true
		}
		if noID[n] {
			return tidemark.Identity{}, false
		}
		fi, err := fset.fs.Stat(n)
		var id tidemark.Identity
		ok := false
		if err == nil && fi.Mode().IsRegular() {
			id, ok = fileIdentity(fi)
		}
		if !ok {
			noID[n] = true
			return tidemark.Identity{}, false
		}
		ids[n] = id
		return id, true
	}
	matched := make(map[string]bool, len(names))
	for _, n := range names {
		matched[n] = true
	}

	// Streams that finished the file they retired with: their names are
	// free for the file renamed there.
	for _, m := range slices.Clone(fset.order) {
		if m.st != nil && m.st.retiring && m.st.finished() {
			fset.drop(m, true)
		}
	}

	holder := map[tidemark.Identity]*member{}
	for _, m := range fset.order {
		if m.st != nil && m.st.in != nil && m.st.in.hasID {
			holder[m.st.in.id] = m
		}
	}
	// The names to look at: the new ones and the names moves free; every
	// name at the first scan, and when a stream asked to leave its file
	// (it may be at a name another stream still reads: a stat per file,
	// once per rotation).
	all := first
	for _, m := range fset.order {
		all = all || (m.asked && m.st != nil)
	}
	var look []string
	for _, n := range names {
		m := fset.members[n]
		if all || m == nil || m.st == nil {
			look = append(look, n)
		}
	}
	deferred := map[string]bool{}
	for moved := true; moved; {
		moved = false
		for _, n := range look {
			id, ok := stat(n)
			if !ok {
				continue
			}
			h := holder[id]
			if h == nil || h.path == n {
				continue
			}
			if occ := fset.members[n]; occ != nil && occ.st != nil {
				continue // still read: it moves away or retires first
			}
			if oid, ok := stat(h.path); ok && oid == id && matched[h.path] {
				// A second name of the file (a hard link): not another
				// file of the set.
				deferred[n] = true
				continue
			}
			old := h.path
			if !fset.moveMember(h, n) {
				deferred[n] = true
				continue
			}
			delete(ids, old)
			delete(noID, old)
			if matched[old] && !slices.Contains(look, old) {
				look = append(look, old)
			}
			moved = true
		}
	}
	for _, n := range look {
		if m := fset.members[n]; m != nil && m.st != nil && m.st.in != nil && m.st.in.hasID {
			// A name whose member moved in: not new.
			if id, ok := stat(n); ok && id == m.st.in.id {
				continue
			}
		}
		if h := holder[ids[n]]; h != nil && h.path != n {
			deferred[n] = true // its file is read under another name still
		}
	}

	// The streams that asked: where their file is, and what their path
	// names now.
	for _, m := range fset.order {
		if !m.asked || m.st == nil || m.st.in == nil || !m.st.in.hasID {
			continue
		}
		own := m.st.in.id
		at := ""
		for _, n := range look {
			if id, ok := stat(n); ok && id == own && n != m.path {
				at = n
			}
		}
		pid, ok := stat(m.path)
		switch {
		case at != "":
			m.verdict = leaveWait // its new name is taken by a file still read
		case ok && holder[pid] != nil && holder[pid] != m:
			m.verdict = leaveRetire
		case m.nowhere != 0 && m.nowhere+1 == fset.scans:
			m.verdict = leaveGo
		default:
			// At no name of this scan: the file may have been renamed
			// again between the listing and the stats (its new name
			// not listed, its old one no longer naming it). The next
			// scan, at once, lists it if so; at no name then too, it is
			// gone from the set.
			m.nowhere, m.verdict, fset.rescan = fset.scans, leaveWait, true
			continue
		}
		m.nowhere = 0
	}

	if fset.reg != nil {
		fset.adoptEntries(names, look, matched, stat, holder, deferred, first)
	}
	return deferred
}

// moveMember makes m's stream read on under the name n: its registry entry
// moves there, its lines name n. It returns false when the entry could not
// be moved (tried again at the next scan).
func (fset *fileSet) moveMember(m *member, n string) bool {
	old := m.path
	if e, ok := m.st.pf.(*regEntry); ok {
		if err := e.moveTo(n); err != nil {
			fset.log.Warn("feed: a file of the set was renamed to another name of the set, and its registry entry cannot move there", "path", n, "from", old, "err", err)
			if e.name() != n {
				return false
			}
		}
	}
	m.st.moveTo(n, expandName(fset.cfg.Rotated, n))
	fset.mu.Lock()
	if occ := fset.members[n]; occ != nil && occ != m {
		fset.order = slices.DeleteFunc(fset.order, func(x *member) bool { return x == occ })
	}
	delete(fset.members, old)
	delete(fset.errs, old)
	m.path = n
	m.gone, m.reported, m.asked = false, false, false
	fset.members[n] = m
	fset.order = slices.SortedFunc(maps.Values(fset.members), func(a, b *member) int { return strings.Compare(a.path, b.path) })
	fset.mu.Unlock()
	st := m.st.status()
	fset.log.Info("feed: a file of the set was renamed to another name the set matches: it is read on under its new name, in its epoch, from where it was",
		"path", n, "from", old, "epoch", st.Epoch, "read", st.ReadPosition, "committed", st.CommittedPosition)
	return true
}

// drop closes m's stream (a retired one, finished) and removes m from the
// set; forget also forgets its entry, which names a file no longer at m's
// path.
func (fset *fileSet) drop(m *member, forget bool) {
	if m.st != nil {
		if err := m.st.close(); err != nil {
			fset.log.Warn("feed: closing a file of the set failed", "path", m.path, "err", err)
		}
		m.st = nil
	}
	if forget && fset.reg != nil {
		if err := fset.reg.Forget(m.path); err != nil {
			fset.log.Warn("feed: cannot forget the entry of a file that left its name to another file of the set; the next start drops it", "path", m.path, "err", err)
		}
	}
	fset.mu.Lock()
	if fset.members[m.path] == m {
		delete(fset.members, m.path)
	}
	fset.order = slices.DeleteFunc(fset.order, func(x *member) bool { return x == m })
	fset.mu.Unlock()
	fset.delivered = slices.DeleteFunc(fset.delivered, func(d delivery) bool { return d.m == m })
}

// adoptEntries gives a name of the set that no stream reads the registry
// entry of the file it names, kept under another name: the file was
// renamed while the source was stopped (at the first scan), or after its
// stream was closed. By identity (and content: the entry's first bytes and
// the bytes before its position), or, for a compressed file, by content
// alone among the entries of names gone from the set. An entry whose file
// is at another name that has its own entry of it is a duplicate left by a
// crash during a move: forgotten.
func (fset *fileSet) adoptEntries(names, look []string, matched map[string]bool, stat func(string) (tidemark.Identity, bool),
	holder map[tidemark.Identity]*member, deferred map[string]bool, first bool) {
	entries := fset.reg.Entries()
	idAt := map[tidemark.Identity]string{}
	for _, n := range look {
		if m := fset.members[n]; (m != nil && m.st != nil) || deferred[n] {
			continue
		}
		if id, ok := stat(n); ok && holder[id] == nil {
			if _, dup := idAt[id]; !dup {
				idAt[id] = n
			}
		}
	}
	type plan struct {
		from string
		e    pointer.Entry
	}
	plans := map[string]plan{}
	var stale []string
	now := fset.now()
	for _, k := range slices.Sorted(maps.Keys(entries)) {
		e := entries[k]
		if e.Identity == (tidemark.Identity{}) {
			continue
		}
		t, ok := idAt[e.Identity]
		if !ok || t == k {
			continue
		}
		if m := fset.members[k]; m != nil && m.st != nil {
			continue
		}
		if id, ok := stat(k); ok && id == e.Identity && matched[k] {
			continue // a hard link
		}
		if own, ok := entries[t]; ok && own.Identity == e.Identity {
			stale = append(stale, k)
			continue
		}
		if p, ok := plans[t]; ok && p.e.Position >= e.Position {
			// Another entry of the file t gets (a crash between the two
			// writes of a move, then a rename while stopped): left in
			// place, its name's new file would be read as the file
			// renamed away from it, by a second stream.
			if fset.holds(t, e.Record) == "" {
				stale = append(stale, k)
			}
			continue
		}
		if why := fset.holds(t, e.Record); why != "" {
			fset.log.Info("feed: a file of the set has the identity of another name's registry entry, not its content: not taken for that file", "path", t, "entry", k, "reason", why)
			continue
		}
		if p, ok := plans[t]; ok {
			stale = append(stale, p.from) // as above, the entry at the lower position
		}
		plans[t] = plan{k, e}
	}
	// A compressed file of a file of the set (app-20261201.log.gz): the
	// compression makes another file, found by content among the entries
	// of names gone from the set once their files are finished.
	for _, n := range look {
		if !isCompressed(n) || deferred[n] || plans[n].from != "" {
			continue
		}
		if m := fset.members[n]; m != nil && m.st != nil {
			continue
		}
		if _, ok := entries[n]; ok {
			continue
		}
		if fset.mayBeCopyOfRead(n, matched) {
			deferred[n] = true
			continue
		}
		for _, k := range slices.Sorted(maps.Keys(entries)) {
			e := entries[k]
			if e.Position == 0 || e.TailLen == 0 {
				continue
			}
			if id, ok := stat(k); ok && id == e.Identity && matched[k] {
				continue // its file is still at its name
			}
			if m := fset.members[k]; m != nil && m.st != nil {
				continue
			}
			why := fset.holds(n, e.Record)
			if why == errIncomplete.Error() {
				deferred[n] = true
				break
			}
			if why == "" {
				plans[n] = plan{k, e}
				break
			}
		}
	}
	if len(plans) == 0 && len(stale) == 0 {
		return
	}
	for _, t := range slices.Sorted(maps.Keys(plans)) {
		p := plans[t]
		e := p.e
		e.Finished, e.Stamp = false, now
		if err := fset.reg.Store(t, e); err != nil {
			fset.log.Warn("feed: cannot move a registry entry to the file's new name; tried again at the next scan", "path", t, "from", p.from, "err", err)
			delete(plans, t)
			deferred[t] = true
			continue
		}
		fset.log.Info("feed: a file of the set was renamed (or compressed) to another name the set matches: it is read on under its new name, in its epoch, from its entry's position",
			"path", t, "from", p.from, "epoch", e.Epoch, "position", e.Position, "first_scan", first)
	}
	for _, p := range plans {
		stale = append(stale, p.from)
	}
	for _, k := range stale {
		if _, target := plans[k]; target {
			continue
		}
		if err := fset.reg.Forget(k); err != nil {
			fset.log.Warn("feed: cannot forget the registry entry of a file renamed to another name of the set; the next start drops it", "path", k, "err", err)
		}
		if m := fset.members[k]; m != nil && m.st == nil {
			fset.drop(m, false)
		}
	}
	if err := fset.reg.Sync(); err != nil {
		fset.log.Warn("feed: cannot sync the registry after moving entries to new names; the next write syncs them", "err", err)
	}
}

// mayBeCopyOfRead reports whether the compressed file n may hold the
// content of a file a stream of the set still reads under a name gone from
// the set: its first bytes are that file's.
func (fset *fileSet) mayBeCopyOfRead(n string, matched map[string]bool) bool {
	for _, m := range fset.order {
		if m.st == nil || m.st.in == nil || (matched[m.path] && !m.st.retiring) || m.st.fp.Len == 0 {
			continue
		}
		head, ok := (&stream{fs: fset.fs}).headOf(n, m.st.fp.Len)
		if ok && len(head) == m.st.fp.Len && pointer.HashBytes(head) == m.st.fp.Hash {
			return true
		}
	}
	return false
}

// holds returns "" when the file n holds what the record p was read from
// (its first bytes, its length up to the position, the bytes before it),
// else why not (errIncomplete's text for a compressed file not complete).
func (fset *fileSet) holds(n string, p pointer.Record) string {
	f, fi, err := openRegular(fset.fs, n)
	if err != nil {
		if errors.Is(err, errIncomplete) {
			return errIncomplete.Error()
		}
		if errors.Is(err, fs.ErrNotExist) {
			return "gone"
		}
		return err.Error()
	}
	h := &inputFile{f: f, name: n}
	defer h.close()
	size := fi.Size()
	head := make([]byte, min(int64(p.Fingerprint.Len), size))
	if k, err := f.ReadAt(head, 0); k < len(head) {
		return fmt.Sprintf("its first %d bytes cannot be read: %v", len(head), err)
	}
	if int64(p.Fingerprint.Len) > size {
		return "shorter than the fingerprint"
	}
	return sameContent(h, size, head, p.Position, p.Fingerprint, p.TailLen, p.TailHash)
}
