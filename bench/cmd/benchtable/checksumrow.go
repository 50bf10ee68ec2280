package main

import (
	"bytes"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2"
	bolt "go.etcd.io/bbolt"

	"github.com/tidemark-go/tidemark/bench"
	"github.com/tidemark-go/tidemark/state"
)

// Row 19: what the value checksums cost ledger run. Every value a store of
// format 2 or later writes carries a CRC-32C of its key and bytes, checked
// on every read; a store of format 1, made before them, is read and
// written without them, as it is. The row runs `ledger run` over the same
// input into a store of format 3 (checksumFormat: format 2 with output
// records that may hold a tail) and into a store of format 1, alternated,
// in the same run: the ratio is format 3 against format 1. A new store is
// of format 3 (Pebble) or 4 (bbolt, whose tables then have buckets of
// their own, which would weigh in the ratio), so the bench makes both
// folders itself, empty, as the versions of those formats left a new one
// (formatStore). Each store is checked to hold its format after its run:
// a store format that changes again makes the row say so rather than
// compare what it does not name.

// checksumFormat is the format of the row's stores with value checksums.
const checksumFormat = 3

// checksumAccounts is the number of accounts of row 19: the balances stay
// in the store's cache, so the row weighs the checksums of writes and of
// the reads that miss it.
const checksumAccounts = 10_000

func (r *runner) checksumRow(t *table) error {
	if !r.wants("19") {
		return nil
	}
	if r.ledgerBin == "" {
		if err := r.buildPrograms(); err != nil {
			return err
		}
	}
	lines := int64(2_000_000)
	if r.cfg.short {
		lines = 200_000
	}
	dir := filepath.Join(r.work, "checksums")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	input := filepath.Join(dir, "ledger.csv")
	if err := genFile(input, func(f *os.File) error { return bench.GenAccounts(f, int(lines), checksumAccounts, 1, 19) }); err != nil {
		return err
	}
	for _, store := range []string{"bbolt", "pebble"} {
		formats := []struct {
			format int
			x      *runs
		}{
			{checksumFormat, &runs{spec: spec{label: fmt.Sprintf("format %d, value checksums", checksumFormat)}}},
			{1, &runs{spec: spec{label: "format 1, no value checksums"}}},
		}
		l := &ledgerLine{input: input, data: filepath.Join(dir, "data"), lines: lines}
		for rep := range r.cfg.reps {
			for _, f := range formats {
				if f.x.err != nil {
					continue
				}
				if err := resetLedger(l); err != nil {
					return err
				}
				if err := formatStore(l.data, store, f.format); err != nil {
					return fmt.Errorf("row 19: %w", err)
				}
				rr, err := r.runLedger(variantTidemark, store, l, lines, 0, 0)
				if err == nil {
					err = checkFormat(l.data, store, f.format)
				}
				if err != nil {
					f.x.err = err
					logf("row 19 %s format %d: %v", store, f.format, err)
					continue
				}
				f.x.res = append(f.x.res, rr)
				logf("row 19 %s format %d run %d: %s in %.3f s (%s), load %.2f", store, f.format, rep+1,
					fmtCount(rr.Lines), rr.Seconds, fmtRate(rr.rate()), rr.Extra["load1"])
			}
		}
		t.rate("19", fmt.Sprintf("value checksums: ledger run (with output.csv), %s, %s accounts, %s lines into an empty store of format %d (a CRC-32C with every value, checked on every read)",
			store, fmtCount(checksumAccounts), fmtCount(lines), checksumFormat),
			formats[0].x, formats[1].x, "the same run into a store of format 1 (no checksums)", 0)
	}
	return nil
}

// formatStore makes dir an empty store of format n of backend store, as
// the version of tidemark of that format left a new one: its STORE file,
// and the backend holding the format record (key "v", the only record) in
// bbolt's bucket "tidemark", or at the top of Pebble's keys. ledger run
// then opens it as an existing store and keeps its format.
func formatStore(dir, store string, n int) error {
	key, format := "v", fmt.Sprintf("tidemark-state %d", n)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	switch store {
	case "bbolt":
		db, err := bolt.Open(filepath.Join(dir, "state.bolt"), 0o600, nil)
		if err != nil {
			return err
		}
		err = db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucket([]byte("tidemark"))
			if err != nil {
				return err
			}
			return b.Put([]byte(key), []byte(format))
		})
		if cerr := db.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	case "pebble":
		db, err := pebble.Open(filepath.Join(dir, "pebble"), &pebble.Options{FormatMajorVersion: pebble.FormatWALSyncChunks, Logger: quietPebble{}})
		if err != nil {
			return err
		}
		err = db.Set([]byte(key), []byte(format), pebble.Sync)
		if cerr := db.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	default:
		return fmt.Errorf("backend %q", store)
	}
	return os.WriteFile(filepath.Join(dir, "STORE"), []byte("tidemark state store\nbackend "+store+"\n"), 0o644)
}

// checkFormat checks that the store in dir kept format.
func checkFormat(dir, store string, format int) error {
	got, err := readFormat(dir, store)
	if err != nil {
		return err
	}
	if want := fmt.Sprintf("tidemark-state %d", format); got != want {
		return fmt.Errorf("the store of %s holds format %q after the run, want %q", dir, got, want)
	}
	return nil
}

// newStoreFormat returns the format record of a store of backend store
// that tidemark makes new: one made in a folder of the bench's own.
func newStoreFormat(work, store string) (string, error) {
	dir, err := os.MkdirTemp(work, "format-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	st, err := state.Open(store+":"+dir, &state.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return "", err
	}
	if err := st.Close(); err != nil {
		return "", err
	}
	return readFormat(dir, store)
}

// readFormat returns the format record of the closed store in dir.
func readFormat(dir, store string) (string, error) {
	var got []byte
	switch store {
	case "bbolt":
		db, err := bolt.Open(filepath.Join(dir, "state.bolt"), 0o600, &bolt.Options{ReadOnly: true})
		if err != nil {
			return "", err
		}
		err = db.View(func(tx *bolt.Tx) error {
			if b := tx.Bucket([]byte("tidemark")); b != nil {
				got = bytes.Clone(b.Get([]byte("v")))
			}
			return nil
		})
		if cerr := db.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return "", err
		}
	case "pebble":
		db, err := pebble.Open(filepath.Join(dir, "pebble"), &pebble.Options{ReadOnly: true, Logger: quietPebble{}})
		if err != nil {
			return "", err
		}
		v, closer, err := db.Get([]byte("v"))
		if err == nil {
			got = bytes.Clone(v)
			err = closer.Close()
		}
		if cerr := db.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return "", err
		}
	default:
		return "", fmt.Errorf("backend %q", store)
	}
	return string(got), nil
}

// quietPebble keeps Pebble's messages out of the bench's output.
type quietPebble struct{}

func (quietPebble) Infof(string, ...any)           {}
func (quietPebble) Errorf(string, ...any)          {}
func (quietPebble) Fatalf(format string, a ...any) { log.Fatalf(format, a...) }
