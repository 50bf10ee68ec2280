package natsfeed_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tidemark-go/tidemark/feed"
	"github.com/tidemark-go/tidemark/feed/natsfeed"
)

// Example reads partition 1 of a stream partitioned by subject, from a
// server run in the process for the example. A store's record (here made
// by hand: the framework passes state.Store.AppliedAll) says that
// sequence 2 was applied, so the source starts after it.
func Example() {
	dir, _ := os.MkdirTemp("", "natsfeed-example")
	defer os.RemoveAll(dir)
	srv, _ := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	go srv.Start()
	defer srv.Shutdown()
	srv.ReadyForConnections(10 * time.Second)

	nc, _ := nats.Connect(srv.ClientURL(), nats.MaxReconnects(-1))
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	stream, _ := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}})
	for i, acct := range []string{"alice", "bob", "carol", "dave", "erin", "frank"} {
		js.Publish(ctx, fmt.Sprintf("orders.%d.%s", i%2, acct), []byte(acct+",+10"))
	}
	info, _ := stream.Info(ctx)

	src, err := natsfeed.New(natsfeed.Config{
		JetStream:     js,
		Stream:        "ORDERS",
		Partition:     "1",
		FilterSubject: "orders.1.>",
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer src.Close()
	var rec feed.ResumePoint
	rec.Holder, rec.Found = "store of group ledger", true
	rec.Lineage.Epoch, rec.Lineage.Position = uint64(info.Created.UnixNano()), 2
	if err := src.ResumeFrom([]feed.ResumePoint{rec}); err != nil {
		fmt.Println(err)
		return
	}

	items := make([]feed.Item, 16)
	for read := 0; read < 2; {
		n, err := src.Poll(ctx, items)
		if err != nil {
			fmt.Println(err)
			return
		}
		for _, it := range items[:n] {
			fmt.Printf("sequence %d: %s\n", it.Position, it.Line)
		}
		if n > 0 {
			// Once every subscriber has finished (and its store made it
			// durable), the framework commits: an AckAll.
			src.Commit(items[n-1].Epoch, items[n-1].Position)
		}
		read += n
		time.Sleep(time.Millisecond)
	}
	// Output:
	// sequence 4: dave,+10
	// sequence 6: frank,+10
}
