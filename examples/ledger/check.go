package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
)

// LedgerState is what a ledger's store holds.
type LedgerState struct {
	// Applied counts the lines applied.
	Applied int64
	// Total is the sum of the amounts applied.
	Total int64
	// Balances is the balance per account.
	Balances map[string]int64
}

// Report is the outcome of comparing a data folder with its input.
type Report struct {
	// Missing counts input lines whose id has fewer output lines than input
	// lines.
	Missing int
	// Twice counts output lines beyond what the input implies: lines written
	// twice.
	Twice int
	// Unknown counts output lines whose id is not in the input, and output
	// lines that do not parse.
	Unknown int
	// State and Want are the store's state and the model's.
	State, Want LedgerState
	// Rejects counts the distinct rejected lines; WantRejects the input's
	// malformed and oversize lines, and the refused ones.
	Rejects, WantRejects int
	// Refused counts the well-formed lines that the run rejected (a store
	// that cannot hold the line's account, say), each in rejects.csv with
	// its reason; the model leaves them out, so that they count neither
	// as missing nor in the expected state. FirstRefusal is the first's
	// reason.
	Refused      int
	FirstRefusal string
	// Unfollowed counts output lines whose balance does not follow the
	// account's previous output line; Stale counts accounts whose last
	// output balance is not the store's balance.
	Unfollowed, Stale int
}

// Exact reports whether the state equals the model's.
func (r *Report) Exact() bool {
	return r.State.Applied == r.Want.Applied && r.State.Total == r.Want.Total && len(r.BalanceDiffs()) == 0
}

// OK reports whether nothing is missing and the state is exact.
func (r *Report) OK() bool { return r.Missing == 0 && r.Exact() }

// BalanceDiffs returns the accounts whose balance differs, in byte order.
func (r *Report) BalanceDiffs() []string {
	var diff []string
	for a, b := range r.State.Balances {
		if b != r.Want.Balances[a] {
			diff = append(diff, a)
		}
	}
	for a, b := range r.Want.Balances {
		if _, ok := r.State.Balances[a]; !ok && b != 0 {
			diff = append(diff, a)
		}
	}
	slices.Sort(diff)
	return diff
}

// Compare compares a store's state and output with a model of the input,
// of which the run rejected the well-formed lines refused.
func Compare(m *Model, st LedgerState, out *OutputSummary, rejects int, refused []Refused) *Report {
	r := &Report{
		State:   st,
		Rejects: rejects,
	}
	for _, f := range refused {
		if m.Remove(f.Entry) {
			if r.Refused == 0 {
				r.FirstRefusal = fmt.Sprintf("line %d (position %d of epoch %d): %s", f.ID, f.Position, f.Epoch, f.Reason)
			}
			r.Refused++
		}
	}
	r.Want = LedgerState{Applied: m.Applied, Total: m.Total, Balances: m.Balances}
	r.WantRejects = m.Malformed + m.Oversize + r.Refused
	r.Missing, r.Twice, r.Unknown = countIDs(m.IDs, out.IDs)
	r.Unknown += out.Bad
	r.Unfollowed = out.Unfollowed
	for a, b := range out.Last {
		if st.Balances[a] != b {
			r.Stale++
		}
	}
	return r
}

// Write prints the report: the two contract lines, then one line per
// account whose balance differs, then what else does not match.
func (r *Report) Write(w io.Writer) {
	fmt.Fprintf(w, "lines missing: %d, output lines written twice: %d\n", r.Missing, r.Twice)
	fmt.Fprintf(w, "state: applied %d (expected %d), total %d (expected %d)\n",
		r.State.Applied, r.Want.Applied, r.State.Total, r.Want.Total)
	for _, a := range r.BalanceDiffs() {
		fmt.Fprintf(w, "balance %s: %d (expected %d)\n", a, r.State.Balances[a], r.Want.Balances[a])
	}
	if r.Unknown > 0 {
		fmt.Fprintf(w, "output lines not in the input: %d\n", r.Unknown)
	}
	if r.Unfollowed > 0 || r.Stale > 0 {
		fmt.Fprintf(w, "output lines whose balance does not follow: %d, accounts whose last output balance is not the state's: %d\n", r.Unfollowed, r.Stale)
	}
	if r.Refused > 0 {
		fmt.Fprintf(w, "well-formed lines rejected by the run (in rejects.csv, left out of the expected state): %d, first: %s\n", r.Refused, r.FirstRefusal)
	}
	if r.Rejects != r.WantRejects {
		fmt.Fprintf(w, "rejected lines: %d (expected %d)\n", r.Rejects, r.WantRejects)
	}
}

// stringList is a flag that can be given several times.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// CheckDir compares the data folder dir with the concatenation of inputs.
func CheckDir(dir string, inputs ...string) (*Report, error) {
	return checkDir(dir, "", inputs)
}

// checkDir is CheckDir; a PostgreSQL data folder's store is read in the
// database dsn ("" for the one its POSTGRES file records), its outputs
// from the store.
func checkDir(dir, dsn string, inputs []string) (*Report, error) {
	m, err := ModelOf(inputs...)
	if err != nil {
		return nil, err
	}
	folder, err := readPGFolder(dir)
	if err != nil {
		return nil, err
	}
	if folder != nil || dsn != "" {
		var outs [2]bytes.Buffer
		info, _, err := readStore(dir, dsn, &outs)
		if err != nil {
			return nil, err
		}
		out, err := ReadOutputFrom(&outs[0])
		if err != nil {
			return nil, err
		}
		rejects, refused, err := countRejectsFrom(&outs[1])
		if err != nil {
			return nil, err
		}
		return Compare(m, info.State, out, rejects, refused), nil
	}
	st, err := ReadState(dir)
	if err != nil {
		return nil, err
	}
	out, err := ReadOutput(filepath.Join(dir, outputFile))
	if err != nil {
		return nil, err
	}
	rejects, refused, err := CountRejects(filepath.Join(dir, rejectsFile))
	if err != nil {
		return nil, err
	}
	return Compare(m, st, out, rejects, refused), nil
}

func cmdCheck(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var inputs stringList
	fs.Var(&inputs, "input", "the input file; several --input are read one after the other, as one input")
	dir := fs.String("data", "", "the run's data folder")
	source := fs.String("source", "", "a partitioned ledger: its stream, nats://HOST:PORT/STREAM (with --store; --input then checks that the stream holds the input once)")
	store := fs.String("store", "", "with --source: the PostgreSQL database of the partitions' stores, postgres://…; with --data, the database of a PostgreSQL data folder's store (default: the one its POSTGRES file records)")
	job := fs.String("job", defaultJob, "with --source: the job's name (its stores are JOB/STREAM/P)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: ledger check --input PATH --data DIR [--store postgres://…]\n       ledger check --source nats://HOST:PORT/STREAM --store postgres://… [--input PATH]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *source != "" || (*store != "" && *dir == "") {
		if *source == "" || *store == "" || *dir != "" || fs.NArg() > 0 {
			fs.Usage()
			return 2
		}
		return checkPartitionedCmd(*source, *store, *job, inputs, stdout, stderr)
	}
	if len(inputs) == 0 || *dir == "" || fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	r, err := checkDir(*dir, *store, inputs)
	if err != nil {
		fmt.Fprintln(stderr, "ledger check:", err)
		return 1
	}
	r.Write(stdout)
	if !r.OK() {
		return 1
	}
	return 0
}

// countIDs compares the lines per id found (got) with those expected
// (want): how many are missing, how many are there too often, and how many
// have an id not expected at all.
func countIDs(want, got map[int64]int) (missing, twice, unknown int) {
	for id, w := range want {
		g := got[id]
		if g < w {
			missing += w - g
		} else {
			twice += g - w
		}
	}
	for id, g := range got {
		if _, ok := want[id]; !ok {
			unknown += g
		}
	}
	return missing, twice, unknown
}
