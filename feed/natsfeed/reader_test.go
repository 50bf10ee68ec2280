package natsfeed_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark-go/tidemark/feed"
	"github.com/tidemark-go/tidemark/feed/natsfeed"
	"github.com/tidemark-go/tidemark/internal/natstest"
)

// TestReadPartition reads one partition of a stream: its messages, in
// order, with the stream's epoch and sequences; nothing of the others.
func TestReadPartition(t *testing.T) {
	_, js, seqs := withStream(t, jetstream.StreamConfig{}, 300)
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

// TestAckFloorFollowsCommits checks that the consumer's ack floor never
// passes what the framework committed: nothing is acknowledged before a
// commit, a commit acknowledges exactly its position, and opening resets
// the floor down to the stores' position.
func TestAckFloorFollowsCommits(t *testing.T) {
	_, js, seqs := withStream(t, jetstream.StreamConfig{}, 300)
	want := partitionSeqs(seqs, 0, 1)
	src := newSource(t, partitionConfig(js, 1), []feed.ResumePoint{})
	items := pollN(t, src, len(want))
	epoch := src.Status().Epoch
	floor := func() uint64 { return consumerInfo(t, js, "tidemark-1").AckFloor.Stream }
	if f := floor(); f != 0 {
		t.Fatalf("ack floor %d before any commit", f)
	}
	for _, i := range []int{10, 11, 50, len(items) - 1} {
		pos := items[i].seq
		if err := src.Commit(epoch, int64(pos)); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "ack floor at the commit", func() bool {
			f := floor()
			if f > pos {
				t.Fatalf("ack floor %d above the commit %d", f, pos)
			}
			return f == pos
		})
	}
	// Commits of another epoch, below the last, of a position never
	// handed out: nothing moves.
	for _, c := range []struct {
		epoch uint64
		pos   int64
	}{{epoch + 1, int64(seqs[len(seqs)-1])}, {epoch, int64(items[3].seq)}, {epoch, int64(seqs[len(seqs)-1]) + 10}} {
		if err := src.Commit(c.epoch, c.pos); err != nil {
			t.Fatal(err)
		}
	}
	if st := src.Stats(); st.Acked != items[len(items)-1].seq {
		t.Fatalf("acked %d, want %d", st.Acked, items[len(items)-1].seq)
	}
	_ = src.Close()

	// A store at items[20]: the floor goes down to it at open.
	src = newSource(t, partitionConfig(js, 1), []feed.ResumePoint{point("s", epoch, int64(items[20].seq))})
	if err := src.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	if f := floor(); f != items[20].seq {
		t.Fatalf("ack floor %d after open, want the store's %d", f, items[20].seq)
	}
}

// TestSecondReaderDetected checks that another client pulling from the
// source's consumer stops the source with ErrSecondReader, after what it
// had received: the consumer sequences jump.
func TestSecondReaderDetected(t *testing.T) {
	srv, js, _ := withStream(t, jetstream.StreamConfig{}, 300)
	cfg := partitionConfig(js, 0)
	cfg.Buffer, cfg.PullBatch = 2, 2
	src := newSource(t, cfg, []feed.ResumePoint{})
	first := pollN(t, src, 1)
	waitFor(t, "the buffer full", func() bool { return src.Stats().Buffered == cfg.Buffer })

	other := natstest.JetStream(t, srv.URL())
	c, err := other.Consumer(context.Background(), testStream, cfg.Consumer)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := c.Fetch(5, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var stolen []uint64
	for m := range batch.Messages() {
		md, _ := m.Metadata()
		stolen = append(stolen, md.Sequence.Stream)
	}
	if len(stolen) == 0 {
		t.Fatalf("the second reader got nothing: %v", batch.Error())
	}
	rest, err := pollErr(t, src)
	if !errors.Is(err, natsfeed.ErrSecondReader) {
		t.Fatalf("error %v, want ErrSecondReader", err)
	}
	var e *natsfeed.Error
	if !errors.As(err, &e) || e.Consumer != cfg.Consumer || e.Stream != testStream || e.Epoch == 0 || e.Seq == 0 {
		t.Fatalf("error %#v: want stream, consumer, epoch and sequence", err)
	}
	for _, it := range append(first, rest...) {
		if slices.Contains(stolen, it.seq) {
			t.Fatalf("handed out %d, which the other reader took", it.seq)
		}
	}
	if st := src.Status(); st.State == feed.StateCaughtUp {
		t.Fatalf("a stopped source reports caught up: %+v", st)
	}
}

// TestConsumerResetByAnother checks that a source whose consumer another
// process reset (a new owner took the partition over) stops with
// ErrSecondReader: its consumer sequence goes back to 1.
func TestConsumerResetByAnother(t *testing.T) {
	srv, js, _ := withStream(t, jetstream.StreamConfig{}, 300)
	cfg := partitionConfig(js, 2)
	cfg.Buffer, cfg.PullBatch = 2, 2
	src := newSource(t, cfg, []feed.ResumePoint{})
	pollN(t, src, 10)
	other := natstest.JetStream(t, srv.URL())
	if _, err := other.ResetConsumerToSequence(context.Background(), testStream, cfg.Consumer, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := pollErr(t, src); !errors.Is(err, natsfeed.ErrSecondReader) {
		t.Fatalf("error %v, want ErrSecondReader", err)
	}
}

// TestRedeliveryDropped checks that messages the server delivers again
// (AckWait passed without a commit) are dropped and counted, never handed
// out twice, and that later messages still come.
func TestRedeliveryDropped(t *testing.T) {
	_, js, seqs := withStream(t, jetstream.StreamConfig{}, 15)
	cfg := partitionConfig(js, 1)
	cfg.AckWait = 200 * time.Millisecond
	src := newSource(t, cfg, []feed.ResumePoint{})
	want := partitionSeqs(seqs, 0, 1)
	items := pollN(t, src, len(want))
	waitFor(t, "re-deliveries", func() bool { return src.Stats().RedeliveriesDropped >= uint64(2*len(want)) })
	if n, err := src.Poll(context.Background(), make([]feed.Item, 10)); n != 0 || err != nil {
		t.Fatalf("poll after re-deliveries: %d items, %v", n, err)
	}
	more := publish(t, js, 15, 18)
	next := pollN(t, src, 1)
	if next[0].seq != partitionSeqs(more, 15, 1)[0] {
		t.Fatalf("next %d, want %d", next[0].seq, partitionSeqs(more, 15, 1)[0])
	}
	// A commit acknowledges, and the re-deliveries stop.
	if err := src.Commit(src.Status().Epoch, int64(next[0].seq)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "ack floor", func() bool { return consumerInfo(t, js, cfg.Consumer).AckFloor.Stream == next[0].seq })
	_ = items
}

// TestPauseStopsPulling checks that a source that is not polled (the feed
// pauses) stops pulling: the server delivers at most Buffer + PullBatch
// (+1 in the pump's hand) messages, then nothing until Poll makes room;
// and every message comes, in order, once polled.
func TestPauseStopsPulling(t *testing.T) {
	_, js, seqs := withStream(t, jetstream.StreamConfig{}, 1500)
	cfg := partitionConfig(js, 0)
	cfg.Buffer, cfg.PullBatch, cfg.StatusInterval = 16, 8, 20*time.Millisecond
	src := newSource(t, cfg, []feed.ResumePoint{})
	if err := src.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	bound := cfg.Buffer + cfg.PullBatch + 1
	waitFor(t, "the buffer full", func() bool { return src.Stats().Buffered == cfg.Buffer })
	// The pump waits for room: counted once it began, timed once it ended.
	waitFor(t, "the pump's wait for room counted", func() bool { return src.Stats().BufferFullWaits >= 1 })
	// Watch the consumer through a few status ticks of the source.
	for i := 0; i < 25; i++ {
		if n := consumerInfo(t, js, cfg.Consumer).NumAckPending; n > bound {
			t.Fatalf("paused, the server delivered %d messages, more than %d", n, bound)
		}
		time.Sleep(10 * time.Millisecond)
	}
	want := partitionSeqs(seqs, 0, 0)
	items := pollN(t, src, len(want))
	if !slices.Equal(seqsOf(items), want) {
		t.Fatalf("after the pause: %d items, not the partition in order", len(items))
	}
	if st := src.Stats(); st.BufferFullTime < 250*time.Millisecond {
		t.Fatalf("the pump waited %v for room in %d waits: want at least the pause's 250 ms", st.BufferFullTime, st.BufferFullWaits)
	}
}

// TestResetKeepsFloorAtCommit checks the reset after a reconnect: the
// consumer goes back to the last commit (not to what was handed out), so
// its ack floor stays at the commit; the messages handed out and not
// committed come again and are dropped; and the commits after the reset
// acknowledge them through those new deliveries.
func TestResetKeepsFloorAtCommit(t *testing.T) {
	srv, js, seqs := withStream(t, jetstream.StreamConfig{}, 300)
	want := partitionSeqs(seqs, 0, 0)
	cfg := partitionConfig(js, 0)
	src := newSource(t, cfg, []feed.ResumePoint{})
	items := pollN(t, src, len(want))
	epoch := src.Status().Epoch
	if err := src.Commit(epoch, int64(items[9].seq)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "ack floor", func() bool { return consumerInfo(t, js, cfg.Consumer).AckFloor.Stream == items[9].seq })
	srv.Restart()
	waitFor(t, "a reset", func() bool { return src.Stats().Resets >= 1 })
	waitFor(t, "the re-deliveries dropped", func() bool { return src.Stats().RedeliveriesDropped >= uint64(len(items)-10) })
	if f := consumerInfo(t, js, cfg.Consumer).AckFloor.Stream; f != items[9].seq {
		t.Fatalf("ack floor %d after the reset, want the commit %d", f, items[9].seq)
	}
	if n, err := src.Poll(context.Background(), make([]feed.Item, 10)); n != 0 || err != nil {
		t.Fatalf("after the reset: %d items, %v; want none handed out twice", n, err)
	}
	last := items[len(items)-1].seq
	if err := src.Commit(epoch, int64(last)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "ack floor at the last commit", func() bool { return consumerInfo(t, js, cfg.Consumer).AckFloor.Stream == last })
	if ci := consumerInfo(t, js, cfg.Consumer); ci.NumAckPending != 0 {
		t.Fatalf("%d deliveries pending after the last commit", ci.NumAckPending)
	}
	more := publish(t, js, 300, 303)
	if next := pollN(t, src, 1); next[0].seq != partitionSeqs(more, 300, 0)[0] {
		t.Fatalf("next %d, want %d", next[0].seq, partitionSeqs(more, 300, 0)[0])
	}
}

// TestConsumerDeletedStops checks that a source whose consumer is deleted
// under it (a new owner took the partition over, or an operator) stops
// with ErrConsumer after what it had received, and that a new source makes
// the consumer again and hands out the rest once, in order.
func TestConsumerDeletedStops(t *testing.T) {
	_, js, seqs := withStream(t, jetstream.StreamConfig{}, 300)
	cfg := partitionConfig(js, 1)
	cfg.StatusInterval = 50 * time.Millisecond
	src := newSource(t, cfg, []feed.ResumePoint{})
	first := pollN(t, src, 20)
	epoch := src.Status().Epoch
	if err := src.Commit(epoch, int64(first[19].seq)); err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteConsumer(context.Background(), testStream, cfg.Consumer); err != nil {
		t.Fatal(err)
	}
	more := publish(t, js, 300, 600)
	rest, err := pollErr(t, src)
	var e *natsfeed.Error
	if !errors.Is(err, natsfeed.ErrConsumer) || !errors.As(err, &e) || e.Consumer != cfg.Consumer {
		t.Fatalf("error %v, want ErrConsumer naming the consumer", err)
	}
	if _, err := js.Consumer(context.Background(), testStream, cfg.Consumer); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Fatalf("the stopped source made its consumer again: %v", err)
	}
	handed := append(first, rest...)
	want := partitionSeqs(append(seqs, more...), 0, 1)
	if !slices.Equal(seqsOf(handed), want[:len(handed)]) {
		t.Fatalf("handed out %v..., not the partition in order", seqsOf(handed)[:5])
	}
	// A new source, resumed from the commit.
	next := newSource(t, cfg, []feed.ResumePoint{point("store", epoch, int64(first[19].seq))})
	if items := pollN(t, next, len(want)-20); !slices.Equal(seqsOf(items), want[20:]) {
		t.Fatalf("the new source read %d items, not the rest in order", len(items))
	}
}

// TestCollector checks the Prometheus metrics of a source: registered
// beside another partition's, labelled by stream and partition, with the
// read, committed and last sequences.
func TestCollector(t *testing.T) {
	_, js, seqs := withStream(t, jetstream.StreamConfig{}, 30)
	reg := prometheus.NewPedanticRegistry()
	var srcs []*natsfeed.Source
	for p := range 2 {
		src := newSource(t, partitionConfig(js, p), []feed.ResumePoint{})
		reg.MustRegister(src.Collector())
		srcs = append(srcs, src)
	}
	want := partitionSeqs(seqs, 0, 1)
	items := pollN(t, srcs[1], len(want))
	if err := srcs[1].Commit(srcs[1].Status().Epoch, int64(items[4].seq)); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["stream"] != testStream || labels["partition"] != "1" {
				continue
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			got[mf.GetName()] = v
		}
	}
	for name, v := range map[string]float64{
		"tidemark_jetstream_read_sequence":        float64(want[len(want)-1]),
		"tidemark_jetstream_committed_sequence":   float64(items[4].seq),
		"tidemark_jetstream_acked_sequence":       float64(items[4].seq),
		"tidemark_jetstream_stream_last_sequence": float64(seqs[len(seqs)-1]),
		"tidemark_jetstream_delivered_total":      float64(len(want)),
		"tidemark_jetstream_uncommitted_messages": float64(len(want) - 5),
		"tidemark_jetstream_failed":               0,
	} {
		if got[name] != v {
			t.Errorf("%s = %v, want %v", name, got[name], v)
		}
	}
}

// TestConnectionClosed checks that a source whose connection is closed
// under it stops with ErrClosed, a permanent error.
func TestConnectionClosed(t *testing.T) {
	srv, _, _ := withStream(t, jetstream.StreamConfig{}, 30)
	js := natstest.JetStream(t, srv.URL())
	src := newSource(t, partitionConfig(js, 0), []feed.ResumePoint{})
	pollN(t, src, 10)
	js.Conn().Close()
	_, err := pollErr(t, src)
	var e *natsfeed.Error
	if !errors.Is(err, natsfeed.ErrClosed) || !errors.As(err, &e) || !e.Permanent() {
		t.Fatalf("error %v, want a permanent ErrClosed", err)
	}
}
