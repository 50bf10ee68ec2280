package pointer

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/tidemark-go/tidemark/vfs"
)

const faultDir = "/data"

var faultPath = faultDir + "/input.csv" + Suffix

var quiet = slog.New(slog.DiscardHandler)

// switchable is an injector that can be armed and disarmed.
type switchable struct {
	mu  sync.Mutex
	inj vfs.Injector
}

func (s *switchable) set(inj vfs.Injector) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inj = inj
}

func (s *switchable) injector() vfs.Injector {
	return func(op vfs.Op, path string) error {
		s.mu.Lock()
		inj := s.inj
		s.mu.Unlock()
		if inj == nil {
			return nil
		}
		return inj(op, path)
	}
}

// loadCrashed loads the pointer from what a power loss now could leave.
func loadCrashed(t *testing.T, cfs *crashFS, seed uint64) (*crashFS, LoadResult) {
	t.Helper()
	img := cfs.crash(rand.New(rand.NewPCG(seed, 99)))
	res, err := Open(faultPath, Options{FS: img, Logger: quiet}).Load()
	if err != nil {
		t.Fatalf("Load after a crash: %v", err)
	}
	return img, res
}

// TestPointerFaults fails one operation of a Store and checks that the
// error is reported with the file and what to do, that the previous pointer
// stays readable (also after a power loss right then), and that the next
// Store retries correctly.
func TestPointerFaults(t *testing.T) {
	legacy := LoadResult{Legacy: true, Record: Record{Position: 77}}
	tests := []struct {
		name    string
		inPlace bool // the file exists in this format; else it is a legacy file
		op      vfs.Op
		tmp     bool // the operation is on the temporary file
		err     error
	}{
		{"in place: write", true, vfs.OpWrite, false, nil},
		{"in place: write, disk full", true, vfs.OpWrite, false, vfs.ErrNoSpace},
		{"in place: datasync", true, vfs.OpSync, false, nil},
		{"in place: datasync, disk full", true, vfs.OpSync, false, vfs.ErrNoSpace},
		{"in place: open", true, vfs.OpOpen, false, nil},
		{"create: open of the pointer file", false, vfs.OpOpen, false, nil},
		{"create: create temp", false, vfs.OpOpen, true, nil},
		{"create: write temp, disk full", false, vfs.OpWrite, true, vfs.ErrNoSpace},
		{"create: sync temp", false, vfs.OpSync, true, nil},
		{"create: rename", false, vfs.OpRename, false, nil},
		{"create: sync directory", false, vfs.OpSyncDir, false, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfs := newCrashFS()
			sw := &switchable{}
			pf := Open(faultPath, Options{FS: vfs.Inject(cfs, sw.injector()), Logger: quiet})
			defer pf.Close()
			p2, p3, p4, p5 := testPointer(7, 2), testPointer(7, 3), testPointer(7, 4), testPointer(7, 5)
			prev := LoadResult{Found: true, Record: p2}
			if tc.inPlace {
				for _, p := range []Record{testPointer(7, 1), p2} {
					if err := pf.Store(p); err != nil {
						t.Fatal(err)
					}
				}
				if tc.op == vfs.OpOpen {
					// Reopen, so that the Store opens the file.
					pf.Close()
					pf = Open(faultPath, Options{FS: vfs.Inject(cfs, sw.injector()), Logger: quiet})
				}
			} else {
				cfs.put(faultPath, legacyFile(77))
				cfs.SyncDir(faultDir)
				prev = legacy
			}
			target := faultPath
			if tc.tmp {
				target = faultPath + TempSuffix
			}
			if tc.op == vfs.OpSyncDir {
				target = faultDir
			}
			c := &vfs.Counter{Match: func(op vfs.Op, p string) bool { return op == tc.op && p == target }, FailAt: 1, Err: tc.err}
			sw.set(c.Injector())
			err := pf.Store(p3)
			sw.set(nil)
			if c.Count() == 0 {
				t.Fatalf("the Store did not reach the %s of %s", tc.op, target)
			}
			if err == nil {
				t.Fatalf("Store with a failing %s returned nil", tc.op)
			}
			for _, want := range []string{faultPath, "next commit retries"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			wantErr := tc.err
			if wantErr == nil {
				wantErr = syscall.EIO
			}
			if !errors.Is(err, wantErr) {
				t.Errorf("error %q does not wrap %v", err, wantErr)
			}
			same := func(res LoadResult, want LoadResult) bool {
				return res.Found == want.Found && res.Legacy == want.Legacy && res.Record == want.Record
			}
			// The process still reads the previous pointer, or the new one
			// when the failure came after the write.
			res, lerr := Open(faultPath, Options{FS: cfs, Logger: quiet}).Load()
			if lerr != nil || !(same(res, prev) || same(res, LoadResult{Found: true, Record: p3})) {
				t.Fatalf("after the failure Load = %+v, %v; want %+v or p3", res, lerr, prev)
			}
			// A power loss right now leaves the previous pointer or the new
			// one, never nothing.
			for seed := range uint64(40) {
				if _, res := loadCrashed(t, cfs, seed); !(same(res, prev) || same(res, LoadResult{Found: true, Record: p3})) {
					t.Fatalf("crash after the failure (seed %d): Load = %+v; want %+v or p3", seed, res, prev)
				}
			}
			// The next Stores succeed and are durable.
			for _, p := range []Record{p4, p5} {
				if err := pf.Store(p); err != nil {
					t.Fatalf("Store after the failure: %v", err)
				}
				for seed := range uint64(20) {
					if _, res := loadCrashed(t, cfs, seed); !res.Found || res.Record != p {
						t.Fatalf("crash after a successful retry (seed %d): Load = %+v; want %+v", seed, res, p)
					}
				}
			}
		})
	}
}

// TestPointerRepeatedSyncFailures fails every Datasync for a while: the
// slot of the last durable record is never written, whatever the page cache
// shows.
func TestPointerRepeatedSyncFailures(t *testing.T) {
	cfs := newCrashFS()
	sw := &switchable{}
	pf := Open(faultPath, Options{FS: vfs.Inject(cfs, sw.injector()), Logger: quiet})
	defer pf.Close()
	if err := pf.Store(testPointer(1, 1)); err != nil {
		t.Fatal(err)
	}
	if err := pf.Store(testPointer(1, 2)); err != nil {
		t.Fatal(err)
	}
	durable := testPointer(1, 2)
	sw.set((&vfs.Counter{Match: func(op vfs.Op, _ string) bool { return op == vfs.OpSync }, FailAt: 1, Sticky: true}).Injector())
	for i := 3; i < 10; i++ {
		if err := pf.Store(testPointer(1, i)); err == nil {
			t.Fatal("Store with failing syncs returned nil")
		}
		for seed := range uint64(20) {
			_, res := loadCrashed(t, cfs, seed+uint64(i)*100)
			if !res.Found || res.Record.Position < durable.Position || res.Record.Position > testPointer(1, i).Position {
				t.Fatalf("store %d with failing syncs, crash (seed %d): Load = %+v; want between %d and %d",
					i, seed, res, durable.Position, testPointer(1, i).Position)
			}
		}
	}
	sw.set(nil)
	if err := pf.Store(testPointer(1, 10)); err != nil {
		t.Fatal(err)
	}
	if _, res := loadCrashed(t, cfs, 1); res.Record != testPointer(1, 10) {
		t.Fatalf("after the syncs recovered: Load = %+v", res)
	}
}

// step is one operation of a pointer workload.
type step struct {
	store  *Record // Store this; nil with sync set means Sync
	behind bool    // the Store is behind and must be ignored
	sync   bool
	load   bool
}

func pointerWorkload() []step {
	var steps []step
	add := func(p Record) { steps = append(steps, step{store: &p}) }
	steps = append(steps, step{load: true})
	add(testPointer(100, 1))
	add(testPointer(100, 2))
	steps = append(steps, step{store: &Record{Epoch: 100, Position: 10}, behind: true})
	steps = append(steps, step{sync: true})
	add(testPointer(100, 3))
	add(testPointer(200, 0)) // new epoch
	add(testPointer(200, 1))
	steps = append(steps, step{sync: true})
	add(testPointer(200, 2))
	add(testPointer(200, 3))
	steps = append(steps, step{sync: true})
	add(testPointer(200, 4))
	return steps
}

// errCrash fails every operation after the simulated power loss.
var errCrash = errors.New("power lost")

// TestPointerCrashAtEveryOperation runs a workload, loses power after
// operation m, for every m, optionally after failing operation n once, and
// checks that the pointer found afterwards is the last durable one or one
// stored after it, never an older one, never none, and never one not
// stored (pebble's crash-at-every-write loop).
func TestPointerCrashAtEveryOperation(t *testing.T) {
	for _, policy := range []SyncPolicy{SyncEveryCommit, SyncInterval, SyncNever} {
		for _, start := range []string{"none", "legacy"} {
			t.Run(fmt.Sprintf("%v/%s", policy, start), func(t *testing.T) {
				total := runCrashWorkload(t, policy, start, -1, -1)
				t.Logf("%d operations", total)
				if total < 10 {
					t.Fatalf("the workload has only %d operations", total)
				}
				// Every fault point under the default policy; a sample under
				// the others, to keep the test fast under the race detector.
				stride := 1
				if policy != SyncEveryCommit {
					stride = 4
				}
				for n := 0; n <= total; n += stride { // n = 0: no fault
					for m := 1; m <= total; m++ {
						runCrashWorkload(t, policy, start, m, n)
					}
				}
			})
		}
	}
}

// runCrashWorkload runs the workload, failing operation failAt once and
// losing power after operation crashAt (-1: never), then checks the
// invariant. It returns how many operations the workload did.
func runCrashWorkload(t *testing.T, policy SyncPolicy, start string, crashAt, failAt int) int {
	t.Helper()
	cfs := newCrashFS()
	if start == "legacy" {
		cfs.put(faultPath, legacyFile(55))
		cfs.SyncDir(faultDir)
	}
	ops := 0
	var mu sync.Mutex
	crashed := false
	inj := func(op vfs.Op, path string) error {
		mu.Lock()
		defer mu.Unlock()
		if crashed {
			return errCrash
		}
		ops++
		if ops == failAt {
			return vfs.ErrInjected
		}
		if ops == crashAt {
			crashed = true // this operation and every later one never happen
			return errCrash
		}
		return nil
	}
	// A long interval: only Sync steps (and creation) make writes durable.
	pf := Open(faultPath, Options{FS: vfs.Inject(cfs, inj), Sync: policy, SyncInterval: 1 << 62, Logger: quiet})
	var attempts []Record
	var ignored []Record
	durable := -1 // index in attempts of the last durable pointer
	indexOf := func(p Record) int {
		for i := len(attempts) - 1; i >= 0; i-- {
			if attempts[i] == p {
				return i
			}
		}
		return -1
	}
	for _, s := range pointerWorkload() {
		var err error
		switch {
		case s.load:
			_, err = pf.Load()
		case s.sync:
			err = pf.Sync()
		default:
			if s.behind {
				ignored = append(ignored, *s.store)
			} else {
				attempts = append(attempts, *s.store)
			}
			err = pf.Store(*s.store)
		}
		if err == nil && !pf.pending && pf.haveLast && policy != SyncNever {
			durable = max(durable, indexOf(pf.last))
		}
	}
	if crashAt < 0 {
		pf.Close()
		return ops
	}
	for seed := range uint64(2) {
		img, res := loadCrashed(t, cfs, seed)
		where := fmt.Sprintf("crash at op %d, fault at op %d, seed %d", crashAt, failAt, seed)
		i := -1
		for _, p := range ignored {
			if res.Found && res.Record == p {
				t.Fatalf("%s: Load = %+v, a Store that was behind and ignored", where, res)
			}
		}
		if res.Found {
			i = indexOf(res.Record)
			if i < 0 {
				t.Fatalf("%s: Load = %+v, a pointer never stored", where, res)
			}
		}
		if durable >= 0 && i < durable {
			t.Fatalf("%s: Load = %+v; want %+v or a later one", where, res, attempts[durable])
		}
		if res.Legacy && (start != "legacy" || res.Record.Position != 55) {
			t.Fatalf("%s: Load = %+v", where, res)
		}
		if policy != SyncNever && !res.Found && !res.Legacy && !res.Missing && start == "none" && durable >= 0 {
			t.Fatalf("%s: no pointer: %s", where, res.Reason)
		}
		if seed > 0 {
			continue
		}
		// The restarted process can go on.
		pf2 := Open(faultPath, Options{FS: img, Sync: policy, Logger: quiet})
		next := testPointer(300, 9)
		if err := pf2.Store(next); err != nil {
			t.Fatalf("%s: Store after restart: %v", where, err)
		}
		if res, err := Open(faultPath, Options{FS: img, Logger: quiet}).Load(); err != nil || res.Record != next {
			t.Fatalf("%s: Load after restart and Store = %+v, %v", where, res, err)
		}
		pf2.Close()
	}
	pf.Close()
	return ops
}

// TestPointerSimulation runs random workloads with random failures and
// several power losses, restarting on what each loss left, and checks after
// every restart that the pointer is the last durable one or one stored after
// it (bbolt's simulation test, against a model of what must survive).
func TestPointerSimulation(t *testing.T) {
	for _, policy := range []SyncPolicy{SyncEveryCommit, SyncInterval} {
		t.Run(policy.String(), func(t *testing.T) {
			for run := range uint64(40) {
				simulatePointer(t, policy, rand.New(rand.NewPCG(run, uint64(policy))))
			}
		})
	}
}

func simulatePointer(t *testing.T, policy SyncPolicy, rng *rand.Rand) {
	t.Helper()
	cfs := newCrashFS()
	var failNext bool
	inj := func(op vfs.Op, _ string) error {
		if failNext && (op == vfs.OpSync || rng.IntN(3) == 0) {
			failNext = false
			return vfs.ErrNoSpace
		}
		return nil
	}
	open := func() *File {
		return Open(faultPath, Options{FS: vfs.Inject(cfs, inj), Sync: policy, SyncInterval: 1 << 62, Logger: quiet})
	}
	pf := open()
	var attempts []Record
	durable := -1
	epoch, pos := uint64(1), int64(0)
	for op := range 60 {
		switch r := rng.IntN(16); {
		case r <= 1: // power loss and restart
			pf.Close()
			img := cfs.crash(rng)
			res, err := Open(faultPath, Options{FS: img, Logger: quiet}).Load()
			if err != nil {
				t.Fatal(err)
			}
			i := -1
			for j := len(attempts) - 1; j >= 0 && res.Found; j-- {
				if attempts[j] == res.Record {
					i = j
					break
				}
			}
			if (res.Found && i < 0) || i < durable {
				t.Fatalf("op %d: after a power loss Load = %+v; durable was %d of %v", op, res, durable, attempts)
			}
			cfs, failNext = img, false
			pf = open()
			if _, err := pf.Load(); err != nil {
				t.Fatal(err)
			}
			// What survived is the base now: a restart resumes from it.
			attempts, durable = attempts[:i+1], i
			if res.Found {
				epoch, pos = res.Record.Epoch, res.Record.Position
			}
		case r <= 3:
			failNext = true
		case r == 4:
			if err := pf.Sync(); err == nil && !pf.pending && pf.haveLast {
				durable = max(durable, lastIndex(attempts, pf.last))
			}
		default:
			if rng.IntN(8) == 0 {
				epoch, pos = epoch+1, 0
			} else {
				pos += int64(1 + rng.IntN(200))
			}
			p := Record{Epoch: epoch, Position: pos, TailHash: rng.Uint64()}
			attempts = append(attempts, p)
			if err := pf.Store(p); err == nil && !pf.pending {
				durable = max(durable, lastIndex(attempts, pf.last))
			}
		}
	}
	pf.Close()
}

func lastIndex(ps []Record, p Record) int {
	for i := len(ps) - 1; i >= 0; i-- {
		if ps[i] == p {
			return i
		}
	}
	return -1
}
