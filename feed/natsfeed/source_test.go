package natsfeed_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tidemark-go/tidemark/feed"
	"github.com/tidemark-go/tidemark/internal/natstest"
)

// TestReadPartition reads one partition of a stream: its messages, in
// order, with the stream's epoch and sequences; nothing of the others.
func TestReadPartition(t *testing.T) {
	srv := natstest.Run(t, natstest.Config{})
	js := natstest.JetStream(t, srv.URL())
	makeStream(t, js, jetstream.StreamConfig{})
	seqs := publish(t, js, 0, 300)
	src := newSource(t, partitionConfig(js, 1), []feed.ResumePoint{})
	want := partitionSeqs(seqs, 0, 1)
	items := pollN(t, src, len(want))
	if !slices.Equal(seqsOf(items), want) {
		t.Fatalf("sequences %v, want %v", seqsOf(items), want)
	}
	for i, it := range items {
		if w := fmt.Sprintf("m-%d", 3*i+1); it.line != w {
			t.Fatalf("item %d: line %q, want %q", i, it.line, w)
		}
	}
	info := streamInfo(t, js)
	st := src.Status()
	if st.Epoch != uint64(info.Created.UnixNano()) {
		t.Fatalf("epoch %d, want the stream's creation time %d", st.Epoch, info.Created.UnixNano())
	}
	if st.Path != "jetstream://ORDERS/1" || st.ReadPosition != int64(want[len(want)-1]) {
		t.Fatalf("status %+v", st)
	}
	waitFor(t, "caught up", func() bool { return src.Status().State == feed.StateCaughtUp })
}
