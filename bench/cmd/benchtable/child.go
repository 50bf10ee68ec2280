package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/bench"
	"github.com/tidemark-go/tidemark/feed"
	"github.com/tidemark-go/tidemark/feed/pointer"
	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/state"
)

// result is what a child prints: one JSON object. The parent adds the
// child's peak RSS.
type result struct {
	// Lines is how many lines (or operations) the measurement counted.
	Lines int64 `json:"lines"`
	// Seconds is how long they took.
	Seconds float64 `json:"seconds"`
	// Mallocs is the heap allocations made during the timed part.
	Mallocs uint64 `json:"mallocs,omitempty"`
	// Extra holds what a case measures besides its rate.
	Extra map[string]float64 `json:"extra,omitempty"`
	// PeakRSSKiB is the child's peak resident set (VmHWM), read by the
	// child itself at its end. The ru_maxrss that wait4 reports is not
	// used: Linux counts in it the parent's resident set at the fork.
	PeakRSSKiB int64 `json:"peak_rss_kib,omitempty"`
}

// rate is lines (or operations) per second.
func (r result) rate() float64 {
	if r.Seconds <= 0 {
		return 0
	}
	return float64(r.Lines) / r.Seconds
}

// childArgs are the flags of a child run.
type childArgs struct {
	file    string
	lines   int64
	batch   int
	backend string
	work    string
	psync   string
	groups  int
	sync    bool
	seconds float64
	ops     int
	qcap    int
	keep    string
}

const feedName = "ledger"

var discard = slog.New(slog.DiscardHandler)

// runChild runs one measurement and prints its result.
func runChild(name string, a childArgs) error {
	r, err := measureCase(name, a)
	if err != nil {
		return err
	}
	r.PeakRSSKiB = bench.PeakRSSKiB()
	if r.Extra == nil {
		r.Extra = map[string]float64{}
	}
	anon, file := bench.RSSParts()
	r.Extra["rss_anon_kib"], r.Extra["rss_file_kib"] = float64(anon), float64(file)
	return json.NewEncoder(os.Stdout).Encode(r)
}

// measureCase runs one measurement.
func measureCase(name string, a childArgs) (r result, err error) {
	switch name {
	case "bufio":
		r, err = caseBufio(a)
	case "source":
		r, err = caseSource(a)
	case "glob":
		r, err = caseGlob(a)
	case "nop":
		r, err = caseNop(a)
	case "nop-gaps":
		r, err = caseNopGaps(a)
	case "ledger-mem":
		r, err = caseLedgerMem(a)
	case "ledger-store":
		r, err = caseLedgerStore(a)
	case "fsync4k":
		r, err = caseFsync(a, 4096, 4096, 1, false)
	case "fsync4k-twice":
		r, err = caseFsync(a, 4096, 8192, 2, false)
	case "fsync4k-twice-pointer":
		r, err = caseFsync(a, 4096, 8192, 2, true)
	case "fsync4k-append":
		r, err = caseFsyncAppend(a, 4096, false)
	case "fsync4k-append-pointer":
		r, err = caseFsyncAppend(a, 4096, true)
	case "fsync4k-twice-output":
		r, err = caseFsyncOutput(a, 2)
	case "fsync4k-append-output":
		r, err = caseFsyncOutput(a, 0)
	case "backend-sync":
		r, err = caseBackendSync(a)
	case "pointer-ab":
		r, err = casePointerAB(a)
	case "idle":
		r, err = caseIdle(a)
	case "restart-setup":
		r, err = caseRestartSetup(a)
	case "restart":
		r, err = caseRestart(a)
	case "state-iter":
		r, err = caseStateIter(a)
	case "state-apply-reader":
		r, err = caseStateApplyReader(a)
	case "state-backup":
		r, err = caseStateBackup(a)
	default:
		err = fmt.Errorf("unknown case %q", name)
	}
	return r, err
}

func mallocs() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}

// parseSync reads -psync: the pointer's sync policy, and whether commits
// wait for their pointer write ("every-sync": FileConfig.SyncCommit) rather
// than go through group commit ("every", the framework's default).
func parseSync(s string) (feed.SyncPolicy, bool, error) {
	switch s {
	case "", "every":
		return feed.SyncEveryCommit, false, nil
	case "every-sync":
		return feed.SyncEveryCommit, true, nil
	case "interval":
		return feed.SyncInterval, false, nil
	case "never":
		return feed.SyncNever, false, nil
	}
	return 0, false, fmt.Errorf("unknown pointer sync policy %q", s)
}

// removePointer removes the input's pointer file so that a run starts at 0.
func removePointer(path string) error {
	for _, p := range []string{path + pointer.Suffix, path + pointer.Suffix + pointer.TempSuffix} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// caseBufio is the baseline of rows 1 and 2: a bare bufio.Reader.ReadSlice
// loop with the file source's buffer size (64 KiB), counting lines.
func caseBufio(a childArgs) (result, error) {
	var n int64
	passes := 0
	start := time.Now()
	// A small file is read several times, so that the time is long
	// enough to mean something.
	for passes == 0 || time.Since(start) < 200*time.Millisecond {
		k, err := readSliceLoop(a.file)
		if err != nil {
			return result{}, err
		}
		n += k
		passes++
	}
	return result{Lines: n, Seconds: time.Since(start).Seconds(), Extra: map[string]float64{"passes": float64(passes)}}, nil
}

func readSliceLoop(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 64<<10)
	var n int64
	for {
		line, err := r.ReadSlice('\n')
		if len(line) > 0 && line[len(line)-1] == '\n' {
			n++
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// caseSource is row 1: the file source alone, Committed, polling batches of
// the framework's default size and committing after each.
func caseSource(a childArgs) (result, error) {
	if err := removePointer(a.file); err != nil {
		return result{}, err
	}
	return readCommitted(a, feed.Config{Path: a.file})
}

// caseGlob is row 15: a file source over a glob of the files in the folder
// a.file, Committed, polling and committing as caseSource does, until
// every line of every file is read. Its registry is made anew in the
// folder's ptr/.
func caseGlob(a childArgs) (result, error) {
	ptr := filepath.Join(a.file, "ptr")
	if err := os.RemoveAll(ptr); err != nil {
		return result{}, err
	}
	return readCommitted(a, feed.Config{Paths: []string{filepath.Join(a.file, "*.csv")}, PointerDir: ptr, Name: "glob"})
}

// readCommitted reads a.lines lines through the source of cfg, Committed
// with a.psync, in batches of a.batch, committing each batch's last line.
func readCommitted(a childArgs, cfg feed.Config) (result, error) {
	policy, syncCommit, err := parseSync(a.psync)
	if err != nil {
		return result{}, err
	}
	ctx := context.Background()
	m0 := mallocs()
	start := time.Now()
	// As the framework configures a file feed (FileConfig.SyncCommit).
	cfg.Strategy, cfg.Sync, cfg.GroupCommit, cfg.Logger = feed.Committed, policy, policy == feed.SyncEveryCommit && !syncCommit, discard
	src, err := feed.NewFileSource(cfg)
	if err != nil {
		return result{}, err
	}
	items := make([]feed.Item, a.batch)
	var n int64
	commits := 0
	deadline := time.Now().Add(5 * time.Minute)
	for n < a.lines {
		k, err := src.Poll(ctx, items)
		if err != nil {
			return result{}, errors.Join(err, src.Close())
		}
		if k == 0 {
			if time.Now().After(deadline) {
				return result{}, errors.Join(fmt.Errorf("source stopped at %d of %d lines", n, a.lines), src.Close())
			}
			time.Sleep(100 * time.Microsecond)
			continue
		}
		n += int64(k)
		last := items[k-1]
		if err := src.Commit(last.Epoch, last.Position); err != nil {
			return result{}, errors.Join(err, src.Close())
		}
		commits++
	}
	if err := src.Close(); err != nil {
		return result{}, err
	}
	el := time.Since(start).Seconds()
	return result{Lines: n, Seconds: el, Mallocs: mallocs() - m0,
		Extra: map[string]float64{"commits": float64(commits)}}, nil
}

// lagSampler samples a feed's commit lag while a run goes on (row 9):
// FeedStatus.ProcessedPending, the lines every consumer finished (and every
// hold declared durable) that are not committed yet; and, for comparison,
// PendingAcks, the lines handed to the queues and not committed (those
// waiting in a queue included).
// lagEvery is how often the commit lag is sampled: row 2 lasts about a
// tenth of a second, and its p99 should come from more than a few dozen
// samples.
const lagEvery = 500 * time.Microsecond

type lagSampler struct {
	stop    chan struct{}
	done    chan struct{}
	samples []float64
	handed  []float64
}

func sampleLag(s *framework.Server, every time.Duration) *lagSampler {
	l := &lagSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-l.stop:
				return
			case <-t.C:
				st, err := s.FeedStatus(feedName)
				if err == nil {
					l.samples = append(l.samples, float64(st.ProcessedPending))
					l.handed = append(l.handed, float64(st.PendingAcks))
				}
			}
		}
	}()
	return l
}

// finish stops sampling and adds the lag's statistics to extra.
func (l *lagSampler) finish(extra map[string]float64) {
	close(l.stop)
	<-l.done
	stats := func(prefix string, s []float64) {
		if len(s) == 0 {
			return
		}
		slices.Sort(s)
		extra[prefix+"_samples"] = float64(len(s))
		extra[prefix+"_p50"] = s[len(s)/2]
		extra[prefix+"_p99"] = s[min(len(s)-1, len(s)*99/100)]
		extra[prefix+"_max"] = s[len(s)-1]
	}
	stats("lag", l.samples)
	stats("handed", l.handed)
}

// serve runs a server over a.file with the processors of groups (one
// processor per group), waits until every counter is done, then stops it.
// It returns the seconds from Start to the last counter's done (plus what
// beforeStop takes), and the mallocs made meanwhile.
func serve(a childArgs, procs []framework.Processor, counters []*bench.Counter, beforeStop func(ctx context.Context) error, extra map[string]float64) (float64, uint64, error) {
	return serveOpts(a, procs, counters, beforeStop, extra, true)
}

// serveOpts is serve; sample says whether to sample the commit lag.
func serveOpts(a childArgs, procs []framework.Processor, counters []*bench.Counter, beforeStop func(ctx context.Context) error, extra map[string]float64, sample bool) (float64, uint64, error) {
	if err := removePointer(a.file); err != nil {
		return 0, 0, err
	}
	policy, syncCommit, err := parseSync(a.psync)
	if err != nil {
		return 0, 0, err
	}
	cfg := framework.Config{
		Feeds: []framework.FeedConfig{{
			Name:          feedName,
			File:          &framework.FileConfig{Filename: a.file, ReadStrategy: feed.Committed, Sync: policy, SyncCommit: syncCommit},
			Overload:      framework.OverloadConfig{Policy: framework.Pause},
			QueueCapacity: a.qcap,
		}},
		Logger: discard,
	}
	reg := framework.Processors{}
	for i, p := range procs {
		name := "p" + strconv.Itoa(i)
		reg[name] = p
		cfg.Groups = append(cfg.Groups, framework.GroupConfig{Name: "g" + strconv.Itoa(i), Processors: []string{name}})
	}
	s, err := framework.New(cfg, reg)
	if err != nil {
		return 0, 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	m0 := mallocs()
	cpu0 := cpuSeconds(syscall.RUSAGE_SELF)
	start := time.Now()
	if err := s.Start(ctx); err != nil {
		return 0, 0, err
	}
	extra["start_seconds"] = time.Since(start).Seconds()
	var lag *lagSampler
	if sample {
		lag = sampleLag(s, lagEvery)
	}
	var werr error
	for _, c := range counters {
		select {
		case <-c.Done():
		case <-ctx.Done():
			werr = fmt.Errorf("timed out with %d of %d lines", c.N(), c.Target)
		}
	}
	if werr == nil && beforeStop != nil {
		// A clean stop of a processor whose store holds the feed: wait
		// until the group has finished every line (the last Handle has
		// returned), then flush the store, so that its last mark covers
		// the last line before Stop makes the final commit.
		werr = s.WaitSettled(ctx, feedName)
		if werr == nil {
			werr = beforeStop(ctx)
		}
	}
	el := time.Since(start).Seconds()
	if len(counters) > 0 && counters[0].N() > 0 {
		// When the first line was counted: for a store in Sync mode, when
		// its first save was durable.
		extra["first_seconds"] = counters[0].FirstAt().Sub(start).Seconds()
	}
	m := mallocs() - m0
	extra["cpu_seconds"] = cpuSeconds(syscall.RUSAGE_SELF) - cpu0
	if lag != nil {
		lag.finish(extra)
	}
	st, _ := s.FeedStatus(feedName)
	serr := s.Stop(ctx)
	if st2, err := s.FeedStatus(feedName); err == nil {
		st = st2
	}
	extra["committed_position"] = float64(st.LastCommitPosition)
	if size, err := fileSize(a.file); err == nil {
		// After a clean stop every line was finished: the pointer must
		// have reached the end of the file.
		if size == st.LastCommitPosition {
			extra["pointer_at_end"] = 1
		} else {
			extra["pointer_at_end"] = 0
		}
	}
	return el, m, errors.Join(werr, serr)
}

// caseNop is rows 2 and 3: a groups groups of one no-op processor each.
func caseNop(a childArgs) (result, error) {
	var procs []framework.Processor
	var counters []*bench.Counter
	for range a.groups {
		c := bench.NewCounter(uint64(a.lines))
		counters = append(counters, c)
		procs = append(procs, &bench.Nop{Feed: feedName, Counter: c})
	}
	extra := map[string]float64{}
	el, m, err := serve(a, procs, counters, nil, extra)
	return result{Lines: a.lines, Seconds: el, Mallocs: m, Extra: extra}, err
}

// caseLedgerMem is row 4: the ledger in memory, de-duplicated by a
// Tracker, then its cost per line broken down by timing each part alone
// over the same lines in memory.
func caseLedgerMem(a childArgs) (result, error) {
	c := bench.NewCounter(uint64(a.lines))
	l := bench.NewLedgerMem(feedName, c)
	extra := map[string]float64{}
	el, m, err := serve(a, []framework.Processor{l}, []*bench.Counter{c}, nil, extra)
	if err != nil {
		return result{}, err
	}
	if l.Applied != a.lines {
		return result{}, fmt.Errorf("ledger applied %d of %d lines (%d rejected)", l.Applied, a.lines, l.Rejected)
	}
	if err := costBreakdown(a.file, extra); err != nil {
		return result{}, err
	}
	extra["total_ns"] = el * 1e9 / float64(a.lines)
	extra["cpu_ns"] = extra["cpu_seconds"] * 1e9 / float64(a.lines)
	return result{Lines: a.lines, Seconds: el, Mallocs: m, Extra: extra}, nil
}

// costBreakdown times the ledger's parts alone over the file's lines held
// in memory: parsing, the de-duplication check and record, and applying
// the parsed entry to the maps. Each is in ns per line.
func costBreakdown(path string, extra map[string]float64) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var lines [][]byte
	var ends []int64
	off := 0
	for off < len(data) {
		i := off
		for i < len(data) && data[i] != '\n' {
			i++
		}
		lines = append(lines, data[off:i])
		ends = append(ends, int64(i+1))
		off = i + 1
	}
	n := float64(len(lines))
	accounts := make([][]byte, len(lines))
	amounts := make([]int64, len(lines))
	// Each part is timed in CPU time of this thread, so that other
	// processes on a loaded machine do not count.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := threadClock()
	for i, line := range lines {
		_, acct, amt, err := bench.ParseLedgerLine(line)
		if err != nil {
			return err
		}
		accounts[i], amounts[i] = acct, amt
	}
	extra["parse_ns"] = start.ns() / n

	var tr tidemark.Tracker
	o := &tidemark.Origin{}
	start = threadClock()
	skipped := 0
	for i := range lines {
		d := tidemark.Delivery{Feed: feedName, Epoch: 1, Position: ends[i], Seq: uint64(i + 1), Origin: o}
		if tr.Seen(d) {
			skipped++
			continue
		}
		tr.Record(d)
	}
	extra["dedupe_ns"] = start.ns() / n
	if skipped != 0 {
		return fmt.Errorf("tracker skipped %d new lines", skipped)
	}

	l := bench.NewLedgerMem(feedName, nil)
	start = threadClock()
	for i := range lines {
		l.ApplyEntry(accounts[i], amounts[i])
	}
	extra["apply_ns"] = start.ns() / n
	return nil
}

// caseLedgerStore is rows 7 and 9: the ledger exactly once in a store, the
// pointer held until each batch is durable. The time runs until the last
// line is applied and the store has flushed it.
//
// In Sync mode (row 7, one durable save a line) the time runs from the
// first line's save, and the commit lag is not sampled: the row measures
// the saves, not the store's first write (its buckets, the file's growth)
// nor the framework's start, and not the sampler's own wake-ups, one every
// 0.5 ms (about one a line at the rate of a save a line) on a machine of
// two cores.
func caseLedgerStore(a childArgs) (result, error) {
	dir, err := os.MkdirTemp(a.work, "store-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	opts := &state.Options{BatchSize: a.batch, Sync: a.sync, Logger: discard}
	st, err := state.Open(a.backend+":"+dir, opts)
	if err != nil {
		return result{}, err
	}
	c := bench.NewCounter(uint64(a.lines))
	l := bench.NewLedgerStore(feedName, st, c)
	extra := map[string]float64{}
	el, m, err := serveOpts(a, []framework.Processor{l}, []*bench.Counter{c}, st.Flush, extra, !a.sync)
	stats := st.Stats()
	var applied int64
	verr := l.Store.View(func(tx *state.Tx) error {
		var err error
		applied, err = tx.GetInt64(bench.KeyApplied)
		return err
	})
	err = errors.Join(err, verr, st.Close())
	if err != nil {
		return result{}, err
	}
	if applied != a.lines {
		return result{}, fmt.Errorf("store applied %d of %d lines", applied, a.lines)
	}
	extra["store_commits"] = float64(stats.Commits)
	extra["backpressure"] = float64(stats.BackPressure)
	lines := a.lines
	if first, ok := extra["first_seconds"]; a.sync && ok && lines > 1 {
		// The lines after the first, from its durable save on.
		extra["all_seconds"] = el
		lines, el = lines-1, el-first
	}
	return result{Lines: lines, Seconds: el, Mallocs: m, Extra: extra}, nil
}

// caseFsync writes size bytes at offset 0 of a file of fileSize bytes and
// fdatasyncs it, a.ops times: the machine's durable write rate (rows 7
// and 8). With syncs 2 an operation is two of them, at offsets 0 and size,
// as a bbolt commit writes its pages and then its meta page, syncing each
// (row 7's baseline for bbolt). With ptr, each operation then writes a
// pointer's record to a file of its own and syncs it (ptrSync).
func caseFsync(a childArgs, size, fileSize, syncs int, ptr bool) (result, error) {
	f, err := os.CreateTemp(a.work, "fsync-")
	if err != nil {
		return result{}, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	pf, err := newPtrFile(a, ptr)
	if err != nil {
		return result{}, err
	}
	defer pf.close()
	buf := make([]byte, fileSize)
	if _, err := f.Write(buf); err != nil {
		return result{}, err
	}
	if err := f.Sync(); err != nil {
		return result{}, err
	}
	fd := int(f.Fd())
	start := time.Now()
	for i := range a.ops {
		for j := range syncs {
			buf[0] = byte(i)
			if _, err := f.WriteAt(buf[:size], int64(j*size)); err != nil {
				return result{}, err
			}
			if err := syscall.Fdatasync(fd); err != nil {
				return result{}, err
			}
		}
		if err := pf.sync(i); err != nil {
			return result{}, err
		}
	}
	return result{Lines: int64(a.ops), Seconds: time.Since(start).Seconds()}, nil
}

// ptrFile is the second file of the row 7 baselines with ptr: a file of
// pointer.FileSize bytes, its first 80 written and fdatasynced after each
// operation, as a feed's pointer commits under SyncEveryCommit. A nil
// *ptrFile does nothing.
type ptrFile struct {
	f   *os.File
	buf []byte
}

func newPtrFile(a childArgs, ptr bool) (*ptrFile, error) {
	if !ptr {
		return nil, nil
	}
	f, err := os.CreateTemp(a.work, "fsync-pointer-")
	if err != nil {
		return nil, err
	}
	p := &ptrFile{f: f, buf: make([]byte, pointer.FileSize)}
	if _, err := f.Write(p.buf); err == nil {
		err = f.Sync()
	}
	if err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

func (p *ptrFile) sync(i int) error {
	if p == nil {
		return nil
	}
	p.buf[0] = byte(i)
	if _, err := p.f.WriteAt(p.buf[:80], 0); err != nil {
		return err
	}
	return syscall.Fdatasync(int(p.f.Fd()))
}

func (p *ptrFile) close() {
	if p != nil {
		p.f.Close()
		os.Remove(p.f.Name())
	}
}

// caseFsyncAppend appends size bytes to a new file and fdatasyncs it, a.ops
// times: the durable write rate of a growing file, as a log (a write-ahead
// log, bbolt's file as it grows) writes (row 7, for comparison). With
// ptr, each append is followed by a pointer's commit (ptrFile).
func caseFsyncAppend(a childArgs, size int, ptr bool) (result, error) {
	f, err := os.CreateTemp(a.work, "fsync-append-")
	if err != nil {
		return result{}, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	pf, err := newPtrFile(a, ptr)
	if err != nil {
		return result{}, err
	}
	defer pf.close()
	buf := make([]byte, size)
	fd := int(f.Fd())
	start := time.Now()
	for i := range a.ops {
		buf[0] = byte(i)
		if _, err := f.Write(buf); err != nil {
			return result{}, err
		}
		if err := syscall.Fdatasync(fd); err != nil {
			return result{}, err
		}
		if err := pf.sync(i); err != nil {
			return result{}, err
		}
	}
	return result{Lines: int64(a.ops), Seconds: time.Since(start).Seconds()}, nil
}

// outputLine is a line of ledger run's output.csv (id,account,amount,balance).
const outputLine = "1000,account-holder-00042,-12345,1234567\n"

// caseFsyncOutput is the baseline of row 7's ledger run --sync, a.ops
// times: a line of outputLine's size appended to an output file and
// fdatasynced (ledger run syncs output.csv before the save that records its
// length), then the store's writes: with syncs 2, two 4 KB writes in place,
// each + fdatasync (bbolt's pages, then its meta page); with 0, 4 KB
// appended to a log + fdatasync (Pebble's WAL).
func caseFsyncOutput(a childArgs, syncs int) (result, error) {
	out, err := os.CreateTemp(a.work, "fsync-output-")
	if err != nil {
		return result{}, err
	}
	defer os.Remove(out.Name())
	defer out.Close()
	f, err := os.CreateTemp(a.work, "fsync-store-")
	if err != nil {
		return result{}, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 2*4096)
	if syncs > 0 {
		if _, err := f.Write(buf); err != nil {
			return result{}, err
		}
		if err := f.Sync(); err != nil {
			return result{}, err
		}
	}
	line := []byte(outputLine)
	ofd, fd := int(out.Fd()), int(f.Fd())
	start := time.Now()
	for i := range a.ops {
		if _, err := out.Write(line); err != nil {
			return result{}, err
		}
		if err := syscall.Fdatasync(ofd); err != nil {
			return result{}, err
		}
		buf[0] = byte(i)
		if syncs == 0 {
			if _, err := f.Write(buf[:4096]); err != nil {
				return result{}, err
			}
			if err := syscall.Fdatasync(fd); err != nil {
				return result{}, err
			}
			continue
		}
		for j := range syncs {
			if _, err := f.WriteAt(buf[:4096], int64(j*4096)); err != nil {
				return result{}, err
			}
			if err := syscall.Fdatasync(fd); err != nil {
				return result{}, err
			}
		}
	}
	return result{Lines: int64(a.ops), Seconds: time.Since(start).Seconds()}, nil
}

// casePointerAB is row 8 with its baseline in one process, interleaved: ten
// rounds, each a.ops/10 writes of 80 bytes at offset 0 of a file of 8 KiB
// and fdatasync (the baseline), then as many pointer.File.Store calls under
// SyncEveryCommit. Seconds is the pointer's total, Extra["base_seconds"] the
// baseline's: a drift of the disk's speed touches both alike.
func casePointerAB(a childArgs) (result, error) {
	dir, err := os.MkdirTemp(a.work, "pointer-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	bf, err := os.Create(filepath.Join(dir, "baseline"))
	if err != nil {
		return result{}, err
	}
	defer bf.Close()
	buf := make([]byte, pointer.FileSize)
	if _, err := bf.Write(buf); err != nil {
		return result{}, err
	}
	if err := bf.Sync(); err != nil {
		return result{}, err
	}
	pf := pointer.Open(filepath.Join(dir, "input"+pointer.Suffix), pointer.Options{Sync: feed.SyncEveryCommit, Logger: discard})
	if _, err := pf.Load(); err != nil {
		return result{}, err
	}
	p := pointer.Record{Epoch: 1, Position: 1}
	if err := pf.Store(p); err != nil { // creates the file: not timed
		return result{}, errors.Join(err, pf.Close())
	}
	const rounds = 10
	per := max(1, a.ops/rounds)
	fd := int(bf.Fd())
	var base, ptr time.Duration
	for r := range rounds {
		start := time.Now()
		for i := range per {
			buf[0] = byte(i)
			if _, err := bf.WriteAt(buf[:pointer.RecordSize], 0); err != nil {
				return result{}, errors.Join(err, pf.Close())
			}
			if err := syscall.Fdatasync(fd); err != nil {
				return result{}, errors.Join(err, pf.Close())
			}
		}
		base += time.Since(start)
		start = time.Now()
		for i := range per {
			p.Position = int64(r*per+i+2) * 37
			if err := pf.Store(p); err != nil {
				return result{}, errors.Join(err, pf.Close())
			}
		}
		ptr += time.Since(start)
	}
	n := int64(rounds * per)
	return result{Lines: n, Seconds: ptr.Seconds(), Extra: map[string]float64{"base_seconds": base.Seconds()}}, pf.Close()
}

// caseIdle is row 11: a server tailing a file it has read to the end, with
// the default idle strategy; CPU time over a.seconds of idle.
func caseIdle(a childArgs) (result, error) {
	c := bench.NewCounter(uint64(a.lines))
	extra := map[string]float64{}
	var cpu, wall float64
	idle := func(ctx context.Context) error {
		time.Sleep(200 * time.Millisecond) // let the feed reach its longest wait
		var r0, r1 syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &r0); err != nil {
			return err
		}
		t0 := time.Now()
		time.Sleep(time.Duration(a.seconds * float64(time.Second)))
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &r1); err != nil {
			return err
		}
		wall = time.Since(t0).Seconds()
		cpu = tvSeconds(r1.Utime) + tvSeconds(r1.Stime) - tvSeconds(r0.Utime) - tvSeconds(r0.Stime)
		return nil
	}
	_, _, err := serveOpts(a, []framework.Processor{&bench.Nop{Feed: feedName, Counter: c}}, []*bench.Counter{c}, idle, extra, false)
	if err != nil {
		return result{}, err
	}
	extra["cpu_seconds"] = cpu
	extra["cpu_pct"] = 100 * cpu / wall
	return result{Lines: 0, Seconds: wall, Extra: extra}, nil
}

func tvSeconds(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

// caseRestartSetup reads a.file to its end with a Committed source and
// commits the pointer a.lines lines before the end (row 12's setup).
func caseRestartSetup(a childArgs) (result, error) {
	if err := removePointer(a.file); err != nil {
		return result{}, err
	}
	src, err := feed.NewFileSource(feed.Config{Path: a.file, Strategy: feed.Committed, Sync: feed.SyncNever, Logger: discard})
	if err != nil {
		return result{}, err
	}
	ctx := context.Background()
	items := make([]feed.Item, 4096)
	// ring holds the positions of the last a.lines+1 lines read.
	ring := make([]int64, a.lines+1)
	var epoch uint64
	var n int64
	start := time.Now()
	zeros := 0
	for {
		k, err := src.Poll(ctx, items)
		if err != nil {
			return result{}, errors.Join(err, src.Close())
		}
		if k == 0 {
			if st := src.Status(); st.State == feed.StateCaughtUp || zeros > 1000 {
				break
			}
			zeros++
			time.Sleep(time.Millisecond)
			continue
		}
		for _, it := range items[:k] {
			ring[n%int64(len(ring))] = it.Position
			n++
		}
		epoch = items[k-1].Epoch
	}
	if n <= a.lines {
		return result{}, errors.Join(fmt.Errorf("%s has %d lines: too few to leave %d after the pointer", a.file, n, a.lines), src.Close())
	}
	target := feed.Item{Epoch: epoch, Position: ring[(n-1-a.lines)%int64(len(ring))]}
	if err := src.Commit(target.Epoch, target.Position); err != nil {
		return result{}, errors.Join(err, src.Close())
	}
	if err := src.Close(); err != nil {
		return result{}, err
	}
	size, err := fileSize(a.file)
	if err != nil {
		return result{}, err
	}
	ptr, err := os.ReadFile(a.file + pointer.Suffix)
	if err != nil {
		return result{}, err
	}
	if err := os.WriteFile(a.file+".pointer-backup", ptr, 0o600); err != nil {
		return result{}, err
	}
	return result{Lines: n, Seconds: time.Since(start).Seconds(),
		Extra: map[string]float64{"position": float64(target.Position), "size": float64(size)}}, nil
}

func fileSize(path string) (int64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// caseRestart is row 12: a server restarted on the big file whose pointer
// is near the end; the time from Start to the first line handled.
func caseRestart(a childArgs) (result, error) {
	ptr, err := os.ReadFile(a.file + ".pointer-backup")
	if err != nil {
		return result{}, err
	}
	if err := os.WriteFile(a.file+pointer.Suffix, ptr, 0o600); err != nil {
		return result{}, err
	}
	fp := &firstProc{first: make(chan struct{})}
	cfg := framework.Config{
		Feeds: []framework.FeedConfig{{
			Name:     feedName,
			File:     &framework.FileConfig{Filename: a.file, ReadStrategy: feed.Committed},
			Overload: framework.OverloadConfig{Policy: framework.Pause},
		}},
		Groups: []framework.GroupConfig{{Name: "g0", Processors: []string{"p0"}}},
		Logger: discard,
	}
	s, err := framework.New(cfg, framework.Processors{"p0": fp})
	if err != nil {
		return result{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	if err := s.Start(ctx); err != nil {
		return result{}, err
	}
	var werr error
	select {
	case <-fp.first:
	case <-ctx.Done():
		werr = errors.New("no line delivered")
	}
	first := fp.at.Sub(start).Seconds()
	serr := s.Stop(ctx)
	if err := errors.Join(werr, serr); err != nil {
		return result{}, err
	}
	return result{Lines: 1, Seconds: first, Extra: map[string]float64{
		"first_ms": first * 1e3, "first_position": float64(fp.pos)}}, nil
}

// firstProc records when and where the first line arrived.
type firstProc struct {
	first chan struct{}
	at    time.Time
	pos   int64
	n     int
}

func (p *firstProc) Start(_ context.Context, fc *framework.Context) error {
	return fc.Subscribe(feedName)
}

func (p *firstProc) Handle(_ context.Context, d tidemark.Delivery, _ []byte) error {
	p.n++
	if p.n == 1 {
		p.at, p.pos = time.Now(), d.Position
		close(p.first)
	}
	return nil
}

// gapNop is a no-op processor that records the longest pause between two
// lines and where it happened: a diagnostic of stalls (case nop-gaps).
type gapNop struct {
	*bench.Counter
	last   time.Time
	maxGap time.Duration
	at     uint64
	gaps   []string
}

func (p *gapNop) Start(_ context.Context, fc *framework.Context) error {
	return fc.Subscribe(feedName)
}

func (p *gapNop) Handle(_ context.Context, d tidemark.Delivery, _ []byte) error {
	now := time.Now()
	if !p.last.IsZero() {
		if g := now.Sub(p.last); g > p.maxGap {
			p.maxGap, p.at = g, d.Seq
		}
		if g := now.Sub(p.last); g > 5*time.Millisecond {
			p.gaps = append(p.gaps, fmt.Sprintf("%d:%v", d.Seq, g.Round(100*time.Microsecond)))
		}
	}
	p.last = now
	p.Count()
	return nil
}

func caseNopGaps(a childArgs) (result, error) {
	c := bench.NewCounter(uint64(a.lines))
	p := &gapNop{Counter: c}
	extra := map[string]float64{}
	el, m, err := serve(a, []framework.Processor{p}, []*bench.Counter{c}, nil, extra)
	extra["max_gap_ms"] = float64(p.maxGap.Microseconds()) / 1e3
	extra["max_gap_seq"] = float64(p.at)
	fmt.Fprintln(os.Stderr, "gaps over 5 ms (seq:gap):", p.gaps)
	return result{Lines: a.lines, Seconds: el, Mallocs: m, Extra: extra}, err
}

// rusageThread is RUSAGE_THREAD of getrusage(2).
const rusageThread = 1

// cpuSeconds returns the user and system CPU time of who (RUSAGE_SELF, or
// rusageThread).
func cpuSeconds(who int) float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		return 0
	}
	return tvSeconds(ru.Utime) + tvSeconds(ru.Stime)
}

// clock is a reading of this thread's CPU time.
type clock float64

func threadClock() clock { return clock(cpuSeconds(rusageThread)) }

// ns returns the thread's CPU nanoseconds since c.
func (c clock) ns() float64 { return (cpuSeconds(rusageThread) - float64(c)) * 1e9 }
