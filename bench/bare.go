package bench

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2"
	bolt "go.etcd.io/bbolt"
)

// bareLedger is the ledger without a framework: it reads the file with a
// bufio.Reader, keeps the balances in memory and hands the keys a batch
// changed to commit, every batch lines.
type bareLedger struct {
	balances map[string]*int64
	changed  map[string]struct{}
	applied  int64
	total    int64
	position int64
}

// BareKV is what a bare loop writes a batch to.
type bareKV interface {
	commit(keys [][2][]byte) error
	close() error
}

func runBare(path string, batch int, kv bareKV) (lines int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 64<<10)
	l := &bareLedger{balances: make(map[string]*int64, Accounts), changed: make(map[string]struct{}, Accounts)}
	inBatch := 0
	var keys [][2][]byte
	flush := func() error {
		keys = keys[:0]
		for a := range l.changed {
			keys = append(keys, [2][]byte{append([]byte("b/"), a...), be64(*l.balances[a])})
		}
		keys = append(keys, [2][]byte{[]byte("applied"), be64(l.applied)},
			[2][]byte{[]byte("total"), be64(l.total)},
			[2][]byte{[]byte("position"), be64(l.position)})
		clear(l.changed)
		inBatch = 0
		return kv.commit(keys)
	}
	for {
		line, err := r.ReadSlice('\n')
		if len(line) > 0 && line[len(line)-1] == '\n' {
			l.position += int64(len(line))
			_, account, amount, perr := ParseLedgerLine(line[:len(line)-1])
			if perr == nil {
				b := l.balances[string(account)]
				if b == nil {
					b = new(int64)
					l.balances[string(account)] = b
				}
				*b += amount
				if _, ok := l.changed[string(account)]; !ok {
					l.changed[string(account)] = struct{}{}
				}
				l.applied++
				l.total += amount
			}
			lines++
			inBatch++
			if inBatch == batch {
				if err := flush(); err != nil {
					return lines, err
				}
			}
		}
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				return lines, fmt.Errorf("line longer than the buffer")
			}
			break
		}
	}
	if inBatch > 0 {
		if err := flush(); err != nil {
			return lines, err
		}
	}
	return lines, nil
}

func be64(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }

// BareBolt runs the bare ledger loop over path, committing the keys each
// batch of lines changed in one bbolt transaction (synced, as bbolt does by
// default) to a new database in dir. It returns the lines read.
func BareBolt(dir, path string, batch int) (int64, error) {
	db, err := bolt.Open(filepath.Join(dir, "bare.bolt"), 0o600, nil)
	if err != nil {
		return 0, err
	}
	kv := &boltKV{db: db}
	n, err := runBare(path, batch, kv)
	return n, errors.Join(err, kv.close())
}

type boltKV struct{ db *bolt.DB }

var bareBucket = []byte("ledger")

func (k *boltKV) commit(keys [][2][]byte) error {
	return k.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bareBucket)
		if err != nil {
			return err
		}
		for _, kv := range keys {
			if err := b.Put(kv[0], kv[1]); err != nil {
				return err
			}
		}
		return nil
	})
}

func (k *boltKV) close() error { return k.db.Close() }

// BarePebble is BareBolt with Pebble: one synced batch per batch of lines.
func BarePebble(dir, path string, batch int) (int64, error) {
	db, err := pebble.Open(filepath.Join(dir, "bare.pebble"), &pebble.Options{Logger: quietPebble{}})
	if err != nil {
		return 0, err
	}
	kv := &pebbleKV{db: db}
	n, err := runBare(path, batch, kv)
	return n, errors.Join(err, kv.close())
}

type pebbleKV struct{ db *pebble.DB }

func (k *pebbleKV) commit(keys [][2][]byte) error {
	b := k.db.NewBatch()
	for _, kv := range keys {
		if err := b.Set(kv[0], kv[1], nil); err != nil {
			return errors.Join(err, b.Close())
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return errors.Join(err, b.Close())
	}
	return b.Close()
}

func (k *pebbleKV) close() error { return k.db.Close() }

type quietPebble struct{}

func (quietPebble) Infof(string, ...any)  {}
func (quietPebble) Errorf(string, ...any) {}
func (quietPebble) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}
