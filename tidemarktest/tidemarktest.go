package tidemarktest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-go/tidemark/feed/pointer"
	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/state"
)

// Feed and Group are the names the harness gives its feed and its
// processor group unless Config names them: processors subscribe to Feed.
const (
	Feed  = "input"
	Group = "group"
)

// Config describes what a Harness runs.
type Config struct {
	// Processors returns the group's processors by name, new ones at each
	// call: every run of the harness is a new process, so that a processor
	// that keeps state in memory loses it at a restart, as it would.
	// Required.
	Processors func() framework.Processors
	// Order is the order of the processors in the group; nil means the
	// registry's names in sorted order.
	Order []string
	// Feed and Group name the feed and the group; "" means [Feed] and
	// [Group].
	Feed, Group string
	// Backend is the store's backend, state.Bolt (the default) or
	// state.Pebble; None runs the group without a store.
	Backend string
	// StoreOptions are the store's options; nil means the defaults with a
	// quiet logger.
	StoreOptions *state.Options
	// Failure is the group's failure policy.
	Failure framework.FailurePolicy
	// Logger receives the server's logs; nil discards them (a failing test
	// is told what went wrong by the harness's errors).
	Logger *slog.Logger
	// Timeout bounds each run; zero means a minute.
	Timeout time.Duration
}

// None, as Config.Backend, runs the group without a store.
const None = "none"

// Harness runs a processor group the way a program would, over a real file
// feed and a real store in a temporary folder, and lets a test restart it,
// re-deliver lines as a restart after a crash would, and read what the
// store holds. A Harness is used by one goroutine.
type Harness struct {
	t     testing.TB
	cfg   Config
	dir   string
	input string
	data  string
	lines []int64 // the position after each line appended
	runs  int
}

// New returns a harness in a temporary folder of t, with an empty input.
func New(t testing.TB, cfg Config) *Harness {
	t.Helper()
	if cfg.Processors == nil {
		t.Fatal("tidemarktest: Config.Processors is nil: give a function that returns new processors by name")
	}
	if cfg.Backend == "" {
		cfg.Backend = state.Bolt
	}
	switch cfg.Backend {
	case state.Bolt, state.Pebble, None:
	default:
		t.Fatalf("tidemarktest: Config.Backend %q: want %q, %q or %q", cfg.Backend, state.Bolt, state.Pebble, None)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = time.Minute
	}
	if cfg.Feed == "" {
		cfg.Feed = Feed
	}
	if cfg.Group == "" {
		cfg.Group = Group
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	dir := t.TempDir()
	h := &Harness{t: t, cfg: cfg, dir: dir, input: filepath.Join(dir, "input"), data: filepath.Join(dir, "store")}
	if err := os.WriteFile(h.input, nil, 0o644); err != nil {
		t.Fatalf("tidemarktest: %v", err)
	}
	return h
}

// Input returns the path of the input file.
func (h *Harness) Input() string { return h.input }

// StoreDir returns the folder of the group's store.
func (h *Harness) StoreDir() string { return h.data }

// Append appends lines to the input, each ended by '\n'.
func (h *Harness) Append(lines ...string) {
	h.t.Helper()
	f, err := os.OpenFile(h.input, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		h.t.Fatalf("tidemarktest: append to the input: %v", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		h.t.Fatalf("tidemarktest: %v", err)
	}
	pos := fi.Size()
	var b bytes.Buffer
	for _, l := range lines {
		if strings.ContainsRune(l, '\n') {
			h.t.Fatalf("tidemarktest: Append: line %q holds a '\\n'", l)
		}
		b.WriteString(l)
		b.WriteByte('\n')
		pos += int64(len(l)) + 1
		h.lines = append(h.lines, pos)
	}
	if _, err := f.Write(b.Bytes()); err != nil {
		h.t.Fatalf("tidemarktest: append to the input: %v", err)
	}
}

// Lines returns how many lines were appended.
func (h *Harness) Lines() int { return len(h.lines) }

// Position returns the byte offset just after line n (from 1), the
// position a delivery of that line carries; Position(0) is 0.
func (h *Harness) Position(n int) int64 {
	if n <= 0 {
		return 0
	}
	return h.lines[n-1]
}

// Run starts the group with new processors, runs it until it has read and
// finished every line of the input, and stops it cleanly (the store saves,
// the feed commits). It fails the test on any error the server reports.
func (h *Harness) Run() {
	h.t.Helper()
	if err := h.run(); err != nil {
		h.t.Fatalf("tidemarktest: run %d: %v", h.runs, err)
	}
}

func (h *Harness) run() error {
	h.runs++
	procs := h.cfg.Processors()
	order := h.cfg.Order
	if order == nil {
		for name := range procs {
			order = append(order, name)
		}
		slices.Sort(order)
	}
	g := framework.GroupConfig{Name: h.cfg.Group, Processors: order, Failure: h.cfg.Failure}
	if h.cfg.Backend != None {
		g.Store = h.storeSpec()
		o := state.Options{Logger: h.cfg.Logger}
		if h.cfg.StoreOptions != nil {
			o = *h.cfg.StoreOptions
			if o.Logger == nil {
				o.Logger = h.cfg.Logger
			}
		}
		g.StoreOptions = &o
	}
	srv, err := framework.New(framework.Config{
		Feeds: []framework.FeedConfig{{
			Name:     h.cfg.Feed,
			File:     &framework.FileConfig{Filename: h.input},
			Overload: framework.OverloadConfig{Policy: framework.Pause},
			Idle:     framework.Backoff{Max: 5 * time.Millisecond},
		}},
		Groups:       []framework.GroupConfig{g},
		Logger:       h.cfg.Logger,
		UntilSettled: true,
	}, procs)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.Timeout)
	defer cancel()
	return srv.Run(ctx)
}

func (h *Harness) storeSpec() string {
	if _, err := os.Stat(filepath.Join(h.data, "STORE")); err == nil {
		return h.data
	}
	return h.cfg.Backend + ":" + h.data
}

// Redeliver sets the feed's pointer back to just after line n (0: the
// start), as a crash before the feed committed those lines leaves it: the
// next Run delivers every line after it again, to processors that were
// restarted, with a store that holds them. Call it between runs.
func (h *Harness) Redeliver(n int) {
	h.t.Helper()
	if n < 0 || n > len(h.lines) {
		h.t.Fatalf("tidemarktest: Redeliver(%d): the input has %d lines", n, len(h.lines))
	}
	pos := h.Position(n)
	pf := pointer.Open(pointer.Path(h.input, ""), pointer.Options{Logger: h.cfg.Logger})
	defer pf.Close()
	if err := pf.Lock(); err != nil {
		h.t.Fatalf("tidemarktest: Redeliver: %v", err)
	}
	res, err := pf.Load()
	if err != nil || !res.Found {
		h.t.Fatalf("tidemarktest: Redeliver: no pointer to set back (run the harness first): %v %s", err, res.Reason)
	}
	rec := res.Record
	if pos > rec.Position {
		h.t.Fatalf("tidemarktest: Redeliver(%d): the feed has committed only up to position %d", n, rec.Position)
	}
	data, err := os.ReadFile(h.input)
	if err != nil {
		h.t.Fatalf("tidemarktest: %v", err)
	}
	tl := int(min(pos, int64(pointer.MaxTailLen)))
	rec.Position, rec.TailLen, rec.TailHash = pos, tl, pointer.HashBytes(data[pos-int64(tl):pos])
	if err := pf.Store(rec); err != nil {
		h.t.Fatalf("tidemarktest: Redeliver: %v", err)
	}
}

// Snapshot copies the store's folder (call it between runs): restore the
// copy later to have a store that lost what the runs after it applied, as
// a store restored from an older backup, or one that lost its last
// batches to a damaged disk, while the feed's pointer went on.
func (h *Harness) Snapshot() StoreCopy {
	h.t.Helper()
	dst := filepath.Join(h.dir, fmt.Sprintf("copy-%d", h.runs))
	if err := copyDir(h.data, dst); err != nil {
		h.t.Fatalf("tidemarktest: copy the store: %v", err)
	}
	return StoreCopy{h: h, dir: dst}
}

// StoreCopy is a copy of the store's folder taken between two runs.
type StoreCopy struct {
	h   *Harness
	dir string
}

// Restore puts the copy back in place of the store, as restoring an older
// backup does: the next Run re-reads what the store lacks (the feed
// resumes from the store, not from its pointer).
func (c StoreCopy) Restore() {
	c.h.t.Helper()
	if err := os.RemoveAll(c.h.data); err != nil {
		c.h.t.Fatalf("tidemarktest: %v", err)
	}
	if err := copyDir(c.dir, c.h.data); err != nil {
		c.h.t.Fatalf("tidemarktest: restore the store: %v", err)
	}
}

// View opens the store (no run may be in progress) and calls fn with a
// read-only transaction of namespace ns.
func (h *Harness) View(ns string, fn func(tx *state.Tx) error) {
	h.t.Helper()
	if err := h.view(ns, fn); err != nil {
		h.t.Fatalf("tidemarktest: view: %v", err)
	}
}

func (h *Harness) view(ns string, fn func(tx *state.Tx) error) error {
	st, err := state.OpenDir(h.data, &state.Options{Logger: h.cfg.Logger})
	if err != nil {
		return err
	}
	return errors.Join(st.Namespace(ns).View(fn), st.Close())
}

// Output returns the committed bytes of the store's output file name.
func (h *Harness) Output(name string) []byte {
	h.t.Helper()
	st, err := state.OpenDir(h.data, &state.Options{Logger: h.cfg.Logger})
	if err != nil {
		h.t.Fatalf("tidemarktest: %v", err)
	}
	defer st.Close()
	o, err := st.Output(name)
	if err != nil {
		h.t.Fatalf("tidemarktest: %v", err)
	}
	var b bytes.Buffer
	if _, err := o.WriteTo(&b); err != nil {
		h.t.Fatalf("tidemarktest: read output %s: %v", name, err)
	}
	return b.Bytes()
}

// CheckExactlyOnce checks that the processors of cfg apply every line of
// lines exactly once whatever a crash re-delivers. It runs them over lines
// once as a reference. Then, for each point p, it replays a crash: a first
// run reads the lines up to s, halfway between p and the end, and saves
// them; the crash leaves the feed's pointer at p (lines p+1 to s are
// delivered again); the lines after s arrive; a restarted group (new
// processors) runs to the end. What observe reads from the harness (tables,
// outputs) must equal the reference's (reflect.DeepEqual). points are line
// counts (nil: 0, the middle and the last line). Each point whose result
// differs is reported, with both values, through t.Errorf.
//
// A processor that applies through its store passes; one that applies
// without the delivery's position (or writes somewhere the store does not
// know) fails at re-delivered lines, and one that keeps state in memory
// fails at the lines after the restart.
func CheckExactlyOnce(t testing.TB, cfg Config, lines []string, points []int, observe func(h *Harness) any) {
	t.Helper()
	ref := New(t, cfg)
	ref.Append(lines...)
	ref.Run()
	want := observe(ref)
	if points == nil {
		points = []int{0, len(lines) / 2, max(len(lines)-1, 0)}
	}
	for _, p := range points {
		if p < 0 || p > len(lines) {
			t.Fatalf("tidemarktest: CheckExactlyOnce: point %d: there are %d lines", p, len(lines))
		}
		s := p + (len(lines)-p)/2
		h := New(t, cfg)
		h.Append(lines[:s]...)
		h.Run()
		h.Redeliver(p)
		h.Append(lines[s:]...)
		h.Run()
		if got := observe(h); !reflect.DeepEqual(got, want) {
			t.Errorf("tidemarktest: a crash after line %d, with lines %d to %d saved, then delivered again, and lines after %d read by a restarted group: the state differs from one run without a crash:\n got: %#v\nwant: %#v", s, p+1, s, s, got, want)
		}
	}
}

// copyDir copies the regular files of the folder src (recursively) to dst.
func copyDir(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		if !d.Type().IsRegular() || d.Name() == "LOCK" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o644)
	})
}
