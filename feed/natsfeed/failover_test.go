package natsfeed_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tidemark-go/tidemark/feed"
	"github.com/tidemark-go/tidemark/feed/natsfeed"
	"github.com/tidemark-go/tidemark/internal/natstest"
)

// reader polls a source on its own goroutine, as the framework's feed
// runner does, commits every batch, and keeps the sequences it was handed.
type reader struct {
	t    *testing.T
	src  *natsfeed.Source
	mu   sync.Mutex
	seqs []uint64
	err  error
	stop chan struct{}
	done chan struct{}
}

func startReader(t *testing.T, src *natsfeed.Source) *reader {
	r := &reader{t: t, src: src, stop: make(chan struct{}), done: make(chan struct{})}
	go r.run()
	t.Cleanup(r.halt)
	return r
}

func (r *reader) run() {
	defer close(r.done)
	items := make([]feed.Item, 100)
	for {
		select {
		case <-r.stop:
			return
		default:
		}
		n, err := r.src.Poll(context.Background(), items)
		if err != nil && n == 0 {
			// The framework logs and retries a failed Poll; a source error
			// that never clears ends the test.
			r.mu.Lock()
			r.err = err
			r.mu.Unlock()
			if _, ok := err.(*natsfeed.Error); ok {
				return
			}
		}
		if n == 0 {
			time.Sleep(time.Millisecond)
			continue
		}
		r.mu.Lock()
		for _, it := range items[:n] {
			r.seqs = append(r.seqs, uint64(it.Position))
		}
		r.mu.Unlock()
		_ = r.src.Commit(items[n-1].Epoch, items[n-1].Position) // retried by the next commit
	}
}

// count is how many items the reader was handed.
func (r *reader) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seqs)
}

// waitCount waits until the reader was handed n items.
func (r *reader) waitCount(n int) {
	r.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for r.count() < n {
		r.mu.Lock()
		err := r.err
		r.mu.Unlock()
		if _, ok := err.(*natsfeed.Error); ok {
			r.t.Fatalf("source stopped after %d of %d items: %v", r.count(), n, err)
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("only %d of %d items within 60 s (last error %v); stats %+v", r.count(), n, err, r.src.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (r *reader) halt() {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	<-r.done
}

// check stops the reader and checks that it was handed exactly want, in
// order: nothing lost, nothing twice.
func (r *reader) check(want []uint64) {
	r.t.Helper()
	r.halt()
	r.mu.Lock()
	defer r.mu.Unlock()
	if slices.Equal(r.seqs, want) {
		return
	}
	for i := 1; i < len(r.seqs); i++ {
		if r.seqs[i] <= r.seqs[i-1] {
			r.t.Fatalf("handed out %d after %d (item %d)", r.seqs[i], r.seqs[i-1], i)
		}
	}
	var lost []uint64
	for _, s := range want {
		if _, ok := slices.BinarySearch(r.seqs, s); !ok {
			lost = append(lost, s)
		}
	}
	r.t.Fatalf("handed out %d items, want %d; lost %d: %v", len(r.seqs), len(want), len(lost), lost[:min(len(lost), 20)])
}

// publisher publishes messages from..to-1 on its own goroutine, retrying
// each until the stream acknowledges it (the message ID makes a retry of
// a stored message a duplicate the stream drops).
type publisher struct {
	mu   sync.Mutex
	seqs []uint64
	done chan struct{}
}

func startPublisher(t *testing.T, js jetstream.JetStream, from, to int, pace time.Duration) *publisher {
	p := &publisher{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for i := from; i < to; i++ {
			seq := publishOne(t, js, i)
			p.mu.Lock()
			p.seqs = append(p.seqs, seq)
			p.mu.Unlock()
			if pace > 0 {
				time.Sleep(pace)
			}
		}
	}()
	return p
}

// wait waits for the publisher to finish and returns the sequences.
func (p *publisher) wait(t *testing.T) []uint64 {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(120 * time.Second):
		t.Fatalf("publisher not done within 120 s")
	}
	return p.seqs
}

// TestServerRestart restarts the server (same port and store) twice while
// a source reads and a publisher writes: the source reconnects, resets its
// consumer to its last commit, and hands out every message once, in
// order.
func TestServerRestart(t *testing.T) {
	srv := natstest.Run(t, natstest.Config{})
	js := natstest.JetStream(t, srv.URL())
	makeStream(t, js, jetstream.StreamConfig{})
	const n = 3000
	pub := startPublisher(t, natstest.JetStream(t, srv.URL()), 0, n, 0)
	src := newSource(t, partitionConfig(js, 1), []feed.ResumePoint{})
	r := startReader(t, src)
	for _, at := range []int{100, 500} {
		r.waitCount(at)
		srv.Restart()
	}
	seqs := pub.wait(t)
	want := partitionSeqs(seqs, 0, 1)
	r.waitCount(len(want))
	r.check(want)
	if st := src.Stats(); st.Resets < 1 {
		t.Fatalf("no reset after two restarts; stats %+v", st)
	}
}

// TestServerProcessKilled kills a nats-server child process with SIGKILL
// twice while a source reads and a publisher writes, and restarts it on
// the same port and store: every acknowledged message is handed out once,
// in order. Paced, the publisher is slower than the source, so that the
// kills land while the source is caught up and waits.
func TestServerProcessKilled(t *testing.T) {
	for _, c := range []struct {
		name  string
		n     int
		pace  time.Duration
		kills []int
		cfg   natstest.Config
	}{
		{"flat out, sync always", 2000, 0, []int{50, 300}, natstest.Config{SyncAlways: true}},
		{"paced", 600, 200 * time.Microsecond, []int{20, 100}, natstest.Config{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := natstest.StartProcess(t, c.cfg)
			js := natstest.JetStream(t, p.URL())
			makeStream(t, js, jetstream.StreamConfig{})
			pub := startPublisher(t, natstest.JetStream(t, p.URL()), 0, c.n, c.pace)
			src := newSource(t, partitionConfig(js, 2), []feed.ResumePoint{})
			r := startReader(t, src)
			for _, at := range c.kills {
				r.waitCount(at)
				p.Restart() // SIGKILL, then start again
			}
			seqs := pub.wait(t)
			want := partitionSeqs(seqs, 0, 2)
			r.waitCount(len(want))
			r.check(want)
			// Two kills close together may take one reset.
			if st := src.Stats(); st.Resets < 1 {
				t.Fatalf("no reset after %d kills of the server; stats %+v", len(c.kills), st)
			}
		})
	}
}

// TestClusterFailover runs an R3 stream on a 3-node cluster, kills the
// stream's leader while a source reads and a publisher writes, brings it
// back, then kills the consumer's leader: every acknowledged message is
// handed out once, in order.
func TestClusterFailover(t *testing.T) {
	c := natstest.RunCluster(t, 3, natstest.Config{})
	js := natstest.JetStream(t, c.URLs())
	makeStream(t, js, jetstream.StreamConfig{Replicas: 3})
	const n = 1500
	pub := startPublisher(t, natstest.JetStream(t, c.URLs()), 0, n, 0)
	cfg := partitionConfig(js, 0)
	src := newSource(t, cfg, []feed.ResumePoint{})
	r := startReader(t, src)

	t0 := time.Now()
	step := func(what string) { t.Logf("%v %s", time.Since(t0).Round(time.Millisecond), what) }
	r.waitCount(100)
	leader := c.StreamLeader(testStream)
	step("kill stream leader " + leader.Name())
	leader.Shutdown()
	r.waitCount(200)
	step("restart it")
	leader.Restart()
	c.WaitStreamCurrent(testStream)
	cl := c.ConsumerLeader(testStream, cfg.Consumer)
	step("kill consumer leader " + cl.Name())
	r.waitCount(300)
	cl.Shutdown()
	r.waitCount(400)
	step("restart it")
	cl.Restart()

	seqs := pub.wait(t)
	step("published")
	want := partitionSeqs(seqs, 0, 0)
	r.waitCount(len(want))
	step("read")
	r.check(want)
	t.Logf("stats after the failovers: %+v", src.Stats())
}
