package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tidemark-go/tidemark/internal/natstest"
	"github.com/tidemark-go/tidemark/internal/pgtest"
	"github.com/tidemark-go/tidemark/state"
)

// worker is a `ledger run --source` child, followed through its events.
type worker struct {
	t      *testing.T
	cmd    *exec.Cmd
	mu     sync.Mutex
	held   map[string]bool // partitions, by their number
	lines  map[string]int64
	events []string
	log    bytes.Buffer
	exited chan struct{}
	err    error
}

// startWorker runs `ledger run --source SRC --store DB --events ARGS...`.
func startWorker(t *testing.T, exe string, args ...string) *worker {
	t.Helper()
	w := &worker{t: t, held: map[string]bool{}, lines: map[string]int64{}, exited: make(chan struct{})}
	w.cmd = exec.Command(exe, append([]string{"run", "--events", "--progress", "none", "--log-level", "info"}, args...)...)
	w.cmd.Stderr = &lockedWriter{w: &w.log}
	out, err := w.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			f := map[string]string{}
			parts := strings.Fields(line)
			for _, kv := range parts[1:] {
				k, v, _ := strings.Cut(kv, "=")
				f[k] = v
			}
			w.mu.Lock()
			w.events = append(w.events, line)
			switch parts[0] {
			case evAcquired:
				w.held[f["partition"]] = true
			case evReleased, evLost:
				delete(w.held, f["partition"])
			case "durable":
				var n int64
				fmt.Sscan(f["lines"], &n)
				w.lines[f["partition"]] = n
			}
			w.mu.Unlock()
		}
		w.err = w.cmd.Wait()
		close(w.exited)
	}()
	t.Cleanup(func() {
		_ = w.cmd.Process.Kill()
		<-w.exited
	})
	return w
}

func (w *worker) holds() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.held)
}

func (w *worker) dump() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.log.String()
	if len(s) > 3000 {
		s = "…" + s[len(s)-3000:]
	}
	return strings.Join(w.events, "\n") + "\n" + s
}

// stop sends SIGTERM and waits for a clean exit.
func (w *worker) stop() {
	w.t.Helper()
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-w.exited:
	case <-time.After(time.Minute):
		w.t.Fatalf("the worker did not stop within a minute of SIGTERM\n%s", w.dump())
	}
	if w.err != nil {
		w.t.Fatalf("the worker's exit: %v\n%s", w.err, w.dump())
	}
}

// savedLines returns the lines the workers' partitions hold, by the last
// durable event of each partition (of whichever worker held it last).
func savedLines(ws ...*worker) int64 {
	best := map[string]int64{}
	for _, w := range ws {
		w.mu.Lock()
		for p, n := range w.lines {
			best[p] = max(best[p], n)
		}
		w.mu.Unlock()
	}
	var n int64
	for _, v := range best {
		n += v
	}
	return n
}

func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool, why func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v\n%s", what, d, why())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// runMain runs the ledger's Main in this process and returns its exit
// code and output.
func runMain(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := Main(args, &out, &errb)
	return code, out.String(), errb.String()
}

// TestPartitionedLedger is the partitioned ledger end to end: a
// generated ledger (malformed lines among it) published into a stream of
// three partitions, two worker processes that share it, one stopped
// (SIGTERM: a clean hand-over) and one killed with SIGKILL part way, a
// third that takes over after the lease; then `ledger check --source`
// sums the partitions' stores against the stream and the input: nothing
// missing, nothing applied twice, each rejected line recorded once.
func TestPartitionedLedger(t *testing.T) {
	exe := ledgerExe(t)
	ns := natstest.Run(t, natstest.Config{})
	dir := t.TempDir()
	input := filepath.Join(dir, "ledger.csv")
	if err := GenFile(input, GenOptions{Lines: 20000, Accounts: 50, Seed: 3, MalformedEvery: 97}); err != nil {
		t.Fatal(err)
	}
	src := ns.URL() + "/LEDGER"
	db := pgtest.Shared(t).Schema(t)
	if code, out, errs := runMain("publish", "--input", input, "--to", src, "--partitions", "3"); code != 0 || !strings.Contains(out, "published 20000 lines") {
		t.Fatalf("publish: exit %d: %s%s", code, out, errs)
	}
	args := func(name string) []string {
		return []string{"--source", src, "--store", db, "--worker", name, "--lease", "1s", "--pace", "200µs"}
	}
	a := startWorker(t, exe, args("a")...)
	b := startWorker(t, exe, args("b")...)
	waitUntil(t, time.Minute, "the workers to share the partitions", func() bool { return a.holds()+b.holds() == 3 && a.holds() > 0 && b.holds() > 0 }, func() string { return a.dump() + b.dump() })
	waitUntil(t, time.Minute, "3,000 lines saved", func() bool { return savedLines(a, b) >= 3000 }, func() string { return a.dump() + b.dump() })
	a.stop() // a clean hand-over
	waitUntil(t, time.Minute, "b to hold every partition", func() bool { return b.holds() == 3 }, b.dump)
	// The kill comes part way through as a rule; the paced workers may
	// have saved nearly everything already on a quiet machine.
	at := min(savedLines(a, b)+2000, 20000)
	waitUntil(t, time.Minute, "2,000 lines more", func() bool { return savedLines(a, b) >= at }, b.dump)
	_ = b.cmd.Process.Signal(syscall.SIGKILL)
	<-b.exited
	c := startWorker(t, exe, args("c")...)
	waitUntil(t, 2*time.Minute, "every line saved", func() bool { return savedLines(a, b, c) >= 20000 }, c.dump)
	// The check refuses while a worker holds the stores. b may have saved
	// a partition's last lines before the kill, and its store is free
	// until c takes the partition's lease (b's lapses after a second).
	waitUntil(t, time.Minute, "c to hold every partition", func() bool { return c.holds() == 3 }, c.dump)
	if code, out, errs := runMain("check", "--source", src, "--store", db); code == 0 || !strings.Contains(errs, "a worker holds the store") {
		t.Fatalf("check while a worker runs: exit %d: %s%s\nthe worker's events:\n%s", code, out, errs, c.dump())
	}
	c.stop()
	code, out, errs := runMain("check", "--source", src, "--store", db, "--input", input)
	t.Logf("check:\n%s%s", out, errs)
	if code != 0 {
		t.Fatalf("check: exit %d\n%s%s\nworker c:\n%s", code, out, errs, c.dump())
	}
	for _, want := range []string{"lines missing: 0, output lines written twice: 0", "state: applied 19794 (expected 19794)", "input lines not in the stream: 0, published twice: 0"} {
		if !strings.Contains(out, want) {
			t.Errorf("check's report lacks %q", want)
		}
	}
}

// TestPartitionedMistakes: the partitioned run's plausible mistakes each
// end in an error that says what to do.
func TestPartitionedMistakes(t *testing.T) {
	ns := natstest.Run(t, natstest.Config{})
	db := pgtest.Shared(t).Schema(t)
	dir := t.TempDir()
	input := filepath.Join(dir, "ledger.csv")
	if err := GenFile(input, GenOptions{Lines: 10, Accounts: 3, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	js := natstest.JetStream(t, ns.URL())
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "PLAIN", Subjects: []string{"plain.>"}}); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := runMain("publish", "--input", input, "--to", ns.URL()+"/P3", "--partitions", "3"); code != 0 {
		t.Fatalf("publish: %s", errs)
	}
	if code, _, errs := runMain("publish", "--input", input, "--to", ns.URL()+"/PURGED", "--partitions", "2"); code != 0 {
		t.Fatalf("publish: %s", errs)
	}
	if s, err := js.Stream(context.Background(), "PURGED"); err != nil {
		t.Fatal(err)
	} else if err := s.Purge(context.Background()); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"a local store", []string{"run", "--source", ns.URL() + "/P3"}, exitUsage, "needs --store postgres://"},
		{"with --input", []string{"run", "--source", ns.URL() + "/P3", "--store", db, "--input", input}, exitUsage, "--input does not go with --source"},
		{"worker without source", []string{"run", "--input", input, "--data", dir, "--worker", "x"}, exitUsage, "--worker goes with --source"},
		{"not a nats URL", []string{"run", "--source", "localhost:4222/P3", "--store", db}, exitUsage, "want nats://HOST:PORT/STREAM"},
		{"a negative --max-batch", []string{"run", "--source", ns.URL() + "/P3", "--store", db, "--max-batch", "-1"}, exitUsage, "usage"},
		{"a stream not partitioned", []string{"run", "--source", ns.URL() + "/PLAIN", "--store", db}, exitFailed, "not partitioned"},
		{"another partition count", []string{"run", "--source", ns.URL() + "/P3", "--store", db, "--partitions", "4"}, exitFailed, "has 3 partitions, --partitions says 4"},
		{"no stream, no count", []string{"run", "--source", ns.URL() + "/NONE", "--store", db}, exitFailed, "give --partitions N to wait for it"},
		{"publish without a count", []string{"publish", "--input", input, "--to", ns.URL() + "/NEW"}, exitFailed, "give --partitions N to make it"},
		{"publish with another count", []string{"publish", "--input", input, "--to", ns.URL() + "/P3", "--partitions", "2"}, exitFailed, "has 3 partitions"},
		{"check without a store", []string{"check", "--source", ns.URL() + "/P3"}, 2, "usage"},
		{"check a purged stream", []string{"check", "--source", ns.URL() + "/PURGED", "--store", db}, 1, "holds 0 of the 10 messages it stored"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, errs := runMain(c.args...)
			if code != c.code || !strings.Contains(out+errs, c.want) {
				t.Fatalf("exit %d (want %d): %s%s\nwant it to say %q", code, c.code, out, errs, c.want)
			}
		})
	}
	_ = os.Remove(input)
}

// A partition's store batches as a file run's of a PostgreSQL store does:
// --max-batch reaches it, 20 times --batch by default.
func TestPartitionStoreOptions(t *testing.T) {
	for _, c := range []struct {
		batch, max, want int
	}{{0, 0, 20 * state.DefaultBatchSize}, {500, 0, 10000}, {500, 700, 700}, {500, 500, 500}} {
		o := partitionStoreOptions(RunOptions{Batch: c.batch, MaxBatch: c.max})
		if o.BatchSize != c.batch || o.MaxBatchSize != c.want {
			t.Errorf("--batch %d --max-batch %d: BatchSize %d, MaxBatchSize %d; want %d, %d", c.batch, c.max, o.BatchSize, o.MaxBatchSize, c.batch, c.want)
		}
	}
}

// TestPartitionedKeyedStream: a stream made by an earlier `ledger
// publish`, whose stored subjects keep the account (STREAM.P.KEY), is
// still read whole: the workers filter it with STREAM.P.>, and the check
// finds every line once. A worker that filtered it with this version's
// STREAM.P would read nothing of it.
func TestPartitionedKeyedStream(t *testing.T) {
	exe := ledgerExe(t)
	ns := natstest.Run(t, natstest.Config{})
	dir := t.TempDir()
	input := filepath.Join(dir, "ledger.csv")
	if err := GenFile(input, GenOptions{Lines: 3000, Accounts: 40, Seed: 8}); err != nil {
		t.Fatal(err)
	}
	js := natstest.JetStream(t, ns.URL())
	cfg := streamConfig("OLD", 2, 1, jetstream.LimitsPolicy)
	cfg.SubjectTransform.Destination = "OLD.{{partition(2,1)}}.{{wildcard(1)}}"
	if _, err := js.CreateStream(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	src, db := ns.URL()+"/OLD", pgtest.Shared(t).Schema(t)
	if code, out, errs := runMain("publish", "--input", input, "--to", src); code != 0 || !strings.Contains(out, "published 3000 lines") {
		t.Fatalf("publish: exit %d: %s%s", code, out, errs)
	}
	st, err := js.Stream(context.Background(), "OLD")
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetMsg(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(m.Subject, "."); n != 2 {
		t.Fatalf("stored subject %q: want the keyed layout OLD.P.KEY", m.Subject)
	}
	w := startWorker(t, exe, "--source", src, "--store", db, "--worker", "a", "--lease", "1s")
	waitUntil(t, 2*time.Minute, "every line saved", func() bool { return savedLines(w) >= 3000 }, w.dump)
	w.stop()
	code, out, errs := runMain("check", "--source", src, "--store", db, "--input", input)
	if code != 0 || !strings.Contains(out, "lines missing: 0, output lines written twice: 0") {
		t.Fatalf("check: exit %d\n%s%s\nworker:\n%s", code, out, errs, w.dump())
	}
}
