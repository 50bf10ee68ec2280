package cluster_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tidemark-go/tidemark/cluster"
	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/internal/pgtest"
	"github.com/tidemark-go/tidemark/state"
)

// A worker runs the counter of a file feed over the two partitions of a
// stream, each in its own PostgreSQL store; a second worker started on
// another machine with the same config would take one of them.
func Example() {
	dir, _ := os.MkdirTemp("", "cluster-example")
	defer os.RemoveAll(dir)
	ns, _ := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: filepath.Join(dir, "nats"), NoLog: true, NoSigs: true})
	go ns.Start()
	defer ns.Shutdown()
	ns.ReadyForConnections(10 * time.Second)
	nc, _ := nats.Connect(ns.ClientURL(), nats.MaxReconnects(-1))
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	// Orders are published as orders.KEY; the stream stores them as
	// orders.P, P = partition(KEY) of 2 (a literal filter per partition is
	// the fast one for the server: see natsfeed, "Partitions").
	_, _ = js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "ORDERS", Subjects: []string{"orders.*"},
		SubjectTransform: &jetstream.SubjectTransformConfig{Source: "orders.*", Destination: "orders.{{partition(2,1)}}"},
	})
	for _, key := range []string{"alice", "bob", "carol", "alice"} {
		_, _ = js.Publish(ctx, "orders."+key, []byte(key))
	}
	db, _ := pgtest.SchemaDSN("example") // postgres://…: the tests' server

	sup, err := cluster.New(cluster.Config{
		Name: "example", Worker: "worker-1", JetStream: js, Stream: "ORDERS", Partitions: 2,
		FilterSubject: func(p int) string { return fmt.Sprintf("orders.%d", p) },
		Database:      db,
		FeedName:      "orders",
		Interval:      200 * time.Millisecond, // looks for partitions to take; the default is 2 s
		Partition: func(p cluster.Partition) (framework.Config, framework.Processors, error) {
			return framework.Config{
				Feeds:  []framework.FeedConfig{p.Feed},
				Groups: []framework.GroupConfig{{Name: "counters", Processors: []string{"count"}, Store: p.Store}},
				Logger: quiet(),
			}, framework.Processors{"count": &counter{feed: p.Feed.Name}}, nil
		},
		Logger: quiet(),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- sup.Run(runCtx) }()
	for settled := false; !settled; time.Sleep(10 * time.Millisecond) {
		st := sup.Status()
		settled = st.Held == 2
		for _, ps := range st.PartitionStates {
			settled = settled && ps.State == cluster.Running && ps.LastSeq == 4 && ps.Lag == 0 && ps.Uncommitted == 0 && ps.Buffered == 0
		}
	}
	stop() // each partition drains, saves, commits and releases its lease
	if err := <-done; err != nil {
		fmt.Println(err)
	}

	// Each key was counted once, in its partition's store.
	for p := range 2 {
		st, _ := state.OpenPostgres(db, fmt.Sprintf("example/ORDERS/%d", p), &state.Options{Logger: quiet()})
		_ = st.Namespace("counts").View(func(tx *state.Tx) error {
			return tx.Bucket("m").ForEach(func(k, _ []byte) error {
				n, _ := tx.Bucket("m").GetInt64(k)
				fmt.Printf("partition %d: %s %d\n", p, k, n)
				return nil
			})
		})
		_ = st.Close()
	}
	// Unordered output:
	// partition 0: bob 1
	// partition 0: carol 1
	// partition 1: alice 2
}
