package bench_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/bench"
	"github.com/tidemark-go/tidemark/feed"
	"github.com/tidemark-go/tidemark/feed/pointer"
	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/state"
)

var quiet = slog.New(slog.DiscardHandler)

func ledgerFile(tb testing.TB, lines int) string {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "ledger.csv")
	if err := bench.GenLedgerFile(path, lines, 1); err != nil {
		tb.Fatal(err)
	}
	return path
}

// reportLines reports the rate of lines per second of the benchmark's loop.
func reportLines(b *testing.B, perLoop int) {
	lines := float64(perLoop) * float64(b.N)
	b.ReportMetric(lines/b.Elapsed().Seconds(), "lines/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/lines, "ns/line")
}

// BenchmarkFraming reads a file with a file source (OnceEarliest: no
// pointer) to its end, in batches of the framework's default size.
func BenchmarkFraming(b *testing.B) {
	const lines = 100_000
	path := ledgerFile(b, lines)
	items := make([]feed.Item, framework.DefaultBatchSize)
	ctx := context.Background()
	for b.Loop() {
		src, err := feed.NewFileSource(feed.Config{Path: path, Strategy: feed.OnceEarliest, Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for {
			k, err := src.Poll(ctx, items)
			n += k
			if errors.Is(err, feed.ErrDone) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		if err := src.Close(); err != nil {
			b.Fatal(err)
		}
		if n != lines {
			b.Fatalf("read %d lines, want %d", n, lines)
		}
	}
	reportLines(b, lines)
}

// BenchmarkPointerEncode encodes one pointer record.
func BenchmarkPointerEncode(b *testing.B) {
	p := pointer.Record{Epoch: 1764000000000000000, Position: 1 << 30, Identity: tidemark.Identity{Dev: 2049, Ino: 123456},
		Fingerprint: tidemark.Fingerprint{Len: 4096, Hash: 0x1234}, TailLen: 64, TailHash: 0x5678}
	buf := make([]byte, 0, pointer.RecordSize)
	for b.Loop() {
		buf = pointer.Encode(buf[:0], p)
	}
	if len(buf) != pointer.RecordSize {
		b.Fatalf("record of %d bytes", len(buf))
	}
}

// BenchmarkQueueHandoff runs a server whose one group's no-op processor
// receives every line of a file read with Earliest (no pointer commits):
// the cost of reading, the hand-off to the group's queue, and the group's
// loop.
func BenchmarkQueueHandoff(b *testing.B) {
	const lines = 100_000
	path := ledgerFile(b, lines)
	for b.Loop() {
		c := bench.NewCounter(lines)
		cfg := framework.Config{
			Feeds: []framework.FeedConfig{{Name: "ledger", File: &framework.FileConfig{Filename: path, ReadStrategy: feed.Earliest},
				Overload: framework.OverloadConfig{Policy: framework.Pause}}},
			Groups: []framework.GroupConfig{{Name: "g", Processors: []string{"nop"}}},
			Logger: quiet,
		}
		s, err := framework.New(cfg, framework.Processors{"nop": &bench.Nop{Feed: "ledger", Counter: c}})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := s.Start(ctx); err != nil {
			b.Fatal(err)
		}
		select {
		case <-c.Done():
		case <-ctx.Done():
			b.Fatalf("%d of %d lines", c.N(), lines)
		}
		if err := s.Stop(ctx); err != nil {
			b.Fatal(err)
		}
		cancel()
	}
	reportLines(b, lines)
}

// BenchmarkApply applies one ledger line per iteration to a batched store
// (the default batch size), with each backend; the flush at the end is
// part of the time.
func BenchmarkApply(b *testing.B) {
	for _, backend := range []string{state.Bolt, state.Pebble} {
		b.Run(backend, func(b *testing.B) {
			// Unbound: no feed here; it flushes at the end itself.
			st, err := state.Open(backend+":"+b.TempDir(), &state.Options{Logger: quiet, Unbound: true})
			if err != nil {
				b.Fatal(err)
			}
			ns := st.Namespace(bench.LedgerNamespace)
			ctx := context.Background()
			account := []byte(bench.AccountName(7))
			d := tidemark.Delivery{Feed: "ledger", Epoch: 1}
			fn := func(tx *state.Tx) error {
				if _, err := tx.Bucket(bench.BalancesBucket).AddInt64(account, 125); err != nil {
					return err
				}
				if _, err := tx.AddInt64(bench.KeyApplied, 1); err != nil {
					return err
				}
				_, err := tx.AddInt64(bench.KeyTotal, 125)
				return err
			}
			for b.Loop() {
				d.Seq++
				d.Position += 36
				if _, err := ns.Apply(ctx, d, fn); err != nil {
					b.Fatal(err)
				}
			}
			if err := st.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if err := st.Close(); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkParseLedgerLine parses one ledger line.
func BenchmarkParseLedgerLine(b *testing.B) {
	line := []byte("123456,account-holder-00042,-12345")
	var sum int64
	for b.Loop() {
		_, _, amount, err := bench.ParseLedgerLine(line)
		if err != nil {
			b.Fatal(err)
		}
		sum += amount
	}
	_ = sum
}

// BenchmarkTracker checks and records one new delivery.
func BenchmarkTracker(b *testing.B) {
	var tr tidemark.Tracker
	d := tidemark.Delivery{Feed: "ledger", Epoch: 1}
	for b.Loop() {
		d.Position += 36
		if tr.Seen(d) {
			b.Fatal("a new line seen")
		}
		tr.Record(d)
	}
}

func TestParseLedgerLine(t *testing.T) {
	for _, tc := range []struct {
		line    string
		id      int64
		account string
		amount  int64
		bad     bool
	}{
		{line: "1,alice,100", id: 1, account: "alice", amount: 100},
		{line: "42,account-holder-00001,-5000", id: 42, account: "account-holder-00001", amount: -5000},
		{line: "7,b,+3", id: 7, account: "b", amount: 3},
		{line: "", bad: true},
		{line: "1,alice", bad: true},
		{line: "1,,5", bad: true},
		{line: "x,alice,5", bad: true},
		{line: "1,alice,5x", bad: true},
		{line: "1,alice,-", bad: true},
	} {
		id, account, amount, err := bench.ParseLedgerLine([]byte(tc.line))
		if tc.bad {
			if !errors.Is(err, bench.ErrMalformed) {
				t.Errorf("%q: err %v, want ErrMalformed", tc.line, err)
			}
			continue
		}
		if err != nil || id != tc.id || string(account) != tc.account || amount != tc.amount {
			t.Errorf("%q: got %d %q %d %v", tc.line, id, account, amount, err)
		}
	}
}

func TestGenLedgerIsDeterministicAndParses(t *testing.T) {
	var a, b bytes.Buffer
	if err := bench.GenLedger(&a, 1000, 1, 7); err != nil {
		t.Fatal(err)
	}
	if err := bench.GenLedger(&b, 1000, 1, 7); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("the same arguments gave different ledgers")
	}
	lines := bytes.Split(bytes.TrimSuffix(a.Bytes(), []byte("\n")), []byte("\n"))
	if len(lines) != 1000 {
		t.Fatalf("%d lines, want 1000", len(lines))
	}
	for i, l := range lines {
		id, _, _, err := bench.ParseLedgerLine(l)
		if err != nil || id != int64(i+1) {
			t.Fatalf("line %d %q: id %d, err %v", i, l, id, err)
		}
	}
}

// TestLedgerStoreApplies runs the ledger in a store through a server over
// a small file, and checks that it applied every line.
func TestLedgerStoreApplies(t *testing.T) {
	const lines = 2000
	path := ledgerFile(t, lines)
	st, err := state.Open("bbolt:"+t.TempDir(), &state.Options{BatchSize: 100, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	c := bench.NewCounter(lines)
	l := bench.NewLedgerStore("ledger", st, c)
	cfg := framework.Config{
		Feeds: []framework.FeedConfig{{Name: "ledger", File: &framework.FileConfig{Filename: path},
			Overload: framework.OverloadConfig{Policy: framework.Pause}}},
		Groups: []framework.GroupConfig{{Name: "g", Processors: []string{"ledger"}}},
		Logger: quiet,
	}
	s, err := framework.New(cfg, framework.Processors{"ledger": l})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Done():
	case <-ctx.Done():
		t.Fatalf("%d of %d lines", c.N(), lines)
	}
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	var applied int64
	err = l.Store.View(func(tx *state.Tx) error {
		applied, err = tx.GetInt64(bench.KeyApplied)
		return err
	})
	if err != nil || applied != lines {
		t.Fatalf("store applied %d, %v", applied, err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}

// A Counter publishes its count at the first line, every 1024 lines and at
// its target, and closes First and Done there.
func TestCounterPublishes(t *testing.T) {
	c := bench.NewCounter(2500)
	select {
	case <-c.First():
		t.Fatal("First closed before any line")
	default:
	}
	c.Count()
	<-c.First()
	if c.N() != 1 {
		t.Fatalf("N after the first line: %d", c.N())
	}
	for range 1500 {
		c.Count()
	}
	if c.N() != 1024 {
		t.Fatalf("N after 1501 lines: %d, want the last multiple of 1024", c.N())
	}
	select {
	case <-c.Done():
		t.Fatal("Done closed before the target")
	default:
	}
	for range 999 {
		c.Count()
	}
	<-c.Done()
	if c.N() != 2500 {
		t.Fatalf("N at the target: %d", c.N())
	}
}

// The ledgers of many accounts name their accounts as ManyAccountName
// does, draw them from the range asked for, and give every account once
// in GenEveryAccount.
func TestGenAccounts(t *testing.T) {
	var b bytes.Buffer
	if err := bench.GenEveryAccount(&b, 12, 5, 1); err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSuffix(b.Bytes(), []byte("\n")), []byte("\n"))
	if len(lines) != 12 {
		t.Fatalf("%d lines, want 12", len(lines))
	}
	for i, l := range lines {
		id, account, _, err := bench.ParseLedgerLine(l)
		if err != nil || id != int64(i+5) || string(account) != bench.ManyAccountName(i) {
			t.Fatalf("line %d %q: id %d account %q, err %v", i, l, id, account, err)
		}
	}
	b.Reset()
	if err := bench.GenAccounts(&b, 5000, 123_456_789/1000, 1, 3); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, l := range bytes.Split(bytes.TrimSuffix(b.Bytes(), []byte("\n")), []byte("\n")) {
		_, account, _, err := bench.ParseLedgerLine(l)
		if err != nil || len(account) != len("account-00000000") {
			t.Fatalf("%q: account %q, err %v", l, account, err)
		}
		seen[string(account)] = true
	}
	if len(seen) < 4000 {
		t.Fatalf("5000 lines over 123456 accounts drew only %d accounts", len(seen))
	}
}
