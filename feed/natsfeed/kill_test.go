package natsfeed_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/feed"
	"github.com/tidemark-go/tidemark/feed/natsfeed"
	"github.com/tidemark-go/tidemark/internal/natstest"
	"github.com/tidemark-go/tidemark/state"
)

// consumerChildEnv holds the JSON consumerJob of TestConsumerKilled's
// child.
const consumerChildEnv = "TIDEMARK_NATSFEED_CONSUMER"

// killFeed is the feed name the child's store records.
const killFeed = "orders-1"

// consumerJob is what the child of TestConsumerKilled does.
type consumerJob struct {
	URL   string // the server
	Store string // the state store spec
	Last  uint64 // the partition's last sequence: the child exits once it applied it
}

// consumerChild reads partition 1 with a source resumed from a bbolt
// store, applies each message to the store (a count per message), and
// commits what the store made durable: Poll, Apply each item, Flush,
// Commit. It prints "applied <seq>" after each Apply and "committed
// <seq>" after each Commit, unbuffered, and exits 0 once the store's
// record is at Last.
func consumerChild(job consumerJob) {
	die := func(err error) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	st, err := state.Open(job.Store, &state.Options{Unbound: true, Logger: quiet()})
	if err != nil {
		die(err)
	}
	points := []feed.ResumePoint{{Holder: "child store"}}
	if recs := st.AppliedAll(killFeed); len(recs) > 0 {
		points = points[:0]
		for _, l := range recs {
			points = append(points, feed.ResumePoint{Holder: "child store", Found: true, Lineage: l})
		}
	}
	js := natstest.JetStream(nopT{}, job.URL)
	src, err := natsfeed.New(partitionConfig(js, 1))
	if err != nil {
		die(err)
	}
	if err := src.ResumeFrom(points); err != nil {
		die(err)
	}
	ctx := context.Background()
	items := make([]feed.Item, 7)
	for {
		if rec, ok := st.Applied(killFeed); ok && uint64(rec.Position) >= job.Last {
			break
		}
		n, err := src.Poll(ctx, items)
		if err != nil {
			die(err)
		}
		if n == 0 {
			time.Sleep(time.Millisecond)
			continue
		}
		for _, it := range items[:n] {
			d := tidemark.Delivery{Feed: killFeed, Epoch: it.Epoch, Position: it.Position, Seq: it.Seq, Origin: it.Origin}
			if _, err := st.Apply(ctx, d, func(tx *state.Tx) error {
				_, err := tx.Bucket("m").AddInt64(it.Line, 1)
				return err
			}); err != nil {
				die(err)
			}
			fmt.Printf("applied %d\n", it.Position)
		}
		if err := st.Flush(ctx); err != nil {
			die(err)
		}
		last := items[n-1]
		if err := src.Commit(last.Epoch, last.Position); err != nil {
			die(err)
		}
		fmt.Printf("committed %d\n", last.Position)
	}
	_ = src.Close()
	if err := st.Close(); err != nil {
		die(err)
	}
	fmt.Println("done")
	os.Exit(0)
}

// nopT lets the child use natstest.JetStream, which fails through t.
type nopT struct{ testing.TB }

func (nopT) Helper()                      {}
func (nopT) Cleanup(func())               {}
func (nopT) Fatalf(f string, args ...any) { fmt.Fprintf(os.Stderr, f+"\n", args...); os.Exit(2) }

// TestConsumerKilled kills the consuming process with SIGKILL, at moments
// chosen by its progress (messages applied, staged or durable), while it
// reads a partition into a bbolt store, and starts it again: each start
// resumes from the store's record, and at the end every message of the
// partition was applied exactly once: 0 lost, 0 twice. Before every other
// start the consumer is deleted, so that the store alone says where to
// resume (the consumer's ack floor, which follows the commits, would
// otherwise cover for a wrong start).
func TestConsumerKilled(t *testing.T) {
	if v := os.Getenv(consumerChildEnv); v != "" {
		var job consumerJob
		if err := json.Unmarshal([]byte(v), &job); err != nil {
			t.Fatal(err)
		}
		consumerChild(job)
		return
	}
	const n = 3000
	srv, js, seqs := withStream(t, jetstream.StreamConfig{}, n)
	want := partitionSeqs(seqs, 0, 1)
	job := consumerJob{URL: srv.URL(), Store: "bbolt:" + t.TempDir(), Last: want[len(want)-1]}
	index := func(seq uint64) int {
		i, ok := slices.BinarySearch(want, seq)
		if !ok {
			t.Fatalf("the child applied %d, not a message of the partition", seq)
		}
		return i
	}
	last := -1 // index in want of the last message a run applied
	kills := []int{1, 40, 150, 151, 200}
	for i, at := range append(kills, -1) {
		if i%2 == 1 {
			if err := js.DeleteConsumer(context.Background(), testStream, "tidemark-1"); err != nil {
				t.Fatal(err)
			}
		}
		seen, done := runConsumerChild(t, job, at)
		if len(seen) == 0 {
			t.Fatalf("run %d applied nothing", i)
		}
		if index(seen[0]) > last+1 {
			// A restart resumes from the store's record, which is at or
			// before the last message the run before applied: never
			// after it.
			t.Fatalf("run %d started at %d, past the message after the last one applied before (%d): a gap", i, seen[0], want[last+1])
		}
		last = index(seen[len(seen)-1])
		t.Logf("run %d: applied %d messages, %d to %d", i, len(seen), seen[0], seen[len(seen)-1])
		if at < 0 && !done {
			t.Fatalf("the last run did not finish")
		}
	}
	st, err := state.Open(job.Store, &state.Options{Unbound: true, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	counts := map[string]int64{}
	if err := st.View(func(tx *state.Tx) error {
		var keys []string
		if err := tx.Bucket("m").ForEach(func(k, _ []byte) error { keys = append(keys, string(k)); return nil }); err != nil {
			return err
		}
		for _, k := range keys {
			n, err := tx.Bucket("m").GetInt64([]byte(k))
			if err != nil {
				return err
			}
			counts[k] = n
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var lost, twice []string
	for i := 1; i < n; i += partitions {
		k := fmt.Sprintf("m-%d", i)
		switch counts[k] {
		case 1:
		case 0:
			lost = append(lost, k)
		default:
			twice = append(twice, k)
		}
		delete(counts, k)
	}
	if len(lost) > 0 || len(twice) > 0 || len(counts) > 0 {
		t.Fatalf("%d lost %v, %d applied twice %v, %d not of the partition", len(lost), lost, len(twice), twice, len(counts))
	}
	if rec, ok := st.Applied(killFeed); !ok || uint64(rec.Position) != want[len(want)-1] || rec.TailLen == 0 {
		t.Fatalf("store's record %+v, %v: want the last sequence %d with a tail hash", rec, ok, want[len(want)-1])
	}
}

// runConsumerChild runs the child on job until it printed at "applied"
// lines, then kills it with SIGKILL; with at < 0 it lets the child finish.
// It returns the sequences the child applied (printed) and whether it
// finished.
func runConsumerChild(t *testing.T, job consumerJob, at int) ([]uint64, bool) {
	t.Helper()
	b, _ := json.Marshal(job)
	cmd := exec.Command(os.Args[0], "-test.run=^TestConsumerKilled$", "-test.count=1")
	cmd.Env = append(os.Environ(), consumerChildEnv+"="+string(b))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(90*time.Second, func() { _ = cmd.Process.Kill() })
	defer timer.Stop()
	var seen []uint64
	done := false
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		word, arg, _ := strings.Cut(sc.Text(), " ")
		switch word {
		case "applied":
			seq, _ := strconv.ParseUint(arg, 10, 64)
			seen = append(seen, seq)
			if at >= 0 && len(seen) == at {
				_ = cmd.Process.Signal(syscall.SIGKILL)
			}
		case "done":
			done = true
		}
	}
	err = cmd.Wait()
	if at >= 0 {
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); (!ok || !ws.Signaled()) && !done {
			t.Fatalf("child exited without being killed: %v\n%s", err, stderr.String())
		}
	} else if err != nil {
		t.Fatalf("last child: %v\n%s", err, stderr.String())
	}
	return seen, done
}
