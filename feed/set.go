package feed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tidemark-go/tidemark/feed/pointer"
	"github.com/tidemark-go/tidemark/vfs"
)

// DefaultScanInterval is Config.ScanInterval when it is 0.
const DefaultScanInterval = time.Second

// DefaultForgetAfter is Config.ForgetAfter when it is 0.
const DefaultForgetAfter = time.Hour

// setQuantum is how many full batches in a row a file of a set is read
// before the set moves on to the next file with lines: one busy file
// cannot hold the others back for longer.
const setQuantum = 16

// fileSet is the Source of a feed that follows a set of files
// (Config.Paths): every file the globs match, now or later, is read as if
// it were its own feed, by its own stream, with its own epoch, position,
// status and record (its entry in the set's registry), and its items name
// it (Item.File).
//
// Invariants:
//
//   - a Poll hands out the lines of one file only; the batches handed out
//     are remembered in order (delivered), so that a Commit of one item,
//     which says every item handed out before it is processed, commits
//     every file up to its last line handed out before that item;
//   - a file's entry is written only by its stream (and by the set when
//     the file is found finished and gone, or forgotten), one writer at a
//     time (the registry's lock and its mutex);
//   - a file that disappears is read to its end through the descriptor its
//     stream holds; it is forgotten (its entry removed) only once finished
//     and gone for ForgetAfter; one gone unfinished is reported.
type fileSet struct {
	cfg    Config
	log    *slog.Logger
	now    func() time.Time
	fs     vfs.FS
	reg    *pointer.Registry // nil unless Committed
	sw     *setWriter        // the GroupCommit writer of the files' records; nil without a registry
	forget time.Duration
	every  time.Duration

	// Owned by the polling goroutine; mu also guards them against Status.
	mu        sync.Mutex
	members   map[string]*member
	order     []*member // by path
	cur       int       // index in order of the file read last
	quantum   int
	scanned   bool
	lastScan  time.Time
	entries   map[string]pointer.Entry // the registry at the start
	resume    []ResumePoint
	holders   []string
	resumed   bool
	polled    bool
	closed    bool
	done      bool
	delivered []delivery
	seq       uint64
	caught    *member           // the file of the last Poll, if it caught up then
	unsynced  bool              // the sync after priming new files failed
	errs      map[string]string // the last error of a file that could not be followed
	// scans counts the scans; rescan asks the next Poll for one (a
	// stream asked whether it may leave its file: see mayLeave).
	scans  uint64
	rescan bool
}

// member is one file of a set.
type member struct {
	path string
	st   *stream // nil once closed (finished and gone)
	// gone: the globs no longer match the path (or it no longer exists);
	// goneAt is when that was first seen.
	gone     bool
	goneAt   time.Time
	finished bool // found finished and gone: its entry says so
	reported bool // reported gone unfinished
	// asked is set when the stream found its path naming another file
	// and asked to leave its own (mayLeave), at scan askedAt; verdict is
	// the answer of the scans since (see follow).
	asked   bool
	askedAt uint64
	verdict leaveVerdict
	// nowhere is the last scan that found the file of an asking stream
	// at no name of the set (0: none, or not the last one).
	nowhere uint64
}

// delivery is a run of lines of one file handed out by consecutive Polls:
// from first to last, in epoch.
type delivery struct {
	m           *member
	epoch       uint64
	first, last int64
}

// newFileSet returns the set source of cfg: cfg is valid and has Paths.
func newFileSet(cfg Config) (*fileSet, error) {
	fset := &fileSet{
		cfg:     cfg,
		log:     cfg.Logger,
		now:     cfg.Now,
		fs:      cfg.FS,
		forget:  cfg.ForgetAfter,
		every:   cfg.ScanInterval,
		members: map[string]*member{},
		errs:    map[string]string{},
	}
	if fset.log == nil {
		fset.log = slog.Default()
	}
	if fset.now == nil {
		fset.now = time.Now
	}
	if fset.fs == nil {
		fset.fs = vfs.Default()
	}
	if fset.forget == 0 {
		fset.forget = DefaultForgetAfter
	}
	if fset.every <= 0 {
		fset.every = DefaultScanInterval
	}
	fset.cfg.Logger, fset.cfg.Now, fset.cfg.FS = fset.log, fset.now, fset.fs
	if cfg.Strategy.Commits() {
		path := registryPath(cfg)
		st := &stream{fs: fset.fs, log: fset.log, path: path}
		if err := st.pointerFolder(filepath.Dir(path), true); err != nil {
			return nil, err
		}
		fset.reg = pointer.OpenRegistry(path, pointer.Options{FS: fset.fs, Sync: cfg.Sync, SyncInterval: cfg.SyncInterval, Logger: fset.log})
		if err := fset.reg.Lock(); err != nil {
			return nil, errors.Join(fmt.Errorf("feed: the registry %s of the file set %s: %w", path, strings.Join(cfg.Paths, ", "), err), fset.reg.Close())
		}
		fset.sw = newSetWriter(fset.reg, cfg.Sync)
	}
	return fset, nil
}

// registryPath is the registry file of the set of cfg.
func registryPath(cfg Config) string {
	name := cfg.Name
	if name == "" {
		name = "files"
	}
	return filepath.Join(cfg.PointerDir, name+pointer.RegistrySuffix)
}

// resumeFrom keeps the points, given to each file as it is found: the
// points of a store for that file, or a point "not found" for a store
// that holds none for it (it has applied nothing of it).
func (fset *fileSet) resumeFrom(points []ResumePoint) error {
	switch {
	case fset.closed:
		return ErrClosed
	case fset.polled:
		return fmt.Errorf("feed: ResumeFrom on the file set %s after its first Poll: call ResumeFrom once, before the first Poll", strings.Join(fset.cfg.Paths, ", "))
	case fset.resumed:
		return fmt.Errorf("feed: ResumeFrom on the file set %s called twice: call it once, before the first Poll, with every point", strings.Join(fset.cfg.Paths, ", "))
	}
	fset.resumed = true
	if !fset.cfg.Strategy.Commits() {
		return nil
	}
	fset.resume = slices.Clone(points)
	for _, pt := range points {
		if !slices.Contains(fset.holders, pt.Holder) {
			fset.holders = append(fset.holders, pt.Holder)
		}
		if pt.Found && pt.Lineage.File == "" {
			fset.log.Warn("feed: a store holds a record of this feed for no file of the set (the feed followed one file before?): it does not lower where any file of the set starts",
				"paths", strings.Join(fset.cfg.Paths, ", "), "holder", pt.Holder, "epoch", pt.Lineage.Epoch, "position", pt.Lineage.Position)
		}
	}
	return nil
}

// pointsFor returns the resume points of the file key, whose registry
// entry is of epoch (0: none). A store's record of the entry's epoch is
// the store's point for the file whatever file it names: the file was
// renamed (its entry followed it) after the store applied lines of it
// under its old name. Else the store's record of key, if any.
func (fset *fileSet) pointsFor(key string, epoch uint64) []ResumePoint {
	var out []ResumePoint
	for _, h := range fset.holders {
		var best, own *ResumePoint
		for i := range fset.resume {
			pt := &fset.resume[i]
			if pt.Holder != h || !pt.Found || pt.Lineage.File == "" {
				continue
			}
			if epoch != 0 && pt.Lineage.Epoch == epoch && (best == nil || pt.Lineage.Position > best.Lineage.Position) {
				best = pt
			}
			if pt.Lineage.File == key {
				own = pt
			}
		}
		switch {
		case best != nil:
			out = append(out, *best)
		case own != nil:
			out = append(out, *own)
		default:
			out = append(out, ResumePoint{Holder: h})
		}
	}
	return out
}

// poll reads the lines of one file of the set: the file read last while it
// has full batches (up to setQuantum), else the next file with lines.
func (fset *fileSet) poll(ctx context.Context, items []Item) (int, error) {
	if fset.closed {
		return 0, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if fset.done {
		return 0, ErrDone
	}
	if fset.cfg.Strategy == OnceLatest {
		fset.done = true
		return 0, ErrDone
	}
	if len(items) == 0 {
		return 0, nil
	}
	if !fset.polled {
		fset.polled = true
		if fset.reg != nil {
			res, err := fset.reg.Load()
			if err != nil {
				fset.polled = false
				return 0, err
			}
			switch {
			case res.Damaged:
				fset.log.Warn("feed: the file set's registry is damaged: the entries before the damage are used, the files of the others are read from 0 under new epochs", "registry", fset.reg.Path(), "reason", res.Reason)
			case res.Missing || res.Empty:
				fset.log.Info("feed: no registry yet: every file of the set is read from 0", "registry", fset.reg.Path())
			}
			fset.entries = res.Entries
		}
	}
	if fset.unsynced {
		// The records of files primed at the last scan are not durable
		// yet: no line of theirs goes out before they are.
		if err := fset.reg.Sync(); err != nil {
			return 0, err
		}
		fset.unsynced = false
	}
	if !fset.scanned || fset.rescan || fset.now().Sub(fset.lastScan) >= fset.every {
		if err := fset.scan(); err != nil {
			return 0, err
		}
	}
	n := len(fset.order)
	if n == 0 {
		return 0, nil
	}
	if m := fset.caught; m != nil {
		// The file read last caught up at the last Poll, whose lines are
		// not in use any more: its read buffer serves the next file.
		fset.caught = nil
		if m.st != nil {
			m.st.fr.release()
		}
	}
	if fset.quantum <= 0 {
		fset.cur++
		fset.quantum = setQuantum
	}
	allDone := true
	for try := 0; try < n; try++ {
		i := (fset.cur + try) % n
		m := fset.order[i]
		if m.st == nil {
			continue
		}
		got, err := m.st.poll(ctx, items)
		switch {
		case errors.Is(err, ErrDone):
			m.st.fr.release()
			continue
		case err != nil:
			allDone = false
			fset.failed(m, err)
			if got == 0 {
				continue
			}
		}
		allDone = false
		if got == 0 {
			m.st.fr.release()
			continue
		}
		fset.cur = i
		if got == len(items) {
			fset.quantum--
		} else {
			fset.quantum = 0 // caught up: the next Poll starts with the next file
			fset.caught = m
		}
		fset.handed(m, items[:got])
		return got, nil
	}
	if allDone && fset.cfg.Strategy == OnceEarliest {
		fset.done = true
		return 0, ErrDone
	}
	return 0, nil
}

// handed remembers the lines of m handed out, and renumbers them in the
// order of the set.
func (fset *fileSet) handed(m *member, items []Item) {
	for i := range items {
		fset.seq++
		items[i].Seq = fset.seq
	}
	first, last := items[0], items[len(items)-1]
	if k := len(fset.delivered); k > 0 && fset.delivered[k-1].m == m && fset.delivered[k-1].epoch == first.Epoch {
		fset.delivered[k-1].last = last.Position
		return
	}
	if first.Epoch == 0 {
		return // no positions: nothing to commit
	}
	fset.delivered = append(fset.delivered, delivery{m: m, epoch: first.Epoch, first: first.Position, last: last.Position})
}

// failed reports a file's error (once per distinct error) and keeps it for
// Status; the file is tried again at the next Poll. An input that is not
// a regular file is left out of the set.
func (fset *fileSet) failed(m *member, err error) {
	msg := err.Error()
	fset.mu.Lock()
	prev := fset.errs[m.path]
	fset.errs[m.path] = msg
	fset.mu.Unlock()
	if prev != msg {
		fset.log.Warn("feed: a file of the set cannot be read; the other files are read on, and it is tried again", "path", m.path, "err", err)
	}
}

// commit commits every file up to its last line handed out before the item
// (epoch, position), and that file up to it.
func (fset *fileSet) commit(epoch uint64, position int64) error {
	if fset.closed {
		return ErrClosed
	}
	at := -1
	for i, d := range fset.delivered {
		if d.epoch == epoch && position >= d.first && position <= d.last {
			at = i
			break
		}
	}
	if at < 0 {
		return nil // not a line handed out and not committed yet: ignored
	}
	var errs []error
	for _, d := range fset.delivered[:at] {
		if d.m.st != nil {
			errs = append(errs, d.m.st.commit(d.epoch, d.last))
		}
	}
	d := fset.delivered[at]
	if d.m.st != nil {
		errs = append(errs, d.m.st.commit(epoch, position))
	}
	if position == d.last {
		at++
	} else {
		fset.delivered[at].first = position + 1
	}
	fset.delivered = append(fset.delivered[:0], fset.delivered[at:]...)
	return errors.Join(errs...)
}

// flush waits for the writes of every file's group commit.
func (fset *fileSet) flush() error {
	var errs []error
	for _, m := range fset.order {
		if m.st != nil {
			errs = append(errs, m.st.flush())
		}
	}
	return errors.Join(errs...)
}

// close closes every file, then the registry.
func (fset *fileSet) close() error {
	if fset.closed {
		return nil
	}
	fset.closed = true
	var errs []error
	for _, m := range fset.order {
		if m.st != nil {
			errs = append(errs, m.st.close())
		}
	}
	if fset.sw != nil {
		fset.sw.close() // every stream's slot is closed
	}
	if fset.reg != nil {
		errs = append(errs, fset.reg.Close())
	}
	return errors.Join(errs...)
}

// matches returns the files the globs match now, but for the excluded
// ones and the rotated files of others (with a Rotated pattern naming
// {name}), sorted.
func (fset *fileSet) matches() ([]string, error) {
	seen := map[string]bool{}
	for _, g := range fset.cfg.Paths {
		names, err := filepath.Glob(g)
		if err != nil {
			return nil, fmt.Errorf("feed: match %q: %w", g, err)
		}
		for _, n := range names {
			seen[filepath.Clean(n)] = true
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		if fset.excluded(n, seen) {
			continue
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return out, nil
}

// excluded reports whether name is left out of the set: it matches an
// Exclude pattern (against the whole path, or its base name), it is a
// pointer, registry or temporary file, or it is a rotated file of another
// file of the set.
func (fset *fileSet) excluded(name string, all map[string]bool) bool {
	base := filepath.Base(name)
	for _, x := range fset.cfg.Exclude {
		if ok, _ := filepath.Match(x, name); ok {
			return true
		}
		if ok, _ := filepath.Match(x, base); ok {
			return true
		}
	}
	if strings.HasSuffix(name, pointer.Suffix) || strings.HasSuffix(name, pointer.RegistrySuffix) || strings.HasSuffix(name, pointer.TempSuffix) {
		return true
	}
	if fset.cfg.Rotated == "" {
		return false
	}
	// A rotated file of another file of the set (app.log.1 of app.log):
	// read by that file's stream, never as a file of its own.
	dir := filepath.Dir(name)
	for i := 1; i < len(base); i++ {
		other := filepath.Join(dir, base[:i])
		if !all[other] && fset.members[other] == nil {
			continue
		}
		if ok, _ := filepath.Match(rotatedPattern(other, expandName(fset.cfg.Rotated, other)), name); ok {
			return true
		}
	}
	return false
}

// expandName replaces {name} in a Rotated pattern with the base name of
// path.
func expandName(pattern, path string) string {
	return strings.ReplaceAll(pattern, "{name}", filepath.Base(path))
}

// scan matches the globs again: a new file becomes a file of the set, read
// from its start (a Latest set starts at the end only of the files there
// at its first scan); a file no longer matched is followed to its end,
// then marked finished, closed, and forgotten after ForgetAfter.
func (fset *fileSet) scan() error {
	names, err := fset.matches()
	if err != nil {
		return err
	}
	now := fset.now()
	first := !fset.scanned
	fset.scanned, fset.lastScan, fset.rescan = true, now, false
	fset.scans++
	deferred := fset.follow(names, first)
	matched := make(map[string]bool, len(names))
	var added []*member
	for _, n := range names {
		matched[n] = true
		m := fset.members[n]
		switch {
		case deferred[n]:
			// Not started yet: its content may be that of a file of the
			// set still being read (see follow).
		case m == nil:
			m = &member{path: n}
			if err := fset.start(m, first); err != nil {
				fset.reportOnce(n, err)
				continue
			}
			added = append(added, m)
		case m.gone:
			m.gone = false
			if m.st == nil {
				if err := fset.start(m, false); err != nil {
					fset.reportOnce(n, err)
					continue
				}
			}
		}
	}
	if err := fset.prime(added); err != nil {
		return err
	}
	fset.mu.Lock()
	for _, m := range added {
		fset.members[m.path] = m
	}
	if len(added) > 0 {
		fset.order = slices.SortedFunc(maps.Values(fset.members), func(a, b *member) int { return strings.Compare(a.path, b.path) })
	}
	fset.mu.Unlock()
	for _, m := range fset.order {
		if !matched[m.path] {
			fset.leaving(m, now)
		}
	}
	if first && fset.reg != nil {
		fset.entriesGone(matched, now)
	}
	fset.forgetOld(now)
	return nil
}

// prime opens the files just found as their first Poll would, and makes
// the records their opens stored (the new epochs of new files) durable
// with one sync of the registry, rather than one each: a set that finds a
// thousand new files costs one fdatasync, not a thousand. No line of them
// is handed out before that sync returns.
func (fset *fileSet) prime(added []*member) error {
	if fset.reg == nil || len(added) == 0 {
		return nil
	}
	fset.reg.SetDeferred(true)
	for _, m := range added {
		if err := m.st.prime(); err != nil {
			fset.failed(m, err)
		}
	}
	fset.reg.SetDeferred(false)
	if err := fset.reg.Sync(); err != nil {
		fset.unsynced = true
		return err
	}
	return nil
}

// start makes m's stream: its record is its registry entry (an entry a
// single-file pointer holds is moved into the registry first), and it
// starts where the stores of the points for it say.
func (fset *fileSet) start(m *member, first bool) error {
	cfg := fset.cfg
	cfg.Path, cfg.Paths, cfg.Exclude = m.path, nil, nil
	cfg.Rotated = expandName(fset.cfg.Rotated, m.path)
	if cfg.Strategy == Latest && !first {
		cfg.Strategy = Earliest // a file that appears later is new: every line of it
	}
	var store recordStore
	var epoch uint64
	if fset.reg != nil {
		if _, ok := fset.reg.Entry(m.path); !ok {
			fset.migrate(m.path)
		}
		if e, ok := fset.reg.Entry(m.path); ok {
			epoch = e.Epoch
		}
		store = &regEntry{reg: fset.reg, key: m.path, now: fset.now}
	}
	st, err := newStream(cfg, store, m.path)
	if err != nil {
		return err
	}
	if fset.reg != nil && len(fset.holders) > 0 {
		if err := st.resumeFrom(fset.pointsFor(m.path, epoch)); err != nil {
			return err
		}
	}
	st.leaveCheck = func() leaveVerdict { return fset.mayLeave(m) }
	st.setw = fset.sw
	m.st, m.finished, m.reported, m.asked = st, false, false, false
	return nil
}

// migrate moves the record of a single-file pointer file of path (the feed
// followed that one file before) into the registry: the file goes on where
// it was, in its epoch. The pointer file is removed once the entry is
// written; one another feed holds (locked) is left alone.
func (fset *fileSet) migrate(path string) {
	for _, ptr := range []string{pointer.Path(path, fset.cfg.PointerDir), path + pointer.Suffix} {
		if _, err := fset.fs.Stat(ptr); err != nil {
			continue
		}
		pf := pointer.Open(ptr, pointer.Options{FS: fset.fs, Logger: fset.log})
		if err := pf.Lock(); err != nil {
			fset.log.Warn("feed: a pointer file of a file of the set is held by another feed: not moved into the registry; the file is read from 0 by this feed", "path", path, "pointer", ptr, "err", err)
			pf.Close()
			return
		}
		res, err := pf.Load()
		if err != nil || !res.Found {
			pf.Close()
			continue
		}
		err = fset.reg.Store(path, pointer.Entry{Record: res.Record, Stamp: fset.now()})
		if err == nil {
			err = fset.reg.Sync()
		}
		if err != nil {
			fset.log.Warn("feed: cannot move a single-file pointer into the registry; the file is read as the pointer says once it can be", "path", path, "pointer", ptr, "err", err)
			pf.Close()
			return
		}
		if err := fset.fs.Remove(ptr); err != nil {
			fset.log.Warn("feed: moved a single-file pointer into the registry, but cannot remove it: it is no longer used", "path", path, "pointer", ptr, "err", err)
		}
		pf.Close()
		fset.log.Info("feed: moved a single-file pointer into the file set's registry", "path", path, "pointer", ptr, "registry", fset.reg.Path(),
			"epoch", res.Record.Epoch, "position", res.Record.Position)
		return
	}
}

// leaving handles a file no longer matched: its stream reads on (the
// descriptor it holds) until it is finished; then its entry says so, the
// stream is closed, and the entry is forgotten ForgetAfter later. A file
// gone with lines not delivered or not committed is reported once.
func (fset *fileSet) leaving(m *member, now time.Time) {
	if !m.gone {
		m.gone, m.goneAt = true, now
	}
	st := m.st
	if st == nil {
		return
	}
	if !st.finished() {
		if now.Sub(m.goneAt) >= fset.every && !m.reported {
			m.reported = true
			stt := st.status()
			fset.log.Warn("feed: a file of the set is gone (removed, or no longer matched) and not finished: its lines read are delivered, those not read yet are lost if nothing holds the file open",
				"path", m.path, "epoch", stt.Epoch, "read", stt.ReadPosition, "committed", stt.CommittedPosition, "state", stt.State.String(), "detail", stt.Detail)
		}
		return
	}
	if fset.reg != nil {
		if e, ok := fset.reg.Entry(m.path); ok {
			e.Finished, e.Stamp = true, now
			if err := fset.reg.Store(m.path, e); err != nil {
				fset.log.Warn("feed: cannot mark a gone file finished in the registry; tried again at the next scan", "path", m.path, "err", err)
				return
			}
		}
	}
	if err := st.close(); err != nil {
		fset.log.Warn("feed: closing a finished file of the set failed", "path", m.path, "err", err)
	}
	fset.log.Info("feed: a file of the set is finished and gone: closed; its entry is forgotten after ForgetAfter", "path", m.path, "forget_after", fset.forget)
	m.st, m.finished = nil, true
}

// entriesGone looks at the registry's entries of files not matched at the
// start: one not finished is reported (gone while the feed was stopped:
// lines after its position may be lost), and marked finished so that it is
// forgotten after ForgetAfter.
func (fset *fileSet) entriesGone(matched map[string]bool, now time.Time) {
	for key, e := range fset.entries {
		if matched[key] || e.Finished {
			continue
		}
		if _, ok := fset.reg.Entry(key); !ok {
			continue // moved to the file's new name (see adoptEntries)
		}
		fset.log.Warn("feed: a file of the set's registry is gone (removed, renamed or no longer matched while the feed was stopped), not marked finished: lines after its position, if it had any, are not read",
			"path", key, "registry", fset.reg.Path(), "epoch", e.Epoch, "position", e.Position)
		e.Finished, e.Stamp = true, now
		if err := fset.reg.Store(key, e); err != nil {
			fset.log.Warn("feed: cannot mark a gone file finished in the registry", "path", key, "err", err)
		}
	}
}

// forgetOld forgets the entries of files finished and gone for longer than
// ForgetAfter (a negative ForgetAfter: at once). A file gone and still not
// finished after ForgetAfter (a partial last line that never ends, lines
// delivered that are never committed) is given up: closed, reported, and
// forgotten ForgetAfter later.
func (fset *fileSet) forgetOld(now time.Time) {
	for _, m := range fset.order {
		if m.gone && m.st != nil && now.Sub(m.goneAt) >= fset.forget {
			stt := m.st.status()
			fset.log.Warn("feed: a file of the set gone for ForgetAfter is still not finished: given up (closed)",
				"path", m.path, "epoch", stt.Epoch, "read", stt.ReadPosition, "committed", stt.CommittedPosition, "detail", stt.Detail)
			if err := m.st.close(); err != nil {
				fset.log.Warn("feed: closing a file of the set failed", "path", m.path, "err", err)
			}
			m.st, m.finished = nil, true
			if fset.reg != nil {
				if e, ok := fset.reg.Entry(m.path); ok {
					e.Finished, e.Stamp = true, now
					_ = fset.reg.Store(m.path, e)
				}
			}
		}
	}
	if fset.reg == nil {
		return
	}
	for key, e := range fset.reg.Entries() {
		m := fset.members[key]
		if !e.Finished || now.Sub(e.Stamp) < fset.forget || (m != nil && m.st != nil) {
			continue
		}
		if err := fset.reg.Forget(key); err != nil {
			fset.log.Warn("feed: cannot forget a finished file in the registry; tried again at the next scan", "path", key, "err", err)
			continue
		}
		fset.log.Info("feed: forgot a finished file gone for ForgetAfter", "path", key, "forget_after", fset.forget)
		if m != nil {
			fset.mu.Lock()
			delete(fset.members, key)
			fset.order = slices.DeleteFunc(fset.order, func(x *member) bool { return x == m })
			fset.mu.Unlock()
			fset.delivered = slices.DeleteFunc(fset.delivered, func(d delivery) bool { return d.m == m })
		}
	}
}

// reportOnce logs that a file matched by the globs cannot be followed.
func (fset *fileSet) reportOnce(path string, err error) {
	msg := err.Error()
	fset.mu.Lock()
	prev := fset.errs[path]
	fset.errs[path] = msg
	fset.mu.Unlock()
	if prev != msg {
		fset.log.Warn("feed: a file matched by the set's globs cannot be followed; it is tried again at the next scan", "path", path, "err", err)
	}
}

// status sums up the files' statuses; Files holds each (sorted by path).
func (fset *fileSet) status() Status {
	fset.mu.Lock()
	order := slices.Clone(fset.order)
	errs := maps.Clone(fset.errs)
	closed := fset.closed
	fset.mu.Unlock()
	st := Status{Path: strings.Join(fset.cfg.Paths, ", "), Strategy: fset.cfg.Strategy, Reopens: map[string]uint64{}}
	caught, done, behind, waiting, gone := 0, 0, 0, 0, 0
	for _, m := range order {
		if m.st == nil {
			st.Files = append(st.Files, Status{Path: m.path, Strategy: fset.cfg.Strategy, State: StateStopped, Detail: "finished and gone"})
			gone++
			continue
		}
		ms := m.st.status()
		if e := errs[m.path]; e != "" && ms.LastCommitError == "" {
			ms.Detail = strings.TrimPrefix(ms.Detail+"; ", "; ") + "error: " + e
		}
		st.Files = append(st.Files, ms)
		st.LinesRead += ms.LinesRead
		st.BytesRead += ms.BytesRead
		st.OversizeSkipped += ms.OversizeSkipped
		st.PartialDropped += ms.PartialDropped
		st.CommitErrors += ms.CommitErrors
		st.Rewinds += ms.Rewinds
		st.FileSize += ms.FileSize
		st.ReadPosition += ms.ReadPosition
		st.CommittedPosition += ms.CommittedPosition
		st.AskedPosition += ms.AskedPosition
		st.PartialPending = st.PartialPending || ms.PartialPending
		for r, n := range ms.Reopens {
			st.Reopens[r] += n
		}
		if ms.LastCommitError != "" {
			st.LastCommitError = m.path + ": " + ms.LastCommitError
		}
		if ms.LastRewind != "" {
			st.LastRewind = m.path + ": " + ms.LastRewind
		}
		if ms.LastReopenAt.After(st.LastReopenAt) {
			st.LastReopenAt, st.LastReopenReason = ms.LastReopenAt, m.path+": "+ms.LastReopenReason
		}
		switch ms.State {
		case StateCaughtUp:
			caught++
		case StateDone:
			done++
		case StateWaiting:
			waiting++
		default:
			behind++
		}
	}
	switch {
	case closed:
		st.State = StateStopped
	case fset.done:
		st.State = StateDone
	case len(order) == gone:
		st.State, st.Detail = StateWaiting, "waiting for files matching "+st.Path
	case behind > 0:
		st.State, st.Detail = StateBehind, fmt.Sprintf("%d of %d files behind", behind, len(order))
	case caught+done+waiting+gone == len(order) && caught > 0:
		st.State = StateCaughtUp
		if st.PartialPending {
			st.Detail = DetailPartialLine
		}
	case done+gone == len(order):
		st.State = StateDone
	default:
		st.State, st.Detail = StateWaiting, fmt.Sprintf("%d of %d files waiting", waiting, len(order))
	}
	if n := len(errs); n > 0 && st.Detail == "" {
		st.Detail = fmt.Sprintf("%d files with errors", n)
	}
	return st
}

// regEntry is a file's entry in its set's registry, as a stream's
// recordStore. Its key is the file's path, and changes when the file is
// renamed (moveTo); mu orders a move with the writes of GroupCommit's
// writer.
type regEntry struct {
	reg *pointer.Registry
	now func() time.Time
	mu  sync.Mutex
	key string
}

func (e *regEntry) name() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.key
}

func (e *regEntry) Load() (pointer.LoadResult, error) {
	key := e.name()
	ent, ok := e.reg.Entry(key)
	if !ok {
		return pointer.LoadResult{Missing: true, Reason: fmt.Sprintf("registry %s has no entry for %s", e.reg.Path(), key)}, nil
	}
	return pointer.LoadResult{Record: ent.Record, Found: true, Reason: fmt.Sprintf("registry %s, entry %s", e.reg.Path(), key)}, nil
}

func (e *regEntry) Store(p pointer.Record) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.reg.Store(e.key, pointer.Entry{Record: p, Stamp: e.now()})
}

// storeLater is Store without the sync of SyncEveryCommit (see
// setWriter, which syncs once for the records of several files).
func (e *regEntry) storeLater(p pointer.Record) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.reg.StoreLater(e.key, pointer.Entry{Record: p, Stamp: e.now()})
}

// moveTo moves the entry to key: it is stored under key, then forgotten
// under the old one. A crash between the two leaves both, of the same
// file; the next start keeps the one whose path names the file (see
// adoptEntries). The key is not changed when the store fails.
func (e *regEntry) moveTo(key string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if ent, ok := e.reg.Entry(e.key); ok {
		ent.Finished, ent.Stamp = false, e.now()
		if err := e.reg.Store(key, ent); err != nil {
			return err
		}
		if err := e.reg.Forget(e.key); err != nil {
			old := e.key
			e.key = key // moved: the old entry is a duplicate the next start drops
			return fmt.Errorf("feed: the entry of %s moved to %s in registry %s, but the old one stays (a start drops it): %w", old, key, e.reg.Path(), err)
		}
	}
	e.key = key
	return nil
}

func (e *regEntry) SyncIfDue() error { return e.reg.SyncIfDue() }
func (e *regEntry) Path() string     { return e.reg.Path() + " (" + e.name() + ")" }
func (e *regEntry) Close() error     { return nil }

var _ recordStore = (*regEntry)(nil)

// finished reports whether the stream has nothing left: it is caught up
// (or done, or waiting for a path with no file), nothing it delivered is
// uncommitted, and no partial line is pending. Used for a file gone from a
// set.
func (s *stream) finished() bool {
	switch s.state {
	case StateCaughtUp, StateDone, StateWaiting:
	default:
		return false
	}
	if s.in != nil && s.fr.pending() > 0 {
		return false
	}
	return s.pf == nil || !s.unprocessed()
}
