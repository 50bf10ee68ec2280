package natsfeed_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tidemark-go/tidemark/feed/natsfeed"
	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/state"
)

// runPartition runs a framework server over partition p of the stream
// with one group that counts into the store at dir, until the feed has
// settled, and returns the source's stats.
func runPartition(t *testing.T, js jetstream.JetStream, p int, dir string) natsfeed.Stats {
	t.Helper()
	cfg := partitionConfig(js, p)
	// Status reads while messages are on their way must not make the
	// feed look caught up (and settled) early.
	cfg.StatusInterval = 2 * time.Millisecond
	src, err := natsfeed.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("orders-%d", p)
	srv, err := framework.New(framework.Config{
		Feeds:        []framework.FeedConfig{{Name: name, Source: src}},
		Groups:       []framework.GroupConfig{{Name: "counters", Processors: []string{"count"}, Store: "bbolt:" + dir}},
		UntilSettled: true,
		Logger:       quiet(),
	}, framework.Processors{"count": &counter{feed: name}})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Run(context.Background()); err != nil {
		t.Fatalf("run: %v", err)
	}
	return src.Stats()
}

// TestFramework runs the source under the framework, with a group that
// keeps its state in a store: the framework resumes the source from the
// store (a second run starts after what the first applied), its commits
// acknowledge what the store made durable, and every message is counted
// once, also after the store's consumer was lost.
func TestFramework(t *testing.T) {
	_, js, _ := withStream(t, jetstream.StreamConfig{}, 300)
	dir := t.TempDir()
	st1 := runPartition(t, js, 1, dir)
	// Message i is at sequence i+1: partition 1 holds 2, 5, ... 299.
	if st1.Start != 1 || st1.Committed != 299 || st1.Acked != 299 {
		t.Fatalf("first run: %+v: want a start at 1 and 299 committed and acknowledged", st1)
	}
	publish(t, js, 300, 600)
	st2 := runPartition(t, js, 1, dir)
	if st2.Start != 300 || st2.Committed != 599 {
		t.Fatalf("second run: %+v: want a start after the store's 299", st2)
	}
	// The consumer lost (deleted): the store still says where to resume.
	if err := js.DeleteConsumer(context.Background(), testStream, "tidemark-1"); err != nil {
		t.Fatal(err)
	}
	publish(t, js, 600, 900)
	if st3 := runPartition(t, js, 1, dir); st3.Start != 600 || st3.Committed != 899 {
		t.Fatalf("third run: %+v: want a start after the store's 599", st3)
	}
	store, err := state.Open("bbolt:"+dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if err := store.View(func(tx *state.Tx) error {
		n := 0
		if err := tx.Bucket("counts").ForEach(func(k, _ []byte) error { n++; return nil }); err != nil {
			return err
		}
		if n != 300 {
			return fmt.Errorf("%d messages counted, want 300", n)
		}
		for i := 1; i < 900; i += partitions {
			if c, err := tx.Bucket("counts").GetInt64(fmt.Appendf(nil, "m-%d", i)); err != nil || c != 1 {
				return fmt.Errorf("m-%d counted %d times (%v)", i, c, err)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
