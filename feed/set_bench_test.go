package feed

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// BenchmarkFileSetRead reads, through one source, every line of a set of
// files (a glob, a new registry), Committed, polling batches of 1,024 and
// committing each (SyncEveryCommit, group commit: as the framework
// configures a file feed): bench row 15 in process, with the one file of
// as many lines beside it to compare.
func BenchmarkFileSetRead(b *testing.B) {
	for _, bc := range []struct {
		name         string
		files, lines int
		sync         SyncPolicy
		lineLen      int
	}{
		{"one-file", 1, 100_000, SyncEveryCommit, 100}, {"100-files", 100, 1000, SyncEveryCommit, 100},
		{"one-file-syncnever", 1, 100_000, SyncNever, 100}, {"100-files-syncnever", 100, 1000, SyncNever, 100},
		// Bench row 15's shape: the ledger's lines of about 30 bytes.
		{"one-file-1M", 1, 1_000_000, SyncEveryCommit, 30}, {"1000-files", 1000, 1000, SyncEveryCommit, 30},
	} {
		b.Run(bc.name, func(b *testing.B) {
			dir := b.TempDir()
			line := strings.Repeat("x", bc.lineLen-1) + "\n"
			for i := range bc.files {
				if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%04d.csv", i)), []byte(strings.Repeat(line, bc.lines)), 0o644); err != nil {
					b.Fatal(err)
				}
			}
			ctx := context.Background()
			items := make([]Item, 1024)
			total := bc.files * bc.lines
			var polls, empty int
			for b.Loop() {
				ptr := filepath.Join(dir, "ptr")
				os.RemoveAll(ptr)
				cfg := Config{Paths: []string{filepath.Join(dir, "*.csv")}, PointerDir: ptr, Name: "set", Strategy: Committed, Sync: bc.sync, GroupCommit: true, Logger: slog.New(slog.DiscardHandler)}
				if bc.files == 1 {
					cfg.Paths, cfg.Path, cfg.Name = nil, filepath.Join(dir, "f0000.csv"), ""
					os.MkdirAll(ptr, 0o755)
				}
				s, err := NewFileSource(cfg)
				if err != nil {
					b.Fatal(err)
				}
				for n := 0; n < total; {
					k, err := s.Poll(ctx, items)
					if err != nil {
						b.Fatal(err)
					}
					polls++
					if k == 0 {
						empty++
						continue
					}
					n += k
					if err := s.Commit(items[k-1].Epoch, items[k-1].Position); err != nil {
						b.Fatal(err)
					}
				}
				if err := s.Close(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*total), "ns/line")
			b.ReportMetric(float64(polls)/float64(b.N), "polls/op")
			b.ReportMetric(float64(empty)/float64(b.N), "empty-polls/op")
		})
	}
}
