package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
)

// accountNames are the first accounts a generated ledger uses; more accounts
// get a numeric suffix. One name is not ASCII, to exercise UTF-8.
var accountNames = []string{
	"alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi",
	"ivan", "judy", "mallory", "niaj", "olivia", "peggy", "rupert",
	"sybil", "trent", "victor", "walter", "zoë",
}

// GenOptions describes a generated ledger.
type GenOptions struct {
	// Lines is the number of lines.
	Lines int
	// Accounts is the number of distinct accounts (at least 1).
	Accounts int
	// Seed makes the ledger reproducible: the same options give the same
	// bytes.
	Seed uint64
	// FirstID is the id of the first line; ids then count up by one. Zero
	// means 1.
	FirstID int64
	// MalformedEvery makes every n-th line malformed when n > 0.
	MalformedEvery int
}

// accountName returns the name of account i.
func accountName(i int) string {
	n := len(accountNames)
	if i < n {
		return accountNames[i]
	}
	return accountNames[i%n] + "-" + strconv.Itoa(i/n)
}

// malformedLines are the kinds of bad lines a generated ledger can contain.
var malformedLines = []string{
	"%d,%s",                      // a field missing
	"%d,%s,12.50",                // not cents
	"x%d,%s,100",                 // not an id
	"%d,,100",                    // no account
	"%d,%s,100,extra",            // a field too many
	"%d,%s,99999999999999999999", // too large
}

// Gen writes the ledger described by o to w.
func Gen(w io.Writer, o GenOptions) error {
	if o.Accounts < 1 {
		o.Accounts = 1
	}
	if o.FirstID == 0 {
		o.FirstID = 1
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0x1ed6e5))
	bw := bufio.NewWriterSize(w, 64<<10)
	var buf []byte
	for i := 0; i < o.Lines; i++ {
		id := o.FirstID + int64(i)
		account := accountName(rng.IntN(o.Accounts))
		amount := rng.Int64N(20001) - 5000 // -50.00 .. 150.00
		buf = buf[:0]
		if o.MalformedEvery > 0 && (i+1)%o.MalformedEvery == 0 {
			kind := malformedLines[(i/o.MalformedEvery)%len(malformedLines)]
			switch kind {
			case "%d,,100":
				buf = fmt.Appendf(buf, kind, id)
			default:
				buf = fmt.Appendf(buf, kind, id, account)
			}
			buf = append(buf, '\n')
		} else {
			buf = AppendLine(buf, Entry{ID: id, Account: account, Amount: amount})
		}
		if _, err := bw.Write(buf); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// GenFile writes the ledger described by o to path.
func GenFile(path string, o GenOptions) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := Gen(f, o); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func cmdGen(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	lines := fs.Int("lines", 0, "number of lines (required)")
	accounts := fs.Int("accounts", 20, "number of distinct accounts")
	seed := fs.Uint64("seed", 1, "seed: the same seed gives the same ledger")
	out := fs.String("out", "", "write to this file instead of stdout")
	firstID := fs.Int64("first-id", 1, "id of the first line")
	malformedEvery := fs.Int("malformed-every", 0, "make every n-th line malformed (0: none)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: ledger gen --lines N [--accounts K] [--seed S] [--out PATH]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *lines < 0 || *accounts < 1 || *firstID < 1 || *malformedEvery < 0 || fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	o := GenOptions{Lines: *lines, Accounts: *accounts, Seed: *seed, FirstID: *firstID, MalformedEvery: *malformedEvery}
	var err error
	if *out == "" {
		err = Gen(stdout, o)
	} else {
		err = GenFile(*out, o)
	}
	if err != nil {
		fmt.Fprintln(stderr, "ledger gen:", err)
		return 1
	}
	return 0
}
