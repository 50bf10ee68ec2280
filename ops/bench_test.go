package ops_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tidemark-go/tidemark/feed"
	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/ops"
)

// BenchmarkObserveHandle is the cost the framework pays per handled line
// when it reports latency to an Observer.
func BenchmarkObserveHandle(b *testing.B) {
	o := ops.NewObserver()
	b.ReportAllocs()
	for b.Loop() {
		o.ObserveHandle("orders-agent", 37*time.Microsecond)
	}
}

// BenchmarkObserveHandleParallel is the same from every processor.
func BenchmarkObserveHandleParallel(b *testing.B) {
	o := ops.NewObserver()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			o.ObserveHandle("orders-agent", 37*time.Microsecond)
		}
	})
}

// BenchmarkScrape is one GET /metrics of feeds with two groups each.
func BenchmarkScrape(b *testing.B) {
	for _, feeds := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("feeds=%d", feeds), func(b *testing.B) {
			fs := &fakeServer{}
			var names []string
			for i := range feeds {
				name := fmt.Sprintf("feed-%d", i)
				names = append(names, name)
				fs.set(framework.FeedStatus{
					Name:   name,
					Status: feed.Status{State: feed.StateCaughtUp, Epoch: 1764400000000000000, ReadPosition: 1 << 30, FileSize: 1 << 30, Reopens: map[string]uint64{feed.ReasonReplaced: 3}},
					Groups: []framework.QueueStatus{{Group: "a", Processed: 1e6}, {Group: "b", Processed: 1e6}},
				})
			}
			l, err := ops.New(ops.Config{Server: fs, Feeds: names})
			if err != nil {
				b.Fatal(err)
			}
			h := l.Handler()
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1/metrics", nil)
				req.RemoteAddr = "127.0.0.1:1"
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatal(w.Code)
				}
				_, _ = io.Copy(io.Discard, w.Body)
			}
		})
	}
}
