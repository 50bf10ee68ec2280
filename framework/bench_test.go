package framework_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/feed"
	"github.com/tidemark-go/tidemark/framework"
)

// benchLines returns n lines of a ledger-like CSV, about 32 bytes each.
func benchLines(n int) []byte {
	var b bytes.Buffer
	b.Grow(n * 32)
	for i := range n {
		fmt.Fprintf(&b, "%08d,acct-%04d,%10d\n", i, i%1000, i*7)
	}
	return b.Bytes()
}

// sliceSource serves the lines of an in-memory buffer, like a file source
// whose whole file is in its buffer.
type sliceSource struct {
	data []byte
	off  int
	seq  uint64
}

func (s *sliceSource) Poll(_ context.Context, items []feed.Item) (int, error) {
	n := 0
	for n < len(items) && s.off < len(s.data) {
		i := bytes.IndexByte(s.data[s.off:], '\n')
		if i < 0 {
			break
		}
		s.seq++
		end := s.off + i + 1
		items[n] = feed.Item{Seq: s.seq, Epoch: 1, Position: int64(end), Line: s.data[s.off : s.off+i]}
		s.off = end
		n++
	}
	if n == 0 {
		return 0, feed.ErrDone
	}
	return n, nil
}
func (s *sliceSource) Commit(uint64, int64) error { return nil }
func (s *sliceSource) Rereadable() bool           { return true }
func (s *sliceSource) Status() feed.Status        { return feed.Status{} }
func (s *sliceSource) Close() error               { return nil }

// countProc counts lines and closes done at want.
type countProc struct {
	n, want int
	done    chan struct{}
}

func (p *countProc) Start(_ context.Context, fc *framework.Context) error {
	return fc.Subscribe("bench")
}

func (p *countProc) Handle(context.Context, tidemark.Delivery, []byte) error {
	p.n++
	if p.n == p.want {
		close(p.done)
	}
	return nil
}

func runNoop(b *testing.B, src feed.Source, n int) {
	p := &countProc{want: n, done: make(chan struct{})}
	s, err := framework.New(framework.Config{
		Feeds:  []framework.FeedConfig{{Name: "bench", Source: src, Overload: framework.OverloadConfig{Policy: framework.Pause}}},
		Groups: []framework.GroupConfig{{Name: "g", Processors: []string{"p"}}},
	}, framework.Processors{"p": p})
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	<-p.done
	b.StopTimer()
	if err := s.Stop(context.Background()); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkServerNoop measures a feed handing lines to one group with one
// no-op processor, per line. Compare with BenchmarkBareReadSlice.
func BenchmarkServerNoop(b *testing.B) {
	data := benchLines(b.N)
	b.ReportAllocs()
	b.ResetTimer()
	runNoop(b, &sliceSource{data: data}, b.N)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lines/s")
}

// BenchmarkBareReadSlice is the floor: a bufio ReadSlice loop over the same
// lines in memory.
func BenchmarkBareReadSlice(b *testing.B) {
	data := benchLines(b.N)
	b.ReportAllocs()
	b.ResetTimer()
	r := bufio.NewReaderSize(bytes.NewReader(data), 64<<10)
	n := 0
	for {
		_, err := r.ReadSlice('\n')
		if err == io.EOF {
			break
		}
		n++
	}
	if n != b.N {
		b.Fatalf("read %d lines", n)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lines/s")
}

func benchFile(b *testing.B) string {
	path := filepath.Join(b.TempDir(), "in.csv")
	if err := os.WriteFile(path, benchLines(b.N), 0o644); err != nil {
		b.Fatal(err)
	}
	return path
}

// BenchmarkServerNoopFile is BenchmarkServerNoop reading a real file with
// the file source (ONCE_EARLIEST: no pointer writes).
func BenchmarkServerNoopFile(b *testing.B) {
	path := benchFile(b)
	src, err := feed.NewFileSource(feed.Config{Path: path, Strategy: feed.OnceEarliest})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	runNoop(b, src, b.N)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lines/s")
}

// BenchmarkBareReadSliceFile is the floor for BenchmarkServerNoopFile.
func BenchmarkBareReadSliceFile(b *testing.B) {
	path := benchFile(b)
	b.ReportAllocs()
	b.ResetTimer()
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 64<<10)
	n := 0
	for {
		_, err := r.ReadSlice('\n')
		if err == io.EOF {
			break
		}
		n++
	}
	if n != b.N {
		b.Fatalf("read %d lines", n)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lines/s")
}

// lagSource is a sliceSource that measures, at each commit, how many lines
// the processor had finished beyond the committed line.
type lagSource struct {
	sliceSource
	lineLen   int64
	processed *atomic.Int64
	commits   int64
	lagSum    int64
	lagMax    int64
}

func (s *lagSource) Commit(_ uint64, pos int64) error {
	lag := s.processed.Load() - pos/s.lineLen
	s.commits++
	s.lagSum += lag
	s.lagMax = max(s.lagMax, lag)
	return nil
}

type lagProc struct {
	countProc
	processed *atomic.Int64
}

func (p *lagProc) Handle(ctx context.Context, d tidemark.Delivery, line []byte) error {
	p.processed.Add(1)
	return p.countProc.Handle(ctx, d, line)
}

// BenchmarkCommitLag reports how far the pointer trails processing: the
// lines a processor had finished beyond the committed line, at each commit,
// with a processor that does a little work per line.
func BenchmarkCommitLag(b *testing.B) {
	data := benchLines(b.N)
	var processed atomic.Int64
	src := &lagSource{sliceSource: sliceSource{data: data}, lineLen: int64(bytes.IndexByte(data, '\n') + 1), processed: &processed}
	p := &lagProc{countProc: countProc{want: b.N, done: make(chan struct{})}, processed: &processed}
	s, err := framework.New(framework.Config{
		Feeds:  []framework.FeedConfig{{Name: "bench", Source: src, Overload: framework.OverloadConfig{Policy: framework.Pause}}},
		Groups: []framework.GroupConfig{{Name: "g", Processors: []string{"p"}}},
	}, framework.Processors{"p": p})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	if err := s.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	<-p.done
	b.StopTimer()
	if err := s.Stop(context.Background()); err != nil {
		b.Fatal(err)
	}
	if src.commits > 0 {
		b.ReportMetric(float64(src.lagSum)/float64(src.commits), "lag-lines-avg")
		b.ReportMetric(float64(src.lagMax), "lag-lines-max")
		b.ReportMetric(float64(src.commits), "commits")
	}
}

// BenchmarkServerNoopFileCommitted reads a real file with the COMMITTED
// strategy: every duty cycle writes (and syncs) the pointer file.
func BenchmarkServerNoopFileCommitted(b *testing.B) {
	path := benchFile(b)
	src, err := feed.NewFileSource(feed.Config{Path: path, Strategy: feed.Committed})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	runNoop(b, src, b.N)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lines/s")
}
