package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/cluster"
	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/internal/natstest"
	"github.com/tidemark-go/tidemark/internal/pgtest"
	"github.com/tidemark-go/tidemark/state"
)

// TestMain runs a worker child (workerEnv) or a NATS server child
// (natstest) when the binary was started as one, else the tests, and
// removes the PostgreSQL clusters they started.
func TestMain(m *testing.M) {
	natstest.RunChild()
	if v := os.Getenv(workerEnv); v != "" {
		workerChild(v)
		return
	}
	goleak.VerifyTestMain(pgtest.Main(m),
		// nats.go's and pgx's background goroutines of connections closed
		// by their tests' cleanups end a moment later.
		goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreAnyFunction("github.com/jackc/puddle/v2.(*Pool[...]).acquire.func1"),
	)
}

// The test stream: ORDERS, orders.KEY published, stored as orders.P.KEY by
// the stream's subject transform.
const testStream = "ORDERS"

// quiet drops logs; TIDEMARK_TEST_LOG=1 shows them.
func quiet() *slog.Logger {
	if os.Getenv("TIDEMARK_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// env is a NATS server with the partitioned test stream and a database.
type env struct {
	t     testing.TB
	url   string
	js    jetstream.JetStream
	db    string
	parts int
}

func newEnv(t testing.TB, parts int) *env {
	t.Helper()
	srv := natstest.Run(t, natstest.Config{})
	e := &env{t: t, url: srv.URL(), parts: parts, db: pgtest.Shared(t).Schema(t)}
	e.js = natstest.JetStream(t, e.url)
	makeStream(t, e.js, parts, jetstream.LimitsPolicy)
	return e
}

// makeStream creates the test stream, partitioned by its key token.
func makeStream(t testing.TB, js jetstream.JetStream, parts int, retention jetstream.RetentionPolicy) {
	t.Helper()
	cfg := jetstream.StreamConfig{
		Name:      testStream,
		Subjects:  []string{"orders.*"},
		Retention: retention,
		SubjectTransform: &jetstream.SubjectTransformConfig{
			Source:      "orders.*",
			Destination: fmt.Sprintf("orders.{{partition(%d,1)}}.{{wildcard(1)}}", parts),
		},
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := js.CreateStream(ctx, cfg)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("create stream: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// filter is partition p's subjects.
func filter(p int) string { return fmt.Sprintf("orders.%d.>", p) }

// publish publishes messages from..to-1: message i is "m-<i>" on
// orders.k<i>, with its number as its message id (so that a retry after a
// lost reply stores it once).
func (e *env) publish(from, to int) {
	e.t.Helper()
	publishTo(e.t, e.js, from, to)
}

func publishTo(t testing.TB, js jetstream.JetStream, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		for attempt := 0; ; attempt++ {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := js.Publish(ctx, fmt.Sprintf("orders.k%d", i), fmt.Appendf(nil, "m-%d", i), jetstream.WithMsgID(fmt.Sprint(i)))
			cancel()
			if err == nil {
				break
			}
			if attempt > 300 {
				t.Fatalf("publish %d: %v", i, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// counter counts the messages of its feed, by payload, in its group's
// store: the processor a user writes for a file feed.
type counter struct {
	feed string
	st   state.Namespace
}

func (c *counter) Start(ctx context.Context, fc *framework.Context) error {
	st, err := fc.Store()
	if err != nil {
		return err
	}
	c.st = st.Namespace("counts")
	return fc.Subscribe(c.feed)
}

func (c *counter) Handle(ctx context.Context, d tidemark.Delivery, line []byte) error {
	_, err := c.st.Apply(ctx, d, func(tx *state.Tx) error {
		_, err := tx.Bucket("m").AddInt64(line, 1)
		return err
	})
	return err
}

// counterServer is the Partition factory of the tests: one group, the
// counter, in the partition's store.
func counterServer(batchInterval time.Duration) func(p cluster.Partition) (framework.Config, framework.Processors, error) {
	return func(p cluster.Partition) (framework.Config, framework.Processors, error) {
		return framework.Config{
				Feeds: []framework.FeedConfig{p.Feed},
				Groups: []framework.GroupConfig{{
					Name: "counters", Processors: []string{"count"}, Store: p.Store,
					StoreOptions: &state.Options{BatchInterval: batchInterval},
				}},
			},
			framework.Processors{"count": &counter{feed: p.Feed.Name}},
			nil
	}
}

// config is a worker's config in e.
func (e *env) config(worker string, lease time.Duration) cluster.Config {
	return cluster.Config{
		Name:          "test",
		Worker:        worker,
		JetStream:     e.js,
		Stream:        testStream,
		Partitions:    e.parts,
		FilterSubject: filter,
		Database:      e.db,
		Lease:         lease,
		FeedName:      "orders",
		Partition:     counterServer(0),
		Logger:        quiet().With("worker", worker),
	}
}

// running is a supervisor run in the test process.
type running struct {
	s      *cluster.Supervisor
	cancel context.CancelFunc
	done   chan error
	evMu   sync.Mutex
	events []cluster.Event
}

// start runs a supervisor of cfg until stop (or the test's end).
func start(t testing.TB, cfg cluster.Config) *running {
	t.Helper()
	r := &running{done: make(chan error, 1)}
	cfg.OnEvent = func(ev cluster.Event) {
		r.evMu.Lock()
		r.events = append(r.events, ev)
		r.evMu.Unlock()
	}
	s, err := cluster.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.s = s
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- s.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop stops the supervisor and waits for Run.
func (r *running) stop(t testing.TB) {
	t.Helper()
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Errorf("Run did not return within 2 minutes of its context's end")
	}
}

// held returns the partitions the supervisor runs.
func (r *running) held() []int {
	var out []int
	for _, ps := range r.s.Status().PartitionStates {
		if ps.State == cluster.Running {
			out = append(out, ps.Partition)
		}
	}
	return out
}

// waitFor calls cond every 10 ms until it is true; it fails the test with
// what (and why(), when given) after d.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool, why ...func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			msg := fmt.Sprintf("%s: not within %v", what, d)
			for _, w := range why {
				msg += "\n" + w()
			}
			t.Fatal(msg)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// counts opens every partition's store (no worker may hold one) and
// returns, per partition, the count of each message it applied.
func (e *env) counts(cfg cluster.Config) []map[string]int64 {
	e.t.Helper()
	out := make([]map[string]int64, e.parts)
	for p := range e.parts {
		st, err := state.OpenPostgres(e.db, fmt.Sprintf("%s/%s/%d", cfg.Name, cfg.Stream, p), &state.Options{Logger: quiet(), LockTimeout: time.Minute})
		if err != nil {
			e.t.Fatalf("open the store of partition %d: %v", p, err)
		}
		out[p] = map[string]int64{}
		err = st.Namespace("counts").View(func(tx *state.Tx) error {
			return tx.Bucket("m").ForEach(func(k, v []byte) error {
				n, err := tx.Bucket("m").GetInt64(k)
				out[p][string(k)] = n
				return err
			})
		})
		if cerr := st.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			e.t.Fatalf("read the store of partition %d: %v", p, err)
		}
	}
	return out
}

// checkExact checks that messages 0..n-1 were each applied once, in one
// partition's store: 0 lost, 0 twice, none in two partitions.
func (e *env) checkExact(cfg cluster.Config, n int) {
	e.t.Helper()
	per := e.counts(cfg)
	where := map[string]int{}
	var lost, twice, both []string
	for p, m := range per {
		for k, c := range m {
			if q, ok := where[k]; ok {
				both = append(both, fmt.Sprintf("%s in %d and %d", k, q, p))
			}
			where[k] = p
			if c != 1 {
				twice = append(twice, fmt.Sprintf("%s ×%d", k, c))
			}
		}
	}
	for i := range n {
		if _, ok := where[fmt.Sprintf("m-%d", i)]; !ok {
			lost = append(lost, fmt.Sprintf("m-%d", i))
		}
	}
	if len(lost)+len(twice)+len(both) > 0 {
		e.t.Fatalf("%d lost %s; %d applied twice or more %s; %d in two partitions %s",
			len(lost), head(lost), len(twice), head(twice), len(both), head(both))
	}
	if len(where) != n {
		e.t.Fatalf("%d messages applied, want %d", len(where), n)
	}
}

func head(s []string) string {
	if len(s) > 10 {
		s = append(s[:10:10], "…")
	}
	return "[" + strings.Join(s, " ") + "]"
}

// settled reports whether every partition runs on one of the
// supervisors and has read, applied and committed everything the stream
// holds for it: no lag, nothing buffered, nothing uncommitted. Publish
// first.
func (e *env) settled(rs ...*running) func() bool {
	return func() bool {
		// The stream's last message of each partition, read now: the
		// status's last sequence is as old as its interval, and a lag of 0
		// against it says nothing of what was published since.
		last := map[int]uint64{}
		st, err := e.js.Stream(context.Background(), testStream)
		if err != nil {
			return false
		}
		for p := range e.parts {
			m, err := st.GetLastMsgForSubject(context.Background(), filter(p))
			switch {
			case errors.Is(err, jetstream.ErrMsgNotFound):
			case err != nil:
				return false
			default:
				last[p] = m.Sequence
			}
		}
		done := map[int]bool{}
		for _, r := range rs {
			for _, ps := range r.s.Status().PartitionStates {
				if ps.State != cluster.Running {
					continue
				}
				if ps.LastSeq == 0 || ps.Lag > 0 || ps.Buffered > 0 || ps.Uncommitted > 0 || uint64(ps.Applied) < ps.Committed || uint64(ps.Applied) < last[ps.Partition] {
					return false
				}
				done[ps.Partition] = true
			}
		}
		return len(done) == e.parts
	}
}

// statusOf formats the supervisors' status for a failure message.
func statusOf(rs ...*running) func() string {
	return func() string {
		var b strings.Builder
		for _, r := range rs {
			st := r.s.Status()
			fmt.Fprintf(&b, "worker %s: holds %d (share %d-%d), table error %q\n", st.Worker, st.Held, st.Floor, st.Ceil, st.TableError)
			for _, ps := range st.PartitionStates {
				fmt.Fprintf(&b, "  partition %d: %s owner %q token %d applied %d committed %d last %d lag %d err %q\n",
					ps.Partition, ps.State, ps.Owner, ps.Token, ps.Applied, ps.Committed, ps.LastSeq, ps.Lag, ps.LastError)
			}
		}
		return b.String()
	}
}
