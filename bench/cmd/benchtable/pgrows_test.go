package main

import (
	"os"
	"testing"
	"time"
)

// readProcStat reads this process's parent and a CPU time that grows as
// it works: what row 20 sums over the PostgreSQL server's processes.
func TestReadProcStat(t *testing.T) {
	st, ok := readProcStat(os.Getpid())
	if !ok || st.ppid != os.Getppid() {
		t.Fatalf("readProcStat(self) = %+v, %v; want parent %d", st, ok, os.Getppid())
	}
	x := 0
	for start := time.Now(); time.Since(start) < 50*time.Millisecond; {
		x++
	}
	again, _ := readProcStat(os.Getpid())
	if again.cpu <= st.cpu {
		t.Fatalf("CPU went from %.2f s to %.2f s over 50 ms of work (%d loops)", st.cpu, again.cpu, x)
	}
	if _, ok := readProcStat(-1); ok {
		t.Fatal("readProcStat(-1) found a process")
	}
}
