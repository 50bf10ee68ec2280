package framework

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidemark-go/tidemark/checkpoint"
	"github.com/tidemark-go/tidemark/feed"
	"github.com/tidemark-go/tidemark/state"
)

// The states of a server.
const (
	serverNew = iota
	serverRunning
	serverStopping
	serverStopped
)

// Server reads feeds and hands their lines to processor groups, committing
// each feed's pointer only past lines that every subscriber has finished.
// Make one with [New], then Start and Stop it. Its methods are safe for
// concurrent use. Start, Stop and the operator calls (Unsubscribe,
// RemoveProcessor, RestartGroup, RemoveGroup) are serialised and wait for
// groups: do not call them from a processor's Handle (a processor leaves a
// feed with [Context.Unsubscribe]).
type Server struct {
	cfg   Config
	log   *slog.Logger
	reg   *checkpoint.Set
	base  context.Context
	drain time.Duration

	feeds      map[string]*feedRunner
	feedOrder  []*feedRunner
	groups     map[string]*group
	groupOrder []*group

	mu        sync.Mutex // serialises Start, Stop and the operator calls
	state     int
	readStop  chan struct{}
	runCancel context.CancelFunc

	// fatalOnce records the first fatal error (see fail) in fatalErr and
	// closes fatalCh; stopped is closed once the server has stopped, by
	// whatever path.
	fatalOnce sync.Once
	fatalErr  error
	fatalCh   chan struct{}
	stopped   chan struct{}
	stopErr   error // what the stop returned; read after stopped is closed
	// managed is set by Run: a dead group is then a fatal error, not a
	// pause for the operator to clear.
	managed atomic.Bool
	// operator is the operator listener Config.StartOperator started; nil
	// without one. It is closed once the server has stopped.
	operator io.Closer
}

// defaultLogger is the logger of a server whose Config.Logger is nil:
// slog.Default(), filtered at level when one is set. When slog.Default()'s
// handler drops records at level (the standard library's own drops DEBUG),
// a text handler on standard error takes them instead.
func defaultLogger(level slog.Leveler) *slog.Logger {
	if level == nil {
		return slog.Default()
	}
	h := slog.Default().Handler()
	if !h.Enabled(context.Background(), level.Level()) {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	}
	return slog.New(&levelHandler{level: level, h: h})
}

// levelHandler passes to h the records at level and above.
type levelHandler struct {
	level slog.Leveler
	h     slog.Handler
}

func (l *levelHandler) Enabled(ctx context.Context, lv slog.Level) bool {
	return lv >= l.level.Level() && l.h.Enabled(ctx, lv)
}

func (l *levelHandler) Handle(ctx context.Context, r slog.Record) error { return l.h.Handle(ctx, r) }

func (l *levelHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &levelHandler{level: l.level, h: l.h.WithAttrs(as)}
}

func (l *levelHandler) WithGroup(name string) slog.Handler {
	return &levelHandler{level: l.level, h: l.h.WithGroup(name)}
}

// Logger returns the logger the server writes to: Config.Logger, or the
// default one (see Config.LogLevel). Components started beside the server
// (the operator listener) log to it too.
func (s *Server) Logger() *slog.Logger { return s.log }

// New checks cfg and binds its processors by name from processors. Feeds
// without a Source get a file source made from their File config. Nothing
// runs until Start.
func New(cfg Config, processors Processors) (*Server, error) {
	s := &Server{
		cfg:     cfg,
		log:     cfg.Logger,
		reg:     cfg.Checkpoints,
		feeds:   make(map[string]*feedRunner),
		groups:  make(map[string]*group),
		drain:   cfg.DrainTimeout,
		base:    context.Background(),
		fatalCh: make(chan struct{}),
		stopped: make(chan struct{}),
	}
	if s.log == nil {
		s.log = defaultLogger(cfg.LogLevel)
	}
	if cfg.Operator != nil && cfg.StartOperator == nil {
		return nil, fmt.Errorf("%w: the config describes an operator listener (operator, address %q) but nothing starts it: set Config.StartOperator (ops.Use(&cfg) does), or remove the operator settings", ErrInvalidConfig, cfg.Operator.Addr)
	}
	if s.reg == nil {
		s.reg = checkpoint.NewSet()
	}
	if s.drain <= 0 {
		s.drain = DefaultDrainTimeout
	}
	var made []feed.Source
	fail := func(err error) (*Server, error) {
		for _, src := range made {
			_ = src.Close()
		}
		for _, g := range s.groupOrder {
			if g.store != nil {
				_ = g.store.Close()
			}
		}
		return nil, err
	}
	for i, fc := range cfg.Feeds {
		if fc.Name == "" {
			return fail(fmt.Errorf("%w: feed %d has no name", ErrInvalidConfig, i+1))
		}
		if s.feeds[fc.Name] != nil {
			return fail(fmt.Errorf("%w: feed %q is defined twice", ErrInvalidConfig, fc.Name))
		}
		if fc.QueueCapacity < 0 || fc.QueueCapacity > MaxQueueCapacity || fc.BatchSize < 0 || fc.BatchSize > MaxBatchSize {
			return fail(fmt.Errorf("%w: feed %q: queueCapacity %d must be within 0..%d and batchSize %d within 0..%d (0 takes the default)",
				ErrInvalidConfig, fc.Name, fc.QueueCapacity, MaxQueueCapacity, fc.BatchSize, MaxBatchSize))
		}
		if fc.Overload.Policy < PolicyDefault || fc.Overload.Policy > DropAfterSpin {
			return fail(fmt.Errorf("%w: feed %q: unknown overload policy %d", ErrInvalidConfig, fc.Name, int(fc.Overload.Policy)))
		}
		src := fc.Source
		if src == nil {
			if fc.File == nil || (fc.File.Filename == "" && len(fc.File.Paths) == 0) {
				return fail(fmt.Errorf("%w: feed %q has neither a source nor a filename (or paths)", ErrInvalidConfig, fc.Name))
			}
			var err error
			src, err = openFileSource(fc, s.log)
			if err != nil {
				what := fc.File.Filename
				if what == "" {
					what = strings.Join(fc.File.Paths, ", ")
				}
				return fail(fmt.Errorf("framework: feed %q: open %s: %w", fc.Name, what, err))
			}
			made = append(made, src)
		}
		f := newFeedRunner(s, fc, src)
		s.feeds[fc.Name] = f
		s.feedOrder = append(s.feedOrder, f)
	}
	owner := make(map[string]string)
	stores := make(map[string]string)
	for i, gc := range cfg.Groups {
		if gc.Name == "" {
			return fail(fmt.Errorf("%w: processor group %d has no agentName", ErrInvalidConfig, i+1))
		}
		if s.groups[gc.Name] != nil {
			return fail(fmt.Errorf("%w: processor group %q is defined twice", ErrInvalidConfig, gc.Name))
		}
		if gc.Failure.Action < Skip || gc.Failure.Action > Quarantine {
			return fail(fmt.Errorf("%w: processor group %q: unknown failure action %d", ErrInvalidConfig, gc.Name, int(gc.Failure.Action)))
		}
		g := &group{
			s:      s,
			name:   gc.Name,
			policy: gc.Failure.withDefaults(),
			log:    s.log.With("group", gc.Name),
			notify: make(chan struct{}, 1),
			ctrl:   make(chan struct{}, 1),
		}
		for _, name := range gc.Processors {
			p := processors[name]
			if p == nil {
				return fail(fmt.Errorf("%w: processor %q of group %q is not in the registry: %w", ErrInvalidConfig, name, gc.Name, ErrUnknownProcessor))
			}
			if o, ok := owner[name]; ok {
				return fail(fmt.Errorf("%w: processor %q is in groups %q and %q: a processor belongs to one group", ErrInvalidConfig, name, o, gc.Name))
			}
			owner[name] = gc.Name
			g.procs = append(g.procs, &procEntry{name: name, p: p})
		}
		if gc.Resume < ResumeFromStore || gc.Resume > ResumeFromPointer {
			return fail(fmt.Errorf("%w: processor group %q: unknown resume mode %d", ErrInvalidConfig, gc.Name, int(gc.Resume)))
		}
		g.resume = gc.Resume
		if gc.Store != "" {
			if err := s.openStore(g, gc, stores); err != nil {
				return fail(err)
			}
		} else if gc.StoreOptions != nil {
			return fail(fmt.Errorf("%w: processor group %q has store options but no store: set its Store (\"bbolt:DIR\" or \"pebble:DIR\")", ErrInvalidConfig, gc.Name))
		}
		s.groups[gc.Name] = g
		s.groupOrder = append(s.groupOrder, g)
	}
	return s, nil
}

// openStore opens the store of group g. stores maps the stores opened so
// far by folder: two groups cannot share one.
func (s *Server) openStore(g *group, gc GroupConfig, stores map[string]string) error {
	var o state.Options
	if gc.StoreOptions != nil {
		o = *gc.StoreOptions
	}
	if o.Logger == nil {
		o.Logger = s.log.With("group", gc.Name)
	}
	where := storeWhere(gc.Store)
	if other, ok := stores[where]; ok {
		return fmt.Errorf("%w: processor groups %q and %q have the same store %s: a store belongs to one group (use namespaces within one group, or one store per group)", ErrInvalidConfig, other, gc.Name, where)
	}
	st, err := state.Open(gc.Store, &o)
	if err != nil {
		return fmt.Errorf("framework: processor group %q: open its store %q: %w", gc.Name, gc.Store, err)
	}
	stores[where] = gc.Name
	g.store, g.storeSpec = st, gc.Store
	return nil
}

// storeWhere names the place a store spec opens, so that two specs of one
// place compare equal: the absolute folder of "bbolt:DIR", "pebble:DIR" and
// "DIR"; the spec itself for a URL.
func storeWhere(spec string) string {
	if strings.Contains(spec, "://") {
		return spec
	}
	dir := spec
	if kind, rest, ok := strings.Cut(spec, ":"); ok && (kind == state.Bolt || kind == state.Pebble) {
		dir = rest
	}
	if abs, err := filepath.Abs(dir); err == nil {
		return abs
	}
	return filepath.Clean(dir)
}

// Start starts the processors (which subscribe to feeds and take holds),
// then each group's goroutine, then each feed's reader. ctx bounds the
// processors' Start calls only; the server runs until Stop. If a processor
// fails to start, everything started is stopped and the error returned.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != serverNew {
		return fmt.Errorf("framework: start: %w (a server starts once)", ErrState)
	}
	s.base = context.WithoutCancel(ctx)
	for _, f := range s.feedOrder {
		f.logDefaultPolicy()
	}
	var startErr error
	var started []*incarnation
	for _, g := range s.groupOrder {
		inc, err := g.start(ctx)
		started = append(started, inc)
		if err != nil {
			startErr = err
			break
		}
	}
	if startErr == nil {
		// Every group has subscribed: the stores of the subscribers decide
		// where each feed resumes, before its first read.
		startErr = s.resumeFeeds()
	}
	if startErr == nil && s.cfg.Operator != nil {
		op, err := s.cfg.StartOperator(s.base, s, *s.cfg.Operator)
		if err != nil {
			startErr = fmt.Errorf("framework: start the operator listener: %w", err)
		} else {
			s.operator = op
		}
	}
	if startErr != nil {
		var errs []error
		errs = append(errs, startErr)
		for i, inc := range started {
			inc.stop()
			close(inc.done)
			g := s.groupOrder[i]
			errs = append(errs, g.stopProcessors(ctx, g.procs))
		}
		for _, f := range s.feedOrder {
			errs = append(errs, f.src.Close())
		}
		errs = append(errs, s.closeStores())
		s.state = serverStopped
		s.stopErr = errors.Join(errs...)
		close(s.stopped)
		return s.stopErr
	}
	for i, inc := range started {
		go s.groupOrder[i].run(inc)
	}
	s.readStop = make(chan struct{})
	runCtx, cancel := context.WithCancel(s.base)
	s.runCancel = cancel
	for _, f := range s.feedOrder {
		go f.run(runCtx, s.readStop)
	}
	s.state = serverRunning
	go s.watchFatal()
	for _, g := range s.groupOrder {
		if g.store != nil {
			go s.watchStore(g, s.readStop)
		}
	}
	s.log.Info("server started", "feeds", len(s.feedOrder), "groups", len(s.groupOrder))
	return nil
}

// resumeFeeds tells every re-readable feed where its subscribers' stores
// say it must resume (invariant 9): one point per durable record of the
// feed in each store of a group that subscribes to it, or a point "not
// found" for a store that holds none. It runs before the feeds read.
func (s *Server) resumeFeeds() error {
	for _, f := range s.feedOrder {
		if !f.holds {
			continue // a source that cannot re-read has nothing to resume
		}
		var points []feed.ResumePoint
		for _, g := range s.groupOrder {
			if g.store == nil || g.resume != ResumeFromStore || !g.subscribed(f.name) {
				continue
			}
			holder := fmt.Sprintf("group %s, store %s", g.name, g.storeSpec)
			recs := g.store.AppliedAll(f.name)
			if len(recs) == 0 {
				points = append(points, feed.ResumePoint{Holder: holder})
			}
			for _, l := range recs {
				points = append(points, feed.ResumePoint{Holder: holder, Found: true, Lineage: l})
			}
		}
		if len(points) == 0 {
			continue
		}
		r, ok := f.src.(feed.Resumer)
		if !ok {
			return fmt.Errorf("%w: feed %q: its source (%T) cannot resume from what the stores of its subscribers hold (it does not implement feed.Resumer), so a store behind its pointer would miss lines; implement it, or set Resume: ResumeFromPointer on the groups to accept that", ErrInvalidConfig, f.name, f.src)
		}
		if err := r.ResumeFrom(points); err != nil {
			return fmt.Errorf("framework: feed %q: resume from the stores of its subscribers: %w", f.name, err)
		}
	}
	return nil
}

// closeStores closes the groups' stores (each flushes what it stages).
func (s *Server) closeStores() error {
	var errs []error
	for _, g := range s.groupOrder {
		if g.store == nil {
			continue
		}
		err := g.store.Close()
		if err != nil && s.failureReported(g.store) {
			err = without(err, g.store.Err()) // reported already
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("framework: close the store %s of group %q: %w", g.storeSpec, g.name, err))
		}
	}
	return errors.Join(errs...)
}

// Stop stops the server cleanly: the feeds stop reading, every group
// finishes the lines already in its queues (bounded by the config's
// DrainTimeout), the groups' stores make durable what they stage, each
// feed commits what was finished, then the sources are closed, the
// processors stopped and the stores closed. Lines that a group did not
// finish are not committed and are read again by the next run. ctx bounds
// the whole stop; on its expiry Stop returns its error and leaves what is
// still running. After a fatal error the server stops by itself, without
// draining (see [Server.Done]); Stop then returns an error wrapping
// ErrState. Stop on a server that was never started closes what New
// opened (its sources and stores).
func (s *Server) Stop(ctx context.Context) error { return s.stop(ctx, true) }

// stopGrace is how long, beyond the drain timeout, a stop that the server
// makes itself (after a fatal error, or at the end of Run) waits for its
// processors to return and its stores to flush.
const stopGrace = time.Minute

// stop stops the server; drain says whether the groups finish their queues
// first. After a fatal error it never drains: the lines still queued are
// read again at the next start.
func (s *Server) stop(ctx context.Context, drain bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == serverNew {
		// Never started: release what New opened.
		var errs []error
		for _, f := range s.feedOrder {
			errs = append(errs, f.src.Close())
		}
		errs = append(errs, s.closeStores())
		s.state = serverStopped
		s.stopErr = errors.Join(errs...)
		close(s.stopped)
		return s.stopErr
	}
	if s.state != serverRunning {
		return fmt.Errorf("framework: stop: %w (not running)", ErrState)
	}
	select {
	case <-s.fatalCh:
		drain = false
	default:
	}
	s.state = serverStopping
	close(s.readStop)
	var errs []error
	for _, f := range s.feedOrder {
		select {
		case <-f.exited:
		case <-ctx.Done():
			return fmt.Errorf("framework: stop: waiting for feed %q to stop reading: %w", f.name, ctx.Err())
		}
	}
	s.runCancel()
	incs := make([]*incarnation, len(s.groupOrder))
	for i, g := range s.groupOrder {
		g.mu.Lock()
		incs[i] = g.inc
		g.mu.Unlock()
		if incs[i] != nil && drain {
			incs[i].beginDrain()
		}
	}
	if drain {
		dctx, cancel := context.WithTimeout(ctx, s.drain)
		for i, inc := range incs {
			if inc == nil {
				continue
			}
			if err := waitDone(dctx, inc); err != nil {
				g := s.groupOrder[i]
				var left uint64
				for _, q := range *inc.qsnap.Load() {
					left += q.unfinished()
				}
				s.log.Warn("drain timed out: the group's unfinished lines are not committed and will be read again", "group", g.name, "unfinished", left, "timeout", s.drain)
				break
			}
		}
		cancel()
	}
	for _, inc := range incs {
		if inc != nil {
			inc.stop()
		}
	}
	for i, inc := range incs {
		if inc == nil {
			continue
		}
		if err := waitDone(ctx, inc); err != nil {
			return fmt.Errorf("framework: stop: group %q did not stop (a processor ignores its context): %w", s.groupOrder[i].name, err)
		}
	}
	// The groups have stopped: what their stores stage is every change of
	// a finished line. Made durable now, it moves the checkpoints, and the
	// final commit covers it.
	for _, g := range s.groupOrder {
		if g.store == nil || s.failureReported(g.store) {
			continue
		}
		if err := g.store.Flush(ctx); err != nil {
			errs = append(errs, fmt.Errorf("framework: stop: flush the store %s of group %q: the lines it did not save will be read again: %w", g.storeSpec, g.name, err))
		}
	}
	for _, f := range s.feedOrder {
		if err := f.commit(); err != nil {
			errs = append(errs, fmt.Errorf("framework: stop: the final commit failed; the lines after the pointer will be read again: %w", err))
		}
		if err := f.src.Close(); err != nil {
			errs = append(errs, fmt.Errorf("framework: stop: close feed %q: %w", f.name, err))
		}
		f.mu.Lock()
		c := f.committed
		f.mu.Unlock()
		f.log.Info("feed stopped", "committed_epoch", c.epoch, "committed_position", c.pos, "read", f.read.Load())
	}
	for _, g := range s.groupOrder {
		g.mu.Lock()
		procs := slices.Clone(g.procs)
		g.mu.Unlock()
		errs = append(errs, g.stopProcessors(ctx, procs))
	}
	errs = append(errs, s.closeStores())
	if s.operator != nil {
		// Last: the listener reported the stop while it lasted.
		if err := s.operator.Close(); err != nil {
			errs = append(errs, fmt.Errorf("framework: stop: close the operator listener: %w", err))
		}
	}
	s.state = serverStopped
	s.stopErr = errors.Join(errs...)
	close(s.stopped)
	s.log.Info("server stopped")
	return s.stopErr
}

// fail records err as the server's fatal error (the first one is kept) and
// makes the server stop without draining. msg, for the ERROR log with
// attrs (the group, feed, position) and err, says what failed and what to
// do. It never blocks.
func (s *Server) fail(err error, msg string, attrs ...any) {
	s.fatalOnce.Do(func() {
		s.fatalErr = err
		s.log.Error(msg, append(attrs, "err", err)...) // before Run can return
		close(s.fatalCh)
	})
}

// watchStore stops the server as soon as the store of group g fails (a
// commit failed, or the check of its file running in the background found
// damage), whatever its feeds do: an idle feed would never bring the
// failure to light through an Apply. It returns once stopping is closed.
func (s *Server) watchStore(g *group, stopping <-chan struct{}) {
	select {
	case <-g.store.Failed():
	case <-stopping:
		return
	}
	err := g.store.Err()
	todo := "fix the cause (see err), then start the server again"
	if errors.Is(err, state.ErrCorrupt) {
		todo = "its data is damaged: restore the store's folder from a backup, or remove the folder to start over (its feeds are then read again from their start)"
	}
	s.fail(fmt.Errorf("framework: processor group %q: its store %s failed, and the server stops: %w", g.name, g.storeSpec, err),
		"store failed: it makes nothing more durable, and the server stops without draining; "+todo+"; the lines it did not make durable are read again at the next start",
		"group", g.name, "store", g.storeSpec)
}

// failureReported reports whether the fatal error that stops the server
// holds st's own failure: the stop then neither flushes st (it makes
// nothing more durable) nor reports its failure again.
func (s *Server) failureReported(st state.Store) bool {
	select {
	case <-s.fatalCh:
	default:
		return false
	}
	ferr := st.Err()
	return ferr != nil && errors.Is(s.fatalErr, ferr)
}

// without returns err less its parts (of errors.Join) that match target.
func without(err, target error) error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var keep []error
		for _, e := range j.Unwrap() {
			if e = without(e, target); e != nil {
				keep = append(keep, e)
			}
		}
		return errors.Join(keep...)
	}
	if errors.Is(err, target) {
		return nil
	}
	return err
}

// watchFatal stops a running server after a fatal error.
func (s *Server) watchFatal() {
	select {
	case <-s.fatalCh:
	case <-s.stopped:
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.drain+stopGrace)
	defer cancel()
	if err := s.stop(ctx, false); err != nil && !errors.Is(err, ErrState) {
		s.log.Error("stop after the fatal error failed", "err", err)
	}
}

// Done returns a channel that is closed once the server has stopped: by
// Stop, at the end of Run, or by itself after a fatal error (a processor's
// [Fatal] error, a store's failed commit, a dead group, a feed that cannot
// read its input, a group's store that failed even while its feeds are
// idle). [Server.Err] then says why.
func (s *Server) Done() <-chan struct{} { return s.stopped }

// Err returns, once [Server.Done] is closed, the fatal error that stopped
// the server joined with what its stop reported (a failed final commit, a
// store that did not close); nil for a clean stop, and nil while the server
// runs.
func (s *Server) Err() error {
	select {
	case <-s.stopped:
	default:
		return nil
	}
	select {
	case <-s.fatalCh:
		return errors.Join(s.fatalErr, s.stopErr)
	default:
		return s.stopErr
	}
}

// Run starts the server, runs it until ctx is done (or, with
// Config.UntilSettled, until every feed has settled), then stops it
// cleanly: the groups drain, the stores flush, the feeds commit. It
// returns the first fatal error (a processor's [Fatal] error, a store's
// failed commit or damage found by the check of its file, a dead group, a
// feed that cannot read its input; the server then stops without
// draining), a stalled feed's [*StalledError] in
// a run until settled, or what the stop reported; nil after a clean run.
// A run until settled that ctx ends first returns an error wrapping ctx's
// cause. Use [Server.SignalContext] to stop on SIGINT and SIGTERM.
func (s *Server) Run(ctx context.Context) error {
	s.managed.Store(true)
	if err := s.Start(ctx); err != nil {
		return err
	}
	var runErr error
	var settled chan error
	if s.cfg.UntilSettled {
		settled = make(chan error, 1)
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() { settled <- s.waitAllSettled(sctx) }()
	}
	select {
	case <-ctx.Done():
		if s.cfg.UntilSettled {
			runErr = fmt.Errorf("framework: run: stopped before every feed settled: %w", context.Cause(ctx))
		}
	case runErr = <-settled:
	case <-s.fatalCh:
	}
	select {
	case <-s.fatalCh:
		<-s.stopped // watchFatal stops it, without draining
		return s.Err()
	default:
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.drain+stopGrace)
	defer cancel()
	stopErr := s.stop(sctx, true)
	if errors.Is(stopErr, ErrState) {
		<-s.stopped // a fatal error came meanwhile, and stopped it
		return errors.Join(runErr, s.Err())
	}
	return errors.Join(runErr, stopErr)
}

// waitAllSettled waits until every feed is settled at once. It returns a
// *StalledError for a stalled feed, and an error wrapping ErrInputMissing
// for a feed whose input does not exist: neither ever settles by waiting.
func (s *Server) waitAllSettled(ctx context.Context) error {
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for {
		all := true
		for _, f := range s.feedOrder {
			st, err := s.FeedStatus(f.name)
			if err != nil {
				return err
			}
			switch {
			case st.Stalled:
				return &StalledError{Feed: f.name, Reason: st.StallReason}
			case st.State == feed.StateWaiting:
				return fmt.Errorf("framework: feed %q: %s: a run until settled cannot settle on an input that is not there; check the path: %w", f.name, st.Detail, ErrInputMissing)
			case !st.Settled:
				all = false
			}
		}
		if all {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.fatalCh:
			return nil
		case <-t.C:
		}
	}
}

func (s *Server) wakeFeeds() {
	for _, f := range s.feedOrder {
		f.signal()
	}
}

func (s *Server) feed(name string) (*feedRunner, error) {
	f := s.feeds[name]
	if f == nil {
		return nil, fmt.Errorf("framework: feed %q: %w", name, ErrUnknownFeed)
	}
	return f, nil
}

func (s *Server) group(name string) (*group, error) {
	g := s.groups[name]
	if g == nil {
		return nil, fmt.Errorf("framework: processor group %q: %w", name, ErrUnknownGroup)
	}
	return g, nil
}

// runningGroup returns the named group of a running server. s.mu must be
// held.
func (s *Server) runningGroup(name string) (*group, error) {
	if err := s.running(); err != nil {
		return nil, err
	}
	return s.group(name)
}

// Checkpoint takes the hold of group on feed (see package checkpoint), for
// the host: the same hold a processor of the group gets from
// [Context.Checkpoint].
func (s *Server) Checkpoint(feedName, groupName string) *checkpoint.Checkpoint {
	return s.reg.Hold(feedName, groupName)
}

// Store returns the store of the named group (GroupConfig.Store), for the
// host: to read it (View, Stats) or serve it to an operator. The server
// owns it: do not close it. It returns an error wrapping ErrUnknownGroup or
// ErrNoStore.
func (s *Server) Store(groupName string) (state.Store, error) {
	g, err := s.group(groupName)
	if err != nil {
		return nil, err
	}
	if g.store == nil {
		return nil, fmt.Errorf("framework: processor group %q: %w", groupName, ErrNoStore)
	}
	return g.store, nil
}

// Checkpoints returns the server's set of checkpoint holds.
func (s *Server) Checkpoints() *checkpoint.Set { return s.reg }

func (s *Server) running() error {
	if s.state != serverRunning {
		return fmt.Errorf("framework: %w (not running)", ErrState)
	}
	return nil
}

// Unsubscribe removes group's queue from feed: the group's processors stop
// receiving the feed's lines. If the queue had lines it had not finished,
// the feed holds its pointer before the first of them and reports stalled
// until a restart or [Server.Release].
func (s *Server) Unsubscribe(feedName, groupName string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.running(); err != nil {
		return err
	}
	f, err := s.feed(feedName)
	if err != nil {
		return err
	}
	g, err := s.group(groupName)
	if err != nil {
		return err
	}
	g.mu.Lock()
	inc := g.inc
	q := inc.queues[feedName]
	if q != nil {
		delete(inc.queues, feedName)
		inc.publish()
	}
	g.mu.Unlock()
	if q == nil {
		return fmt.Errorf("framework: unsubscribe group %q from feed %q: %w", groupName, feedName, ErrNotSubscribed)
	}
	f.removeQueue(q, "unsubscribed")
	g.poke()
	return nil
}

// RemoveProcessor stops one processor and takes it out of its group. A
// queue left without processors is removed from its feed (see
// [Server.Unsubscribe] for what it then holds). If the group was fenced by
// this processor, the fence lifts and the group goes on without it.
func (s *Server) RemoveProcessor(ctx context.Context, groupName, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	g, err := s.runningGroup(groupName)
	if err != nil {
		return err
	}
	g.mu.Lock()
	i := slices.IndexFunc(g.procs, func(p *procEntry) bool { return p.name == name })
	if i < 0 {
		g.mu.Unlock()
		return fmt.Errorf("framework: remove processor %q from group %q: %w", name, groupName, ErrUnknownProcessor)
	}
	p := g.procs[i]
	g.procs = slices.Delete(g.procs, i, i+1)
	p.removed.Store(true)
	inc := g.inc
	var empty []*queue
	for fname, q := range inc.queues {
		ps := *q.procs.Load()
		if j := slices.Index(ps, p); j >= 0 {
			ps = slices.Delete(slices.Clone(ps), j, j+1)
			q.procs.Store(&ps)
			if len(ps) == 0 {
				empty = append(empty, q)
				delete(inc.queues, fname)
			}
		}
	}
	inc.publish()
	if g.fence != nil && g.fence.proc == p && g.state.CompareAndSwap(groupFenced, groupRunning) {
		g.fence = nil
		g.log.Info("fence lifted: the processor that failed was removed", "processor", name)
	}
	g.mu.Unlock()
	g.poke()
	for _, q := range empty {
		q.f.removeQueue(q, fmt.Sprintf("processor %s removed", name))
	}
	s.wakeFeeds()
	// Wait until the goroutine is between batches (or waiting) so that
	// Stop never runs while the processor handles a line.
	select {
	case inc.busy <- struct{}{}:
		<-inc.busy
	case <-ctx.Done():
		return fmt.Errorf("framework: remove processor %q from group %q: removed, but not stopped: its group is still handling a batch: %w", name, groupName, ctx.Err())
	}
	return g.stopProcessors(ctx, []*procEntry{p})
}

// LiftFence ends a group's quarantine: the group retries the line that
// failed, with fresh retries, and its feeds read again.
func (s *Server) LiftFence(groupName string) error {
	g, err := s.group(groupName)
	if err != nil {
		return err
	}
	if !g.liftFence() {
		return fmt.Errorf("framework: lift fence of group %q: %w", groupName, ErrNotFenced)
	}
	g.log.Info("fence lifted by the operator")
	s.wakeFeeds()
	return nil
}

// RestartGroup stops a group and starts it again as new subscribers: its
// queues are removed (what they had not finished stays held, as for
// Unsubscribe), its processors are stopped and started again, and they
// subscribe new queues whose checkpoint marks start from nothing durable.
// If a processor fails to start, the group is dead: its new queues are
// never read and the feeds it subscribed to pause until it is removed.
func (s *Server) RestartGroup(ctx context.Context, groupName string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	g, err := s.runningGroup(groupName)
	if err != nil {
		return err
	}
	if g.state.Load() == groupRemoved {
		return fmt.Errorf("framework: restart group %q: %w (removed)", groupName, ErrState)
	}
	// Feeds that hold pause until the new queues replace the old ones.
	g.state.Store(groupRestarting)
	// The old queues stay live until the new processors subscribe again,
	// so that no line read meanwhile escapes the group: lines handed to
	// an old queue are held by it.
	if err := s.retire(ctx, g, "group restarted", true); err != nil {
		g.state.Store(groupDead)
		s.wakeFeeds()
		return err
	}
	inc, err := g.start(ctx)
	g.mu.Lock()
	left := g.replacing
	g.replacing = nil
	g.mu.Unlock()
	for _, q := range left {
		q.f.removeQueue(q, "group restarted without subscribing to the feed again")
	}
	if err != nil {
		g.state.Store(groupDead)
		close(inc.done)
		g.log.Error("group restart failed: the group is dead and the feeds it subscribed to pause until it is removed", "err", err)
		if s.managed.Load() {
			s.fail(fmt.Errorf("framework: processor group %q is dead (its restart failed): %w", groupName, err),
				"processor group is dead: its restart failed, and the server stops without draining; fix what failed the processor's Start (see err), then start the server again",
				"group", groupName)
		}
		s.wakeFeeds()
		return err
	}
	g.state.Store(groupRunning)
	go g.run(inc)
	g.log.Info("group restarted")
	s.wakeFeeds()
	return nil
}

// RemoveGroup stops a group for good: its queues are removed (what they had
// not finished stays held, as for Unsubscribe), its processors stopped.
func (s *Server) RemoveGroup(ctx context.Context, groupName string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	g, err := s.runningGroup(groupName)
	if err != nil {
		return err
	}
	if g.state.Swap(groupRemoved) == groupRemoved {
		return nil
	}
	err = s.retire(ctx, g, "group removed", false)
	g.log.Info("group removed")
	s.wakeFeeds()
	return err
}

// retire stops the current incarnation's goroutine and its processors. Its
// queues are removed, or, when keep is set (a restart), left live for the
// next incarnation to replace.
func (s *Server) retire(ctx context.Context, g *group, why string, keep bool) error {
	g.mu.Lock()
	inc := g.inc
	qs := *inc.qsnap.Load()
	clear(inc.queues)
	inc.publish()
	procs := slices.Clone(g.procs)
	if keep {
		g.replacing = make(map[string]*queue, len(qs))
		for _, q := range qs {
			g.replacing[q.f.name] = q
		}
	} else {
		for _, q := range g.replacing { // left by a restart that failed
			qs = append(qs, q)
		}
		g.replacing = nil
	}
	g.mu.Unlock()
	if !keep {
		for _, q := range qs {
			q.f.removeQueue(q, why)
		}
	}
	inc.stop()
	g.poke()
	if err := waitDone(ctx, inc); err != nil {
		return fmt.Errorf("framework: %s: group %q did not stop (a processor ignores its context): %w", why, g.name, err)
	}
	return g.stopProcessors(ctx, procs)
}

// Release gives up the hold that a removed consumer (group's former queue
// on feed) has on the feed's pointer, so that the pointer can move past the
// lines it left unfinished. Those lines are then never processed by that
// consumer: use it when a run must complete without a restart. The release
// is logged and counted in the feed's status.
func (s *Server) Release(feedName, consumer string) error {
	f, err := s.feed(feedName)
	if err != nil {
		return err
	}
	n, items := f.release(consumer)
	if n == 0 {
		return fmt.Errorf("framework: release %q on feed %q: %w", consumer, feedName, ErrNoHold)
	}
	f.released.Add(uint64(n))
	f.log.Warn("operator released a removed consumer's hold: its unfinished lines will be committed past", "group", consumer, "unfinished", items)
	f.signal()
	return nil
}
