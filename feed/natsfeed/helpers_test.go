package natsfeed_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tidemark-go/tidemark/feed"
	"github.com/tidemark-go/tidemark/feed/natsfeed"
	"github.com/tidemark-go/tidemark/internal/natstest"
)

// TestMain lets the test binary run as a nats-server child
// (natstest.StartProcess).
func TestMain(m *testing.M) { natstest.Main(m) }

// The test stream: subjects orders.<partition>.<n>, three partitions.
const (
	testStream = "ORDERS"
	partitions = 3
)

// quiet is a logger that drops everything; set TIDEMARK_TEST_LOG to see
// the source's logs.
func quiet() *slog.Logger {
	if os.Getenv("TIDEMARK_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// makeStream creates the test stream with cfg's limits (Name and
// Subjects are set here).
func makeStream(t testing.TB, js jetstream.JetStream, cfg jetstream.StreamConfig) jetstream.Stream {
	t.Helper()
	cfg.Name, cfg.Subjects = testStream, []string{"orders.>"}
	// A loaded cluster may not answer in time: ask again (creating the
	// same stream twice is no error).
	deadline := time.Now().Add(90 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		st, err := js.CreateStream(ctx, cfg)
		cancel()
		if err == nil {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("create stream: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// withStream runs a server with the test stream (cfg's limits) and
// messages 0..n-1 published on it, and returns the server, a JetStream
// context and the messages' sequences.
func withStream(t testing.TB, cfg jetstream.StreamConfig, n int) (*natstest.Server, jetstream.JetStream, []uint64) {
	t.Helper()
	srv := natstest.Run(t, natstest.Config{})
	js := natstest.JetStream(t, srv.URL())
	makeStream(t, js, cfg)
	return srv, js, publish(t, js, 0, n)
}

// subject is the subject of message i: partition i%partitions.
func subject(i int) string { return fmt.Sprintf("orders.%d.%d", i%partitions, i) }

// publish publishes messages from..to-1 (message i on subject(i), payload
// "m-<i>") and returns their stream sequences.
func publish(t testing.TB, js jetstream.JetStream, from, to int) []uint64 {
	t.Helper()
	seqs := make([]uint64, 0, to-from)
	for i := from; i < to; i++ {
		ack := publishOne(t, js, i)
		seqs = append(seqs, ack)
	}
	return seqs
}

func publishOne(t testing.TB, js jetstream.JetStream, i int) uint64 {
	t.Helper()
	for attempt := 0; ; attempt++ {
		// Short: a request to a server that went away waits this long.
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		ack, err := js.Publish(ctx, subject(i), fmt.Appendf(nil, "m-%d", i), jetstream.WithMsgID(fmt.Sprint(i)))
		cancel()
		if err == nil {
			return ack.Sequence
		}
		if attempt > 400 {
			t.Fatalf("publish %d: %v", i, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// partitionConfig is the source config of partition p.
func partitionConfig(js jetstream.JetStream, p int) natsfeed.Config {
	return natsfeed.Config{
		JetStream:     js,
		Stream:        testStream,
		Partition:     fmt.Sprint(p),
		FilterSubject: fmt.Sprintf("orders.%d.>", p),
		Consumer:      fmt.Sprintf("tidemark-%d", p),
		Logger:        quiet(),
	}
}

// newSource makes a source of cfg, resumed from points (unless nil), and
// closes it when the test ends.
func newSource(t testing.TB, cfg natsfeed.Config, points []feed.ResumePoint) *natsfeed.Source {
	t.Helper()
	src, err := natsfeed.New(cfg)
	if err != nil {
		t.Fatalf("new source: %v", err)
	}
	t.Cleanup(func() { _ = src.Close() })
	if points != nil {
		if err := src.ResumeFrom(points); err != nil {
			t.Fatalf("resume from: %v", err)
		}
	}
	return src
}

// got is an item as a test keeps it.
type got struct {
	seq  uint64
	line string
}

// pollN polls src until it handed out n items (or fails after 30 s), and
// returns them.
func pollN(t testing.TB, src *natsfeed.Source, n int) []got {
	t.Helper()
	var out []got
	items := make([]feed.Item, 64)
	deadline := time.Now().Add(30 * time.Second)
	for len(out) < n {
		k, err := src.Poll(context.Background(), items[:min(len(items), n-len(out))])
		if err != nil {
			t.Fatalf("poll after %d of %d items: %v", len(out), n, err)
		}
		for _, it := range items[:k] {
			out = append(out, got{seq: uint64(it.Position), line: string(it.Line)})
		}
		if k == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("only %d of %d items within 30 s; stats %+v", len(out), n, src.Stats())
			}
			time.Sleep(time.Millisecond)
		}
	}
	return out
}

// pollErr polls src until it returns an error (or fails after 30 s), and
// returns the items handed out before it and the error.
func pollErr(t testing.TB, src *natsfeed.Source) ([]got, error) {
	t.Helper()
	var out []got
	items := make([]feed.Item, 64)
	deadline := time.Now().Add(30 * time.Second)
	for {
		k, err := src.Poll(context.Background(), items)
		for _, it := range items[:k] {
			out = append(out, got{seq: uint64(it.Position), line: string(it.Line)})
		}
		if err != nil {
			return out, err
		}
		if k == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("no error within 30 s; %d items; stats %+v", len(out), src.Stats())
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// waitFor calls cond every 5 ms until it is true, and fails the test with
// what after 30 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30 s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// partitionSeqs returns the stream sequences of the messages of partition
// p among from..to-1, given their sequences.
func partitionSeqs(seqs []uint64, from, p int) []uint64 {
	var out []uint64
	for i, s := range seqs {
		if (from+i)%partitions == p {
			out = append(out, s)
		}
	}
	return out
}

// streamInfo returns the stream's info.
func streamInfo(t testing.TB, js jetstream.JetStream) *jetstream.StreamInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, testStream)
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	return st.CachedInfo()
}

// consumerInfo returns the info of the consumer name.
func consumerInfo(t testing.TB, js jetstream.JetStream, name string) *jetstream.ConsumerInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := js.Consumer(ctx, testStream, name)
	if err != nil {
		t.Fatalf("consumer %s: %v", name, err)
	}
	return c.CachedInfo()
}

// seqsOf returns the sequences of items.
func seqsOf(items []got) []uint64 {
	out := make([]uint64, len(items))
	for i, it := range items {
		out[i] = it.seq
	}
	return out
}

// point is a store's record of the feed at position in epoch.
func point(holder string, epoch uint64, position int64) feed.ResumePoint {
	p := feed.ResumePoint{Holder: holder, Found: true}
	p.Lineage.Epoch, p.Lineage.Position = epoch, position
	return p
}
