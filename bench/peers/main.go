// Command peers runs the OpenTelemetry Collector's file consumer
// (pkg/stanza/fileconsumer) over one file from its beginning, counting the
// tokens it emits, and prints one JSON line with the count and the time it
// took: row 13 of bench/cmd/benchtable. It lives in its own module so that
// the collector's dependencies stay out of tidemark's go.mod.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/stanza/fileconsumer"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/extension/xextension/storage"
)

// result is what the program prints; bench/cmd/benchtable decodes it.
type result struct {
	Lines   int64   `json:"lines"`
	Seconds float64 `json:"seconds"`
	// PeakRSSKiB is the process's peak resident set (VmHWM).
	PeakRSSKiB int64 `json:"peak_rss_kib,omitempty"`
}

func main() {
	path := flag.String("file", "", "the file to read (required)")
	lines := flag.Int64("lines", 0, "stop once this many tokens were emitted (required)")
	poll := flag.Duration("poll", 10*time.Millisecond, "the file consumer's poll interval")
	timeout := flag.Duration("timeout", 10*time.Minute, "give up after this long")
	flag.Parse()
	if *path == "" || *lines <= 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*path, *lines, *poll, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(1)
	}
}

func run(path string, want int64, poll, timeout time.Duration) error {
	cfg := fileconsumer.NewConfig()
	cfg.Include = []string{path}
	cfg.StartAt = "beginning"
	cfg.PollInterval = poll

	var count atomic.Int64
	done := make(chan struct{})
	var once sync.Once
	emit := func(_ context.Context, tokens [][]byte, _ map[string]any, _ int64, _ []int64) error {
		if count.Add(int64(len(tokens))) >= want {
			once.Do(func() { close(done) })
		}
		return nil
	}
	m, err := cfg.Build(componenttest.NewNopTelemetrySettings(), emit)
	if err != nil {
		return fmt.Errorf("build file consumer: %w", err)
	}
	start := time.Now()
	if err := m.Start(newMemPersister()); err != nil {
		return fmt.Errorf("start file consumer: %w", err)
	}
	select {
	case <-done:
	case <-time.After(timeout):
		_ = m.Stop()
		return fmt.Errorf("timed out after %v with %d of %d tokens", timeout, count.Load(), want)
	}
	elapsed := time.Since(start)
	if err := m.Stop(); err != nil {
		return fmt.Errorf("stop file consumer: %w", err)
	}
	return json.NewEncoder(os.Stdout).Encode(result{Lines: count.Load(), Seconds: elapsed.Seconds(), PeakRSSKiB: peakRSSKiB()})
}

// peakRSSKiB returns the VmHWM line of /proc/self/status in KiB, 0 if none
// (the same as bench.PeakRSSKiB, which this module does not import).
func peakRSSKiB() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// memPersister keeps the file consumer's offsets in memory: the peer then
// gives no delivery guarantee across restarts, which is its usual
// configuration without a storage extension.
type memPersister struct {
	mu sync.Mutex
	m  map[string][]byte
}

func newMemPersister() *memPersister { return &memPersister{m: make(map[string][]byte)} }

func (p *memPersister) Get(_ context.Context, k string) ([]byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m[k], nil
}

func (p *memPersister) Set(_ context.Context, k string, v []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.m[k] = append([]byte(nil), v...)
	return nil
}

func (p *memPersister) Delete(_ context.Context, k string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.m, k)
	return nil
}

func (p *memPersister) Batch(ctx context.Context, ops ...*storage.Operation) error {
	for _, op := range ops {
		var err error
		switch op.Type {
		case storage.Get:
			op.Value, err = p.Get(ctx, op.Key)
		case storage.Set:
			err = p.Set(ctx, op.Key, op.Value)
		case storage.Delete:
			err = p.Delete(ctx, op.Key)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
