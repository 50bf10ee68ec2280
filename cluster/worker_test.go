package cluster_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tidemark-go/tidemark/cluster"
	"github.com/tidemark-go/tidemark/state"
)

// workerEnv holds the JSON workerJob of a worker child.
const workerEnv = "TIDEMARK_CLUSTER_WORKER"

// workerJob is what a worker child runs.
type workerJob struct {
	URL, DB, Worker string
	Parts           int
	Lease           time.Duration
	// BatchInterval is the stores' longest wait before a save: long, so
	// that a worker paused at any moment holds lines not saved yet.
	BatchInterval time.Duration
}

// workerChild runs a supervisor with the tests' counter until SIGTERM,
// and prints its events on stdout, one a line:
//
//	acquired P TOKEN
//	released P TOKEN
//	lost P TOKEN fenced=0|1 ERROR
func workerChild(v string) {
	var job workerJob
	if err := json.Unmarshal([]byte(v), &job); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	nc, err := nats.Connect(job.URL, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	js, _ := jetstream.New(nc)
	var mu sync.Mutex
	cfg := cluster.Config{
		Name: "test", Worker: job.Worker, JetStream: js, Stream: testStream, Partitions: job.Parts,
		FilterSubject: filter, Database: job.DB, Lease: job.Lease, FeedName: "orders",
		Partition: counterServer(job.BatchInterval),
		Logger:    quiet().With("worker", job.Worker),
		OnEvent: func(ev cluster.Event) {
			mu.Lock()
			defer mu.Unlock()
			switch ev.Kind {
			case cluster.Lost:
				f := 0
				if errors.Is(ev.Err, state.ErrFenced) {
					f = 1
				}
				fmt.Printf("lost %d %d fenced=%d %s\n", ev.Partition, ev.Token, f, strings.ReplaceAll(ev.Err.Error(), "\n", " "))
			default:
				fmt.Printf("%s %d %d\n", ev.Kind, ev.Partition, ev.Token)
			}
		},
	}
	cfg.Source.StatusInterval = 50 * time.Millisecond
	s, err := cluster.New(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := s.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	nc.Close()
	os.Exit(0)
}

// childWorker is a worker child, followed through its events.
type childWorker struct {
	t      testing.TB
	cmd    *exec.Cmd
	stderr strings.Builder

	mu      sync.Mutex
	held    map[int]int64 // partition → token
	events  []string
	exited  chan struct{}
	waitErr error
}

// startWorker starts a worker child of job in e.
func startWorker(t testing.TB, job workerJob) *childWorker {
	t.Helper()
	b, _ := json.Marshal(job)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), workerEnv+"="+string(b))
	c := &childWorker{t: t, cmd: cmd, held: map[int]int64{}, exited: make(chan struct{})}
	cmd.Stderr = &lockedBuilder{b: &c.stderr, mu: &c.mu}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) < 3 {
				continue
			}
			p, _ := strconv.Atoi(f[1])
			tok, _ := strconv.ParseInt(f[2], 10, 64)
			c.mu.Lock()
			c.events = append(c.events, sc.Text())
			switch f[0] {
			case "acquired":
				c.held[p] = tok
			case "released", "lost":
				delete(c.held, p)
			}
			c.mu.Unlock()
		}
		c.waitErr = cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-c.exited
	})
	return c
}

type lockedBuilder struct {
	b  *strings.Builder
	mu *sync.Mutex
}

func (l *lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// holding returns the partitions the child holds, by its events.
func (c *childWorker) holding() map[int]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[int]int64{}
	for p, t := range c.held {
		out[p] = t
	}
	return out
}

func (c *childWorker) log() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return "events:\n" + strings.Join(c.events, "\n") + "\nstderr:\n" + tail(c.stderr.String())
}

func tail(s string) string {
	if len(s) > 4000 {
		return "…" + s[len(s)-4000:]
	}
	return s
}

// signal sends sig to the child.
func (c *childWorker) signal(sig syscall.Signal) {
	c.t.Helper()
	if err := c.cmd.Process.Signal(sig); err != nil {
		c.t.Fatalf("signal %v: %v", sig, err)
	}
}

// publisher publishes messages in the background, numbered from next, a
// few at a time, until stop.
type publisher struct {
	next    atomic.Int64
	stopped chan struct{}
	done    chan struct{}
}

func startPublisher(t testing.TB, js jetstream.JetStream, from int) *publisher {
	p := &publisher{stopped: make(chan struct{}), done: make(chan struct{})}
	p.next.Store(int64(from))
	go func() {
		defer close(p.done)
		for {
			select {
			case <-p.stopped:
				return
			default:
			}
			i := int(p.next.Load())
			publishTo(t, js, i, i+5)
			p.next.Add(5)
			time.Sleep(2 * time.Millisecond)
		}
	}()
	return p
}

// stop stops the publisher and returns how many messages there are.
func (p *publisher) stop() int {
	close(p.stopped)
	<-p.done
	return int(p.next.Load())
}

// waitPublished waits until n more messages were published.
func (p *publisher) waitPublished(t testing.TB, n int) {
	t.Helper()
	want := p.next.Load() + int64(n)
	waitFor(t, time.Minute, fmt.Sprintf("%d more messages published", n), func() bool { return p.next.Load() >= want })
}

// twoWorkers starts a publisher, a worker child (its stores saving every
// batchInterval) and a worker in this process over four partitions, and
// returns once each holds two and 200 more messages were published.
func twoWorkers(t *testing.T, batchInterval time.Duration) (*env, *publisher, *childWorker, *running, cluster.Config) {
	e := newEnv(t, 4)
	lease := 1500 * time.Millisecond
	pub := startPublisher(t, e.js, 0)
	a := startWorker(t, workerJob{URL: e.url, DB: e.db, Worker: "child", Parts: 4, Lease: lease, BatchInterval: batchInterval})
	cfg := e.config("b", lease)
	cfg.Source.StatusInterval = 50 * time.Millisecond
	b := start(t, cfg)
	waitFor(t, time.Minute, "two partitions each", func() bool { return len(a.holding()) == 2 && len(b.held()) == 2 }, a.log, statusOf(b))
	pub.waitPublished(t, 200)
	return e, pub, a, b, cfg
}

// TestDeadWorkersPartitionsAreTakenOver: a worker process killed with
// SIGKILL, at a moment chosen by the messages published since it took its
// share, loses its partitions when their leases run out; the other worker
// takes them over and resumes each from what its store applied: every
// message once.
func TestDeadWorkersPartitionsAreTakenOver(t *testing.T) {
	e, pub, a, b, cfg := twoWorkers(t, 0)
	lease := cfg.Lease
	lost := a.holding()
	a.signal(syscall.SIGKILL)
	killed := time.Now()
	<-a.exited
	waitFor(t, time.Minute, "the other worker to hold every partition", func() bool { return len(b.held()) == 4 }, statusOf(b))
	took := time.Since(killed)
	for p, tok := range lost {
		if ps := b.s.Status().PartitionStates[p]; ps.Token <= tok {
			t.Errorf("partition %d: token %d after the take-over, the dead owner's %d: want a later one", p, ps.Token, tok)
		}
	}
	t.Logf("partitions %v taken over %v after the SIGKILL (lease %v)", lost, took.Round(time.Millisecond), lease)
	pub.waitPublished(t, 100)
	n := pub.stop()
	waitFor(t, time.Minute, "every message applied", e.settled(b), statusOf(b))
	b.stop(t)
	e.checkExact(cfg, n)
}

// TestPausedWorkerIsFenced: a worker frozen with SIGSTOP, with lines
// applied and not saved yet, past its lease: the other worker takes its
// partitions over and applies on. Woken with SIGCONT, the frozen worker's
// late commits are refused (its partitions are lost with an error
// wrapping state.ErrFenced), nothing of them is visible (every message is
// counted once), and it gets its share back.
func TestPausedWorkerIsFenced(t *testing.T) {
	e, pub, a, b, cfg := twoWorkers(t, time.Hour)
	frozen := a.holding()
	a.signal(syscall.SIGSTOP)
	waitFor(t, time.Minute, "the other worker to hold every partition", func() bool { return len(b.held()) == 4 }, statusOf(b))
	// The new owner saves lines of the frozen one's partitions.
	for p := range frozen {
		before := b.s.Status().PartitionStates[p].Applied
		waitFor(t, time.Minute, fmt.Sprintf("partition %d saved by the new owner", p), func() bool {
			return b.s.Status().PartitionStates[p].Applied > before
		}, statusOf(b))
	}
	a.signal(syscall.SIGCONT)
	waitFor(t, time.Minute, "the woken worker to lose its partitions, fenced", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		n := 0
		for _, ev := range a.events {
			if strings.HasPrefix(ev, "lost ") && strings.Contains(ev, "fenced=1") {
				n++
			}
		}
		return n == len(frozen)
	}, a.log)
	a.mu.Lock()
	evs := append([]string(nil), a.events...)
	a.mu.Unlock()
	for _, ev := range evs {
		if strings.HasPrefix(ev, "lost ") {
			t.Logf("the woken worker: %s", ev)
		}
		if strings.HasPrefix(ev, "lost ") && !strings.Contains(ev, "taken over by another owner") {
			t.Errorf("a lost partition's error does not say it was taken over: %s", ev)
		}
	}
	waitFor(t, time.Minute, "two partitions each again", func() bool { return len(a.holding()) == 2 && len(b.held()) == 2 }, a.log, statusOf(b))
	pub.waitPublished(t, 100)
	n := pub.stop()
	// Both settle: b's partitions by its status, a's once b holds them
	// all after a stops.
	a.signal(syscall.SIGTERM)
	<-a.exited
	if a.waitErr != nil {
		t.Fatalf("the woken worker's exit: %v\n%s", a.waitErr, a.log())
	}
	waitFor(t, time.Minute, "every message applied", e.settled(b), statusOf(b))
	b.stop(t)
	e.checkExact(cfg, n)
}
