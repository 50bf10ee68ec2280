package state

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/checkpoint"
	"github.com/tidemark-go/tidemark/vfs"
)

// Namespace is one namespace of a store: its own keys, buckets and applied
// positions per feed, in the same store and the same transactions as the
// other namespaces. A processor applies its lines to its namespace; what
// acts on the whole store (Flush, Close, Bind, outputs, Stats) is on
// [Store]. Get one with [Store.Namespace]; a Store is itself the namespace
// "".
//
// A Namespace is safe for concurrent use. Apply and View calls are
// serialized for the whole store.
type Namespace interface {
	// Apply applies one delivered line: it calls fn, whose reads see every
	// change staged before, and stages fn's writes together with d's
	// (epoch, position) for the feed, in this namespace. It returns
	// applied=false without calling fn when d is a re-delivery: at or below
	// the recorded position in the same epoch, or recognised through the
	// lineage of an earlier epoch on the same file. Re-deliveries are
	// counted in [Stats].
	//
	// When fn returns an error, nothing it wrote is staged, the position
	// does not move, and the error is returned as is.
	//
	// In the batched mode Apply returns once the change is staged; it
	// becomes durable with its batch. Apply blocks (back-pressure) while a
	// full batch waits for the previous one to commit, until ctx is done.
	// In the Sync mode Apply returns once the change is durable.
	//
	// After a commit failed, Apply returns an error wrapping [ErrFailed].
	// fn must not call the store.
	Apply(ctx context.Context, d tidemark.Delivery, fn func(tx *Tx) error) (applied bool, err error)
	// ApplyEach applies n delivered lines in order, as n calls of Apply
	// would: for each i, the line of delivery at(i), with fn(tx, i) as its
	// function. Each line is its own transaction: a line whose function
	// fails leaves nothing staged of its own, and the lines before it
	// stay staged. It costs less a line than Apply, as it takes the store
	// once for the n lines: a processor that is handed lines in batches
	// (framework.BatchHandler) applies them with it.
	//
	// fn is called once for each line that is applied, and not at all
	// for a re-delivery (skipped and counted as by Apply), so a caller
	// that needs to know which lines were skipped notes the calls. It
	// returns how many lines it went through, n when every line was
	// applied or skipped; when line i fails (its function's error, or the
	// store's) it returns i and the error, and line i and those after it
	// are not applied. at is called for each line, in order, and the
	// Delivery it returns is read only during the call of ApplyEach.
	// Other Apply, ApplyEach and View calls wait while it runs. fn must
	// not call the store.
	ApplyEach(ctx context.Context, n int, at func(i int) *tidemark.Delivery, fn func(tx *Tx, i int) error) (done int, err error)
	// ApplyRuns applies n delivered lines in order, as ApplyEach does,
	// with one transaction for each run of them instead of one a line:
	// fn(tx, from, to) applies lines from to to-1 in tx, which then
	// records the position of line to-1. It costs less a line than
	// ApplyEach, for what a line's own transaction costs (a record to
	// undo each of its writes, the bookkeeping of its position) and for
	// what a processor can write once for a run rather than once a line:
	// a count, a sum, a key that every line changes.
	//
	// A run is lines of one feed, file, epoch and origin in increasing
	// positions, as many as the staging batch takes before it is full
	// (Options.BatchSize; MaxBatchSize while the batch before it
	// commits; with bbolt, no more lines than the keys its commit has
	// memory for, as if each changed a key of its own); a line without
	// an epoch is a run of its own, and with Options.Sync every line is,
	// durable before the next runs. A re-delivery is skipped, counted as
	// by Apply, and never in a run.
	// tx.Delivery() is the run's last line.
	//
	// When fn fails (or writes what the backend cannot store), nothing of
	// its run is staged, not even the lines before the one that failed,
	// and ApplyRuns returns the run's first line and the error, as it
	// does for the store's own errors; the runs before stay staged. To go
	// on line by line from there (to learn which line fails, and keep the
	// ones before it), apply the rest with ApplyEach. When fn panics, its
	// run is undone and the runs before stay staged. at is called for
	// each line, in order, and the Delivery it returns is read only during
	// the call. Other Apply, ApplyEach and View calls wait while it runs.
	// fn must not call the store.
	ApplyRuns(ctx context.Context, n int, at func(i int) *tidemark.Delivery, fn func(tx *Tx, from, to int) error) (done int, err error)
	// View calls fn with a read-only transaction of this namespace. It sees
	// every change staged by an Apply that returned, durable or not yet: the
	// state as the processor knows it. Writes fail with [ErrReadOnly].
	// View and Apply are serialized: for a long read beside a running
	// processor (a status page, a query), use Snapshot.
	View(fn func(tx *Tx) error) error
	// Snapshot calls fn with a read-only transaction of this namespace over
	// a consistent snapshot of the durable state: what the commits made
	// durable before it began, not what is staged. It runs beside Apply
	// and View, blocking neither: reads for operators belong here. Writes
	// fail with [ErrReadOnly]. ctx bounds the snapshot's reads where they
	// go over a network (PostgreSQL). See the package documentation,
	// "Snapshots", for what each backend holds while fn runs.
	Snapshot(ctx context.Context, fn func(tx *Tx) error) error
	// Applied returns the last position applied in this namespace for feed
	// that is durable, with its lineage, and whether there is one. Right
	// after Open it is what the store found on disk. For a feed of a set
	// of files, each file has its own record (keyed by Delivery.File):
	// Applied returns the one of file "", AppliedAll every file's.
	Applied(feed string) (tidemark.Lineage, bool)
}

// Store is a durable key/value store that applies every delivered line
// once: it writes a processor's state change and the feed's (epoch,
// position) in one transaction, and skips re-deliveries. See the package
// documentation for the caveats and the durability modes.
//
// A Store is the namespace "" of itself (its Apply, View and Applied act
// there), and holds what belongs to the whole store: the bound checkpoints,
// the outputs, the commits, the counters.
//
// A Store is safe for concurrent use. Apply and View calls are serialized.
type Store interface {
	Namespace
	// Backup writes a consistent copy of the whole store (every namespace,
	// the applied positions, the outputs) into the new folder dir, while
	// the store is in use: the durable state of one moment. Opening the
	// copy is a restore (see the package documentation, "Backup").
	Backup(ctx context.Context, dir string) error
	// AppliedAll returns every durable record of feed in the whole store,
	// one per namespace (and, for a feed of a set of files, per file:
	// Lineage.File names it) that holds one, in namespace then file order:
	// where the feed must resume so that this store misses nothing (the
	// lowest of them, or the input's start when there is none). The
	// framework reads it before the feed's first Poll.
	AppliedAll(feed string) []tidemark.Lineage
	// Bind makes the store drive cp: each time a batch is durable, the
	// store calls cp.DurableThrough with the mark it took when it cut the
	// batch. feed must be cp's feed. A store with bound checkpoints also
	// brings them up to date every BatchInterval when nothing is staged.
	// Binding the same checkpoint again does nothing. Bind a checkpoint to
	// one store only: each store vouches for its own state. The store calls
	// cp.Mark (so the framework's progress function) while it holds its
	// lock: that function must not call the store.
	Bind(feed string, cp *checkpoint.Checkpoint) error
	// Namespace returns the namespace name of the store: its own keys and
	// its own applied positions per feed. The store Open returns is the
	// namespace "".
	Namespace(name string) Namespace
	// Output declares the append-only output file name in the store's
	// directory and returns it. Writes to it are staged with
	// [Tx.Output] and committed with the state. On open the file is cut
	// back to its committed length (bytes of a batch whose state never
	// committed). The declaration is recorded before the file's first
	// byte, so a file of that name that is not empty when the output is
	// first declared is not the store's: it fails with [ErrOutputExists]
	// and is left as it is.
	Output(name string) (*Output, error)
	// Flush cuts what is staged into a batch and waits until it is durable
	// and the bound checkpoints have been told. Call it at a clean stop.
	Flush(ctx context.Context) error
	// Close flushes, stops the committer and closes the backend and the
	// output files. It returns the error of a failed commit, if any.
	Close() error
	// Stats returns the store's counters.
	Stats() Stats
	// Failed returns a channel that is closed once the store has failed: a
	// commit failed, or the check of its file running in the background
	// (see [Options].VerifyMaxBytes) found damage. From then on every Apply
	// and Flush returns [Store.Err]. A host whose feed is idle learns of the
	// failure here, not at its next Apply: the framework stops its server.
	Failed() <-chan struct{}
	// Err returns the error the store failed with (it wraps [ErrFailed] and
	// the cause: a [*CorruptError] for damage), or nil while it has not
	// failed. A store that was closed without failing returns nil.
	Err() error
	// Dir returns the store's directory.
	Dir() string
	// Backend returns the backend's name: [Bolt], [Pebble] or [Postgres].
	Backend() string
}

// Stats are a store's counters, for status.
type Stats struct {
	// Backend is [Bolt] or [Pebble]; Sync is true in the Sync mode.
	Backend string
	Sync    bool
	// Applied counts the deliveries applied (fn called and returned nil).
	Applied uint64
	// Skipped counts the re-deliveries skipped; SkippedByLineage those of
	// them recognised through the lineage of an earlier epoch.
	Skipped          uint64
	SkippedByLineage uint64
	// Staged is the number of applied deliveries not yet durable.
	Staged int
	// Commits counts durable transactions; FailedCommits the failed ones.
	Commits       uint64
	FailedCommits uint64
	// LastError is the message of the last failed commit, empty if none.
	LastError string
	// Failed is true once a commit failed: the store declares nothing
	// durable any more and the process should restart.
	Failed bool
	// BackPressure counts the Apply calls that waited for a batch to commit.
	BackPressure uint64
	// CacheHits counts the reads of the value cache (see
	// [Options].CacheSize) that found their key, CacheMisses those that
	// did not and read the backend; CacheBudget is the cache's budget
	// now, in live bytes (0 without a value cache). A bbolt store whose
	// cache finds few of its keys gives part of that budget to its
	// commits.
	CacheHits, CacheMisses uint64
	CacheBudget            int64
	// Format is the store's format, as its format record says (see
	// [Upgrade]): 1 (values without checksums), 2 or 3, 4 for a bbolt
	// store whose tables' keys are in buckets of their own, 5 for a
	// PostgreSQL store whose rows are under a sid. A bbolt or PostgreSQL
	// store of format 1 to 3 and a store of format 1 get to the newest
	// format of their backend with [Upgrade] (tidemark store upgrade DIR).
	Format int
}

// feedKey names the applied position of a feed in a namespace: of the
// feed, or of one file of a feed that follows a set of files
// (tidemark.Delivery.File; "" for a feed of one file).
type feedKey struct{ ns, feed, file string }

// feedState is what the store knows of a feed in a namespace. c.mu guards
// every field.
type feedState struct {
	fk feedKey
	// latest is the latest applied position, staged or durable (TailLen 0:
	// no tail hash known), and origin the file it was applied from.
	latest tidemark.Lineage
	origin *tidemark.Origin
	// durable is the latest durable position, if hasDur.
	durable tidemark.Lineage
	hasDur  bool
	// verdict, if cached, tells whether an epoch continues the lineage.
	verdict verdict
	cached  bool
	// stagedIn is the seq of the batch that holds the latest position,
	// at index idx of its applied records.
	stagedIn uint64
	idx      int
	// admitted is set once an Apply of the feed passed the checks of
	// admit: bound (or exempt), a record key the backend takes.
	admitted bool
	// renameChecked is the last epoch followRename looked for under
	// another file of the feed.
	renameChecked uint64
}

// appliedRec is the highest position of a feed in a batch.
type appliedRec struct {
	fs     *feedState
	lin    tidemark.Lineage
	origin *tidemark.Origin
}

// verdict caches whether an epoch continues the recorded lineage.
type verdict struct {
	epoch uint64
	match bool
}

// entry is one staged change of a key. key and val are in the batch's
// arena; val is overwritten in place by a later change of the same length
// in the same batch.
type entry struct {
	key, val []byte
	del      bool
	h        uint64 // the hash of key (see hashKey)
	// tx and got are the txWrites.gen of the last Apply that logged the
	// entry's old value, and of the last that handed its value out.
	tx, got uint64
	pos     int32 // in the batch's writes
	// pfx is the first byte of the bucket prefix the entry was made
	// with (see bkey.isEntry).
	pfx *byte
}

// batch is what the committer writes in one transaction.
type batch struct {
	// writes are the keys changed, in the order of their first change,
	// found by key through idx.
	writes  []*entry
	idx     index
	applied []appliedRec
	// forget lists the records of epochs left behind (see keepLeft)
	// deleted by the batch.
	forget []feedKey
	// schemas are the schema records of the tables first written in the
	// batch (see Tx.recordSchema), written with it; no Apply's rollback
	// takes them back.
	schemas []write
	seq     uint64 // 1, 2, ... in the order of the batches
	// outs are the bytes the batch appends to outputs, in the order of
	// their first write; an Apply appends to them in place (see
	// core.outOf).
	outs  []batchOut
	count int
	// keys is len(writes) as of the last Apply staged; c.mu guards it.
	keys int
	// size counts the bytes of the arena's chunks and of the outputs
	// (see core.full); c.mu guards it. grown counts the arena's chunks
	// made by the running Apply, which holds the token but not c.mu: the
	// Apply adds them to size as it stages its line.
	size, grown int
	started     time.Time // when the first change was staged
	marks       []markOf
	done        chan struct{}
	err         error
	// folded is set once the value cache holds the batch's values, after
	// its commit (see core.startFold).
	folded atomic.Bool
	// sorted is a copy of writes taken when the batch waited, overfull,
	// for the one before to commit, and perm their order by key, found
	// meanwhile on a goroutine of its own (core.presort); or, when the
	// batch held MaxBatchSize deliveries then (it takes no more, and its
	// values do not change), pre: its writes in key order with their
	// values. perm and pre are valid once sortDone is closed, for as long
	// as writes holds the same entries. A nil sortDone: the commit sorts
	// the writes itself.
	sorted   []*entry
	perm     []int32
	pre      []write
	sortDone chan struct{}
	// preVals holds the values of pre with their checksums, when the
	// store writes them so (core.summing): the commit does not sum them
	// on its way. The commit's, once pre is.
	preVals []byte

	arena []byte  // keys and values of writes
	ents  []entry // entries not used yet
	// The memory the batch was cut from: its arena's chunks and its
	// entries' slabs, taken from pool (see memPool) and given back to it
	// once the batch is retired.
	pool   *memPool
	chunks [][]byte
	slabs  [][]entry
}

// memPool is the memory of retired batches, for the next batches to cut
// theirs from: with thousands of keys a batch, their entries, keys,
// values and indexes were most of what a line allocated. Only the holder
// of the token uses it: a batch gives its memory back (memPool.reuse)
// once it is retired, two commits after its own, at a cut, when no Apply
// or View runs and so no transaction still reads it.
type memPool struct {
	chunks [][]byte  // arena chunks of chunkSize bytes
	slabs  [][]entry // entry slabs of slabLen
	slots  [][]slot  // index tables
	writes [][]*entry
}

const (
	chunkSize = 64 << 10 // the arena's largest chunks, the ones reused
	slabLen   = 64
)

// batchOut is what a batch appends to one output.
type batchOut struct {
	name string
	buf  []byte
	// sent is how many bytes of buf the output's writer was given (see
	// core.writeAhead).
	sent int
	// gen is the txWrites.gen of the last Apply that wrote to it.
	gen uint64
	// synced says the writer was given the last of buf, and asked to
	// sync the file after it (see core.syncAhead).
	synced bool
}

// maxBatchBytes is the size at which a batch is cut whatever its count:
// it bounds the memory of the staged batches, and keeps a batch far below
// what a backend commits in one transaction (Pebble: 4 GiB).
const maxBatchBytes = 1 << 30

// grow gives the arena a new chunk with room for n bytes at least.
func (b *batch) grow(n int) {
	size := max(n, min(max(2*cap(b.arena), 1024), chunkSize))
	if p := b.pool; p != nil && size <= chunkSize && len(p.chunks) > 0 {
		b.arena = p.chunks[len(p.chunks)-1]
		p.chunks[len(p.chunks)-1] = nil
		p.chunks = p.chunks[:len(p.chunks)-1]
	} else {
		b.arena = make([]byte, 0, size)
	}
	if cap(b.arena) == chunkSize {
		b.chunks = append(b.chunks, b.arena)
	}
	b.grown += cap(b.arena)
}

// reuse takes the memory of b, a retired batch that nothing reads any
// more. The caller holds the token.
func (p *memPool) reuse(b *batch) {
	// Bounded: what two large batches use.
	for _, c := range b.chunks {
		if len(p.chunks) < 2*maxBatchChunks {
			p.chunks = append(p.chunks, c[:0])
		}
	}
	for _, sl := range b.slabs {
		if len(p.slabs) < 2*(1<<16)/slabLen {
			clear(sl) // their pointers keep nothing alive
			p.slabs = append(p.slabs, sl)
		}
	}
	if len(p.slots) < 2 && b.idx.slots != nil {
		clear(b.idx.slots)
		p.slots = append(p.slots, b.idx.slots)
	}
	if len(p.writes) < 2 && b.writes != nil {
		clear(b.writes[:cap(b.writes)])
		p.writes = append(p.writes, b.writes[:0])
	}
	b.chunks, b.slabs, b.arena, b.ents, b.writes, b.idx = nil, nil, nil, nil, nil, index{}
}

// maxBatchChunks is the most arena chunks of a batch kept for reuse: 16
// MiB.
const maxBatchChunks = 256

// slab returns an entry slab.
func (p *memPool) slab() []entry {
	if n := len(p.slabs); n > 0 {
		sl := p.slabs[n-1]
		p.slabs[n-1] = nil
		p.slabs = p.slabs[:n-1]
		return sl
	}
	return make([]entry, slabLen)
}

type markOf struct {
	cp *checkpoint.Checkpoint
	m  checkpoint.Mark
}

// newBatch returns an empty batch, room made for keys changes, cut from
// pool (nil: new memory).
func newBatch(seq uint64, keys int, pool *memPool) *batch {
	b := &batch{seq: seq, pool: pool, done: make(chan struct{})}
	if pool != nil {
		if n := len(pool.writes); n > 0 && cap(pool.writes[n-1]) >= keys {
			b.writes = pool.writes[n-1]
			pool.writes[n-1] = nil
			pool.writes = pool.writes[:n-1]
		}
		if n := len(pool.slots); n > 0 && len(pool.slots[n-1]) >= 2*keys && len(pool.slots[n-1]) <= 8*max(keys, 16) {
			b.idx = index{slots: pool.slots[n-1]}
			pool.slots[n-1] = nil
			pool.slots = pool.slots[:n-1]
		}
	}
	if b.writes == nil {
		b.writes = make([]*entry, 0, keys)
	}
	if b.idx.slots == nil {
		b.idx = newIndex(keys)
	}
	return b
}

// bytes returns a copy of p in the batch's arena.
func (b *batch) bytes(p []byte) []byte {
	if len(p) == 0 {
		return []byte{} // not nil: an empty value, as written
	}
	if cap(b.arena)-len(b.arena) < len(p) {
		b.grow(len(p))
	}
	n := len(b.arena)
	b.arena = append(b.arena, p...)
	return b.arena[n:len(b.arena):len(b.arena)]
}

// get returns the entry of q, or nil.
func (b *batch) get(q *bkey) *entry { return b.idx.get(q) }

// add adds an entry for q, which b has none of, and returns it: no
// value yet.
func (b *batch) add(q *bkey) *entry {
	if len(b.ents) == 0 {
		if b.pool != nil {
			b.ents = b.pool.slab()
		} else {
			b.ents = make([]entry, slabLen)
		}
		b.slabs = append(b.slabs, b.ents)
	}
	e := &b.ents[0]
	b.ents = b.ents[1:]
	n := len(q.prefix) + len(q.key)
	if cap(b.arena)-len(b.arena) < n {
		b.grow(n)
	}
	k0 := len(b.arena)
	b.arena = q.appendTo(b.arena)
	e.key, e.h = b.arena[k0:len(b.arena):len(b.arena)], q.h
	e.pos, e.pfx = int32(len(b.writes)), unsafe.SliceData(q.prefix)
	b.idx.insert(e)
	b.writes = append(b.writes, e)
	return e
}

func (b *batch) empty() bool {
	return b.count == 0 && len(b.writes) == 0 && len(b.applied) == 0 && len(b.outs) == 0 && len(b.forget) == 0
}

// core is the store shared by its namespaces.
type core struct {
	kind, dir string
	opts      Options
	bsize     int // opts.batchSize()
	bmax      int // opts.maxBatchSize()
	maxBytes  int // maxBatchBytes; tests make it smaller
	fsys      vfs.FS
	eng       engine
	log       *slog.Logger
	lock      *dirLock // the folder's, released last by close
	// The longest key (with its prefix) and value the backend takes.
	maxKey, maxVal int
	// keyCap, when the backend bounds the memory of its commit, is the
	// most keys a batch changes (see batchKeyCapper).
	keyCap *atomic.Int64

	// The token that serializes Apply and View (see acquire).
	applyTok     atomic.Bool
	applyWaiters atomic.Int32
	applyFree    chan struct{}
	// cutWanted is set when the committer wanted to cut while the token
	// was held; c.mu held to set it. cutting is set while the committer
	// tries to cut.
	cutWanted atomic.Bool
	cutting   atomic.Bool

	// snapMu is held for reading by each snapshot and backup, and for
	// writing by close before it closes the backend.
	snapMu sync.RWMutex
	// commitMu is held by the committer while the backend commits a
	// batch, and by a snapshot while it begins (see core.write).
	commitMu sync.Mutex

	outMu   sync.Mutex // serializes output declarations
	outputs map[string]*Output
	outFree map[string][]byte // c.mu: output buffers of committed batches

	mu sync.Mutex
	// ver counts the changes of cur, sealed, recent, failed and closed,
	// each made under mu.
	ver    atomic.Uint64
	cur    *batch // staging
	sealed *batch // cut, being committed
	// pending is a batch cut while sealed commits, full (MaxBatchSize
	// lines): the committer commits it next (see core.canPend). Reads
	// look in it before sealed; nil unless sealed is set.
	pending *batch
	// recent is the last batch committed, kept as a cache of durable
	// values: a line that reads a key its batch has not written yet, and
	// that the value cache does not hold (a store without one, or a key
	// it dropped), finds it here rather than in the backend. nil after a
	// failed commit.
	recent *batch
	// retired are the batches that were recent before, whose memory the
	// next cut gives to pool (which only the holder of the token uses).
	retired  []*batch
	pool     memPool
	changed  chan struct{}
	feeds    map[feedKey]*feedState
	lastFeed *feedState // the one of the last Apply
	seq      uint64     // of the last batch made
	binds    []*checkpoint.Checkpoint
	failed   error
	failedCh chan struct{} // see failedChan; closed by noteFailed
	closed   bool
	stats    Stats

	// order sorts the writes of a commit; the committer's.
	order writeOrder
	// wlist and wmerged are the memory of the lists of writes of the last
	// commit (see core.write), for the next; the committer's.
	wlist, wmerged []write
	// folding is the fold of the last committed batch into the value
	// cache, until the committer saw it end (waitFold); nil when none
	// runs. The committer's.
	folding *foldJob
	// foldFor is the fold left to the parked Apply the committer woke
	// (under mu; see startFold). The Apply clears it.
	foldFor *foldJob

	wake     chan struct{}
	stop     chan struct{}
	stopped  chan struct{}
	closeErr error
	once     sync.Once

	// Used only by the holder of the token (Apply and View): scratch space
	// that spares a line its allocations.
	kbuf    []byte                    // a full key being looked up
	buckets map[[2]string]*bucketInfo // by namespace and name
	ows     []OutputWriter            // output writers not used yet
	bks     []Bucket                  // bucket handles not used yet
	txs     []Tx                      // the ring of transactions (see Tx), txRing of them
	txi     int                       // the next in txs to serve
	ts      txState                   // the running Apply or View
	vc      *valueCache               // durable values read or committed; nil for none (the committer folds into it)
	tw      txWrites                  // what the running Apply changed
	ctrs    []counterSlot             // by Counter.id: where the staging batch holds its key
	// lastOutput names the output the last Apply wrote to: declared.
	lastOutput string
	// What the last Apply left (see leave); written under mu.
	fastVer uint64
	fastOK  bool
	// split, for a bbolt store with a value cache, is how its cache
	// budget is split between the cache and the commits (see rebalance).
	split *cacheSplit
	// parked is set (under mu) while an Apply, holding the token, waits
	// in beforeApply for the batch before the staging one to commit: the
	// committer cuts the staging batch for it (see commit).
	parked bool
	// wakeOnSent is set when the backend is a sentCommitter: the Apply
	// parked for a batch that the committer cuts is woken, and the batch
	// just committed folded, once the commit of the cut batch is sent
	// (see released). The committer sets wakeLater (under mu) and
	// foldLater until then.
	wakeOnSent bool
	wakeLater  bool
	foldLater  *foldJob

	// preloading is set by an open that found data keys in a bbolt or
	// Pebble store with a value cache: newCore starts the preload, and
	// preloaded is closed once it ended (see core.preload).
	preloading bool
	preloaded  chan struct{}
	// preloadStop, closed once by stopPreload, ends the preload before
	// the store closes.
	preloadStop     chan struct{}
	preloadStopOnce sync.Once
}

func newCore(kind, dir string, o *Options, fsys vfs.FS, eng engine) (*core, error) {
	c := &core{
		kind:      kind,
		dir:       dir,
		opts:      *o,
		bsize:     o.batchSize(),
		bmax:      o.maxBatchSize(),
		maxBytes:  maxBatchBytes,
		fsys:      fsys,
		eng:       newSumEngine(kind, dir, eng),
		log:       o.logger(),
		outputs:   make(map[string]*Output),
		outFree:   make(map[string][]byte),
		applyFree: make(chan struct{}, 1),
		cur:       newBatch(1, 0, nil),
		seq:       1,
		changed:   make(chan struct{}),
		feeds:     make(map[feedKey]*feedState),
		buckets:   make(map[[2]string]*bucketInfo),
		wake:      make(chan struct{}, 1),
		stop:      make(chan struct{}),
		stopped:   make(chan struct{}),
	}
	c.stats.Backend, c.stats.Sync = kind, o.Sync
	_, c.wakeOnSent = eng.(sentCommitter)
	c.vc = newValueCache(o.valueCacheSize(kind))
	if kc, ok := eng.(batchKeyCapper); ok {
		c.keyCap = kc.batchKeyCap()
	}
	if be, ok := eng.(*boltEngine); ok && c.vc != nil {
		if n := o.cacheSize(); boltCommitShareMisses(n) > be.commitShare {
			// The value cache's budget in each split, in proportion to its
			// part of the budget (it is counted in live bytes).
			part := n - be.commitShare
			c.split = &cacheSplit{eng: be,
				share: be.commitShare, shareMisses: boltCommitShareMisses(n),
				vc: c.vc.budget, vcMisses: c.vc.budget * (n - boltCommitShareMisses(n)) / part}
		}
		// Under the runtime's memory limit a commit keeps live at most
		// what the limit leaves beside what the value cache holds.
		be.vcLive = func() int64 {
			c.vc.mu.Lock()
			defer c.vc.mu.Unlock()
			return c.vc.size
		}
		be.updateKeyCap(0, 0)
	}
	c.maxKey, c.maxVal = c.eng.limits()
	if c.maxKey <= 0 {
		c.maxKey = math.MaxInt
	}
	if c.maxVal <= 0 {
		c.maxVal = math.MaxInt
	}
	if err := c.load(); err != nil {
		return nil, err
	}
	go c.committer()
	if c.preloading {
		c.preloaded, c.preloadStop = make(chan struct{}), make(chan struct{})
		c.vc.startLoading()
		go c.preload()
	}
	return c, nil
}

// load reads the format version, the applied positions and the outputs.
func (c *core) load() error {
	v, ok, err := c.eng.get([]byte{tagVersion})
	if err != nil {
		return fmt.Errorf("open store %s: read version: %w", c.dir, err)
	}
	sums := c.eng.(*sumEngine)
	after, upgrading := upgradeFrom(v)
	moving := strings.HasPrefix(string(v), formatMoving)
	newest := newestFormat
	if h := c.opts.hooks; h != nil && h.newestFormat > 0 {
		newest = h.newestFormat
	}
	n, named := formatNumber(v)
	checked := false
	switch {
	case !ok && c.opts.existing:
		// STORE is written once the version is: its data is gone.
		return &CorruptError{Backend: c.kind, Dir: c.dir, File: sums.file, Record: "the store's format record",
			Detail: "it is missing, though the folder's STORE file says the store was made: the backend lost its data (a damaged or replaced file)"}
	case !ok:
		// A new bbolt store keeps its tables in buckets (format 4); the
		// others have nothing of it.
		format := formatVersion
		tables, _ := c.rawEngine().(tabledEngine)
		if h := c.opts.hooks; h != nil && h.boltFormat3 {
			tables = nil
		}
		if tables != nil {
			format = formatV4
		}
		if pe, ok := c.rawEngine().(*pgEngine); ok && pe.bySid() {
			format = formatV5 // the record goes in tidemark_kv too
		}
		if err := c.eng.commit([]write{{key: []byte{tagVersion}, val: []byte(format)}}); err != nil {
			return fmt.Errorf("open store %s: write version: %w", c.dir, err)
		}
		if tables != nil {
			tables.useTables()
		}
		sums.setFormat(3)
	case named && n > newest:
		// Before anything else is read: a newer version's records may
		// not be this one's (see formats).
		return newerFormat(c.dir, v, n, newest)
	case string(v) == formatV4:
		tables, ok := c.rawEngine().(tabledEngine)
		if !ok {
			return &CorruptError{Backend: c.kind, Dir: c.dir, File: sums.file, Record: "the store's format record",
				Detail: fmt.Sprintf("it says %q, a format only bbolt stores have: the record is damaged, or the folder's backend files were replaced", v)}
		}
		tables.useTables()
		sums.setFormat(3)
	case string(v) == formatV5:
		pe, ok := c.rawEngine().(*pgEngine)
		if !ok || !pe.bySid() {
			return &CorruptError{Backend: c.kind, Dir: c.dir, File: sums.file, Record: "the store's format record",
				Detail: fmt.Sprintf("it says %q, a format only PostgreSQL stores have (their rows under a sid): the record is damaged, or the store's files or rows were replaced", v)}
		}
		if err := pe.keepMarker(); err != nil {
			return err
		}
		sums.setFormat(3)
	case string(v) == formatVersion:
		sums.setFormat(3)
	case string(v) == formatV2:
		sums.setFormat(2)
	case upgrading:
		// An upgrade from format 1 stopped half way: it is finished
		// before anything reads the store, once the file is checked; a
		// bbolt store's tables then move into their buckets (below).
		if err := c.checkStore(sums); err != nil {
			return err
		}
		if err := c.checked(); err != nil {
			return err
		}
		if err := c.upgradeV1(after); err != nil {
			return err
		}
		c.log.Info("state: the store's interrupted upgrade to format 3 is finished: its values carry checksums", "store", c.dir, "backend", c.kind)
		sums.setFormat(3)
		checked = true
		if be, ok := c.rawEngine().(*boltEngine); ok {
			if err := c.finishMove(be); err != nil {
				return err
			}
		}
	case moving:
		// An upgrade to format 4 stopped half way: its data keys are in
		// their tables' buckets up to a key, in the store's bucket after
		// it. The file is checked in that layout, and the move finished,
		// before anything reads the store.
		be, ok := c.rawEngine().(*boltEngine)
		if !ok {
			return &CorruptError{Backend: c.kind, Dir: c.dir, File: sums.file, Record: "the store's format record",
				Detail: fmt.Sprintf("it says %q, an upgrade only bbolt stores have: the record is damaged, or the folder's backend files were replaced", v)}
		}
		be.moving = true
		if err := c.checkStore(sums); err != nil {
			return err
		}
		if err := c.checkedFully(); err != nil {
			return err
		}
		sums.setFormat(3)
		if err := c.finishMove(be); err != nil {
			return err
		}
		checked = true
	case string(v) == formatV1:
		sums.setFormat(1)
		c.log.Info("state: the store was created before values carried checksums (format 1): it is read and written as it is, and damage to its values cannot be detected; stop the program and run \"tidemark store upgrade DIR\" (state.Upgrade) to give them checksums in place",
			"store", c.dir, "backend", c.kind)
	default:
		return fmt.Errorf("open store %s: format %q, want %q, %q, %q, %q or %q: %w", c.dir, v, formatV5, formatV4, formatVersion, formatV2, formatV1, ErrCorrupt)
	}
	if !checked {
		if err := c.checkStore(sums); err != nil {
			return err
		}
	}
	if pe, ok := c.rawEngine().(*pgEngine); ok && !pe.bySid() && sums.sums && !(c.opts.hooks != nil && c.opts.hooks.pgByName) {
		c.log.Info("state: the PostgreSQL store is of format "+strconv.Itoa(c.format())+", made by a version before format 5: its rows are in tidemark_kv under its name; stop the program and run \"tidemark store upgrade SPEC\" (state.Upgrade) to move them to tidemark_data under a number, as a new store keeps them (less work for the server a key)",
			"store", c.dir, "backend", c.kind)
	}
	if be, ok := c.rawEngine().(*boltEngine); ok && !be.tables && sums.sums {
		c.log.Info("state: the bbolt store is of format "+strconv.Itoa(c.format())+", made by a version before format 4: each of its keys carries its table's name; stop the program and run \"tidemark store upgrade DIR\" (state.Upgrade) to move each table's keys into a bucket of their own, as in a new bbolt store (smaller trees, faster commits)",
			"store", c.dir, "backend", c.kind)
	}
	err = c.eng.scan([]byte{tagApplied}, func(k, v []byte) error {
		ns, feed, file, ok := parseAppliedKey(k)
		if !ok {
			return fmt.Errorf("applied key %q: %w", k, ErrCorrupt)
		}
		l, err := decodeLineage(v)
		if err != nil {
			return fmt.Errorf("applied position of feed %q in namespace %q: %w", feed, ns, err)
		}
		fk := feedKey{ns, feed, file}
		c.feeds[fk] = &feedState{fk: fk, latest: l, durable: l, hasDur: true}
		return nil
	})
	if err != nil {
		return fmt.Errorf("open store %s: %w", c.dir, err)
	}
	if err := c.knowEmpty(); err != nil {
		return err
	}
	return c.loadOutputs()
}

// finishMove finishes the move of a bbolt store's data keys into their
// tables' buckets that an upgrade began (see Upgrade), at the open that
// finds it under way.
func (c *core) finishMove(be *boltEngine) error {
	if err := c.moveTables(be); err != nil {
		return err
	}
	c.log.Info("state: the store's interrupted upgrade to format 4 is finished: each table's keys are in a bucket of their own", "store", c.dir, "backend", c.kind)
	return nil
}

// tabledEngine is a backend whose stores of format 4 keep each table's
// keys apart (bbolt, see bolt_tables.go): the open calls useTables before
// it reads or writes a data key of such a store, or of a new one.
type tabledEngine interface{ useTables() }

// errFound stops a scan at its first key.
var errFound = errors.New("found")

// knowEmpty marks the value cache of a bbolt or Pebble store complete
// when the backend holds no data key (see valueCache.complete): a new
// store, or one whose data was all deleted. Their folder's lock keeps
// any other process from writing the backend while the store is open. A
// PostgreSQL store's database is shared, and its own read cache keeps
// what it knows.
func (c *core) knowEmpty() error {
	if c.vc == nil || (c.kind != Bolt && c.kind != Pebble) {
		return nil
	}
	// Through the raw engine: whether a key exists is all it asks, and a
	// damaged value is reported by whatever reads it.
	err := c.rawEngine().scan([]byte{tagData}, func(k, v []byte) error { return errFound })
	switch {
	case err == nil:
		c.vc.setComplete(true)
	case !errors.Is(err, errFound):
		return fmt.Errorf("open store %s: look for data: %w", c.dir, err)
	default:
		c.preloading = true
	}
	return nil
}

// preloadChunk is the most keys the preload reads with one cursor: a
// Pebble iterator holds the memtables and tables it began with until it
// is closed, and a new one every chunk lets them go.
const preloadChunk = 10_000

// preload reads the data keys of a bbolt or Pebble store into its value
// cache, in key order, on a goroutine of its own that the open starts
// and close stops, until the cache has no room for the next one: once it
// holds them all, it is complete (see valueCache.complete) and no read of
// the store goes to the backend. The open does not wait for it: until it
// ends, a read the cache does not answer goes to the backend, as with a
// cache too small for the store. A program that loads every balance into
// a map before its first line pays that load at its start; a store whose
// budget holds its keys (state.Options.CacheSize) reads them while its
// first lines apply.
//
// The values read are durable ones, as a read of the backend's are. A key
// the cache holds already is not put (a fold of a committed batch, or a
// read of the backend, put a value at least as new), and the preload
// stops once the cache dropped or refused an entry (valueCache.lost): that
// entry may hold a value newer than the one the preload read. A batch
// committed and not yet folded is looked in before the cache, as for any
// read (see Tx.getOlder).
func (c *core) preload() {
	defer close(c.preloaded)
	start := time.Now()
	if ke, ok := c.rawEngine().(keyEstimator); ok {
		c.vc.presize(preloadHint(ke.estimateKeys(), c.vc.budget))
	}
	fit, n, err := c.preloadKeys()
	c.vc.endLoading(fit && err == nil)
	switch {
	case err != nil:
		c.log.Warn("state: reading the store's keys into the value cache failed; reads the cache does not answer go to the backend", "store", c.dir, "backend", c.kind, "keys", n, "err", err)
	case fit:
		c.log.Info("state: the value cache holds every key of the store", "store", c.dir, "backend", c.kind, "keys", n, "took", time.Since(start))
	default:
		c.log.Info("state: the value cache holds part of the store's keys (its budget is full, or the store closed); the others are read from the backend", "store", c.dir, "backend", c.kind, "keys", n, "took", time.Since(start))
	}
}

// stopPreload ends the preload, if one runs, and waits for it: Upgrade
// calls it before it rewrites the backend's keys and values behind the
// store's commits (the preload would read them half moved, or with
// checksums it does not expect yet).
func (c *core) stopPreload() {
	if c.preloaded == nil {
		return
	}
	c.preloadStopOnce.Do(func() { close(c.preloadStop) })
	<-c.preloaded
}

// preloadKeys reads the data keys into the value cache (see preload): fit
// reports that it read them all; n counts those read.
func (c *core) preloadKeys() (fit bool, n int, err error) {
	lo, hi := []byte{tagData}, []byte{tagData + 1}
	chunk, h := preloadChunk, c.opts.hooks
	if h != nil && h.preloadChunk > 0 {
		chunk = h.preloadChunk
	}
	for {
		cur := c.eng.cursor(lo, hi, false)
		k := 0
		for cur.next() {
			if k%256 == 0 {
				select {
				case <-c.stop:
					return false, n, cur.close()
				case <-c.preloadStop:
					return false, n, cur.close()
				default:
				}
			}
			if h != nil && h.preloadKey != nil {
				h.preloadKey(n + 1)
			}
			if !c.vc.load(cur.key(), cur.value()) {
				return false, n, cur.close()
			}
			k++
			n++
			if k == chunk {
				// The next chunk starts right after this key.
				lo = append(append(lo[:0:0], cur.key()...), 0)
				break
			}
		}
		if err := cur.close(); err != nil {
			return false, n, fmt.Errorf("read %s store %s into its value cache: %w", c.kind, c.dir, err)
		}
		if k < chunk {
			return true, n, nil
		}
	}
}

// full reports whether b is as big as a batch gets: BatchSize deliveries,
// maxBatchBytes, or the keys the backend's commit has memory for.
func (c *core) full(b *batch) bool {
	return b.count >= c.bsize || c.fullBytes(b)
}

// fullBytes reports whether b holds as many bytes as a batch gets
// (maxBatchBytes), or changes as many keys as the backend's commit has
// memory for: limits of its memory, which a batch never passes.
func (c *core) fullBytes(b *batch) bool {
	return b.size >= c.maxBytes || (c.keyCap != nil && int64(b.keys) >= c.keyCap.Load())
}

// overfull reports whether b, full, must wait for the batch before it to
// commit: it holds MaxBatchSize deliveries (see Options.MaxBatchSize), or
// its memory is at a limit. A full batch that is not overfull takes more
// deliveries while the one before commits.
func (c *core) overfull(b *batch) bool {
	return b.count >= c.bmax || c.fullBytes(b)
}

// unusable returns why the store takes no more changes, or nil. c.mu held.
func (c *core) unusable() error {
	if c.closed {
		return ErrClosed
	}
	if c.failed != nil {
		return c.failed
	}
	return nil
}

// broadcast wakes every waiter on c.changed. c.mu held.
func (c *core) broadcast() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// wait releases c.mu until the next broadcast or ctx is done. c.mu held.
func (c *core) wait(ctx context.Context) error {
	ch := c.changed
	c.mu.Unlock()
	defer c.mu.Lock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// cut seals the staged batch, taking the bound checkpoints' marks now:
// every item a mark counts has finished, so its Apply returned and its
// changes are in this batch or an earlier one. It becomes the sealed
// batch, or, while that one commits, the pending one, which commits next.
// c.mu held; c.pending nil; the caller holds the token, so no Apply is
// writing into the batch.
func (c *core) cut() *batch {
	if c.cutWanted.Load() {
		c.cutWanted.Store(false)
	}
	b := c.cur
	b.marks = make([]markOf, len(c.binds))
	for i, cp := range c.binds {
		b.marks[i] = markOf{cp: cp, m: cp.Mark()}
	}
	if c.sealed == nil {
		c.sealed = b
	} else {
		c.pending = b
	}
	c.ver.Add(1)
	c.seq++
	// No transaction runs (the caller holds the token), and the next one
	// takes a new view of the batches (c.ver moved): the batches retired
	// since the last cut are read no more, their memory serves again.
	for i, r := range c.retired {
		c.pool.reuse(r)
		c.retired[i] = nil
	}
	c.retired = c.retired[:0]
	// The next batch likely changes as many keys as this one.
	c.cur = newBatch(c.seq, min(len(b.writes), 1<<16), &c.pool)
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return b
}

// apply is Apply. d is a pointer: a Delivery among its other arguments
// would be passed on the stack, and copied with loads that wait for the
// caller's stores.
func (c *core) apply(ctx context.Context, ns *nsStore, d *tidemark.Delivery, fn func(tx *Tx) error) (bool, error) {
	if !c.applyTok.CompareAndSwap(false, true) {
		if err := c.acquire(ctx); err != nil {
			return false, fmt.Errorf("apply feed %q epoch %d position %d: waiting for another Apply: %w", d.Feed, d.Epoch, d.Position, err)
		}
	}
	defer c.exit()
	return c.applyHeld(ctx, ns, d, fn, nil, 0)
}

// applyHeld applies d for apply or applyEach, whose caller holds the
// token: with fn, or with fnEach and i (ApplyEach's function and line).
func (c *core) applyHeld(ctx context.Context, ns *nsStore, d *tidemark.Delivery, fn func(tx *Tx) error, fnEach func(tx *Tx, i int) error, i int) (bool, error) {
	fs, tx, skip, err := c.begin(ctx, ns, d)
	if skip || err != nil {
		return false, err
	}
	// fn writes straight into the staging batch: see txWrites.
	if err := c.run(tx, fn, fnEach, i); err != nil {
		return false, err
	}
	return c.stage(fs, tx, d, 1)
}

// begin starts the transaction of the line of d, or reports it a
// re-delivery to skip (see enter). The caller holds the token.
func (c *core) begin(ctx context.Context, ns *nsStore, d *tidemark.Delivery) (fs *feedState, tx *Tx, skip bool, err error) {
	// Most lines need not take the lock before their function: the last
	// Apply left the store usable, with room in the batch, and the
	// committer changed nothing since (c.ver), so the transaction's view
	// of the batches is still right; the line is of the same feed, past
	// its recorded position.
	fs = c.lastFeed
	if c.fastOK && c.fastVer == c.ver.Load() && fs != nil && fs.fk.feed == d.Feed && fs.fk.file == d.File && fs.fk.ns == ns.ns &&
		(d.Epoch == 0 || (d.Epoch == fs.latest.Epoch && d.Position > fs.latest.Position) ||
			(d.Epoch != fs.latest.Epoch && (d.File == "" || fs.renameChecked == d.Epoch) && (fs.latest.Epoch == 0 || d.Position > fs.latest.Position))) {
		return fs, c.newTx(ns, d, false), false, nil
	}
	return c.enter(ctx, ns, d)
}

// stage stages the transaction tx, whose function ran, of k lines of the
// feed of fs (1, or a run of ApplyRuns), the last of them d's: their
// count, output bytes and position, in the staging batch; then cuts the
// batch if it is full, or, with Options.Sync, commits it. The caller
// holds the token.
func (c *core) stage(fs *feedState, tx *Tx, d *tidemark.Delivery, k int) (bool, error) {
	tw := &c.tw
	c.mu.Lock()
	if c.closed || c.failed != nil {
		err := c.unusable()
		c.mu.Unlock()
		tw.rollback(tx.cur)
		return false, c.applyErr(*d, err)
	}
	b := c.cur
	if b != tx.cur {
		// The function's writes are in tx.cur and the position would go
		// into b: never, as a cut needs the token this Apply holds.
		c.mu.Unlock()
		panic(fmt.Sprintf("state: store %s: the staging batch was cut while an Apply of feed %q position %d ran", c.dir, d.Feed, d.Position))
	}
	if b.count == 0 {
		b.started = time.Now()
	}
	if b.grown != 0 {
		b.size, b.grown = b.size+b.grown, 0
	}
	// The function's output bytes are in the batch already.
	b.size += tw.oadded
	if tw.oadded > 0 && !c.opts.Sync {
		c.writeAhead(b, false)
	}
	b.count += k
	b.keys = len(b.writes)
	if d.Epoch != 0 {
		// The position is recorded once per feed per batch: the batch
		// keeps the highest.
		if fs.stagedIn != b.seq {
			fs.stagedIn, fs.idx = b.seq, len(b.applied)
			b.applied = append(b.applied, appliedRec{fs: fs, lin: fs.latest, origin: fs.origin})
		}
		if d.Epoch != fs.latest.Epoch || d.Position > fs.latest.Position {
			if d.Epoch != fs.latest.Epoch && fs.latest.Epoch != 0 && d.File != "" {
				c.keepLeft(fs, b)
			}
			// Field by field, here and in the batch's record: a copy of
			// the record just written would wait for the stores.
			r := &b.applied[fs.idx]
			setLineage(&fs.latest, d)
			setLineage(&r.lin, d)
			if fs.origin != d.Origin {
				fs.origin = d.Origin
			}
			if r.origin != d.Origin {
				r.origin = d.Origin
			}
		}
	}
	c.stats.Applied += uint64(k)
	if c.opts.Sync {
		return c.applySync(*d)
	}
	if (c.full(b) || c.cutWanted.Load()) && c.sealed == nil {
		c.cut()
	} else if c.sealed != nil && c.overfull(b) {
		if c.canPend(b) {
			c.cutPending()
		} else {
			c.syncAhead(b)
		}
	}
	c.leave()
	c.mu.Unlock()
	return true, nil
}

// run calls the function of a line's transaction tx (fn, or fnEach with
// the line i), and undoes its writes in the staging batch if it fails. The
// caller holds the token.
func (c *core) run(tx *Tx, fn func(tx *Tx) error, fnEach func(tx *Tx, i int) error, i int) error {
	c.tw.open = true
	var err error
	if fn != nil {
		err = fn(tx)
	} else {
		err = fnEach(tx, i)
	}
	return c.ran(tx, err)
}

// ran ends the transaction tx whose function returned err: its writes are
// undone if it failed, or if it wrote what the backend cannot store. The
// caller holds the token.
func (c *core) ran(tx *Tx, err error) error {
	tw := &c.tw
	tx.done = true
	if err == nil && tw.refused != nil {
		// A write the backend cannot store refuses the whole line, even
		// when the function went on without it.
		err = tw.refused
	}
	if err != nil {
		tw.rollback(tx.cur)
	}
	tw.open = false
	return err
}

// exit ends an Apply: the changes of a function that did not return (it
// panicked) are undone, and the token is released.
func (c *core) exit() {
	if tw := &c.tw; tw.open {
		tw.rollback(c.ts.cur)
		tw.open = false
		// The function's Tx, the last served, is done too.
		c.txs[c.txi-1].done = true
	}
	c.release()
}

// enter is the way into Apply under the lock: it checks that the store is
// usable, waits while a full batch waits for the previous one to commit,
// skips a re-delivery, and returns the state of d's feed and the
// transaction for d.
func (c *core) enter(ctx context.Context, ns *nsStore, d *tidemark.Delivery) (fs *feedState, tx *Tx, skip bool, err error) {
	c.mu.Lock()
	if c.closed || c.failed != nil || (c.full(c.cur) && !c.opts.Sync) {
		if err := c.beforeApply(ctx, *d); err != nil {
			c.mu.Unlock()
			return nil, nil, false, err
		}
	}
	fs = c.feed(ns.ns, d.Feed, d.File)
	if !fs.admitted {
		if err := c.admit(fs, d); err != nil {
			// fs is the last feed now: the next Apply must not enter
			// without the lock, past this check.
			c.fastOK = false
			c.mu.Unlock()
			return nil, nil, false, err
		}
	}
	if d.File != "" && d.Epoch != 0 && d.Epoch != fs.latest.Epoch && fs.renameChecked != d.Epoch {
		c.followRename(fs, d)
	}
	// A line at or below the recorded position is a re-delivery in the
	// same epoch; in another epoch, the lineage decides.
	if d.Epoch != 0 && fs.latest.Epoch != 0 && d.Position <= fs.latest.Position {
		if d.Epoch == fs.latest.Epoch {
			c.stats.Skipped++
			c.mu.Unlock()
			return nil, nil, true, nil
		}
		if c.otherEpoch(fs, *d) {
			return nil, nil, true, nil
		}
		c.mu.Lock()
	}
	tx = c.newTx(ns, d, false)
	c.snapshot()
	c.mu.Unlock()
	return fs, tx, false, nil
}

// admit checks, once per feed and namespace, what the first Apply of a
// feed must: that a batched Apply has a checkpoint of the feed bound to
// the store (see ErrNotBound), and that the backend takes the key of the
// feed's applied record. A feed that fails is checked again by its next
// Apply (a Bind may come meanwhile). c.mu held.
func (c *core) admit(fs *feedState, d *tidemark.Delivery) error {
	if strings.IndexByte(d.Feed, fileSep) >= 0 {
		return c.applyErr(*d, fmt.Errorf("the feed's name holds the byte 0x1f, which separates a feed from its files in the store: rename the feed"))
	}
	if n := len(appliedKey(fs.fk.ns, fs.fk.feed, fs.fk.file)); n > c.maxKey {
		return c.applyErr(*d, fmt.Errorf("the record of the feed's position has a key of %d bytes (the feed's and the namespace's names), more than %s takes (%d): use shorter names: %w",
			n, c.kind, c.maxKey, ErrTooLarge))
	}
	if d.Feed != "" && !c.opts.Sync && !c.opts.Unbound && !c.bound(d.Feed) {
		return c.applyErr(*d, fmt.Errorf("%w: nothing keeps the feed's pointer behind what the store has made durable, so a crash would lose the lines of the last batches; "+
			"declare the store on the processor group (framework.GroupConfig.Store), which binds it; or call Store.Bind(%q, checkpoint) before the first Apply; "+
			"or, if the caller resumes from the store itself (Store.AppliedAll), open the store with Options.Unbound", ErrNotBound, d.Feed))
	}
	fs.admitted = true
	return nil
}

// bound reports whether a checkpoint of feed is bound. c.mu held.
func (c *core) bound(feed string) bool {
	for _, cp := range c.binds {
		if cp.Feed() == feed {
			return true
		}
	}
	return false
}

// leave records, as an Apply stages its line, what lets the next one in
// without the lock (see apply): the view of the batches, the version of
// what the committer changes, and whether the store is usable with room
// in the batch. c.mu held.
func (c *core) leave() {
	c.snapshot()
	c.fastVer = c.ver.Load()
	c.fastOK = !c.closed && c.failed == nil && !c.opts.Sync && (!c.overfull(c.cur) || c.sealed == nil)
}

// setLineage sets l to the position of d, with the identity and
// fingerprint of its origin, and no tail hash yet.
func setLineage(l *tidemark.Lineage, d *tidemark.Delivery) {
	l.Epoch, l.Position = d.Epoch, d.Position
	if o := d.Origin; o != nil {
		l.Identity.Dev, l.Identity.Ino = o.Identity.Dev, o.Identity.Ino
		l.Fingerprint.Len, l.Fingerprint.Hash = o.Fingerprint.Len, o.Fingerprint.Hash
	} else {
		l.Identity.Dev, l.Identity.Ino, l.Fingerprint.Len, l.Fingerprint.Hash = 0, 0, 0, 0
	}
	l.TailLen, l.TailHash = 0, 0
}

// beforeApply returns why an Apply cannot stage, or waits while a full
// batch waits for the previous one to commit (back-pressure). c.mu held.
func (c *core) beforeApply(ctx context.Context, d tidemark.Delivery) error {
	if err := c.unusable(); err != nil {
		return c.applyErr(d, err)
	}
	if !c.opts.Sync && c.overfull(c.cur) && c.sealed != nil && c.canPend(c.cur) {
		c.cutPending()
	}
	if !c.opts.Sync && c.mustWait() {
		c.stats.BackPressure++
		c.parked = true
		c.syncAhead(c.cur)
		c.presort(c.cur)
		for c.mustWait() && c.unusable() == nil {
			if err := c.wait(ctx); err != nil {
				c.parked = false
				return fmt.Errorf("apply feed %q epoch %d position %d: waiting for a batch to commit: %w", d.Feed, d.Epoch, d.Position, err)
			}
		}
		c.parked = false
		// The commit that woke this Apply left the fold of its batch to
		// it (see startFold), unless the committer took it back.
		if j := c.foldFor; j != nil {
			c.foldFor = nil
			if j.claimed.CompareAndSwap(false, true) {
				c.mu.Unlock()
				c.fold(j)
				c.mu.Lock()
			}
		}
		if err := c.unusable(); err != nil {
			return c.applyErr(d, err)
		}
	}
	if !c.opts.Sync && c.full(c.cur) && c.sealed == nil {
		// The committer could not cut the full batch when the last one
		// committed: this Apply held the token, waiting. The line goes
		// into the next batch.
		c.cut()
	} else if !c.opts.Sync && c.overfull(c.cur) && c.sealed != nil && c.canPend(c.cur) {
		c.cutPending()
	}
	return nil
}

// canPend reports whether b, the staging batch, overfull while the batch
// before it commits, may be cut to wait for that commit (pending) rather
// than make the Applies wait: no batch is pending already, and b is
// overfull by its count of lines (MaxBatchSize), not by its bytes or its
// keys: those are limits of memory (maxBatchBytes; the keys a bbolt
// commit has memory for, keyCap), which a third batch staged would pass.
// With Options.Sync every line is a batch of its own: none waits.
//
// Two batches in flight, one committing and the next filling, made the
// Applies and the committer wait for each other: whichever finished its
// batch first waited for the other (at 10,000 accounts, 5,000,000 lines
// with saves of 10,000, bbolt, go tool trace of a 4.25 s run: the group's
// goroutine waited 1.3 s for room to stage, the committer 0.66 s for a
// batch to commit). A batch that waits its turn takes up the difference. Measured (2026-12-07, 5 rounds alternated, load
// 1.0 to 1.5, examples/ledger's run, --max-batch 10000): bbolt, 10,000
// accounts, 2.97 to 3.71 s (median 3.12) against 3.16 to 3.90 (3.71);
// 20 accounts 0.85 to 1.17 (0.99) against 1.01 to 1.26 (1.06); Pebble,
// 20 accounts, 0.86 to 1.15 (0.87) against 1.14 to 1.43 (1.24); again
// at 17:07 (load 1.7 to 2.3): bbolt, 10,000 accounts, medians 3.55 s
// against 4.05 (8 rounds) and 3.07 against 3.03 (5), 20 accounts 1.01
// against 1.15; Pebble, 20 accounts, 0.92 against 1.02. c.mu held.
func (c *core) canPend(b *batch) bool {
	return c.pending == nil && !c.opts.Sync && !c.fullBytes(b)
}

// mustWait reports whether the staging batch, overfull, must wait for
// the batch before it to commit: it cannot be cut (canPend). c.mu held.
func (c *core) mustWait() bool {
	return c.overfull(c.cur) && c.sealed != nil && !c.canPend(c.cur)
}

// cutPending cuts the staging batch to wait while the sealed one commits,
// and has its keys sorted and its output bytes synced meanwhile (presort,
// syncAhead). c.mu and the token held.
func (c *core) cutPending() {
	b := c.cut()
	c.syncAhead(b)
	c.presort(b)
}

// syncAhead has the output files' writers write and sync the bytes of b,
// the staging batch, now that it is overfull and waits for the batch
// before it to commit: it takes no more lines, and so no more bytes,
// until it is cut. Its commit then finds them durable and does not sync
// the file again (see Output.append): the output's sync, one of the
// three a commit of bbolt waits for in a row (two of Pebble), is made
// while the backend commits the batch before, off the commits' path. The
// bytes' length is recorded by the batch's own commit only, after the
// sync, as before. It is tried again where the offset of the bytes may
// have become known: as an Apply waits (beforeApply) and once the
// committer has written the batch before to the outputs (core.write).
// c.mu held, and the token or c.parked (the Apply that holds the token
// waits, and writes nothing).
func (c *core) syncAhead(b *batch) {
	if len(b.outs) > 0 && !c.opts.Sync {
		c.writeAhead(b, true)
	}
}

// followRename looks, once per epoch of a file of a file set, for a
// record of the same feed and namespace under another file in d's epoch:
// the feed's file was renamed within the set and is read on in its epoch
// under its new name (an epoch names one file's position space, whatever
// its name). The record, the highest of that epoch, becomes the record of
// d's file, staged in the batch being filled: it is durable no later than
// any later change of the old name's record (a new file there), so a
// restart finds the lines applied under the old name whichever it reads.
// c.mu and the token held.
func (c *core) followRename(fs *feedState, d *tidemark.Delivery) {
	fs.renameChecked = d.Epoch
	var from *feedState
	for fk, o := range c.feeds {
		if o == fs || fk.ns != fs.fk.ns || fk.feed != fs.fk.feed || o.latest.Epoch != d.Epoch {
			continue
		}
		if from == nil || o.latest.Position > from.latest.Position {
			from = o
		}
	}
	if from == nil {
		return
	}
	b := c.cur
	if fs.latest.Epoch != 0 {
		c.keepLeft(fs, b)
	}
	if fs.stagedIn != b.seq {
		fs.stagedIn, fs.idx = b.seq, len(b.applied)
		b.applied = append(b.applied, appliedRec{fs: fs})
	}
	fs.latest, fs.origin, fs.cached = from.latest, d.Origin, false
	r := &b.applied[fs.idx]
	r.lin, r.origin = fs.latest, d.Origin
	if isLeftFile(from.fk.file) {
		c.dropLeft(from, b) // the record is the file's again
	}
	c.log.Info("state: a file of the feed continues an epoch recorded under another file (renamed within its file set): its record moves with it, and the lines applied under the old name are skipped",
		"store", c.dir, "feed", fs.fk.feed, "file", fs.fk.file, "from", from.fk.file, "namespace", fs.fk.ns, "epoch", d.Epoch, "position", from.latest.Position)
}

// maxLeft bounds the records of epochs left behind kept per feed and
// namespace (see keepLeft); past it, the oldest epoch's is deleted.
const maxLeft = 1 << 16

// leftPrefix starts the file name of the record of an epoch left behind:
// a NUL, which no path holds.
const leftPrefix = "\x00epoch "

func leftFile(epoch uint64) string { return leftPrefix + strconv.FormatUint(epoch, 10) }

func isLeftFile(file string) bool { return strings.HasPrefix(file, leftPrefix) }

// keepLeft keeps the record of fs, a file of a file set about to record
// another epoch, when no other file of the feed records its epoch: the
// file of that epoch may have been renamed within the set, and its record
// is then the one the feed resumes it from (ResumeFrom, by epoch) and
// followRename moves to its new name. It is kept under a file name of its
// own (leftFile), staged in b with the change that leaves it. c.mu and the
// token held.
func (c *core) keepLeft(fs *feedState, b *batch) {
	old := fs.latest
	var oldest *feedState
	left := 0
	for fk, o := range c.feeds {
		if o == fs || fk.ns != fs.fk.ns || fk.feed != fs.fk.feed {
			continue
		}
		if o.latest.Epoch == old.Epoch && o.latest.Position >= old.Position {
			return // recorded under another file already
		}
		if isLeftFile(fk.file) {
			left++
			if oldest == nil || o.latest.Epoch < oldest.latest.Epoch {
				oldest = o
			}
		}
	}
	if left >= maxLeft && oldest != nil {
		c.log.Warn("state: too many records of epochs left behind by the files of a file set: the oldest is deleted (a file of that epoch still in the set and renamed within it would be read again by the stores that lost its record)",
			"store", c.dir, "feed", fs.fk.feed, "namespace", fs.fk.ns, "epoch", oldest.latest.Epoch, "max", maxLeft)
		c.dropLeft(oldest, b)
	}
	fk := feedKey{fs.fk.ns, fs.fk.feed, leftFile(old.Epoch)}
	// Never deleted and written by one batch (bbolt sorts the writes).
	b.forget = slices.DeleteFunc(b.forget, func(k feedKey) bool { return k == fk })
	lf := c.feeds[fk] // left behind before, at a lower position
	if lf == nil {
		lf = &feedState{fk: fk, admitted: true}
		c.feeds[fk] = lf
	}
	lf.latest, lf.origin = old, fs.origin
	if lf.stagedIn != b.seq {
		lf.stagedIn, lf.idx = b.seq, len(b.applied)
		b.applied = append(b.applied, appliedRec{fs: lf})
	}
	b.applied[lf.idx].lin, b.applied[lf.idx].origin = old, fs.origin
}

// dropLeft deletes the record of an epoch left behind (in b). c.mu and the
// token held.
func (c *core) dropLeft(lf *feedState, b *batch) {
	delete(c.feeds, lf.fk)
	if c.lastFeed == lf {
		c.lastFeed = nil
	}
	if lf.stagedIn == b.seq {
		b.applied = slices.Delete(b.applied, lf.idx, lf.idx+1)
		for i := lf.idx; i < len(b.applied); i++ {
			b.applied[i].fs.idx = i
		}
	}
	b.forget = append(b.forget, lf.fk)
}

// otherEpoch decides whether d, at or below the recorded position of fs in
// another epoch, was applied before: it releases c.mu, and returns with it
// held only when d is to be applied.
func (c *core) otherEpoch(fs *feedState, d tidemark.Delivery) (skip bool) {
	last, dur, hasDur, v, cached := fs.latest, fs.durable, fs.hasDur, fs.verdict, fs.cached
	c.mu.Unlock()
	skip, byLineage := c.redelivery(fs, d, last, dur, hasDur, v, cached)
	if skip {
		c.mu.Lock()
		c.stats.Skipped++
		if byLineage {
			c.stats.SkippedByLineage++
		}
		c.mu.Unlock()
	}
	return skip
}

// outOf returns the bytes that b, the staging batch, appends to the
// output name, for the running Apply to append to: it logs their length
// the first time the Apply writes there, so that a failure cuts them back
// (txWrites.rollback). The caller holds the token, in Apply.
func (c *core) outOf(b *batch, name string) *batchOut {
	tw := &c.tw
	i := tw.olast
	if i >= len(b.outs) || b.outs[i].name != name {
		i = -1
		for j := range b.outs {
			if b.outs[j].name == name {
				i = j
				break
			}
		}
		if i < 0 {
			// The batch's first write to the output: the buffer of an
			// earlier batch, written and committed, serves again.
			c.mu.Lock()
			p := c.outFree[name]
			c.outFree[name] = nil
			c.mu.Unlock()
			i = len(b.outs)
			b.outs = append(b.outs, batchOut{name: name, buf: p, gen: tw.gen})
			tw.omarks = append(tw.omarks, outMark{i: i, created: true})
		}
		tw.olast = i
	}
	o := &b.outs[i]
	if o.gen != tw.gen {
		o.gen = tw.gen
		tw.omarks = append(tw.omarks, outMark{i: i, n: len(o.buf)})
	}
	return o
}

// applySync cuts the batch of the Apply that just staged and waits until
// it is durable. c.mu held; released on return.
func (c *core) applySync(d tidemark.Delivery) (bool, error) {
	for c.sealed != nil || c.pending != nil {
		_ = c.wait(context.Background())
	}
	sb := c.cut()
	c.mu.Unlock()
	<-sb.done
	if sb.err != nil {
		return false, c.applyErr(d, sb.err)
	}
	return true, nil
}

// feed returns the state of file of feed in namespace ns. c.mu held.
func (c *core) feed(ns, feed, file string) *feedState {
	if fs := c.lastFeed; fs != nil && fs.fk.feed == feed && fs.fk.file == file && fs.fk.ns == ns {
		return fs
	}
	fk := feedKey{ns, feed, file}
	fs := c.feeds[fk]
	if fs == nil {
		fs = &feedState{fk: fk}
		c.feeds[fk] = fs
	}
	c.lastFeed = fs
	return fs
}

// newTx returns a new transaction of the namespace ns. The caller holds
// the token. Transactions serve in turn from a ring of txRing (see Tx):
// a line allocates nothing, and a Tx that was used after its function
// returned is never served again.
func (c *core) newTx(ns *nsStore, d *tidemark.Delivery, readOnly bool) *Tx {
	// By index: cutting c.txs would write its pointer, and so the
	// write barrier, on every line.
	if c.txi == len(c.txs) {
		c.txi = 0
	}
	if c.txs == nil || c.txs[c.txi].late.Load() {
		// The first transaction, or a Tx of the ring was used after its
		// function returned: whoever kept it may use it again, so the
		// ring is left to it (every Tx of it stays done) and a new one
		// serves.
		c.txs, c.txi = make([]Tx, txRing), 0
	}
	tx := &c.txs[c.txi]
	c.txi++
	if tx.txState == nil {
		// Its pointers are set the first time it serves, once per ring,
		// not once per line; and not all at once when the ring is made,
		// which wrote to every page of it at the store's first Apply
		// (with the garbage collector's write barrier on, as it often is
		// while a program starts: 2 ms of a start).
		tx.txState = &c.ts
		tx.bk.tx = tx
		tx.ow.tx = tx
	}
	tx.done = false
	// The handles of the line that used tx before are not this line's.
	if tx.bk.bucketInfo != nil {
		tx.bk.bucketInfo = nil
	}
	// The state is the same from line to line, mostly: a pointer is
	// written only when it changes, which spares the write barrier while
	// the garbage collector runs. Field by field: a copy of d would wait
	// for the stores of the caller.
	ts := &c.ts
	if ts.nss != ns {
		ts.c, ts.ns, ts.nss = c, ns.ns, ns
	}
	if ts.d.Feed != d.Feed {
		ts.d.Feed = d.Feed
	}
	if ts.d.Origin != d.Origin {
		ts.d.Origin = d.Origin
	}
	ts.d.Epoch, ts.d.Position, ts.d.Seq = d.Epoch, d.Position, d.Seq
	ts.readOnly = readOnly
	if ts.ow != nil {
		ts.ow, ts.owTaken = nil, false
	}
	if ts.bkNext != 0 {
		ts.bks, ts.bkNext = [4]*Bucket{}, 0
	}
	if ts.err != nil {
		ts.err = nil
	}
	w := &c.tw
	if readOnly {
		w = nil
	} else {
		w.reset()
	}
	if ts.w != w {
		ts.w = w
	}
	return tx
}

// snapshot points the running transaction at the batches as they are
// now. c.mu held.
func (c *core) snapshot() {
	ts := &c.ts
	if ts.cur != c.cur {
		ts.cur = c.cur
	}
	if ts.sealed != c.sealed {
		ts.sealed = c.sealed
	}
	if ts.pending != c.pending {
		ts.pending = c.pending
	}
	if ts.recent != c.recent {
		ts.recent = c.recent
	}
}

// bucket returns the name and key prefix of bucket b of namespace ns. The
// caller holds the token.
func (c *core) bucket(ns *nsStore, b string) *bucketInfo {
	for i := range ns.last {
		if bi := ns.last[i]; bi != nil && bi.name == b {
			if i > 0 {
				copy(ns.last[1:i+1], ns.last[:i])
				ns.last[0] = bi
			}
			return bi
		}
	}
	bi := c.buckets[[2]string{ns.ns, b}]
	if bi == nil {
		bi = newBucketInfo(ns.ns, b)
	}
	copy(ns.last[1:], ns.last[:])
	ns.last[0] = bi
	if len(c.buckets) < 1024 {
		c.buckets[[2]string{ns.ns, b}] = bi
	}
	return bi
}

// acquire takes the token that serializes Apply and View, or gives up when
// ctx is done.
// ctx only matters when Apply has to wait: a cancelled context does not fail
// an Apply that can run at once (a drain at stop may run under one).
//
// The token is an atomic flag, cheaper than a channel on the path of every
// line. A goroutine that finds it held counts itself in applyWaiters before
// it tries again, and then waits for a wake-up on applyFree; release clears
// the flag before it looks at applyWaiters. So either the waiter's new try
// sees the flag cleared, or release sees the waiter and leaves a wake-up.
//
// The committer holds the token for a moment when it cuts a batch (see
// tryCut): that is no reason to give up, whatever ctx says.
func (c *core) acquire(ctx context.Context) error {
	if c.applyTok.CompareAndSwap(false, true) {
		return nil
	}
	c.applyWaiters.Add(1)
	defer c.applyWaiters.Add(-1)
	for {
		if c.applyTok.CompareAndSwap(false, true) {
			return nil
		}
		select {
		case <-c.applyFree:
		case <-ctx.Done():
			if !c.cutting.Load() {
				return ctx.Err()
			}
			<-c.applyFree
		}
	}
}

func (c *core) release() {
	c.applyTok.Store(false)
	if c.applyWaiters.Load() > 0 {
		select {
		case c.applyFree <- struct{}{}:
		default: // a wake-up is pending already
		}
	}
	if c.cutWanted.Load() {
		// The committer found the token held when it wanted to cut.
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}

// tryCut cuts the staged batch if it can take the token at once: a batch
// is cut only between Apply calls, as they write into it. Else it leaves
// the cut to the Apply that holds the token, or to the committer when
// that Apply releases it. c.mu held; c.sealed nil.
func (c *core) tryCut() {
	// cutting is set before the token is taken and cleared after it is
	// let go: an Apply that finds the token held while cutting is set
	// waits for it even under a cancelled context (see acquire).
	c.cutting.Store(true)
	defer c.cutting.Store(false)
	if !c.applyTok.CompareAndSwap(false, true) {
		c.cutWanted.Store(true)
		return
	}
	if h := c.opts.hooks; h != nil && h.whileCutting != nil {
		h.whileCutting()
	}
	c.cut()
	c.release()
}

func (c *core) applyErr(d tidemark.Delivery, err error) error {
	return fmt.Errorf("apply feed %q epoch %d position %d in store %s: %w", d.Feed, d.Epoch, d.Position, c.dir, err)
}

// redelivery decides whether d was applied before: by the recorded
// position in its epoch, or by the lineage of the recorded epoch when d
// opens a new epoch on the same, unchanged file.
func (c *core) redelivery(fs *feedState, d tidemark.Delivery, last, dur tidemark.Lineage, hasDur bool, v verdict, cached bool) (skip, byLineage bool) {
	if d.Epoch == 0 || last.Epoch == 0 {
		return false, false
	}
	if tidemark.AlreadyApplied(d, last.Applied) {
		return true, false
	}
	if d.Epoch == last.Epoch || d.Position > last.Position {
		return false, false
	}
	if !cached || v.epoch != d.Epoch {
		// Only a durable record carries a tail hash taken when its lines
		// were applied; a newer staged one would be hashed now, from a file
		// that may have changed since.
		match := hasDur && dur.Applied == last.Applied && lineageMatches(dur, d.Origin)
		v = verdict{epoch: d.Epoch, match: match}
		c.mu.Lock()
		fs.verdict, fs.cached = v, true
		c.mu.Unlock()
		if match {
			c.log.Info("state: new epoch continues the recorded lineage: lines at or below the recorded position are skipped",
				"store", c.dir, "feed", fs.fk.feed, "file", fs.fk.file, "namespace", fs.fk.ns, "epoch", d.Epoch, "recorded_epoch", dur.Epoch, "recorded_position", dur.Position)
		}
	}
	return v.match, v.match
}

// lineageMatches reports whether the file of o holds what rec was applied
// from, unchanged up to rec.Position: same leading bytes, same bytes just
// before the position (and so at least that long).
//
// The file identity is not required to match. The feed keeps its position
// for a file at the path with another identity and the same leading bytes
// (a copy restored from a backup, a move across file systems, a writer that
// writes a copy and renames it over the path), so the store must recognise
// the same file by the same facts: otherwise losing the pointer file of a
// copied input would apply every line a second time.
//
// The leading bytes are compared over the length the record's fingerprint
// covers, read back through the origin: an epoch begun on a short file (an
// empty one, a header line) has a fingerprint of fewer bytes than the
// file's later epochs, and must still be recognised once the file has
// grown, or its lines would apply a second time.
func lineageMatches(rec tidemark.Lineage, o *tidemark.Origin) bool {
	if o == nil || o.TailHash == nil || rec.TailLen <= 0 {
		return false
	}
	fp := rec.Fingerprint
	switch {
	case fp == o.Fingerprint:
	case fp.Len > 0:
		h, err := o.TailHash(int64(fp.Len), fp.Len)
		if err != nil || h != fp.Hash {
			return false
		}
	case o.Fingerprint.Len > 0:
		// An empty file's fingerprint covers nothing: the tail decides.
	default:
		return false
	}
	h, err := o.TailHash(rec.Position, rec.TailLen)
	return err == nil && h == rec.TailHash
}

// committer commits sealed batches, and cuts the staged batch when it is
// BatchInterval old (Apply cuts a full one).
func (c *core) committer() {
	defer close(c.stopped)
	defer c.waitFold()
	defer c.released()
	interval := c.opts.batchInterval()
	t := time.NewTicker(interval)
	defer t.Stop()
	// due fires when the staged batch a tick found younger than the
	// interval comes of age: a batch is cut when it is full or interval
	// old, not at whatever age the tick finds it (under load, most
	// batches were cut young, and every commit costs its syncs).
	due := time.NewTimer(interval)
	due.Stop()
	defer due.Stop()
	for {
		// A batch cut (by an Apply, by a tick below, or while the one
		// before committed: pending) commits at once.
		c.mu.Lock()
		b := c.sealed
		c.mu.Unlock()
		if b != nil {
			c.commit(b)
			continue
		}
		tick := false
		select {
		case <-c.stop:
			return
		case <-c.wake:
		case <-t.C:
			tick = true
		case <-due.C:
			tick = true
		}
		c.mu.Lock()
		// The staging batch is the running Apply's: only its count, set
		// under c.mu, says whether it holds anything.
		if (tick || c.cutWanted.Load()) && c.sealed == nil && c.unusable() == nil {
			if age := time.Since(c.cur.started); c.cur.count > 0 && tick && !c.cutWanted.Load() && age < interval {
				due.Reset(interval - age)
			} else if c.cur.count > 0 {
				c.tryCut()
			} else if tick && len(c.binds) > 0 {
				// Nothing staged, nothing committing: everything finished
				// is durable.
				marks := make([]markOf, len(c.binds))
				for i, cp := range c.binds {
					marks[i] = markOf{cp: cp, m: cp.Mark()}
				}
				c.mu.Unlock()
				for _, m := range marks {
					m.cp.DurableThrough(m.m)
				}
				c.mu.Lock()
			}
		}
		c.mu.Unlock()
	}
}

// commit makes b durable: the output bytes are written and synced first,
// then one backend transaction records the state, the applied positions
// and the new output lengths. Only then are the bound checkpoints told.
func (c *core) commit(b *batch) {
	c.mu.Lock()
	err := c.failed
	c.mu.Unlock()
	if err == nil && !b.empty() {
		if h := c.opts.hooks; h != nil && h.beforeCommit != nil {
			h.beforeCommit()
		}
		start := time.Now()
		err = c.write(b)
		if o := c.opts.Observer; o != nil && err == nil {
			o.ObserveCommit(b.count, time.Since(start))
		}
	}
	if err == nil && !b.empty() {
		c.rebalance()
	}
	// What was left for a send that did not happen (the commit failed
	// before it, or b was empty): the fold begins now, and the parked
	// Apply is woken below, once the commit's outcome is known.
	if f := c.foldLater; f != nil {
		c.foldLater = nil
		c.startFold(f, false)
	}
	// b takes the place of the last committed batch: that one's values
	// are in the value cache before a transaction can stop finding them
	// in it (see Tx.getOlder).
	c.waitFold()
	c.mu.Lock()
	c.wakeLater = false // the broadcast below wakes the Apply
	if err != nil && c.failed == nil {
		c.stats.FailedCommits++
		c.stats.LastError = err.Error()
		c.failed = fmt.Errorf("%w: %w", ErrFailed, err)
		c.noteFailed()
		c.log.Error("state: commit failed; nothing more will be declared durable, restart the process",
			"store", c.dir, "backend", c.kind, "err", err)
	}
	if c.failed != nil {
		b.err = c.failed
		c.recent = nil
		if c.vc != nil {
			// What the backend holds of b is not known.
			c.vc.setComplete(false)
		}
	} else if !b.empty() {
		c.stats.Commits++
		for _, r := range b.applied {
			r.fs.durable, r.fs.hasDur = r.lin, true
		}
		// Its values are now those of the backend, until a later batch
		// commits and takes its place (the value cache holds them by
		// then: see the fold above).
		if r := c.recent; r != nil && r != b && len(c.retired) < 4 {
			c.retired = append(c.retired, r)
		}
		c.recent = b
		// Its output bytes are in the files: the buffers serve again.
		for _, o := range b.outs {
			if cap(o.buf) <= maxOutputBuffer {
				c.outFree[o.name] = o.buf[:0]
			}
		}
		b.outs = nil
	}
	c.sealed, c.pending = c.pending, nil
	c.ver.Add(1)
	if c.sealed != nil {
		// The pending batch commits next (the committer's loop takes it
		// at once); the staging one, if an Apply waits for it overfull,
		// takes its place, cut here for the same reason as below.
		if c.parked && c.failed == nil && c.overfull(c.cur) && c.canPend(c.cur) {
			c.cutPending()
			c.wakeLater = c.wakeOnSent
		}
	} else if !c.opts.Sync && c.failed == nil && c.cur.count > 0 &&
		(c.full(c.cur) || time.Since(c.cur.started) >= c.opts.batchInterval()) {
		// A batch that filled up, or grew old, while this one committed
		// is cut at once rather than at the next tick.
		if c.parked {
			// The Apply that holds the token waits in beforeApply for
			// this commit, and writes nothing meanwhile (no transaction
			// runs): the batch is cut here, and the next commit begins
			// without waiting for that goroutine to run and cut it.
			c.cut()
			c.wakeLater = c.wakeOnSent
		} else {
			c.tryCut()
		}
	}
	later := c.wakeLater
	var fold *foldJob
	byApply := false
	if b.err == nil && !b.empty() && c.vc != nil {
		fold = &foldJob{b: b, done: make(chan struct{})}
		if c.parked && !later {
			// The Apply woken below folds b (see startFold).
			c.foldFor, byApply = fold, true
		}
	}
	if !later {
		c.broadcast()
	}
	c.mu.Unlock()
	if fold != nil {
		if later {
			c.foldLater = fold
		} else {
			c.startFold(fold, byApply)
		}
	}
	if b.err == nil {
		for _, m := range b.marks {
			m.cp.DurableThrough(m.m)
		}
	}
	close(b.done)
}

// cacheSplit is how a bbolt store's cache budget is split between its
// value cache and the memory of its commits (see core.rebalance). The
// committer's.
type cacheSplit struct {
	eng *boltEngine
	// share and vc are the commit's share and the value cache's budget
	// of the split in halves; shareMisses and vcMisses those of the split
	// that gives the commits three quarters.
	share, shareMisses, vc, vcMisses int64
	// misses is set while the split gives the commits three quarters.
	misses bool
	// commits counts the commits rebalance saw; growAt, when not 0, is
	// the one at which the value cache gets its half back.
	commits, growAt int64
}

// rebalance moves the cache budget of a bbolt store between its value
// cache and its commits by what the cache is found to be worth. A value
// cache that is full and finds fewer than a quarter of the keys looked
// for in it (cacheWindow lookups; random keys of a state many times what
// it holds: at 1,000,000 accounts and the default budget, about one in
// ten) saves little: a miss costs one B+tree search of bbolt's mapped
// file. The same memory given to the commits lets a batch change more
// keys (boltKeyCap), and its commit writes fewer pages for each: such a
// cache gives half its budget to the commits (the cache drops its entries
// first, then the batches grow; see "Memory and the cache budget" in
// doc.go for what it measured). When, so shrunk, it finds more than half
// of them (the lines turned to fewer keys), the commits give it back: the
// cap falls at once, and the cache grows two commits later, once no batch
// cut at the higher cap is committing. The committer's, after each commit
// of a batch.
func (c *core) rebalance() {
	sp := c.split
	if sp == nil {
		return
	}
	sp.commits++
	if sp.growAt != 0 && sp.commits >= sp.growAt {
		sp.growAt = 0
		c.vc.resize(sp.vc)
	}
	hits, misses, full, ok := c.vc.window(cacheWindow)
	if !ok {
		return
	}
	switch {
	case !sp.misses && full && hits*4 < hits+misses:
		sp.misses, sp.growAt = true, 0
		c.vc.resize(sp.vcMisses)
		sp.eng.setCommitShare(sp.shareMisses)
		c.log.Info("state: the value cache found few of the keys looked for in it; three quarters of the cache budget go to the commits, which take larger batches",
			"store", c.dir, "backend", c.kind, "hits", hits, "misses", misses, "value_cache_bytes", sp.vcMisses, "commit_bytes", sp.shareMisses)
	case sp.misses && hits*2 > hits+misses:
		sp.misses = false
		sp.eng.setCommitShare(sp.share)
		sp.growAt = sp.commits + 2
		c.log.Info("state: the value cache finds most of the keys looked for in it; the cache budget is split in halves again",
			"store", c.dir, "backend", c.kind, "hits", hits, "misses", misses, "value_cache_bytes", sp.vc, "commit_bytes", sp.share)
	}
}

// released wakes the Apply parked for the batch being committed, and
// starts the fold of the batch committed before it, if commit left them
// for the moment the commit's request is sent (wakeLater, foldLater): the
// backend works on the commit from then on, while the Apply stages the
// next batch and the fold runs. Woken at once, they took, on a machine of
// two cores, a core from the committer while it prepared the commit (its
// writes put in order, their checksums, the statement's arrays), and the
// server waited for it (at 10,000 accounts, a third of the committer's
// time between two commits). The sentCommitter calls it (see
// core.write). If no request is sent, commit does what it left once the
// commit ended; and the committer calls it before it stops. The
// committer's.
func (c *core) released() {
	byApply := false
	if c.wakeLater {
		c.mu.Lock()
		c.wakeLater = false
		if j := c.foldLater; j != nil && c.parked {
			c.foldFor, byApply = j, true
		}
		c.broadcast()
		c.mu.Unlock()
	}
	if j := c.foldLater; j != nil {
		c.foldLater = nil
		c.startFold(j, byApply)
	}
}

// startFold begins j, the fold of the last committed batch into the value
// cache, off the committer's way from one commit to the next (at 10,000
// accounts, a map write for each of about 6,300 keys a batch). Until it
// ends, transactions look in the batch before the cache (batch.folded),
// and the commit of the next batch waits for it before it takes the
// batch's place (waitFold).
//
// byApply says that the commit woke an Apply that waited, parked, for
// the batch to commit (c.foldFor): that Apply folds it before it goes on
// (beforeApply), on its own goroutine, which had nothing to do while the
// batch committed. Otherwise j runs on a goroutine of its own. On a
// machine of two cores, that goroutine took the committer's core once
// the woken Apply had the other (the committer waited for it, in
// waitFold, and to run again after its syncs): 5,000,000 lines at 10,000
// accounts into bbolt, saves of 10,000 lines, 8 rounds alternated, took
// 2.83 to 3.81 s (median 2.98) against 2.98 to 3.40 s (median 3.16)
// (2026-12-07). The committer's.
func (c *core) startFold(j *foldJob, byApply bool) {
	c.folding = j
	if byApply {
		return
	}
	j.claimed.Store(true)
	go c.fold(j)
}

// foldJob is the fold of a committed batch into the value cache, run
// once by whoever claims it first: the Apply it was left to, a goroutine
// of its own, or the committer once it needs the batch folded.
type foldJob struct {
	b       *batch
	claimed atomic.Bool
	done    chan struct{}
}

// fold runs j, claimed by the caller.
func (c *core) fold(j *foldJob) {
	defer close(j.done)
	if h := c.opts.hooks; h != nil && h.beforeFold != nil {
		h.beforeFold()
	}
	c.vc.fold(j.b)
	j.b.folded.Store(true)
}

// waitFold waits for the fold startFold began, if any, or runs it if no
// one claimed it yet. The committer's.
func (c *core) waitFold() {
	j := c.folding
	if j == nil {
		return
	}
	c.folding = nil
	if h := c.opts.hooks; h != nil && h.beforeWaitFold != nil {
		h.beforeWaitFold()
	}
	if j.claimed.CompareAndSwap(false, true) {
		c.fold(j)
		return
	}
	<-j.done
}

// presortMin is the fewest changed keys a batch has sorted ahead
// (presort): below it the committer's own sort takes less than starting
// and waiting for a goroutine.
const presortMin = 1024

// presort puts the keys b changed in order on a goroutine of its own, now
// that b, the staging batch, is overfull and waits for the batch before it
// to commit: it takes no more lines until it is cut (see syncAhead). Its
// commit then takes its keys in that order, with their values as they are
// then, and sorts only its few other writes (write): the sort of a batch's
// keys is made while the backend commits the batch before, off the
// commits' path. An entry's key never changes (its value may), so the
// order holds as long as the batch holds the same entries, which the
// commit checks (sameEntries). c.mu held, and the token or c.parked.
func (c *core) presort(b *batch) {
	if b.sortDone != nil || len(b.writes) < presortMin {
		return
	}
	done := make(chan struct{})
	b.sortDone = done
	ents := slices.Clone(b.writes)
	b.sorted = ents
	// A batch of MaxBatchSize deliveries takes no more (see room and
	// beforeApply): its values are final, and are taken here too, so that
	// the commit does not visit each entry (mergeWrites, at 10,000
	// accounts 0.10 s of the committer's CPU over 1,000,000 lines), with
	// their checksums where the store writes them (preVals): the
	// sumEngine's copy and sums of a commit's values took 0.15 s of the
	// committer's 1.8 s over 5,000,000 lines, 0.03 s after (pprof), and
	// the runs 2.89 to 3.34 s (median 2.97) against 2.92 to 3.76 s
	// (median 3.09), 8 rounds alternated (2026-12-07). Below that (a
	// batch overfull by its bytes or keys, limits that can move), the
	// values are the commit's to take.
	final := b.count >= c.bmax
	sum := final && c.summing()
	go func() {
		defer close(done)
		o := writeOrders.Get().(*writeOrder)
		ws := o.keys[:0]
		for _, e := range ents {
			ws = append(ws, write{key: e.key})
		}
		if final {
			pre := getWrites(len(ents)) // given back by the commit
			var vals []byte
			if sum {
				n := 0
				for _, e := range ents {
					n += len(e.val) + sumLen
				}
				vals = getBytes(n) // given back by the commit
			}
			for _, r := range o.ranks(ws) {
				e := ents[r.i]
				w := write{key: e.key, val: e.val, del: e.del}
				if sum && summed(w) {
					n := len(vals)
					vals = appendSummed(vals, e.key, e.val)
					w.val, w.summed = vals[n:len(vals):len(vals)], true
				}
				pre = append(pre, w)
			}
			b.pre, b.preVals = pre, vals
		} else {
			b.perm = o.order(ws)
		}
		o.keys = keepWrites(ws)
		writeOrders.Put(o)
	}()
}

// sameEntries reports whether a and b hold the same entries in the same
// order.
func sameEntries(a, b []*entry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// writeOrders are the scratch space of the sorts of presort: one may run
// while the committer writes the batch before, which another sorted.
var writeOrders = sync.Pool{New: func() any { return new(writeOrder) }}

// write writes b: outputs, then the backend transaction.
func (c *core) write(b *batch) error {
	if err := c.checked(); err != nil {
		return err
	}
	if b.sortDone != nil {
		<-b.sortDone
		if !sameEntries(b.writes, b.sorted) {
			b.perm, b.pre, b.preVals = nil, nil, nil // changed since: sorted below with the rest
		}
		b.sorted = nil
	}
	ahead := b.perm != nil || b.pre != nil
	n := len(b.applied) + len(b.outs) + len(b.schemas)
	if !ahead {
		n += len(b.writes)
	}
	// The lists of writes are the committer's, from commit to commit.
	ws := slices.Grow(c.wlist[:0], n)
	if !ahead {
		for _, e := range b.writes {
			ws = append(ws, write{key: e.key, val: e.val, del: e.del})
		}
	}
	ws = append(ws, b.schemas...)
	for _, fk := range b.forget {
		// No record in the batch is of these keys (see keepLeft).
		ws = append(ws, write{key: appliedKey(fk.ns, fk.feed, fk.file), del: true})
	}
	for i := range b.applied {
		// The tail hash is read once per feed per batch, for the highest
		// position. Only the committer touches a sealed batch's records.
		r := &b.applied[i]
		lin := r.lin
		if o := r.origin; o != nil && o.TailHash != nil && lin.TailLen == 0 && lin.Position > 0 {
			n := int(min(lin.Position, maxTail))
			if h, err := o.TailHash(lin.Position, n); err == nil {
				lin.TailLen, lin.TailHash = n, h
				r.lin = lin
				// The feed's latest record is this one as long as no
				// later line moved it: it gets the tail hash too.
				c.mu.Lock()
				if fs := r.fs; fs.latest.Applied == lin.Applied && fs.origin == r.origin && fs.latest.TailLen == 0 {
					fs.latest.TailLen, fs.latest.TailHash = n, h
				}
				c.mu.Unlock()
			}
		}
		ws = append(ws, write{key: appliedKey(r.fs.fk.ns, r.fs.fk.feed, r.fs.fk.file), val: encodeLineage(lin)})
	}

	lens := make(map[*Output]int64, len(b.outs))
	for _, bo := range b.outs {
		c.outMu.Lock()
		o := c.outputs[bo.name]
		c.outMu.Unlock()
		var n int64
		var err error
		if ws, n, err = o.stage(b.seq, bo.buf, ws); err != nil {
			return err
		}
		lens[o] = n
	}
	if len(b.outs) > 0 {
		// The offsets of the next batch's bytes are known now: an
		// overfull batch waiting for this one has them synced while this
		// one commits.
		c.mu.Lock()
		if c.pending != nil {
			c.syncAhead(c.pending)
		}
		if c.parked && c.cur != b {
			c.syncAhead(c.cur)
		}
		c.mu.Unlock()
	}
	if h := c.opts.hooks; h != nil && h.afterOutput != nil && len(b.outs) > 0 {
		h.afterOutput()
	}
	// In key order (see writeOrder); the batch's keys, sorted ahead,
	// merged with the rest.
	c.order.sort(ws)
	list := ws
	defer func() { c.wlist = keepWrites(list) }()
	switch {
	case b.pre != nil:
		merged := mergePresorted(c.wmerged, ws, b.pre)
		vals := b.preVals
		defer func() {
			c.wmerged = keepWrites(merged)
			putBytes(vals)
		}()
		putWrites(b.pre)
		ws, b.pre, b.preVals = merged, nil, nil
	case b.perm != nil:
		merged := mergeWrites(c.wmerged, ws, b.writes, b.perm)
		defer func() { c.wmerged = keepWrites(merged) }()
		ws, b.perm = merged, nil
	}
	// A snapshot does not begin while the backend commits: Pebble makes a
	// batch visible to reads before the sync of its log has ended (its
	// commit pipeline publishes the batch, then waits for the sync), and a
	// snapshot holds what is durable only. A power cut in that moment lost
	// a batch that the ledger, reading a snapshot, had reported durable
	// (torture TestPowerLoss).
	c.commitMu.Lock()
	err := commitTo(c.eng, ws, c.released)
	c.commitMu.Unlock()
	if err != nil {
		return fmt.Errorf("commit %d changes of %d deliveries to %s store %s: %w", len(ws), b.count, c.kind, c.dir, err)
	}
	for o, n := range lens {
		o.setCommitted(n)
	}
	return nil
}

// maxOutputBuffer is the largest output buffer kept for the next batch.
const maxOutputBuffer = 16 << 20

// maxTail is the most bytes a lineage's tail hash covers.
const maxTail = 64

// flush cuts the staged batch and waits until it is durable. held says
// whether the caller holds the token; if not, flush takes it to cut (a
// batch is cut between Apply calls), and lets it go before it waits.
func (c *core) flush(ctx context.Context, held bool) error {
	if !held {
		if err := c.acquire(ctx); err != nil {
			return fmt.Errorf("flush store %s: waiting for an Apply to finish: %w", c.dir, err)
		}
		defer func() {
			if !held {
				c.release()
			}
		}()
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	for (c.sealed != nil || c.pending != nil) && c.failed == nil {
		if err := c.wait(ctx); err != nil {
			c.mu.Unlock()
			return fmt.Errorf("flush store %s: %w", c.dir, err)
		}
	}
	if c.failed != nil {
		err := c.failed
		c.mu.Unlock()
		return fmt.Errorf("flush store %s: %w", c.dir, err)
	}
	b := c.cut()
	c.mu.Unlock()
	if !held {
		c.release()
		held = true // released
	}
	select {
	case <-b.done:
	case <-ctx.Done():
		return fmt.Errorf("flush store %s: %w", c.dir, ctx.Err())
	}
	if b.err != nil {
		return fmt.Errorf("flush store %s: %w", c.dir, b.err)
	}
	return nil
}

func (c *core) close() error {
	c.once.Do(func() {
		// Wait for a running Apply, so that nothing is staged after the
		// last flush.
		_ = c.acquire(context.Background())
		defer c.release()
		ferr := c.flush(context.Background(), true)
		c.mu.Lock()
		// A clean close records the output files as left checked.
		clean := ferr == nil && c.failed == nil
		c.closed = true
		c.ver.Add(1)
		c.broadcast()
		c.mu.Unlock()
		close(c.stop)
		<-c.stopped
		c.stopPreload() // it reads the backend until it sees c.stop
		c.snapMu.Lock() // the snapshots and backups running end first
		defer c.snapMu.Unlock()
		c.closeErr = errors.Join(ferr, c.closeOutputs(clean), c.eng.close(), c.lock.release())
	})
	return c.closeErr
}

func (c *core) bind(feed string, cp *checkpoint.Checkpoint) error {
	if cp == nil || cp.Feed() != feed {
		return fmt.Errorf("bind store %s to feed %q: checkpoint is of another feed", c.dir, feed)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range c.binds {
		if b == cp {
			return nil
		}
	}
	c.binds = append(c.binds, cp)
	return nil
}

func (c *core) statsNow() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Staged = c.cur.count
	if c.sealed != nil {
		s.Staged += c.sealed.count
	}
	if c.pending != nil {
		s.Staged += c.pending.count
	}
	s.Failed = c.failed != nil
	s.Format = c.format()
	if vc := c.vc; vc != nil {
		vc.mu.Lock()
		s.CacheHits, s.CacheMisses = vc.hits+vc.allHits, vc.misses+vc.allMisses
		s.CacheBudget = vc.budget
		vc.mu.Unlock()
	}
	return s
}

// format returns the store's format, as its format record says (see
// formats). It changes only at open and in Upgrade, and from 2 to 3 in a
// commit (sumEngine.commit).
func (c *core) format() int {
	sums := c.eng.(*sumEngine)
	be, isBolt := c.rawEngine().(*boltEngine)
	pe, isPG := c.rawEngine().(*pgEngine)
	switch {
	case isBolt && be.tables:
		return 4
	case isPG && pe.bySid():
		return 5
	case sums.format3.Load():
		return 3
	case sums.sums:
		return 2
	}
	return 1
}

// nsStore is a namespace of a store; it implements Store.
type nsStore struct {
	c    *core
	ns   string
	root *bucketInfo // the root bucket
	// The buckets last asked for in this namespace, used only by the
	// holder of the token.
	last [4]*bucketInfo
}

func newNS(c *core, ns string) *nsStore {
	return &nsStore{c: c, ns: ns, root: newBucketInfo(ns, "")}
}

func (s *nsStore) Apply(ctx context.Context, d tidemark.Delivery, fn func(tx *Tx) error) (bool, error) {
	return s.c.apply(ctx, s, &d, fn)
}

func (s *nsStore) ApplyRuns(ctx context.Context, n int, at func(i int) *tidemark.Delivery, fn func(tx *Tx, from, to int) error) (int, error) {
	return s.c.applyRuns(ctx, s, n, at, fn)
}

func (s *nsStore) ApplyEach(ctx context.Context, n int, at func(i int) *tidemark.Delivery, fn func(tx *Tx, i int) error) (int, error) {
	return s.c.applyEach(ctx, s, n, at, fn)
}

func (s *nsStore) View(fn func(tx *Tx) error) error {
	_ = s.c.acquire(context.Background())
	defer s.c.release()
	tx := s.c.newTx(s, &tidemark.Delivery{}, true)
	s.c.mu.Lock()
	closed := s.c.closed
	s.c.snapshot()
	s.c.mu.Unlock()
	// Done however fn ends, a panic included.
	defer func() { tx.done = true }()
	if closed {
		return ErrClosed
	}
	err := fn(tx)
	if err == nil {
		err = tx.err // an iteration's (see Tx.Err)
	}
	return err
}

func (s *nsStore) Applied(feed string) (tidemark.Lineage, bool) {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	fs := s.c.feeds[feedKey{s.ns, feed, ""}]
	if fs == nil || !fs.hasDur {
		return tidemark.Lineage{}, false
	}
	return fs.durable, true
}

func (s *nsStore) AppliedAll(feed string) []tidemark.Lineage {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	var fks []feedKey
	for fk, fs := range s.c.feeds {
		if fk.feed == feed && fs.hasDur {
			fks = append(fks, fk)
		}
	}
	slices.SortFunc(fks, func(a, b feedKey) int { return cmp.Or(strings.Compare(a.ns, b.ns), strings.Compare(a.file, b.file)) })
	out := make([]tidemark.Lineage, len(fks))
	for i, fk := range fks {
		out[i] = s.c.feeds[fk].durable
		out[i].File = fk.file
	}
	return out
}

func (s *nsStore) Bind(feed string, cp *checkpoint.Checkpoint) error { return s.c.bind(feed, cp) }
func (s *nsStore) Namespace(name string) Namespace                   { return newNS(s.c, name) }
func (s *nsStore) Output(name string) (*Output, error)               { return s.c.output(name) }
func (s *nsStore) Flush(ctx context.Context) error                   { return s.c.flush(ctx, false) }
func (s *nsStore) Close() error                                      { return s.c.close() }
func (s *nsStore) Stats() Stats                                      { return s.c.statsNow() }
func (s *nsStore) Dir() string                                       { return s.c.dir }
func (s *nsStore) Backend() string                                   { return s.c.kind }
