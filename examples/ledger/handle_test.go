package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/state"
)

// handleLedger returns a ledger on a new store of backend in a temporary
// folder, as Start leaves it (its outputs declared), and the store. The
// store is unbound: these tests hand Handle their own deliveries.
func handleLedger(tb testing.TB, backend string) (*ledger, state.Store) {
	tb.Helper()
	st, err := state.Open(backend+":"+filepath.Join(tb.TempDir(), "data"), &state.Options{Unbound: true, Logger: discardLogger()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	for _, name := range []string{outputFile, rejectsFile} {
		if _, err := st.Output(name); err != nil {
			tb.Fatal(err)
		}
	}
	return &ledger{st: st.Namespace(namespace), dedupe: true}, st
}

// ledgerLines returns n generated lines of accounts accounts, without
// their newlines.
func ledgerLines(tb testing.TB, n, accounts int) [][]byte {
	tb.Helper()
	var b bytes.Buffer
	if err := Gen(&b, GenOptions{Lines: n, Accounts: accounts, Seed: 1}); err != nil {
		tb.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSuffix(b.Bytes(), []byte("\n")), []byte("\n"))
	if len(lines) != n {
		tb.Fatalf("generated %d lines, want %d", len(lines), n)
	}
	return lines
}

// Handle allocates nothing for a line of an account it has seen, once the
// store's batch holds the account: parsing, the Apply (no closure per
// line), the balance, counters and output line staged in the store. The
// lines are counted and the state checked, so that a Handle that did
// nothing cannot pass.
func TestHandleAllocatesNothingPerLine(t *testing.T) {
	for _, backend := range []string{state.Bolt, state.Pebble} {
		t.Run(backend, func(t *testing.T) {
			l, st := handleLedger(t, backend)
			lines := ledgerLines(t, 2000, 20)
			ctx := context.Background()
			pos, i := int64(0), 0
			handle := func() {
				line := lines[i%len(lines)]
				i++
				pos += int64(len(line)) + 1
				if err := l.Handle(ctx, tidemark.Delivery{Feed: feedName, Epoch: 1, Position: pos}, line); err != nil {
					t.Fatal(err)
				}
			}
			for range 100 { // every account staged, the buffers grown
				handle()
			}
			// The batch is cut at BatchSize lines (10,000): 1,000 lines
			// stay in one batch.
			if a := testing.AllocsPerRun(1000, handle); a != 0 {
				t.Errorf("Handle: %.2f allocations a line, want 0", a)
			}
			if err := st.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			want := NewModel()
			for _, line := range lines[:i] {
				want.Add(line)
			}
			got, _, err := readLedger(l.st)
			if err != nil {
				t.Fatal(err)
			}
			if got.Applied != int64(i) || l.applied.Load() != uint64(i) || fmt.Sprint(got.Balances) != fmt.Sprint(want.Balances) {
				t.Fatalf("after %d lines: applied %d (counted %d), balances %v; want %v", i, got.Applied, l.applied.Load(), got.Balances, want.Balances)
			}
		})
	}
}

// BenchmarkHandle is the ledger's Handle alone, on a store, over lines of
// 20 and of 10,000 accounts: its CPU time (every thread's: the store's
// committer included) and allocations a line, without the framework
// (reading, framing, the group's loop). The wall time a line includes the
// waits for the disk.
func BenchmarkHandle(b *testing.B) {
	for _, backend := range []string{state.Bolt, state.Pebble} {
		for _, accounts := range []int{20, 10000} {
			b.Run(fmt.Sprintf("%s/accounts=%d", backend, accounts), func(b *testing.B) {
				l, st := handleLedger(b, backend)
				lines := ledgerLines(b, 100000, accounts)
				ctx := context.Background()
				var pos int64
				i := 0
				b.ReportAllocs()
				cpu0 := cpuTime()
				for b.Loop() {
					line := lines[i%len(lines)]
					i++
					pos += int64(len(line)) + 1
					if err := l.Handle(ctx, tidemark.Delivery{Feed: feedName, Epoch: 1, Position: pos}, line); err != nil {
						b.Fatal(err)
					}
				}
				if err := st.Flush(ctx); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(cpuTime()-cpu0)/float64(i), "cpu-ns/line")
			})
		}
	}
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
