package main

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"errors"
	"io"
	"os"
	"strconv"
)

// Files of a data folder.
const (
	outputFile  = "output.csv"
	rejectsFile = "rejects.csv"
	storeFile   = "store" // the kind of store the run chose: "bbolt" or "pebble"
)

// rejectKey names a line: its epoch and position.
type rejectKey struct {
	epoch uint64
	pos   int64
}

// rejects.csv is written by the store (rejectout.go): one record
// `epoch,position,reason,line` per rejected line, exactly once.

// Refused is a well-formed line in the reject log: a line the run could
// not apply (its account too long for the store, say), as opposed to a
// malformed or oversize one.
type Refused struct {
	Entry
	Epoch    uint64
	Position int64
	Reason   string
}

// CountRejects returns the number of records in the reject log at path
// (a line recorded twice counts twice: the store writes each once), and
// the well-formed lines among them; a missing log has none.
func CountRejects(path string) (int, []Refused, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil, nil
	}
	if err != nil {
		return 0, nil, err
	}
	defer f.Close()
	return countRejectsFrom(f)
}

// countRejectsFrom is CountRejects of the reject log read from r (one
// kept in a database, read with state.Output.WriteTo).
func countRejectsFrom(r io.Reader) (int, []Refused, error) {
	var refused []Refused
	_, records, _, err := readRejects(r, func(k rejectKey, reason, line string) {
		if len(line) > maxLineBytes {
			return
		}
		if e, err := ParseLine([]byte(line)); err == nil {
			refused = append(refused, Refused{Entry: e, Epoch: k.epoch, Position: k.pos, Reason: reason})
		}
	})
	return records, refused, err
}

// readRejects reads the keys of the records of r, their number (a key
// recorded twice counts twice), and the length of its complete lines. Each record is one physical line: a rejected line has no
// "\n", and the CSV writer quotes a field with "\r". When each is not nil
// it is called with the reason and the line of every record whose key was
// not seen before.
func readRejects(r io.Reader, each func(k rejectKey, reason, line string)) (map[rejectKey]bool, int, int64, error) {
	seen := make(map[rejectKey]bool)
	br := bufio.NewReader(r)
	var end int64
	records := 0
	for {
		rec, err := br.ReadBytes('\n')
		if err == io.EOF {
			return seen, records, end, nil
		}
		if err != nil {
			return nil, 0, 0, err
		}
		end += int64(len(rec))
		fields := bytes.SplitN(rec, []byte{','}, 3)
		if len(fields) < 3 {
			continue
		}
		epoch, err1 := strconv.ParseUint(string(fields[0]), 10, 64)
		pos, err2 := strconv.ParseInt(string(fields[1]), 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		records++
		k := rejectKey{epoch, pos}
		if seen[k] {
			continue
		}
		seen[k] = true
		if each != nil {
			cr := csv.NewReader(bytes.NewReader(rec))
			cr.FieldsPerRecord = 4
			if f, err := cr.Read(); err == nil {
				each(k, f[2], f[3])
			}
		}
	}
}
