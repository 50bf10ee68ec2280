package natsfeed_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tidemark-go/tidemark/feed"
	"github.com/tidemark-go/tidemark/feed/natsfeed"
	"github.com/tidemark-go/tidemark/internal/natstest"
)

// TestEpochIsStreamIdentity checks that the epoch is the stream's
// creation time, that a purge keeps it and a delete and re-create changes
// it, and that a record of the old epoch starts the new stream from its
// first sequence.
func TestEpochIsStreamIdentity(t *testing.T) {
	srv := natstest.Run(t, natstest.Config{})
	js := natstest.JetStream(t, srv.URL())
	ctx := context.Background()
	st := makeStream(t, js, jetstream.StreamConfig{})
	publish(t, js, 0, 30)
	first := uint64(streamInfo(t, js).Created.UnixNano())

	if err := st.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if e := uint64(streamInfo(t, js).Created.UnixNano()); e != first {
		t.Fatalf("epoch after purge %d, want %d", e, first)
	}
	// A store that applied everything before the purge starts after it:
	// the purge removed nothing it needed.
	seqs := publish(t, js, 30, 45)
	src := newSource(t, partitionConfig(js, 0), []feed.ResumePoint{point("store", first, 30)})
	want := partitionSeqs(seqs, 30, 0)
	if items := pollN(t, src, len(want)); !slices.Equal(seqsOf(items), want) {
		t.Fatalf("after a purge: %v, want %v", seqsOf(items), want)
	}
	if e := src.Status().Epoch; e != first {
		t.Fatalf("source epoch after purge %d, want %d", e, first)
	}
	_ = src.Close()

	if err := js.DeleteStream(ctx, testStream); err != nil {
		t.Fatal(err)
	}
	makeStream(t, js, jetstream.StreamConfig{})
	second := uint64(streamInfo(t, js).Created.UnixNano())
	if second == first {
		t.Fatalf("a recreated stream has the epoch of the old one (%d)", first)
	}
	seqs = publish(t, js, 0, 9)
	src = newSource(t, partitionConfig(js, 0), []feed.ResumePoint{point("store", first, 45)})
	want = partitionSeqs(seqs, 0, 0)
	if items := pollN(t, src, len(want)); !slices.Equal(seqsOf(items), want) || want[0] != 1 {
		t.Fatalf("new epoch: %v, want %v from sequence 1", seqsOf(items), want)
	}
	if e := src.Status().Epoch; e != second {
		t.Fatalf("source epoch %d, want the new stream's %d", e, second)
	}
}

// TestStreamRecreatedWhileReading checks that a source whose stream is
// deleted and recreated under it stops with ErrStreamChanged, after what
// it had received.
func TestStreamRecreatedWhileReading(t *testing.T) {
	_, js, _ := withStream(t, jetstream.StreamConfig{}, 30)
	cfg := partitionConfig(js, 2)
	cfg.StatusInterval = 50 * time.Millisecond
	src := newSource(t, cfg, []feed.ResumePoint{})
	pollN(t, src, 10)
	if err := js.DeleteStream(context.Background(), testStream); err != nil {
		t.Fatal(err)
	}
	makeStream(t, js, jetstream.StreamConfig{})
	publish(t, js, 0, 30)
	items, err := pollErr(t, src)
	if !errors.Is(err, natsfeed.ErrStreamChanged) {
		t.Fatalf("error %v, want ErrStreamChanged", err)
	}
	if len(items) != 0 {
		t.Fatalf("handed out %v of the new stream under the old epoch", seqsOf(items))
	}
	var e *natsfeed.Error
	if !errors.As(err, &e) || e.Stream != testStream || e.Epoch == 0 || !e.Permanent() {
		t.Fatalf("error %#v: want a permanent *Error naming the stream and epoch", err)
	}
}

// TestResumeAtAppliedPlusOne checks where a source starts: after the
// lowest record of the current epoch, from the first sequence for a store
// without one, at the consumer's ack floor when it is lower (subscribers
// without a store), and never at a floor above a store (counted as a
// rewind).
func TestResumeAtAppliedPlusOne(t *testing.T) {
	_, js, seqs := withStream(t, jetstream.StreamConfig{}, 300)
	epoch := uint64(streamInfo(t, js).Created.UnixNano())
	all := partitionSeqs(seqs, 0, 1)
	after := func(a uint64) []uint64 {
		i, _ := slices.BinarySearch(all, a+1)
		return all[i:]
	}
	run := func(name string, points []feed.ResumePoint, want []uint64) *natsfeed.Source {
		t.Helper()
		src := newSource(t, partitionConfig(js, 1), points)
		items := pollN(t, src, len(want))
		if !slices.Equal(seqsOf(items), want) {
			t.Fatalf("%s: read %v..., want %v...", name, seqsOf(items)[:3], want[:3])
		}
		return src
	}
	// Two stores: the lower decides.
	a, b := all[40], all[20]
	src := run("two records", []feed.ResumePoint{point("a", epoch, int64(a)), point("b", epoch, int64(b))}, after(b))
	if st := src.Stats(); st.Start != b+1 || st.AckFloor != b {
		t.Fatalf("stats %+v: want start %d and the ack floor reset to %d", st, b+1, b)
	}
	// The consumer's floor is at b now; commit up to a.
	if err := src.Commit(src.Status().Epoch, int64(a)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "ack floor at the commit", func() bool { return consumerInfo(t, js, "tidemark-1").AckFloor.Stream == a })
	_ = src.Close()

	// A store without a record: from the stream's first sequence.
	src = run("no record", []feed.ResumePoint{point("a", epoch, int64(a)), {Holder: "new"}}, all)
	_ = src.Close()

	// No store at all: the consumer's ack floor is the only record.
	src = newSource(t, partitionConfig(js, 1), nil)
	items := pollN(t, src, 5)
	if first := items[0].seq; first != all[0] {
		// The last run reset the floor to its start (the first message).
		t.Fatalf("no store: first %d, want %d", first, all[0])
	}
	if err := src.Commit(src.Status().Epoch, int64(items[4].seq)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "ack floor", func() bool { return consumerInfo(t, js, "tidemark-1").AckFloor.Stream == items[4].seq })
	_ = src.Close()
	src = run("ack floor", nil, after(items[4].seq))
	_ = src.Close()

	// A store behind the floor: the store decides, and it is a rewind.
	src = run("store behind the floor", []feed.ResumePoint{point("a", epoch, int64(all[2]))}, after(all[2]))
	if st := src.Status(); st.Rewinds != 1 || st.LastRewind == "" {
		t.Fatalf("rewinds %d %q, want 1", st.Rewinds, st.LastRewind)
	}
	_ = src.Close()

	// A floor below the store (subscribers without a store have not
	// finished): from the floor.
	src = run("floor below the store", []feed.ResumePoint{point("a", epoch, int64(all[50]))}, after(all[2]))
	_ = src.Close()
}

// TestGapAtOpen checks that messages a store needs and the stream no
// longer holds (purged, aged out) stop the source with ErrGap naming the
// stream, epoch and sequences, unless OnGap is GapSkip.
func TestGapAtOpen(t *testing.T) {
	for _, how := range []string{"purge", "max age", "max msgs"} {
		t.Run(how, func(t *testing.T) {
			srv := natstest.Run(t, natstest.Config{})
			js := natstest.JetStream(t, srv.URL())
			cfg := jetstream.StreamConfig{}
			switch how {
			case "max age":
				cfg.MaxAge = 500 * time.Millisecond
			case "max msgs":
				cfg.MaxMsgs = 20
			}
			st := makeStream(t, js, cfg)
			seqs := publish(t, js, 0, 60)
			epoch := uint64(streamInfo(t, js).Created.UnixNano())
			applied := partitionSeqs(seqs, 0, 0)[3]
			switch how {
			case "purge":
				if err := st.Purge(context.Background()); err != nil {
					t.Fatal(err)
				}
			case "max age":
				waitFor(t, "messages aged out", func() bool { return streamInfo(t, js).State.Msgs == 0 })
			}
			first := max(streamInfo(t, js).State.FirstSeq, 1)
			src := newSource(t, partitionConfig(js, 0), []feed.ResumePoint{point("store", epoch, int64(applied))})
			err := src.Open(context.Background())
			var e *natsfeed.Error
			if !errors.Is(err, natsfeed.ErrGap) || !errors.As(err, &e) {
				t.Fatalf("open: %v, want ErrGap", err)
			}
			if e.Epoch != epoch || e.Stream != testStream || e.From != applied+1 || e.To != first-1 || e.Seq != applied {
				t.Fatalf("gap %+v: want epoch %d, sequences %d-%d after %d", e, epoch, applied+1, first-1, applied)
			}
			if _, perr := src.Poll(context.Background(), make([]feed.Item, 1)); !errors.Is(perr, natsfeed.ErrGap) {
				t.Fatalf("poll after the gap: %v, want the same error", perr)
			}
			if how == "max age" {
				// The messages published next must not age out before
				// they are read on a loaded machine.
				cfg.Name, cfg.Subjects, cfg.MaxAge = testStream, []string{"orders.>"}, 0
				if _, err := js.UpdateStream(context.Background(), cfg); err != nil {
					t.Fatal(err)
				}
			}
			// Accepted: from the first sequence the stream holds.
			more := publish(t, js, 60, 66)
			skip := partitionConfig(js, 0)
			skip.OnGap = natsfeed.GapSkip
			src = newSource(t, skip, []feed.ResumePoint{point("store", epoch, int64(applied))})
			want := partitionSeqs(more, 60, 0)
			if how == "max msgs" {
				// The limit keeps the last 20 messages.
				first = streamInfo(t, js).State.FirstSeq
				want = slices.DeleteFunc(append(partitionSeqs(seqs, 0, 0), want...), func(s uint64) bool { return s < first })
			}
			if items := pollN(t, src, len(want)); !slices.Equal(seqsOf(items), want) {
				t.Fatalf("after the skipped gap %v, want %v", seqsOf(items), want)
			}
			if n := src.Stats().GapsSkipped; n != 1 {
				t.Fatalf("gaps skipped %d, want 1", n)
			}
		})
	}
}

// TestGapWhileBehind checks that messages of the partition removed from
// the stream while the feed is paused (not polled) are reported as a gap,
// after the messages received before, whether later messages arrive or
// not.
func TestGapWhileBehind(t *testing.T) {
	for _, later := range []bool{true, false} {
		t.Run(map[bool]string{true: "later messages", false: "no later message"}[later], func(t *testing.T) {
			srv := natstest.Run(t, natstest.Config{})
			js := natstest.JetStream(t, srv.URL())
			st := makeStream(t, js, jetstream.StreamConfig{})
			seqs := publish(t, js, 0, 300)
			cfg := partitionConfig(js, 0)
			cfg.Buffer, cfg.PullBatch, cfg.StatusInterval = 4, 4, 50*time.Millisecond
			src := newSource(t, cfg, []feed.ResumePoint{})
			items := pollN(t, src, 2)
			waitFor(t, "the buffer full", func() bool { return src.Stats().Buffered == cfg.Buffer })
			if err := st.Purge(context.Background()); err != nil {
				t.Fatal(err)
			}
			if later {
				publish(t, js, 300, 330)
			}
			rest, err := pollErr(t, src)
			if !errors.Is(err, natsfeed.ErrGap) {
				t.Fatalf("error %v, want ErrGap", err)
			}
			all := append(items, rest...)
			want := partitionSeqs(seqs, 0, 0)[:len(all)]
			if !slices.Equal(seqsOf(all), want) {
				t.Fatalf("handed out %v, want %v: nothing after the gap", seqsOf(all), want)
			}
			var e *natsfeed.Error
			errors.As(err, &e)
			if e.From != want[len(want)-1]+1 || e.To < e.From || e.Epoch == 0 {
				t.Fatalf("gap %+v after %d", e, want[len(want)-1])
			}
		})
	}
}

// TestAppliedMessageChecked checks the message at a store's applied
// sequence: the tail hash a store recorded through the Origin matches it;
// another hash, a sequence past the stream's end or a message of another
// partition stop the source.
func TestAppliedMessageChecked(t *testing.T) {
	_, js, seqs := withStream(t, jetstream.StreamConfig{AllowDirect: true}, 30)
	src := newSource(t, partitionConfig(js, 1), []feed.ResumePoint{})
	items := make([]feed.Item, 5)
	var n int
	waitFor(t, "items", func() bool {
		var err error
		n, err = src.Poll(context.Background(), items)
		if err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
	last := items[n-1]
	h, err := last.Origin.TailHash(last.Position, 64)
	if err != nil {
		t.Fatalf("tail hash: %v", err)
	}
	if h2, _ := last.Origin.TailHash(last.Position, 1); h2 != h {
		t.Fatalf("tail hash depends on n: %x, %x", h, h2)
	}
	if _, err := last.Origin.TailHash(last.Position+1, 64); err == nil {
		t.Fatalf("tail hash of a position never handed out: no error")
	}
	epoch := last.Epoch
	_ = src.Close()

	rec := func(pos int64, hash uint64) []feed.ResumePoint {
		p := point("store", epoch, pos)
		p.Lineage.TailLen, p.Lineage.TailHash = 64, hash
		return []feed.ResumePoint{p}
	}
	if err := newSource(t, partitionConfig(js, 1), rec(last.Position, h)).Open(context.Background()); err != nil {
		t.Fatalf("open with the right tail hash: %v", err)
	}
	for _, c := range []struct {
		name   string
		points []feed.ResumePoint
		kind   error
	}{
		{"another message", rec(last.Position, h^1), natsfeed.ErrDiverged},
		{"past the end", rec(int64(seqs[len(seqs)-1]+5), 0), natsfeed.ErrStreamBehind},
		{"another partition", []feed.ResumePoint{point("store", epoch, int64(partitionSeqs(seqs, 0, 2)[0]))}, natsfeed.ErrWrongPartition},
	} {
		err := newSource(t, partitionConfig(js, 1), c.points).Open(context.Background())
		var e *natsfeed.Error
		if !errors.Is(err, c.kind) || !errors.As(err, &e) || e.Holder != "store" || e.Seq != uint64(c.points[0].Lineage.Position) || e.Epoch != epoch {
			t.Fatalf("%s: %v, want %v naming the store, its sequence and the epoch", c.name, err, c.kind)
		}
	}
}

// TestWaitsForStream checks that a source started before its stream
// exists waits (status waiting, no error), then reads it.
func TestWaitsForStream(t *testing.T) {
	srv := natstest.Run(t, natstest.Config{})
	js := natstest.JetStream(t, srv.URL())
	src := newSource(t, partitionConfig(js, 0), []feed.ResumePoint{{Holder: "new"}})
	if n, err := src.Poll(context.Background(), make([]feed.Item, 4)); n != 0 || err != nil {
		t.Fatalf("poll without the stream: %d, %v", n, err)
	}
	if st := src.Status(); st.State != feed.StateWaiting {
		t.Fatalf("state %v, want waiting", st.State)
	}
	makeStream(t, js, jetstream.StreamConfig{})
	seqs := publish(t, js, 0, 9)
	if items := pollN(t, src, 3); !slices.Equal(seqsOf(items), partitionSeqs(seqs, 0, 0)) {
		t.Fatalf("read %v", seqsOf(items))
	}
}

// TestConfigErrors checks that a config that cannot make a source is
// refused with ErrConfig, and ResumeFrom after the start with ErrStarted.
func TestConfigErrors(t *testing.T) {
	srv := natstest.Run(t, natstest.Config{})
	js := natstest.JetStream(t, srv.URL())
	for _, cfg := range []natsfeed.Config{
		{Stream: "S"},
		{JetStream: js},
		{JetStream: js, Stream: "a.b"},
		{JetStream: js, Stream: "S", FilterSubject: "orders..x"},
		{JetStream: js, Stream: "S", FilterSubject: "orders.>.x"},
		{JetStream: js, Stream: "S", Partition: "a.b"},
		{JetStream: js, Stream: "S", Buffer: -1},
	} {
		if _, err := natsfeed.New(cfg); !errors.Is(err, natsfeed.ErrConfig) {
			t.Errorf("config %+v: %v, want ErrConfig", cfg, err)
		}
	}
	makeStream(t, js, jetstream.StreamConfig{})
	src := newSource(t, partitionConfig(js, 0), nil)
	if err := src.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := src.ResumeFrom(nil); !errors.Is(err, natsfeed.ErrStarted) {
		t.Fatalf("ResumeFrom after open: %v, want ErrStarted", err)
	}
}

// TestServerLostMessages brings the server back with an older copy of its
// store, as after a crash that lost what the file store had not synced
// (the default sync interval is two minutes), after a store applied
// messages the server no longer has: the source refuses to start, first
// because the stream ends below the store's record, then, once new
// messages reuse those sequences, because the message at the record is not
// the one the store applied (its tail hash). Never a silent skip.
func TestServerLostMessages(t *testing.T) {
	srv, js, _ := withStream(t, jetstream.StreamConfig{}, 30)
	srv.Shutdown()
	old := t.TempDir()
	if err := os.CopyFS(old, os.DirFS(srv.StoreDir())); err != nil {
		t.Fatal(err)
	}
	srv.Restart()
	publish(t, js, 30, 60)
	src := newSource(t, partitionConfig(js, 0), []feed.ResumePoint{})
	items := make([]feed.Item, 20)
	k := 0
	waitFor(t, "all of the partition", func() bool {
		n, err := src.Poll(context.Background(), items[k:])
		if err != nil {
			t.Fatal(err)
		}
		k += n
		return k == 20
	})
	last := items[19]
	h, err := last.Origin.TailHash(last.Position, 64)
	if err != nil {
		t.Fatal(err)
	}
	_ = src.Close()
	rec := point("store", last.Epoch, last.Position)
	rec.Lineage.TailLen, rec.Lineage.TailHash = 64, h

	// The server comes back with what it had synced: 30 messages.
	srv.Shutdown()
	if err := os.RemoveAll(srv.StoreDir()); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(srv.StoreDir(), os.DirFS(old)); err != nil {
		t.Fatal(err)
	}
	srv.Restart()
	if e := uint64(streamInfo(t, js).Created.UnixNano()); e != last.Epoch {
		t.Fatalf("the restored stream has epoch %d, want %d", e, last.Epoch)
	}
	err = newSource(t, partitionConfig(js, 0), []feed.ResumePoint{rec}).Open(context.Background())
	if !errors.Is(err, natsfeed.ErrStreamBehind) {
		t.Fatalf("open on the stream that lost messages: %v, want ErrStreamBehind", err)
	}
	// New messages take the lost sequences.
	publish(t, js, 100, 140)
	err = newSource(t, partitionConfig(js, 0), []feed.ResumePoint{rec}).Open(context.Background())
	if !errors.Is(err, natsfeed.ErrDiverged) {
		t.Fatalf("open after the sequences were reused: %v, want ErrDiverged", err)
	}
}

// TestAckFloorPastStreamEnd gives the server back an older copy of its
// messages and a newer one of the consumer (what a crash that synced the
// consumer's state and not the stream's leaves): a source without a store
// (resuming at the ack floor) reads the messages that reuse the lost
// sequences rather than skip them. (nats-server 2.15 itself lowers the
// floor to the stream's end at its start; the source does the same when
// a server does not.)
func TestAckFloorPastStreamEnd(t *testing.T) {
	srv, js, _ := withStream(t, jetstream.StreamConfig{}, 30)
	srv.Shutdown()
	msgs := filepath.Join(srv.StoreDir(), "jetstream", "$G", "streams", testStream, "msgs")
	old := t.TempDir()
	if err := os.CopyFS(old, os.DirFS(msgs)); err != nil {
		t.Fatal(err)
	}
	srv.Restart()
	publish(t, js, 30, 60)
	src := newSource(t, partitionConfig(js, 0), nil)
	items := pollN(t, src, 20)
	if err := src.Commit(src.Status().Epoch, int64(items[19].seq)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "ack floor", func() bool { return consumerInfo(t, js, "tidemark-0").AckFloor.Stream == items[19].seq })
	_ = src.Close()
	srv.Shutdown()
	if err := os.RemoveAll(msgs); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(msgs, os.DirFS(old)); err != nil {
		t.Fatal(err)
	}
	srv.Restart()
	if last := streamInfo(t, js).State.LastSeq; last != 30 {
		t.Fatalf("the restored stream ends at %d, want 30", last)
	}
	seqs := publish(t, js, 100, 130) // sequences 31..60 again
	src = newSource(t, partitionConfig(js, 0), nil)
	want := partitionSeqs(seqs, 100, 0)
	if got := pollN(t, src, len(want)); !slices.Equal(seqsOf(got), want) {
		t.Fatalf("read %v, want the new messages %v", seqsOf(got), want)
	}
}
