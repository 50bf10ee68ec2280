package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tidemark-go/tidemark/bench"
	"github.com/tidemark-go/tidemark/internal/pgtest"
	"github.com/tidemark-go/tidemark/state"
)

// The ledger rows (5 and 6, and a row per store that joins them): the
// ledger as users run it, `ledger run` (examples/ledger, built at the
// start) with its transactional output.csv, beside the naive program a Go
// programmer writes without tidemark (bench/cmd/naiveledger) in its two
// variants, in the same run, at several numbers of accounts. Every run is a
// process of its own, timed from its start to its exit: opening the store,
// reading it and closing it count.
//
// A small number of accounts runs on a new data folder each time. A large
// one first gives each program a store holding every account (a setup run
// over one line per account, not timed), then each measured run appends
// its own new lines to the program's input and reads them into that store,
// so that every run finds a store of the same number of keys, restarts on
// it, and applies lines to it.

// ledgerStore is one store of the ledger rows: its row and its name for
// `ledger run --store` and `naiveledger -store`.
type ledgerStore struct{ row, store string }

// ledgerStores are the stores the ledger rows run. The PostgreSQL store
// of the scale-out issue has row 20 (pgrows.go): each program's state in
// a schema of its own on a server the bench starts.
var ledgerStores = []ledgerStore{{"5", "bbolt"}, {"6", "pebble"}, {pgRow, state.Postgres}}

// ledgerScale is one number of accounts of the ledger rows.
type ledgerScale struct {
	accounts int
	// preload: each program's store first gets every account.
	preload bool
	// lines of each measured run.
	lines int64
}

// reps is how many runs variant v makes at sc: those asked for, but one
// of the programs that load every balance from 1,000,000 accounts on (the
// map variant reads every balance at its start, 10 to 220 s at
// 10,000,000, and ledger run with a cache for every balance fills it
// alike), so that make bench fits in the time of a stop. ledger run with
// the default budget and the bounded program, a few seconds a run there,
// make as many as asked: the medians of their runs are the ratio these
// sizes are measured for, and one run of each moved it by a tenth.
func (sc ledgerScale) reps(v ledgerVariant, asked int) int {
	if sc.accounts >= 1_000_000 && (v == variantMap || v == variantTidemarkCache) {
		return min(asked, 1)
	}
	return asked
}

// takingTurns returns the variants of vs that make a run in rep at sc, in
// the order inTurn gives them.
func (sc ledgerScale) takingTurns(vs []ledgerVariant, rep, asked int) []ledgerVariant {
	var out []ledgerVariant
	for _, v := range inTurn(vs, rep) {
		if rep < sc.reps(v, asked) {
			out = append(out, v)
		}
	}
	return out
}

// ledgerScales returns the numbers of accounts the rows run (those of
// -accounts only, when given).
func (r *runner) ledgerScales() []ledgerScale {
	// At 1,000,000 accounts and more a line costs tens of µs (a miss, and
	// a page of the tree or a block changed per key): fewer lines there
	// keep make bench within about 15 minutes.
	all := []ledgerScale{{20, false, 5_000_000}, {10_000, false, 5_000_000}, {1_000_000, true, 300_000}, {10_000_000, true, 100_000}}
	if r.cfg.short {
		// Under 60 s: a store of 1,000,000 accounts takes 10 to 40 s to
		// set up per program; one of 100,000, 1 to 8 s. At 20 accounts
		// 1,000,000 lines (0.3 to 2 s a run): 100,000 lasted 40 ms, most
		// of it the start and end of a process (a new store's folder
		// made, its files synced), not the lines. At 10,000 the bounded
		// programs take 0.2 s (bbolt, Pebble) to 10 s (PostgreSQL) for
		// 100,000 lines.
		all = []ledgerScale{{20, false, 1_000_000}, {10_000, false, 100_000}, {100_000, true, 20_000}}
	}
	if r.cfg.accounts == "" {
		return all
	}
	var out []ledgerScale
	for _, sc := range all {
		for _, a := range strings.Split(r.cfg.accounts, ",") {
			if strings.TrimSpace(a) == strconv.Itoa(sc.accounts) {
				out = append(out, sc)
			}
		}
	}
	return out
}

// ledgerVariant is one program of a ledger row.
type ledgerVariant struct {
	key   string // "tidemark", "tidemark-grow", "tidemark-cache", "map", "bounded"
	label string
}

// tidemark says whether v is a timed run of ledger run.
func (v ledgerVariant) tidemark() bool {
	return v == variantTidemark || v == variantTidemarkGrow || v == variantTidemarkCache
}

// naiveBatch is the naive program's transaction size (its -batch
// default, 10,000) and ledger run's --batch default, given to ledger run
// as --max-batch.
var naiveBatch = strconv.Itoa(state.DefaultBatchSize)

var (
	// variantTidemark is ledger run at the naive program's save size:
	// --max-batch equal to its --batch, so that no save holds more lines
	// than the naive program's transactions (the issue's "same
	// durability": a crash re-reads as much).
	variantTidemark = ledgerVariant{"tidemark", "ledger run (tidemark)"}
	// variantTidemarkGrow is ledger run as it runs by default: while a
	// save is written the next one may grow to --max-batch, four times
	// --batch (twenty times with PostgreSQL), so a commit that falls behind
	// gets fewer, bigger saves. Set against the naive program beside the
	// rows, not counted for their goal; it is the run the goal of
	// 1,000,000 lines/s is for (users run the ledger so).
	variantTidemarkGrow = ledgerVariant{"tidemark-grow", "ledger run (tidemark), its default --max-batch (saves of up to 4 x 10,000 lines, 20 x with PostgreSQL, while one is written)"}
	// variantTidemarkCache is ledger run with a cache budget that holds
	// every balance (cacheFor), set against the naive program's map.
	variantTidemarkCache = ledgerVariant{"tidemark-cache", "ledger run (tidemark), --cache-size for every balance"}
	// variantTidemarkCheck is ledger run checking its store whole before
	// it starts, whatever its size (the run after a copy of a set-up).
	variantTidemarkCheck = ledgerVariant{"tidemark-check", "ledger run (tidemark), its store checked whole at open"}
	variantMap           = ledgerVariant{"map", "naive, every balance in a map loaded at start"}
	variantBounded       = ledgerVariant{"bounded", "naive, only the batch's balances in memory, misses read from the database"}
	// variantBoundedSaves is the bounded naive program with transactions
	// of as many lines as ledger run's saves in the same rep (saveSize),
	// where those were at most 9,000 lines, against the naive program's
	// 10,000: the two programs then make as many saves, as durable, each
	// of the same keys. At 1,000,000 accounts and more with bbolt, the
	// default cache budget is what makes ledger run's saves smaller (a
	// bbolt commit holds about 10 KB of heap for each page it changes, so
	// a save of 10,000 random keys of a large tree about 100 MB): there
	// the two hold the same memory of the backend a save.
	variantBoundedSaves = ledgerVariant{"bounded-saves", "naive, bounded, its transactions of ledger run's lines a save"}
)

// saveSize returns the lines a save of the ledger run res (rounded up),
// when they are at most nine tenths of the naive program's transactions,
// and 0 when they are more (a run's saves are full but its last: nothing
// to show) or res gives no count of its saves.
func saveSize(res result) int64 {
	saves := res.Extra["saves"]
	if res.Lines <= 0 || saves <= 0 {
		return 0
	}
	b := int64(math.Ceil(float64(res.Lines) / saves))
	if nb, _ := strconv.ParseInt(naiveBatch, 10, 64); b*10 > nb*9 {
		return 0
	}
	return b
}

// buildPrograms builds the ledger and the naive program into the work
// directory, in one go build: the packages they share are built once.
func (r *runner) buildPrograms() error {
	pkgs := []string{"./examples/ledger", "./bench/cmd/naiveledger"}
	logf("building %s ...", strings.Join(pkgs, " and "))
	dir := r.binDir()
	cmd := exec.Command("go", append([]string{"build", "-o", dir + string(filepath.Separator)}, pkgs...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build %s: %v: %s", strings.Join(pkgs, " "), err, strings.TrimSpace(out.String()))
	}
	r.ledgerBin, r.naiveBin = filepath.Join(dir, "ledger"), filepath.Join(dir, "naiveledger")
	return nil
}

// ledgerLine is one program's lineage at one store and scale: its input
// and its data folder, and the lines its input holds; with the PostgreSQL
// store, the DSN of its schema.
type ledgerLine struct {
	input, data string
	lines       int64
	dsn         string
}

// appendLines appends n new lines over accounts accounts to l's input.
func (l *ledgerLine) appendLines(n int64, accounts int, seed uint64) error {
	f, err := os.OpenFile(l.input, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	err = bench.GenAccounts(f, int(n), accounts, l.lines+1, seed)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		l.lines += n
	}
	return err
}

// wantsLedger reports whether a ledger row runs: 5, 6, 20, or the rows
// that join them (10, 14).
func (r *runner) wantsLedger() bool {
	want := r.wants("10") || r.wants("14")
	for _, ls := range ledgerStores {
		want = want || r.wants(ls.row)
	}
	return want
}

// ledgerRows measures rows 5 and 6 (and the restart row 14, and the
// memory of each run in row 10).
func (r *runner) ledgerRows(t *table) error {
	if !r.wantsLedger() {
		return nil
	}
	if r.buildErr != nil {
		return r.buildErr
	}
	for _, ls := range ledgerStores {
		if !r.wants(ls.row) && !r.wants("10") && !r.wants("14") {
			continue
		}
		for _, sc := range r.ledgerScales() {
			if ls.store == state.Postgres {
				sc.lines = min(sc.lines, pgMaxLines)
			}
			if err := r.ledgerScale(t, ls, sc); err != nil {
				return err
			}
		}
		if ls.store == state.Postgres && pgServer.version != "" {
			t.note(ls.row, pgNote())
		}
	}
	return nil
}

func genFile(path string, gen func(*os.File) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	err = gen(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// ledgerScale measures one store at one number of accounts.
func (r *runner) ledgerScale(t *table, ls ledgerStore, sc ledgerScale) error {
	dir := filepath.Join(r.work, fmt.Sprintf("ledger-%s-%d", ls.store, sc.accounts))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	tm := &ledgerLine{input: filepath.Join(dir, "tidemark.csv"), data: filepath.Join(dir, "tidemark")}
	nv := &ledgerLine{input: filepath.Join(dir, "naive.csv"), data: filepath.Join(dir, "naive")}
	if !sc.preload {
		// One input for every store and program at sc, made by the first.
		in := filepath.Join(r.work, fmt.Sprintf("ledger-%d-%d.csv", sc.accounts, sc.lines))
		if _, err := os.Stat(in); err != nil {
			if err := genFile(in, func(f *os.File) error { return bench.GenAccounts(f, int(sc.lines), sc.accounts, 1, 1) }); err != nil {
				return err
			}
		}
		tm.input, nv.input = in, in
		tm.lines, nv.lines = sc.lines, sc.lines
	}
	if ls.store == state.Postgres {
		var err error
		if tm.dsn, err = r.pgSchema(fmt.Sprintf("bench_tidemark_%d", sc.accounts)); err != nil {
			return err
		}
		if nv.dsn, err = r.pgSchema(fmt.Sprintf("bench_naive_%d", sc.accounts)); err != nil {
			return err
		}
	}
	label := fmt.Sprintf("%s, %s accounts", ls.store, fmtCount(int64(sc.accounts)))
	if sc.preload {
		if err := r.setUp(t, ls, sc, label, dir, tm, nv); err != nil {
			return err
		}
	}

	variants := []ledgerVariant{variantTidemark, variantMap, variantBounded}
	big := balancesFor(ls.store, sc.accounts) > state.DefaultCacheSize
	if big {
		variants = append(variants, variantTidemarkCache)
	}
	if !sc.preload {
		variants = append(variants, variantTidemarkGrow)
	}
	res := map[string]*runs{}
	for _, v := range variants {
		res[v.key] = &runs{spec: spec{label: v.label}}
	}
	seed := uint64(100)
	for rep := range r.cfg.reps {
		for _, v := range sc.takingTurns(variants, rep, r.cfg.reps) {
			x := res[v.key]
			if x.err != nil {
				continue
			}
			l := nv
			if v.tidemark() {
				l = tm
			}
			if err := nextInput(l, sc, &seed); err != nil {
				return err
			}
			rr, err := r.runLedger(v, ls.store, l, sc.lines, cacheFor(ls.store, sc.accounts), 0)
			if err != nil {
				x.err = err
				logf("%s %s: %v", label, v.key, err)
				continue
			}
			x.res = append(x.res, rr)
			logf("%-34s run %d: %s in %.3f s (%s), %s, peak anon %.1f MiB, file %.1f MiB, load %.2f", label+" "+v.key, rep+1,
				fmtCount(rr.Lines), rr.Seconds, fmtRate(rr.rate()), whereTimeGoes(rr), rr.Extra["anon_peak_kib"]/1024, rr.Extra["file_peak_kib"]/1024, rr.Extra["load1"])
		}
		// The naive program at this rep's save size of ledger run, where
		// the cache budget made it smaller than its own.
		tx := res["tidemark"]
		if !tx.ok() || len(tx.res) != rep+1 {
			continue
		}
		batch := saveSize(tx.res[rep])
		if batch == 0 {
			continue
		}
		x := res[variantBoundedSaves.key]
		if x == nil {
			x = &runs{spec: spec{label: variantBoundedSaves.label}}
			res[variantBoundedSaves.key] = x
		}
		if x.err != nil {
			continue
		}
		if err := nextInput(nv, sc, &seed); err != nil {
			return err
		}
		rr, err := r.runLedger(variantBoundedSaves, ls.store, nv, sc.lines, 0, batch)
		if err != nil {
			x.err = err
			logf("%s %s: %v", label, variantBoundedSaves.key, err)
			continue
		}
		rr.Extra["batch"] = float64(batch)
		x.res = append(x.res, rr)
		logf("%-34s run %d: %s in %.3f s (%s), -batch %d, %s, peak anon %.1f MiB, file %.1f MiB, load %.2f", label+" "+variantBoundedSaves.key, rep+1,
			fmtCount(rr.Lines), rr.Seconds, fmtRate(rr.rate()), batch, whereTimeGoes(rr), rr.Extra["anon_peak_kib"]/1024, rr.Extra["file_peak_kib"]/1024, rr.Extra["load1"])
	}
	if res[variantBoundedSaves.key] != nil {
		variants = append(variants, variantBoundedSaves)
	}
	lines := fmt.Sprintf("%s, %s lines", label, fmtCount(sc.lines))
	if sc.preload {
		lines += " into a store holding every account"
	}
	what := "ledger run (with output.csv; saves of at most 10,000 lines, the naive program's: --max-batch " + naiveBatch + "), " + lines
	tmr, tmc := res["tidemark"], res["tidemark"]
	mapWhat := what + ", default cache budget; against the naive program, every balance in a map"
	if big {
		tmc = res["tidemark-cache"]
		mapWhat = fmt.Sprintf("%s, --cache-size %d MiB; against the naive program, every balance in a map", what, cacheFor(ls.store, sc.accounts)>>20)
	}
	t.rate(ls.row, mapWhat, tmc, res["map"], "naive, map", 1.0)
	t.rate(ls.row, what+", default cache budget; against the naive program, misses read from the database", tmr, res["bounded"], "naive, bounded", 1.0)
	if x := res[variantBoundedSaves.key]; x != nil {
		t.rate(ls.row, what+", default cache budget; against the naive program, misses read from the database, its transactions of as many lines as ledger run's saves ("+batchesOf(x)+"; not a goal: as many saves, as durable, each of the same keys, and with bbolt from 1,000,000 accounts on the same memory of the backend)", tmr, x, "naive, bounded, ledger run's save size", 0)
	}
	growWhat := "ledger run (with output.csv) as it runs by default, saves of up to 40,000 lines while one is written (--max-batch 0), " + lines
	if ls.store == state.Postgres {
		growWhat = "ledger run (with output.csv) as it runs by default, saves of up to 200,000 lines while one is written (--max-batch 0: 20 times --batch with PostgreSQL), " + lines
	}
	if sc.accounts <= 10_000 {
		// The goal of 1,000,000 lines/s is the ledger's as users run it;
		// the run at the naive program's save size is shown beside it.
		t.rate(ls.row, what+"; against 1,000,000 lines/s (not a goal: the goal is for the run as it runs by default, below)", tmr, fixedRate(1e6), "1,000,000 lines/s", 0)
		t.rate(ls.row, growWhat+"; against the goal of 1,000,000 lines/s", res["tidemark-grow"], fixedRate(1e6), "1,000,000 lines/s", 1.0)
	}
	if g := res["tidemark-grow"]; g != nil {
		t.rate(ls.row, growWhat+"; against the naive program, every balance in a map (not a goal: the naive program's saves are 10,000 lines)", g, res["map"], "naive, map", 0)
	}
	t.ledgerPoint(ls.store, sc.accounts, tmr, res["tidemark-cache"], res["map"], res["bounded"])
	if sc.preload || ls.store == state.Postgres {
		var parts []string
		for _, v := range variants {
			if x := res[v.key]; x.ok() {
				parts = append(parts, v.label+": "+whereTimeGoes(x.res[len(x.res)/2]))
			}
		}
		t.note(ls.row, fmt.Sprintf("Row %s, %s, where the time of a run goes (its CPU time, user and system, of the whole process, for each line; the part of its run it spent on a CPU, the rest waiting, for its disk's writes and syncs or, on a loaded machine, for a CPU; and its lines a save): %s.", ls.row, label, strings.Join(parts, "; ")))
	}
	for _, v := range variants {
		x := res[v.key]
		if !x.ok() {
			continue
		}
		// The goal of ledger run: 64 MiB plus its cache budget.
		limit, base := 64.0, "64 MiB"
		tidemark := v.tidemark()
		if tidemark {
			budget := int64(state.DefaultCacheSize)
			if v == variantTidemarkCache {
				budget = cacheFor(ls.store, sc.accounts)
			}
			limit += float64(budget >> 20)
			base = fmt.Sprintf("64 MiB + the cache budget, %d MiB", budget>>20)
			if ls.store == state.Postgres {
				// The store's read cache of durable values, its own
				// budget (the DSN's cache=, state.DefaultReadCache).
				limit += float64(state.DefaultReadCache >> 20)
				base += fmt.Sprintf(" + the PostgreSQL store's read cache, %d MiB", state.DefaultReadCache>>20)
			}
		}
		anon := x.maxExtra("anon_peak_kib") / 1024
		t.add(row{id: "10", what: fmt.Sprintf("row %s, %s, %s: peak anonymous RSS", ls.row, label, v.label),
			result:   fmt.Sprintf("%.1f MiB (file-backed: %.1f MiB; VmHWM %.1f MiB)", anon, x.maxExtra("file_peak_kib")/1024, x.maxRSS()/1024),
			baseline: base, ratio: fmtRatio(anon / limit), goal: goalIf(tidemark, "< 1.00"),
			met: metIf(tidemark, anon < limit), load: x.loadText()})
	}
	if sc.preload {
		r.restartRow(t, ls, sc, label, tm, nv)
	}
	return nil
}

// nextInput readies l for a measured run at sc: new lines appended to its
// input (a store holding every account; seed moves on), or its data
// folder emptied.
func nextInput(l *ledgerLine, sc ledgerScale, seed *uint64) error {
	if sc.preload {
		*seed++
		return l.appendLines(sc.lines, sc.accounts, *seed)
	}
	return resetLedger(l)
}

// setUp gives each program of a ledger row a store holding every
// account: a setup run over one line per account (in their order) into a
// new store, or, with -setups, a copy of the stores an earlier run set up.
func (r *runner) setUp(t *table, ls ledgerStore, sc ledgerScale, label, dir string, tm, nv *ledgerLine) error {
	kept := ""
	// A PostgreSQL set-up is rows of the bench's own server, which ends
	// with the bench: made again each time.
	if r.cfg.setups != "" && ls.store != state.Postgres {
		// Kept by the format of a new store: a set-up of another format
		// (made by an earlier version) is not what the rows would name.
		format, err := newStoreFormat(r.work, ls.store)
		if err != nil {
			return fmt.Errorf("%s: the format of a new %s store: %w", label, ls.store, err)
		}
		kept = filepath.Join(r.cfg.setups, fmt.Sprintf("ledger-%s-%d-%s", ls.store, sc.accounts, strings.ReplaceAll(format, " ", "-")))
		if _, err := os.Stat(filepath.Join(kept, "done")); err == nil {
			start := time.Now()
			if err := copyTree(kept, dir); err != nil {
				return fmt.Errorf("%s: copy the set-up stores of %s: %w", label, kept, err)
			}
			tm.lines, nv.lines = int64(sc.accounts), int64(sc.accounts)
			logf("%s: the set-up stores copied from %s in %.1f s", label, kept, time.Since(start).Seconds())
			// A copy is not the file its store left checked (another
			// inode): one run over no new line, not timed, checks it and
			// leaves it recorded, as a user's store is after its own last
			// run. A bbolt file is checked whole before the run starts (in
			// the background, the check would end with the run,
			// unfinished); a Pebble database is checked at open when it is
			// at most VerifyMaxBytes, and never otherwise.
			defer func(t time.Duration) { r.timeout = t }(r.timeout)
			r.timeout = max(r.timeout, 30*time.Minute)
			warm := variantTidemark
			if ls.store == state.Bolt {
				warm = variantTidemarkCheck
			}
			cres, err := r.runLedger(warm, ls.store, tm, 0, 0, 0)
			if err != nil {
				return fmt.Errorf("%s: the run that checks the copied store of ledger run: %w", label, err)
			}
			t.note(ls.row, fmt.Sprintf("Row %s, %s: the stores of every account were copied from those an earlier run set up (-setups %s), and ledger run ran once over no new line (%.1f s, not timed in the rows), so that its store is checked and recorded as left checked, as after a user's own run.", ls.row, label, r.cfg.setups, cres.Seconds))
			return nil
		}
	}
	for _, l := range []*ledgerLine{tm, nv} {
		if err := genFile(l.input, func(f *os.File) error { return bench.GenEveryAccount(f, sc.accounts, 1, 1) }); err != nil {
			return err
		}
		l.lines = int64(sc.accounts)
		if l.dsn != "" {
			if err := resetSchema(l.dsn); err != nil {
				return err
			}
		}
	}
	logf("%s: setting up a store of every account for each program ...", label)
	// Not timed in the rows: ledger run gets a cache budget that holds the
	// index and filter blocks of a Pebble store of 10,000,000 keys (with
	// the default, every new key read them from the file, and the setup
	// took more than 10 minutes), and each run up to 30 minutes.
	defer func(t time.Duration) { r.timeout = t }(r.timeout)
	r.timeout = max(r.timeout, 30*time.Minute)
	scache := int64(setupCache)
	if ls.store == state.Postgres {
		// A read cache too small for every account asks the server for
		// each new one (a setup of 10,000,000 accounts took 406 s so,
		// against the naive program's 70).
		scache = max(scache, cacheFor(ls.store, sc.accounts))
	}
	tres, err := r.runLedger(variantTidemarkCache, ls.store, tm, int64(sc.accounts), scache, 0)
	if err != nil {
		return fmt.Errorf("%s: setup of ledger run: %w", label, err)
	}
	// The naive program in its map variant, which reads nothing per line:
	// the bounded one reads every new key from the database (a Pebble
	// setup of 10,000,000 accounts took more than 20 minutes so).
	nres, err := r.runLedger(variantMap, ls.store, nv, int64(sc.accounts), 0, 0)
	if err != nil {
		return fmt.Errorf("%s: setup of the naive program: %w", label, err)
	}
	logf("%s: set up in %.1f s (ledger run, %s) and %.1f s (naive, %s)", label, tres.Seconds, fmtRate(tres.rate()), nres.Seconds, fmtRate(nres.rate()))
	t.note(ls.row, fmt.Sprintf("Row %s, %s: the setup runs (one line per account into a new store, not timed in the rows; ledger run with --cache-size %d MiB, the naive program in its map variant) took %.1f s for ledger run (%s) and %.1f s for the naive program (%s).",
		ls.row, label, scache>>20, tres.Seconds, fmtRate(tres.rate()), nres.Seconds, fmtRate(nres.rate())))
	if kept == "" {
		return nil
	}
	// Kept for the next run: the folder, then its mark.
	if err := os.RemoveAll(kept); err != nil {
		return err
	}
	if err := copyTree(dir, kept); err != nil {
		return fmt.Errorf("%s: keep the set-up stores in %s: %w", label, kept, err)
	}
	return os.WriteFile(filepath.Join(kept, "done"), nil, 0o644)
}

// setupCache is the --cache-size of ledger run's setup runs.
const setupCache = 512 << 20

// copyTree copies the folder from into the folder to (made if missing),
// the mark file "done" aside.
func copyTree(from, to string) error {
	return filepath.WalkDir(from, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, path)
		if err != nil {
			return err
		}
		dst := filepath.Join(to, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(dst, 0o755)
		case rel == "done" || d.Name() == "LOCK":
			return nil
		}
		return copyFile(path, dst)
	})
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fi.Mode().Perm())
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// restartRow measures row 14 at one store and scale: a run over one new
// line, from the process's start to its exit.
func (r *runner) restartRow(t *table, ls ledgerStore, sc ledgerScale, label string, tm, nv *ledgerLine) {
	if !r.wants("14") {
		return
	}
	res := map[string]*runs{}
	variants := []ledgerVariant{variantTidemark, variantMap, variantBounded}
	for _, v := range variants {
		res[v.key] = &runs{spec: spec{label: v.label}}
	}
	for rep := range r.cfg.reps {
		for _, v := range sc.takingTurns(variants, rep, r.cfg.reps) {
			x := res[v.key]
			l := nv
			if v == variantTidemark {
				l = tm
			}
			if x.err != nil {
				continue
			}
			if err := l.appendLines(1, sc.accounts, 7); err != nil {
				x.err = err
				continue
			}
			rr, err := r.runLedger(v, ls.store, l, 1, 0, 0)
			if err != nil {
				x.err = err
				continue
			}
			x.res = append(x.res, rr)
		}
	}
	tmr := res["tidemark"]
	what := fmt.Sprintf("restart of ledger run on a %s store of %s accounts with one new line: the whole run, from exec to exit", ls.store, fmtCount(int64(sc.accounts)))
	if !tmr.ok() {
		t.add(row{id: "14", what: what, result: notMeasured(tmr)})
		return
	}
	s := tmr.seconds()
	t.add(row{id: "14", what: what, result: fmt.Sprintf("%.3f s", s), baseline: "1 s", ratio: fmtRatio(s), goal: goalIf(sc.accounts >= 10_000_000, "< 1.00"), met: metIf(sc.accounts >= 10_000_000, s < 1), load: tmr.loadText()})
	for _, v := range variants[1:] {
		x := res[v.key]
		if !x.ok() {
			t.add(row{id: "14", what: what + ", against " + v.label, result: notMeasured(x)})
			continue
		}
		t.add(row{id: "14", what: "the same, against " + v.label, result: fmt.Sprintf("%.3f s", s),
			baseline: fmt.Sprintf("%.3f s", x.seconds()), ratio: fmtRatio(x.seconds() / s), goal: "–", met: "–", load: tmr.loadText() + " / " + x.loadText()})
	}
}

func goalIf(ok bool, g string) string {
	if ok {
		return g
	}
	return "–"
}

func metIf(ok, met bool) string {
	if ok {
		return verdict(met)
	}
	return "–"
}

// fixedRate is a baseline that is a fixed rate.
func fixedRate(v float64) *runs {
	return &runs{res: []result{{Lines: int64(v), Seconds: 1}}}
}

// resetLedger removes a data folder and the input's pointer file (and
// empties the lineage's PostgreSQL schema), for a run from the input's
// start.
func resetLedger(l *ledgerLine) error {
	if err := os.RemoveAll(l.data); err != nil {
		return err
	}
	if l.dsn != "" {
		if err := resetSchema(l.dsn); err != nil {
			return err
		}
	}
	return removePointer(l.input)
}

var (
	ledgerDone = regexp.MustCompile(`ledger: settled: (\d+) lines read, (\d+) applied`)
	naiveDone  = regexp.MustCompile(`naiveledger: (\d+) lines in`)
	// ledgerSaves is the count of saves in ledger run's summary.
	ledgerSaves = regexp.MustCompile(`; (\d+) saves;`)
)

// whereTimeGoes says where the time of run r went: its CPU time a line
// (user and system, the whole process), the part of its run on a CPU
// (the rest it waited: for its disk, or for a CPU on a loaded machine),
// and its lines a save when it counted its saves (ledger run; the naive
// program saves every 10,000 lines, naiveBatch). At a million accounts
// and more, a run of bbolt waits most of its time for its commits' writes
// and syncs, and more lines a save write fewer pages a line.
func whereTimeGoes(r result) string {
	lines := float64(max(r.Lines, 1))
	cpu := r.Extra["cpu_seconds"]
	s := fmt.Sprintf("%.1f µs of CPU a line, on a CPU %.0f %% of its run", cpu*1e6/lines, 100*cpu/max(r.Seconds, 1e-9))
	if n := r.Extra["saves"]; n > 0 {
		s += fmt.Sprintf(", %s lines a save", fmtCount(int64(lines/n+0.5)))
	}
	if c, ok := r.Extra["server_cpu_seconds"]; ok {
		s += fmt.Sprintf(", and %.1f µs of the PostgreSQL server's CPU a line", c*1e6/lines)
	}
	return s
}

// cacheFor is a cache budget that holds every balance of accounts
// accounts in a store of store: 350 bytes an account (the value cache
// counts an entry of a 16-byte account as 165 bytes, and keeps its entries
// within half its budget, for the garbage collector's headroom), plus the
// 128 MiB a bbolt store gives its commit out of a large budget; with
// Pebble, whose block cache takes half of the budget, 700;
// the default at least.
func cacheFor(store string, accounts int) int64 {
	if store == state.Pebble {
		return max(balancesFor(store, accounts), state.DefaultCacheSize)
	}
	return max(balancesFor(store, accounts)+128<<20, state.DefaultCacheSize)
}

// balancesFor is the part of the cache budget the balances of accounts
// accounts take in the value cache of a store of store.
func balancesFor(store string, accounts int) int64 {
	if store == state.Pebble {
		return int64(accounts) * 700
	}
	return int64(accounts) * 350
}

// runLedger runs variant v over l's input into l's data folder and
// checks that it read want new lines. cache is the --cache-size of
// variantTidemarkCache; batch, the naive program's -batch (0: its
// default, naiveBatch).
func (r *runner) runLedger(v ledgerVariant, store string, l *ledgerLine, want, cache, batch int64) (result, error) {
	var bin string
	var args []string
	// ledger run's --store: the backend, or the lineage's database.
	db := store
	if l.dsn != "" {
		db = l.dsn
	}
	switch v {
	case variantTidemark:
		bin, args = r.ledgerBin, []string{"run", "--input", l.input, "--data", l.data, "--store", db, "--progress", "none", "--max-batch", naiveBatch}
	case variantTidemarkGrow:
		bin, args = r.ledgerBin, []string{"run", "--input", l.input, "--data", l.data, "--store", db, "--progress", "none"}
	case variantTidemarkCache:
		if l.dsn != "" {
			// The PostgreSQL store's read cache, which knows the keys
			// the store does not hold while it holds every one, gets
			// the same budget (the DSN's cache=).
			db = pgtest.WithParam(db, "cache", strconv.FormatInt(cache, 10))
		}
		bin, args = r.ledgerBin, []string{"run", "--input", l.input, "--data", l.data, "--store", db, "--progress", "none", "--max-batch", naiveBatch, "--cache-size", strconv.FormatInt(cache, 10)}
	case variantTidemarkCheck:
		bin, args = r.ledgerBin, []string{"run", "--input", l.input, "--data", l.data, "--store", db, "--progress", "none", "--verify-max-bytes", strconv.FormatInt(1<<50, 10)}
	default:
		mode := v.key
		if v == variantBoundedSaves {
			mode = variantBounded.key
		}
		bin, args = r.naiveBin, []string{"-input", l.input, "-data", l.data, "-store", store, "-mode", mode}
		if batch > 0 {
			args = append(args, "-batch", strconv.FormatInt(batch, 10))
		}
		if l.dsn != "" {
			args = append(args, "-dsn", l.dsn)
		}
	}
	pgBefore := r.pgServerCPU(l)
	res, stderr, err := r.runProc(bin, args)
	if err != nil {
		return res, err
	}
	if l.dsn != "" {
		res.Extra["server_cpu_seconds"] = r.pgServerCPU(l) - pgBefore
	}
	tidemark := v.tidemark() || v == variantTidemarkCheck
	re := naiveDone
	if tidemark {
		re = ledgerDone
	}
	m := re.FindStringSubmatch(stderr)
	if m == nil {
		return res, fmt.Errorf("%s: no summary in its output: %s", filepath.Base(bin), lastLines(stderr))
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	if n != want {
		return res, fmt.Errorf("%s read %d lines, want %d: %s", filepath.Base(bin), n, want, lastLines(stderr))
	}
	if tidemark {
		if sv := ledgerSaves.FindStringSubmatch(stderr); sv != nil {
			n, _ := strconv.ParseFloat(sv[1], 64)
			res.Extra["saves"] = n
		}
		if a, _ := strconv.ParseInt(m[2], 10, 64); a != want {
			return res, fmt.Errorf("ledger run applied %d lines, want %d: %s", a, want, lastLines(stderr))
		}
	}
	res.Lines = n
	if !tidemark && n > 0 {
		// The naive program saves every naiveBatch lines, and once at
		// the end.
		b, _ := strconv.ParseInt(naiveBatch, 10, 64)
		if batch > 0 {
			b = batch
		}
		res.Extra["saves"] = float64((n + b - 1) / b)
	}
	return res, nil
}

// batchesOf says the -batch of x's runs.
func batchesOf(x *runs) string {
	var bs []string
	for _, r := range x.res {
		if b := strconv.FormatFloat(r.Extra["batch"], 'f', 0, 64); !slices.Contains(bs, b) {
			bs = append(bs, b)
		}
	}
	if len(bs) == 0 {
		return "no run"
	}
	return "-batch " + strings.Join(bs, ", ")
}

func lastLines(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 400 {
		s = "…" + s[len(s)-400:]
	}
	return s
}

// runProc runs bin and samples its memory (/proc/PID/status) every 10 ms
// while it runs: the peaks of its anonymous and file-backed resident sets,
// and its VmHWM. The time is from the start to the exit.
func (r *runner) runProc(bin string, args []string) (result, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	// The runs before this one left dirty pages (a run of ledger run's
	// default saves, 1,000,000 lines, tens of MB) that the kernel writes
	// back in the time that follows: a run then paid for them in its own
	// syncs, and which program paid depended on the order. Each run starts
	// once they are written (sync(2), not timed).
	syscall.Sync()
	load := load1()
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return result{}, "", err
	}
	status := fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)
	var peak bench.MemStatus
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tk := time.NewTicker(10 * time.Millisecond)
		defer tk.Stop()
		for {
			if m, ok := bench.ReadMemStatus(status); ok {
				peak.Anon, peak.File, peak.HWM = max(peak.Anon, m.Anon), max(peak.File, m.File), max(peak.HWM, m.HWM)
			}
			select {
			case <-done:
				return
			case <-tk.C:
			}
		}
	}()
	err := cmd.Wait()
	el := time.Since(start).Seconds()
	close(done)
	<-sampled
	if err != nil {
		return result{}, stderr.String(), fmt.Errorf("%s %s: %w: %s", filepath.Base(bin), strings.Join(args, " "), err, lastLines(stderr.String()))
	}
	ps := cmd.ProcessState
	return result{Seconds: el, PeakRSSKiB: peak.HWM, Extra: map[string]float64{
		"anon_peak_kib": float64(peak.Anon), "file_peak_kib": float64(peak.File),
		"cpu_seconds": (ps.UserTime() + ps.SystemTime()).Seconds(), "load1": load,
	}}, stderr.String(), nil
}

// load1 is the one-minute load average.
func load1() float64 {
	f := strings.Fields(loadAvg())
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// inTurn returns the order in which rep runs vs: each rep starts one
// program further, so that over the reps each program runs first as
// often, where ledger run ran first in every rep. (What a run left for
// the next to pay, its dirty pages, runProc has written before each run.)
func inTurn(vs []ledgerVariant, rep int) []ledgerVariant {
	out := make([]ledgerVariant, 0, len(vs))
	for i := range vs {
		out = append(out, vs[(i+rep)%len(vs)])
	}
	return out
}
