package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/checkpoint"
	"github.com/tidemark-go/tidemark/feed"
	"github.com/tidemark-go/tidemark/feed/pointer"
	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/ops"
	"github.com/tidemark-go/tidemark/state"
	"github.com/tidemark-go/tidemark/vfs"
)

// RunOptions are the flags of `ledger run`.
type RunOptions struct {
	Input string
	Data  string
	// PointerDir is the folder of the feed's pointer file; "" means beside
	// the input (Input+".readPointer").
	PointerDir string
	Store      string // state.Bolt or state.Pebble
	Dedupe     bool
	Sync       bool
	Batch      int
	// MaxBatch is the most lines a save takes while the one before it
	// is being written (state.Options.MaxBatchSize); 0 means
	// batchGrowth times Batch, pgBatchGrowth times for a PostgreSQL
	// store.
	MaxBatch      int
	BatchInterval time.Duration
	// CacheSize is the store's cache budget in bytes (state.Options).
	CacheSize int64
	// VerifyMaxBytes is the largest bbolt file checked before the run
	// starts (state.Options).
	VerifyMaxBytes int64
	Follow         bool
	Pace           time.Duration
	// Events prints machine-readable events on stdout (see child.go).
	Events bool
	// Progress selects the progress display: "auto" (a live bar on a
	// terminal, else a line every second), "bar", "lines" or "none".
	Progress string
	// LogLevel is the level of the logs written to stderr.
	LogLevel slog.Level
	// Ops, when set, is the address of an operations listener (package
	// ops): /metrics, /status and a status page while the run lasts.
	Ops string
	// Source, when set, makes the run a worker of a partitioned ledger:
	// nats://HOST:PORT/STREAM, with Store a postgres:// URL (see
	// partitioned.go). Partitions, Worker, Lease and Job are its.
	Source     string
	Partitions int
	Worker     string
	Lease      time.Duration
	Job        string
	// DieAfterSave, when positive, makes the run kill itself with SIGKILL
	// right after the durable save that brings the saved lines to at least
	// this many: before the feed's pointer moves past them (see
	// dieAfterSave). The demonstration's crash.
	DieAfterSave int64

	storeSet bool // --store was given
}

// opsStoreName labels the ledger's store in the operations listener.
const opsStoreName = "ledger"

// Exit codes of `ledger run`.
const (
	exitOK          = 0
	exitFailed      = 1 // an error: store, input, stall
	exitUsage       = 2
	exitInterrupted = 3 // SIGTERM or SIGINT before the feed settled (without --follow)
)

// batchGrowth is how many times --batch a save takes at most, by
// default, while the one before it is being written (see --max-batch):
// at 10,000 accounts a save of 10,000 lines changes 6,300 balances, one of
// 40,000 lines 9,800, so that a commit that falls behind the lines costs
// less a line as its saves grow. A bbolt or Pebble commit of 10,000
// accounts is quick, and larger saves changed nothing there (1,000,000
// lines: 0.41 to 0.75 s with 40,000 or 100,000 lines at most, alike); at
// 1,000,000 accounts they only take more memory.
const batchGrowth = 4

// pgBatchGrowth is batchGrowth for a PostgreSQL store, whose save costs
// the server a row for each account it changes. 1,000,000 lines of 10,000
// accounts, runs alternated (2026-12-07): saves of up to 40,000 lines
// 1.49 to 2.08 s (26 saves, 6 runs), 100,000 0.91 to 1.36 s (12, 5 runs),
// 200,000 0.84 to 0.92 s (7, the server's CPU 0.57 to 0.68 s; 5 runs),
// 400,000 0.71 to 0.89 s (6; 5 runs). At 1,000,000 accounts, saves of up
// to 200,000 lines took no more memory than those of 100,000 (peak
// anonymous 232 and 273 MiB against 217 and 280): the server's commit
// bounds them first.
const pgBatchGrowth = 20

// maxBatch returns the store's MaxBatchSize for o: --max-batch, or by
// default batchGrowth times --batch, pgBatchGrowth times for a
// PostgreSQL store (pg).
func (o *RunOptions) maxBatch(pg bool) int {
	if o.MaxBatch > 0 {
		return o.MaxBatch
	}
	b := o.Batch
	if b == 0 {
		b = state.DefaultBatchSize
	}
	if pg {
		return pgBatchGrowth * b
	}
	return batchGrowth * b
}

func cmdRun(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("run", stderr, "usage: ledger run --input PATH --data DIR [--pointer-dir DIR] [--store bbolt|pebble|postgres://USER@HOST:PORT/DB] [--dedupe=true|false] [--sync]\n"+
		"                  [--batch N] [--max-batch N] [--batch-interval D] [--cache-size BYTES] [--verify-max-bytes BYTES] [--follow] [--pace D] [--ops ADDR]\n"+
		"       ledger run --source nats://HOST:PORT/STREAM --store postgres://USER@HOST:PORT/DB [--partitions N] [--worker NAME]\n"+
		"                  [--lease D] [--job NAME] [--sync] [--batch N] [--batch-interval D] [--cache-size BYTES] [--pace D] [--ops ADDR]")
	var o RunOptions
	fs.StringVar(&o.Input, "input", "", "the ledger file to read (required)")
	fs.StringVar(&o.Data, "data", "", "the data folder: the store, output.csv and rejects.csv (required)")
	fs.StringVar(&o.PointerDir, "pointer-dir", "", "the folder of the feed's pointer file (default: beside the input); one for each program that follows the same input")
	fs.StringVar(&o.Store, "store", state.Bolt, "the store's backend for a new data folder: bbolt, pebble, or a PostgreSQL database, postgres://USER@HOST:PORT/DB (the state and the outputs in store "+pgStorePrefix+"BASE/RANDOM of it, named in DIR/"+pgFolderFile+"; ledger output --data DIR prints output.csv); with --source, the PostgreSQL database of the partitions' stores: postgres://…")
	fs.StringVar(&o.Source, "source", "", "read a partitioned stream instead of a file, as one worker of several: nats://HOST:PORT/STREAM (see ledger publish)")
	fs.IntVar(&o.Partitions, "partitions", 0, "with --source: the stream's partition count (default: the stream's own; required to wait for a stream not made yet)")
	fs.StringVar(&o.Worker, "worker", "", "with --source: this worker's name, unique in the job (default HOST-PID)")
	fs.DurationVar(&o.Lease, "lease", 0, fmt.Sprintf("with --source: how long a partition stays owned by a worker that stopped answering (0: %v)", state.DefaultLease))
	fs.StringVar(&o.Job, "job", defaultJob, "with --source: the job's name; its stores are JOB/STREAM/P")
	fs.BoolVar(&o.Dedupe, "dedupe", true, "skip lines the store already applied (false applies re-deliveries again, to show what de-duplication prevents)")
	fs.BoolVar(&o.Sync, "sync", false, "save each line durably before the next, instead of batched asynchronous saves")
	fs.IntVar(&o.Batch, "batch", 0, fmt.Sprintf("lines per batched save (0: %d)", state.DefaultBatchSize))
	fs.IntVar(&o.MaxBatch, "max-batch", 0, fmt.Sprintf("the most lines of a save while the one before it is being written: a save that cannot keep up with the lines gets bigger ones, which cost it less a line (0: %d times --batch, %d times with PostgreSQL; --batch's value: a save is cut to wait for the one before once it holds --batch lines, and the lines wait once the save after it is full too)", batchGrowth, pgBatchGrowth))
	fs.DurationVar(&o.BatchInterval, "batch-interval", 0, fmt.Sprintf("longest wait of a staged line for its save (0: %v)", state.DefaultBatchInterval))
	fs.Int64Var(&o.CacheSize, "cache-size", 0, fmt.Sprintf("bytes of memory for the store's caches of balances and, with Pebble, of its blocks (0: %d MiB; -1: none); with bbolt, half of it (at most 128 MiB) is kept for the memory of a save and the balances get the rest; about 350 bytes an account of the balances' part (700 of the whole with Pebble, whose block cache takes half) keeps every balance in memory; a run of a bbolt or Pebble store sets Go's soft memory limit to 64 MiB plus this, less 8 MiB and, with Pebble built with cgo, its block cache and memtables (state.MemoryLimit; GOMEMLIMIT overrides it)", state.DefaultCacheSize>>20))
	fs.Int64Var(&o.VerifyMaxBytes, "verify-max-bytes", 0, fmt.Sprintf("a bbolt store of at most this many bytes is checked whole before the run starts; a larger one is checked while the run starts, and the first save waits for the check (0: %d MiB; -1: never)", state.DefaultVerifyMaxBytes>>20))
	fs.BoolVar(&o.Follow, "follow", false, "tail the input (appends, rotation, truncation) until SIGTERM or SIGINT")
	fs.DurationVar(&o.Pace, "pace", 0, "sleep this long per line, for demonstrations")
	fs.BoolVar(&o.Events, "events", false, "print machine-readable progress events on stdout, for a harness")
	fs.StringVar(&o.Progress, "progress", "auto", "progress on stderr: auto, bar, lines or none")
	fs.TextVar(&o.LogLevel, "log-level", slog.LevelWarn, "level of the logs on stderr")
	fs.StringVar(&o.Ops, "ops", "", "serve /metrics, /status and a status page on this address while running (e.g. 127.0.0.1:9464; port 0 picks one)")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file (go tool pprof reads it)")
	fs.Int64Var(&o.DieAfterSave, "die-after-save", 0, "kill this process with SIGKILL right after the durable save that holds this many lines, before the pointer moves past them (the demonstration's crash)")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	o.storeSet = set["store"]
	if o.Source != "" {
		return cmdRunPartitioned(o, set, fs, *cpuprofile, stdout, stderr)
	}
	for _, name := range []string{"partitions", "worker", "lease", "job"} {
		if set[name] {
			fmt.Fprintf(stderr, "ledger run: --%s goes with --source\n", name)
			return exitUsage
		}
	}
	if o.Input == "" || o.Data == "" || fs.NArg() > 0 || o.Batch < 0 || o.MaxBatch < 0 || o.Pace < 0 || o.BatchInterval < 0 {
		fs.Usage()
		return exitUsage
	}
	switch {
	case o.Store == state.Bolt, o.Store == state.Pebble, isPostgresURL(o.Store):
	default:
		fmt.Fprintf(stderr, "ledger run: --store %q: want bbolt, pebble or postgres://USER@HOST:PORT/DB\n", o.Store)
		return exitUsage
	}
	switch o.Progress {
	case "auto", "bar", "lines", "none":
	default:
		fmt.Fprintf(stderr, "ledger run: --progress %q: want auto, bar, lines or none\n", o.Progress)
		return exitUsage
	}
	stopProfile, ok := startCPUProfile(*cpuprofile, stderr)
	if !ok {
		return exitFailed
	}
	defer stopProfile()
	code, err := Run(context.Background(), o, stdout, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "ledger run:", err)
	}
	return code
}

// ledger is the processor: it applies each line to the group's store.
type ledger struct {
	st     state.Namespace // the ledger's namespace
	dedupe bool
	pace   time.Duration
	buf    []byte

	// The line being applied, for applyFn (group goroutine): a function
	// made once, so that a line allocates no closure. e.Account is set
	// only for a line that is not canonical: account holds its bytes, a
	// part of the delivered line (the balance's key is read from it, and
	// no string is made per line).
	e       Entry
	account []byte
	// line is the line of e when it is as AppendLine writes e (see
	// parseCanonical), else nil.
	line    []byte
	d       tidemark.Delivery
	staged  int // reject records applyFn staged
	applyFn func(tx *state.Tx) error

	// runs applies the lines HandleBatch is handed (batch.go).
	runs runApplier

	applied, skipped, malformed atomic.Uint64
	// rej is the ledger's side of the reject log (rejectout.go).
	rej rejects
}

// Start takes the group's store (the framework opened it, binds it to the
// feed and closes it) and subscribes to the feed.
func (l *ledger) Start(ctx context.Context, fc *framework.Context) error {
	st, err := fc.Store()
	if err != nil {
		return err
	}
	for _, name := range []string{outputFile, rejectsFile} {
		if _, err := st.Output(name); err != nil {
			return err
		}
	}
	l.st = st.Namespace(namespace)
	return fc.Subscribe(feedName)
}

// Handle applies one line: balance, counters and output line in one Apply.
// A store that failed is fatal to the server (the framework stops it, as a
// crash would, and the restart re-delivers the line); a malformed line, or
// one whose account the store cannot hold, is rejected into rejects.csv.
func (l *ledger) Handle(ctx context.Context, d tidemark.Delivery, line []byte) error {
	if l.pace > 0 {
		time.Sleep(l.pace)
	}
	id, account, amount, canonical := parseCanonical(line)
	if !canonical {
		var err error
		if id, account, amount, err = parseChecked(line); err != nil {
			l.malformed.Add(1)
			return l.reject(ctx, d, rejectReasonMalformed, err, line)
		}
	}
	if l.applyFn == nil {
		l.applyFn = l.applyLine
	}
	l.e, l.account, l.d, l.staged = Entry{ID: id, Amount: amount}, account, d, 0
	l.line = nil
	if canonical {
		l.line = line
	} else {
		// The output line is formatted from e (a line that is not
		// canonical is rare: its account's string is made).
		l.e.Account = string(account)
	}
	// Without de-duplication, a delivery without positions is never taken
	// for a re-delivery: the store applies it again. The ledger records
	// the position itself (applyLineOf), in the same transaction.
	applied, err := l.st.Apply(ctx, l.applyDelivery(d), l.applyFn)
	if errors.Is(err, state.ErrTooLarge) {
		return l.reject(ctx, d, framework.ReasonTooLarge, err, line)
	}
	if err != nil {
		return err
	}
	l.rej.done(&d, applied, l.staged)
	if applied {
		l.applied.Add(1)
	} else {
		l.skipped.Add(1)
	}
	return nil
}

// applyLine is the function Handle applies: the balance, counters and
// output line of l.e, and the reject records of the lines the source
// skipped before it.
func (l *ledger) applyLine(tx *state.Tx) error {
	var err error
	if l.buf, err = applyLineOf(tx, l.e, l.account, l.line, &l.d, !l.dedupe, l.buf); err != nil {
		return err
	}
	l.staged, err = l.rej.stage(tx, &l.d)
	return err
}

// feedConfig returns the feed of a file run, read for proc. With
// de-duplication the feed resumes from the store (ResumeFromStore, see
// Run), which is the truth: the pointer file is only a hint then, and a
// pointer write is synced at most every feed.DefaultSyncInterval rather
// than at each commit, so that a save's own syncs (the output's, the
// store's) do not queue behind one more a save. A pointer that lags
// costs nothing: the restart reads from the store's position. Without
// de-duplication the pointer is the resume point, synced at each commit.
func (o *RunOptions) feedConfig(proc *ledger) framework.FeedConfig {
	sync := feed.SyncEveryCommit
	if o.Dedupe {
		sync = feed.SyncInterval
	}
	return framework.FeedConfig{
		Name: feedName,
		File: &framework.FileConfig{
			Filename:     o.Input,
			PointerDir:   o.PointerDir,
			ReadStrategy: feed.Committed,
			MaxLineBytes: maxLineBytes,
			OnReject:     proc.rej.skippedBySource,
			Sync:         sync,
		},
		AgentName:     "ledger-feed-agent",
		Overload:      framework.OverloadConfig{Policy: framework.Pause},
		QueueCapacity: queueLines,
	}
}

// queueLines is the capacity of the feed's queue to the ledger's group:
// 16,384 lines, 8 of the feed's batches of 2,048 (the framework's default
// is 4), the group's work for 5 to 10 ms, so that the group does not run dry
// while the feed's goroutine syncs the pointer (every 100 ms, see
// feedConfig) or waits for a core. A runtime trace of 5,000,000 lines
// over 20 accounts (--max-batch 10000, load 14) had the group waiting for
// an empty queue 0.52 s (bbolt) and 0.36 s (Pebble) with the default,
// 0.09 s and 0.17 s with this. It costs about 1 MiB.
const queueLines = 16 << 10

// dieAfterSave is the store observer of --die-after-save: it kills the
// process with SIGKILL as soon as a durable save brings the saved lines to
// at least after. A store tells its observer of a save once it is durable
// and before the feed's checkpoint hears of it, so the pointer is then
// behind the saved state by that whole save: the restart re-delivers its
// lines. The demonstration kills its first run this way, so that every
// scenario shows what a restart does with re-delivered lines.
type dieAfterSave struct {
	after, saved int64
	next         state.CommitObserver
}

func (o *dieAfterSave) ObserveCommit(lines int, d time.Duration) {
	if o.next != nil {
		o.next.ObserveCommit(lines, d)
	}
	o.saved += int64(lines)
	if o.saved >= o.after {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}

// Run runs the server until the feed settles (or, with Follow, until ctx is
// cancelled or SIGINT/SIGTERM) and returns the exit code.
func Run(ctx context.Context, o RunOptions, stdout, stderr io.Writer) (int, error) {
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: o.LogLevel}))
	if !o.Follow {
		if _, err := os.Stat(o.Input); err != nil {
			return exitFailed, fmt.Errorf("input: %w (use --follow to wait for it)", err)
		}
	}
	var obs *ops.Observer
	if o.Ops != "" {
		obs = ops.NewObserver()
	}
	sopts := &state.Options{
		Sync:           o.Sync,
		BatchSize:      o.Batch,
		BatchInterval:  o.BatchInterval,
		CacheSize:      o.CacheSize,
		VerifyMaxBytes: o.VerifyMaxBytes,
		Logger:         logger,
		FS:             faultFS(),
	}
	if obs != nil {
		sopts.Observer = obs.ForStore(opsStoreName)
	}
	if o.DieAfterSave > 0 {
		sopts.Observer = &dieAfterSave{after: o.DieAfterSave, next: sopts.Observer}
	}
	// A data folder that holds a store keeps its backend; a new one gets
	// the flag's. A PostgreSQL one names its store in DIR/POSTGRES
	// (pgfolder.go).
	spec := o.Store + ":" + o.Data
	if _, err := os.Stat(filepath.Join(o.Data, "STORE")); err == nil {
		spec = o.Data
	}
	pg, err := preparePGRun(ctx, o.Data, o.Store, o.storeSet, func(format string, args ...any) { fmt.Fprintf(stderr, format, args...) })
	if err != nil {
		return exitFailed, err
	}
	sopts.MaxBatchSize = o.maxBatch(pg != nil)
	if pg == nil && standalone {
		setMemoryLimit(spec, sopts, logger)
	}
	if pg != nil {
		defer pg.close()
		spec = pg.spec()
		sopts.LockTimeout = pg.dsn.lockTimeout()
		sopts.FS = nil // the outputs are rows of the store
	}
	resume := framework.ResumeFromStore
	if !o.Dedupe {
		// Without de-duplication the store records no position: the feed
		// resumes from its pointer, and re-delivered lines apply again.
		resume = framework.ResumeFromPointer
	}
	proc := &ledger{dedupe: o.Dedupe, pace: o.Pace}
	fcfg := framework.Config{
		Feeds: []framework.FeedConfig{o.feedConfig(proc)},
		Groups: []framework.GroupConfig{{
			Name:         groupName,
			Processors:   []string{processorName},
			Store:        spec,
			StoreOptions: sopts,
			Resume:       resume,
			Failure: framework.FailurePolicy{
				Retries: framework.NoRetries, // a malformed line stays malformed
				Action:  framework.Skip,      // the ledger recorded it in rejects.csv
			},
		}},
		Logger:       logger,
		UntilSettled: !o.Follow,
	}
	if obs != nil {
		fcfg.Observer = obs
	}
	srv, err := framework.New(fcfg, framework.Processors{processorName: proc})
	if errors.Is(err, feed.ErrPointerLocked) {
		err = fmt.Errorf("%w (here: --pointer-dir DIR, a folder of this run's own)", err)
	}
	if err != nil {
		return exitFailed, err
	}
	st, err := srv.Store(groupName)
	if err != nil {
		return exitFailed, errors.Join(err, srv.Stop(context.Background()))
	}
	if pg != nil {
		if err := pg.opened(); err != nil {
			return exitFailed, errors.Join(err, srv.Stop(context.Background()))
		}
	} else if st.Backend() != o.Store && o.storeSet {
		logger.Warn("ledger: the data folder has another backend; using it", "data", o.Data, "backend", st.Backend(), "flag", o.Store)
	}
	ns := st.Namespace(namespace)
	ctx, stopSignals := srv.SignalContext(ctx)
	defer stopSignals()
	if obs != nil {
		l, err := ops.New(ops.Config{
			Addr:     o.Ops,
			Server:   srv,
			Stores:   []ops.StoreConfig{{Name: opsStoreName, Store: st}},
			Observer: obs,
			Logger:   logger,
			Watch:    time.Second,
		})
		if err == nil {
			err = l.Start(ctx)
		}
		if err != nil {
			return exitFailed, errors.Join(fmt.Errorf("--ops %s: %w", o.Ops, err), srv.Stop(context.Background()))
		}
		defer l.Close()
		fmt.Fprintf(stderr, "ledger: operations listener on http://%s/ (/metrics, /status)\n", l.Addr())
	}

	// Progress on stderr; events on stdout.
	var prog *Progress
	live := o.Progress == "bar"
	if o.Progress == "auto" {
		if f, ok := stderr.(*os.File); ok && isTerminal(f) {
			live = true
		}
	}
	if o.Progress != "none" {
		prog = NewProgress(stderr, live, func() progressFacts {
			fs, _ := srv.FeedStatus(feedName)
			return progressFacts{
				Lines:    proc.applied.Load() + proc.skipped.Load() + proc.malformed.Load(),
				Position: fs.ReadPosition,
				Size:     fs.FileSize,
				State:    fs.State.String(),
			}
		})
		prog.Start()
	}
	var ev *eventPrinter
	if o.Events {
		ev = startEvents(stdout, srv, st, ns, pointer.Path(o.Input, o.PointerDir), proc)
	}

	runErr := srv.Run(ctx)
	if prog != nil {
		prog.Stop()
	}
	if ev != nil {
		ev.stop()
	}
	code := exitOK
	switch {
	case runErr == nil:
	case !o.Follow && errors.Is(runErr, context.Canceled):
		code, runErr = exitInterrupted, errors.New("interrupted before the feed settled")
	default:
		return exitFailed, runErr
	}
	fstat, _ := srv.FeedStatus(feedName)
	stats := st.Stats()
	if ev != nil {
		fmt.Fprintf(stdout, "%s lines=%d applied=%d skipped=%d rejected=%d saves=%d\n", evDone,
			fstat.Read, proc.applied.Load(), stats.Skipped, proc.rej.written.Load(), stats.Commits)
	}
	verb := "settled"
	if o.Follow || code == exitInterrupted {
		verb = "stopped"
	}
	fmt.Fprintf(stderr, "ledger: %s: %d lines read, %d applied, %d skipped as already applied, %d rejected; %d saves; pointer at position %d of epoch %d\n",
		verb, fstat.Read, proc.applied.Load(), stats.Skipped, proc.malformed.Load(), stats.Commits, fstat.Status.CommittedPosition, fstat.Status.Epoch)
	return code, runErr
}

// faultEnv is the test seam of the store failure test: when set to N, the
// N+1th and later writes to output.csv fail, as a full disk would.
const faultEnv = "LEDGER_TEST_FAIL_OUTPUT_WRITES_AFTER"

// errInjected is the error of an injected fault.
var errInjected = errors.New("ledger: injected fault (" + faultEnv + ")")

// faultFS returns the store's file system: the operating system's, or one
// that fails writes to output.csv when faultEnv asks for it.
func faultFS() vfs.FS {
	v := os.Getenv(faultEnv)
	if v == "" {
		return nil
	}
	after, err := strconv.Atoi(v)
	if err != nil {
		return nil
	}
	var writes atomic.Int64
	return vfs.Inject(vfs.Default(), func(op vfs.Op, path string) error {
		if op == vfs.OpWrite && filepath.Base(path) == outputFile && writes.Add(1) > int64(after) {
			return errInjected
		}
		return nil
	})
}

// eventPrinter prints durable events while the server runs, and watches
// that the pointer file is never ahead of the durable state.
type eventPrinter struct {
	done    chan struct{}
	stopped chan struct{}
	once    sync.Once
}

func startEvents(w io.Writer, srv *framework.Server, st state.Store, ns state.Namespace, pointerPath string, proc *ledger) *eventPrinter {
	e := &eventPrinter{done: make(chan struct{}), stopped: make(chan struct{})}
	var last struct {
		commits uint64
		pos     int64
	}
	first := true
	// The pointer as the run found it: when the store is behind it
	// (deleted, restored from a backup, its last batches lost), the
	// feed reads from the store's position and leaves the pointer
	// where it was until the reading passes it (feed.Resumer). That
	// pointer is ahead of the state by design; a pointer that a commit
	// of this run wrote never is.
	inherited := make(map[tidemark.Applied]bool)
	for _, p := range pointerSlots(pointerPath) {
		inherited[tidemark.Applied{Epoch: p.Epoch, Position: p.Position}] = true
	}
	tick := func() {
		// The group's checkpoint exists once the processor subscribed.
		cp := srv.Checkpoints().Lookup(feedName, groupName)
		// The pointer first, then the durable state: the state can only
		// have moved forward since, so a pointer ahead of it is real.
		ptrs := pointerSlots(pointerPath)
		durable, ok := durablePosition(ns, proc, cp)
		s := st.Stats()
		for _, p := range ptrs {
			if inherited[tidemark.Applied{Epoch: p.Epoch, Position: p.Position}] {
				continue
			}
			if ok && p.Epoch == durable.Epoch && p.Position > durable.Position {
				var mark checkpoint.Mark
				if cp != nil {
					mark, _ = cp.Durable()
				}
				fmt.Fprintf(w, "%s epoch=%d pointer=%d durable=%d mark_count=%d mark_position=%d\n", evAhead, p.Epoch, p.Position, durable.Position, mark.Count, mark.Position)
			}
		}
		if first || s.Commits != last.commits || durable.Position != last.pos {
			// The event's figures come from one snapshot of the durable
			// state: the ledger's own count of the lines it applied
			// (rejected lines, which the store applies too, are not
			// counted) and the position the same commits made durable.
			// A snapshot that fails is tried again at the next tick:
			// the store's failure ends the run with its own error.
			if at, applied, err := durableEvent(ns, proc); err == nil {
				first = false
				last.commits, last.pos = s.Commits, durable.Position
				fmt.Fprintf(w, "%s epoch=%d position=%d applied=%d\n", evDurable, at.Epoch, at.Position, applied)
			}
		}
	}
	// The first event before the run starts: the state the run starts
	// from. A short run can end, and its server close the store, before
	// the printer's first tick could read it (a snapshot of a bbolt file
	// the store left checked waits for that file's check).
	tick()
	go func() {
		defer close(e.stopped)
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-e.done:
				return
			case <-t.C:
			}
			tick()
		}
	}()
	return e
}

func (e *eventPrinter) stop() {
	e.once.Do(func() { close(e.done) })
	<-e.stopped
}

// durableEvent reads, in one snapshot of the durable state, the last line
// applied and how many lines the ledger has applied: the store's record
// when the ledger de-duplicates, else the ledger's own (see applyLineOf).
func durableEvent(ns state.Namespace, proc *ledger) (at tidemark.Applied, applied int64, err error) {
	err = ns.Snapshot(context.Background(), func(tx *state.Tx) error {
		var err error
		if applied, _, err = counters.Get(tx, keyApplied); err != nil {
			return err
		}
		if proc.dedupe {
			feeds, err := tx.Feeds()
			if err != nil {
				return err
			}
			for _, l := range feeds[feedName] {
				if l.File == "" {
					at = l.Applied
				}
			}
			return nil
		}
		epoch, _, err := counters.Get(tx, keyEpoch)
		if err != nil {
			return err
		}
		at.Epoch = uint64(epoch)
		at.Position, _, err = counters.Get(tx, keyPosition)
		return err
	})
	return at, applied, err
}

// durablePosition is the last position known durable: the store's record
// when it de-duplicates, else the mark the store last declared durable.
func durablePosition(ns state.Namespace, proc *ledger, cp *checkpoint.Checkpoint) (tidemark.Applied, bool) {
	if proc.dedupe {
		l, ok := ns.Applied(feedName)
		return l.Applied, ok
	}
	if cp == nil {
		return tidemark.Applied{}, false
	}
	m, _ := cp.Durable()
	return tidemark.Applied{Epoch: m.Epoch, Position: m.Position}, m.Epoch != 0
}

// pointerSlots decodes both slots of a pointer file without the pointer
// file's writer knowing: each valid slot was the pointer at some moment.
// Loading it through pointer.File is not safe while a server runs (it
// tidies the file).
func pointerSlots(path string) []pointer.Record {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var ps []pointer.Record
	for off := 0; off < len(data) && off <= pointer.SlotSize; off += pointer.SlotSize {
		if p, err := pointer.Decode(data[off:]); err == nil {
			ps = append(ps, p)
		}
	}
	return ps
}

// startCPUProfile starts writing a CPU profile to path ("" for none); ok is
// false when it cannot (said on stderr). stop ends the profile.
func startCPUProfile(path string, stderr io.Writer) (stop func(), ok bool) {
	if path == "" {
		return func() {}, true
	}
	f, err := os.Create(path)
	if err == nil {
		if err = pprof.StartCPUProfile(f); err != nil {
			f.Close()
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "ledger run: --cpuprofile:", err)
		return nil, false
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintln(stderr, "ledger run: --cpuprofile:", err)
		}
	}, true
}
