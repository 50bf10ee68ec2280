package state

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// boltFile is the bbolt database file inside a store directory.
const boltFile = "state.bolt"

var boltBucket = []byte("tidemark")

// boltInitialMmap is the size of bbolt's first mapping of its file.
const boltInitialMmap = 1 << 30

type boltEngine struct {
	db        *bolt.DB
	dir, path string
	// broken is the error of a panic or fault inside bbolt: the file is
	// damaged, and every later call returns it.
	broken atomic.Pointer[CorruptError]
	// bg is the check of the file running in the background since open,
	// nil when none was started (see checkAtOpen).
	bg *bgCheck
	// commitShare is the part of the store's cache budget (see
	// Options.CacheSize) that bounds the memory of a commit; keyCap the
	// most keys a batch changes to stay within it (boltKeyCap), updated
	// after each commit as the tree grows.
	commitShare int64
	keyCap      atomic.Int64
	// pageCost is the memory the share counts for each page a commit
	// changes (Options.boltPageCost).
	pageCost int64
	// elems is how many elements the tree's leaf pages hold
	// (sampleElems; before the first sample, boltDefaultElems), pageSize
	// the database's page size. sampledElems and sampledLeaves are the
	// samples' elements and leaf pages, each sample's counted a quarter
	// less at the next. commits is the commits made.
	elems, pageSize             int64
	sampledElems, sampledLeaves float64
	commits                     int64
	// limit is the runtime's soft memory limit when the store counts what
	// it keeps live once under it (heapFactor 1), 0 otherwise: a commit
	// then keeps live at most what the limit leaves beside the value cache
	// (boltLimitShare, its pages counted by boltPageMemory), whose live
	// bytes vcLive returns (set by the store that holds the engine; nil:
	// none).
	limit  int64
	vcLive func() int64
	// vouched is set once the file passed its check, or was found as the
	// store left it checked (boltleft.go), and cleared by damage: a clean
	// close then records how it left the file.
	vouched atomic.Bool
	logger  *slog.Logger
	// lastWritten and lastKeys are the pages the last commit of at least
	// minRatioKeys keys wrote, and its keys (the committer's).
	lastWritten, lastKeys int64
	hooks                 *hooks
	verifyMax             int64 // Options.VerifyMaxBytes as opened
	// tables is set for a store of format 4, whose tables' keys are in
	// buckets of their own (see bolt_tables.go), by the store's open
	// before it reads or writes a data key.
	tables bool
	// moving is set while the open of a store whose upgrade to format 4
	// is under way checks its file: its data keys are in both places (see
	// moveToTables).
	moving bool
}

// useTables makes e read and write the keys of a store of format 4 (see
// bolt_tables.go).
func (e *boltEngine) useTables() { e.tables, e.moving = true, false }

// minRatioKeys is the least keys a commit changes for the pages it wrote a
// key to be taken as the workload's (a commit of a few keys writes the
// branch pages above them, the freelist and the meta page all the same).
const minRatioKeys = 64

// batchKeyCapper is a backend whose commit takes memory for each key it
// changes (bbolt: the pages of the keys, read into nodes and written
// again): the committer cuts a batch once it changed batchKeyCap keys,
// which the backend keeps up to date as its data grows.
type batchKeyCapper interface {
	batchKeyCap() *atomic.Int64
}

func (e *boltEngine) batchKeyCap() *atomic.Int64 { return &e.keyCap }

// boltCommitShareMax bounds the commit's share of a large budget: a batch
// of DefaultBatchSize random keys changes at most that many pages.
const boltCommitShareMax = 128 << 20

// boltCommitShare is the part of the cache budget that bounds a commit's
// memory: half of it, at most boltCommitShareMax; none without a budget.
func boltCommitShare(cacheSize int64) int64 {
	return min(cacheSize/2, boltCommitShareMax)
}

// boltCommitShareMisses is the commit's part of the cache budget once the
// value cache finds too few of the keys looked for (see core.rebalance):
// three quarters of it, at most boltCommitShareMax.
func boltCommitShareMisses(cacheSize int64) int64 {
	return min(cacheSize*3/4, boltCommitShareMax)
}

// boltKeyCap returns the most keys a batch may change for its commit to
// take at most share bytes in a tree of pages pages, at cost bytes a page
// changed (Options.boltPageCost). When the last commit wrote written
// pages for keys keys, the cap is what that ratio allows: keys in order
// (new keys at the end, a few hot pages) share pages, and a batch of them
// is not cut at the random keys' cap; random keys of a deep tree change
// the branch pages above their leaves too (at 10,000,000 accounts about
// 1.25 pages a key), and their batches are not let past the share (the
// first batch after such a change of keys may take more than the share,
// at most BatchSize lines' worth). Before any commit, it is the random
// keys' estimate: k random keys change about pages*(1-exp(-k/pages)) of
// the pages. No cap (MaxInt64) when the whole tree fits in the share, or
// without a share.
func boltKeyCap(share, cost, pages, written, keys int64) int64 {
	if share <= 0 || pages*cost <= share {
		return math.MaxInt64
	}
	k := int64(-float64(pages) * math.Log1p(-float64(share)/float64(pages*cost)))
	if written > 0 && keys > 0 {
		k = int64(float64(share) / float64(cost) * float64(keys) / float64(written))
	}
	return max(k, minBatchKeys)
}

// minBatchKeys is the least keys a batch is cut at for its commit's
// memory: below it, the commit's own cost (the branch pages, the
// freelist, two syncs) would dwarf the keys'.
const minBatchKeys = 256

// keyEstimator is a backend that estimates how many keys it holds, for
// the preload of the value cache to size its map (core.preload).
type keyEstimator interface {
	estimateKeys() int64
}

// boltKeyBytes is the bytes of a page in use that estimateKeys counts a
// key for: a leaf element (16 bytes) and a key and value of a ledger's
// table (about 30), in a page about three quarters full.
const boltKeyBytes = 64

// estimateKeys returns about how many keys the tree holds: its pages in
// use (the file's less the free ones; branch pages too) at boltKeyBytes a
// key. It reads no page.
func (e *boltEngine) estimateKeys() int64 {
	st := e.db.Stats()
	ps := int64(e.db.Info().PageSize)
	pages := e.size()/ps - int64(st.FreePageN+st.PendingPageN)
	return max(pages, 0) * ps / boltKeyBytes
}

// pagesWritten is how many pages the database's commits wrote so far.
func (e *boltEngine) pagesWritten() int64 {
	st := e.db.Stats()
	return st.TxStats.GetWrite()
}

// updateKeyCap sets keyCap for the tree as it is (its pages in use: the
// file's pages less the free ones) and for the last commit of at least
// minRatioKeys keys; this one wrote written pages for keys keys (none at
// open).
func (e *boltEngine) updateKeyCap(written, keys int64) {
	if keys >= minRatioKeys {
		e.lastWritten, e.lastKeys = written, keys
	}
	if e.commitShare <= 0 {
		e.keyCap.Store(math.MaxInt64)
		return
	}
	pages := e.pagesInUse()
	keyCap := boltKeyCap(e.commitShare, e.pageCost, pages, e.lastWritten, e.lastKeys)
	if e.limit > 0 {
		var vc int64
		if e.vcLive != nil {
			vc = e.vcLive()
		}
		// At least a byte: boltKeyCap takes a share of none for no cap.
		share := max(boltLimitShare(e.limit, vc), 1)
		keyCap = min(keyCap, boltKeyCap(share, boltPageMemory(e.pageSize, e.elems), pages, e.lastWritten, e.lastKeys))
	}
	e.keyCap.Store(keyCap)
}

// boltDefaultElems is the elements a leaf page is taken to hold before a
// commit sampled the tree (sampleElems): 64, a page of 4 KiB filled with
// elements of a key and a value of 24 bytes each.
const boltDefaultElems = 64

// boltSamplePages is how many of the tree's pages, picked at random, a
// commit reads the header of to learn how many elements its leaf pages
// hold (sampleElems). A commit samples until the samples weigh
// boltSampleLeaves leaf pages, then one commit in boltSampleEvery: the
// pages of a tree that is not in the page cache are reads of the disk.
const (
	boltSamplePages  = 32
	boltSampleLeaves = 64
	boltSampleEvery  = 16
)

// sampleElems updates elems from the headers of boltSamplePages pages of
// the file picked at random (the leaf pages among them; a page of a
// large value, whose element spills over several, is not counted): the
// elements a leaf page of all the samples, each sample's counted a quarter
// less at the next, so that the tree's pages as they are now weigh most
// and a first sample of a few leaves of a new store soon weighs nothing.
// Its reads are of the mapped file: the caller guards them (see guard).
// The committer's.
func (e *boltEngine) sampleElems() {
	var n, sum int64
	_ = e.db.View(func(tx *bolt.Tx) error {
		hwm := tx.Size() / e.pageSize
		if hwm <= 2 {
			return nil
		}
		for range boltSamplePages {
			info, err := tx.Page(int(2 + rand.Int64N(hwm-2)))
			if err != nil || info == nil || info.Type != "leaf" || info.OverflowCount > 0 {
				continue
			}
			n++
			// A damaged header says nothing sensible: at most a page of
			// elements of a one-byte key.
			sum += min(int64(info.Count), e.pageSize/(boltElemHeader+1))
		}
		return nil
	})
	if n > 0 {
		e.sampledElems = e.sampledElems*3/4 + float64(sum)
		e.sampledLeaves = e.sampledLeaves*3/4 + float64(n)
		e.elems = int64(e.sampledElems / e.sampledLeaves)
	}
}

// boltElemHeader is the header of an element of a bbolt leaf page.
const boltElemHeader = 16

// pagesInUse is the tree's pages: the file's, less the free ones.
func (e *boltEngine) pagesInUse() int64 {
	st := e.db.Stats()
	return e.size()/int64(e.db.Info().PageSize) - int64(st.FreePageN+st.PendingPageN)
}

// setCommitShare sets the part of the cache budget that bounds a commit's
// memory, and the cap of keys a batch that follows from it. The
// committer's.
func (e *boltEngine) setCommitShare(share int64) {
	e.commitShare = share
	e.updateKeyCap(0, 0)
}

// guard runs in a deferred call of every method that calls into bbolt,
// with the fault setting it replaced: bbolt reads its pages from memory
// mapped from the file, trusts what it finds there, and panics (an
// assertion, an invalid freelist page) or faults (a page past the end of a
// truncated file) on a damaged one. The panic or fault of this goroutine
// becomes *err, a *CorruptError naming the file. bbolt rolls back the
// transaction of the panic first (View and Update do), so its locks are
// free again.
func (e *boltEngine) guard(oldFault bool, r any, err *error) {
	debug.SetPanicOnFault(oldFault)
	if r == nil {
		return
	}
	ce := boltDamaged(e.dir, e.path, r)
	e.broken.CompareAndSwap(nil, ce)
	*err = ce
}

// boltDamaged is the error of a panic or fault r inside bbolt on file path.
func boltDamaged(dir, path string, r any) *CorruptError {
	what := fmt.Sprint(r)
	if re, ok := r.(runtime.Error); ok && strings.Contains(re.Error(), "fault") {
		what = "a read of its memory-mapped pages faulted (" + re.Error() + "): the file is shorter than its pages say, or damaged"
	} else {
		what = "bbolt stopped on a page it cannot read (" + what + ")"
	}
	return &CorruptError{Backend: Bolt, Dir: dir, File: path, Record: "the bbolt database", Detail: what}
}

func (e *boltEngine) check() error {
	if ce := e.broken.Load(); ce != nil {
		return ce
	}
	return nil
}

func openBolt(dir string, opts *Options) (_ *boltEngine, err error) {
	path := filepath.Join(dir, boltFile)
	// bbolt leaves its file open (and locked) after a panic in Open:
	// the file is kept here to be closed.
	var file *os.File
	openFile := opts.boltOpenFile
	if openFile == nil {
		openFile = os.OpenFile
	}
	defer func(old bool) {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			if file != nil {
				_ = file.Close()
			}
			err = boltDamaged(dir, path, r)
		}
	}(debug.SetPanicOnFault(true))
	bo := &bolt.Options{
		Timeout: opts.lockTimeout(),
		OpenFile: func(name string, flag int, perm os.FileMode) (*os.File, error) {
			f, err := openFile(name, flag, perm)
			file = f
			return f, err
		},
		// bbolt maps its file again when it grows past the mapping, and
		// waits for every read transaction to end to do it: a snapshot
		// (Store.Snapshot, Backup) held during such a commit would stall
		// it. A mapping of 1 GiB from the start (address space, not
		// memory) leaves that to a file growing past each GiB.
		InitialMmapSize: boltInitialMmap,
		// NoSync stays false: every commit writes and syncs the data
		// pages, then the meta page.
	}
	db, err := bolt.Open(path, 0o600, bo)
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			return nil, fmt.Errorf("open bbolt %s: another process holds it (waited %v): %w", path, bo.Timeout, ErrLocked)
		}
		if errors.Is(err, bolterrors.ErrInvalid) || errors.Is(err, bolterrors.ErrChecksum) ||
			errors.Is(err, bolterrors.ErrVersionMismatch) || errors.Is(err, bolterrors.ErrInvalidMapping) ||
			// bbolt has no sentinel for these (v1.4): a file cut shorter
			// than its meta pages, sizes that make no sense.
			strings.HasPrefix(err.Error(), "file size too small") || err.Error() == "mmap too large" {
			return nil, &CorruptError{Backend: Bolt, Dir: dir, File: path, Record: "the bbolt database",
				Detail: "bbolt refuses its meta pages (" + err.Error() + ")"}
		}
		return nil, fmt.Errorf("open bbolt %s: %w", path, err)
	}
	// The bucket is made once: an open writes nothing to an existing
	// file before it was checked (a commit, even an empty one, writes a
	// freelist to pages a damaged freelist may say are free).
	var has bool
	err = db.View(func(tx *bolt.Tx) error { has = tx.Bucket(boltBucket) != nil; return nil })
	if err == nil && !has && opts.existing {
		return nil, errors.Join(&CorruptError{Backend: Bolt, Dir: dir, File: path, Record: "the bbolt database",
			Detail: "its bucket is missing, though the folder's STORE file says the store was made: its root page is damaged, or the file was replaced"}, db.Close())
	}
	if err == nil && !has {
		err = db.Update(func(tx *bolt.Tx) error {
			_, err := tx.CreateBucketIfNotExists(boltBucket)
			return err
		})
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("open bbolt %s: create bucket: %w", path, err), db.Close())
	}
	e := &boltEngine{db: db, dir: dir, path: path, commitShare: boltCommitShare(opts.cacheSize()),
		pageCost: opts.boltPageCost(), elems: boltDefaultElems, pageSize: int64(db.Info().PageSize),
		logger: opts.logger(), hooks: opts.hooks, verifyMax: opts.verifyMaxBytes()}
	if opts.heapFactor(Bolt) == 1 {
		e.limit = debug.SetMemoryLimit(-1)
	}
	e.updateKeyCap(0, 0)
	return e, nil
}

func (e *boltEngine) get(key []byte) (val []byte, ok bool, err error) {
	if err := e.check(); err != nil {
		return nil, false, err
	}
	defer func(old bool) { e.guard(old, recover(), &err) }(debug.SetPanicOnFault(true))
	err = e.db.View(func(tx *bolt.Tx) error {
		v := tableGet(tx.Bucket(boltBucket), key, e.tables)
		if v != nil {
			val, ok = append([]byte{}, v...), true
		}
		return nil
	})
	return val, ok, err
}

func (e *boltEngine) scan(prefix []byte, fn func(k, v []byte) error) (err error) {
	if err := e.check(); err != nil {
		return err
	}
	defer func(old bool) { e.guard(old, recover(), &err) }(debug.SetPanicOnFault(true))
	return e.db.View(func(tx *bolt.Tx) error {
		c := newBoltCursor(tx.Bucket(boltBucket), e.tables)
		for k, v := c.Seek(prefix); k != nil && hasPrefix(k, prefix); k, v = c.Next() {
			if err := fn(k, v); err != nil {
				return err
			}
		}
		return nil
	})
}

// commit writes ws in key order: each Put searches the B+tree from its
// root, and keys in order find the pages of the previous one in the CPU's
// cache and touch each node once, in order (a batch of 10,000 changes in
// the order of their first change spent a third of its commit searching).
// The keys of ws are distinct, so their order changes nothing else. The
// committer hands them sorted already (writeOrder); they are sorted here
// only when they are not.
func (e *boltEngine) commit(ws []write) (err error) {
	if err := e.check(); err != nil {
		return err
	}
	defer func(old bool) { e.guard(old, recover(), &err) }(debug.SetPanicOnFault(true))
	if byKey := func(a, b write) int { return bytes.Compare(a.key, b.key) }; !slices.IsSortedFunc(ws, byKey) {
		slices.SortFunc(ws, byKey)
	}
	written := e.pagesWritten()
	err = e.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(boltBucket)
		if e.tables {
			return tableWrites(b, ws)
		}
		for _, w := range ws {
			if err := writeTo(b, w.key, w); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		e.commits++
		if e.commitShare > 0 && (e.sampledLeaves < boltSampleLeaves || e.commits%boltSampleEvery == 0) {
			e.sampleElems()
		}
		e.updateKeyCap(e.pagesWritten()-written, int64(len(ws)))
	}
	return err
}

func (e *boltEngine) close() (err error) {
	e.stopChecking()
	defer func(old bool) { e.guard(old, recover(), &err) }(debug.SetPanicOnFault(true))
	// A file left checked is recorded so (see boltleft.go).
	var txid uint64
	record := e.vouched.Load() && e.broken.Load() == nil && e.verifyMax >= 0 &&
		e.db.View(func(tx *bolt.Tx) error { txid = uint64(tx.ID()); return nil }) == nil
	if err := e.db.Close(); err != nil {
		return err
	}
	if record {
		e.recordLeft(txid)
	}
	return nil
}

func (e *boltEngine) log() *slog.Logger {
	if e.logger != nil {
		return e.logger
	}
	return slog.Default()
}

// limits are bbolt's: its Put refuses a longer key or value, and so would
// fail the whole batch's commit.
func (e *boltEngine) limits() (maxKey, maxValue int) { return bolt.MaxKeySize, bolt.MaxValueSize }

// lockTimeout is how long an open waits for another process's lock.
func (o *Options) lockTimeout() time.Duration {
	if o.LockTimeout > 0 {
		return o.LockTimeout
	}
	return DefaultLockTimeout
}

// size returns the length of the database file.
func (e *boltEngine) size() int64 {
	var n int64
	_ = e.db.View(func(tx *bolt.Tx) error { n = tx.Size(); return nil })
	return n
}
