package cluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-go/tidemark/cluster"
	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/internal/pgtest"
)

// TestOneWorkerRunsEveryPartition: a worker alone takes every partition,
// runs each with the same counter a file feed would have, applies every
// message once, reports each partition's positions, and at its stop
// releases the leases (a store opens at once after it).
func TestOneWorkerRunsEveryPartition(t *testing.T) {
	e := newEnv(t, 4)
	e.publish(0, 400)
	cfg := e.config("w1", 2*time.Second)
	cfg.Source.StatusInterval = 50 * time.Millisecond
	r := start(t, cfg)
	waitFor(t, time.Minute, "every partition applied", e.settled(r), statusOf(r))
	e.publish(400, 600) // and it follows the stream
	waitFor(t, time.Minute, "the new messages applied", e.settled(r), statusOf(r))
	st := r.s.Status()
	if st.Held != 4 || st.Floor != 4 || st.Ceil != 4 || len(st.Workers) != 1 || st.Workers[0].Name != "w1" || !st.Workers[0].Alive {
		t.Fatalf("status: held %d, share %d-%d, workers %+v: want all 4 held by the only worker", st.Held, st.Floor, st.Ceil, st.Workers)
	}
	for _, ps := range st.PartitionStates {
		if ps.Owner != "w1" || ps.Token < 1 || ps.Applied <= 0 || ps.Store != fmt.Sprintf("test/ORDERS/%d", ps.Partition) || ps.Takeovers != 1 {
			t.Errorf("partition %d: %+v", ps.Partition, ps)
		}
	}
	r.stop(t)
	if st := r.s.Status(); st.Releases != 4 || st.Held != 0 {
		t.Fatalf("after the stop: %d released, %d held; want 4 and 0", st.Releases, st.Held)
	}
	// The leases were released: opening a store does not wait (counts
	// opens each with a minute's LockTimeout; a held lease would take 2 s).
	began := time.Now()
	e.checkExact(cfg, 600)
	if d := time.Since(began); d > 1900*time.Millisecond {
		t.Logf("reading the stores took %v: were the leases released?", d)
	}
	r.evMu.Lock()
	defer r.evMu.Unlock()
	kinds := map[cluster.EventKind]int{}
	for _, ev := range r.events {
		kinds[ev.Kind]++
	}
	if kinds[cluster.Acquired] != 4 || kinds[cluster.Released] != 4 || kinds[cluster.Lost] != 0 {
		t.Fatalf("events %v: want 4 acquired, 4 released", kinds)
	}
}

// TestWorkersShareThePartitions: three workers share six partitions two
// each; one that stops hands its partitions over cleanly and the two
// left hold three each; a new worker gets its share back from them. Every
// message is applied once, published all along.
func TestWorkersShareThePartitions(t *testing.T) {
	e := newEnv(t, 6)
	lease := 2 * time.Second
	mk := func(name string) cluster.Config {
		c := e.config(name, lease)
		c.Source.StatusInterval = 50 * time.Millisecond
		return c
	}
	rs := []*running{start(t, mk("w1")), start(t, mk("w2")), start(t, mk("w3"))}
	next := 0
	pub := func(n int) { e.publish(next, next+n); next += n }
	pub(300)
	shares := func(want ...int) func() bool {
		return func() bool {
			var got []int
			seen := map[int]bool{}
			for _, r := range rs {
				h := r.held()
				got = append(got, len(h))
				for _, p := range h {
					if seen[p] {
						return false
					}
					seen[p] = true
				}
			}
			slices.Sort(got)
			return slices.Equal(got, want)
		}
	}
	waitFor(t, time.Minute, "two partitions each", shares(2, 2, 2), statusOf(rs...))
	waitFor(t, time.Minute, "every message applied", e.settled(rs...), statusOf(rs...))

	// w3 stops: a clean hand-over.
	rs[2].stop(t)
	gone := rs[2]
	rs = rs[:2]
	pub(300)
	waitFor(t, time.Minute, "three partitions each", shares(3, 3), statusOf(rs...))
	waitFor(t, time.Minute, "every message applied", e.settled(rs...), statusOf(rs...))
	if st := gone.s.Status(); st.Releases != 2 || st.Losses != 0 {
		t.Fatalf("the stopped worker released %d, lost %d: want 2 clean releases", st.Releases, st.Losses)
	}

	// w4 joins: the others give it its share.
	rs = append(rs, start(t, mk("w4")))
	pub(300)
	waitFor(t, time.Minute, "two partitions each again", shares(2, 2, 2), statusOf(rs...))
	waitFor(t, time.Minute, "every message applied", e.settled(rs...), statusOf(rs...))
	for _, r := range rs {
		if st := r.s.Status(); st.Losses != 0 {
			t.Errorf("worker %s lost %d partitions on an error: %s", st.Worker, st.Losses, statusOf(r)())
		}
	}
	for _, r := range rs {
		r.stop(t)
	}
	e.checkExact(mk("x"), next)
}

// TestPartitionConfigRules: a factory whose config breaks a rule of the
// supervisor gets the partition into standby with an error that says
// which rule, and nothing runs.
func TestPartitionConfigRules(t *testing.T) {
	e := newEnv(t, 1)
	cases := []struct {
		name string
		make func(p cluster.Partition) framework.Config
		want string
	}{
		{"feed left out", func(p cluster.Partition) framework.Config {
			return framework.Config{Groups: []framework.GroupConfig{{Name: "g", Processors: []string{"count"}, Store: p.Store}}}
		}, "put p.Feed in them once"},
		{"feed renamed", func(p cluster.Partition) framework.Config {
			f := p.Feed
			f.Name = "other"
			return framework.Config{Feeds: []framework.FeedConfig{f}, Groups: []framework.GroupConfig{{Name: "g", Processors: []string{"count"}, Store: p.Store}}}
		}, "keep p.Feed as it is"},
		{"no store", func(p cluster.Partition) framework.Config {
			return framework.Config{Feeds: []framework.FeedConfig{p.Feed}, Groups: []framework.GroupConfig{{Name: "g", Processors: []string{"count"}}}}
		}, "no group keeps its state in the partition's store"},
		{"a local store", func(p cluster.Partition) framework.Config {
			return framework.Config{Feeds: []framework.FeedConfig{p.Feed}, Groups: []framework.GroupConfig{{Name: "g", Processors: []string{"count"}, Store: "bbolt:" + t.TempDir()}}}
		}, "must live in its store p.Store"},
		{"until settled", func(p cluster.Partition) framework.Config {
			return framework.Config{Feeds: []framework.FeedConfig{p.Feed}, Groups: []framework.GroupConfig{{Name: "g", Processors: []string{"count"}, Store: p.Store}}, UntilSettled: true}
		}, "UntilSettled is set"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := e.config("w-"+strings.ReplaceAll(c.name, " ", "-"), time.Second)
			cfg.Name = "rules" + fmt.Sprint(len(c.name))
			cfg.Partition = func(p cluster.Partition) (framework.Config, framework.Processors, error) {
				return c.make(p), framework.Processors{"count": &counter{feed: p.Feed.Name}}, nil
			}
			r := start(t, cfg)
			var ps cluster.PartitionStatus
			waitFor(t, 30*time.Second, "the partition's error", func() bool {
				ps = r.s.Status().PartitionStates[0]
				return ps.LastError != ""
			})
			if !strings.Contains(ps.LastError, c.want) || !strings.Contains(ps.LastError, "invalid config") {
				t.Fatalf("error %q: want one that says %q", ps.LastError, c.want)
			}
			if ps.Takeovers != 0 {
				t.Fatalf("the partition was taken %d times", ps.Takeovers)
			}
		})
	}
}

// TestConfigErrors: a Config that cannot make a supervisor is refused by
// New with ErrConfig, saying what is wrong.
func TestConfigErrors(t *testing.T) {
	e := newEnv(t, 2)
	good := e.config("w", time.Second)
	cases := []struct {
		name string
		edit func(c *cluster.Config)
		want string
	}{
		{"no stream", func(c *cluster.Config) { c.Stream = "" }, "stream name"},
		{"bad job name", func(c *cluster.Config) { c.Name = "a.b" }, "job name"},
		{"no partitions", func(c *cluster.Config) { c.Partitions = 0 }, "partitions"},
		{"no filter", func(c *cluster.Config) { c.FilterSubject = nil }, "FilterSubject"},
		{"same filter", func(c *cluster.Config) { c.FilterSubject = func(int) string { return "orders.>" } }, "same filter subject"},
		{"no database", func(c *cluster.Config) { c.Database = "" }, "database"},
		{"database with a store", func(c *cluster.Config) { c.Database += "&store=x" }, "leave out store="},
		{"no factory", func(c *cluster.Config) { c.Partition = nil }, "Partition is nil"},
		{"short lease", func(c *cluster.Config) { c.Lease = time.Millisecond }, "lease"},
		{"slow interval", func(c *cluster.Config) { c.Interval = c.Lease }, "interval"},
		{"same store", func(c *cluster.Config) { c.StoreName = func(int) string { return "one" } }, "same store"},
		{"bad source", func(c *cluster.Config) { c.Source.Buffer = -1 }, "Source"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := good
			c.edit(&cfg)
			_, err := cluster.New(cfg)
			if !errors.Is(err, cluster.ErrConfig) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("New: %v; want ErrConfig saying %q", err, c.want)
			}
		})
	}
}

// TestSameWorkerNameIsRefused: a second live worker of the same name is
// refused by Run (ErrWorkerExists), and the first runs on.
func TestSameWorkerNameIsRefused(t *testing.T) {
	e := newEnv(t, 1)
	cfg := e.config("twin", 2*time.Second)
	r := start(t, cfg)
	waitFor(t, 30*time.Second, "the first worker to run its partition", func() bool { return len(r.held()) == 1 })
	s2, err := cluster.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s2.Run(ctx); !errors.Is(err, cluster.ErrWorkerExists) || !strings.Contains(err.Error(), "twin") {
		t.Fatalf("the second Run: %v; want ErrWorkerExists naming the worker", err)
	}
	if len(r.held()) != 1 {
		t.Fatalf("the first worker holds %v", r.held())
	}
}

// TestJoinWaitsForTheDatabase: a worker started while PostgreSQL is down
// (a restart of the database, a worker restarted by its service manager
// at the same time) keeps trying, says why in its status, and joins once
// the database is back; every message is applied once.
func TestJoinWaitsForTheDatabase(t *testing.T) {
	e := newEnv(t, 1)
	pg := pgtest.NewCluster(t)
	if err := pg.Stop(); err != nil {
		t.Fatal(err)
	}
	e.publish(0, 20)
	cfg := e.config("w1", 2*time.Second)
	cfg.Database = pg.DSN("postgres")
	r := start(t, cfg)
	waitFor(t, time.Minute, "the worker to say it cannot reach the database", func() bool { return r.s.Status().TableError != "" })
	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the worker to join and run its partition", func() bool { return len(r.held()) == 1 }, statusOf(r))
	waitFor(t, time.Minute, "every message applied", func() bool {
		ps := r.s.Status().PartitionStates
		return len(ps) == 1 && ps[0].State == cluster.Running && ps[0].Applied >= 20
	}, statusOf(r))
	if st := r.s.Status(); st.TableError != "" {
		t.Errorf("TableError %q once joined", st.TableError)
	}
	r.stop(t)
}

// TestHandler serves the status as JSON and the metrics, the JetStream
// sources' among them.
func TestHandler(t *testing.T) {
	e := newEnv(t, 2)
	e.publish(0, 50)
	cfg := e.config("w1", 2*time.Second)
	cfg.Source.StatusInterval = 50 * time.Millisecond
	r := start(t, cfg)
	waitFor(t, time.Minute, "every partition applied", e.settled(r), statusOf(r))
	hs := httptest.NewServer(r.s.Handler())
	defer hs.Close()
	get := func(path string) string {
		resp, err := hs.Client().Get(hs.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %s: %s", path, resp.Status, b)
		}
		return string(b)
	}
	var st cluster.Status
	if err := json.Unmarshal([]byte(get("/status")), &st); err != nil {
		t.Fatal(err)
	}
	if st.Held != 2 || len(st.PartitionStates) != 2 || st.PartitionStates[1].Owner != "w1" {
		t.Fatalf("/status: %+v", st)
	}
	m := get("/metrics")
	for _, want := range []string{
		`tidemark_cluster_partitions_held{stream="ORDERS",tidemark_job="test"} 2`,
		`tidemark_cluster_partition_held{partition="1",stream="ORDERS",tidemark_job="test"} 1`,
		`tidemark_cluster_workers{stream="ORDERS",tidemark_job="test"} 1`,
		`tidemark_jetstream_lag_messages{partition="0",stream="ORDERS"} 0`,
		`tidemark_cluster_partition_applied_sequence{partition="0"`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if get("/healthz") != "ok\n" {
		t.Error("/healthz")
	}
}
