package framework_test

import (
	"context"
	"fmt"
	"github.com/stretchr/testify/require"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/feed"
	"github.com/tidemark-go/tidemark/feed/pointer"
	"github.com/tidemark-go/tidemark/framework"
)

func writeLines(t testing.TB, path string, from, to int) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b strings.Builder
	for i := from; i <= to; i++ {
		fmt.Fprintf(&b, "%06d,entry\n", i)
	}
	if _, err := f.WriteString(b.String()); err != nil {
		t.Fatal(err)
	}
}

// fileLinePos is the position after line i of writeLines' output.
func fileLinePos(i int) int64 { return int64(i) * int64(len("000000,entry\n")) }

func loadPointer(t testing.TB, input string) pointer.LoadResult {
	t.Helper()
	r, err := pointer.Open(input+pointer.Suffix, pointer.Options{}).Load()
	if err != nil {
		t.Fatalf("load pointer of %s: %v", input, err)
	}
	return r
}

func fileCfg(input string) framework.Config {
	return framework.Config{
		Feeds: []framework.FeedConfig{{
			Name:     "orders",
			File:     &framework.FileConfig{Filename: input},
			Overload: framework.OverloadConfig{Policy: framework.Pause},
			Idle:     framework.Backoff{Max: 5e6},
		}},
		Groups: []framework.GroupConfig{{Name: "g", Processors: []string{"p"}}},
		Logger: discard(),
	}
}

// A COMMITTED file feed: the pointer file ends after the last line
// finished; the next run resumes after it with sequence numbers from 1, in
// the same epoch; lines appended while running are read (tailing).
func TestFileFeedCommitsAndResumes(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "orders.csv")
	writeLines(t, input, 1, 100)

	p := &recProc{feeds: []string{"orders"}}
	s := startServer(t, fileCfg(input), framework.Processors{"p": p})
	settle(t, s, "orders")
	writeLines(t, input, 101, 150) // tailing
	waitFor(t, "appended lines", func() bool { return p.count() == 150 })
	settle(t, s, "orders")
	stopServer(t, s)
	ptr := loadPointer(t, input)
	require.True(t, ptr.Found)
	require.Equal(t, fileLinePos(150), ptr.Record.Position)
	first := p.all()
	require.Equal(t, "000001,entry", first[0].line)
	require.Equal(t, fileLinePos(1), first[0].d.Position)
	require.Equal(t, ptr.Record.Epoch, first[0].d.Epoch)
	require.True(t, first[0].d.Origin != nil, "a file feed describes its origin")

	writeLines(t, input, 151, 160)
	p2 := &recProc{feeds: []string{"orders"}}
	s2 := startServer(t, fileCfg(input), framework.Processors{"p": p2})
	settle(t, s2, "orders")
	stopServer(t, s2)
	second := p2.all()
	require.Len(t, second, 10)
	require.Equal(t, "000151,entry", second[0].line)
	require.EqualValues(t, 1, second[0].d.Seq)
	require.Equal(t, ptr.Record.Epoch, second[0].d.Epoch)
	require.Equal(t, fileLinePos(160), loadPointer(t, input).Record.Position)
}

// Two groups on a real file: the pointer file follows the slower; a clean
// stop commits what the groups finished while draining.
func TestFileFeedPointerFollowsSlowestGroup(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "orders.csv")
	writeLines(t, input, 1, 50)
	g := newGate()
	slow := blockAt(g, 20)
	fast := &recProc{feeds: []string{"orders"}}
	cfg := fileCfg(input)
	cfg.Groups = []framework.GroupConfig{{Name: "slow", Processors: []string{"slow"}}, {Name: "fast", Processors: []string{"fast"}}}
	s := startServer(t, cfg, framework.Processors{"slow": slow, "fast": fast})
	waitFor(t, "fast done", func() bool { return fast.count() == 50 })
	waitFor(t, "pointer at line 19", func() bool {
		st := status(t, s, "orders")
		return st.LastCommitPosition == fileLinePos(19)
	})
	// The pointer file follows: the feed's group commit writes it in the
	// background, a moment after the commit.
	waitFor(t, "pointer file at line 19", func() bool { return loadPointer(t, input).Record.Position == fileLinePos(19) })
	idle := status(t, s, "orders")
	require.Equal(t, fileLinePos(19), idle.LastCommitPosition, "and no further: line 20 is not finished")
	stopped := make(chan error, 1)
	go func() { stopped <- s.Stop(context.Background()) }()
	g.release()
	require.NoError(t, <-stopped)
	require.Equal(t, fileLinePos(50), loadPointer(t, input).Record.Position)
}

// A non-committing strategy (ONCE_EARLIEST) reads the file to its end and
// is done; no pointer file is written.
func TestFileFeedOnceEarliest(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "orders.csv")
	writeLines(t, input, 1, 30)
	cfg := fileCfg(input)
	cfg.Feeds[0].File.ReadStrategy = feed.OnceEarliest
	p := &recProc{feeds: []string{"orders"}, handle: func(context.Context, tidemark.Delivery, []byte) error { return nil }}
	s := startServer(t, cfg, framework.Processors{"p": p})
	settle(t, s, "orders")
	st := status(t, s, "orders")
	require.Equal(t, feed.StateDone, st.State)
	stopServer(t, s)
	require.Equal(t, 30, p.count())
	_, err := os.Stat(input + pointer.Suffix)
	require.True(t, os.IsNotExist(err), "no pointer file: %v", err)
}

// An oversize line is not delivered: the source reports it through the
// feed's OnReject and counts it in the feed's status; the lines after it
// are delivered.
func TestFileFeedOversizeLineReported(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "orders.csv")
	writeLines(t, input, 1, 2)
	f, err := os.OpenFile(input, os.O_APPEND|os.O_WRONLY, 0o644)
	require.NoError(t, err)
	_, err = f.WriteString(strings.Repeat("x", 100) + "\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	var rejects []feed.Reject
	var mu sync.Mutex
	cfg := fileCfg(input)
	cfg.Feeds[0].File.MaxLineBytes = 50
	cfg.Feeds[0].File.OnReject = func(r feed.Reject) {
		mu.Lock()
		rejects = append(rejects, r)
		mu.Unlock()
	}
	p := &recProc{feeds: []string{"orders"}}
	s := startServer(t, cfg, framework.Processors{"p": p})
	settle(t, s, "orders")
	writeLines(t, input, 3, 3)
	waitFor(t, "line after the oversize one", func() bool { return p.count() == 3 })
	st := status(t, s, "orders")
	require.EqualValues(t, 1, st.OversizeSkipped)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, rejects, 1)
	require.Equal(t, feed.RejectOversize, rejects[0].Reason)
	require.Equal(t, fileLinePos(2), rejects[0].Position)
}

// A truncated input starts a new epoch while the feed runs: the new lines
// arrive under it, and the pointer moves in the new epoch from 0.
func TestFileFeedTruncationStartsNewEpoch(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "orders.csv")
	writeLines(t, input, 1, 10)
	p := &recProc{feeds: []string{"orders"}}
	s := startServer(t, fileCfg(input), framework.Processors{"p": p})
	settle(t, s, "orders")
	waitFor(t, "commit of the first file", func() bool { return status(t, s, "orders").LastCommitPosition == fileLinePos(10) })
	first := p.all()[0].d.Epoch
	require.NoError(t, os.Truncate(input, 0))
	writeLines(t, input, 1, 3)
	waitFor(t, "lines of the new epoch", func() bool { return p.count() == 13 })
	settle(t, s, "orders")
	got := p.all()
	require.True(t, got[10].d.Epoch != first, "a new epoch")
	require.Equal(t, fileLinePos(1), got[10].d.Position)
	require.EqualValues(t, 11, got[10].d.Seq, "sequence numbers go on within the run")
	stopServer(t, s)
	ptr := loadPointer(t, input)
	require.Equal(t, got[10].d.Epoch, ptr.Record.Epoch)
	require.Equal(t, fileLinePos(3), ptr.Record.Position)
}

// An input that is not a regular file is refused at New, and a path that
// becomes one while the server runs stops it with the error: never a read
// that blocks, never a pointer file beside a FIFO.
func TestFileFeedOnAFIFOIsFatal(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "orders.csv")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	_, err := framework.New(fileCfg(fifo), framework.Processors{"p": &recProc{feeds: []string{"orders"}}})
	require.ErrorIs(t, err, feed.ErrNotRegular)
	require.NoFileExists(t, fifo+pointer.Suffix)

	later := filepath.Join(dir, "later.csv")
	s, err := framework.New(fileCfg(later), framework.Processors{"p": &recProc{feeds: []string{"orders"}}})
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() { errc <- s.Run(context.Background()) }()
	waitFor(t, "the feed waiting for its input", func() bool {
		st, _ := s.FeedStatus("orders")
		return st.State == feed.StateWaiting
	})
	require.NoError(t, syscall.Mkfifo(later, 0o644))
	select {
	case err := <-errc:
		require.ErrorIs(t, err, feed.ErrNotRegular)
		require.ErrorContains(t, err, `feed "orders" cannot read its source`)
	case <-time.After(deadline):
		t.Fatal("Run did not end on a FIFO")
	}
}

// With a pointer folder, the input's folder stays untouched (it may be
// read-only) and the pointer lives where it says.
func TestFileFeedPointerDir(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "in", "orders.csv")
	require.NoError(t, os.MkdirAll(filepath.Dir(input), 0o755))
	writeLines(t, input, 1, 10)
	cfg := fileCfg(input)
	cfg.Feeds[0].File.PointerDir = filepath.Join(dir, "ptr")
	cfg.UntilSettled = true
	require.NoError(t, run(t, cfg, framework.Processors{"p": &recProc{feeds: []string{"orders"}}}))
	require.NoFileExists(t, input+pointer.Suffix)
	r, err := pointer.Open(pointer.Path(input, cfg.Feeds[0].File.PointerDir), pointer.Options{}).Load()
	require.NoError(t, err)
	require.Equal(t, fileLinePos(10), r.Record.Position)
}
