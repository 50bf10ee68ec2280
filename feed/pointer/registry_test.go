package pointer

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/vfs"
)

var registryPath = faultDir + "/orders" + RegistrySuffix

// testEntry is an entry of epoch at position i (a line end of 10-byte
// lines), with a fingerprint and tail hash.
func testEntry(epoch uint64, i int, finished bool) Entry {
	p := testPointer(epoch, i)
	return Entry{Record: p, Finished: finished, Stamp: time.Unix(1_764_400_000, int64(i))}
}

// registryOp is one step of a registry workload.
type registryOp struct {
	key    string
	e      Entry
	forget bool
}

// registryWorkload is a sequence of stores and forgets over a few keys,
// with new epochs, finished entries and keys forgotten and made again.
func registryWorkload(rng *rand.Rand, n int) []registryOp {
	keys := []string{"/logs/a.log", "/logs/b.log", "/logs/c.log", "/logs/very/long/" + strings.Repeat("d", 300) + ".log"}
	type st struct {
		epoch uint64
		pos   int
	}
	cur := map[string]st{}
	var ops []registryOp
	for range n {
		k := keys[rng.IntN(len(keys))]
		s := cur[k]
		switch r := rng.IntN(10); {
		case r == 0 && s.epoch != 0:
			ops = append(ops, registryOp{key: k, forget: true})
			delete(cur, k)
			continue
		case r == 1 || s.epoch == 0:
			s = st{epoch: s.epoch + 100, pos: 0}
		default:
			s.pos += 1 + rng.IntN(5)
		}
		cur[k] = s
		ops = append(ops, registryOp{key: k, e: testEntry(s.epoch, s.pos, rng.IntN(8) == 0)})
	}
	return ops
}

// apply returns m after op.
func (op registryOp) apply(m map[string]Entry) map[string]Entry {
	m = maps.Clone(m)
	if op.forget {
		delete(m, op.key)
	} else {
		m[op.key] = op.e
	}
	return m
}

func sameEntries(a, b map[string]Entry) bool {
	return maps.EqualFunc(a, b, func(x, y Entry) bool {
		return x.Record == y.Record && x.Finished == y.Finished && x.Stamp.Equal(y.Stamp)
	})
}

// TestRegistryRoundTrip: what is stored is what a new registry loads, and
// the forward-only rule holds within an epoch.
func TestRegistryRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "set"+RegistrySuffix)
	r := OpenRegistry(path, Options{Logger: quiet})
	if err := r.Lock(); err != nil {
		t.Fatal(err)
	}
	res, err := r.Load()
	if err != nil || !res.Empty {
		t.Fatalf("a new registry: %+v %v", res, err)
	}
	want := map[string]Entry{}
	for _, op := range registryWorkload(rand.New(rand.NewPCG(1, 2)), 500) {
		var err error
		if op.forget {
			err = r.Forget(op.key)
		} else {
			err = r.Store(op.key, op.e)
		}
		if err != nil {
			t.Fatal(err)
		}
		want = op.apply(want)
	}
	// Behind in the same epoch: ignored.
	for k, e := range want {
		back := e
		back.Position -= 10
		if back.Position >= int64(back.TailLen) {
			if err := r.Store(k, back); err != nil {
				t.Fatal(err)
			}
		}
		break
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	res, err = OpenRegistry(path, Options{Logger: quiet}).Load()
	if err != nil || res.Damaged {
		t.Fatalf("load: %+v %v", res, err)
	}
	if !sameEntries(res.Entries, want) {
		t.Fatalf("loaded %v\nwant %v", res.Entries, want)
	}
	// Compaction kept the file near its live size.
	fi, _ := os.Stat(path)
	if max := 4*snapshotSize(want) + compactMin + MaxRegistryRecord; fi.Size() > max {
		t.Fatalf("registry of %d bytes for %d entries", fi.Size(), len(want))
	}
}

// TestRegistryTornAtEveryByte: a registry file cut at every byte (a crash
// during an append) loads the entries of every record wholly before the
// cut, never one of a record after it, and says it was damaged (but for a
// cut at a record boundary). The next write rewrites the file whole.
func TestRegistryTornAtEveryByte(t *testing.T) {
	ops := registryWorkload(rand.New(rand.NewPCG(3, 4)), 60)
	var data []byte
	data = appendHeader(data)
	ends := []int{len(data)}
	states := []map[string]Entry{{}}
	for _, op := range ops {
		data = appendEntry(data, op.key, op.e, op.forget)
		ends = append(ends, len(data))
		states = append(states, op.apply(states[len(states)-1]))
	}
	k := 0
	for cut := 0; cut <= len(data); cut++ {
		for k+1 < len(ends) && ends[k+1] <= cut {
			k++
		}
		res, end := ParseRegistry(data[:cut])
		want := states[k]
		if cut < RegistryHeaderSize {
			want = map[string]Entry{}
		}
		if !sameEntries(res.Entries, want) {
			t.Fatalf("cut at %d: %d entries, want the %d of the first %d records", cut, len(res.Entries), len(want), k)
		}
		atBoundary := cut == ends[k] && cut >= RegistryHeaderSize
		if res.Damaged == atBoundary && cut > 0 {
			t.Fatalf("cut at %d: damaged %v (%s)", cut, res.Damaged, res.Reason)
		}
		if cut >= RegistryHeaderSize && end != int64(ends[k]) {
			t.Fatalf("cut at %d: end %d, want %d", cut, end, ends[k])
		}
	}
	// A torn file, written again: whole, its state kept.
	path := filepath.Join(t.TempDir(), "torn"+RegistrySuffix)
	cut := ends[30] + 7
	if err := os.WriteFile(path, data[:cut], 0o644); err != nil {
		t.Fatal(err)
	}
	r := OpenRegistry(path, Options{Logger: quiet})
	if err := r.Lock(); err != nil {
		t.Fatal(err)
	}
	res, err := r.Load()
	if err != nil || !res.Damaged || !strings.Contains(res.Reason, "torn") || !strings.Contains(res.Reason, path) {
		t.Fatalf("load: %+v %v", res, err)
	}
	next := testEntry(9000, 1, false)
	if err := r.Store("/logs/new.log", next); err != nil {
		t.Fatal(err)
	}
	r.Close()
	res, err = OpenRegistry(path, Options{Logger: quiet}).Load()
	want := maps.Clone(states[30])
	want["/logs/new.log"] = next
	if err != nil || res.Damaged || !sameEntries(res.Entries, want) {
		t.Fatalf("after the rewrite: %+v %v", res, err)
	}
}

// TestRegistryBitRot: a flipped bit stops the load at the record it is in:
// the entries of the records before it are loaded, no later one (a
// position only lags), and the load says where.
func TestRegistryBitRot(t *testing.T) {
	ops := registryWorkload(rand.New(rand.NewPCG(5, 6)), 40)
	data := appendHeader(nil)
	ends := []int{len(data)}
	states := []map[string]Entry{{}}
	for _, op := range ops {
		data = appendEntry(data, op.key, op.e, op.forget)
		ends = append(ends, len(data))
		states = append(states, op.apply(states[len(states)-1]))
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for range 2000 {
		b := append([]byte(nil), data...)
		i := rng.IntN(len(b))
		b[i] ^= 1 << rng.IntN(8)
		res, _ := ParseRegistry(b)
		k := 0
		for k+1 < len(ends) && ends[k+1] <= i {
			k++
		}
		if i < RegistryHeaderSize {
			if len(res.Entries) != 0 || !res.Damaged {
				t.Fatalf("bit %d of the header: %+v", i, res)
			}
			continue
		}
		if !res.Damaged || !sameEntries(res.Entries, states[k]) || !strings.Contains(res.Reason, fmt.Sprintf("offset %d", ends[k])) {
			t.Fatalf("bit flipped at %d (record %d): damaged %v, %d entries, reason %q", i, k, res.Damaged, len(res.Entries), res.Reason)
		}
	}
}

// TestRegistryCrashAtEveryOperation: a workload of stores under
// SyncEveryCommit, the power lost after operation k, for every k: what the
// disk holds then loads as the state after the last store that returned
// nil, or after the one in progress; never damage that hides an older
// durable entry, never an entry not stored.
func TestRegistryCrashAtEveryOperation(t *testing.T) {
	ops := registryWorkload(rand.New(rand.NewPCG(9, 10)), 150)
	errCrash := errors.New("power lost")
	for crashAt := 1; ; crashAt++ {
		cfs := newCrashFS()
		cfs.MkdirAll(faultDir, 0o755)
		n := 0
		var mu sync.Mutex
		crashed := false
		fsys := vfs.Inject(cfs, func(vfs.Op, string) error {
			mu.Lock()
			defer mu.Unlock()
			if crashed {
				return errCrash
			}
			if n++; n == crashAt {
				crashed = true
				return errCrash
			}
			return nil
		})
		r := OpenRegistry(registryPath, Options{FS: fsys, Logger: quiet})
		var durable, inFlight map[string]Entry
		durable = map[string]Entry{}
		done := true
		if err := r.Lock(); err == nil {
			if _, err := r.Load(); err == nil {
				for _, op := range ops {
					inFlight = op.apply(durable)
					var err error
					if op.forget {
						err = r.Forget(op.key)
					} else {
						err = r.Store(op.key, op.e)
					}
					if err != nil {
						done = false
						break
					}
					durable = inFlight
				}
			} else {
				done = false
			}
		} else {
			done = false
		}
		for seed := range uint64(4) {
			img := cfs.crash(rand.New(rand.NewPCG(uint64(crashAt), seed)))
			res, err := OpenRegistry(registryPath, Options{FS: img, Logger: quiet}).Load()
			if err != nil {
				t.Fatalf("crash at %d: load: %v", crashAt, err)
			}
			if !sameEntries(res.Entries, durable) && (inFlight == nil || !sameEntries(res.Entries, inFlight)) {
				t.Fatalf("crash at operation %d (seed %d): loaded %d entries (%s), want the %d durable ones or the %d with the store in progress",
					crashAt, seed, len(res.Entries), res.Reason, len(durable), len(inFlight))
			}
		}
		if done {
			if crashAt < 10 {
				t.Fatalf("the workload did only %d operations", crashAt)
			}
			return
		}
	}
}

// TestRegistryLocked: one writer per registry.
func TestRegistryLocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "set"+RegistrySuffix)
	a := OpenRegistry(path, Options{Logger: quiet})
	if err := a.Lock(); err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b := OpenRegistry(path, Options{Logger: quiet})
	defer b.Close()
	if err := b.Lock(); !errors.Is(err, ErrLocked) {
		t.Fatalf("second lock: %v, want ErrLocked", err)
	}
	// The lock follows the file through a rewrite.
	if _, err := a.Load(); err != nil {
		t.Fatal(err)
	}
	if err := a.Store("/x", testEntry(1, 1, false)); err != nil {
		t.Fatal(err)
	}
	c := OpenRegistry(path, Options{Logger: quiet})
	defer c.Close()
	if err := c.Lock(); !errors.Is(err, ErrLocked) {
		t.Fatalf("lock after the rewrite: %v, want ErrLocked", err)
	}
}

// FuzzParseRegistry: any bytes parse without a panic; the entries found
// are those of the valid records before end, and encoding them again
// parses to the same entries.
func FuzzParseRegistry(f *testing.F) {
	ops := registryWorkload(rand.New(rand.NewPCG(11, 12)), 12)
	data := appendHeader(nil)
	f.Add([]byte{})
	f.Add(append([]byte(nil), data...))
	for _, op := range ops {
		data = appendEntry(data, op.key, op.e, op.forget)
		f.Add(append([]byte(nil), data...))
	}
	f.Add(data[:len(data)-3])
	f.Fuzz(func(t *testing.T, b []byte) {
		res, end := ParseRegistry(b)
		if end < 0 || end > int64(len(b)) {
			t.Fatalf("end %d of %d bytes", end, len(b))
		}
		if end < int64(len(b)) && !res.Damaged && len(b) > 0 {
			t.Fatalf("bytes after the end %d of %d, not damaged", end, len(b))
		}
		again := appendHeader(nil)
		for k, e := range res.Entries {
			if e.Identity == (tidemark.Identity{}) && e.Fingerprint.Len < 0 {
				t.Fatal("impossible")
			}
			again = appendEntry(again, k, e, false)
		}
		res2, _ := ParseRegistry(again)
		if res2.Damaged || !sameEntries(res.Entries, res2.Entries) {
			t.Fatalf("entries do not survive encoding: %v vs %v", res.Entries, res2.Entries)
		}
	})
}
