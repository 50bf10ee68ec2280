package tidemarktest_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/state"
	"github.com/tidemark-go/tidemark/tidemarktest"
)

// sums adds each line's amount ("account,amount") to its account, in the
// group's store: exactly once.
type sums struct{ st state.Store }

func (s *sums) Start(_ context.Context, fc *framework.Context) error {
	st, err := fc.Store()
	if err != nil {
		return err
	}
	s.st = st
	return fc.Subscribe(tidemarktest.Feed)
}

func (s *sums) Handle(ctx context.Context, d tidemark.Delivery, line []byte) error {
	account, amount, err := parse(line)
	if err != nil {
		return framework.Permanent(err)
	}
	_, err = s.st.Apply(ctx, d, func(tx *state.Tx) error {
		_, err := tx.Bucket("balances").AddInt64([]byte(account), amount)
		return err
	})
	return err
}

// careless keeps the same sums, but applies each line without its
// position (so the store cannot tell a re-delivery), as a processor that
// writes somewhere else would.
type careless struct{ sums }

func (c *careless) Handle(ctx context.Context, d tidemark.Delivery, line []byte) error {
	d.Epoch, d.Position, d.Origin = 0, 0, nil
	return c.sums.Handle(ctx, d, line)
}

// inMemory counts lines in memory and saves the count with each line: it
// loses its count at a restart.
type inMemory struct {
	sums
	n int64
}

func (m *inMemory) Handle(ctx context.Context, d tidemark.Delivery, line []byte) error {
	m.n++
	_, err := m.st.Apply(ctx, d, func(tx *state.Tx) error { return tx.PutInt64([]byte("lines"), m.n) })
	return err
}

func parse(line []byte) (string, int64, error) {
	a, n, ok := strings.Cut(string(line), ",")
	if !ok {
		return "", 0, fmt.Errorf("line %q: want account,amount", line)
	}
	v, err := strconv.ParseInt(n, 10, 64)
	return a, v, err
}

func ledgerLines(n int) []string {
	lines := make([]string, n)
	for i := range lines {
		lines[i] = fmt.Sprintf("acct-%d,%d", i%7, i+1)
	}
	return lines
}

func balances(h *tidemarktest.Harness) any {
	got := map[string]int64{}
	h.View("", func(tx *state.Tx) error {
		return tx.Bucket("balances").ForEach(func(k, v []byte) error {
			n, err := tx.Bucket("balances").GetInt64(k)
			got[string(k)] = n
			return err
		})
	})
	return got
}

func lineCount(h *tidemarktest.Harness) any {
	var n int64
	h.View("", func(tx *state.Tx) error {
		var err error
		n, err = tx.GetInt64([]byte("lines"))
		return err
	})
	return n
}

// recorder is a testing.TB that keeps the errors reported to it, so that a
// test can check that CheckExactlyOnce fails a careless processor.
type recorder struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func (r *recorder) failures() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.errs
}

func TestCheckExactlyOnce(t *testing.T) {
	lines := ledgerLines(300)
	for _, backend := range []string{state.Bolt, state.Pebble} {
		t.Run(backend, func(t *testing.T) {
			// A processor that applies through the store passes.
			tidemarktest.CheckExactlyOnce(t, tidemarktest.Config{Backend: backend, Processors: func() framework.Processors {
				return framework.Processors{"sums": &sums{}}
			}}, lines, []int{0, 1, 150, 299}, balances)

			// One that applies without the positions is caught at every
			// point: the re-delivered lines are added again.
			r := &recorder{TB: t}
			tidemarktest.CheckExactlyOnce(r, tidemarktest.Config{Backend: backend, Processors: func() framework.Processors {
				return framework.Processors{"sums": &careless{}}
			}}, lines, []int{0, 150, 299}, balances)
			if got := len(r.failures()); got != 3 {
				t.Fatalf("a careless processor failed %d of 3 points: %q", got, r.failures())
			}
			if !strings.Contains(r.failures()[0], "lines 1 to 150 saved, then delivered again") {
				t.Fatalf("failure message: %s", r.failures()[0])
			}

			// One that keeps a count in memory is caught too: a restart
			// starts it from zero, whatever the store skips.
			r = &recorder{TB: t}
			tidemarktest.CheckExactlyOnce(r, tidemarktest.Config{Backend: backend, Processors: func() framework.Processors {
				return framework.Processors{"count": &inMemory{}}
			}}, lines, []int{150}, lineCount)
			if len(r.failures()) != 1 {
				t.Fatalf("an in-memory counter failed %d of 1 points", len(r.failures()))
			}
		})
	}
}

// A store restored from an older copy: the next run re-reads what it
// lacks, and the state is exact.
func TestRestoredStoreReReads(t *testing.T) {
	h := tidemarktest.New(t, tidemarktest.Config{Processors: func() framework.Processors {
		return framework.Processors{"sums": &sums{}}
	}})
	lines := ledgerLines(200)
	h.Append(lines[:120]...)
	h.Run()
	old := h.Snapshot()
	h.Append(lines[120:]...)
	h.Run()
	want := balances(h)
	old.Restore()
	h.Run()
	if got := balances(h); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after the restore: %v, want %v", got, want)
	}
}

// fakeT is the smallest testing.TB for an Example: failures panic, and
// the temporary folders are removed by cleanup.
type fakeT struct {
	testing.TB
	dirs []string
}

func (f *fakeT) Helper()                   {}
func (f *fakeT) Fatalf(s string, a ...any) { panic(fmt.Sprintf(s, a...)) }
func (f *fakeT) Fatal(a ...any)            { panic(fmt.Sprint(a...)) }
func (f *fakeT) TempDir() string {
	d, err := os.MkdirTemp("", "tidemarktest")
	if err != nil {
		panic(err)
	}
	f.dirs = append(f.dirs, d)
	return d
}
func (f *fakeT) cleanup() {
	for _, d := range f.dirs {
		os.RemoveAll(d)
	}
}
