package state

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"

	"github.com/jackc/pgx/v5"
	bolt "go.etcd.io/bbolt"
)

// Iteration, snapshots and backup of the PostgreSQL backend.
//
// A cursor inside Apply and View reads pages of rows, each a query of its
// own through the pool (the read cache is a map, not in key order, so an
// iteration always asks the server). A snapshot is a REPEATABLE READ, READ
// ONLY transaction on a connection of its own: its first query fixes what
// it sees, and every page and read of it sees the same. It holds back
// VACUUM's horizon while it lasts, as any long transaction does.

// pgQuerier runs a query: the pool, or a snapshot's transaction.
type pgQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func (e *pgEngine) cursor(lo, hi []byte, reverse bool) cursor {
	return &pager{lo: lo, hi: hi, rev: reverse, want: firstPage, fill: func(p *pager) error {
		ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
		defer cancel()
		return e.fillPage(ctx, e.pool, p)
	}}
}

// fillPage reads the page of p that follows its last key.
func (e *pgEngine) fillPage(ctx context.Context, q pgQuerier, p *pager) error {
	sql, args := e.pageQuery(p)
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("postgres store %q: read keys: %w", e.store, err)
	}
	defer rows.Close()
	n, full := 0, false
	for rows.Next() {
		raw := rows.RawValues()
		n++
		if full = p.add(raw[0], raw[1]); full {
			break
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("postgres store %q: read keys: %w", e.store, err)
	}
	// A page shorter than asked for is the last.
	p.end = !full && n < p.want
	return nil
}

// pageQuery returns the query of the page of p that follows its last key,
// and its arguments.
func (e *pgEngine) pageQuery(p *pager) (string, []any) {
	sql := `SELECT k, v FROM ` + e.rows.table + ` WHERE ` + e.rows.col + ` = $1`
	args := []any{e.id}
	lo := p.lo
	if lo == nil {
		lo = []byte{} // the least bytea; nil would be NULL
	}
	arg := func(cond string, v []byte) {
		args = append(args, v)
		sql += fmt.Sprintf(" AND k %s $%d", cond, len(args))
	}
	switch {
	case p.started && p.rev:
		arg(">=", lo)
		arg("<", p.last)
	case p.started:
		arg(">", p.last)
		if p.hi != nil {
			arg("<", p.hi)
		}
	default:
		arg(">=", lo)
		if p.hi != nil {
			arg("<", p.hi)
		}
	}
	if p.rev {
		sql += " ORDER BY k DESC"
	} else {
		sql += " ORDER BY k"
	}
	sql += fmt.Sprintf(" LIMIT %d", p.want)
	return sql, args
}

// pgSnap is a snapshot of a PostgreSQL store: a REPEATABLE READ, READ
// ONLY transaction on a connection of its own.
type pgSnap struct {
	e    *pgEngine
	ctx  context.Context
	conn *pgx.Conn
	tx   pgx.Tx
}

func (e *pgEngine) snapshot(ctx context.Context) (snapshot, error) {
	conn, err := pgx.ConnectConfig(ctx, e.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, fmt.Errorf("postgres store %q: connect for a snapshot: %w", e.store, err)
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err == nil {
		// A snapshot waits between its reads for its caller: it is not a
		// stuck writer (see parsePostgres).
		_, err = tx.Exec(ctx, `SET LOCAL idle_in_transaction_session_timeout = 0`)
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("postgres store %q: begin a snapshot: %w", e.store, err), conn.Close(context.Background()))
	}
	return &pgSnap{e: e, ctx: ctx, conn: conn, tx: tx}, nil
}

func (s *pgSnap) get(key []byte) ([]byte, bool, error) {
	var v []byte
	err := s.tx.QueryRow(s.ctx, s.e.rows.get, s.e.id, key).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("postgres store %q: read key %q: %w", s.e.store, key, err)
	}
	if v == nil {
		v = []byte{}
	}
	return v, true, nil
}

func (s *pgSnap) cursor(lo, hi []byte, reverse bool) cursor {
	return &pager{lo: lo, hi: hi, rev: reverse, want: firstPage, fill: func(p *pager) error {
		return s.e.fillPage(s.ctx, s.tx, p)
	}}
}

func (s *pgSnap) close() error {
	ctx := context.Background()
	return errors.Join(s.tx.Rollback(ctx), s.conn.Close(ctx))
}

// backup copies a snapshot of the store into a bbolt store in dir: the
// same keys, but for the outputs' bytes, which become files of the folder
// as a bbolt store keeps them. So the copy is a local store that opens
// as any other (see Store.Backup).
func (e *pgEngine) backup(ctx context.Context, dir string, verify func(k, v []byte) ([]byte, error)) (_ string, _ map[string]int64, err error) {
	s, err := e.snapshot(ctx)
	if err != nil {
		return "", nil, err
	}
	defer func() { err = errors.Join(err, s.close()) }()
	outs, err := outputLengths(s, verify)
	if err != nil {
		return "", nil, err
	}
	path := filepath.Join(dir, boltFile)
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoSync: true, NoFreelistSync: true})
	if err != nil {
		return "", nil, fmt.Errorf("create %s: %w", path, err)
	}
	defer func() { err = errors.Join(err, db.Close()) }()
	files := make(map[string]*os.File)
	defer func() {
		for _, f := range files {
			err = errors.Join(err, f.Close())
		}
	}()
	written := make(map[string]int64)
	sums := make(map[string]uint32)
	c := s.cursor(nil, nil, false)
	for more := true; more; {
		// Transactions of up to backupBatch bytes, keys in order.
		size := 0
		err = db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists(boltBucket)
			if err != nil {
				return err
			}
			b.FillPercent = 1 // keys come in order
			for size < backupBatch {
				if more = c.next(); !more {
					return c.err()
				}
				k, raw := c.key(), c.value()
				size += len(k) + len(raw)
				v := raw
				if verify != nil {
					if v, err = verify(k, raw); err != nil {
						return err
					}
				}
				switch {
				case isVersionKey(k) && string(raw) == formatV5:
					// The copy is a bbolt store of format 3, its keys in
					// its bucket: the format of the rows, less where they
					// were (see formats). The record has no checksum.
					if err := b.Put(k, []byte(formatVersion)); err != nil {
						return err
					}
				case isOutputChunk(k):
					if err := writeChunk(dir, files, written, sums, outs, k, v); err != nil {
						return err
					}
				case k[0] == tagOutput:
					// Rewritten below, with the checksum of the file.
				default:
					// As stored: the checksum covers the key, the same
					// in the copy.
					if err := b.Put(k, raw); err != nil {
						return err
					}
				}
			}
			return ctx.Err()
		})
		if err != nil {
			return "", nil, fmt.Errorf("copy into %s: %w", path, errors.Join(err, c.close()))
		}
	}
	for name, n := range outs {
		if files[name] == nil && validOutputName(name) {
			f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
			if err != nil {
				return "", nil, err
			}
			files[name] = f
		}
		if written[name] != n {
			return "", nil, fmt.Errorf("output %q: the chunks hold %d bytes of the %d committed: %w", name, written[name], n, ErrCorrupt)
		}
	}
	for _, f := range files {
		if err := f.Sync(); err != nil {
			return "", nil, err
		}
	}
	// The outputs are files in the copy, as in any local store: their
	// records get the checksum of the file's bytes, checked when the copy
	// opens (see Output), and a value checksum where the store has them.
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(boltBucket)
		if err != nil {
			return err
		}
		for name, n := range outs {
			k := outputKey(name)
			v := encodeOutputLen(n, sums[name], true)
			if verify != nil {
				v = binary.BigEndian.AppendUint32(v, valueSum(k, v))
			}
			if err := b.Put(k, v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return "", nil, fmt.Errorf("copy into %s: %w", path, err)
	}
	if err := db.Sync(); err != nil {
		return "", nil, err
	}
	return Bolt, outs, nil
}

// backupBatch is about the most bytes of one transaction of a backup's
// copy into bbolt.
const backupBatch = 16 << 20

// writeChunk writes an output chunk (key k, bytes v) to its output's file
// in dir, checking that the chunks follow each other up to the committed
// length, and adds v to the output's CRC-32C in sums.
func writeChunk(dir string, files map[string]*os.File, written map[string]int64, sums map[string]uint32, outs map[string]int64, k, v []byte) error {
	n, w := nameLen(k[1:])
	if w <= 0 || len(k) != 1+w+int(n)+8 {
		return fmt.Errorf("output chunk key %q: %w", k, ErrCorrupt)
	}
	name := string(k[1+w : 1+w+int(n)])
	at := int64(binary.BigEndian.Uint64(k[1+w+int(n):]))
	committed, ok := outs[name]
	switch {
	case !ok || !validOutputName(name):
		return fmt.Errorf("output chunk of %q, an output the store has no length of: %w", name, ErrCorrupt)
	case at != written[name] || at+int64(len(v)) > committed:
		return fmt.Errorf("output %q: chunk at %d of %d bytes, after %d bytes of %d committed: %w", name, at, len(v), written[name], committed, ErrCorrupt)
	}
	f := files[name]
	if f == nil {
		var err error
		if f, err = os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644); err != nil {
			return err
		}
		files[name] = f
	}
	if _, err := f.WriteAt(v, at); err != nil {
		return err
	}
	written[name] = at + int64(len(v))
	sums[name] = crc32.Update(sums[name], crcTable, v)
	return nil
}
