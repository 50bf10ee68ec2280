package state

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tidemark-go/tidemark"
)

// The ledger line of BenchmarkApplyLedger through tables, against the
// same line through the Bucket methods: the cost of the typed API, and
// its allocations per line (-benchmem; none for these codecs).
//
//	go test -run '^$' -bench 'TableLine' -benchmem ./state
func BenchmarkTableLine(b *testing.B) {
	accounts := NewTable("balances", String{}, Int64{})
	counters := NewTable("", String{}, Int64{})
	ids := NewTable("by-id", Int64{}, Int64{})
	keys := make([]string, 100)
	raw := make([][]byte, 100)
	for i := range keys {
		keys[i] = fmt.Sprintf("account-holder-%05d", i)
		raw[i] = []byte(keys[i])
	}
	applied, total := []byte("applied"), []byte("total")
	appliedC, totalC := counters.Counter("applied"), counters.Counter("total")
	lines := map[string]func(tx *Tx, n int) error{
		"bucket": func(tx *Tx, n int) error {
			if _, err := tx.Bucket("balances").AddInt64(raw[(n*7919)%len(raw)], int64(n)); err != nil {
				return err
			}
			if _, err := tx.AddInt64(applied, 1); err != nil {
				return err
			}
			_, err := tx.AddInt64(total, int64(n))
			return err
		},
		"table-add": func(tx *Tx, n int) error {
			if _, err := accounts.Add(tx, keys[(n*7919)%len(keys)], int64(n)); err != nil {
				return err
			}
			if _, err := counters.Add(tx, "applied", 1); err != nil {
				return err
			}
			_, err := counters.Add(tx, "total", int64(n))
			return err
		},
		// table-add with the counters through Counter.
		"table-counter": func(tx *Tx, n int) error {
			if _, err := accounts.Add(tx, keys[(n*7919)%len(keys)], int64(n)); err != nil {
				return err
			}
			if _, err := appliedC.Add(tx, 1); err != nil {
				return err
			}
			_, err := totalC.Add(tx, int64(n))
			return err
		},
		// Get and Put of int64 keys and values, and a Get of a string key.
		"table-get-put": func(tx *Tx, n int) error {
			id := int64(n % 1000)
			v, _, err := ids.Get(tx, id)
			if err != nil {
				return err
			}
			if err := ids.Put(tx, id, v+int64(n)); err != nil {
				return err
			}
			_, _, err = accounts.Get(tx, keys[n%len(keys)])
			return err
		},
	}
	for _, be := range backends() {
		for _, name := range []string{"bucket", "table-add", "table-counter", "table-get-put", "table-counter-each", "table-counter-runs"} {
			line := lines[name]
			if name == "table-counter-each" || name == "table-counter-runs" {
				b.Run(be.name+"/"+name, func(b *testing.B) { benchEach(b, be, lines["table-counter"], name == "table-counter-runs") })
				continue
			}
			b.Run(be.name+"/"+name, func(b *testing.B) {
				s, err := be.open(b.TempDir(), &Options{Logger: quietLogger(), Unbound: true, BatchInterval: time.Hour})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				ns := s.Namespace("ledger")
				ctx := context.Background()
				var n int
				fn := func(tx *Tx) error { return line(tx, n) }
				b.ReportAllocs()
				for b.Loop() {
					n++
					if _, err := ns.Apply(ctx, del("f", 1, n), fn); err != nil {
						b.Fatal(err)
					}
				}
				if err := s.Flush(ctx); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "lines/s")
			})
		}
	}
}

// benchEach is BenchmarkTableLine's table-counter-each: the line of
// table-counter applied by ApplyEach, in runs of as many lines as the
// framework hands a BatchHandler at most in one call (a feed's read of
// 1,024 lines), against table-counter's Apply of one line at a time; and,
// with runs, table-counter-runs: the same calls with ApplyRuns, one
// transaction for the lines of a call, whose function writes each line as
// table-counter does (the counters once a line: what the transaction
// alone saves).
func benchEach(b *testing.B, be backend, line func(tx *Tx, n int) error, runs bool) {
	const run = 1024
	s, err := be.open(b.TempDir(), &Options{Logger: quietLogger(), Unbound: true, BatchInterval: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ns := s.Namespace("ledger")
	ctx := context.Background()
	ds := make([]tidemark.Delivery, run)
	at := func(i int) *tidemark.Delivery { return &ds[i] }
	fn := func(tx *Tx, i int) error { return line(tx, int(ds[i].Seq)) }
	fnRuns := func(tx *Tx, from, to int) error {
		for i := from; i < to; i++ {
			if err := line(tx, int(ds[i].Seq)); err != nil {
				return err
			}
		}
		return nil
	}
	b.ReportAllocs()
	n := 0
	for n < b.N {
		k := min(run, b.N-n)
		for j := range k {
			ds[j] = del("f", 1, n+j+1)
		}
		var err error
		if runs {
			_, err = ns.ApplyRuns(ctx, k, at, fnRuns)
		} else {
			_, err = ns.ApplyEach(ctx, k, at, fn)
		}
		if err != nil {
			b.Fatal(err)
		}
		n += k
	}
	if err := s.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "lines/s")
}
