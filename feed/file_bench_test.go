package feed

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidemark-go/tidemark/feed/pointer"
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
// the pointer's, measured by its own benchmarks). The every1024 variants
// commit every 4 polls (1024 lines, half the framework's duty cycle) under the
// default SyncEveryCommit, Commit writing and syncing itself, or with
// GroupCommit (the writer goroutine writing and syncing, Commit returning
// at once).
func BenchmarkFileSourcePoll(b *testing.B) {
	for _, bc := range []struct {
		name   string
		strat  ReadStrategy
		commit int // commit every that many polls; 0: never
		sync   SyncPolicy
		group  bool
	}{
		{"earliest", Earliest, 0, SyncNever, false},
		{"committed", Committed, 1, SyncNever, false},
		{"committed-every1024", Committed, 4, SyncEveryCommit, false},
		{"committed-every1024-group", Committed, 4, SyncEveryCommit, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			const fileLines = 100000
			p := benchInput(b, fileLines)
			ctx := context.Background()
			items := make([]Item, 256)
			newSource := func() *FileSource {
				os.Remove(p + pointer.Suffix)
				s, err := NewFileSource(Config{Path: p, Strategy: bc.strat, Sync: bc.sync, GroupCommit: bc.group})
				if err != nil {
					b.Fatal(err)
				}
				return s
			}
			s := newSource()
			defer func() { s.Close() }()
			var lines, polls int
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
				polls++
				if bc.commit > 0 && polls%bc.commit == 0 {
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
