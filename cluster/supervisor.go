package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tidemark-go/tidemark/feed/natsfeed"
	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/state"
)

// PartitionState is where a partition is on this worker.
type PartitionState string

// The states of a partition on a worker.
const (
	// Standby: this worker does not hold the partition (another does, or
	// no one yet).
	Standby PartitionState = "standby"
	// Starting: this worker is taking the partition's lease and opening
	// its server.
	Starting PartitionState = "starting"
	// Running: this worker holds the lease and its server runs.
	Running PartitionState = "running"
	// Stopping: this worker is giving the partition up: its server drains,
	// flushes, commits, and the store releases the lease.
	Stopping PartitionState = "stopping"
)

// EventKind says what happened to a partition on this worker.
type EventKind string

// The kinds of [Event].
const (
	// Acquired: the worker took the partition's lease (Token) and starts
	// its server.
	Acquired EventKind = "acquired"
	// Released: the partition's server stopped cleanly (drained, flushed,
	// committed) and the lease was released: given up to another worker,
	// or at shutdown.
	Released EventKind = "released"
	// Lost: the partition's server stopped on an error (Err): the store's
	// lease was taken over (errors.Is(Err, state.ErrFenced)), a commit
	// failed, the source found a problem. The partition is in standby and
	// is tried again.
	Lost EventKind = "lost"
)

// Event is a change of a partition on this worker, for [Config].OnEvent.
type Event struct {
	Kind      EventKind
	Partition int
	// Token is the lease token the worker holds (held) the partition by.
	Token int64
	// Err is why the server stopped, for Lost.
	Err  error
	Time time.Time
}

// Supervisor runs the partitions of a stream that this worker holds: one
// framework server, one JetStream source and one PostgreSQL store per
// partition. Make one with [New] and call [Supervisor.Run].
type Supervisor struct {
	cfg    Config
	log    *slog.Logger
	parts  []*part
	tmpl   natsfeed.Config
	evMu   sync.Mutex
	runs   atomic.Bool
	wg     sync.WaitGroup
	stopCh chan struct{} // closed once Run has stopped everything

	mu      sync.Mutex // guards the view
	view    []memberRow
	viewAt  time.Time
	viewOK  bool
	viewErr string
	plan    plan

	takeovers, releases, losses, fenced atomic.Uint64
}

// part is one partition as this worker sees it.
type part struct {
	index     int
	storeName string
	spec      string

	mu      sync.Mutex
	state   PartitionState
	token   int64
	since   time.Time
	srv     *framework.Server
	src     *natsfeed.Source
	st      state.Store
	cancel  context.CancelFunc
	done    chan struct{}
	lastErr string
	errAt   time.Time
	fails   int       // failures in a row
	retryAt time.Time // no attempt before
	leftAt  time.Time // given up at
	// counters of this worker
	takeovers, releases, losses uint64
}

// New checks cfg and returns a supervisor. It does no I/O.
func New(cfg Config) (*Supervisor, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Supervisor{cfg: cfg, stopCh: make(chan struct{})}
	s.log = cfg.Logger.With("job", cfg.Name, "stream", cfg.Stream, "worker", cfg.Worker)
	s.tmpl = cfg.Source
	// The sources' settings are checked now, on partition 0.
	probe, err := natsfeed.New(s.sourceConfig(0, 1))
	if err != nil {
		return nil, fmt.Errorf("%w: Source: %w", ErrConfig, err)
	}
	_ = probe.Close()
	for p := range cfg.Partitions {
		s.parts = append(s.parts, &part{index: p, storeName: cfg.StoreName(p), spec: cfg.storeSpec(p), state: Standby})
	}
	return s, nil
}

// sourceConfig is the config of partition p's source for the owner of
// lease token.
func (s *Supervisor) sourceConfig(p int, token int64) natsfeed.Config {
	c := s.tmpl
	c.JetStream = s.cfg.JetStream
	c.Stream = s.cfg.Stream
	c.Partition = strconv.Itoa(p)
	c.FilterSubject = s.cfg.FilterSubject(p)
	c.Consumer = s.cfg.consumerPrefix(p) + strconv.FormatInt(token, 10)
	c.Logger = s.cfg.Logger.With("job", s.cfg.Name, "worker", s.cfg.Worker)
	return c
}

// sourceIdle is how a partition's feed waits when its source's buffer is
// empty. A JetStream source's Poll never blocks, and its messages come in
// pull batches: after a pause in deliveries (a pull's round trip, a
// reset) the framework's default back-off reaches 50 ms, while the pump's
// buffer (2,048 messages) and nats.go's (a pull batch) fill in about 20 ms
// at the rate a server sends here, and the pull then stops until the feed
// reads again. At most 2 ms, an idle partition costs about 500 empty polls
// a second. At least 1 ms: at 100,000 messages a second a poll that
// found the buffer empty is followed by one that takes about 100, where a
// first wait of 100 µs made the feed wake ten times as often for ten
// (each wake a timer, a hand-off to the group's queue, the group's
// goroutine woken): 0.94 of the worker's CPU a line.
var sourceIdle = framework.Backoff{Min: time.Millisecond, Max: 2 * time.Millisecond}

// joinRetry bounds how long Run keeps trying to join the job while the
// database cannot be reached or fails (a restart of PostgreSQL, say)
// before it gives up with the error.
const joinRetry = 30 * time.Second

// join connects to the database and registers this worker, trying again
// for up to joinRetry while the database fails (each failure logged and
// shown in Status.TableError); another live worker of the same name is
// ErrWorkerExists at once, once the wait for a dead one's heartbeat is
// over.
func (s *Supervisor) join(ctx context.Context) (*members, error) {
	deadline := time.Now().Add(joinRetry)
	for {
		mem, err := openMembers(ctx, s.cfg.Database, s.cfg.job(), s.cfg.Worker, s.cfg.Lease)
		if err == nil {
			// The process before this one of the same name, killed a
			// moment ago, still has a live heartbeat: it runs out within
			// the lease.
			if err = mem.register(ctx, s.cfg.Lease+s.cfg.Interval); err == nil {
				s.mu.Lock()
				s.viewErr = ""
				s.mu.Unlock()
				return mem, nil
			}
			mem.close()
		}
		if errors.Is(err, ErrWorkerExists) || ctx.Err() != nil || time.Now().After(deadline) {
			return nil, err
		}
		s.log.Warn("cannot join the job yet: trying again", "err", err, "until", deadline.Format(time.RFC3339))
		s.mu.Lock()
		s.viewErr = err.Error()
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Run joins the job's workers and runs the partitions this worker holds
// until ctx is done; then it stops them cleanly (each drains, flushes,
// commits and releases its lease), leaves the table of workers and
// returns nil (also when ctx is done before the worker joined). It
// returns early with an error only when the worker cannot take part at
// all: the database unreachable or failing for 30 s at the
// start (each try is logged, and shown in Status.TableError), or another
// live worker of the same name ([ErrWorkerExists]; a worker of the same
// name that died is waited for, up to the lease, until its heartbeat runs
// out). A partition's failure is not Run's: the partition goes to standby
// and is tried again (see [Supervisor.Status]). Run is called once.
func (s *Supervisor) Run(ctx context.Context) error {
	if !s.runs.CompareAndSwap(false, true) {
		return fmt.Errorf("cluster: Run called twice")
	}
	defer close(s.stopCh)
	mem, err := s.join(ctx)
	if err != nil {
		if ctx.Err() != nil {
			// Stopped while joining (a worker of the same name that
			// died a moment ago is waited for): nothing was held, so
			// this is a clean stop.
			s.log.Info("worker stopped before it joined", "err", err)
			return nil
		}
		return err
	}
	defer mem.close()
	s.log.Info("worker joined", "partitions", s.cfg.Partitions, "lease", s.cfg.Lease, "interval", s.cfg.Interval)
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	// The first look waits one interval, so that workers started together
	// see each other before any takes a share.
	first := true
	var runErr error
loop:
	for {
		if err := s.look(ctx, mem, first); err != nil {
			runErr = err
			break
		}
		first = false
		select {
		case <-ctx.Done():
			break loop
		case <-t.C:
		}
	}
	s.stopAll()
	if err := mem.leave(); err != nil && runErr == nil {
		s.log.Warn("leaving the table of workers failed; the others count this worker out when its heartbeat runs out", "err", err)
	}
	s.log.Info("worker left")
	return runErr
}

// look renews the heartbeat, reads the other workers and acts on the
// balancing rule. Only ErrWorkerExists is returned.
func (s *Supervisor) look(ctx context.Context, mem *members, join bool) error {
	rows, err := mem.beat(ctx, s.claims())
	if errors.Is(err, ErrWorkerExists) {
		s.log.Error("another worker of the same name took this worker's place: stopping", "err", err)
		return err
	}
	s.mu.Lock()
	if err != nil {
		s.viewOK, s.viewErr = false, err.Error()
	} else {
		s.view, s.viewAt, s.viewOK, s.viewErr = rows, time.Now(), true, ""
	}
	rows = s.view
	ok := s.viewOK
	s.mu.Unlock()
	if err != nil {
		// Without the table this worker keeps what it holds (its stores
		// need the same database) and takes nothing.
		s.log.Warn("heartbeat failed: keeping the partitions held, taking none", "err", err)
		return nil
	}
	if join || !ok || ctx.Err() != nil {
		return nil
	}
	var others []worker
	dead := map[int]bool{} // partitions claimed by dead workers
	for _, r := range rows {
		if r.name == s.cfg.Worker {
			continue
		}
		var ps []int
		for _, c := range r.claims {
			ps = append(ps, c.Partition)
			if !r.alive {
				dead[c.Partition] = true
			}
		}
		if r.alive {
			others = append(others, worker{name: r.name, parts: ps})
		}
	}
	now := time.Now()
	var mine, leaving []int
	for _, pt := range s.parts {
		pt.mu.Lock()
		switch pt.state {
		case Starting, Running:
			mine = append(mine, pt.index)
		case Stopping:
			leaving = append(leaving, pt.index)
		}
		pt.mu.Unlock()
	}
	avoid := func(p int) bool {
		pt := s.parts[p]
		pt.mu.Lock()
		defer pt.mu.Unlock()
		return pt.state != Standby || now.Before(pt.retryAt) || !pt.leftAt.IsZero() && now.Sub(pt.leftAt) < 3*s.cfg.Interval
	}
	pl := balance(s.cfg.Worker, mine, leaving, others, s.cfg.Partitions, avoid)
	s.mu.Lock()
	s.plan = pl
	s.mu.Unlock()
	for _, p := range pl.release {
		s.release(p, fmt.Sprintf("balancing: %d workers, this one holds %d, the share is %d to %d", len(others)+1, len(mine), pl.floor, pl.ceil))
	}
	for _, p := range pl.take {
		// A partition of a dead worker is taken as soon as its lease
		// runs out: the attempt waits for it.
		wait := s.cfg.Interval
		if dead[p] {
			wait = s.cfg.Lease + s.cfg.Interval
		}
		s.take(p, wait)
	}
	return nil
}

// claims returns what this worker holds or is taking, for its heartbeat.
func (s *Supervisor) claims() []claim {
	out := []claim{}
	for _, pt := range s.parts {
		pt.mu.Lock()
		if pt.state != Standby {
			out = append(out, claim{Partition: pt.index, Token: pt.token, State: string(pt.state)})
		}
		pt.mu.Unlock()
	}
	return out
}

// take starts an attempt to take partition p, whose store open waits up
// to wait for another owner's lease to end.
func (s *Supervisor) take(p int, wait time.Duration) {
	pt := s.parts[p]
	pt.mu.Lock()
	if pt.state != Standby {
		pt.mu.Unlock()
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	pt.state, pt.since, pt.token = Starting, time.Now(), 0
	pt.cancel, pt.done = cancel, make(chan struct{})
	done := pt.done
	pt.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(done)
		defer cancel()
		err := s.runPartition(ctx, pt, wait)
		s.ended(pt, err)
	}()
}

// release makes partition p's server stop cleanly, and the lease go.
func (s *Supervisor) release(p int, why string) {
	pt := s.parts[p]
	pt.mu.Lock()
	defer pt.mu.Unlock()
	if pt.state != Running && pt.state != Starting {
		return
	}
	s.log.Info("giving a partition up", "partition", p, "token", pt.token, "why", why)
	pt.state = Stopping
	pt.cancel()
}

// stopAll stops every partition and waits for them.
func (s *Supervisor) stopAll() {
	for _, pt := range s.parts {
		s.release(pt.index, "the worker stops")
	}
	s.wg.Wait()
}

// runPartition takes partition p and runs its server until ctx is done
// (a clean stop) or the server stops by itself.
func (s *Supervisor) runPartition(ctx context.Context, pt *part, wait time.Duration) error {
	p := pt.index
	src := &partitionSource{}
	pp := Partition{
		Index: p,
		Feed: framework.FeedConfig{Name: s.cfg.FeedName, Source: src, Overload: framework.OverloadConfig{Policy: framework.Pause},
			Idle: sourceIdle},
		Store:     pt.spec,
		StoreName: pt.storeName,
	}
	fcfg, reg, err := s.cfg.Partition(pp)
	if err != nil {
		return fmt.Errorf("cluster: partition %d: make its server: %w", p, err)
	}
	group, err := s.checkPartitionConfig(&fcfg, pp, wait)
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		return nil
	}
	srv, err := framework.New(fcfg, reg)
	if errors.Is(err, state.ErrLocked) {
		return &heldError{err}
	}
	if err != nil {
		return fmt.Errorf("cluster: partition %d: %w", p, err)
	}
	st, err := srv.Store(group)
	if err != nil {
		return errors.Join(err, srv.Stop(context.Background()))
	}
	lease, ok := state.LeaseOf(st)
	if !ok {
		return errors.Join(configError(p, "the store of group %q is not a PostgreSQL store", group), srv.Stop(context.Background()))
	}
	nsrc, err := natsfeed.New(s.sourceConfig(p, lease.Token))
	if err == nil && !src.set(nsrc) {
		err = errors.New("cluster: the partition's source was closed before it was made")
	}
	if err != nil {
		return errors.Join(fmt.Errorf("cluster: partition %d: %w", p, err), srv.Stop(context.Background()))
	}
	retention := s.retention(ctx)
	if retention == jetstream.WorkQueuePolicy {
		// A work queue takes one consumer per subject: the old one goes
		// first. Its messages stay until acknowledged.
		s.dropOldConsumers(ctx, p, lease.Token)
	} else {
		// Under interest retention a partition without a consumer would
		// lose its messages: the old ones go once the new one exists.
		src.opened = func() {
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.dropOldConsumers(context.Background(), p, lease.Token)
			}()
		}
	}
	pt.mu.Lock()
	if pt.state == Starting {
		pt.state = Running
	}
	pt.token, pt.since, pt.srv, pt.src, pt.st = lease.Token, time.Now(), srv, nsrc, st
	pt.takeovers++
	pt.mu.Unlock()
	s.takeovers.Add(1)
	s.log.Info("partition taken", "partition", p, "store", pt.storeName, "token", lease.Token, "commits", lease.Commits)
	s.emit(Event{Kind: Acquired, Partition: p, Token: lease.Token})

	// The lease watch: a lease lost while the store is idle (found by its
	// renewal) stops the server too, rather than waiting for a commit.
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var lost atomic.Pointer[error]
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		t := time.NewTicker(s.cfg.Interval)
		defer t.Stop()
		for {
			select {
			case <-srv.Done():
				return
			case <-runCtx.Done():
				return
			case <-t.C:
			}
			if l, _ := state.LeaseOf(st); l.Lost != nil && !errors.Is(l.Lost, state.ErrClosed) {
				err := l.Lost
				lost.Store(&err)
				cancel()
				return
			}
		}
	}()
	runErr := srv.Run(runCtx)
	cancel()
	<-watchDone
	// The lease's end says why, first: a source that stopped on the new
	// owner's deletion of its consumer, or a failed final commit, is the
	// take-over's consequence.
	l, _ := state.LeaseOf(st)
	why := l.Lost
	if e := lost.Load(); e != nil {
		why = *e
	}
	if why != nil && !errors.Is(why, state.ErrClosed) && (runErr == nil || !errors.Is(runErr, why)) {
		runErr = errors.Join(fmt.Errorf("cluster: partition %d: the store's lease was lost: %w", p, why), runErr)
	}
	return runErr
}

// checkPartitionConfig checks the rules of a partition's framework config
// and sets what the supervisor sets. It returns the name of the group that
// keeps the partition's state.
func (s *Supervisor) checkPartitionConfig(fc *framework.Config, pp Partition, wait time.Duration) (string, error) {
	p := pp.Index
	n := 0
	for _, f := range fc.Feeds {
		if f.Source == pp.Feed.Source {
			n++
			if f.Name != pp.Feed.Name {
				return "", configError(p, "the partition's feed is named %q, not %q (keep p.Feed as it is)", f.Name, pp.Feed.Name)
			}
		}
	}
	if n != 1 {
		return "", configError(p, "Feeds hold the partition's feed %d times: put p.Feed in them once", n)
	}
	if fc.UntilSettled {
		return "", configError(p, "UntilSettled is set: a partition's server runs until the supervisor stops it")
	}
	group := ""
	fc.Groups = slices.Clone(fc.Groups)
	for i := range fc.Groups {
		g := &fc.Groups[i]
		if g.Store == "" {
			continue
		}
		if g.Store != pp.Store {
			return "", configError(p, "group %q keeps its state in %q: a partition's state must live in its store p.Store, which moves with the partition (use namespaces for several processors)", g.Name, redact(g.Store))
		}
		if group != "" {
			return "", configError(p, "groups %q and %q both have the partition's store", group, g.Name)
		}
		group = g.Name
		var o state.Options
		if g.StoreOptions != nil {
			o = *g.StoreOptions
		}
		o.LockTimeout = max(wait, time.Nanosecond)
		if o.Logger == nil {
			o.Logger = s.partitionLogger(p)
		}
		g.StoreOptions = &o
	}
	if group == "" {
		return "", configError(p, "no group keeps its state in the partition's store: set Store: p.Store on the group whose processors apply the partition")
	}
	if fc.Logger == nil {
		fc.Logger = s.partitionLogger(p)
	}
	return group, nil
}

func (s *Supervisor) partitionLogger(p int) *slog.Logger { return s.log.With("partition", p) }

// retention returns the stream's retention policy (Limits when the stream
// cannot be read now: the source waits for it).
func (s *Supervisor) retention(ctx context.Context) jetstream.RetentionPolicy {
	c, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := s.cfg.JetStream.Stream(c, s.cfg.Stream)
	if err != nil {
		return jetstream.LimitsPolicy
	}
	return st.CachedInfo().Config.Retention
}

// dropOldConsumers deletes partition p's consumers of owners older than
// lease token: a paused old owner's pulls then find no consumer, and its
// source stops (natsfeed.ErrConsumer). Best effort: a consumer left is
// only a cost.
func (s *Supervisor) dropOldConsumers(ctx context.Context, p int, token int64) {
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := s.cfg.JetStream.Stream(c, s.cfg.Stream)
	if err != nil {
		s.log.Warn("cannot list the partition's old consumers", "partition", p, "err", err)
		return
	}
	prefix := s.cfg.consumerPrefix(p)
	names := st.ConsumerNames(c)
	var old []string
	for name := range names.Name() {
		if rest, ok := strings.CutPrefix(name, prefix); ok {
			if t, err := strconv.ParseInt(rest, 10, 64); err == nil && t < token {
				old = append(old, name)
			}
		}
	}
	if err := names.Err(); err != nil {
		s.log.Warn("cannot list the partition's old consumers", "partition", p, "err", err)
	}
	for _, name := range old {
		if err := st.DeleteConsumer(c, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			s.log.Warn("cannot delete an old owner's consumer", "partition", p, "consumer", name, "err", err)
			continue
		}
		s.log.Info("deleted an old owner's consumer", "partition", p, "consumer", name, "token", token)
	}
}

// maxBackoff bounds the wait between two attempts on a partition that
// failed.
const maxBackoff = 30 * time.Second

// ended records the end of an attempt on pt.
func (s *Supervisor) ended(pt *part, err error) {
	now := time.Now()
	var held *heldError
	pt.mu.Lock()
	was, token := pt.state, pt.token
	ran := pt.srv != nil
	pt.state, pt.srv, pt.src, pt.st, pt.cancel = Standby, nil, nil, nil, nil
	if was == Stopping {
		pt.leftAt = now
	}
	var ev *Event
	switch {
	case err == nil:
		pt.fails = 0
		if ran {
			pt.releases++
			ev = &Event{Kind: Released, Partition: pt.index, Token: token}
		}
	case errors.As(err, &held):
		// Held by another owner: tried again at a later look.
		pt.retryAt = now.Add(s.cfg.Interval)
	default:
		pt.fails++
		pt.lastErr, pt.errAt = err.Error(), now
		if ran {
			pt.losses++
		}
		back := s.cfg.Interval << min(pt.fails-1, 10)
		if errors.Is(err, state.ErrFenced) {
			back = s.cfg.Interval // another owner has it: nothing to wait out
		}
		pt.retryAt = now.Add(min(back, max(maxBackoff, s.cfg.Lease)))
		ev = &Event{Kind: Lost, Partition: pt.index, Token: token, Err: err}
	}
	retryAt := pt.retryAt
	pt.mu.Unlock()
	switch {
	case err == nil && ran:
		s.releases.Add(1)
		s.log.Info("partition given up", "partition", pt.index, "token", token)
	case ev != nil && errors.Is(err, state.ErrFenced):
		s.losses.Add(1)
		s.fenced.Add(1)
		s.log.Warn("partition lost: another owner took its lease over (this worker was paused or cut off longer than the lease); its late commits were refused", "partition", pt.index, "token", token, "err", err)
	case ev != nil:
		s.losses.Add(1)
		s.log.Error("partition stopped on an error; it is tried again", "partition", pt.index, "token", token, "err", err, "retry_at", retryAt)
	}
	if ev != nil {
		s.emit(*ev)
	}
}

// emit tells OnEvent of ev.
func (s *Supervisor) emit(ev Event) {
	if s.cfg.OnEvent == nil {
		return
	}
	ev.Time = time.Now()
	s.evMu.Lock()
	defer s.evMu.Unlock()
	s.cfg.OnEvent(ev)
}

// Done returns a channel that is closed once Run has returned.
func (s *Supervisor) Done() <-chan struct{} { return s.stopCh }
