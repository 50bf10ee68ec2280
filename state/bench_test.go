package state

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// benchApply applies b.N lines, each adding to one of 1000 balances and
// writing an output line, then flushes: the time is to durable.
func benchApply(b *testing.B, be backend, o *Options) {
	o.Logger = quietLogger()
	o.Unbound = true // it flushes itself, at the end
	s, err := be.open(b.TempDir(), o)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ns := s.Namespace("bench")
	ctx := context.Background()
	keys := make([][]byte, 1000)
	for i := range keys {
		keys[i] = []byte("account-" + strconv.Itoa(i))
	}
	n := 0
	b.ReportAllocs()
	for b.Loop() {
		n++
		_, err := ns.Apply(ctx, del("f", 1, n), func(tx *Tx) error {
			if _, err := tx.Bucket("balances").AddInt64(keys[n%len(keys)], int64(n)); err != nil {
				return err
			}
			_, err := tx.Output("bench.out").Write([]byte("0123456789012345678901234567890\n"))
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "lines/s")
	st := s.Stats()
	b.ReportMetric(float64(st.Commits), "commits")
}

func BenchmarkApplyBatched(b *testing.B) {
	for _, be := range backends() {
		for _, size := range []int{100, 1000, 10000} {
			b.Run(fmt.Sprintf("%s/batch=%d", be.name, size), func(b *testing.B) {
				// Only the size cuts batches here.
				benchApply(b, be, &Options{BatchSize: size, BatchInterval: time.Hour})
			})
		}
		b.Run(be.name+"/defaults", func(b *testing.B) {
			benchApply(b, be, &Options{})
		})
	}
}

func BenchmarkApplySync(b *testing.B) {
	for _, be := range backends() {
		b.Run(be.name, func(b *testing.B) {
			benchApply(b, be, &Options{Sync: true})
		})
	}
}

// benchLedger applies b.N lines shaped like bench's ledger processor: each
// adds to one of 100 balances, to a count and to a total, through a
// function made once (no closure per line), no output. The time runs until
// a final Flush made everything durable.
func benchLedger(b *testing.B, be backend, o *Options) {
	o.Logger = quietLogger()
	o.Unbound = true // it flushes itself, at the end
	var co commitTimes
	o.Observer = &co
	s, err := be.open(b.TempDir(), o)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ns := s.Namespace("ledger")
	ctx := context.Background()
	keys := make([][]byte, 100)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "account-holder-%05d", i)
	}
	var n int
	fn := ledgerLine(keys, &n)
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		n++
		if _, err := ns.Apply(ctx, del("f", 1, n), fn); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(n), "cpu-ns/line")
	if co.n.Load() > 0 {
		b.ReportMetric(float64(co.ns.Load())/float64(co.n.Load())/1e3, "µs/commit")
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "lines/s")
	b.ReportMetric(float64(s.Stats().Commits), "commits")
	// Lines that waited for a full batch's predecessor to commit: 0 when
	// staging is the bound, about one a commit when committing is.
	b.ReportMetric(float64(s.Stats().BackPressure), "waits")
}

// ledgerLine returns benchLedger's function: line *n adds *n to one of
// the balances keys, 1 to a count and *n to a total.
func ledgerLine(keys [][]byte, n *int) func(*Tx) error {
	applied, total := []byte("applied"), []byte("total")
	return func(tx *Tx) error {
		if _, err := tx.Bucket("balances").AddInt64(keys[(*n*7919)%len(keys)], int64(*n)); err != nil {
			return err
		}
		if _, err := tx.AddInt64(applied, 1); err != nil {
			return err
		}
		_, err := tx.AddInt64(total, int64(*n))
		return err
	}
}

// commitTimes adds up the time of the commits.
type commitTimes struct{ n, ns atomic.Int64 }

func (c *commitTimes) ObserveCommit(_ int, d time.Duration) {
	c.n.Add(1)
	c.ns.Add(int64(d))
}

// cpuTime returns the process's CPU time (user and system, all threads)
// in nanoseconds: less disturbed than the wall time by other processes.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func BenchmarkApplyLedger(b *testing.B) {
	for _, be := range backends() {
		for _, size := range []int{100, 1000, 10000} {
			b.Run(fmt.Sprintf("%s/batch=%d", be.name, size), func(b *testing.B) {
				benchLedger(b, be, &Options{BatchSize: size, BatchInterval: time.Hour})
			})
		}
	}
}

// openFormat opens a new store in dir of format 2 (values with checksums)
// or, sums false, of format 1 (none): the store is made, its version set
// back, and opened again.
func openFormat(b *testing.B, be backend, dir string, o *Options, sums bool) Store {
	o.Logger = quietLogger()
	o.Unbound = true
	if !sums {
		// A store of format 1 keeps its keys as before format 4.
		o.hooks = &hooks{boltFormat3: true}
	}
	s, err := be.open(dir, o)
	if err != nil {
		b.Fatal(err)
	}
	if !sums {
		if err := s.(*nsStore).c.rawEngine().commit([]write{{key: []byte{tagVersion}, val: []byte(formatV1)}}); err != nil {
			b.Fatal(err)
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		if s, err = be.open(dir, o); err != nil {
			b.Fatal(err)
		}
	}
	return s
}

// BenchmarkChecksum measures what the value checksums cost, with and
// without them in the same run: Apply of ledger lines over 10,000
// accounts, each line reading its balance from the backend (the store is
// reopened after they are made, so no batch caches them) and adding to
// it; and Get of those balances from the backend in a View.
func BenchmarkChecksum(b *testing.B) {
	const accounts = 10000
	keys := make([][]byte, accounts)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "account-holder-%05d", i)
	}
	prepare := func(b *testing.B, be backend, sums bool) Store {
		dir := b.TempDir()
		s := openFormat(b, be, dir, &Options{}, sums)
		ctx := context.Background()
		for i, k := range keys {
			if _, err := s.Apply(ctx, del("f", 1, i+1), func(tx *Tx) error {
				return tx.Bucket("balances").PutInt64(k, 1)
			}); err != nil {
				b.Fatal(err)
			}
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		s, err := be.open(dir, &Options{Logger: quietLogger(), Unbound: true})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		return s
	}
	for _, be := range backends() {
		if be.remote {
			continue
		}
		for _, sums := range []bool{false, true} {
			name := fmt.Sprintf("%s/sums=%v", be.name, sums)
			b.Run(name+"/apply", func(b *testing.B) {
				s := prepare(b, be, sums)
				ctx := context.Background()
				n := accounts
				fn := func(tx *Tx) error {
					_, err := tx.Bucket("balances").AddInt64(keys[(n*7919)%accounts], 1)
					return err
				}
				b.ReportAllocs()
				cpu0 := cpuTime()
				for b.Loop() {
					n++
					if _, err := s.Apply(ctx, del("f", 1, n), fn); err != nil {
						b.Fatal(err)
					}
				}
				if err := s.Flush(ctx); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/line")
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lines/s")
			})
			b.Run(name+"/get", func(b *testing.B) {
				s := prepare(b, be, sums)
				n := 0
				b.ReportAllocs()
				err := s.View(func(tx *Tx) error {
					bk := tx.Bucket("balances")
					for b.Loop() {
						n++
						if _, err := bk.GetInt64(keys[(n*7919)%accounts]); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}

// BenchmarkOpenVerify measures the check of a bbolt store's file at open
// (see Options.VerifyMaxBytes) for stores of 10,000 and 1,000,000 values
// (TIDEMARK_BENCH_KEYS=N adds a store of N): an open without the check, an
// open that checks the file before it returns, and one that checks it in
// the background: how long Open takes, and how long until the first commit
// (which waits for the check) is durable.
func BenchmarkOpenVerify(b *testing.B) {
	sizes := []int{10000, 1000000}
	if n, err := strconv.Atoi(os.Getenv("TIDEMARK_BENCH_KEYS")); err == nil {
		sizes = append(sizes, n)
	}
	for _, n := range sizes {
		dir := b.TempDir()
		s := openFormat(b, backend{name: Bolt, open: OpenBolt}, dir, &Options{}, true)
		c := s.(*nsStore).c
		for i := 0; i < n; i += 50000 {
			ws := make([]write, 0, 50000)
			for j := i; j < min(n, i+50000); j++ {
				ws = append(ws, write{key: append(dataPrefix("ledger", "balances"), fmt.Sprintf("account-holder-%08d", j)...), val: encodeInt64(int64(j))})
			}
			if err := c.eng.commit(ws); err != nil {
				b.Fatal(err)
			}
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		fi, err := os.Stat(filepath.Join(dir, boltFile))
		if err != nil {
			b.Fatal(err)
		}
		line := 0
		for _, m := range []struct {
			name        string
			max         int64
			firstCommit bool
		}{
			{"check=none", -1, false},
			{"check=at-open", math.MaxInt64, false},
			{"check=background/open", 1, false},
			{"check=none/first-commit", -1, true},
			{"check=background/first-commit", 1, true},
		} {
			b.Run(fmt.Sprintf("values=%d/%s", n, m.name), func(b *testing.B) {
				for b.Loop() {
					s, err := OpenBolt(dir, &Options{Logger: quietLogger(), Unbound: true, VerifyMaxBytes: m.max})
					if err != nil {
						b.Fatal(err)
					}
					if m.firstCommit {
						line++
						if _, err := s.Apply(context.Background(), del("bench", 1, line), func(tx *Tx) error {
							return tx.Bucket("balances").PutInt64([]byte("account-holder-00000000"), int64(line))
						}); err != nil {
							b.Fatal(err)
						}
						if err := s.Flush(context.Background()); err != nil {
							b.Fatal(err)
						}
					}
					if err := s.Close(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(fi.Size())/(1<<20), "file-MiB")
			})
		}
	}
}
