package main

import (
	"context"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/cluster"
	"github.com/tidemark-go/tidemark/feed/natsfeed"
	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/state"
)

// The partitioned ledger: `ledger run --source nats://HOST:PORT/STREAM
// --store postgres://…` is one worker of a job that shares the stream's
// partitions with the workers started with the same flags on other
// machines (package cluster). Each partition it holds runs the ledger's
// processor on its own server, with its state in the PostgreSQL store
// ledger/STREAM/P, and its output and rejected lines in outputs of that
// store (exactly once, like the state).

// jobName names the ledger's job: its stores are JOB/STREAM/P.
const defaultJob = "ledger"

// keyRejected counts the lines a partition rejected.
const keyRejected = "rejected"

// storeNameOf names partition p's store.
func storeNameOf(job, stream string, p int) string { return job + "/" + stream + "/" + strconv.Itoa(p) }

// partLedger is the ledger's processor on a partition: the file path's,
// but a rejected line is applied too (a record in the store's output
// rejects.csv), so that it is recorded exactly once wherever the
// partition moves.
type partLedger struct {
	part   int
	st     state.Namespace // the ledger's namespace
	root   state.Store
	pace   time.Duration
	buf    []byte
	atOpen int64 // lines the store held when it opened, applied and rejected

	// The line Handle applies, and the function it applies it with (made
	// once, so that a line allocates no closure), as the file path's
	// ledger does: account holds the account's bytes, a part of the
	// delivered line, from which the balance's key is read (no string is
	// made per line); line is the delivered line when it is as AppendLine
	// writes e (see parseCanonical), else nil, and e.Account is set.
	e       Entry
	account []byte
	line    []byte
	d       tidemark.Delivery
	applyFn func(*state.Tx) error
	// runs applies the lines HandleBatch is handed (batch.go).
	runs runApplier

	applied, skipped, rejected atomic.Uint64
	// started is set once Start has set st, root and atOpen, which the
	// watcher reads from its own goroutine.
	started atomic.Bool
}

func (l *partLedger) Start(ctx context.Context, fc *framework.Context) error {
	st, err := fc.Store()
	if err != nil {
		return err
	}
	for _, name := range []string{outputFile, rejectsFile} {
		if _, err := st.Output(name); err != nil {
			return err
		}
	}
	l.root, l.st = st, st.Namespace(namespace)
	if err := l.st.View(func(tx *state.Tx) error {
		a, _, err := counters.Get(tx, keyApplied)
		if err != nil {
			return err
		}
		r, _, err := counters.Get(tx, keyRejected)
		l.atOpen = a + r
		return err
	}); err != nil {
		return err
	}
	l.applyFn = l.applyLine
	l.started.Store(true)
	return fc.Subscribe(feedName)
}

func (l *partLedger) Handle(ctx context.Context, d tidemark.Delivery, line []byte) error {
	if l.pace > 0 {
		time.Sleep(l.pace)
	}
	id, account, amount, canonical := parseCanonical(line)
	if !canonical {
		var err error
		if id, account, amount, err = parseChecked(line); err != nil {
			return l.reject(ctx, d, err.Error(), line)
		}
	}
	l.e, l.account, l.d, l.line = Entry{ID: id, Amount: amount}, account, d, nil
	if canonical {
		l.line = line
	} else {
		// The output line is formatted from e (a line that is not
		// canonical is rare: its account's string is made).
		l.e.Account = string(account)
	}
	applied, err := l.st.Apply(ctx, d, l.applyFn)
	if errors.Is(err, state.ErrTooLarge) {
		// Nothing of it was staged: the line is rejected instead.
		return l.reject(ctx, d, err.Error(), line)
	}
	if err != nil {
		return err
	}
	if applied {
		l.applied.Add(1)
	} else {
		l.skipped.Add(1)
	}
	return nil
}

// applyLine is the function Handle applies: the balance, counters and
// output line of l.e. The store records the position (it always
// de-duplicates here), so the ledger does not (own false).
func (l *partLedger) applyLine(tx *state.Tx) error {
	var err error
	l.buf, err = applyLineOf(tx, l.e, l.account, l.line, &l.d, false, l.buf)
	return err
}

// reject applies a rejected line: its record in rejects.csv and the count.
func (l *partLedger) reject(ctx context.Context, d tidemark.Delivery, reason string, line []byte) error {
	applied, err := l.st.Apply(ctx, d, func(tx *state.Tx) error {
		var b strings.Builder
		w := csv.NewWriter(&b)
		_ = w.Write([]string{strconv.FormatUint(d.Epoch, 10), strconv.FormatInt(d.Position, 10), reason, string(line)})
		w.Flush()
		if _, err := tx.Output(rejectsFile).Write([]byte(b.String())); err != nil {
			return err
		}
		_, err := counters.Add(tx, keyRejected, 1)
		return err
	})
	if err != nil {
		return err
	}
	if applied {
		l.rejected.Add(1)
	} else {
		l.skipped.Add(1)
	}
	return nil
}

// durable returns the partition's durable position and the lines its
// store holds (applied or rejected).
func (l *partLedger) durable() (int64, int64) {
	rec, _ := l.st.Applied(feedName)
	s := l.root.Stats()
	return rec.Position, l.atOpen + int64(s.Applied) - int64(s.Staged)
}

// runPartitioned runs one worker until SIGTERM or SIGINT (or ctx), then
// gives its partitions up cleanly.
func runPartitioned(ctx context.Context, o RunOptions, stdout, stderr io.Writer) (int, error) {
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: o.LogLevel}))
	// Signals first: a worker told to stop while it connects stops there,
	// with the error of the step it was in, never killed by the signal.
	ctx, stopSignals := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stopSignals()
	t, err := parseNATS(o.Source)
	if err != nil {
		return exitUsage, fmt.Errorf("--source %w", err)
	}
	worker := o.Worker
	nc, js, err := t.connect("tidemark ledger worker " + worker)
	if err != nil {
		return exitFailed, err
	}
	defer nc.Close()
	parts := o.Partitions
	info, err := lookupStream(ctx, js, t.stream)
	if err != nil {
		return exitFailed, err
	}
	switch {
	case info != nil:
		if parts, err = streamPartitions(info, o.Partitions); err != nil {
			return exitFailed, err
		}
	case parts == 0:
		return exitFailed, fmt.Errorf("stream %s does not exist (yet): make it with ledger publish --partitions N, or give --partitions N to wait for it", t.stream)
	}
	// Whether the stream stores keyed subjects: known once the stream
	// exists (a worker started before it looks again at each take).
	var keyedMu sync.Mutex
	keyedKnown, isKeyed := info != nil, info != nil && keyedSubjects(info)
	keyed := func(ctx context.Context) bool {
		keyedMu.Lock()
		defer keyedMu.Unlock()
		if !keyedKnown {
			if info, err := lookupStream(ctx, js, t.stream); err == nil && info != nil {
				keyedKnown, isKeyed = true, keyedSubjects(info)
			}
		}
		return isKeyed
	}
	var mu sync.Mutex
	procs := map[int]*partLedger{} // the running processor of each partition held
	sopts := func() *state.Options { return partitionStoreOptions(o) }
	var ev *partEvents
	if o.Events {
		ev = &partEvents{w: stdout}
	}
	held := &heldParts{held: map[int]int64{}}
	cfg := cluster.Config{
		Name:          o.Job,
		Worker:        worker,
		JetStream:     js,
		Stream:        t.stream,
		Partitions:    parts,
		FilterSubject: func(p int) string { return filterOf(t.stream, p, keyed(ctx)) },
		Database:      o.Store,
		StoreName:     func(p int) string { return storeNameOf(o.Job, t.stream, p) },
		Lease:         o.Lease,
		FeedName:      feedName,
		Source:        natsfeed.Config{StatusInterval: 250 * time.Millisecond},
		Partition: func(p cluster.Partition) (framework.Config, framework.Processors, error) {
			proc := &partLedger{part: p.Index, pace: o.Pace}
			mu.Lock()
			procs[p.Index] = proc
			mu.Unlock()
			return framework.Config{
				Feeds: []framework.FeedConfig{p.Feed},
				Groups: []framework.GroupConfig{{
					Name:         groupName,
					Processors:   []string{processorName},
					Store:        p.Store,
					StoreOptions: sopts(),
					Failure:      framework.FailurePolicy{Retries: framework.NoRetries},
				}},
				Logger: logger.With("partition", p.Index),
			}, framework.Processors{processorName: proc}, nil
		},
		OnEvent: func(e cluster.Event) {
			if e.Kind == cluster.Lost && errors.Is(e.Err, state.ErrFenced) {
				logger.Warn("ledger: a partition was taken over while this worker was paused or cut off; its late saves were refused", "partition", e.Partition, "token", e.Token)
			}
			// A partition's durable events follow its acquired event,
			// and none follows its release or loss.
			if e.Kind != cluster.Acquired {
				held.event(e)
			}
			if ev != nil {
				ev.partition(e)
			}
			if e.Kind == cluster.Acquired {
				held.event(e)
			}
		},
		Logger: logger,
	}
	sup, err := cluster.New(cfg)
	if err != nil {
		return exitUsage, err
	}
	current := func(p int) *partLedger {
		mu.Lock()
		defer mu.Unlock()
		return procs[p]
	}
	if o.Ops != "" {
		l, err := net.Listen("tcp", o.Ops)
		if err != nil {
			return exitFailed, fmt.Errorf("--ops %s: %w", o.Ops, err)
		}
		hs := &http.Server{Handler: sup.Handler(), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = hs.Serve(l) }()
		defer hs.Close()
		fmt.Fprintf(stderr, "ledger: operations listener on http://%s/ (/status, /metrics)\n", l.Addr())
	}
	stopWatch := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		watchPartitions(held, sup.Status().Worker, parts, current, ev, o.Progress, stderr, stopWatch)
	}()
	fmt.Fprintf(stderr, "ledger: worker %s of job %s: stream %s, %d partitions, stores in %s\n", sup.Status().Worker, o.Job, t.stream, parts, redactURL(o.Store))
	if ev != nil {
		ev.printf("%s partitions=%d\n", evStarted, parts)
	}
	runErr := sup.Run(ctx)
	close(stopWatch)
	<-watched
	st := sup.Status()
	var applied, skipped, rejected uint64
	mu.Lock()
	for _, p := range procs {
		applied += p.applied.Load()
		skipped += p.skipped.Load()
		rejected += p.rejected.Load()
	}
	mu.Unlock()
	if ev != nil {
		fmt.Fprintf(stdout, "%s applied=%d skipped=%d rejected=%d takeovers=%d releases=%d losses=%d fenced=%d\n", evStopped,
			applied, skipped, rejected, st.Takeovers, st.Releases, st.Losses, st.Fenced)
	}
	fmt.Fprintf(stderr, "ledger: worker stopped: %d lines applied, %d skipped as already applied, %d rejected; partitions taken %d times, given up %d, lost %d (%d to another owner)\n",
		applied, skipped, rejected, st.Takeovers, st.Releases, st.Losses, st.Fenced)
	if runErr != nil {
		return exitFailed, runErr
	}
	return exitOK, nil
}

// The events of a partitioned run (--events), one a line on stdout:
//
//	started partitions=N                the worker is connected and joins
//	                                    the job's N partitions; SIGINT or
//	                                    SIGTERM stops it cleanly from here
//	                                    on (also while it waits to join)
//	acquired partition=P token=T        the worker took partition P's lease
//	released partition=P token=T        it gave P up cleanly (saved, committed)
//	lost partition=P token=T fenced=F   P's server stopped on an error; F=1:
//	                                    another owner took the lease over and
//	                                    this worker's late saves were refused
//	durable partition=P token=T position=S lines=N
//	                                    a save of P is durable: its store holds
//	                                    N lines (applied or rejected), up to
//	                                    stream sequence S
//	stopped applied=… skipped=… rejected=… takeovers=… releases=… losses=… fenced=…
//	                                    the worker left the job
const (
	evStarted  = "started"
	evAcquired = "acquired"
	evReleased = "released"
	evLost     = "lost"
	evStopped  = "stopped"
)

// partEvents prints a partitioned run's events.
type partEvents struct {
	mu sync.Mutex
	w  io.Writer
}

func (e *partEvents) printf(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	fmt.Fprintf(e.w, format, args...)
}

func (e *partEvents) partition(ev cluster.Event) {
	switch ev.Kind {
	case cluster.Lost:
		f := 0
		if errors.Is(ev.Err, state.ErrFenced) {
			f = 1
		}
		e.printf("%s partition=%d token=%d fenced=%d\n", evLost, ev.Partition, ev.Token, f)
	case cluster.Acquired:
		e.printf("%s partition=%d token=%d\n", evAcquired, ev.Partition, ev.Token)
	case cluster.Released:
		e.printf("%s partition=%d token=%d\n", evReleased, ev.Partition, ev.Token)
	}
}

// heldParts is the partitions this worker runs, by partition, with the
// token it holds each by, as its events say: what the watcher reads
// (every 2 ms with --events) instead of the supervisor's Status, which
// builds the view of every worker and partition.
type heldParts struct {
	mu   sync.Mutex
	held map[int]int64
	// list is the held partitions and their tokens, in partition order,
	// rebuilt at each change.
	list []heldPart
}

type heldPart struct {
	partition int
	token     int64
}

// event notes what ev changes.
func (h *heldParts) event(ev cluster.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch ev.Kind {
	case cluster.Acquired:
		h.held[ev.Partition] = ev.Token
	case cluster.Released, cluster.Lost:
		delete(h.held, ev.Partition)
	default:
		return
	}
	h.list = h.list[:0]
	for p, t := range h.held {
		h.list = append(h.list, heldPart{p, t})
	}
	slices.SortFunc(h.list, func(a, b heldPart) int { return a.partition - b.partition })
}

// appendTo appends the held partitions to list.
func (h *heldParts) appendTo(list []heldPart) []heldPart {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append(list, h.list...)
}

// watchPartitions prints durable events (every 2 ms, for the partitions
// whose saves moved) and progress lines (every second) until stop.
func watchPartitions(held *heldParts, worker string, parts int, current func(int) *partLedger, ev *partEvents, progress string, stderr io.Writer, stop <-chan struct{}) {
	type last struct {
		token    int64
		pos, app int64
	}
	seen := map[int]last{}
	// Events time a take-over's first save (bench/scale's failover row):
	// every 2 ms. The progress line needs far less.
	every := 50 * time.Millisecond
	if ev != nil {
		every = 2 * time.Millisecond
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	var lastLine time.Time
	var lastApplied int64
	var list []heldPart
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		list = held.appendTo(list[:0])
		var total int64
		for _, hp := range list {
			proc := current(hp.partition)
			if proc == nil || !proc.started.Load() {
				continue
			}
			pos, app := proc.durable()
			total += app
			if ev == nil {
				continue
			}
			l := last{hp.token, pos, app}
			if seen[hp.partition] != l {
				seen[hp.partition] = l
				ev.printf("durable partition=%d token=%d position=%d lines=%d\n", hp.partition, hp.token, pos, app)
			}
		}
		if progress != "none" && time.Since(lastLine) >= time.Second {
			if !lastLine.IsZero() {
				names := make([]string, len(list))
				for i, hp := range list {
					names[i] = strconv.Itoa(hp.partition)
				}
				fmt.Fprintf(stderr, "ledger: worker %s holds %d of %d partitions (%s), %d lines saved in them, %.0f lines/s\n",
					worker, len(list), parts, strings.Join(names, ","), total, float64(total-lastApplied)/time.Since(lastLine).Seconds())
			}
			lastLine, lastApplied = time.Now(), total
		}
	}
}

// redactURL returns u without its password.
func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
			return u.String()
		}
	}
	return s
}

// partitionStoreOptions are the options of a partition's store: the
// flags' batching (--max-batch as in a file run of a PostgreSQL store:
// 20 times --batch by default), sync and cache budget.
func partitionStoreOptions(o RunOptions) *state.Options {
	return &state.Options{Sync: o.Sync, BatchSize: o.Batch, MaxBatchSize: o.maxBatch(true), BatchInterval: o.BatchInterval, CacheSize: o.CacheSize}
}

// cmdRunPartitioned checks the flags of a partitioned run and runs it.
func cmdRunPartitioned(o RunOptions, set map[string]bool, fs *flag.FlagSet, cpuprofile string, stdout, stderr io.Writer) int {
	for _, name := range []string{"input", "data", "pointer-dir", "dedupe", "follow", "die-after-save"} {
		if set[name] {
			fmt.Fprintf(stderr, "ledger run: --%s does not go with --source: a partitioned run reads the stream until SIGTERM, keeps everything in its PostgreSQL stores and always de-duplicates\n", name)
			return exitUsage
		}
	}
	if !strings.HasPrefix(o.Store, "postgres://") && !strings.HasPrefix(o.Store, "postgresql://") {
		fmt.Fprintf(stderr, "ledger run: --source needs --store postgres://USER@HOST:PORT/DB (the partitions' stores must be shared by the workers), not %q\n", o.Store)
		return exitUsage
	}
	if fs.NArg() > 0 || o.Batch < 0 || o.MaxBatch < 0 || o.Pace < 0 || o.BatchInterval < 0 || o.Partitions < 0 || o.Lease < 0 {
		fs.Usage()
		return exitUsage
	}
	stopProfile, ok := startCPUProfile(cpuprofile, stderr)
	if !ok {
		return exitFailed
	}
	defer stopProfile()
	code, err := runPartitioned(context.Background(), o, stdout, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "ledger run:", err)
	}
	return code
}
