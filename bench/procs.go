package bench

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/checkpoint"
	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/state"
)

// Counter counts the lines handed to a processor and tells when the first
// one arrived and when Target of them have. Count is called by one
// goroutine (the processor's group); N, First, FirstAt and Done by any.
type Counter struct {
	// Target is the count at which Done is closed; 0 never closes it.
	Target uint64

	// local is the count, written only by the goroutine that calls Count:
	// a plain increment, so that a no-op processor costs the framework's
	// loop and not an atomic instruction a line. It is published to n
	// every 1024 lines, and at the first and the Target-th line. Padded
	// to a cache line of its own, so that counters of processors on other
	// goroutines (allocated next to it) do not share it.
	_         [64]byte
	local     uint64
	n         atomic.Uint64
	_         [48]byte
	firstOnce sync.Once
	doneOnce  sync.Once
	first     chan struct{}
	done      chan struct{}
	firstAt   time.Time
}

// NewCounter returns a counter that closes Done at target lines.
func NewCounter(target uint64) *Counter {
	return &Counter{Target: target, first: make(chan struct{}), done: make(chan struct{})}
}

// Count counts one line. Only one goroutine may call it.
func (c *Counter) Count() {
	c.local++
	n := c.local
	if n&1023 != 0 && n != 1 && n != c.Target {
		return
	}
	c.n.Store(n)
	if n == 1 {
		c.firstOnce.Do(func() {
			c.firstAt = time.Now()
			close(c.first)
		})
	}
	if n == c.Target {
		c.doneOnce.Do(func() { close(c.done) })
	}
}

// N returns the lines counted, as of the last multiple of 1024 (exact once
// Done is closed).
func (c *Counter) N() uint64 { return c.n.Load() }

// First is closed when the first line is counted.
func (c *Counter) First() <-chan struct{} { return c.first }

// FirstAt is when the first line was counted; valid once First is closed.
func (c *Counter) FirstAt() time.Time { return c.firstAt }

// Done is closed when Target lines are counted.
func (c *Counter) Done() <-chan struct{} { return c.done }

// Nop is a processor that does nothing with a line but count it.
type Nop struct {
	Feed string
	*Counter
}

// Start subscribes to the feed.
func (p *Nop) Start(_ context.Context, fc *framework.Context) error { return fc.Subscribe(p.Feed) }

// Handle counts the line.
func (p *Nop) Handle(context.Context, tidemark.Delivery, []byte) error {
	p.Count()
	return nil
}

// LedgerMem is the ledger with its state in memory: balances per account,
// the count of lines applied and the total, de-duplicated by a
// tidemark.Tracker.
type LedgerMem struct {
	Feed string
	*Counter

	Tracker  tidemark.Tracker
	Balances map[string]*int64
	Applied  int64
	Total    int64
	// Rejected counts malformed lines.
	Rejected int64
}

// NewLedgerMem returns an empty in-memory ledger for feed.
func NewLedgerMem(feed string, c *Counter) *LedgerMem {
	return &LedgerMem{Feed: feed, Counter: c, Balances: make(map[string]*int64, Accounts)}
}

// Start subscribes to the feed.
func (l *LedgerMem) Start(_ context.Context, fc *framework.Context) error {
	return fc.Subscribe(l.Feed)
}

// Handle applies the line unless it is a re-delivery.
func (l *LedgerMem) Handle(_ context.Context, d tidemark.Delivery, line []byte) error {
	defer l.Count()
	if l.Tracker.Seen(d) {
		return nil
	}
	_, account, amount, err := ParseLedgerLine(line)
	if err != nil {
		l.Rejected++
		l.Tracker.Record(d)
		return nil
	}
	l.ApplyEntry(account, amount)
	l.Tracker.Record(d)
	return nil
}

// ApplyEntry adds amount to account's balance and to the counters.
func (l *LedgerMem) ApplyEntry(account []byte, amount int64) {
	b := l.Balances[string(account)]
	if b == nil {
		b = new(int64)
		l.Balances[string(account)] = b
	}
	*b += amount
	l.Applied++
	l.Total += amount
}

// Names of the ledger's state in a store.
const (
	LedgerNamespace = "ledger"
	BalancesBucket  = "balances"
)

// Keys of the ledger's root bucket.
var (
	KeyApplied = []byte("applied")
	KeyTotal   = []byte("total")
)

// LedgerStore is the ledger with its state in a state.Store: every line is
// applied exactly once, its balance change and its position written in one
// transaction, and the feed's pointer held until the batch is durable.
type LedgerStore struct {
	Feed  string
	Store state.Namespace // the ledger's namespace
	*Counter

	st   state.Store // the whole store, which the hold is bound to
	cp   *checkpoint.Checkpoint
	cur  []byte
	fn   func(*state.Tx) error
	errs atomic.Uint64
}

// NewLedgerStore returns the ledger over st's namespace LedgerNamespace.
func NewLedgerStore(feed string, st state.Store, c *Counter) *LedgerStore {
	l := &LedgerStore{Feed: feed, Store: st.Namespace(LedgerNamespace), Counter: c, st: st}
	l.fn = l.apply
	return l
}

// Start takes the checkpoint hold, binds it to the store, and subscribes.
func (l *LedgerStore) Start(_ context.Context, fc *framework.Context) error {
	l.cp = fc.Checkpoint(l.Feed)
	if err := l.st.Bind(l.Feed, l.cp); err != nil {
		return err
	}
	return fc.Subscribe(l.Feed)
}

// Handle applies the line in the store.
func (l *LedgerStore) Handle(ctx context.Context, d tidemark.Delivery, line []byte) error {
	l.cur = line
	_, err := l.Store.Apply(ctx, d, l.fn)
	l.cur = nil
	if errors.Is(err, ErrMalformed) {
		l.errs.Add(1)
		err = nil
	}
	if err == nil {
		l.Count()
	}
	return err
}

func (l *LedgerStore) apply(tx *state.Tx) error {
	_, account, amount, err := ParseLedgerLine(l.cur)
	if err != nil {
		return err
	}
	if _, err := tx.Bucket(BalancesBucket).AddInt64(account, amount); err != nil {
		return err
	}
	if _, err := tx.AddInt64(KeyApplied, 1); err != nil {
		return err
	}
	_, err = tx.AddInt64(KeyTotal, amount)
	return err
}
