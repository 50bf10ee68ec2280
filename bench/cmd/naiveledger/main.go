// Command naiveledger is the ledger as a competent Go programmer writes it
// without tidemark: the baseline of the ledger rows of bench/cmd/benchtable.
// It is written plainly on purpose, as a user would, at the durability of
// `ledger run`:
//
//   - read the input with a bufio.Reader, parse `id,account,amount`, add
//     the amount to the account's balance;
//   - append `id,account,amount,balance` to output.csv;
//   - every -batch lines (and at the end) write the output bytes and sync
//     the file, then commit, in one transaction of the database, the
//     balances the batch changed, the input offset after the batch's last
//     line, the output's length, the count of lines applied and their
//     total (bbolt: one Update, with its two syncs; Pebble: one batch
//     committed with pebble.Sync);
//   - at start, read the offset and the output's length back, cut the
//     output to that length (bytes of a batch whose commit never
//     happened), and read the input on from the offset.
//
// With -store postgres (-dsn postgres://…), the database is PostgreSQL
// through pgx, and the output is kept as `ledger run --store postgres://`
// keeps it: in the database, the batch's output lines one bytea row of
// table naive_output, written in the batch's transaction with the
// balances (one INSERT … ON CONFLICT DO UPDATE of them all, from arrays)
// and the meta keys; so there is no output.csv to cut back. Its tables
// (naive_balances, naive_meta, naive_output) are made in the first schema
// of the DSN's search_path if missing.
//
// So a kill loses nothing and applies nothing twice, like `ledger run`.
// Two variants keep the balances differently:
//
//	-mode map      every balance in a map, loaded from the database at start
//	-mode bounded  only the batch's balances in memory; a balance the batch
//	               has not seen yet is read from the database
//
// The databases are opened with their default options. Usage:
//
//	naiveledger -input ledger.csv -data DIR [-store bbolt|pebble] [-mode map|bounded] [-batch 10000] [-events]
//	naiveledger -input ledger.csv -data DIR -store postgres -dsn postgres://USER@HOST:PORT/DB [-mode map|bounded] [-batch 10000] [-events]
package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/cockroachdb/pebble/v2"
	bolt "go.etcd.io/bbolt"
)

func main() {
	input := flag.String("input", "", "the ledger file")
	data := flag.String("data", "", "the data folder: the database and output.csv")
	store := flag.String("store", "bbolt", "bbolt, pebble or postgres (with -dsn)")
	dsn := flag.String("dsn", "", "with -store postgres: the database, postgres://USER@HOST:PORT/DB")
	mode := flag.String("mode", "map", "map (every balance in memory) or bounded (only the batch's)")
	batch := flag.Int("batch", 10000, "lines per transaction")
	flag.BoolVar(&events, "events", false, "print `durable applied=N` to stdout after each commit, as ledger run --events does")
	flag.Parse()
	if *input == "" || *data == "" || *batch < 1 || (*mode != "map" && *mode != "bounded") || (*store == "postgres") != (*dsn != "") {
		flag.Usage()
		os.Exit(2)
	}
	start := time.Now()
	n, err := run(*input, *data, *store, *dsn, *mode == "map", *batch)
	if err != nil {
		fmt.Fprintln(os.Stderr, "naiveledger:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "naiveledger: %d lines in %v\n", n, time.Since(start).Round(time.Millisecond))
}

// events is -events: a line to stdout after each commit, so that a
// benchmark times the commits as they come (bench/cmd/benchtable's row 7
// against ledger run --sync --events), not the program's start.
var events bool

// db is what the program needs of its database.
type db interface {
	// meta returns the value of a meta key (0 when absent).
	meta(key string) (int64, error)
	// balance reads one balance.
	balance(account []byte) (int64, bool, error)
	// all calls fn for every balance.
	all(fn func(account []byte, balance int64)) error
	// commit writes the changed balances and the meta keys in one
	// durable transaction.
	commit(changed []*account, meta map[string]int64) error
	close() error
}

// account is a balance in memory.
type account struct {
	name    string
	balance int64
	changed bool // in this batch
}

// outputDB is a database that keeps the output itself (PostgreSQL): a
// batch's output bytes are written in its transaction, not to output.csv.
type outputDB interface {
	commitWithOutput(changed []*account, meta map[string]int64, at int64, out []byte) error
}

func run(input, data, store, dsn string, all bool, batch int) (int64, error) {
	if err := os.MkdirAll(data, 0o755); err != nil {
		return 0, err
	}
	var d db
	var err error
	switch store {
	case "bbolt":
		d, err = openBolt(filepath.Join(data, "naive.bolt"))
	case "pebble":
		d, err = openPebble(filepath.Join(data, "naive.pebble"))
	case "postgres":
		d, err = openPG(dsn)
	default:
		err = fmt.Errorf("unknown store %q", store)
	}
	if err != nil {
		return 0, err
	}
	n, err := process(d, input, data, all, batch)
	return n, errors.Join(err, d.close())
}

func process(d db, input, data string, all bool, batch int) (int64, error) {
	offset, err := d.meta("offset")
	if err != nil {
		return 0, err
	}
	outLen, err := d.meta("output")
	if err != nil {
		return 0, err
	}
	applied, err := d.meta("applied")
	if err != nil {
		return 0, err
	}
	total, err := d.meta("total")
	if err != nil {
		return 0, err
	}

	// The output: bytes past the committed length are of a batch that
	// never committed; its lines are read again. A database that keeps
	// the output has none of those.
	odb, outInDB := d.(outputDB)
	var out *os.File
	if !outInDB {
		out, err = os.OpenFile(filepath.Join(data, "output.csv"), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return 0, err
		}
		defer out.Close()
		if err := out.Truncate(outLen); err != nil {
			return 0, err
		}
		if _, err := out.Seek(outLen, io.SeekStart); err != nil {
			return 0, err
		}
	}

	balances := make(map[string]*account)
	if all {
		err := d.all(func(a []byte, b int64) {
			balances[string(a)] = &account{name: string(a), balance: b}
		})
		if err != nil {
			return 0, err
		}
	}

	in, err := os.Open(input)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	if _, err := in.Seek(offset, io.SeekStart); err != nil {
		return 0, err
	}
	r := bufio.NewReaderSize(in, 64<<10)

	var buf []byte         // the batch's output
	var changed []*account // the batch's balances
	meta := map[string]int64{}
	inBatch := 0
	var lines int64
	commit := func() error {
		at := outLen
		if !outInDB {
			if _, err := out.Write(buf); err != nil {
				return err
			}
			if err := out.Sync(); err != nil {
				return err
			}
		}
		outLen += int64(len(buf))
		meta["offset"], meta["output"], meta["applied"], meta["total"] = offset, outLen, applied, total
		if outInDB {
			err = odb.commitWithOutput(changed, meta, at, buf)
		} else {
			err = d.commit(changed, meta)
		}
		buf = buf[:0]
		if err != nil {
			return err
		}
		if events {
			fmt.Printf("durable applied=%d\n", applied)
		}
		for _, a := range changed {
			a.changed = false
		}
		changed = changed[:0]
		if !all {
			clear(balances)
		}
		inBatch = 0
		return nil
	}
	for {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			return lines, fmt.Errorf("line at offset %d longer than 64 KiB", offset)
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return lines, err
		}
		if len(line) == 0 || line[len(line)-1] != '\n' {
			break // the end, or a line not finished yet
		}
		offset += int64(len(line))
		lines++
		id, acct, amount, ok := parse(line[:len(line)-1])
		if ok {
			a := balances[string(acct)]
			if a == nil {
				a = &account{name: string(acct)}
				if !all {
					b, _, err := d.balance(acct)
					if err != nil {
						return lines, err
					}
					a.balance = b
				}
				balances[a.name] = a
			}
			a.balance += amount
			if !a.changed {
				a.changed = true
				changed = append(changed, a)
			}
			applied++
			total += amount
			buf = strconv.AppendInt(buf, id, 10)
			buf = append(buf, ',')
			buf = append(buf, acct...)
			buf = append(buf, ',')
			buf = strconv.AppendInt(buf, amount, 10)
			buf = append(buf, ',')
			buf = strconv.AppendInt(buf, a.balance, 10)
			buf = append(buf, '\n')
		}
		inBatch++
		if inBatch == batch {
			if err := commit(); err != nil {
				return lines, err
			}
		}
	}
	if inBatch > 0 {
		if err := commit(); err != nil {
			return lines, err
		}
	}
	return lines, nil
}

// parse splits `id,account,amount`.
func parse(line []byte) (id int64, acct []byte, amount int64, ok bool) {
	f1, rest, ok1 := bytes.Cut(line, []byte{','})
	f2, f3, ok2 := bytes.Cut(rest, []byte{','})
	if !ok1 || !ok2 || len(f2) == 0 {
		return 0, nil, 0, false
	}
	id, err1 := strconv.ParseInt(string(f1), 10, 64)
	amount, err2 := strconv.ParseInt(string(f3), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, nil, 0, false
	}
	return id, f2, amount, true
}

func be64(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }

// bbolt: a bucket of balances and a bucket of meta keys.
type boltDB struct{ db *bolt.DB }

var (
	balancesBucket = []byte("balances")
	metaBucket     = []byte("meta")
)

func openBolt(path string) (*boltDB, error) {
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		return nil, err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		if _, err := tx.CreateBucketIfNotExists(balancesBucket); err != nil {
			return err
		}
		_, err := tx.CreateBucketIfNotExists(metaBucket)
		return err
	})
	if err != nil {
		return nil, errors.Join(err, db.Close())
	}
	return &boltDB{db: db}, nil
}

func (b *boltDB) meta(key string) (n int64, err error) {
	err = b.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(metaBucket).Get([]byte(key)); len(v) == 8 {
			n = int64(binary.BigEndian.Uint64(v))
		}
		return nil
	})
	return n, err
}

func (b *boltDB) balance(a []byte) (n int64, ok bool, err error) {
	err = b.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(balancesBucket).Get(a); len(v) == 8 {
			n, ok = int64(binary.BigEndian.Uint64(v)), true
		}
		return nil
	})
	return n, ok, err
}

func (b *boltDB) all(fn func([]byte, int64)) error {
	return b.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(balancesBucket).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			fn(k, int64(binary.BigEndian.Uint64(v)))
		}
		return nil
	})
}

func (b *boltDB) commit(changed []*account, meta map[string]int64) error {
	return b.db.Update(func(tx *bolt.Tx) error {
		bb := tx.Bucket(balancesBucket)
		for _, a := range changed {
			if err := bb.Put([]byte(a.name), be64(a.balance)); err != nil {
				return err
			}
		}
		mb := tx.Bucket(metaBucket)
		for k, v := range meta {
			if err := mb.Put([]byte(k), be64(v)); err != nil {
				return err
			}
		}
		return nil
	})
}

func (b *boltDB) close() error { return b.db.Close() }

// Pebble: balances under "b/", meta keys under "m/".
type pebbleDB struct{ db *pebble.DB }

func openPebble(path string) (*pebbleDB, error) {
	db, err := pebble.Open(path, &pebble.Options{Logger: quiet{}})
	if err != nil {
		return nil, err
	}
	return &pebbleDB{db: db}, nil
}

func (p *pebbleDB) get(key []byte) (int64, bool, error) {
	v, closer, err := p.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	defer closer.Close()
	if len(v) != 8 {
		return 0, false, fmt.Errorf("key %q: %d bytes", key, len(v))
	}
	return int64(binary.BigEndian.Uint64(v)), true, nil
}

func (p *pebbleDB) meta(key string) (int64, error) {
	n, _, err := p.get([]byte("m/" + key))
	return n, err
}

func (p *pebbleDB) balance(a []byte) (int64, bool, error) {
	return p.get(append([]byte("b/"), a...))
}

func (p *pebbleDB) all(fn func([]byte, int64)) error {
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: []byte("b/"), UpperBound: []byte("b0")})
	if err != nil {
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		fn(it.Key()[2:], int64(binary.BigEndian.Uint64(it.Value())))
	}
	return it.Close()
}

func (p *pebbleDB) commit(changed []*account, meta map[string]int64) error {
	b := p.db.NewBatch()
	defer b.Close()
	for _, a := range changed {
		if err := b.Set([]byte("b/"+a.name), be64(a.balance), nil); err != nil {
			return err
		}
	}
	for k, v := range meta {
		if err := b.Set([]byte("m/"+k), be64(v), nil); err != nil {
			return err
		}
	}
	return b.Commit(pebble.Sync)
}

func (p *pebbleDB) close() error { return p.db.Close() }

type quiet struct{}

func (quiet) Infof(string, ...any) {}
func (quiet) Errorf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "pebble: "+format+"\n", args...)
}
func (quiet) Fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "pebble: "+format+"\n", args...)
	os.Exit(1)
}
