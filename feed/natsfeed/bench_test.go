package natsfeed_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tidemark-go/tidemark/feed"
	"github.com/tidemark-go/tidemark/feed/natsfeed"
	"github.com/tidemark-go/tidemark/internal/natstest"
)

// benchStream runs a server (in this process, as the client) with the
// test stream holding n messages of 100 bytes, all on partition 0's
// subjects, and returns a JetStream context.
func benchStream(b *testing.B, n int) jetstream.JetStream {
	b.Helper()
	srv := natstest.Run(b, natstest.Config{})
	js := natstest.JetStream(b, srv.URL())
	makeStream(b, js, jetstream.StreamConfig{})
	payload := make([]byte, 100)
	for i := 0; i < n; i += 1000 {
		var futures []jetstream.PubAckFuture
		for j := i; j < min(n, i+1000); j++ {
			f, err := js.PublishAsync(fmt.Sprintf("orders.0.%d", j), payload)
			if err != nil {
				b.Fatal(err)
			}
			futures = append(futures, f)
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(60 * time.Second):
			b.Fatal("publish: no acks within 60 s")
		}
		for _, f := range futures {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				b.Fatal(err)
			}
		}
	}
	return js
}

// BenchmarkBarePull is the baseline: a durable pull consumer (AckAll)
// read with Messages, acknowledging every 1,000th message, as a
// hand-written loop would.
func BenchmarkBarePull(b *testing.B) {
	js := benchStream(b, b.N)
	ctx := context.Background()
	c, err := js.CreateOrUpdateConsumer(ctx, testStream, jetstream.ConsumerConfig{
		Durable: "bare", AckPolicy: jetstream.AckAllPolicy, DeliverPolicy: jetstream.DeliverAllPolicy,
		MaxDeliver: -1, AckWait: time.Hour, MaxAckPending: natsfeed.DefaultMaxAckPending,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	it, err := c.Messages(jetstream.PullMaxMessages(natsfeed.DefaultPullBatch))
	if err != nil {
		b.Fatal(err)
	}
	for i := 1; i <= b.N; i++ {
		m, err := it.Next()
		if err != nil {
			b.Fatal(err)
		}
		if i%1000 == 0 || i == b.N {
			if err := m.Ack(); err != nil {
				b.Fatal(err)
			}
		}
	}
	it.Stop()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}

// BenchmarkSource reads the same messages through a Source polled in a
// loop that does nothing with them and commits every Poll, as the
// framework's feed runner does each duty cycle.
func BenchmarkSource(b *testing.B) {
	js := benchStream(b, b.N)
	cfg := partitionConfig(js, 0)
	cfg.StatusInterval = -1
	src, err := natsfeed.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	if err := src.ResumeFrom([]feed.ResumePoint{{Holder: "bench"}}); err != nil {
		b.Fatal(err)
	}
	items := make([]feed.Item, 1024)
	ctx := context.Background()
	b.ResetTimer()
	start := time.Now()
	for got := 0; got < b.N; {
		n, err := src.Poll(ctx, items)
		if err != nil {
			b.Fatal(err)
		}
		if n == 0 {
			time.Sleep(50 * time.Microsecond) // the framework's idle back-off
			continue
		}
		got += n
		if err := src.Commit(items[n-1].Epoch, items[n-1].Position); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}
