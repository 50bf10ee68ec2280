package state

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"
	pebblevfs "github.com/cockroachdb/pebble/v2/vfs"

	"github.com/tidemark-go/tidemark/vfs"
)

// The backends, as named in a config string and in the STORE file.
const (
	Bolt   = "bbolt"
	Pebble = "pebble"
)

// Defaults of [Options]. They were chosen by BenchmarkApplyBatched (see the
// package documentation for the numbers).
const (
	// DefaultBatchSize is how many applied deliveries make a batch.
	DefaultBatchSize = 10000
	// DefaultBatchInterval is the longest a staged change waits for its
	// batch to be committed.
	DefaultBatchInterval = 20 * time.Millisecond
	// DefaultLockTimeout is how long Open waits for another process to
	// release the store.
	DefaultLockTimeout = 10 * time.Second
	// DefaultVerifyMaxBytes is the largest bbolt file checked before Open
	// returns by default; a larger one is checked in the background (see
	// [Options].VerifyMaxBytes).
	DefaultVerifyMaxBytes = 64 << 20
)

// storeFile names the file in a store directory that records the backend;
// lockFile the file a process holds an OS lock on while it has the store
// open.
const (
	storeFile = "STORE"
	lockFile  = "LOCK"
)

// Options configure a store. The zero value is the batched default.
type Options struct {
	// Sync makes every Apply one durable transaction, committed before
	// Apply returns. The default (false) stages changes in memory and
	// commits them in batches in the background.
	Sync bool
	// BatchSize is how many applied deliveries make a batch; 0 means
	// [DefaultBatchSize]. A batch is also cut when it is BatchInterval old.
	BatchSize int
	// MaxBatchSize is how many deliveries a batch takes at most while
	// the batch before it commits. A batch is cut at BatchSize (or
	// BatchInterval) when nothing is committing; while the committer
	// writes the batch before, the staging batch goes on taking
	// deliveries up to MaxBatchSize, and is then cut to be committed
	// next, while the batch after it fills the same way; an Apply waits
	// for the commit only when that one is full too. So a commit that
	// cannot keep up with the lines gets fewer, bigger batches, each
	// costing it less a line (a batch changes fewer keys than it has
	// lines), and Apply waits less. 0, or less than BatchSize, means
	// BatchSize. What a crash loses (and the feed delivers again) is the
	// staged batches: up to three times MaxBatchSize deliveries.
	MaxBatchSize int
	// BatchInterval is the age at which a batch is cut whatever its size:
	// the longest a staged change waits for its batch to be cut; 0 means
	// [DefaultBatchInterval]. It is also how often the checkpoints of an
	// idle store are brought up to date.
	BatchInterval time.Duration
	// LockTimeout is how long Open waits for another process to release
	// the store; 0 means [DefaultLockTimeout].
	LockTimeout time.Duration
	// Logger receives the store's warnings (and Pebble's messages); nil
	// means slog.Default().
	Logger *slog.Logger
	// FS is the file system of the STORE file and the output files; nil
	// means the operating system's. Set it to a file system of your own
	// (see package vfs), or to one wrapped with vfs.Inject to test what a
	// failing disk does to your program.
	FS vfs.FS
	// Unbound lets a batched Apply take deliveries of a feed that no
	// checkpoint is bound to (see [ErrNotBound]). Set it only when the
	// caller never lets its feed's pointer pass what the store holds: it
	// resumes from [Store.AppliedAll], or moves its own pointer only after
	// Flush. A framework group's store never needs it.
	Unbound bool
	// Observer, when set, is told of every batch committed durably: how
	// many applied deliveries it held and how long the commit took (the
	// output files' sync included). ops.Observer.ForStore(name) is one. It
	// is called on the committer's goroutine and must not block.
	Observer CommitObserver
	// CacheSize is the memory budget, in bytes, of the store's caches of
	// durable values: 0 means [DefaultCacheSize], a negative size no value
	// cache (Pebble keeps a block cache of 8 MiB). A bbolt store gives half
	// of it (at most 128 MiB) to its commit and the rest to its value
	// cache (values read or committed, kept so that the next read of the
	// key does not go to bbolt; bbolt's pages are in the operating
	// system's page cache, not counted here). A bbolt commit keeps about
	// 6 KiB of memory live for each page of the tree it changes (the
	// page's node and the buffer it is written from): once the tree is
	// larger than the commit's share, a batch is also cut when it changed
	// the keys whose pages fill the share (at 1,000,000 random keys and
	// the default budget, about 1,400 keys a batch instead of BatchSize
	// lines, 3,000 under a memory limit as below, 4,800 once the commits
	// get three quarters, see below; a larger budget makes larger batches,
	// and costs less CPU a line). When the value cache,
	// full, finds fewer than a quarter of the keys looked for in it (random
	// keys of a state many times what it holds), a bbolt store gives three
	// quarters of the budget (at most 128 MiB) to its commits, and the
	// cache shrinks to the rest; it gets its half back once it finds more
	// than half of them ([Stats].CacheHits, CacheMisses, CacheBudget). A
	// Pebble store gives
	// half (at least 8 MiB) to Pebble's block cache and the rest to its
	// value cache; Pebble reserves its two memtables in the block cache,
	// each an eighth of it, between 4 MiB (Pebble's default) and 64 MiB,
	// so that a save of many keys stays in a memtable instead of making a
	// table of its own. The value cache and the commit count what they keep
	// live twice, for the heap the garbage collector lets grow between
	// collections; once only when the process runs under a soft memory
	// limit (read at Open) of at most 64 MiB plus the part of CacheSize
	// that is Go heap (all of it with bbolt; with Pebble built with cgo,
	// less its block cache), under which the collector holds the whole
	// heap within that limit. Under it a bbolt commit also keeps live at
	// most what three quarters of the limit leave beside 16 MiB and what
	// the value cache holds, its pages counted as the tree makes them (a
	// page's node holds 64 bytes for each element of the page: 10.4 KB a
	// page of 88 small elements, 5.7 KB one of 15), so that the collector
	// keeps room (a budget of 64 MiB, whose commits took three quarters
	// of it at 6 KiB a page, made the collector run without pause at
	// 10,000,000 accounts). A store's
	// anonymous memory is about CacheSize plus its staged batches (at most
	// three batches of MaxBatchSize lines). Set it to what the state takes to
	// serve every read from memory: about 350 bytes a key of 20 bytes with
	// a value of 8, plus 128 MiB for bbolt's commit (Pebble, whose block
	// cache takes half: about 700 bytes a key).
	//
	// Go's collector lets the whole heap grow to twice what is live
	// before it collects (GOGC=100), so a process's peak is more than
	// its live memory: a program that must stay under a ceiling sets the
	// runtime's soft memory limit (GOMEMLIMIT, or runtime/debug's
	// SetMemoryLimit) a little under it, as examples/ledger's run does
	// ([MemoryLimit]: 64 MiB plus CacheSize, less 8 MiB, and for Pebble
	// built with cgo less its block cache and memtables). Measured on a
	// bbolt store of 10,000,000 keys, 100,000 lines of random keys at the
	// default budget (2026-12-06, 3 runs each): peak anonymous memory 92 to 123 MiB
	// without the limit, 83 MiB with it, in the same time; and once the
	// store counts live bytes once under it, 85 to 92 MiB, with commits
	// of twice the keys, in 3.25 to 3.66 s instead of 3.62 to 3.87 s.
	CacheSize int64

	// VerifyMaxBytes is the largest bbolt file checked before Open
	// returns; 0 means [DefaultVerifyMaxBytes]. bbolt trusts its pages: a
	// damaged leaf or branch page makes keys silently absent (a balance
	// reads as zero), which no value checksum can see. The check reads the
	// whole tree once, in file order: every page's layout as bbolt writes
	// it, every key's order and range, every value's checksum, and that
	// the freelist holds no page in use. A larger file is checked in the
	// background while the store serves reads, and its first commit waits
	// for the check, so that nothing read from a damaged file is committed;
	// damage found there fails the store (every later read, Apply, Flush
	// and commit returns the [*CorruptError]). A negative value checks
	// nothing. The check takes about 0.4 s for a file of 140 MiB (1,000,000
	// values) and 5 to 7 s for 1.4 GiB (10,000,000) on a loaded 2-core
	// machine (BenchmarkOpenVerify); an open that leaves it to the
	// background returns in a few milliseconds. A store that closes
	// cleanly with its file checked (or vouched for, as below), whatever
	// its size, records how it left the file beside it (state.bolt.checked:
	// size, modification time, inode, transaction); the next open that
	// finds the file exactly so checks it in the background even when it
	// is at most this size, and damage found fails the store as above,
	// but its open and its commits do not wait for the check: a restart
	// applies its first lines at once. A file written, copied or replaced since, or left by a
	// crash, does not match, and its first commit waits. For Pebble, a database of
	// at most this size is opened read-only first and its levels checked
	// (0.2 s for 100,000 keys), except one found exactly as the store left
	// it checked at its last clean close (state.pebble.checked: every
	// file's size, modification time and inode), which is read whole in
	// the background instead. A file output (see [Output]) of at most this
	// size is checked whole (its CRC-32C, recorded with its length) before
	// Open returns; a larger one only the bytes of the last batch that
	// wrote to it, and the rest in the background a second after the open
	// (damage found fails the store as above; nothing waits for it but a
	// backup). With a negative value, only the last batch's bytes.
	VerifyMaxBytes int64

	// existing is set by open for a store its STORE file stands for: its
	// backend must hold the format version.
	existing bool

	// hooks are test seams; nil in production.
	hooks *hooks
	// pebbleFS is the file system of the Pebble backend; nil means
	// Pebble's default, the operating system's. Tests wrap it with
	// Pebble's errorfs to inject faults.
	pebbleFS pebblevfs.FS
	// boltOpenFile opens the bbolt database file; nil means os.OpenFile.
	// Tests use it to hand bbolt a file that fails.
	boltOpenFile func(name string, flag int, perm os.FileMode) (*os.File, error)
}

// CommitObserver is told of each batch a store made durable. ObserveCommit
// is called on the committer's goroutine once the batch is durable and
// before the bound checkpoints are told of it: before a feed's pointer can
// move past the batch's lines.
type CommitObserver interface {
	ObserveCommit(lines int, d time.Duration)
}

// hooks let tests stop the committer at chosen moments.
type hooks struct {
	// beforeCommit runs in the committer before a batch is written.
	beforeCommit func()
	// afterOutput runs after the batch's output bytes are synced and
	// before the backend transaction.
	afterOutput func()
	// engineRead runs before a transaction reads a key from the backend
	// (one that no batch and the value cache hold), on its goroutine.
	engineRead func(key []byte)
	// beforeFold runs before a committed batch is folded into the value
	// cache, on the goroutine that folds it.
	beforeFold func()
	// beforeWaitFold runs in the committer before it waits for the fold
	// of the last committed batch, or runs it (see core.waitFold).
	beforeWaitFold func()
	// whileCutting runs in the committer while it holds the token to cut
	// a batch.
	whileCutting func()
	// afterUpgradeChunk runs after each chunk of an upgrade is committed.
	afterUpgradeChunk func()
	// boltCheck runs in the background check of a bbolt file once it
	// read the meta page, before the tree; stop is closed when the store
	// closes.
	boltCheck func(stop <-chan struct{})
	// boltWalkChunk, when positive, replaces walkChunk in the check of a
	// bbolt file.
	boltWalkChunk int
	// pebbleCompactionDelay, when positive, replaces leftCheckDelay as
	// the time after an open before a compaction may start
	// (pebbleScheduler).
	pebbleCompactionDelay time.Duration
	// pebbleEagerBytes, when not 0, replaces pebbleEagerBytes as the
	// largest database that compacts from its open; negative: none.
	pebbleEagerBytes int64
	// boltCheckBegun runs in a check of a bbolt file once its read
	// transaction began, before it reads the meta page of it.
	boltCheckBegun func()
	// preloadKey runs in the preload of a bbolt or Pebble store's value
	// cache once it read its n-th key, before it puts it in the cache
	// (core.preloadKeys).
	preloadKey func(n int)
	// preloadChunk, when positive, replaces preloadChunk.
	preloadChunk int
	// pgPreloadRow runs in the preload of a PostgreSQL store's read cache
	// after its n-th row (pgEngine.preload).
	pgPreloadRow func(n int)
	// pgSent runs in a PostgreSQL store's commit once its request is
	// sent, before its reply is read.
	pgSent func()
	// pgPreloadPage, when positive, replaces pgPreloadPage.
	pgPreloadPage int
	// pebbleCheck runs when an open checks the levels of a Pebble
	// database before it opens it (pebbleEngine.check).
	pebbleCheck func()
	// outputCheck runs in the background check of an output file
	// (Output.checkInBackground) before it reads the file; stop is closed
	// when the store closes.
	outputCheck func(stop <-chan struct{})
	// newestFormat, when positive, replaces newestFormat: the open acts
	// as a version that knows formats up to it.
	newestFormat int
	// boltFormat3 makes a new bbolt store of format 3, its data keys in
	// the store's bucket, as versions before format 4 made it: the tests
	// of older formats start from one.
	boltFormat3 bool
	// pgByName makes a PostgreSQL store read and write its rows in
	// tidemark_kv under its name whatever it holds, as versions before
	// format 5 did: a new store is of format 3.
	pgByName bool
}

func (o *Options) logger() *slog.Logger {
	if o.Logger != nil {
		return o.Logger
	}
	return slog.Default()
}

func (o *Options) fs() vfs.FS {
	if o.FS != nil {
		return o.FS
	}
	return vfs.Default()
}

func (o *Options) verifyMaxBytes() int64 {
	if o.VerifyMaxBytes == 0 {
		return DefaultVerifyMaxBytes
	}
	return o.VerifyMaxBytes
}

func (o *Options) batchSize() int {
	if o.BatchSize > 0 {
		return o.BatchSize
	}
	return DefaultBatchSize
}

// maxBatchSize is MaxBatchSize, at least batchSize.
func (o *Options) maxBatchSize() int { return max(o.MaxBatchSize, o.batchSize()) }

func (o *Options) batchInterval() time.Duration {
	if o.BatchInterval > 0 {
		return o.BatchInterval
	}
	return DefaultBatchInterval
}

// Open opens or creates the store named by config: "bbolt:DIR" or
// "pebble:DIR" opens DIR with that backend, creating the store if DIR holds
// none; a plain "DIR" opens an existing store with the backend recorded in
// DIR/STORE (see [OpenDir]); a URL "postgres://user@host/db?store=NAME"
// opens the store NAME in that PostgreSQL database (see [OpenPostgres]).
// A nil opts means the defaults.
func Open(config string, opts *Options) (Store, error) {
	kind, dir, ok := strings.Cut(config, ":")
	if !ok || len(kind) == 1 || strings.ContainsAny(kind, `/\`) { // no backend, or a drive letter
		return OpenDir(config, opts)
	}
	switch kind {
	case Bolt, Pebble:
		return open(kind, dir, opts)
	case Postgres, "postgresql":
		return openPostgresSpec(config, opts)
	}
	return nil, fmt.Errorf("open store %q: backend %q (want %q, %q or %q): %w", redactDSN(config), kind, Bolt, Pebble, Postgres, ErrUnknownBackend)
}

// OpenDir opens an existing store with the backend recorded in dir/STORE,
// so that a tool can open a store without knowing which backend created it.
func OpenDir(dir string, opts *Options) (Store, error) {
	return open("", dir, opts)
}

// OpenBolt opens or creates a store in dir with the bbolt backend.
func OpenBolt(dir string, opts *Options) (Store, error) { return open(Bolt, dir, opts) }

// OpenPebble opens or creates a store in dir with the Pebble backend.
func OpenPebble(dir string, opts *Options) (Store, error) { return open(Pebble, dir, opts) }

func open(kind, dir string, opts *Options) (_ Store, err error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if dir == "" {
		return nil, fmt.Errorf("open store: empty directory: %w", ErrNotStore)
	}
	fsys := o.fs()
	if kind == "" {
		// A directory without STORE is not a store: no lock file is
		// made in it.
		if _, err := fsys.Stat(filepath.Join(dir, storeFile)); errors.Is(err, fs.ErrNotExist) {
			return nil, notStore(&o, fsys, dir)
		} else if err != nil {
			return nil, fmt.Errorf("open store %s: %w", dir, err)
		}
	} else if err := fsys.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create store %s: %w", dir, err)
	}
	// The lock comes before STORE is read: two processes creating one
	// folder as two backends at once make one store, not two.
	lk, err := lockDir(dir, o.lockTimeout())
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, lk.release())
		}
	}()
	recorded, err := readStoreFile(fsys, dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	hasStore := err == nil
	disk, err := onDisk(&o, fsys, dir)
	if err != nil {
		return nil, err
	}
	create := false
	switch {
	case !hasStore && kind == "":
		return nil, notStore(&o, fsys, dir) // removed meanwhile
	case len(disk) > 1:
		return nil, fmt.Errorf("open store %s: the folder holds a %s and a %s: two backends wrote it; restore it from a backup, or remove the whole folder to start over (its feeds then read their input again): %w",
			dir, describe(disk[0]), describe(disk[1]), ErrBackendMismatch)
	case !hasStore && len(disk) == 0:
		create = true
	case !hasStore && disk[0] != kind:
		return nil, fmt.Errorf("open store %s as %s: the folder holds a %s and no %s file; open it as \"%s:%s\": %w",
			dir, kind, describe(disk[0]), storeFile, disk[0], dir, ErrBackendMismatch)
	case !hasStore:
		// The backend's data without STORE: a run that stopped between
		// the two (STORE is written last), or a STORE deleted.
		o.logger().Warn("state: store folder without a STORE file: recording its backend", "store", dir, "backend", kind)
		create = true
	case kind != "" && kind != recorded:
		return nil, fmt.Errorf("open store %s as %s: it was created by %s; open it as %q: %w", dir, kind, recorded, dir, ErrBackendMismatch)
	case recorded != Bolt && recorded != Pebble:
		holds := "no backend's data"
		if len(disk) == 1 {
			holds = "a " + describe(disk[0])
		}
		return nil, fmt.Errorf("open store %s: %s names backend %q: it is damaged, or was written by another version of tidemark; the folder holds %s: put back \"backend bbolt\" or \"backend pebble\" to match, or restore the folder from a backup: %w",
			dir, storeFile, recorded, holds, ErrUnknownBackend)
	case len(disk) == 0:
		return nil, fmt.Errorf("open store %s: its %s file names a %s store, but %s is missing (the folder holds %s): the store's data was deleted or moved, and a new, empty store would stand behind the feeds' pointers; "+
			"restore the folder from a backup, or remove the whole folder to start over (its feeds then read their input again): %w",
			dir, storeFile, recorded, missing(recorded), listDir(dir), ErrStoreMissing)
	case disk[0] != recorded:
		return nil, fmt.Errorf("open store %s: its %s file names a %s store, but the folder holds a %s: %s was edited or replaced; put back \"backend %s\" in it, or restore the folder from a backup: %w",
			dir, storeFile, recorded, describe(disk[0]), storeFile, disk[0], ErrBackendMismatch)
	default:
		kind = recorded
	}
	o.existing = !create
	var eng engine
	switch kind {
	case Bolt:
		eng, err = openBolt(dir, &o)
	case Pebble:
		eng, err = openPebble(dir, &o, create)
	default:
		return nil, fmt.Errorf("open store %s: backend %q: %w", dir, kind, ErrUnknownBackend)
	}
	if err != nil {
		return nil, err
	}
	c, err := newCore(kind, dir, &o, fsys, eng)
	if err != nil {
		return nil, errors.Join(err, eng.close())
	}
	c.lock = lk
	if create {
		// STORE last, once the backend holds the format version: a STORE
		// file always stands for data.
		if err := writeStoreFile(fsys, dir, kind); err != nil {
			c.lock = nil
			return nil, errors.Join(err, c.close())
		}
	}
	return newNS(c, ""), nil
}

// onDisk returns the backends whose data dir holds: [Bolt] for a
// state.bolt that is not empty, [Pebble] for a Pebble database in pebble/.
func onDisk(o *Options, fsys vfs.FS, dir string) ([]string, error) {
	var found []string
	fi, err := fsys.Stat(filepath.Join(dir, boltFile))
	switch {
	case err == nil && fi.Size() > 0:
		found = append(found, Bolt)
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	pfs := o.pebbleFS
	if pfs == nil {
		pfs = pebblevfs.Default
	}
	path := filepath.Join(dir, pebbleDir)
	if _, err := pfs.Stat(path); err == nil {
		desc, err := pebble.Peek(path, pfs)
		if err != nil {
			return nil, fmt.Errorf("open store %s: look into %s: %w", dir, path, err)
		}
		if desc.Exists {
			found = append(found, Pebble)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	return found, nil
}

// describe names the data of a backend in a store folder.
func describe(kind string) string {
	if kind == Bolt {
		return "bbolt store (" + boltFile + ")"
	}
	return "Pebble database (" + pebbleDir + "/)"
}

// missing names what a store of kind lacks when its data is not there.
func missing(kind string) string {
	if kind == Bolt {
		return boltFile + " (or it is empty)"
	}
	return "the Pebble database in " + pebbleDir + "/"
}

// listDir names the entries of dir, for an error message.
func listDir(dir string) string {
	es, err := os.ReadDir(dir)
	if err != nil {
		return "nothing readable"
	}
	var names []string
	for _, e := range es {
		if e.Name() == lockFile {
			continue
		}
		n := e.Name()
		if e.IsDir() {
			n += "/"
		}
		names = append(names, n)
		if len(names) == 8 {
			names = append(names, "…")
			break
		}
	}
	if len(names) == 0 {
		return "nothing else"
	}
	return strings.Join(names, ", ")
}

// notStore is the error of a directory without STORE.
func notStore(o *Options, fsys vfs.FS, dir string) error {
	if disk, err := onDisk(o, fsys, dir); err == nil && len(disk) == 1 {
		return fmt.Errorf("open store %s: no %s file, but the folder holds a %s; open it as \"%s:%s\" to record its backend: %w",
			dir, storeFile, describe(disk[0]), disk[0], dir, ErrNotStore)
	}
	return fmt.Errorf("open store %s: no %s file; open it as \"bbolt:%s\" or \"pebble:%s\" to create one: %w", dir, storeFile, dir, dir, ErrNotStore)
}

// readStoreFile returns the backend recorded in dir/STORE.
//
// The file is two lines:
//
//	tidemark state store
//	backend bbolt
func readStoreFile(fsys vfs.FS, dir string) (string, error) {
	path := filepath.Join(dir, storeFile)
	f, err := fsys.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	var lines []string
	for sc.Scan() {
		lines = append(lines, strings.TrimSpace(sc.Text()))
	}
	if len(lines) < 2 || lines[0] != "tidemark state store" || !strings.HasPrefix(lines[1], "backend ") {
		return "", fmt.Errorf("read %s: not a tidemark STORE file: it is damaged or was replaced; write back its two lines, \"tidemark state store\" and \"backend NAME\" (bbolt when the folder holds %s, pebble when it holds %s/), or restore the store's folder from a backup: %w",
			path, boltFile, pebbleDir, ErrCorrupt)
	}
	return strings.TrimPrefix(lines[1], "backend "), nil
}

// writeStoreFile records kind in dir/STORE durably: written to a temporary
// file, synced, renamed, and the directory synced.
func writeStoreFile(fsys vfs.FS, dir, kind string) error {
	if err := fsys.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create store %s: %w", dir, err)
	}
	path := filepath.Join(dir, storeFile)
	tmp := path + ".tmp"
	f, err := fsys.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("create store %s: %w", dir, err)
	}
	_, err = fmt.Fprintf(f, "tidemark state store\nbackend %s\n", kind)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = vfs.RenameDurable(fsys, tmp, path)
	}
	if err != nil {
		return fmt.Errorf("create store %s: write %s: %w", dir, path, err)
	}
	return nil
}
