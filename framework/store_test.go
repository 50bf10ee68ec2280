package framework_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/feed"
	"github.com/tidemark-go/tidemark/feed/pointer"
	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/state"
	"github.com/tidemark-go/tidemark/vfs"
)

// resumable is a memSource that resumes from the stores' points as a file
// source does: at the lowest position covered, never above its pointer.
type resumable struct {
	*memSource
	mu     sync.Mutex
	points []feed.ResumePoint
	calls  int
}

func (r *resumable) ResumeFrom(points []feed.ResumePoint) error {
	r.mu.Lock()
	r.points = append([]feed.ResumePoint(nil), points...)
	r.calls++
	r.mu.Unlock()
	floor := r.memSource.committedPos()
	for _, p := range points {
		switch {
		case !p.Found || p.Lineage.Epoch != r.memSource.epoch:
			floor = 0
		case p.Lineage.Position < floor:
			floor = p.Lineage.Position
		}
	}
	m := r.memSource
	m.mu.Lock()
	defer m.mu.Unlock()
	m.next = 0
	for m.next < len(m.ends) && m.ends[m.next] <= floor {
		m.next++
	}
	return nil
}

func (r *resumable) got() ([]feed.ResumePoint, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.points, r.calls
}

// counter counts the lines it applies in its group's store, exactly once.
type counter struct {
	feed string
	ns   string
	st   state.Namespace
	// fail, when set, decides an error for a line before it is applied.
	fail    func(d tidemark.Delivery) error
	handled atomic.Int64
	out     string // an output file to write each line to, if set
}

func (c *counter) Start(_ context.Context, fc *framework.Context) error {
	st, err := fc.Store()
	if err != nil {
		return err
	}
	c.st = st.Namespace(c.ns)
	if c.out != "" {
		if _, err := st.Output(c.out); err != nil {
			return err
		}
	}
	return fc.Subscribe(c.feed)
}

func (c *counter) Handle(ctx context.Context, d tidemark.Delivery, line []byte) error {
	c.handled.Add(1)
	if c.fail != nil {
		if err := c.fail(d); err != nil {
			return err
		}
	}
	_, err := c.st.Apply(ctx, d, func(tx *state.Tx) error {
		if c.out != "" {
			if _, err := tx.Output(c.out).Write(append(line, '\n')); err != nil {
				return err
			}
		}
		_, err := tx.AddInt64([]byte("count"), 1)
		return err
	})
	return err
}

// readCount opens the store in dir and returns its count and the applied
// record of feed in namespace ns.
func readCount(t *testing.T, dir, ns, feedName string) (int64, tidemark.Lineage, bool) {
	t.Helper()
	st, err := state.OpenDir(dir, &state.Options{Logger: discard()})
	require.NoError(t, err)
	defer st.Close()
	var n int64
	require.NoError(t, st.Namespace(ns).View(func(tx *state.Tx) error {
		var err error
		n, err = tx.GetInt64([]byte("count"))
		return err
	}))
	l, ok := st.Namespace(ns).Applied(feedName)
	return n, l, ok
}

// seedStore applies lines 1..n of src's epoch to a new store in dir, as a
// run would have, and closes it.
func seedStore(t *testing.T, dir, ns string, src *memSource, n int) {
	t.Helper()
	st, err := state.Open("bbolt:"+dir, &state.Options{Logger: discard(), Unbound: true})
	require.NoError(t, err)
	for i := 1; i <= n; i++ {
		d := tidemark.Delivery{Feed: "orders", Epoch: src.epoch, Position: src.pos(i), Seq: uint64(i)}
		_, err := st.Namespace(ns).Apply(context.Background(), d, func(tx *state.Tx) error {
			_, err := tx.AddInt64([]byte("count"), 1)
			return err
		})
		require.NoError(t, err)
	}
	require.NoError(t, st.Close())
}

func storeCfg(src feed.Source, spec string) framework.Config {
	return framework.Config{
		Feeds: []framework.FeedConfig{{Name: "orders", Source: src, Overload: framework.OverloadConfig{Policy: framework.Pause},
			Idle: framework.Backoff{Max: 5 * time.Millisecond}}},
		Groups:       []framework.GroupConfig{{Name: "g", Processors: []string{"c"}, Store: spec}},
		Logger:       discard(),
		UntilSettled: true,
	}
}

func run(t *testing.T, cfg framework.Config, procs framework.Processors) error {
	t.Helper()
	s, err := framework.New(cfg, procs)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	err = s.Run(ctx)
	select {
	case <-s.Done():
	default:
		t.Fatal("Run returned and Done is not closed")
	}
	return err
}

// The README's smallest exactly-once processor: the framework binds its
// store, flushes it when the group drains and closes it; a clean stop
// leaves the pointer at the end, so the next run re-delivers nothing.
// (Before, the README's snippet stopped the server, then closed the store:
// the pointer stayed a whole batch behind.)
func TestGroupStoreCleanStopCommitsEverything(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	src := newMemSource(500)
	src.once = true
	cfg := storeCfg(&resumable{memSource: src}, "bbolt:"+dir)
	// Only a flush commits: the stop's flush is what makes the lines durable.
	cfg.Groups[0].StoreOptions = &state.Options{BatchSize: 1 << 20, BatchInterval: time.Hour}
	c := &counter{feed: "orders"}
	require.NoError(t, run(t, cfg, framework.Processors{"c": c}))
	require.Equal(t, src.pos(500), src.committedPos(), "the clean stop commits every line")
	n, l, ok := readCount(t, dir, "", "orders")
	require.Equal(t, int64(500), n)
	require.True(t, ok)
	require.Equal(t, src.pos(500), l.Position)

	// The restart reads nothing again.
	again := src.restart()
	c2 := &counter{feed: "orders"}
	require.NoError(t, run(t, storeCfg(&resumable{memSource: again}, "bbolt:"+dir), framework.Processors{"c": c2}))
	require.Zero(t, c2.handled.Load(), "a clean stop re-delivers nothing")
}

// The store is the truth: a store behind the pointer (restored from an
// older backup, its last batches lost) makes the feed resume from the
// store's position, not the pointer's; a store with no record of the feed
// (deleted) makes it read from its start. Every line ends up applied
// exactly once.
func TestFeedResumesFromTheStore(t *testing.T) {
	for _, tc := range []struct {
		name    string
		seeded  int // lines the store holds
		pointer int // the line the pointer is after
		resume  framework.ResumeMode
		found   bool
		want    int64 // the count at the end
		handled int64 // lines the processor is given
	}{
		{name: "store behind the pointer", seeded: 100, pointer: 300, found: true, want: 500, handled: 400},
		{name: "store with no record", seeded: 0, pointer: 300, found: false, want: 500, handled: 500},
		{name: "store ahead of the pointer", seeded: 400, pointer: 300, found: true, want: 500, handled: 200},
		{name: "resume from the pointer", seeded: 100, pointer: 300, resume: framework.ResumeFromPointer, want: 300, handled: 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "state")
			src := newMemSource(500)
			src.once = true
			if tc.seeded > 0 {
				seedStore(t, dir, "", src, tc.seeded)
			}
			src.committed = src.pos(tc.pointer)
			r := &resumable{memSource: src.restart()}
			cfg := storeCfg(r, "bbolt:"+dir)
			cfg.Groups[0].Resume = tc.resume
			c := &counter{feed: "orders"}
			require.NoError(t, run(t, cfg, framework.Processors{"c": c}))
			n, _, _ := readCount(t, dir, "", "orders")
			require.Equal(t, tc.want, n)
			require.Equal(t, tc.handled, c.handled.Load())
			points, calls := r.got()
			if tc.resume == framework.ResumeFromPointer {
				require.Zero(t, calls, "a group resuming from the pointer gives no point")
				return
			}
			require.Equal(t, 1, calls)
			require.Len(t, points, 1)
			require.Equal(t, tc.found, points[0].Found)
			require.Contains(t, points[0].Holder, "group g")
			if tc.found {
				require.Equal(t, src.pos(tc.seeded), points[0].Lineage.Position)
			}
		})
	}
}

// Every namespace of a store with a record of the feed is a point: the
// feed resumes from the lowest.
func TestResumePointsPerNamespace(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	src := newMemSource(50)
	src.once = true
	seedStore(t, dir, "a", src, 40)
	seedStore2 := func() {
		st, err := state.OpenDir(dir, &state.Options{Logger: discard(), Unbound: true})
		require.NoError(t, err)
		for i := 1; i <= 10; i++ {
			d := tidemark.Delivery{Feed: "orders", Epoch: src.epoch, Position: src.pos(i), Seq: uint64(i)}
			_, err := st.Namespace("b").Apply(context.Background(), d, func(*state.Tx) error { return nil })
			require.NoError(t, err)
		}
		require.NoError(t, st.Close())
	}
	seedStore2()
	src.committed = src.pos(50)
	r := &resumable{memSource: src.restart()}
	cfg := storeCfg(r, dir)
	c := &counter{feed: "orders", ns: "a"}
	require.NoError(t, run(t, cfg, framework.Processors{"c": c}))
	points, _ := r.got()
	require.Len(t, points, 2)
	require.Equal(t, src.pos(40), points[0].Lineage.Position)
	require.Equal(t, src.pos(10), points[1].Lineage.Position)
	require.Equal(t, int64(40), c.handled.Load(), "lines 11..50 are delivered again")
	n, _, _ := readCount(t, dir, "a", "orders")
	require.Equal(t, int64(50), n, "namespace a skips 11..40 and applies 41..50")
}

// A re-readable source that cannot resume from the stores is refused for
// a group with a store: a store behind its pointer would miss lines.
func TestSourceWithoutResumerIsRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	src := newMemSource(5)
	s, err := framework.New(storeCfg(src, "bbolt:"+dir), framework.Processors{"c": &counter{feed: "orders"}})
	require.NoError(t, err)
	err = s.Start(context.Background())
	require.ErrorIs(t, err, framework.ErrInvalidConfig)
	require.ErrorContains(t, err, "feed.Resumer")
	<-s.Done()
	// The store was closed: it opens again at once.
	st, err := state.OpenDir(dir, &state.Options{Logger: discard(), LockTimeout: time.Second})
	require.NoError(t, err)
	require.NoError(t, st.Close())

	// A source that cannot re-read has nothing to resume.
	src = newMemSource(5)
	src.reread, src.once = false, true
	require.NoError(t, run(t, storeCfg(src, "bbolt:"+dir), framework.Processors{"c": &counter{feed: "orders"}}))
}

func TestStoreConfigMistakes(t *testing.T) {
	dir := t.TempDir()
	// A processor that asks for a store its group does not have.
	cfg := storeCfg(newMemSource(1), "")
	s, err := framework.New(cfg, framework.Processors{"c": &counter{feed: "orders"}})
	require.NoError(t, err)
	err = s.Start(context.Background())
	require.ErrorIs(t, err, framework.ErrNoStore)
	require.ErrorContains(t, err, `group "g"`)

	// Two groups on one store.
	cfg = storeCfg(newMemSource(1), "bbolt:"+filepath.Join(dir, "s"))
	cfg.Groups = append(cfg.Groups, framework.GroupConfig{Name: "h", Processors: []string{"d"}, Store: filepath.Join(dir, "s")})
	_, err = framework.New(cfg, framework.Processors{"c": &counter{feed: "orders"}, "d": &counter{feed: "orders"}})
	require.ErrorIs(t, err, framework.ErrInvalidConfig)
	require.ErrorContains(t, err, "same store")
	// The first group's store was closed again.
	st, err := state.OpenDir(filepath.Join(dir, "s"), &state.Options{Logger: discard(), LockTimeout: time.Second})
	require.NoError(t, err)
	require.NoError(t, st.Close())

	// Options without a store.
	cfg = storeCfg(newMemSource(1), "")
	cfg.Groups[0].StoreOptions = &state.Options{Sync: true}
	_, err = framework.New(cfg, framework.Processors{"c": &counter{feed: "orders"}})
	require.ErrorIs(t, err, framework.ErrInvalidConfig)

	// A store that cannot be opened.
	cfg = storeCfg(newMemSource(1), "nosuch:"+dir)
	_, err = framework.New(cfg, framework.Processors{"c": &counter{feed: "orders"}})
	require.ErrorIs(t, err, state.ErrUnknownBackend)
	require.ErrorContains(t, err, `group "g"`)
}

// A processor's Fatal error stops the server without draining: Run returns
// it, the line and those after it are not committed.
func TestFatalErrorStopsRun(t *testing.T) {
	src := newMemSource(200)
	r := &resumable{memSource: src}
	cfg := storeCfg(r, "bbolt:"+filepath.Join(t.TempDir(), "state"))
	cfg.UntilSettled = false
	boom := errors.New("the ledger database is gone")
	c := &counter{feed: "orders", fail: func(d tidemark.Delivery) error {
		if d.Position == src.pos(50) {
			return framework.Fatal(boom)
		}
		return nil
	}}
	err := run(t, cfg, framework.Processors{"c": c})
	require.ErrorIs(t, err, boom)
	require.ErrorContains(t, err, `processor "c" of group "g" on feed "orders"`)
	require.Less(t, src.committedPos(), src.pos(50), "the failed line is never committed")
	require.Equal(t, int64(50), c.handled.Load(), "no line is handled after the fatal one")
}

// A damaged store (a value that fails its checksum, a backend page its
// own checks refuse: state.ErrCorrupt) is fatal: no retry can heal it, and
// skipping the line would lose it. Run returns the store's error, the
// failure policy sees nothing.
func TestCorruptStoreIsFatal(t *testing.T) {
	src := newMemSource(100)
	cfg := storeCfg(&resumable{memSource: src}, "bbolt:"+filepath.Join(t.TempDir(), "state"))
	cfg.UntilSettled = false
	var rejected atomic.Int64
	cfg.Groups[0].Failure = framework.FailurePolicy{Retries: 2, Backoff: time.Millisecond, OnReject: func(framework.Rejection) { rejected.Add(1) }}
	c := &counter{feed: "orders", fail: func(d tidemark.Delivery) error {
		if d.Position == src.pos(20) {
			return fmt.Errorf("read balance: %w", &state.CorruptError{Backend: state.Bolt, Dir: "x", Record: "the value", Detail: "bad"})
		}
		return nil
	}}
	err := run(t, cfg, framework.Processors{"c": c})
	require.ErrorIs(t, err, state.ErrCorrupt)
	require.Zero(t, rejected.Load(), "a damaged store is no line's fault")
	require.Less(t, src.committedPos(), src.pos(20), "the failed line is never committed")
}

// A Permanent error skips the line at once, without the retries.
func TestPermanentErrorIsNotRetried(t *testing.T) {
	src := newMemSource(10)
	src.once = true
	cfg := storeCfg(&resumable{memSource: src}, "bbolt:"+filepath.Join(t.TempDir(), "state"))
	var rejected []int64
	cfg.Groups[0].Failure = framework.FailurePolicy{Retries: 5, Backoff: time.Hour, OnReject: func(r framework.Rejection) {
		rejected = append(rejected, r.Delivery.Position)
	}}
	c := &counter{feed: "orders", fail: func(d tidemark.Delivery) error {
		if d.Position == src.pos(3) {
			return framework.Permanent(errors.New("no such account"))
		}
		return nil
	}}
	require.NoError(t, run(t, cfg, framework.Processors{"c": c}))
	require.Equal(t, []int64{src.pos(3)}, rejected)
	require.Equal(t, int64(10), c.handled.Load(), "one attempt per line")
}

// A store whose commit fails (here: its output file cannot be written)
// is fatal: Run returns the store's error and nothing after the last
// durable batch is committed.
func TestStoreFailureIsFatal(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	src := newMemSource(2000)
	cfg := storeCfg(&resumable{memSource: src}, "bbolt:"+dir)
	cfg.UntilSettled = false
	var writes atomic.Int64
	cfg.Groups[0].StoreOptions = &state.Options{BatchSize: 100, FS: failOutputAfter(&writes, 3)}
	c := &counter{feed: "orders", out: "out.csv"}
	err := run(t, cfg, framework.Processors{"c": c})
	require.ErrorIs(t, err, state.ErrFailed)
	_, l, _ := readCount(t, dir, "", "orders")
	require.LessOrEqual(t, src.committedPos(), l.Position, "the pointer never passes what the store holds")
}

// Run with a context: it runs until the context ends, then stops cleanly.
func TestRunUntilContextDone(t *testing.T) {
	src := newMemSource(100)
	cfg := storeCfg(&resumable{memSource: src}, "bbolt:"+filepath.Join(t.TempDir(), "state"))
	cfg.UntilSettled = false
	c := &counter{feed: "orders"}
	s, err := framework.New(cfg, framework.Processors{"c": c})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.Run(ctx) }()
	waitFor(t, "100 lines handled", func() bool { return c.handled.Load() == 100 })
	cancel()
	require.NoError(t, <-errc)
	require.NoError(t, s.Err())
	require.Equal(t, src.pos(100), src.committedPos())

	// A run until settled that its context ends first says so.
	src = newMemSource(0) // tails forever: never settles... once it has no line, it is caught up
	src.appendN(1)
	cfg = storeCfg(&resumable{memSource: src}, "bbolt:"+filepath.Join(t.TempDir(), "state2"))
	block := make(chan struct{})
	c = &counter{feed: "orders", fail: func(tidemark.Delivery) error { <-block; return nil }}
	s, err = framework.New(cfg, framework.Processors{"c": c})
	require.NoError(t, err)
	ctx, cancel = context.WithCancel(context.Background())
	go func() { errc <- s.Run(ctx) }()
	waitFor(t, "the line handled", func() bool { return c.handled.Load() == 1 })
	cancel()
	close(block)
	err = <-errc
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorContains(t, err, "before every feed settled")
}

// A dead group (its restart failed) ends Run with an error.
func TestDeadGroupIsFatalUnderRun(t *testing.T) {
	src := newMemSource(10)
	var starts atomic.Int32
	p := &recProc{feeds: []string{"orders"}, startFn: func(*framework.Context) error {
		if starts.Add(1) > 1 {
			return errors.New("cannot start again")
		}
		return nil
	}}
	cfg := framework.Config{
		Feeds:  []framework.FeedConfig{{Name: "orders", Source: src, Overload: framework.OverloadConfig{Policy: framework.Pause}}},
		Groups: []framework.GroupConfig{{Name: "g", Processors: []string{"p"}}},
		Logger: discard(),
	}
	s, err := framework.New(cfg, framework.Processors{"p": p})
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() { errc <- s.Run(context.Background()) }()
	waitFor(t, "10 lines", func() bool { return p.count() == 10 })
	require.Error(t, s.RestartGroup(context.Background(), "g"))
	err = <-errc
	require.ErrorContains(t, err, `processor group "g" is dead`)
	require.ErrorContains(t, err, "cannot start again")
}

// A run until settled on an input that does not exist ends with an error
// naming it, instead of waiting forever.
func TestRunUntilSettledOnAMissingInput(t *testing.T) {
	dir := t.TempDir()
	cfg := fileCfg(filepath.Join(dir, "no-such-orders.csv"))
	cfg.UntilSettled = true
	err := run(t, cfg, framework.Processors{"p": &recProc{feeds: []string{"orders"}}})
	require.ErrorIs(t, err, framework.ErrInputMissing)
	require.ErrorContains(t, err, "no-such-orders.csv")
}

// A nil Logger is slog.Default(): the warning of a feed without an
// explicit overload policy reaches it.
func TestNilLoggerIsSlogDefault(t *testing.T) {
	var buf logBuf
	old := slog.Default()
	slog.SetDefault(buf.logger())
	defer slog.SetDefault(old)
	src := newMemSource(3)
	src.once = true
	cfg := framework.Config{
		Feeds:        []framework.FeedConfig{{Name: "orders", Source: src}},
		Groups:       []framework.GroupConfig{{Name: "g", Processors: []string{"p"}}},
		UntilSettled: true,
	}
	require.NoError(t, run(t, cfg, framework.Processors{"p": &recProc{feeds: []string{"orders"}}}))
	require.True(t, buf.contains("no explicit overload policy"), "log: %s", buf.String())
	require.True(t, strings.Contains(buf.String(), "server stopped"))
}

// failOutputAfter is a file system whose writes to output files fail after
// the first n, as a full disk would.
func failOutputAfter(writes *atomic.Int64, n int64) vfs.FS {
	return vfs.Inject(vfs.Default(), func(op vfs.Op, path string) error {
		if op == vfs.OpWrite && filepath.Base(path) == "out.csv" && writes.Add(1) > n {
			return errors.New("injected: no space left on device")
		}
		return nil
	})
}

// permanentPollErr is a source error that retrying cannot fix.
type permanentPollErr struct{}

func (permanentPollErr) Error() string   { return "the stream lost messages 10..20" }
func (permanentPollErr) Permanent() bool { return true }

type failingSource struct{ *memSource }

func (f failingSource) Poll(ctx context.Context, items []feed.Item) (int, error) {
	if f.memSource.committedPos() >= f.memSource.pos(5) {
		return 0, fmt.Errorf("natsfeed: %w", permanentPollErr{})
	}
	return f.memSource.Poll(ctx, items[:1])
}

// A source's permanent error stops a run: Run returns it instead of
// retrying forever.
func TestPermanentSourceErrorIsFatal(t *testing.T) {
	src := newMemSource(10)
	cfg := framework.Config{
		Feeds:        []framework.FeedConfig{{Name: "orders", Source: failingSource{src}, Overload: framework.OverloadConfig{Policy: framework.Pause}}},
		Groups:       []framework.GroupConfig{{Name: "g", Processors: []string{"p"}}},
		Logger:       discard(),
		UntilSettled: true,
	}
	err := run(t, cfg, framework.Processors{"p": &recProc{feeds: []string{"orders"}}})
	require.ErrorContains(t, err, "lost messages 10..20")
	require.ErrorContains(t, err, `feed "orders" cannot read its source`)
}

// A store's record of an epoch that began on a short file (its
// fingerprint covers fewer than 4096 bytes) still recognises that file
// once it has grown: a lost pointer file does not make the lines it holds
// apply a second time.
func TestLineageOfAShortFileAfterThePointerIsLost(t *testing.T) {
	dir := t.TempDir()
	input, data := filepath.Join(dir, "orders.csv"), filepath.Join(dir, "state")
	writeLines(t, input, 1, 10) // 130 bytes: the epoch's fingerprint covers them only
	require.NoError(t, runOrders(input, data))
	writeLines(t, input, 11, 500) // now far past 4096 bytes
	require.NoError(t, os.Remove(pointer.Path(input, "")))
	require.NoError(t, runOrders(input, data))

	st, err := state.OpenDir(data, &state.Options{Logger: discard()})
	require.NoError(t, err)
	defer st.Close()
	require.NoError(t, st.View(func(tx *state.Tx) error {
		for i := 1; i <= 500; i++ {
			n, err := tx.Bucket("counts").GetInt64([]byte(fmt.Sprintf("%06d,entry", i)))
			if err != nil {
				return err
			}
			if n != 1 {
				return fmt.Errorf("line %d counted %d times", i, n)
			}
		}
		return nil
	}))
}
