package framework

import (
	"context"
	"reflect"
	"testing"

	"github.com/tidemark-go/tidemark"
)

// poll writes each field of a line's Delivery in place, one by one, in a
// batch it recycles: a field it does not write would keep the value of an
// earlier line.
func TestPollWritesEveryDeliveryField(t *testing.T) {
	var names []string
	for f := range reflect.TypeFor[tidemark.Delivery]().Fields() {
		names = append(names, f.Name)
	}
	if want := []string{"Feed", "File", "Epoch", "Position", "Seq", "Origin"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("tidemark.Delivery has the fields %v, feedRunner.poll writes %v: write the new ones in poll's loop too, then update this list", names, want)
	}
}

// nopProc is a processor that does nothing.
type nopProc struct{ n uint64 }

func (p *nopProc) Start(context.Context, *Context) error { return nil }
func (p *nopProc) Handle(context.Context, tidemark.Delivery, []byte) error {
	p.n++
	return nil
}

// BenchmarkGroupLoop is the group's loop over one batch of 1,024 lines in
// memory, with no-op processors: one (runSingle) and two (runItems' own
// loop). ns/line is what the group's goroutine costs a line beyond the
// processors' Handle, without the hand-off.
func BenchmarkGroupLoop(b *testing.B) {
	for _, np := range []int{1, 2} {
		b.Run(map[int]string{1: "one processor", 2: "two processors"}[np], func(b *testing.B) {
			g := &group{s: &Server{}}
			inc := newIncarnation(context.Background())
			defer inc.stop()
			q := &queue{g: g}
			var procs []*procEntry
			for range np {
				procs = append(procs, &procEntry{p: &nopProc{}})
			}
			q.procs.Store(&procs)
			bt := &batch{items: make([]item, 1024), data: make([]byte, 32*1024)}
			for i := range bt.items {
				bt.items[i] = item{d: tidemark.Delivery{Feed: "f", Epoch: 1, Seq: uint64(i + 1), Position: int64(32 * (i + 1))}, off: 32 * i, end: 32*i + 31}
			}
			for b.Loop() {
				c := cursor{n: q.finished.Load(), ok: true}
				if err := g.runItems(inc, q, bt, &c); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(bt.items)), "ns/line")
		})
	}
}
