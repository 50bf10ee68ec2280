package framework_test

import (
	"github.com/stretchr/testify/require"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-go/tidemark/framework"
)

type handleCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (h *handleCounter) ObserveHandle(group string, d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if d < 0 {
		panic("negative handling time")
	}
	h.n[group]++
}

// TestHandleObserver: the observer hears of every line each group handled,
// under the group's name.
func TestHandleObserver(t *testing.T) {
	src := newMemSource(300)
	a, b := &recProc{feeds: []string{"orders"}}, &recProc{feeds: []string{"orders"}}
	obs := &handleCounter{n: map[string]int{}}
	cfg := oneFeed(src, grp("ga", "a"), grp("gb", "b"))
	cfg.Observer = obs
	s := startServer(t, cfg, framework.Processors{"a": a, "b": b})
	settle(t, s, "orders")
	stopServer(t, s)
	obs.mu.Lock()
	defer obs.mu.Unlock()
	require.Equal(t, map[string]int{"ga": 300, "gb": 300}, obs.n)
}
