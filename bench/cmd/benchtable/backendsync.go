package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/tidemark-go/tidemark/bench"
	bolt "go.etcd.io/bbolt"
)

// caseBackendSync is a baseline of row 7's ledger --sync: the backend
// alone, as bench/cmd/naiveledger -batch 1 uses it, a.ops times: one
// durable transaction a line that writes the line's balance (one of the
// row's input's bench.Accounts) and the meta keys the naive program
// commits with it, but the output's length (the row's ledger has no
// output file): offset, applied, total. For bbolt one Update of
// a balances bucket and a meta bucket (bbolt's own commit: its pages, then
// its meta page, each synced); for Pebble one batch committed with
// pebble.Sync (an append to its log and its sync). A first transaction,
// not timed, makes the buckets, as the row times from the first line's
// durable save. What separates the row's ledger from this baseline is
// tidemark's, not the backend's: the line's hand-offs between goroutines,
// the store's records and pages.
func caseBackendSync(a childArgs) (result, error) {
	dir, err := os.MkdirTemp(a.work, "backend-sync-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	var write func(i int) error
	var applied func() (int64, error) // meta's applied, read back
	var closeDB func() error
	switch a.backend {
	case "bbolt":
		db, err := bolt.Open(dir+"/b.db", 0o600, nil)
		if err != nil {
			return result{}, err
		}
		closeDB = db.Close
		applied = func() (n int64, err error) {
			err = db.View(func(tx *bolt.Tx) error {
				n = fromBE64(tx.Bucket([]byte("meta")).Get([]byte("applied")))
				return nil
			})
			return n, err
		}
		write = func(i int) error {
			return db.Update(func(tx *bolt.Tx) error {
				bb, err := tx.CreateBucketIfNotExists([]byte("balances"))
				if err != nil {
					return err
				}
				mb, err := tx.CreateBucketIfNotExists([]byte("meta"))
				if err != nil {
					return err
				}
				if err := bb.Put(backendAccount(i), be64(int64(i))); err != nil {
					return err
				}
				for _, k := range backendMeta {
					if err := mb.Put(k, be64(int64(i))); err != nil {
						return err
					}
				}
				return nil
			})
		}
	case "pebble":
		db, err := pebble.Open(dir, &pebble.Options{Logger: quietPebble{}})
		if err != nil {
			return result{}, err
		}
		closeDB = db.Close
		applied = func() (int64, error) {
			v, c, err := db.Get([]byte("m/applied"))
			if err != nil {
				return 0, err
			}
			defer c.Close()
			return fromBE64(v), nil
		}
		write = func(i int) error {
			b := db.NewBatch()
			defer b.Close()
			if err := b.Set(append([]byte("b/"), backendAccount(i)...), be64(int64(i)), nil); err != nil {
				return err
			}
			for _, k := range backendMeta {
				if err := b.Set(append([]byte("m/"), k...), be64(int64(i)), nil); err != nil {
					return err
				}
			}
			return b.Commit(pebble.Sync)
		}
	default:
		return result{}, fmt.Errorf("backend %q: want bbolt or pebble", a.backend)
	}
	if err := write(0); err != nil {
		return result{}, errors.Join(err, closeDB())
	}
	start := time.Now()
	for i := 1; i <= a.ops; i++ {
		if err := write(i); err != nil {
			return result{}, errors.Join(err, closeDB())
		}
	}
	el := time.Since(start).Seconds()
	n, err := applied()
	if err == nil && n != int64(a.ops) {
		err = fmt.Errorf("%s alone: applied %d after %d transactions", a.backend, n, a.ops)
	}
	if err := errors.Join(err, closeDB()); err != nil {
		return result{}, err
	}
	return result{Lines: int64(a.ops), Seconds: el}, nil
}

// backendMeta are the keys naiveledger commits beside the balances, but
// the output's length.
var backendMeta = [][]byte{[]byte("offset"), []byte("applied"), []byte("total")}

// backendAccount is the account of line i, one of the row's input's.
func backendAccount(i int) []byte {
	return []byte(bench.AccountName(i % bench.Accounts))
}

func be64(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }

// fromBE64 reads be64's bytes; -1 for any other length.
func fromBE64(b []byte) int64 {
	if len(b) != 8 {
		return -1
	}
	return int64(binary.BigEndian.Uint64(b))
}
