//go:build unix

package framework_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark-go/tidemark/feed"
	"github.com/tidemark-go/tidemark/framework"
)

// BenchmarkIdleFeedCPU reports the CPU an idle tailing file feed uses with
// the default idle strategy, as a percentage of one core (run with
// -benchtime 1x: each iteration idles for 2 s).
func BenchmarkIdleFeedCPU(b *testing.B) {
	path := benchFile(b)
	for b.Loop() {
		src, err := feed.NewFileSource(feed.Config{Path: path, Strategy: feed.Latest})
		if err != nil {
			b.Fatal(err)
		}
		s, err := framework.New(framework.Config{
			Feeds:  []framework.FeedConfig{{Name: "bench", Source: src, Overload: framework.OverloadConfig{Policy: framework.Pause}}},
			Groups: []framework.GroupConfig{{Name: "g", Processors: []string{"p"}}},
		}, framework.Processors{"p": &countProc{done: make(chan struct{})}})
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // reach the longest idle wait
		before := cpuTime()
		start := time.Now()
		time.Sleep(2 * time.Second)
		used := cpuTime() - before
		b.ReportMetric(100*used.Seconds()/time.Since(start).Seconds(), "cpu-%")
		if err := s.Stop(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
