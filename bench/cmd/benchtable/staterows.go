package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/bench"
	"github.com/tidemark-go/tidemark/state"
)

// The state rows (issue 14): 16, iteration of a large bucket in bounded
// memory; 17, Apply beside a reader iterating a snapshot; 18, the backup
// of a large store. Each child builds its store through the public API
// (tables of uint64 keys), then measures.

// stateSizes are the sizes of the state rows in a mode.
type stateSizes struct {
	iterKeys    int64 // row 16: keys of the bucket iterated
	readerKeys  int64 // row 17: keys the reader iterates
	applyLines  int64 // row 17: lines applied, alone and beside the reader
	backupBytes int64 // row 18: bytes of values in the store
}

func (r *runner) stateSizes() stateSizes {
	if r.cfg.short {
		// Under 60 s with the other rows: building a store of 1,000,000
		// keys took 13 s a backend at load 7.
		return stateSizes{iterKeys: 200_000, readerKeys: 50_000, applyLines: 30_000, backupBytes: 30 << 20}
	}
	return stateSizes{iterKeys: 10_000_000, readerKeys: 1_000_000, applyLines: 300_000, backupBytes: 1 << 30}
}

// stateKeep is the folder that keeps the store a state row fills (name,
// at size n, of backend be) from one run of its child to the next: in the
// -setups folder, so that a later make bench reuses it too, else in the
// work directory. The fill of row 16 (10,000,000 keys through Apply) took
// minutes a backend, and every run of the row made it again.
func (r *runner) stateKeep(name, be string, n int64) string {
	base := r.cfg.setups
	if base == "" {
		base = r.work
	}
	return filepath.Join(base, fmt.Sprintf("state-%s-%s-%d", name, be, n))
}

func (r *runner) stateRows(t *table) error {
	sz := r.stateSizes()
	backends := []string{state.Bolt, state.Pebble}
	if r.wants("16") {
		for _, be := range backends {
			x := r.measure(spec{label: "16 iterate " + be, name: "state-iter", args: []string{"-backend", be, "-ops", strconv.FormatInt(sz.iterKeys, 10), "-keep", r.stateKeep("iter", be, sz.iterKeys)}})[0]
			what := fmt.Sprintf("%s: iterate a bucket of %s keys (uint64 → uint64 table) in a snapshot, then in View: peak anonymous RSS during the loops above the process's before them", be, fmtCount(sz.iterKeys))
			if !x.ok() {
				t.add(row{id: "16", what: what, result: notMeasured(x)})
				continue
			}
			grow := max(x.maxExtra("snap_anon_growth_kib"), x.maxExtra("view_anon_growth_kib")) / 1024
			t.add(row{id: "16", what: what,
				result: fmt.Sprintf("+%.1f MiB in the snapshot, +%.1f MiB in View (before: %.1f MiB anonymous; store %.0f MB on disk; %s, %s)",
					x.maxExtra("snap_anon_growth_kib")/1024, x.maxExtra("view_anon_growth_kib")/1024, x.extra("anon_before_kib")/1024, x.extra("store_bytes")/1e6,
					fmtRateUnit(x.extra("snap_keys_per_s"), "keys/s"), fmtRateUnit(x.extra("view_keys_per_s"), "keys/s in View")),
				baseline: "64 MiB", ratio: fmtRatio(grow / 64), goal: "< 1.00", met: verdict(grow < 64), load: x.loadText()})
		}
	}
	if r.wants("17") {
		for _, be := range backends {
			x := r.measure(spec{label: "17 apply beside a reader " + be, name: "state-apply-reader",
				args: []string{"-backend", be, "-ops", strconv.FormatInt(sz.readerKeys, 10), "-lines-child", strconv.FormatInt(sz.applyLines, 10)}})[0]
			what := fmt.Sprintf("%s: Apply (a table Add per line, batched) of %s lines while another goroutine iterates %s keys on a snapshot, again and again", be, fmtCount(sz.applyLines), fmtCount(sz.readerKeys))
			if !x.ok() {
				t.add(row{id: "17", what: what, result: notMeasured(x)})
				continue
			}
			with, alone := x.extra("rate_with_reader"), x.extra("rate_alone")
			t.add(row{id: "17", what: what,
				result:   fmt.Sprintf("%s (the reader: %.1f passes, %s)", fmtRate(with), x.extra("reader_passes"), fmtRateUnit(x.extra("reader_keys_per_s"), "keys/s")),
				baseline: "the same lines alone: " + fmtRate(alone), ratio: fmtRatio(with / alone), load: x.loadText()})
		}
		t.note("17", "Row 17: on a machine of two cores the reader also takes a core from the processor and the committer: the ratio is the cost of sharing the CPU, not of waiting (the snapshot blocks neither Apply nor the commits).")
	}
	if r.wants("18") {
		for _, be := range backends {
			x := r.measure(spec{label: "18 backup " + be, name: "state-backup", args: []string{"-backend", be, "-ops", strconv.FormatInt(sz.backupBytes, 10), "-keep", r.stateKeep("backup", be, sz.backupBytes)}})[0]
			what := fmt.Sprintf("%s: Store.Backup of a store of %.0f MB of values (1 KiB each) into a new folder on the same file system", be, float64(sz.backupBytes)/1e6)
			if !x.ok() {
				t.add(row{id: "18", what: what, result: notMeasured(x)})
				continue
			}
			secs := x.extra("backup_seconds")
			t.add(row{id: "18", what: what,
				result: fmt.Sprintf("%.2f s (store %.0f MB on disk, copy %.0f MB: %.0f MB/s)", secs, x.extra("store_bytes")/1e6, x.extra("copy_bytes")/1e6, x.extra("store_bytes")/1e6/max(secs, 1e-9)),
				load:   x.loadText()})
		}
		t.note("18", "Row 18: a bbolt backup is Tx.WriteTo (every page copied); a Pebble backup is a checkpoint (the tables hard-linked where the folder is on the same file system, the WAL and the manifest copied) with the memtable flushed first, then the copy opened read-only to read the outputs' committed lengths. Either way every value copied is read once and its checksum checked (a damaged store fails its backup), which the time includes.")
	}
	return nil
}

// fillStore writes n keys (0..n-1, uint64) to bucket "big" of st, each
// with a value of valueLen bytes (the key's uint64 when 8), in lines of
// many keys each, and flushes.
func fillStore(st state.Store, n int64, valueLen int) error {
	ctx := context.Background()
	per := max(1, min(10_000, (4<<20)/int64(valueLen+8)))
	ints := state.NewTable("big", state.Uint64{}, state.Uint64{})
	blobs := state.NewTable("big", state.Uint64{}, state.Bytes{})
	val := make([]byte, valueLen)
	var pos int64
	for k := int64(0); k < n; k += per {
		pos++
		_, err := st.Apply(ctx, tidemark.Delivery{Feed: "fill", Epoch: 1, Position: pos}, func(tx *state.Tx) error {
			for i := k; i < min(n, k+per); i++ {
				var err error
				if valueLen == 8 {
					err = ints.Put(tx, uint64(i), uint64(i))
				} else {
					val[0], val[1] = byte(i), byte(i>>8)
					err = blobs.Put(tx, uint64(i), val)
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return st.Flush(ctx)
}

func openBenchStore(a childArgs, name string) (state.Store, string, error) {
	dir := filepath.Join(a.work, fmt.Sprintf("%s-%s-%d", name, a.backend, os.Getpid()))
	st, err := state.Open(a.backend+":"+dir, &state.Options{Logger: discard, Unbound: true, BatchSize: 16})
	return st, dir, err
}

// filledStore returns a store of n keys (see fillStore), closed after the
// fill and opened again with the default options: nothing of the fill is
// staged, and it batches as a processor's store does. dir is its folder.
func filledStore(a childArgs, name string, n int64) (state.Store, string, error) {
	st, dir, err := openBenchStore(a, name)
	if err != nil {
		return nil, dir, err
	}
	if err := fillStore(st, n, 8); err != nil {
		return nil, dir, errors.Join(fmt.Errorf("fill: %w", err), st.Close())
	}
	if err := st.Close(); err != nil {
		return nil, dir, err
	}
	st, err = state.Open(a.backend+":"+dir, &state.Options{Logger: discard, Unbound: true})
	return st, dir, err
}

// keptStore opens the store of keep (see runner.stateKeep) with opts,
// filling it first (fill, on a store opened for filling) when no earlier
// run completed it: the mark keep+".done" is written once the filled store
// is closed. Every run so measures a store its open found on disk, the
// first one too.
func keptStore(a childArgs, keep string, opts *state.Options, fill func(state.Store) error) (state.Store, error) {
	done := keep + ".done"
	if _, err := os.Stat(done); err != nil {
		if err := os.RemoveAll(keep); err != nil {
			return nil, err
		}
		st, err := state.Open(a.backend+":"+keep, &state.Options{Logger: discard, Unbound: true, BatchSize: 16})
		if err != nil {
			return nil, err
		}
		if err := fill(st); err != nil {
			return nil, errors.Join(fmt.Errorf("fill %s: %w", keep, err), st.Close())
		}
		if err := st.Close(); err != nil {
			return nil, err
		}
		if err := os.WriteFile(done, nil, 0o644); err != nil {
			return nil, err
		}
	}
	return state.Open(a.backend+":"+keep, opts)
}

func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// anonSampler samples the anonymous resident set of this process every
// 5 ms and keeps its peak.
type anonSampler struct {
	peak atomic.Int64
	stop chan struct{}
	wg   sync.WaitGroup
}

func startAnonSampler() *anonSampler {
	s := &anonSampler{stop: make(chan struct{})}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		tk := time.NewTicker(5 * time.Millisecond)
		defer tk.Stop()
		for {
			if anon, _ := bench.RSSParts(); anon > s.peak.Load() {
				s.peak.Store(anon)
			}
			select {
			case <-s.stop:
				return
			case <-tk.C:
			}
		}
	}()
	return s
}

func (s *anonSampler) end() int64 { close(s.stop); s.wg.Wait(); return s.peak.Load() }

// settledAnon returns the anonymous resident set after a collection that
// gives the heap back.
func settledAnon() int64 {
	runtime.GC()
	debug.FreeOSMemory()
	anon, _ := bench.RSSParts()
	return anon
}

// caseStateIter: row 16.
func caseStateIter(a childArgs) (result, error) {
	n := int64(a.ops)
	var st state.Store
	var dir string
	var err error
	if a.keep != "" {
		dir = a.keep
		st, err = keptStore(a, dir, &state.Options{Logger: discard, Unbound: true}, func(st state.Store) error { return fillStore(st, n, 8) })
	} else {
		st, dir, err = filledStore(a, "iter", n)
		defer os.RemoveAll(dir)
	}
	if err != nil {
		return result{}, err
	}
	defer st.Close()
	ints := state.NewTable("big", state.Uint64{}, state.Uint64{})
	loop := func(tx *state.Tx) (int64, error) {
		var c int64
		for k, v := range ints.All(tx) {
			if k != v || k != uint64(c) {
				return c, fmt.Errorf("key %d: %d=%d", c, k, v)
			}
			c++
		}
		if c != n {
			return c, fmt.Errorf("the loop saw %d keys of %d", c, n)
		}
		return c, tx.Err()
	}
	extra := map[string]float64{"store_bytes": float64(dirBytes(dir))}
	measure := func(name string, run func(func(*state.Tx) error) error) error {
		before := settledAnon()
		s := startAnonSampler()
		start := time.Now()
		err := run(func(tx *state.Tx) error { _, err := loop(tx); return err })
		el := time.Since(start).Seconds()
		peak := s.end()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		extra[name+"_anon_growth_kib"] = float64(max(0, peak-before))
		extra[name+"_keys_per_s"] = float64(n) / el
		if name == "snap" {
			extra["anon_before_kib"] = float64(before)
		}
		return nil
	}
	ctx := context.Background()
	start := time.Now()
	if err := measure("snap", func(fn func(*state.Tx) error) error { return st.Snapshot(ctx, fn) }); err != nil {
		return result{}, err
	}
	if err := measure("view", st.View); err != nil {
		return result{}, err
	}
	return result{Lines: 2 * n, Seconds: time.Since(start).Seconds(), Extra: extra}, nil
}

// caseStateApplyReader: row 17. a.ops keys for the reader, a.lines lines
// applied alone, then beside the reader.
func caseStateApplyReader(a childArgs) (result, error) {
	st, dir, err := filledStore(a, "reader", int64(a.ops))
	defer os.RemoveAll(dir)
	if err != nil {
		return result{}, err
	}
	defer st.Close()
	balances := state.NewTable("balances", state.Uint64{}, state.Int64{})
	ints := state.NewTable("big", state.Uint64{}, state.Uint64{})
	ctx := context.Background()
	pos := int64(0)
	apply := func() (float64, error) {
		start := time.Now()
		for i := range a.lines {
			pos++
			_, err := st.Apply(ctx, tidemark.Delivery{Feed: "lines", Epoch: 1, Position: pos}, func(tx *state.Tx) error {
				_, err := balances.Add(tx, uint64(i%10_000), 1)
				return err
			})
			if err != nil {
				return 0, err
			}
		}
		if err := st.Flush(ctx); err != nil {
			return 0, err
		}
		return float64(a.lines) / time.Since(start).Seconds(), nil
	}
	alone, err := apply()
	if err != nil {
		return result{}, err
	}
	var stop atomic.Bool
	var passes, keys atomic.Int64
	readErr := make(chan error, 1)
	readStart := time.Now()
	go func() {
		var err error
		for !stop.Load() && err == nil {
			err = st.Snapshot(ctx, func(tx *state.Tx) error {
				for range ints.All(tx) {
					if keys.Add(1)%65536 == 0 && stop.Load() {
						return nil // a pass cut short at the end
					}
				}
				passes.Add(1)
				return tx.Err()
			})
		}
		readErr <- err
	}()
	// The reader is under way before the lines start.
	for keys.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	with, err := apply()
	stop.Store(true)
	rerr := <-readErr
	readSecs := time.Since(readStart).Seconds()
	if err != nil {
		return result{}, err
	}
	if rerr != nil {
		return result{}, fmt.Errorf("reader: %w", rerr)
	}
	return result{Lines: 2 * a.lines, Seconds: float64(a.lines)/alone + float64(a.lines)/with, Extra: map[string]float64{
		"rate_alone": alone, "rate_with_reader": with,
		"reader_passes": float64(keys.Load()) / float64(a.ops), "reader_keys_per_s": float64(keys.Load()) / readSecs,
	}}, nil
}

// caseStateBackup: row 18. a.ops bytes of 1 KiB values.
func caseStateBackup(a childArgs) (result, error) {
	fill := func(st state.Store) error { return fillStore(st, int64(a.ops)/1024, 1024) }
	var st state.Store
	var dir string
	var err error
	if a.keep != "" {
		dir = a.keep
		st, err = keptStore(a, dir, &state.Options{Logger: discard, Unbound: true, BatchSize: 16}, fill)
		if err != nil {
			return result{}, err
		}
	} else {
		if st, dir, err = openBenchStore(a, "backup"); err != nil {
			return result{}, err
		}
		defer os.RemoveAll(dir)
		if err := fill(st); err != nil {
			return result{}, errors.Join(fmt.Errorf("fill: %w", err), st.Close())
		}
	}
	defer st.Close()
	dest := dir + "-copy"
	if err := os.RemoveAll(dest); err != nil { // left by a run killed before its end
		return result{}, err
	}
	defer os.RemoveAll(dest)
	start := time.Now()
	if err := st.Backup(context.Background(), dest); err != nil {
		return result{}, err
	}
	el := time.Since(start).Seconds()
	return result{Lines: 1, Seconds: el, Extra: map[string]float64{
		"backup_seconds": el, "store_bytes": float64(dirBytes(dir)), "copy_bytes": float64(dirBytes(dest)),
	}}, nil
}
