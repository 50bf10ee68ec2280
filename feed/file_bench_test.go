package feed

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// benchInput writes lines of 100 bytes (terminator included) to a new file.
func benchInput(b *testing.B, lines int) string {
	b.Helper()
	p := filepath.Join(b.TempDir(), "bench.log")
	line := strings.Repeat("x", 99) + "\n"
	if err := os.WriteFile(p, []byte(strings.Repeat(line, lines)), 0o644); err != nil {
		b.Fatal(err)
	}
	return p
}

// BenchmarkFileSourcePoll measures one Poll of a batch of 256 lines of 100
// bytes from a file in the page cache; allocs/op must be 0. The committed
// variant also commits once per poll (SyncNever: the cost of fdatasync is
// the pointer's, measured by its own benchmarks).
func BenchmarkFileSourcePoll(b *testing.B) {
	for _, bc := range []struct {
		name   string
		strat  ReadStrategy
		commit bool
	}{
		{"earliest", Earliest, false},
		{"committed", Committed, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			const fileLines = 100000
			p := benchInput(b, fileLines)
			ctx := context.Background()
			items := make([]Item, 256)
			newSource := func() *FileSource {
				os.Remove(p + PointerSuffix)
				s, err := NewFileSource(Config{Path: p, Strategy: bc.strat, Sync: SyncNever})
				if err != nil {
					b.Fatal(err)
				}
				return s
			}
			s := newSource()
			defer func() { s.Close() }()
			var lines int
			b.SetBytes(256 * 100)
			b.ReportAllocs()
			for b.Loop() {
				n, err := s.Poll(ctx, items)
				if err != nil {
					b.Fatal(err)
				}
				if n == 0 {
					b.StopTimer()
					s.Close()
					s = newSource()
					b.StartTimer()
					continue
				}
				lines += n
				if bc.commit {
					if err := s.Commit(items[n-1].Epoch, items[n-1].Position); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(max(lines, 1)), "ns/line")
		})
	}
}

// BenchmarkFileSourceIdlePoll measures a Poll of a tailing source at the end
// of its file: one stat of the path.
func BenchmarkFileSourceIdlePoll(b *testing.B) {
	p := benchInput(b, 10)
	s, err := NewFileSource(Config{Path: p, Strategy: Earliest})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	items := make([]Item, 64)
	ctx := context.Background()
	for {
		n, err := s.Poll(ctx, items)
		if err != nil {
			b.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if n, err := s.Poll(ctx, items); n != 0 || err != nil {
			b.Fatal(n, err)
		}
	}
}
