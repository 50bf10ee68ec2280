package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tidemark-go/tidemark/checkpoint"
	"github.com/tidemark-go/tidemark/dedupe"
	"github.com/tidemark-go/tidemark/feed"
	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/internal/vfs"
	"github.com/tidemark-go/tidemark/ops"
	"github.com/tidemark-go/tidemark/state"
)

// RunOptions are the flags of `ledger run`.
type RunOptions struct {
	Input         string
	Data          string
	Store         string // state.Bolt or state.Pebble
	Dedupe        bool
	Sync          bool
	Batch         int
	BatchInterval time.Duration
	Follow        bool
	Pace          time.Duration
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

func cmdRun(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("run", stderr, "usage: ledger run --input PATH --data DIR [--store bbolt|pebble] [--dedupe=true|false] [--sync]\n"+
		"                  [--batch N] [--batch-interval D] [--follow] [--pace D] [--ops ADDR]")
	var o RunOptions
	fs.StringVar(&o.Input, "input", "", "the ledger file to read (required)")
	fs.StringVar(&o.Data, "data", "", "the data folder: the store, output.csv and rejects.csv (required)")
	fs.StringVar(&o.Store, "store", state.Bolt, "the store's backend for a new data folder: bbolt or pebble")
	fs.BoolVar(&o.Dedupe, "dedupe", true, "skip lines the store already applied (false applies re-deliveries again, to show what de-duplication prevents)")
	fs.BoolVar(&o.Sync, "sync", false, "save each line durably before the next, instead of batched asynchronous saves")
	fs.IntVar(&o.Batch, "batch", 0, fmt.Sprintf("lines per batched save (0: %d)", state.DefaultBatchSize))
	fs.DurationVar(&o.BatchInterval, "batch-interval", 0, fmt.Sprintf("longest wait of a staged line for its save (0: %v)", state.DefaultBatchInterval))
	fs.BoolVar(&o.Follow, "follow", false, "tail the input (appends, rotation, truncation) until SIGTERM or SIGINT")
	fs.DurationVar(&o.Pace, "pace", 0, "sleep this long per line, for demonstrations")
	fs.BoolVar(&o.Events, "events", false, "print machine-readable progress events on stdout, for a harness")
	fs.StringVar(&o.Progress, "progress", "auto", "progress on stderr: auto, bar, lines or none")
	fs.TextVar(&o.LogLevel, "log-level", slog.LevelWarn, "level of the logs on stderr")
	fs.StringVar(&o.Ops, "ops", "", "serve /metrics, /status and a status page on this address while running (e.g. 127.0.0.1:9464; port 0 picks one)")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if o.Input == "" || o.Data == "" || fs.NArg() > 0 || o.Batch < 0 || o.Pace < 0 || o.BatchInterval < 0 {
		fs.Usage()
		return exitUsage
	}
	switch o.Store {
	case state.Bolt, state.Pebble:
	default:
		fmt.Fprintf(stderr, "ledger run: --store %q: want bbolt or pebble\n", o.Store)
		return exitUsage
	}
	switch o.Progress {
	case "auto", "bar", "lines", "none":
	default:
		fmt.Fprintf(stderr, "ledger run: --progress %q: want auto, bar, lines or none\n", o.Progress)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	code, err := Run(ctx, o, stdout, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "ledger run:", err)
	}
	return code
}

// ledger is the processor: it applies each line to the store.
type ledger struct {
	st      state.Store // the ledger's namespace
	dedupe  bool
	pace    time.Duration
	fatal   func(error)
	cp      *checkpoint.Checkpoint
	cpReady chan struct{}
	buf     []byte

	applied, skipped, malformed atomic.Uint64
}

// Start subscribes to the feed and lets the store drive the feed's commits:
// the group's hold is declared durable by the store, batch by batch.
func (l *ledger) Start(ctx context.Context, fc *framework.Context) error {
	l.cp = fc.Checkpoint(feedName)
	if err := l.st.Bind(feedName, l.cp); err != nil {
		return err
	}
	close(l.cpReady)
	return fc.Subscribe(feedName)
}

// Drained saves what the store still stages, once the group has finished
// the lines of a clean stop: the store then declares them durable, and the
// server's final commit covers them, so nothing is read again after a clean
// stop.
func (l *ledger) Drained(ctx context.Context) error { return l.st.Flush(ctx) }

// Handle applies one line: balance, counters and output line in one Apply.
func (l *ledger) Handle(ctx context.Context, d dedupe.Delivery, line []byte) error {
	if l.pace > 0 {
		time.Sleep(l.pace)
	}
	e, err := ParseLine(line)
	if err != nil {
		l.malformed.Add(1)
		return err // the group's Skip policy rejects it into rejects.csv
	}
	ad := d
	if !l.dedupe {
		// A delivery without positions is never taken for a re-delivery:
		// the store applies it again. The ledger records the position
		// itself (applyEntry), in the same transaction.
		ad.Epoch, ad.Position, ad.Origin = 0, 0, nil
	}
	applied, err := l.st.Apply(ctx, ad, func(tx *state.Tx) error {
		var err error
		l.buf, err = applyEntry(tx, e, d, l.buf)
		return err
	})
	if err != nil {
		// Not the line's fault: the store failed. Skipping the line would
		// let a later batch's mark commit past it, so the run ends here,
		// as a crash would, and the restart re-delivers it.
		l.fatal(fmt.Errorf("apply line at position %d of epoch %d: %w", d.Position, d.Epoch, err))
		<-ctx.Done()
		return err
	}
	if applied {
		l.applied.Add(1)
	} else {
		l.skipped.Add(1)
	}
	return nil
}

// Run runs the server until the feed settles (or, with Follow, until ctx is
// cancelled) and returns the exit code.
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
		Sync:          o.Sync,
		BatchSize:     o.Batch,
		BatchInterval: o.BatchInterval,
		Logger:        logger,
		FS:            faultFS(),
	}
	if obs != nil {
		sopts.Observer = obs.ForStore(opsStoreName)
	}
	st, err := state.Open(o.Store+":"+o.Data, sopts)
	if errors.Is(err, state.ErrBackendMismatch) {
		// The data folder says which backend it uses: follow it.
		logger.Warn("ledger: the data folder has another backend; using it", "data", o.Data, "flag", o.Store)
		st, err = state.OpenDir(o.Data, sopts)
	}
	if err != nil {
		return exitFailed, err
	}
	storeClosed := false
	defer func() {
		if !storeClosed {
			st.Close()
		}
	}()
	if _, err := st.Output(outputFile); err != nil {
		return exitFailed, err
	}
	ns := st.Namespace(namespace)
	start, _, err := readLedger(ns)
	if err != nil {
		return exitFailed, err
	}
	rejects, err := OpenRejectLog(filepath.Join(o.Data, rejectsFile))
	if err != nil {
		return exitFailed, err
	}
	defer rejects.Close()
	var rejected atomic.Uint64
	addReject := func(epoch uint64, pos int64, reason string, line []byte) {
		wrote, err := rejects.Add(epoch, pos, reason, line)
		if err != nil {
			logger.Error("ledger: cannot record a rejected line", "epoch", epoch, "position", pos, "err", err)
		}
		if wrote {
			rejected.Add(1)
		}
	}

	src, err := feed.NewFileSource(feed.Config{
		Path:         o.Input,
		Strategy:     feed.Committed,
		MaxLineBytes: maxLineBytes,
		// As a framework file feed does by default: the pointer's writes
		// and syncs run beside the reading (see feed.Config.GroupCommit).
		GroupCommit: true,
		Logger:      logger,
		OnReject: func(r feed.Reject) {
			if r.Reason == feed.RejectOversize {
				addReject(r.Epoch, r.End, fmt.Sprintf("%s (%d bytes)", r.Reason, r.Length), nil)
			}
		},
	})
	if err != nil {
		return exitFailed, err
	}

	fatalCh := make(chan error, 1)
	proc := &ledger{
		st:      ns,
		dedupe:  o.Dedupe,
		pace:    o.Pace,
		cpReady: make(chan struct{}),
		fatal: func(err error) {
			select {
			case fatalCh <- err:
			default:
			}
		},
	}
	fcfg := framework.Config{
		Feeds: []framework.FeedConfig{{
			Name:      feedName,
			Source:    src,
			AgentName: "ledger-feed-agent",
			Overload:  framework.OverloadConfig{Policy: framework.Pause},
		}},
		Groups: []framework.GroupConfig{{
			Name:       groupName,
			Processors: []string{processorName},
			Failure: framework.FailurePolicy{
				Retries: -1, // a malformed line stays malformed
				Action:  framework.Skip,
				OnReject: func(r framework.Rejection) {
					addReject(r.Delivery.Epoch, r.Delivery.Position, r.Err.Error(), r.Line)
				},
			},
		}},
		Logger: logger,
	}
	if obs != nil {
		fcfg.Observer = obs
	}
	srv, err := framework.New(fcfg, framework.Registry{processorName: proc})
	if err != nil {
		src.Close()
		return exitFailed, err
	}
	if err := srv.Start(ctx); err != nil {
		return exitFailed, err
	}
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
			_ = srv.Stop(context.Background())
			return exitFailed, fmt.Errorf("--ops %s: %w", o.Ops, err)
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
		ev = startEvents(stdout, st, ns, o.Input+feed.PointerSuffix, start.Applied, proc)
	}

	code, runErr := exitOK, error(nil)
	if o.Follow {
		select {
		case <-ctx.Done():
		case runErr = <-fatalCh:
			code = exitFailed
		}
	} else {
		settled := make(chan error, 1)
		go func() { settled <- srv.WaitSettled(ctx, feedName) }()
		select {
		case err := <-settled:
			switch {
			case err == nil:
			case errors.Is(err, framework.ErrStalled):
				code, runErr = exitFailed, err
			case ctx.Err() != nil:
				code, runErr = exitInterrupted, errors.New("interrupted before the feed settled")
			default:
				code, runErr = exitFailed, err
			}
		case runErr = <-fatalCh:
			code = exitFailed
		}
	}
	if code == exitFailed && runErr != nil && !errors.Is(runErr, framework.ErrStalled) {
		// A store failure: end as a crash would, without saving or
		// committing anything more.
		if prog != nil {
			prog.Stop()
		}
		return code, runErr
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := st.Flush(sctx); err != nil {
		return exitFailed, err
	}
	stopErr := srv.Stop(sctx)
	fstat, _ := srv.FeedStatus(feedName)
	if prog != nil {
		prog.Stop()
	}
	if ev != nil {
		ev.stop()
	}
	stats := st.Stats()
	storeClosed = true
	if err := st.Close(); err != nil {
		return exitFailed, err
	}
	if stopErr != nil {
		return exitFailed, stopErr
	}
	if ev != nil {
		fmt.Fprintf(stdout, "%s lines=%d applied=%d skipped=%d rejected=%d saves=%d\n", evDone,
			fstat.Read, proc.applied.Load(), stats.Skipped, rejected.Load(), stats.Commits)
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

func startEvents(w io.Writer, st, ns state.Store, pointerPath string, appliedAtOpen int64, proc *ledger) *eventPrinter {
	e := &eventPrinter{done: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(e.stopped)
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		var last struct {
			commits uint64
			pos     int64
		}
		first := true
		for {
			// The pointer first, then the durable state: the state can only
			// have moved forward since, so a pointer ahead of it is real.
			ptrs := pointerSlots(pointerPath)
			durable, ok := durablePosition(ns, proc)
			s := st.Stats()
			for _, p := range ptrs {
				if ok && p.Epoch == durable.Epoch && p.Position > durable.Position {
					var mark checkpoint.Mark
					select {
					case <-proc.cpReady:
						mark, _ = proc.cp.Durable()
					default:
					}
					fmt.Fprintf(w, "%s epoch=%d pointer=%d durable=%d mark_count=%d mark_position=%d\n", evAhead, p.Epoch, p.Position, durable.Position, mark.Count, mark.Position)
				}
			}
			if first || s.Commits != last.commits || durable.Position != last.pos {
				first = false
				last.commits, last.pos = s.Commits, durable.Position
				fmt.Fprintf(w, "%s epoch=%d position=%d applied=%d\n", evDurable,
					durable.Epoch, durable.Position, appliedAtOpen+int64(s.Applied)-int64(s.Staged))
			}
			select {
			case <-e.done:
				return
			case <-t.C:
			}
		}
	}()
	return e
}

func (e *eventPrinter) stop() {
	e.once.Do(func() { close(e.done) })
	<-e.stopped
}

// durablePosition is the last position known durable: the store's record
// when it de-duplicates, else the mark the store last declared durable.
func durablePosition(ns state.Store, proc *ledger) (dedupe.Applied, bool) {
	if proc.dedupe {
		l, ok := ns.Applied(feedName)
		return l.Applied, ok
	}
	select {
	case <-proc.cpReady:
	default:
		return dedupe.Applied{}, false
	}
	m, _ := proc.cp.Durable()
	return dedupe.Applied{Epoch: m.Epoch, Position: m.Position}, m.Epoch != 0
}

// pointerSlots decodes both slots of a pointer file without the pointer
// file's writer knowing: each valid slot was the pointer at some moment.
// Loading it through feed.PointerFile is not safe while a server runs (it
// tidies the file).
func pointerSlots(path string) []feed.Pointer {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var ps []feed.Pointer
	for off := 0; off < len(data) && off <= feed.PointerSlotSize; off += feed.PointerSlotSize {
		if p, err := feed.DecodePointer(data[off:]); err == nil {
			ps = append(ps, p)
		}
	}
	return ps
}
