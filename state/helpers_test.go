package state

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/checkpoint"
	"github.com/tidemark-go/tidemark/vfs"
)

// backend is one row of the conformance table: how to open a store of that
// backend in a directory. A new backend adds a row.
type backend struct {
	name string
	open func(dir string, o *Options) (Store, error)
	// remote is true for a backend whose store does not live in the
	// directory: the directory only names it (PostgreSQL: the store of
	// that name in a schema of the test server), and it has no STORE
	// file, no output files and no file lock.
	remote bool
}

func backends() []backend {
	return []backend{
		{Bolt, OpenBolt, false},
		{Pebble, OpenPebble, false},
		{Postgres, openPGDir, true},
	}
}

// forEachLocalBackend runs fn as a subtest per backend whose store lives
// in its directory: for tests of its files.
func forEachLocalBackend(t *testing.T, fn func(t *testing.T, be backend)) {
	forEachBackend(t, func(t *testing.T, be backend) {
		if !be.remote {
			fn(t, be)
		}
	})
}

// readOutput returns the committed bytes of output name of the store in
// dir (open or closed): the file, or the rows of a remote store.
func readOutput(t testing.TB, be backend, dir, name string) []byte {
	t.Helper()
	if be.remote {
		return pgReadOutput(t, dir, name)
	}
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return b
}

// outputFault makes the commits of the store in dir fail as they write
// output name: the failAt-th write (op, of the file; for a remote store, of
// a chunk of it) and, if sticky, every later one; err is the error (nil:
// an I/O error, or vfs.ErrNoSpace: a full disk). For the local backends it
// sets o.FS. It returns the function that removes the fault (call it
// before a reopen), and the test of an error for the injected one.
func outputFault(t testing.TB, be backend, dir string, o *Options, name string, op vfs.Op, failAt int, sticky bool, err error) (heal func(), injected func(error) bool) {
	t.Helper()
	if be.remote {
		code := "58030" // io_error
		if errors.Is(err, vfs.ErrNoSpace) {
			code = "53100" // disk_full
		}
		return pgFault(t, dir, name, failAt, sticky, code), func(e error) bool { return pgCode(e, code) }
	}
	counter := &vfs.Counter{
		Match:  func(o vfs.Op, path string) bool { return o == op && filepath.Base(path) == name },
		FailAt: failAt,
		Sticky: sticky,
		Err:    err,
	}
	o.FS = vfs.Inject(vfs.Default(), counter.Injector())
	return func() {}, func(e error) bool { return err == nil || errors.Is(e, err) }
}

// forEachBackend runs fn as a subtest per backend.
func forEachBackend(t *testing.T, fn func(t *testing.T, be backend)) {
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			fn(t, be)
		})
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// testOpts returns options for tests: quiet, batches that only a test cuts
// (by Flush or by reaching BatchSize) unless it says otherwise, and
// Unbound: the tests check what the store holds themselves, and bind a
// checkpoint where the test is about the marks (see TestApplyNeedsABinding
// for the rule without Unbound).
func testOpts() *Options {
	return &Options{Logger: quietLogger(), BatchSize: 1 << 20, BatchInterval: time.Hour, Unbound: true}
}

// format3Opts are testOpts that make a new bbolt store of format 3, as
// versions before format 4 made it (hooks.boltFormat3), and a new
// PostgreSQL store of format 3, its rows by name, as versions before
// format 5 made it (hooks.pgByName): the tests of older formats make
// their stores from one.
func format3Opts() *Options {
	o := testOpts()
	o.hooks = &hooks{boltFormat3: true, pgByName: true}
	return o
}

func mustOpen(t testing.TB, be backend, dir string, o *Options) Store {
	t.Helper()
	if o.Logger == nil {
		o.Logger = quietLogger()
	}
	s, err := be.open(dir, o)
	if err != nil {
		t.Fatalf("open %s store %s: %v", be.name, dir, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

const lineLen = 10 // every test line is 10 bytes: line n ends at n*lineLen

func del(feed string, epoch uint64, n int) tidemark.Delivery {
	return tidemark.Delivery{Feed: feed, Epoch: epoch, Position: int64(n) * lineLen, Seq: uint64(n)}
}

// applyFlush applies the line of d with fn to s and makes it durable
// (Flush), failing t on an error of either.
func applyFlush(t testing.TB, s Store, d tidemark.Delivery, fn func(tx *Tx) error) {
	t.Helper()
	if _, err := s.Apply(context.Background(), d, fn); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// applyLine applies line n of feed f: it counts it and adds n to a sum.
func applyLine(t testing.TB, s Namespace, d tidemark.Delivery) bool {
	t.Helper()
	ok, err := s.Apply(context.Background(), d, func(tx *Tx) error {
		if _, err := tx.AddInt64([]byte("count"), 1); err != nil {
			return err
		}
		_, err := tx.AddInt64([]byte("sum"), d.Position/lineLen)
		return err
	})
	if err != nil {
		t.Fatalf("apply %+v: %v", d, err)
	}
	return ok
}

// skipsThenApplies checks that s skips again, a line it applied already,
// and applies next, the line after it.
func skipsThenApplies(t testing.TB, s Namespace, again, next tidemark.Delivery) {
	t.Helper()
	if applyLine(t, s, again) {
		t.Fatalf("line %+v, applied already, applied again", again)
	}
	if !applyLine(t, s, next) {
		t.Fatalf("line %+v, the next, not applied", next)
	}
}

// mustApply applies d with fn to s, failing t on an error.
func mustApply(t testing.TB, s Namespace, d tidemark.Delivery, fn func(tx *Tx) error) {
	t.Helper()
	if _, err := s.Apply(context.Background(), d, fn); err != nil {
		t.Fatalf("apply %+v: %v", d, err)
	}
}

func getInt(t testing.TB, s Namespace, key string) int64 {
	t.Helper()
	var n int64
	err := s.View(func(tx *Tx) error {
		var err error
		n, err = tx.GetInt64([]byte(key))
		return err
	})
	if err != nil {
		t.Fatalf("view %s: %v", key, err)
	}
	return n
}

// waitFor polls cond until it holds, failing after a generous deadline.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// progress is a controllable queue progress for a checkpoint: finish
// counts an item as finished.
type progress struct {
	n atomic.Uint64
}

func (p *progress) finish()               { p.n.Add(1) }
func (p *progress) set(n uint64)          { p.n.Store(n) }
func (p *progress) mark() checkpoint.Mark { n := p.n.Load(); return checkpoint.Mark{Count: n, Seq: n} }

// hold returns a held checkpoint of (feed, "g") bound to p.
func hold(feed string, p *progress) *checkpoint.Checkpoint {
	reg := checkpoint.NewSet()
	cp := reg.Hold(feed, "g")
	reg.Bind(feed, "g", p.mark)
	return cp
}

func durableCount(cp *checkpoint.Checkpoint) uint64 {
	m, _ := cp.Durable()
	return m.Count
}

// gate blocks the committer in a hook until opened.
type gate struct {
	mu      sync.Mutex
	once    sync.Once
	entered chan struct{}
	release chan struct{}
	armed   bool
}

func newGate() *gate { return &gate{entered: make(chan struct{}, 100), release: make(chan struct{})} }

func (g *gate) hook() {
	g.mu.Lock()
	armed := g.armed
	g.mu.Unlock()
	if !armed {
		return
	}
	g.entered <- struct{}{}
	<-g.release
}

func (g *gate) arm() { g.mu.Lock(); g.armed = true; g.mu.Unlock() }

// open lets the committer go on, now and from now on. It can be called
// again (tests also register it as a cleanup, before the store's Close).
func (g *gate) open() {
	g.once.Do(func() {
		g.mu.Lock()
		g.armed = false
		g.mu.Unlock()
		close(g.release)
	})
}

// file is an input file in memory that an Origin can read back.
type file struct {
	mu    sync.Mutex
	data  []byte
	ident tidemark.Identity
	reads atomic.Int64
}

func fnv64(b []byte) uint64 { h := fnv.New64a(); h.Write(b); return h.Sum64() }

func (f *file) origin() *tidemark.Origin {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := min(len(f.data), 4096)
	return &tidemark.Origin{
		Identity:    f.ident,
		Fingerprint: tidemark.Fingerprint{Len: n, Hash: fnv64(f.data[:n])},
		TailHash:    f.tailHash,
	}
}

func (f *file) tailHash(pos int64, n int) (uint64, error) {
	f.reads.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if pos > int64(len(f.data)) || int64(n) > pos {
		return 0, errors.New("file shorter than the position")
	}
	return fnv64(f.data[pos-int64(n) : pos]), nil
}

// parkApply applies lines 1 to 6 of feed f to s, a store of batches of
// two lines whose committer blocks in the commit of the first batch (the
// gate g, armed here, until the caller opens it): the second batch waits
// for that commit (pending), the third is full. Then it applies line 7 on
// a goroutine of its own, which waits for the third batch to be cut; it
// returns once that Apply is parked, with a channel closed once it
// returned and done was called with what it returned.
func parkApply(t *testing.T, s Store, g *gate, done func(applied bool, err error)) <-chan struct{} {
	t.Helper()
	g.arm()
	applyLine(t, s, del("f", 1, 1))
	applyLine(t, s, del("f", 1, 2)) // cut: the committer blocks in g
	<-g.entered
	for n := 3; n <= 6; n++ {
		applyLine(t, s, del("f", 1, n)) // line 5 cuts the second batch
	}
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		done(s.Apply(context.Background(), del("f", 1, 7), func(tx *Tx) error { return nil }))
	}()
	waitFor(t, "Apply to wait", func() bool { return s.Stats().BackPressure == 1 })
	return returned
}

// goroutineID returns the number of the calling goroutine, as its stack
// trace gives it.
func goroutineID() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	n, err := strconv.ParseUint(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
	if err != nil {
		panic(fmt.Sprintf("goroutineID: %q: %v", buf[:], err))
	}
	return n
}
