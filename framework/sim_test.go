package framework_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/stretchr/testify/require"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/checkpoint"
	"github.com/tidemark-go/tidemark/framework"
)

// simHold is a processor that holds the feed and declares marks durable
// when the test says so; it remembers the highest durable position.
type simHold struct {
	mu      sync.Mutex
	cp      *checkpoint.Checkpoint
	durable int64
}

func (p *simHold) Start(_ context.Context, fc *framework.Context) error {
	p.mu.Lock()
	p.cp = fc.Checkpoint("orders")
	p.mu.Unlock()
	return fc.Subscribe("orders")
}

func (p *simHold) Handle(context.Context, tidemark.Delivery, []byte) error { return nil }

// declare takes a mark now and declares it durable from another goroutine.
func (p *simHold) declare(wg *sync.WaitGroup) {
	p.mu.Lock()
	cp := p.cp
	p.mu.Unlock()
	m := cp.Mark()
	wg.Add(1)
	go func() {
		defer wg.Done()
		p.mu.Lock()
		// Recorded before the declaration: the pointer may follow at once.
		p.durable = max(p.durable, m.Position)
		p.mu.Unlock()
		cp.DurableThrough(m)
	}()
}

func (p *simHold) durablePos() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.durable
}

// A randomized run: lines appended, group A restarted or unsubscribed and
// restarted, its processor failing now and then (Skip), group B holding the
// feed and declaring marks durable at random. After every step the pointer
// is not past a line that A has not handled in some incarnation, nor past
// B's last durable mark.
func TestSimulationPointerNeverPassesUnfinishedLines(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, seed))
			src := newMemSource(0)
			idle := &countingIdle{}
			var mu sync.Mutex
			handledA := map[int64]bool{}
			a := &recProc{feeds: []string{"orders"}, handle: func(_ context.Context, d tidemark.Delivery, _ []byte) error {
				mu.Lock()
				handledA[d.Position] = true
				mu.Unlock()
				if d.Seq%37 == 0 {
					return errors.New("bad line") // skipped after its retry: counts as handled
				}
				return nil
			}}
			b := &simHold{}
			cfg := stallCfg(src, idle, grp("A", "a"), grp("B", "b"))
			cfg.Feeds[0].BatchSize = 8
			cfg.Feeds[0].QueueCapacity = 32
			cfg.Groups[0].Failure = framework.FailurePolicy{Retries: 1, Backoff: 1e5}
			s := startServer(t, cfg, framework.Processors{"a": a, "b": b})
			var wg sync.WaitGroup
			check := func(step int) {
				t.Helper()
				c := src.committedPos()
				if d := b.durablePos(); c > d {
					t.Fatalf("step %d: committed %d past B's durable %d", step, c, d)
				}
				mu.Lock()
				defer mu.Unlock()
				src.mu.Lock()
				ends := append([]int64(nil), src.ends...)
				src.mu.Unlock()
				for _, e := range ends {
					if e > c {
						break
					}
					if !handledA[e] {
						t.Fatalf("step %d: committed %d past line at %d that A never handled", step, c, e)
					}
				}
			}
			for step := range 120 {
				switch r := rng.IntN(20); {
				case r < 9:
					src.appendN(1 + rng.IntN(40))
				case r < 13:
					b.declare(&wg)
				case r == 13:
					require.NoError(t, s.RestartGroup(context.Background(), "A"))
				case r == 14:
					// An unsubscribed group is not owed the lines read
					// while it is away: unsubscribe once every line is
					// read and A's queue is empty, and append none until
					// it is back.
					src.mu.Lock()
					total := len(src.lines)
					src.mu.Unlock()
					aIdle := func() bool {
						st := status(t, s, "orders")
						for _, g := range st.Groups {
							if g.Group == "A" && !g.Removed && g.Depth > 0 {
								return false
							}
						}
						return st.Read == uint64(total) && st.ReadPending == 0
					}
					waitFor(t, "every line read and handed off, A's queue empty", aIdle)
					if err := s.Unsubscribe("orders", "A"); err == nil {
						idle.wait(t, 1)
						check(step)
						require.NoError(t, s.RestartGroup(context.Background(), "A"))
					}
				default:
					idle.wait(t, 1+rng.IntN(3))
				}
				check(step)
			}
			wg.Wait()
			idle.wait(t, 3)
			check(-1)
			st := status(t, s, "orders")
			t.Logf("read %d, committed position %d, stall: %q", st.Read, src.committedPos(), st.StallReason)
		})
	}
}
