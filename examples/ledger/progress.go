package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// progressFacts is what a progress line shows.
type progressFacts struct {
	Lines    uint64 // lines handled in this run (applied, skipped or rejected)
	Position int64  // the feed's read position
	Size     int64  // the input's size
	State    string // the feed's state
}

// Progress prints a run's progress to w: a live bar redrawn in place when w
// is a terminal, else a plain line every interval.
type Progress struct {
	w        io.Writer
	live     bool
	interval time.Duration
	facts    func() progressFacts

	mu       sync.Mutex
	last     progressFacts
	lastAt   time.Time
	rate     float64
	drawn    bool
	stop     chan struct{}
	stopped  chan struct{}
	stopOnce sync.Once
}

// isTerminal reports whether f is a character device (a terminal).
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// NewProgress returns a progress printer reading its facts from facts.
// live selects the redrawn bar. It prints nothing until Start.
func NewProgress(w io.Writer, live bool, facts func() progressFacts) *Progress {
	interval := time.Second
	if live {
		interval = 200 * time.Millisecond
	}
	return &Progress{w: w, live: live, interval: interval, facts: facts, stop: make(chan struct{}), stopped: make(chan struct{})}
}

// Start prints progress every interval until Stop.
func (p *Progress) Start() {
	p.lastAt = time.Now()
	go func() {
		defer close(p.stopped)
		t := time.NewTicker(p.interval)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case now := <-t.C:
				p.print(now)
			}
		}
	}()
}

// Stop prints a last update and stops.
func (p *Progress) Stop() {
	p.stopOnce.Do(func() {
		close(p.stop)
		<-p.stopped
		p.print(time.Now())
		if p.live && p.drawn {
			fmt.Fprintln(p.w)
		}
	})
}

func (p *Progress) print(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.facts()
	if dt := now.Sub(p.lastAt).Seconds(); dt > 0 {
		p.rate = float64(f.Lines-p.last.Lines) / dt
	}
	p.last, p.lastAt = f, now
	line := formatProgress(f, p.rate, p.live)
	if p.live {
		fmt.Fprintf(p.w, "\r%s\x1b[K", line)
		p.drawn = true
	} else {
		fmt.Fprintln(p.w, line)
	}
}

// formatProgress renders one progress line; with bar, a bar of the read
// position against the input's size comes first.
func formatProgress(f progressFacts, rate float64, bar bool) string {
	var b strings.Builder
	if bar {
		const width = 30
		frac := 0.0
		if f.Size > 0 {
			frac = min(1, float64(f.Position)/float64(f.Size))
		}
		n := int(frac * width)
		fmt.Fprintf(&b, "[%s%s] %3.0f%% ", strings.Repeat("#", n), strings.Repeat(".", width-n), frac*100)
	} else {
		b.WriteString("ledger: ")
	}
	fmt.Fprintf(&b, "%d lines, %.0f lines/s, position %d/%d bytes", f.Lines, rate, f.Position, f.Size)
	if f.State != "" {
		fmt.Fprintf(&b, ", %s", f.State)
	}
	return b.String()
}
