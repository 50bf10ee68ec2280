package natsfeed_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/feed/natsfeed"
	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/state"
)

// counter counts the messages of its feed in its group's store, per
// payload: exactly once, whatever the feed delivers again.
type counter struct {
	feed string
	st   state.Store
}

func (c *counter) Start(ctx context.Context, fc *framework.Context) error {
	st, err := fc.Store()
	if err != nil {
		return err
	}
	c.st = st
	return fc.Subscribe(c.feed)
}

func (c *counter) Handle(ctx context.Context, d tidemark.Delivery, line []byte) error {
	_, err := c.st.Apply(ctx, d, func(tx *state.Tx) error { // skipped when already applied
		_, err := tx.Bucket("counts").AddInt64(line, 1)
		return err
	})
	return err
}

// countPartition runs the counter over partition 1 of the ORDERS stream
// until it has read everything there is. The framework opens the group's
// store, gives its record to the source (ResumeFrom), and commits what the
// store made durable: the source acknowledges it.
func countPartition(js jetstream.JetStream, data string) error {
	src, err := natsfeed.New(natsfeed.Config{
		JetStream: js, Stream: "ORDERS", Partition: "1", FilterSubject: "orders.1.>",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return err
	}
	srv, err := framework.New(framework.Config{
		Feeds:        []framework.FeedConfig{{Name: "orders-1", Source: src}},
		Groups:       []framework.GroupConfig{{Name: "counters", Processors: []string{"count"}, Store: "bbolt:" + data}},
		UntilSettled: true, // a batch run; leave it out to follow the stream until ctx is done
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, framework.Processors{"count": &counter{feed: "orders-1"}})
	if err != nil {
		return err
	}
	return srv.Run(context.Background())
}

// A group that keeps its state in a store counts every message of its
// partition once, across runs: each run resumes after what the store
// applied, whatever the consumer's acknowledgements say.
func Example_framework() {
	dir, _ := os.MkdirTemp("", "natsfeed-example")
	defer os.RemoveAll(dir)
	ns, _ := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: filepath.Join(dir, "nats"), NoLog: true, NoSigs: true})
	go ns.Start()
	defer ns.Shutdown()
	ns.ReadyForConnections(10 * time.Second)
	nc, _ := nats.Connect(ns.ClientURL(), nats.MaxReconnects(-1))
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	_, _ = js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}})
	publish := func(orders ...string) {
		for _, o := range orders {
			_, _ = js.Publish(ctx, "orders.1.new", []byte(o))
		}
	}
	data := filepath.Join(dir, "state")
	show := func(when string) {
		st, _ := state.OpenDir(data, nil)
		defer st.Close()
		_ = st.View(func(tx *state.Tx) error {
			a, _ := tx.Bucket("counts").GetInt64([]byte("o-1"))
			b, _ := tx.Bucket("counts").GetInt64([]byte("o-2"))
			fmt.Printf("%s: o-1 %d, o-2 %d\n", when, a, b)
			return nil
		})
	}

	publish("o-1", "o-2", "o-1")
	if err := countPartition(js, data); err != nil {
		fmt.Println(err)
	}
	show("first run")
	publish("o-2")
	// The consumer lost: the store still knows where the partition resumes.
	_ = js.DeleteConsumer(ctx, "ORDERS", "tidemark-1")
	if err := countPartition(js, data); err != nil {
		fmt.Println(err)
	}
	show("after a new message and a restart")
	// Output:
	// first run: o-1 2, o-2 1
	// after a new message and a restart: o-1 2, o-2 2
}
