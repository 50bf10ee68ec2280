package feed

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/feed/pointer"
	"github.com/tidemark-go/tidemark/vfs"
)

// deadline bounds every wait for a condition in these tests.
const deadline = 20 * time.Second

// logRec records log records for assertions.
type logRec struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (l *logRec) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRec) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r.Clone())
	return nil
}
func (l *logRec) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRec) WithGroup(string) slog.Handler      { return l }

// find returns the records at level whose message contains substr.
func (l *logRec) find(level slog.Level, substr string) []slog.Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []slog.Record
	for _, r := range l.recs {
		if r.Level == level && strings.Contains(r.Message, substr) {
			out = append(out, r)
		}
	}
	return out
}

// count returns how many records are at level (any message).
func (l *logRec) count(level slog.Level) int { return len(l.find(level, "")) }

func (l *logRec) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, r := range l.recs {
		fmt.Fprintf(&b, "%s %s", r.Level, r.Message)
		r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%v", a.Key, a.Value); return true })
		b.WriteByte('\n')
	}
	return b.String()
}

func attrs(r slog.Record) map[string]slog.Value {
	m := map[string]slog.Value{}
	r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value; return true })
	return m
}

// got is a delivered line, copied.
type got struct {
	Line     string
	Position int64
	Epoch    uint64
	Seq      uint64
}

type tsrc struct {
	*FileSource
	t       *testing.T
	path    string
	log     *logRec
	mu      sync.Mutex
	rejects []Reject
	items   []Item
}

// open returns a source on path with cfg (Path, Logger and OnReject set
// here), closed at the end of the test.
func open(t *testing.T, path string, cfg Config) *tsrc {
	t.Helper()
	ts := &tsrc{t: t, path: path, log: &logRec{}, items: make([]Item, 64)}
	cfg.Path = path
	cfg.Logger = slog.New(ts.log)
	cfg.OnReject = func(r Reject) {
		ts.mu.Lock()
		defer ts.mu.Unlock()
		ts.rejects = append(ts.rejects, r)
	}
	s, err := NewFileSource(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts.FileSource = s
	t.Cleanup(func() { s.Close() })
	return ts
}

// poll polls once and copies the lines.
func (ts *tsrc) poll() ([]got, error) {
	ts.t.Helper()
	n, err := ts.Poll(context.Background(), ts.items)
	out := make([]got, n)
	for i, it := range ts.items[:n] {
		out[i] = got{string(it.Line), it.Position, it.Epoch, it.Seq}
		if (it.Epoch != 0) != (it.Origin != nil) {
			ts.t.Fatalf("item %d of epoch %d has origin %v", i, it.Epoch, it.Origin)
		}
	}
	return out, err
}

// drain polls until a poll returns nothing, and returns the lines.
func (ts *tsrc) drain() []got {
	ts.t.Helper()
	var all []got
	for range 100000 {
		g, err := ts.poll()
		if err != nil && !errors.Is(err, ErrDone) {
			ts.t.Fatalf("poll: %v", err)
		}
		all = append(all, g...)
		if len(g) == 0 {
			return all
		}
	}
	ts.t.Fatal("drain: the source does not run dry")
	return nil
}

// batches polls until a poll returns nothing, commits each batch's last
// line as a framework does, and then calls fn with the batch.
func (ts *tsrc) batches(fn func(g []got)) {
	ts.t.Helper()
	for {
		g, err := ts.poll()
		if err != nil {
			ts.t.Fatalf("poll: %v", err)
		}
		if len(g) == 0 {
			return
		}
		last := g[len(g)-1]
		if err := ts.Commit(last.Epoch, last.Position); err != nil {
			ts.t.Fatal(err)
		}
		fn(g)
	}
}

// waitLines polls until n lines have arrived (backing off on empty polls).
func (ts *tsrc) waitLines(n int) []got {
	ts.t.Helper()
	return ts.waitLinesSeen(n, nil)
}

// waitLinesSeen is waitLines that also stores how many lines have arrived
// in seen after each poll, for a concurrent writer that paces itself by
// the reader.
func (ts *tsrc) waitLinesSeen(n int, seen *atomic.Int64) []got {
	ts.t.Helper()
	var all []got
	end := time.Now().Add(deadline)
	for len(all) < n {
		if time.Now().After(end) {
			ts.t.Fatalf("got %d of %d lines before the deadline; status %+v\nlog:\n%s", len(all), n, ts.Status(), ts.log)
		}
		g, err := ts.poll()
		if err != nil {
			ts.t.Fatalf("poll: %v", err)
		}
		all = append(all, g...)
		if seen != nil {
			seen.Store(int64(len(all)))
		}
		if len(g) == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	return all
}

func lines(gs []got) []string {
	out := make([]string, len(gs))
	for i, g := range gs {
		out[i] = g.Line
	}
	return out
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func appendTo(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func loadPointer(t *testing.T, path string) pointer.LoadResult {
	t.Helper()
	pf := pointer.Open(path+pointer.Suffix, pointer.Options{Logger: slog.New(slog.DiscardHandler)})
	defer pf.Close()
	res, err := pf.Load()
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func input(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "in.log")
	if content != "" {
		write(t, p, content)
	}
	return p
}

// noPointerFS fails the test on any operation on the pointer file.
func noPointerFS(t *testing.T, path string) vfs.FS {
	return vfs.Inject(vfs.Default(), func(op vfs.Op, name string) error {
		if strings.HasPrefix(name, path+pointer.Suffix) {
			t.Errorf("%s on the pointer file %s", op, name)
			return errors.New("pointer file touched")
		}
		return nil
	})
}

func TestNewFileSourceValidates(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{Path: "x", Strategy: ReadStrategy(9)},
		{Path: "x", MaxLineBytes: -1},
		{Path: "x", MaxLineBytes: maxConfigLineBytes + 1},
		{Path: "x", Sync: SyncPolicy(7)},
		{Path: "x", SyncInterval: -time.Second},
	} {
		if _, err := NewFileSource(cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%+v: err %v, want ErrInvalidConfig", cfg, err)
		}
	}
	s, err := NewFileSource(Config{Path: filepath.Join(t.TempDir(), "missing")})
	if err != nil {
		t.Fatalf("a missing input must be accepted: %v", err)
	}
	if st := s.Status(); st.State != StateStarting || !s.Rereadable() {
		t.Fatalf("status %+v", st)
	}
}

func TestCommittedStartsAtZeroAndCreatesPointer(t *testing.T) {
	p := input(t, "a\nb\n")
	s := open(t, p, Config{})
	g := s.drain()
	if fmt.Sprint(lines(g)) != "[a b]" || g[0].Position != 2 || g[1].Position != 4 || g[0].Seq != 1 || g[1].Seq != 2 {
		t.Fatalf("got %+v", g)
	}
	if g[0].Epoch == 0 {
		t.Fatal("Committed items need an epoch")
	}
	res := loadPointer(t, p)
	if !res.Found || res.Record.Epoch != g[0].Epoch || res.Record.Position != 0 {
		t.Fatalf("the new epoch must be stored at once: %+v", res)
	}
	if err := s.Commit(g[1].Epoch, g[1].Position); err != nil {
		t.Fatal(err)
	}
	res = loadPointer(t, p)
	id := identityOf(t, p)
	want := pointer.Record{Epoch: g[0].Epoch, Position: 4, Identity: id,
		Fingerprint: tidemark.Fingerprint{Len: 4, Hash: pointer.HashBytes([]byte("a\nb\n"))},
		TailLen:     4, TailHash: pointer.HashBytes([]byte("a\nb\n"))}
	if res.Record != want {
		t.Fatalf("pointer %+v\nwant    %+v", res.Record, want)
	}
	if st := s.Status(); st.CommittedPosition != 4 || st.ReadPosition != 4 || st.State != StateCaughtUp || st.LinesRead != 2 || st.BytesRead != 4 {
		t.Fatalf("status %+v", st)
	}
}

func identityOf(t *testing.T, path string) tidemark.Identity {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := fileIdentity(fi)
	return id
}

func TestEarliestNeverOpensPointerAndTails(t *testing.T) {
	p := input(t, "a\nb\n")
	garbage := "not a pointer"
	write(t, p+pointer.Suffix, garbage)
	s := open(t, p, Config{Strategy: Earliest, FS: noPointerFS(t, p)})
	g := s.drain()
	if fmt.Sprint(lines(g)) != "[a b]" || g[0].Epoch != 0 {
		t.Fatalf("got %+v", g)
	}
	if err := s.Commit(0, 4); err != nil {
		t.Fatal(err)
	}
	appendTo(t, p, "c\n")
	if g := s.drain(); fmt.Sprint(lines(g)) != "[c]" || g[0].Position != 6 {
		t.Fatalf("tail: %+v", g)
	}
	if b, _ := os.ReadFile(p + pointer.Suffix); string(b) != garbage {
		t.Fatalf("pointer file changed: %q", b)
	}
	// A second run starts at 0 again.
	s.Close()
	s2 := open(t, p, Config{Strategy: Earliest, FS: noPointerFS(t, p)})
	if g := s2.drain(); len(g) != 3 || g[0].Seq != 1 {
		t.Fatalf("second run: %+v", g)
	}
}

func TestNonCommittingStrategiesCreateNoPointer(t *testing.T) {
	for _, st := range []ReadStrategy{Earliest, OnceEarliest, Latest, OnceLatest} {
		t.Run(st.String(), func(t *testing.T) {
			p := input(t, "a\n")
			s := open(t, p, Config{Strategy: st, FS: noPointerFS(t, p)})
			s.drain()
			appendTo(t, p, "b\n")
			s.drain()
			if err := s.Commit(0, 2); err != nil {
				t.Fatal(err)
			}
			s.Close()
			if _, err := os.Stat(p + pointer.Suffix); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("pointer file exists: %v", err)
			}
		})
	}
}

func TestOnceEarliestDoneAtFirstEOF(t *testing.T) {
	p := input(t, "a\nb\npartial")
	s := open(t, p, Config{Strategy: OnceEarliest})
	g, err := s.poll()
	if fmt.Sprint(lines(g)) != "[a b]" || err != nil {
		t.Fatalf("%+v %v", g, err)
	}
	if _, err := s.poll(); !errors.Is(err, ErrDone) {
		t.Fatalf("err %v, want ErrDone", err)
	}
	appendTo(t, p, "\nc\n")
	if _, err := s.poll(); !errors.Is(err, ErrDone) {
		t.Fatalf("err %v, want ErrDone after done", err)
	}
	if st := s.Status(); st.State != StateDone {
		t.Fatalf("status %+v", st)
	}
}

func TestOnceEarliestEmptyFileWaitsForFirstBytes(t *testing.T) {
	p := input(t, "")
	write(t, p, "")
	s := open(t, p, Config{Strategy: OnceEarliest})
	for range 3 {
		if g, err := s.poll(); len(g) != 0 || err != nil {
			t.Fatalf("empty file: %+v %v", g, err)
		}
	}
	appendTo(t, p, "x\n")
	if g := s.waitLines(1); g[0].Line != "x" {
		t.Fatalf("%+v", g)
	}
	if _, err := s.poll(); !errors.Is(err, ErrDone) {
		t.Fatalf("err %v, want ErrDone", err)
	}
}

func TestLatestStartsAtEndAndDeliversEveryAppendedLine(t *testing.T) {
	p := input(t, "old1\nold2\nhalf")
	s := open(t, p, Config{Strategy: Latest})
	if g := s.drain(); len(g) != 0 {
		t.Fatalf("Latest delivered old lines: %+v", g)
	}
	if st := s.Status(); st.ReadPosition != 14 || st.State != StateCaughtUp {
		t.Fatalf("status %+v", st)
	}
	// The rest of the line that was partial when the file was opened is not
	// a line of its own.
	var want []string
	var b strings.Builder
	b.WriteString("-line\n")
	for i := range 1000 {
		fmt.Fprintf(&b, "new%d\n", i)
		want = append(want, fmt.Sprintf("new%d", i))
	}
	appendTo(t, p, b.String())
	if g := s.drain(); !slices.Equal(lines(g), want) {
		t.Fatalf("got %d lines, first %v", len(g), lines(g)[:min(3, len(g))])
	}
}

func TestLatestMissingAtStartReadsNewFileFromZero(t *testing.T) {
	p := input(t, "")
	s := open(t, p, Config{Strategy: Latest})
	s.drain()
	write(t, p, "first\n")
	if g := s.drain(); fmt.Sprint(lines(g)) != "[first]" {
		t.Fatalf("%+v", g)
	}
}

func TestOnceLatestDoneAtOnce(t *testing.T) {
	p := input(t, "a\n")
	s := open(t, p, Config{Strategy: OnceLatest})
	if n, err := s.Poll(context.Background(), s.items); n != 0 || !errors.Is(err, ErrDone) {
		t.Fatalf("%d %v", n, err)
	}
	if st := s.Status(); st.State != StateDone {
		t.Fatalf("status %+v", st)
	}
}

func TestCRLFAndBatching(t *testing.T) {
	var b strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&b, "l%d\r\n", i)
	}
	p := input(t, b.String())
	s := open(t, p, Config{})
	items := make([]Item, 1000)
	n, err := s.Poll(context.Background(), items)
	if err != nil || n != 1000 {
		t.Fatalf("one poll filled %d items: %v", n, err)
	}
	if string(items[999].Line) != "l999" || items[999].Position != int64(b.Len()) || items[0].Seq != 1 || items[999].Seq != 1000 {
		t.Fatalf("last item %q at %d seq %d", items[999].Line, items[999].Position, items[999].Seq)
	}
	if st := s.Status(); st.State != StateBehind {
		t.Fatalf("a full batch is behind: %+v", st)
	}
}

func TestPartialLineNotDeliveredAcrossRestart(t *testing.T) {
	p := input(t, "a\nb")
	s := open(t, p, Config{})
	g := s.drain()
	if fmt.Sprint(lines(g)) != "[a]" {
		t.Fatalf("%+v", g)
	}
	st := s.Status()
	if st.State != StateCaughtUp || st.Detail != DetailPartialLine || !st.PartialPending || st.ReadPosition != 2 {
		t.Fatalf("status %+v", st)
	}
	if err := s.Commit(g[0].Epoch, 2); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(g[0].Epoch, 3); !errors.Is(err, ErrCommitAhead) {
		t.Fatalf("commit inside the partial line: %v", err)
	}
	s.Close()
	s2 := open(t, p, Config{})
	if g := s2.drain(); len(g) != 0 {
		t.Fatalf("restart delivered the partial line: %+v", g)
	}
	appendTo(t, p, "c\n")
	g2 := s2.drain()
	if fmt.Sprint(lines(g2)) != "[bc]" || g2[0].Position != 5 || g2[0].Epoch != g[0].Epoch || g2[0].Seq != 1 {
		t.Fatalf("after the terminator: %+v", g2)
	}
	if st := s2.Status(); st.PartialPending || st.Detail != "" {
		t.Fatalf("status %+v", st)
	}
}

func TestOversizeLineSkipped(t *testing.T) {
	long := strings.Repeat("z", 100)
	p := input(t, "ok\n"+long+"\nfine\n")
	s := open(t, p, Config{MaxLineBytes: 8})
	g := s.drain()
	if fmt.Sprint(lines(g)) != "[ok fine]" || g[1].Position != 109 {
		t.Fatalf("%+v", g)
	}
	st := s.Status()
	if st.OversizeSkipped != 1 || st.ReadPosition != 109 {
		t.Fatalf("status %+v", st)
	}
	want := []Reject{{Path: p, Epoch: g[0].Epoch, Position: 3, End: 104, Length: 101, Reason: RejectOversize}}
	if !slices.Equal(s.rejects, want) {
		t.Fatalf("rejects %+v", s.rejects)
	}
	recs := s.log.find(slog.LevelWarn, "longer than the maximum")
	if len(recs) != 1 {
		t.Fatalf("log:\n%s", s.log)
	}
	a := attrs(recs[0])
	if a["path"].String() != p || a["epoch"].Uint64() != g[0].Epoch || a["position"].Int64() != 3 {
		t.Fatalf("attrs %v", a)
	}
	// Committing past the skipped line is allowed.
	if err := s.Commit(g[1].Epoch, g[1].Position); err != nil {
		t.Fatal(err)
	}
}

func TestSeqStartsAtOneEachRun(t *testing.T) {
	p := input(t, "a\nb\n")
	s := open(t, p, Config{})
	g := s.drain()
	s.Commit(g[0].Epoch, g[0].Position)
	s.Close()
	s2 := open(t, p, Config{})
	g2 := s2.drain()
	if len(g2) != 1 || g2[0].Line != "b" || g2[0].Seq != 1 {
		t.Fatalf("%+v", g2)
	}
}

func TestMissingInputWaitedFor(t *testing.T) {
	p := input(t, "")
	s := open(t, p, Config{})
	for range 5 {
		if g, err := s.poll(); len(g) != 0 || err != nil {
			t.Fatalf("%+v %v", g, err)
		}
	}
	st := s.Status()
	if st.State != StateWaiting || st.Detail != "waiting for "+p {
		t.Fatalf("status %+v", st)
	}
	if n := len(s.log.find(slog.LevelWarn, "does not exist")); n != 1 {
		t.Fatalf("%d warnings, want 1:\n%s", n, s.log)
	}
	write(t, p, "x\n")
	if g := s.drain(); fmt.Sprint(lines(g)) != "[x]" {
		t.Fatalf("%+v", g)
	}
}

func TestCommitRules(t *testing.T) {
	p := input(t, "aa\nbb\ncc\n")
	s := open(t, p, Config{})
	g := s.drain()
	e := g[0].Epoch
	if err := s.Commit(e, 6); err != nil {
		t.Fatal(err)
	}
	// Another epoch, or a lower or equal position: ignored.
	for _, c := range []struct {
		epoch uint64
		pos   int64
	}{{e + 1, 9}, {e - 1, 9}, {e, 3}, {e, 6}} {
		if err := s.Commit(c.epoch, c.pos); err != nil {
			t.Fatal(err)
		}
		if res := loadPointer(t, p); res.Record.Position != 6 || res.Record.Epoch != e {
			t.Fatalf("commit %+v moved the pointer: %+v", c, res.Record)
		}
	}
	if err := s.Commit(e, 10); !errors.Is(err, ErrCommitAhead) || !strings.Contains(err.Error(), p) {
		t.Fatalf("commit beyond the read position: %v", err)
	}
	if st := s.Status(); st.CommittedPosition != 6 {
		t.Fatalf("status %+v", st)
	}
	s.Close()
	if err := s.Commit(e, 9); !errors.Is(err, ErrClosed) {
		t.Fatalf("commit after close: %v", err)
	}
	if _, err := s.poll(); !errors.Is(err, ErrClosed) {
		t.Fatalf("poll after close: %v", err)
	}
	if st := s.Status(); st.State != StateStopped {
		t.Fatalf("status %+v", st)
	}
}

func TestFailedCommitReportedAndRetried(t *testing.T) {
	for _, op := range []vfs.Op{vfs.OpWrite, vfs.OpSync} {
		t.Run(string(op), func(t *testing.T) {
			p := input(t, "aa\nbb\ncc\n")
			c := &vfs.Counter{}
			fsys := vfs.Inject(vfs.Default(), c.Injector())
			s := open(t, p, Config{FS: fsys})
			g := s.drain()
			e := g[0].Epoch
			if err := s.Commit(e, 3); err != nil {
				t.Fatal(err)
			}
			c.Match = func(o vfs.Op, name string) bool { return o == op && name == p+pointer.Suffix }
			c.FailAt, c.Sticky = 1, true
			err := s.Commit(e, 6)
			if err == nil || !strings.Contains(err.Error(), p+pointer.Suffix) || !strings.Contains(err.Error(), "position 6") {
				t.Fatalf("failed commit: %v", err)
			}
			st := s.Status()
			if st.CommitErrors != 1 || st.LastCommitError == "" || st.CommittedPosition != 3 {
				t.Fatalf("status %+v", st)
			}
			// A failed write leaves the previous record; after a failed
			// sync the new record may or may not be there: either way a
			// valid record, never a position ahead of the commit.
			if res := loadPointer(t, p); !res.Found || (res.Record.Position != 3 && (op == vfs.OpWrite || res.Record.Position != 6)) {
				t.Fatalf("the previous pointer must stay readable: %+v", res)
			}
			if len(s.log.find(slog.LevelWarn, "pointer write failed")) != 1 {
				t.Fatalf("log:\n%s", s.log)
			}
			c.FailAt = 0
			if err := s.Commit(e, 6); err != nil {
				t.Fatalf("retry: %v", err)
			}
			if st := s.Status(); st.CommitErrors != 1 || st.LastCommitError != "" || st.CommittedPosition != 6 {
				t.Fatalf("status %+v", st)
			}
			if res := loadPointer(t, p); res.Record.Position != 6 {
				t.Fatalf("pointer %+v", res)
			}
		})
	}
}

func TestOriginTailHash(t *testing.T) {
	p := input(t, "hello\nworld\n")
	s := open(t, p, Config{})
	n, err := s.Poll(context.Background(), s.items)
	if err != nil || n != 2 {
		t.Fatal(n, err)
	}
	o := s.items[1].Origin
	if o == nil || o != s.items[0].Origin || o.Identity != identityOf(t, p) ||
		o.Fingerprint != (tidemark.Fingerprint{Len: 12, Hash: pointer.HashBytes([]byte("hello\nworld\n"))}) {
		t.Fatalf("origin %+v", o)
	}
	h, err := o.TailHash(12, 6)
	if err != nil || h != pointer.HashBytes([]byte("world\n")) {
		t.Fatalf("tail hash %x %v", h, err)
	}
	if _, err := o.TailHash(13, 2); err == nil {
		t.Fatal("a tail beyond the file must fail")
	}
	s.Close()
	if _, err := o.TailHash(12, 6); err == nil {
		t.Fatal("a closed epoch's tail hash must fail")
	}
}

func TestStatusFromAnotherGoroutine(t *testing.T) {
	p := input(t, strings.Repeat("line\n", 10000))
	s := open(t, p, Config{})
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				st := s.Status()
				st.Reopens["x"]++ // a copy: must not race with the source
			}
		}
	}()
	g := s.drain()
	close(stop)
	<-done
	if len(g) != 10000 {
		t.Fatalf("%d lines", len(g))
	}
}

func (ts *tsrc) debug() string {
	f := ts.fr
	return fmt.Sprintf("framer r=%d w=%d scan=%d off=%d len=%d discard=%v atEOF=%v reopen=%q pending=%q",
		f.r, f.w, f.scan, f.off, len(f.buf), f.discard, ts.atEOF, ts.reopenReason, f.buf[f.r:f.w])
}

// TestIdleSyncsPendingCommit: under SyncInterval, a commit left pending by
// the interval is made durable by the idle polls that follow, not only by
// the next commit.
func TestIdleSyncsPendingCommit(t *testing.T) {
	var b strings.Builder
	for i := range 100 {
		fmt.Fprintf(&b, "%d\n", i)
	}
	p := input(t, b.String())
	var syncs atomic.Int64
	fsys := vfs.Inject(vfs.Default(), func(op vfs.Op, name string) error {
		if op == vfs.OpSync && name == p+pointer.Suffix {
			syncs.Add(1)
		}
		return nil
	})
	// The interval is long enough that two commits a few microseconds
	// apart (SyncInterval commits only write) never both sync, even on a
	// loaded machine, and short enough for the idle polls to reach it.
	s := open(t, p, Config{FS: fsys, Sync: SyncInterval, SyncInterval: 2 * time.Second})
	g := s.drain()
	pending := false
	for _, x := range g {
		before := syncs.Load()
		if err := s.Commit(x.Epoch, x.Position); err != nil {
			t.Fatal(err)
		}
		if syncs.Load() == before {
			pending = true
			break
		}
	}
	if !pending {
		t.Fatalf("every one of %d commits was synced at once under a 2 s SyncInterval", len(g))
	}
	before := syncs.Load()
	waitUntil(t, "an idle poll to sync the pending commit", func() bool {
		if g, err := s.poll(); len(g) != 0 || err != nil {
			t.Fatalf("%+v %v", g, err)
		}
		return syncs.Load() > before
	})
}

// TestInputFaultsReturnedAndRetried: a failing read or stat of the input is
// returned by Poll, naming the file, and the next Poll carries on.
func TestInputFaultsReturnedAndRetried(t *testing.T) {
	p := input(t, "a\nb\n")
	c := &vfs.Counter{Match: func(op vfs.Op, name string) bool { return op == vfs.OpRead && name == p }, FailAt: 2}
	s := open(t, p, Config{FS: vfs.Inject(vfs.Default(), c.Injector())})
	_, err := s.poll()
	if err == nil || !strings.Contains(err.Error(), "read input "+p+" at offset 0") || !errors.Is(err, vfs.ErrInjected.Err) {
		t.Fatalf("err %v", err)
	}
	if g := s.drain(); fmt.Sprint(lines(g)) != "[a b]" {
		t.Fatalf("%+v", g)
	}
	c.Match = func(op vfs.Op, name string) bool { return op == vfs.OpStat && name == p }
	c.FailAt = c.Count() + 1
	if _, err := s.poll(); err == nil || !strings.Contains(err.Error(), "stat input "+p) {
		t.Fatalf("err %v", err)
	}
	appendTo(t, p, "c\n")
	if g := s.drain(); fmt.Sprint(lines(g)) != "[c]" {
		t.Fatalf("%+v", g)
	}
}

// TestOversizeLineWhileTailing: a line that grows beyond the maximum across
// polls is skipped once its terminator arrives; memory stays bounded.
func TestOversizeLineWhileTailing(t *testing.T) {
	p := input(t, "ok\n"+strings.Repeat("z", 50))
	s := open(t, p, Config{MaxLineBytes: 8})
	if g := s.drain(); fmt.Sprint(lines(g)) != "[ok]" {
		t.Fatalf("%+v", g)
	}
	if st := s.Status(); !st.PartialPending || st.Detail != DetailPartialLine || st.OversizeSkipped != 0 || st.ReadPosition != 3 {
		t.Fatalf("status %+v", st)
	}
	appendTo(t, p, strings.Repeat("z", 50))
	s.drain()
	appendTo(t, p, "\nnext\n")
	g := s.drain()
	if fmt.Sprint(lines(g)) != "[next]" || g[0].Position != 109 {
		t.Fatalf("%+v", g)
	}
	if st := s.Status(); st.OversizeSkipped != 1 || st.PartialPending {
		t.Fatalf("status %+v", st)
	}
	if len(s.rejects) != 1 || s.rejects[0].Position != 3 || s.rejects[0].End != 104 {
		t.Fatalf("rejects %+v", s.rejects)
	}
	if len(s.fr.buf) > framerBufSize {
		t.Fatalf("buffer of %d bytes for 8-byte lines", len(s.fr.buf))
	}
}

// TestNilLoggerIsDefault: a source without a Logger logs to slog.Default(),
// as every tidemark package does, so that a warning such as a missing
// input is never lost to a discarding logger.
func TestNilLoggerIsDefault(t *testing.T) {
	rec := &logRec{}
	prev := slog.Default()
	slog.SetDefault(slog.New(rec))
	t.Cleanup(func() { slog.SetDefault(prev) })
	p := filepath.Join(t.TempDir(), "typo.log")
	s, err := NewFileSource(Config{Path: p})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Poll(context.Background(), make([]Item, 4)); err != nil {
		t.Fatal(err)
	}
	w := rec.find(slog.LevelWarn, "input does not exist")
	if len(w) != 1 || attrs(w[0])["path"].String() != p {
		t.Fatalf("the default logger got %q, want one warning naming %s", rec, p)
	}
}

// bounded runs fn in a goroutine and fails the test if it has not returned
// within the deadline; release, if set, is then called to unblock it.
func bounded(t *testing.T, what string, release func(), fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(deadline):
		if release != nil {
			release()
		}
		<-done
		t.Fatalf("%s blocked", what)
	}
}
