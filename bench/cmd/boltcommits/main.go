// Command boltcommits measures bbolt alone, without tidemark: the same
// random keys of a bbolt file rewritten in commits of several sizes. It
// says what a save of a given number of keys costs the backend itself, so
// that a ledger row can be read against it: at 1,000,000 accounts and
// more the keys of a save are spread over the tree, each changes a page
// of its own, and bbolt holds about 10 KB of heap for each page a commit
// changes (its node of the page and the buffer the page is written
// from); the number of keys a save may take is then bounded by memory,
// and the time of a run by how many commits it makes (each writes the
// branch pages above its leaves again, and syncs twice).
//
// For each size it copies the file into a temporary folder (the file
// given is only read), opens the copy as tidemark opens a bbolt store
// (its default options, a first mapping of 1 GiB), picks -keys keys of the
// bucket holding the most keys (every n-th in order, shuffled), and
// rewrites them, each with a value of the length it had, in commits of
// that many keys, sorted within each commit as tidemark writes them. It
// prints, for each size, the commits, the wall and CPU time, the pages
// bbolt wrote, the collections of the Go runtime and the peak anonymous
// memory of the process (sampled every 10 ms).
//
// Usage, on a store a ledger row set up (benchtable -setups DIR):
//
//	go run ./bench/cmd/boltcommits -db DIR/ledger-bbolt-10000000-…/tidemark/state.bolt -keys 100000 -sizes 2942,10000
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tidemark-go/tidemark/bench"
	bolt "go.etcd.io/bbolt"
)

func main() {
	db := flag.String("db", "", "the bbolt `file` (only read: each size runs on a copy)")
	keys := flag.Int("keys", 100_000, "how many keys each size rewrites")
	sizes := flag.String("sizes", "2942,10000", "the keys of a commit, comma-separated")
	seed := flag.Uint64("seed", 1, "the seed of the keys' order")
	flag.Parse()
	if *db == "" {
		fmt.Fprintln(os.Stderr, "boltcommits: -db is required: the bbolt file to copy and rewrite")
		os.Exit(2)
	}
	var per []int
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "boltcommits: -sizes %q: %q is not a number of keys above 0\n", *sizes, s)
			os.Exit(2)
		}
		per = append(per, n)
	}
	for _, n := range per {
		m, err := measure(*db, *keys, n, *seed)
		if err != nil {
			fmt.Fprintln(os.Stderr, "boltcommits:", err)
			os.Exit(1)
		}
		fmt.Println(m)
	}
}

// measurement is one size's run.
type measurement struct {
	keys, per, commits int
	wall, cpu          time.Duration
	pages              int64 // pages bbolt wrote
	gcs                uint32
	anonKiB            int64 // peak anonymous memory of the process
}

func (m measurement) String() string {
	return fmt.Sprintf("commits of %d keys: %d keys in %d commits, %.2f s (CPU %.2f s), %d pages written, %d collections, peak anonymous %.1f MiB",
		m.per, m.keys, m.commits, m.wall.Seconds(), m.cpu.Seconds(), m.pages, m.gcs, float64(m.anonKiB)/1024)
}

// measure rewrites keys keys of a copy of the bbolt file at path in
// commits of per keys.
func measure(path string, keys, per int, seed uint64) (measurement, error) {
	dir, err := os.MkdirTemp("", "boltcommits-")
	if err != nil {
		return measurement{}, err
	}
	defer os.RemoveAll(dir)
	cp := filepath.Join(dir, "copy.bolt")
	if err := copyFile(path, cp); err != nil {
		return measurement{}, fmt.Errorf("copy %s: %w", path, err)
	}
	db, err := bolt.Open(cp, 0o600, &bolt.Options{Timeout: time.Second, InitialMmapSize: 1 << 30})
	if err != nil {
		return measurement{}, fmt.Errorf("open a copy of %s: %w", path, err)
	}
	defer db.Close()
	bucket, picked, err := pick(db, keys, seed)
	if err != nil {
		return measurement{}, fmt.Errorf("%s: %w", path, err)
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var peak int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			anon, _ := bench.RSSParts()
			peak = max(peak, anon)
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	m := measurement{keys: len(picked), per: per}
	st0 := db.Stats()
	t0, c0 := time.Now(), cpuTime()
	for off := 0; off < len(picked); off += per {
		batch := slices.Clone(picked[off:min(off+per, len(picked))])
		slices.SortFunc(batch, func(a, b kv) int { return bytes.Compare(a.k, b.k) })
		err := db.Update(func(tx *bolt.Tx) error {
			b := lookup(tx, bucket)
			for _, x := range batch {
				if err := b.Put(x.k, x.v); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			close(stop)
			wg.Wait()
			return m, fmt.Errorf("commit %d: %w", m.commits+1, err)
		}
		m.commits++
	}
	m.wall, m.cpu = time.Since(t0), cpuTime()-c0
	close(stop)
	wg.Wait()
	st1 := db.Stats()
	m.pages = st1.TxStats.GetWrite() - st0.TxStats.GetWrite()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	m.gcs, m.anonKiB = after.NumGC-before.NumGC, peak
	return m, nil
}

// kv is a key to rewrite and its new value.
type kv struct{ k, v []byte }

// pick returns the path of the bucket of db holding the most keys and
// keys of its keys (every n-th, shuffled), each with a new value of the
// length of its own.
func pick(db *bolt.DB, keys int, seed uint64) ([][]byte, []kv, error) {
	var best [][]byte
	var bestN int
	var walk func(b *bolt.Bucket, at [][]byte)
	walk = func(b *bolt.Bucket, at [][]byte) {
		n := 0
		_ = b.ForEach(func(k, v []byte) error {
			if v == nil {
				walk(b.Bucket(k), append(slices.Clone(at), slices.Clone(k)))
			} else {
				n++
			}
			return nil
		})
		if n > bestN {
			best, bestN = at, n
		}
	}
	_ = db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			walk(b, [][]byte{slices.Clone(name)})
			return nil
		})
	})
	if best == nil {
		return nil, nil, errors.New("no bucket")
	}
	var out []kv
	err := db.View(func(tx *bolt.Tx) error {
		b := lookup(tx, best)
		n := 0
		every := max(1, bestN/keys)
		return b.ForEach(func(k, v []byte) error {
			if v != nil && n%every == 0 && len(out) < keys {
				out = append(out, kv{k: slices.Clone(k), v: bytes.Repeat([]byte{0x5a}, len(v))})
			}
			n++
			return nil
		})
	})
	if err != nil {
		return nil, nil, err
	}
	if len(out) < keys {
		return nil, nil, fmt.Errorf("its largest bucket holds %d keys, fewer than the %d asked (-keys)", len(out), keys)
	}
	rand.New(rand.NewPCG(seed, 0)).Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return best, out, nil
}

// lookup returns the bucket at path.
func lookup(tx *bolt.Tx, path [][]byte) *bolt.Bucket {
	b := tx.Bucket(path[0])
	for _, p := range path[1:] {
		b = b.Bucket(p)
	}
	return b
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		return errors.Join(err, out.Close())
	}
	// Synced: the first size does not pay for the copy's writes.
	return errors.Join(out.Sync(), out.Close())
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
