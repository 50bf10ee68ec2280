package state

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	pebblevfs "github.com/cockroachdb/pebble/v2/vfs"
)

// pebbleDir is the Pebble database directory inside a store directory.
const pebbleDir = "pebble"

type pebbleEngine struct {
	db  *pebble.DB
	fs  pebblevfs.FS
	log *slog.Logger
	// bgErr receives Pebble's background errors (a failed flush or
	// compaction), so that a flush the store waits for can give up.
	bgErr chan error
	// fatal is set once Pebble reported a fatal error: the database must
	// not be used again.
	fatal atomic.Bool
	// dir is the store's folder, path the database's.
	dir, path string
	// vouched is set once the database passed its check of the levels, was
	// made by this store, or was found as the store left it checked
	// (pebble_left.go), and cleared by damage: a clean close then records
	// how it left the files.
	vouched atomic.Bool
	// broken is the damage the background read of a database left
	// checked found (pebble_left.go).
	broken atomic.Pointer[CorruptError]
	// bg is that read, nil when none was started.
	bg *pebbleBgCheck
	// left is set when the open found the database as the store left it
	// checked: the store reads it in the background (checkLeftInBackground).
	left      bool
	verifyMax int64 // Options.VerifyMaxBytes as opened
	hooks     *hooks
	// sched schedules the database's compactions (pebble_sched.go).
	sched *pebbleScheduler
}

// damaged returns err as a *CorruptError when Pebble says it found
// damage (a block's checksum, a missing file), else err.
func (e *pebbleEngine) damaged(err error) error {
	if err == nil {
		return nil
	}
	if ce := (*CorruptError)(nil); errors.As(err, &ce) {
		e.vouched.Store(false)
		return err
	}
	if !pebble.IsCorruptionError(err) {
		return err
	}
	e.vouched.Store(false)
	return errors.Join(&CorruptError{Backend: Pebble, Dir: e.dir, File: e.path, Record: "the Pebble database",
		Detail: "Pebble found damaged data (" + firstLine(err.Error()) + ")"}, err)
}

// firstLine is s up to its first line break.
func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// openPebble opens the Pebble database of the store in dir; create says
// whether it may be made (else a missing database is an error).
func openPebble(dir string, opts *Options, create bool) (*pebbleEngine, error) {
	path := filepath.Join(dir, pebbleDir)
	fs := opts.pebbleFS
	if fs == nil {
		fs = pebblevfs.Default
	}
	e := &pebbleEngine{fs: fs, log: opts.logger(), bgErr: make(chan error, 1), dir: dir, path: path, verifyMax: opts.verifyMaxBytes(), hooks: opts.hooks}
	logger := pebbleLogger{log: opts.logger()}
	po := &pebble.Options{
		FS:     fs,
		Logger: logger,
		EventListener: &pebble.EventListener{BackgroundError: func(err error) {
			logger.Errorf("background error: %s", err)
			select {
			case e.bgErr <- err:
			default:
			}
		}},
		ErrorIfNotExists: !create,
		// WAL sync chunks: each WAL record carries the offset synced
		// before it, so that Pebble tells a damaged record that later
		// synced records vouch for (an error) from a torn tail (the end).
		FormatMajorVersion: pebble.FormatWALSyncChunks,
		// Pebble's default, named: see pebbleScheduler.
		L0StopWritesThreshold: pebbleL0Stop,
		// See pebbleMemTableSize.
		MemTableSize: opts.pebbleMemTableSize(),
	}
	// The block cache (its part of Options.CacheSize) keeps index and
	// filter blocks, and the data blocks read last. Bloom filters (10 bits
	// a key, about 1 % false positives; L0's setting goes to every level)
	// spare a read of a key that a table does not hold a search of that
	// table: a new key, or one in a lower level.
	cache := pebble.NewCache(opts.pebbleBlockCache())
	defer cache.Unref() // the database holds its own reference
	po.Cache = cache
	po.Levels[0].FilterPolicy = bloom.FilterPolicy(10)
	var damage *walDamage
	if !create {
		// What Pebble would drop in silence (see pebble_wal.go).
		d, err := checkWAL(fs, path)
		switch {
		case err != nil:
			opts.logger().Warn("state: could not read pebble's WAL before opening it", "store", dir, "err", err)
		case d != nil && !d.confirmed:
			opts.logger().Warn(d.warning(), "store", dir, "wal", d.file, "offset", d.offset)
		}
		damage = d
	}
	if !create {
		// What Pebble would open past (see pebble_manifest.go).
		md, err := checkManifest(fs, path)
		switch {
		case err != nil:
			opts.logger().Warn("state: could not read pebble's MANIFEST before opening it", "store", dir, "err", err)
		case md != nil && md.lastTornOnly:
			opts.logger().Warn("state: pebble's MANIFEST ends with a record that does not verify (a write cut by a crash, or a damaged byte): Pebble drops that last change of its tables and makes them again from its WALs",
				"store", dir, "manifest", md.file, "offset", md.offset, "records", md.records)
		case md != nil:
			return nil, md.err(dir, path)
		}
		// A database as the store left it checked is read in the
		// background instead (see pebble_left.go).
		if e.recordsLeft() && e.takeLeft() && e.verifyMax >= 0 {
			e.vouched.Store(true)
			e.left = true
			opts.logger().Info("state: the Pebble database is as this store left it checked at its last close: its levels are not checked before the open, and it is read whole in the background",
				"store", dir, "path", path)
		} else {
			checked, err := e.check(fs, po, opts.verifyMaxBytes())
			if err != nil {
				return nil, err
			}
			e.vouched.Store(checked)
		}
	}
	// Pebble does not wait for another holder of its lock: retry until
	// the lock timeout, as bbolt does.
	deadline := time.Now().Add(opts.lockTimeout())
	// No compaction in the first leftCheckDelay of a database that exists
	// (see pebbleScheduler).
	delay := leftCheckDelay
	if h := opts.hooks; h != nil && h.pebbleCompactionDelay > 0 {
		delay = h.pebbleCompactionDelay
	}
	if create {
		delay = 0
	}
	for {
		sched := newPebbleScheduler(delay)
		po.Experimental.CompactionScheduler = sched
		po.EventListener.WriteStallBegin = sched.stalled
		db, err := pebble.Open(path, po)
		if err != nil {
			sched.release()
		}
		if err == nil {
			e.db, e.sched = db, sched
			if eager := opts.pebbleEagerBytes(); eager >= 0 && db.Metrics().Total().TablesSize <= eager {
				// A small database compacts from its open (see
				// pebbleEagerBytes).
				sched.notBefore.Store(0)
				sched.UpdateGetAllowedWithoutPermission()
			}
			if create {
				e.vouched.Store(true)
				// A new database's first WAL was made before Pebble moved
				// to the format asked for, without WAL sync chunks: a flush
				// puts it behind, and its successor has them.
				if err := e.flush(); err != nil {
					return nil, errors.Join(fmt.Errorf("open pebble %s: %w", path, err), db.Close())
				}
			}
			return e, nil
		}
		if pebble.IsCorruptionError(err) {
			where := "damaged data"
			if damage != nil && damage.confirmed {
				where = fmt.Sprintf("its WAL %s damaged at offset %d, with records synced after it", damage.file, damage.offset)
			}
			return nil, fmt.Errorf("open pebble %s: Pebble found %s; restore the store's folder from a backup, or remove the whole folder %s to start over (its feeds then read their input again): %w: %w",
				path, where, dir, ErrCorrupt, err)
		}
		if !pebbleLocked(err) {
			switch {
			case create || errors.Is(err, iofs.ErrPermission):
				return nil, fmt.Errorf("open pebble %s: %w", path, err)
			case errors.Is(err, iofs.ErrNotExist) || strings.Contains(err.Error(), "does not exist"):
				// A table, the MANIFEST or CURRENT deleted: Pebble cannot
				// find what its own records name.
				return nil, errors.Join(&CorruptError{Backend: Pebble, Dir: dir, File: path, Record: "the Pebble database",
					Detail: "a file it records is missing (" + firstLine(err.Error()) + ")"}, err)
			default:
				// A table of another size than the MANIFEST says, a
				// MANIFEST that does not add up: Pebble has no sentinel for
				// these.
				return nil, errors.Join(&CorruptError{Backend: Pebble, Dir: dir, File: path, Record: "the Pebble database",
					Detail: "Pebble cannot open it (" + firstLine(err.Error()) + ")"}, err)
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("open pebble %s: another process holds it (waited %v): %w: %w", path, opts.lockTimeout(), ErrLocked, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// check opens the database read-only, without compactions, and checks
// every level (db.CheckLevels: every key in order, every block read and
// its checksum checked), when the database is at most maxBytes; checked
// says it did. Pebble
// panics on some damage (a key out of order in a damaged MANIFEST) in its
// own compaction goroutines, where no recover reaches: the read-only open
// starts none, and its panics on this goroutine become errors. An open
// that fails for another reason (the lock) is left to the real open.
func (e *pebbleEngine) check(fs pebblevfs.FS, po *pebble.Options, maxBytes int64) (checked bool, err error) {
	if maxBytes < 0 {
		return false, nil
	}
	var size int64
	if names, err := fs.List(e.path); err == nil {
		for _, n := range names {
			if fi, err := fs.Stat(fs.PathJoin(e.path, n)); err == nil && !fi.IsDir() {
				size += fi.Size()
			}
		}
	}
	if size > maxBytes {
		e.log.Info("state: the Pebble database is larger than the check at open covers: its blocks are checked as they are read",
			"store", e.dir, "path", e.path, "bytes", size, "verify_max_bytes", maxBytes)
		return false, nil
	}
	if e.hooks != nil && e.hooks.pebbleCheck != nil {
		e.hooks.pebbleCheck()
	}
	defer func() {
		if r := recover(); r != nil {
			err = &CorruptError{Backend: Pebble, Dir: e.dir, File: e.path, Record: "the Pebble database",
				Detail: fmt.Sprintf("Pebble stopped with a panic (%v) checking its levels, most likely on damaged data", r)}
		}
	}()
	ro := *po
	ro.ReadOnly = true
	ro.DisableAutomaticCompactions = true
	ro.EventListener = nil
	db, err := pebble.Open(e.path, &ro)
	if err != nil {
		return false, nil
	}
	cerr := db.CheckLevels(nil)
	if err := db.Close(); err != nil && cerr == nil {
		cerr = err
	}
	if cerr != nil {
		return false, errors.Join(&CorruptError{Backend: Pebble, Dir: e.dir, File: e.path, Record: "the Pebble database",
			Detail: "its levels do not check (" + firstLine(cerr.Error()) + ")"}, cerr)
	}
	return true, nil
}

// pebbleLocked reports whether Open failed on Pebble's LOCK file: held by
// another process (EAGAIN from flock) or by this one.
func pebbleLocked(err error) bool {
	return errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK) ||
		strings.Contains(err.Error(), "lock held by current process")
}

func (e *pebbleEngine) get(key []byte) (_ []byte, _ bool, err error) {
	if e.fatal.Load() {
		return nil, false, errPebbleFatal
	}
	if err := e.brokenErr(); err != nil {
		return nil, false, err
	}
	defer e.recoverFatal(&err)
	return e.getFrom(e.db, key)
}

// getFrom returns a copy of the value of key in r (the database or a
// snapshot of it), and whether it exists.
func (e *pebbleEngine) getFrom(r pebble.Reader, key []byte) ([]byte, bool, error) {
	v, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, e.damaged(err)
	}
	val := append([]byte{}, v...)
	return val, true, closer.Close()
}

func (e *pebbleEngine) scan(prefix []byte, fn func(k, v []byte) error) (err error) {
	if e.fatal.Load() {
		return errPebbleFatal
	}
	if err := e.brokenErr(); err != nil {
		return err
	}
	defer e.recoverFatal(&err)
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return e.damaged(err)
	}
	for it.First(); it.Valid(); it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return e.damaged(errors.Join(err, it.Close()))
		}
		if err := fn(it.Key(), v); err != nil {
			return errors.Join(err, it.Close())
		}
	}
	return e.damaged(it.Close())
}

func (e *pebbleEngine) commit(ws []write) (err error) {
	if e.fatal.Load() {
		return errPebbleFatal
	}
	if err := e.brokenErr(); err != nil {
		return err
	}
	defer e.recoverFatal(&err)
	b := e.db.NewBatch()
	for _, w := range ws {
		var err error
		if w.del {
			err = b.Delete(w.key, nil)
		} else {
			err = b.Set(w.key, w.val, nil)
		}
		if err != nil {
			return errors.Join(err, b.Close())
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return errors.Join(err, b.Close())
	}
	return b.Close()
}

// The longest key and value the store writes to Pebble. Pebble itself has
// no limit per key or value; its limit is a batch of 4 GiB (a batch's
// length is a uint32), and the store commits a whole batch as one Pebble
// batch. These limits, with the cut of a batch at maxBatchBytes, keep a
// batch far below it.
const (
	pebbleMaxKey   = 16 << 20
	pebbleMaxValue = 64 << 20
)

func (e *pebbleEngine) limits() (maxKey, maxValue int) { return pebbleMaxKey, pebbleMaxValue }

// errPebbleFatal is returned by a Pebble engine after a fatal error.
var errPebbleFatal = errors.New("pebble reported a fatal error earlier; restart the process")

// close flushes the memtable, so that a store closed cleanly keeps
// nothing in its WAL (see pebble_wal.go), and closes the database. A flush
// that fails (a full disk) leaves the last batches in the WAL, durable: a
// warning, not an error. A database closed so, checked and never found
// damaged, is recorded as left checked (pebble_left.go).
func (e *pebbleEngine) close() (err error) {
	e.stopChecking()
	defer e.recoverFatal(&err)
	flushed := false
	if !e.fatal.Load() {
		// No compaction starts from here on, the one the flush below would
		// start included, unless level 0 is one flush short of the write
		// stall (the flush would wait for a compaction): Close waits for
		// every compaction running (see pebbleScheduler).
		if m := e.db.Metrics(); int(m.Levels[0].Sublevels)+1 < pebbleL0Stop {
			e.sched.closing.Store(true)
		}
		if err := e.flush(); err != nil {
			e.log.Warn("state: could not flush pebble's memtable at close: the last batches stay in its WAL, durable", "err", err)
		} else {
			flushed = true
		}
	}
	if err := e.db.Close(); err != nil {
		return err
	}
	if flushed && e.recordsLeft() && e.verifyMax >= 0 && e.vouched.Load() && !e.fatal.Load() && e.broken.Load() == nil {
		e.recordLeft()
	}
	return nil
}

// flush flushes the memtable and waits until it is in a table, or until
// Pebble reports a background error: Pebble retries a failed flush for
// ever (a full disk), and the store must not wait for ever.
func (e *pebbleEngine) flush() (err error) {
	defer e.recoverFatal(&err)
	select {
	case <-e.bgErr: // an old one
	default:
	}
	flushed, err := e.db.AsyncFlush()
	if err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	select {
	case <-flushed:
		return nil
	case err := <-e.bgErr:
		return fmt.Errorf("flush: %w", err)
	}
}

// pebbleLogger sends Pebble's messages to slog: its routine messages at
// debug level, its errors at error level.
type pebbleLogger struct{ log *slog.Logger }

func (l pebbleLogger) Infof(format string, args ...any) {
	l.log.Debug("pebble: " + fmt.Sprintf(format, args...))
}

func (l pebbleLogger) Errorf(format string, args ...any) {
	l.log.Error("pebble: " + fmt.Sprintf(format, args...))
}

// Fatalf is how Pebble reports an error it cannot continue after, such as
// a failed WAL write or sync: it expects the process to exit. The store
// recovers the panic in the call that caused it, returns it as the
// commit's error and goes into its failed state, which asks for a restart.
func (l pebbleLogger) Fatalf(format string, args ...any) {
	err := fmt.Errorf(format, args...)
	l.log.Error(err.Error())
	panic(pebbleFatal{err})
}

// pebbleFatal carries a Pebble fatal error through the panic of Fatalf.
type pebbleFatal struct{ err error }

// recoverFatal turns a Pebble fatal error into *err, and marks the engine
// unusable; a batch too large for Pebble into *err; any other panic into a
// *CorruptError, the engine unusable.
func (e *pebbleEngine) recoverFatal(err *error) {
	if r := recover(); r != nil {
		if e, ok := r.(error); ok && errors.Is(e, pebble.ErrBatchTooLarge) {
			// A batch Pebble cannot hold (the store cuts batches far
			// below it): this commit fails, the database is intact.
			*err = e
			return
		}
		e.fatal.Store(true)
		f, ok := r.(pebbleFatal)
		if !ok {
			// Pebble panics on some damage it meets (and on its own
			// state after it, at Close): an error, never a crash.
			*err = &CorruptError{Backend: Pebble, Dir: e.dir, File: e.path, Record: "the Pebble database",
				Detail: fmt.Sprintf("Pebble stopped with a panic (%v), most likely on damaged data", r)}
			return
		}
		*err = f.err
	}
}
