package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-go/tidemark/feed"
	"github.com/tidemark-go/tidemark/state"
)

func runLedger(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Main(args, &out, &errb)
	return code, out.String(), errb.String()
}

// TestRunSettlesAndRejects runs the server in-process on a file with
// malformed lines and an oversize line: it exits 0 once settled, the state
// is exact, every bad line is in rejects.csv once with its epoch and
// position, and a second run over the same file changes nothing.
func TestRunSettlesAndRejects(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "ledger.csv")
	data := filepath.Join(dir, "data")
	var b bytes.Buffer
	Gen(&b, GenOptions{Lines: 2000, Accounts: 7, Seed: 5, MalformedEvery: 50})
	b.WriteString("2001,big," + strings.Repeat("9", maxLineBytes) + "\n")
	b.WriteString("2002,alice,5\r\n")
	b.WriteString("2003,alice,7") // no newline: not a line yet
	os.WriteFile(input, b.Bytes(), 0o644)

	code, stdout, stderr := runLedger(t, "run", "--input", input, "--data", data, "--progress", "none")
	if code != 0 {
		t.Fatalf("run: exit %d\n%s", code, stderr)
	}
	if stdout != "" {
		t.Errorf("run printed on stdout without --events: %q", stdout)
	}
	if !strings.Contains(stderr, "ledger: settled: 2001 lines read, 1961 applied, 0 skipped as already applied, 40 rejected; ") {
		t.Errorf("summary missing:\n%s", stderr)
	}
	r := checkExact(t, data, input)
	if r.Rejects != 41 || r.State.Applied != 1961 {
		t.Fatalf("rejects %d, applied %d; want 41 (40 malformed, 1 oversize), 1961", r.Rejects, r.State.Applied)
	}
	rejects, _ := os.ReadFile(filepath.Join(data, rejectsFile))
	if !bytes.Contains(rejects, []byte(",want 3 comma-separated fields, found 2")) && !bytes.Contains(rejects, []byte("malformed line: want 3")) {
		t.Errorf("rejects.csv does not say why:\n%s", rejects[:min(400, len(rejects))])
	}
	if !bytes.Contains(rejects, []byte(`"line longer than MaxLineBytes`)) && !bytes.Contains(rejects, []byte("line longer than MaxLineBytes")) {
		t.Errorf("the oversize line is not in rejects.csv")
	}

	// The last line completes: the next run applies it, and only it.
	f, _ := os.OpenFile(input, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("\n")
	f.Close()
	code, _, stderr = runLedger(t, "run", "--input", input, "--data", data, "--progress", "none")
	if code != 0 {
		t.Fatalf("second run: exit %d\n%s", code, stderr)
	}
	if !strings.Contains(stderr, "1 lines read, 1 applied, 0 skipped") {
		t.Errorf("second run:\n%s", stderr)
	}
	checkExact(t, data, input)

	// balances: byte order of the account, then applied and total.
	code, stdout, _ = runLedger(t, "balances", "--data", data)
	if code != 0 {
		t.Fatal("balances failed")
	}
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if len(lines) != len(r.Want.Balances)+2 {
		t.Fatalf("balances printed %d lines, want %d:\n%s", len(lines), len(r.Want.Balances)+2, stdout)
	}
	m, _ := ModelOf(input)
	want := ""
	for _, a := range sortedKeys(m.Balances) {
		want += fmt.Sprintf("%s,%d\n", a, m.Balances[a])
	}
	want += fmt.Sprintf("applied %d\ntotal %d\n", m.Applied, m.Total)
	if stdout != want {
		t.Fatalf("balances:\n%s\nwant:\n%s", stdout, want)
	}
}

// TestRunFindsStoreKind: the backend chosen by the first run is recorded in
// the data folder; balances and check need no --store, and a later run
// with another --store keeps the recorded one.
func TestRunFindsStoreKind(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "ledger.csv")
	data := filepath.Join(dir, "data")
	GenFile(input, GenOptions{Lines: 300, Accounts: 3, Seed: 2})
	if code, _, stderr := runLedger(t, "run", "--input", input, "--data", data, "--store", "pebble", "--progress", "none"); code != 0 {
		t.Fatalf("run: %s", stderr)
	}
	info, err := ReadStore(data)
	if err != nil || info.Backend != "pebble" || info.State.Applied != 300 {
		t.Fatalf("%+v %v", info, err)
	}
	f, _ := os.OpenFile(input, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("301,dave,10\n")
	f.Close()
	if code, _, stderr := runLedger(t, "run", "--input", input, "--data", data, "--store", "bbolt", "--progress", "none"); code != 0 {
		t.Fatalf("run with --store bbolt on a pebble folder: %s", stderr)
	}
	code, stdout, _ := runLedger(t, "check", "--input", input, "--data", data)
	if code != 0 || stdout != "lines missing: 0, output lines written twice: 0\nstate: applied 301 (expected 301), total "+fmt.Sprint(info.State.Total+10)+" (expected "+fmt.Sprint(info.State.Total+10)+")\n" {
		t.Fatalf("check: exit %d\n%s", code, stdout)
	}
}

func TestRunUsageAndInputErrors(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"run"},
		{"run", "--input", "x"},
		{"run", "--input", "x", "--data", dir, "--store", "sqlite"},
		{"run", "--input", "x", "--data", dir, "--batch", "-1"},
		{"run", "--input", "x", "--data", dir, "extra"},
		{"nonsense"},
		{},
	} {
		if code, _, _ := runLedger(t, args...); code != exitUsage {
			t.Errorf("%q: exit %d, want %d", args, code, exitUsage)
		}
	}
	code, _, stderr := runLedger(t, "run", "--input", filepath.Join(dir, "missing.csv"), "--data", filepath.Join(dir, "d"), "--progress", "none")
	if code != exitFailed || !strings.Contains(stderr, "missing.csv") {
		t.Errorf("missing input: exit %d, %q", code, stderr)
	}
	if code, _, _ := runLedger(t, "balances", "--data", filepath.Join(dir, "none")); code != 1 {
		t.Errorf("balances of a missing folder: exit %d", code)
	}
}

// TestRunInterrupted: a run cancelled before its feed settles (SIGTERM
// without --follow) stops cleanly but does not claim to have settled.
func TestRunInterrupted(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "ledger.csv")
	data := filepath.Join(dir, "data")
	GenFile(input, GenOptions{Lines: 100000, Accounts: 3, Seed: 2})
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb bytes.Buffer
	outw, errw := &lockedWriter{w: &out}, &lockedWriter{w: &errb}
	done := make(chan int)
	go func() {
		code, _ := Run(ctx, RunOptions{Input: input, Data: data, Store: "bbolt", Dedupe: true, Pace: 200 * time.Microsecond, Progress: "none", Events: true}, outw, errw)
		done <- code
	}()
	// Interrupt once some lines are saved, with the queue full behind them.
	deadline := time.Now().Add(time.Minute)
	for {
		outw.mu.Lock()
		saved := strings.Contains(out.String(), "applied=") && !strings.HasSuffix(strings.TrimSpace(out.String()), "applied=0")
		outw.mu.Unlock()
		if saved {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no line saved within a minute")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if code := <-done; code != exitInterrupted {
		t.Fatalf("exit %d, want %d\n%s", code, exitInterrupted, errb.String())
	}
	// What it applied was saved and committed: a restart skips nothing.
	r, err := CheckDir(data, input)
	if err != nil {
		t.Fatal(err)
	}
	if r.Twice != 0 || r.State.Applied >= 100000 {
		t.Fatalf("%+v", r)
	}
	ptr, _ := loadPointer(input)
	info, _ := ReadStore(data)
	if ptr.Position != info.Applied.Position {
		t.Fatalf("after a clean stop the pointer is at %d, the state at %d", ptr.Position, info.Applied.Position)
	}
}

func TestFormatProgress(t *testing.T) {
	f := progressFacts{Lines: 1234, Position: 500, Size: 1000, State: "behind"}
	if got, want := formatProgress(f, 99.6, false), "ledger: 1234 lines, 100 lines/s, position 500/1000 bytes, behind"; got != want {
		t.Errorf("plain: %q, want %q", got, want)
	}
	if got := formatProgress(f, 10, true); !strings.HasPrefix(got, "[###############...............]  50% 1234 lines") {
		t.Errorf("bar: %q", got)
	}
	var b bytes.Buffer
	lines := uint64(0)
	p := NewProgress(&b, false, func() progressFacts { lines += 10; return progressFacts{Lines: lines, Size: 1} })
	now := time.Now()
	p.lastAt = now
	p.print(now.Add(time.Second))
	p.print(now.Add(2 * time.Second))
	if got := b.String(); got != "ledger: 10 lines, 10 lines/s, position 0/1 bytes\nledger: 20 lines, 10 lines/s, position 0/1 bytes\n" {
		t.Errorf("plain progress:\n%s", got)
	}
	b.Reset()
	live := NewProgress(&b, true, func() progressFacts { return progressFacts{Lines: 1, Size: 2, Position: 2} })
	live.lastAt = now
	live.print(now.Add(time.Second))
	if got := b.String(); !strings.HasPrefix(got, "\r[##############################] 100%") || !strings.HasSuffix(got, "\x1b[K") {
		t.Errorf("live progress: %q", got)
	}
}

func TestCheckCommand(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "ledger.csv")
	data := filepath.Join(dir, "data")
	GenFile(input, GenOptions{Lines: 500, Accounts: 4, Seed: 8})
	if code, _, stderr := runLedger(t, "run", "--input", input, "--data", data, "--progress", "none"); code != 0 {
		t.Fatal(stderr)
	}
	// A line the run never saw is missing; the state is short by it.
	f, _ := os.OpenFile(input, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("501,zed,42\n")
	f.Close()
	code, stdout, _ := runLedger(t, "check", "--input", input, "--data", data)
	m, _ := ModelOf(input)
	want := fmt.Sprintf("lines missing: 1, output lines written twice: 0\nstate: applied 500 (expected 501), total %d (expected %d)\nbalance zed: 0 (expected 42)\n", m.Total-42, m.Total)
	if code != 1 || stdout != want {
		t.Fatalf("check: exit %d\n%s\nwant:\n%s", code, stdout, want)
	}
	if code, _, _ := runLedger(t, "check", "--data", data); code != exitUsage {
		t.Errorf("check without --input: exit %d", code)
	}
}

// TestRunSaveModes: --sync saves every line in its own durable transaction;
// batched saves group them by --batch (and --batch-interval).
func TestRunSaveModes(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "ledger.csv")
	GenFile(input, GenOptions{Lines: 300, Accounts: 5, Seed: 3})
	saves := func(args ...string) int {
		t.Helper()
		data := filepath.Join(dir, fmt.Sprintf("data%d", len(args)))
		os.Remove(input + ".readPointer")
		var out, errb bytes.Buffer
		code := Main(append([]string{"run", "--input", input, "--data", data, "--progress", "none", "--events"}, args...), &out, &errb)
		if code != 0 {
			t.Fatalf("%q: exit %d\n%s", args, code, errb.String())
		}
		for _, line := range strings.Split(out.String(), "\n") {
			if ev, ok := parseEvent(line); ok && ev.kind == evDone {
				if ev.fields["applied"] != 300 {
					t.Fatalf("%q: %v", args, ev.fields)
				}
				return int(ev.fields["saves"])
			}
		}
		t.Fatalf("%q: no done event:\n%s", args, out.String())
		return 0
	}
	if n := saves("--sync"); n < 300 {
		t.Errorf("--sync: %d saves for 300 lines, want one per line", n)
	}
	if n := saves("--batch", "100", "--max-batch", "100", "--batch-interval", "1m"); n < 3 || n > 4 {
		t.Errorf("--batch 100 --max-batch 100: %d saves for 300 lines, want 3 (4 with the final flush)", n)
	}
	// By default a save grows past --batch while the one before it is
	// written, up to 4 times --batch: never more saves than --batch makes.
	if n := saves("--batch", "100", "--batch-interval", "1m"); n < 1 || n > 4 {
		t.Errorf("--batch 100: %d saves for 300 lines, want 1 to 4", n)
	}
}

// TestRunOpsListener: with --ops the run serves the operations listener
// while it lasts: metrics of the feed and the store, and status.
func TestRunOpsListener(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "ledger.csv")
	data := filepath.Join(dir, "data")
	if err := GenFile(input, GenOptions{Lines: 2000, Accounts: 3, Seed: 5}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb bytes.Buffer
	outw, errw := &lockedWriter{w: &out}, &lockedWriter{w: &errb}
	done := make(chan int)
	go func() {
		code, _ := Run(ctx, RunOptions{Input: input, Data: data, Store: "bbolt", Dedupe: true, Follow: true, Progress: "none", Ops: "127.0.0.1:0"}, outw, errw)
		done <- code
	}()
	stderr := func() string {
		errw.mu.Lock()
		defer errw.mu.Unlock()
		return errb.String()
	}
	var base string
	get := func(path string) string {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %v\n%s", path, resp.StatusCode, err, b)
		}
		return string(b)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, rest, ok := strings.Cut(stderr(), "operations listener on http://"); ok {
			base = "http://" + strings.TrimSuffix(strings.Fields(rest)[0], "/")
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no listener address on stderr:\n%s", stderr())
		}
		time.Sleep(time.Millisecond)
	}
	for !strings.Contains(get("/metrics"), `tidemark_feed_lines_read_total{feed="ledger"} 2000`) {
		if time.Now().After(deadline) {
			t.Fatalf("the metrics never showed the 2000 lines read:\n%s", get("/metrics"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	for !strings.Contains(get("/metrics"), `tidemark_group_handle_seconds_count{group="ledger-agent"} 2000`) {
		if time.Now().After(deadline) {
			t.Fatalf("the metrics never showed the 2000 lines handled:\n%s", get("/metrics"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The lines are handled before their batch is saved: wait for the
	// save's metrics too.
	for _, want := range []string{`tidemark_store_batches_committed_total{store="ledger"}`, `tidemark_store_commit_seconds_count{store="ledger"}`} {
		for !strings.Contains(get("/metrics"), want) {
			if time.Now().After(deadline) {
				t.Fatalf("metrics lack %s:\n%s", want, get("/metrics"))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if st := get("/status"); !strings.Contains(st, `"name": "ledger"`) {
		t.Errorf("status lacks the feed:\n%s", st)
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("exit %d\n%s", code, stderr())
	}
}

// TestFeedConfig: a run that de-duplicates resumes from its store, so its
// feed syncs the pointer file (a hint then) at most every interval rather
// than at each commit; a run without de-duplication resumes from the
// pointer, which it syncs at each commit. Both queue queueLines lines.
func TestFeedConfig(t *testing.T) {
	for _, tc := range []struct {
		dedupe bool
		want   feed.SyncPolicy
	}{{true, feed.SyncInterval}, {false, feed.SyncEveryCommit}} {
		o := RunOptions{Input: "in.csv", Dedupe: tc.dedupe}
		fc := o.feedConfig(&ledger{})
		if fc.File == nil || fc.File.Sync != tc.want {
			t.Errorf("dedupe %v: the feed's pointer sync policy is %v, want %v", tc.dedupe, fc.File.Sync, tc.want)
		}
		if fc.QueueCapacity != queueLines {
			t.Errorf("dedupe %v: the feed's queue holds %d lines, want %d", tc.dedupe, fc.QueueCapacity, queueLines)
		}
		if fc.File.Filename != o.Input || fc.Name != feedName {
			t.Errorf("dedupe %v: feed %q of file %q, want %q of %q", tc.dedupe, fc.Name, fc.File.Filename, feedName, o.Input)
		}
	}
}

// TestMaxBatchByBackend: a save grows, while the one before it is being
// written, to 4 times --batch with bbolt and Pebble and to 20 times with
// PostgreSQL, whose saves cost the server a row for each account they
// change (at 10,000 accounts a save of 40,000 lines changes 9,800, one of
// 200,000 all 10,000); --max-batch wins over either.
func TestMaxBatchByBackend(t *testing.T) {
	for _, c := range []struct {
		batch, max int
		pg         bool
		want       int
	}{
		{0, 0, false, 4 * state.DefaultBatchSize},
		{0, 0, true, 20 * state.DefaultBatchSize},
		{500, 0, false, 2000},
		{500, 0, true, 10000},
		{500, 700, false, 700},
		{500, 700, true, 700},
		{500, 500, true, 500},
	} {
		o := RunOptions{Batch: c.batch, MaxBatch: c.max}
		if got := o.maxBatch(c.pg); got != c.want {
			t.Errorf("--batch %d --max-batch %d, PostgreSQL %v: MaxBatchSize %d, want %d", c.batch, c.max, c.pg, got, c.want)
		}
	}
}
