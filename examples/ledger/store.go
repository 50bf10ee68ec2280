package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/state"
)

// Names of the ledger's server and of its state.
const (
	feedName      = "ledger"
	groupName     = "ledger-agent"
	processorName = "ledger"
	// namespace is the ledger's namespace in the store.
	namespace = "ledger"
)

// The ledger's tables in its namespace.
var (
	// balances holds one balance per account.
	balances = state.NewTable("balances", state.String{}, state.Int64{})
	// counters is the root bucket: the lines applied, the sum of their
	// amounts, and, when de-duplication is off, the last line applied as
	// the ledger records it itself in the same transaction (keyEpoch,
	// keyPosition): the store records it then no more (see applyDelivery).
	counters = state.NewTable("", state.String{}, state.Int64{})
)

// Keys of the counters.
const (
	keyApplied  = "applied"
	keyTotal    = "total"
	keyEpoch    = "epoch"
	keyPosition = "position"
)

// The counters each line adds to: a Counter finds where the save being
// staged holds its key without a lookup.
var (
	appliedCounter = counters.Counter(keyApplied)
	totalCounter   = counters.Counter(keyTotal)
)

// StoreInfo is what a data folder's store holds.
type StoreInfo struct {
	// Backend is the store's backend: bbolt or pebble.
	Backend string
	// State is the ledger's state.
	State LedgerState
	// Applied is the last line applied: the store's record when the run
	// de-duplicated, else the ledger's own.
	Applied tidemark.Applied
	// OutputCommitted is the committed length of output.csv.
	OutputCommitted int64
}

// openExisting opens the store of a data folder, whatever its backend: the
// store records it in the folder (a PostgreSQL one in DIR/POSTGRES, whose
// database dsn replaces when not ""). Opening cuts the output back to its
// committed length, as a restart would.
func openExisting(dir, dsn string) (state.Store, error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("data folder: %w", err)
	}
	folder, err := readPGFolder(dir)
	if err != nil {
		return nil, err
	}
	if folder != nil {
		return openPGFolder(dir, folder, dsn)
	}
	if dsn != "" {
		return nil, fmt.Errorf("data folder %s keeps no PostgreSQL store (no %s): leave --store out", dir, pgFolderFile)
	}
	return state.OpenDir(dir, &state.Options{LockTimeout: 5 * time.Second, Logger: discardLogger()})
}

// ReadStore reads the store of the data folder dir. No server may run on it.
func ReadStore(dir string) (StoreInfo, error) {
	info, _, err := readStore(dir, "", nil)
	return info, err
}

// readStore reads the store of the data folder dir (in the database dsn,
// when not "", for a PostgreSQL folder), and when outs is not nil, the
// committed bytes of the outputs output.csv and rejects.csv into them.
// No server may run on it.
func readStore(dir, dsn string, outs *[2]bytes.Buffer) (info StoreInfo, inDB bool, err error) {
	st, err := openExisting(dir, dsn)
	if err != nil {
		return info, false, err
	}
	defer func() { err = errors.Join(err, st.Close()) }()
	info.Backend = st.Backend()
	ns := st.Namespace(namespace)
	info.State, info.Applied, err = readLedger(ns)
	if err != nil {
		return info, false, err
	}
	if l, ok := ns.Applied(feedName); ok {
		info.Applied = l.Applied
	}
	out, err := st.Output(outputFile)
	if err != nil {
		return info, false, err
	}
	info.OutputCommitted = out.Committed()
	inDB = out.Path() == ""
	if outs != nil {
		for i, name := range []string{outputFile, rejectsFile} {
			o, err := st.Output(name)
			if err == nil {
				_, err = o.WriteTo(&outs[i])
			}
			if err != nil {
				return info, inDB, fmt.Errorf("output %s: %w", name, err)
			}
		}
	}
	return info, inDB, nil
}

// ReadState reads the ledger state of the data folder dir.
func ReadState(dir string) (LedgerState, error) {
	info, err := ReadStore(dir)
	return info.State, err
}

// readLedger reads the ledger's state as the store sees it (staged changes
// included) and the last position the ledger recorded itself.
func readLedger(ns state.Namespace) (st LedgerState, last tidemark.Applied, err error) {
	err = ns.View(func(tx *state.Tx) error {
		var err error
		st, last, err = readLedgerTx(tx)
		return err
	})
	return st, last, err
}

// readLedgerTx reads the ledger's state in tx; see readLedger.
func readLedgerTx(tx *state.Tx) (st LedgerState, last tidemark.Applied, err error) {
	st.Balances = make(map[string]int64)
	c := make(map[string]int64)
	for k, v := range counters.All(tx) {
		c[k] = v
	}
	st.Applied, st.Total = c[keyApplied], c[keyTotal]
	last = tidemark.Applied{Epoch: uint64(c[keyEpoch]), Position: c[keyPosition]}
	for account, bal := range balances.All(tx) {
		st.Balances[account] = bal
	}
	return st, last, tx.Err()
}

// applyLineOf applies one ledger line in tx: the balance, the counters,
// the output line, and, with own, the ledger's own record of d's position
// (without de-duplication the store records none; with it, the store's
// record is the one ReadStore reports, and two more writes a line would
// only repeat it). When account is not nil it is the bytes of e's account
// (e.Account is not read then), and when line is not nil, the input line
// of e as AppendLine writes it (without its newline; see parseCanonical):
// the output line is that line and the balance, its bytes copied rather
// than e formatted again. Both are parts of the delivered line: the
// balance's key is read from it, and no string is made of the account.
func applyLineOf(tx *state.Tx, e Entry, account, line []byte, d *tidemark.Delivery, own bool, buf []byte) ([]byte, error) {
	var bal int64
	var err error
	if account != nil {
		bal, err = balances.AddEncoded(tx, account, e.Amount)
	} else {
		bal, err = balances.Add(tx, e.Account, e.Amount)
	}
	if err != nil {
		return buf, err
	}
	if _, err := appliedCounter.Add(tx, 1); err != nil {
		return buf, err
	}
	if _, err := totalCounter.Add(tx, e.Amount); err != nil {
		return buf, err
	}
	if own && d.Epoch != 0 {
		if err := counters.Put(tx, keyEpoch, int64(d.Epoch)); err != nil {
			return buf, err
		}
		if err := counters.Put(tx, keyPosition, d.Position); err != nil {
			return buf, err
		}
	}
	if line != nil {
		buf = appendOutputOf(buf[:0], line, bal)
	} else {
		buf = AppendOutput(buf[:0], OutputLine{Entry: e, BalanceAfter: bal})
	}
	_, err = tx.Output(outputFile).Write(buf)
	return buf, err
}

// appendOutputOf appends the output line of a canonical input line (see
// parseCanonical) whose balance after it is bal: the line itself, then
// `,bal` and the newline.
func appendOutputOf(dst, line []byte, bal int64) []byte {
	dst = append(append(dst, line...), ',')
	dst = strconv.AppendInt(dst, bal, 10)
	return append(dst, '\n')
}

// cmdBalances prints one line `account,balance` per account in byte order,
// then `applied N` and `total T`.
func cmdBalances(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("balances", stderr, "usage: ledger balances --data DIR")
	dir := fs.String("data", "", "the run's data folder")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *dir == "" || fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	info, err := ReadStore(*dir)
	if err != nil {
		fmt.Fprintln(stderr, "ledger balances:", err)
		return 1
	}
	writeBalances(stdout, info.State)
	return 0
}

// writeBalances prints st as the balances command does.
func writeBalances(w io.Writer, st LedgerState) {
	for _, a := range sortedKeys(st.Balances) {
		fmt.Fprintf(w, "%s,%d\n", a, st.Balances[a])
	}
	fmt.Fprintf(w, "applied %d\n", st.Applied)
	fmt.Fprintf(w, "total %d\n", st.Total)
}

// flushAndClose is how a run ends: flush, then close the store.
func flushAndClose(ctx context.Context, st state.Store) error {
	return errors.Join(st.Flush(ctx), st.Close())
}

// dataPath joins a data folder and a file name.
func dataPath(dir, name string) string { return filepath.Join(dir, name) }

// cmdOutput writes the committed bytes of one of a data folder's outputs
// to stdout: how a PostgreSQL data folder's output.csv is read (its
// outputs are rows of its store); a bbolt or Pebble folder's are its
// files, which it copies the same way.
func cmdOutput(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("output", stderr, "usage: ledger output --data DIR [--name output.csv|rejects.csv] [--store postgres://…] > FILE")
	dir := fs.String("data", "", "the run's data folder")
	name := fs.String("name", outputFile, "the output: "+outputFile+" or "+rejectsFile)
	dsn := fs.String("store", "", "the database of a PostgreSQL data folder's store (default: the one its POSTGRES file records)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *dir == "" || fs.NArg() > 0 || (*name != outputFile && *name != rejectsFile) {
		fs.Usage()
		return 2
	}
	if err := writeOutput(stdout, *dir, *dsn, *name); err != nil {
		fmt.Fprintln(stderr, "ledger output:", err)
		return 1
	}
	return 0
}

// writeOutput writes the committed bytes of the output name of the data
// folder dir to w.
func writeOutput(w io.Writer, dir, dsn, name string) (err error) {
	st, err := openExisting(dir, dsn)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, st.Close()) }()
	o, err := st.Output(name)
	if err == nil {
		_, err = o.WriteTo(w)
	}
	if err != nil {
		return fmt.Errorf("output %s of %s: %w", name, dir, err)
	}
	return nil
}
