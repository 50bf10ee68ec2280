package bench

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
)

// Accounts is the number of distinct accounts of a generated ledger.
const Accounts = 100

// AccountName returns the name of account i.
func AccountName(i int) string { return fmt.Sprintf("account-holder-%05d", i) }

// GenLedger writes lines ledger lines `id,account,amount` to w, ids from
// firstID, accounts and amounts drawn from a generator seeded with seed: the
// same arguments give the same bytes. Lines average about 36 bytes.
func GenLedger(w io.Writer, lines int, firstID int64, seed uint64) error {
	names := make([][]byte, Accounts)
	for i := range names {
		names[i] = []byte(AccountName(i))
	}
	rng := rand.New(rand.NewPCG(seed, 0x7de3a2c))
	return genLines(w, lines, firstID, rng, func(buf []byte, _ int) []byte {
		return append(buf, names[rng.IntN(Accounts)]...)
	})
}

// GenLedgerFile writes a ledger of lines lines to path (see GenLedger).
func GenLedgerFile(path string, lines int, seed uint64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := GenLedger(f, lines, 1, seed); err != nil {
		return errors.Join(err, f.Close())
	}
	return f.Close()
}

// Accounts of the ledger rows (bench/cmd/benchtable): how a ledger of
// many accounts names them, and how one is written.

// ManyAccountName returns the name of account i of a ledger of many
// accounts (16 bytes up to 100,000,000 accounts).
func ManyAccountName(i int) string { return fmt.Sprintf("account-%08d", i) }

// GenAccounts writes lines ledger lines to w whose accounts are drawn
// uniformly from accounts accounts (ManyAccountName), ids from firstID,
// from a generator seeded with seed: the same arguments give the same
// bytes.
func GenAccounts(w io.Writer, lines, accounts int, firstID int64, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 0x5ca1e))
	return genLines(w, lines, firstID, rng, func(buf []byte, _ int) []byte { return appendMany(buf, rng.IntN(accounts)) })
}

// GenEveryAccount writes one ledger line for each of accounts accounts, in
// their order, ids from firstID: a ledger that gives a store every
// account.
func GenEveryAccount(w io.Writer, accounts int, firstID int64, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 0xe4e7))
	return genLines(w, accounts, firstID, rng, appendMany)
}

// appendMany appends ManyAccountName(a).
func appendMany(buf []byte, a int) []byte {
	buf = append(buf, "account-"...)
	for d := 10_000_000; d > 1 && a < d; d /= 10 {
		buf = append(buf, '0')
	}
	return strconv.AppendInt(buf, int64(a), 10)
}

// genLines writes lines ledger lines, ids from firstID, the account of line
// i appended by account, the amounts drawn from rng after it.
func genLines(w io.Writer, lines int, firstID int64, rng *rand.Rand, account func(buf []byte, i int) []byte) error {
	bw := bufio.NewWriterSize(w, 256<<10)
	var buf []byte
	for i := range lines {
		buf = strconv.AppendInt(buf[:0], firstID+int64(i), 10)
		buf = append(buf, ',')
		buf = account(buf, i)
		buf = append(buf, ',')
		buf = strconv.AppendInt(buf, rng.Int64N(200001)-50000, 10)
		buf = append(buf, '\n')
		if _, err := bw.Write(buf); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// ErrMalformed is returned by ParseLedgerLine for a line that is not
// `id,account,amount`.
var ErrMalformed = errors.New("bench: malformed ledger line")

// ParseLedgerLine splits a ledger line into its id, account and amount
// without allocating. account aliases line.
func ParseLedgerLine(line []byte) (id int64, account []byte, amount int64, err error) {
	i := 0
	for i < len(line) && line[i] != ',' {
		c := line[i]
		if c < '0' || c > '9' {
			return 0, nil, 0, ErrMalformed
		}
		id = id*10 + int64(c-'0')
		i++
	}
	if i == 0 || i == len(line) {
		return 0, nil, 0, ErrMalformed
	}
	i++
	start := i
	for i < len(line) && line[i] != ',' {
		i++
	}
	if i == start || i == len(line) {
		return 0, nil, 0, ErrMalformed
	}
	account = line[start:i]
	i++
	neg := false
	if i < len(line) && (line[i] == '-' || line[i] == '+') {
		neg = line[i] == '-'
		i++
	}
	if i == len(line) {
		return 0, nil, 0, ErrMalformed
	}
	for ; i < len(line); i++ {
		c := line[i]
		if c < '0' || c > '9' {
			return 0, nil, 0, ErrMalformed
		}
		amount = amount*10 + int64(c-'0')
	}
	if neg {
		amount = -amount
	}
	return id, account, amount, nil
}
