package main

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"errors"
	"io"
	"os"
	"strconv"
	"sync"
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

// RejectLog is rejects.csv: one record `epoch,position,reason,line` per
// malformed line. A line rejected again after a restart (a re-delivery) is
// recognised by its epoch and position and not written twice. It is safe for
// concurrent use.
type RejectLog struct {
	mu   sync.Mutex
	f    *os.File
	seen map[rejectKey]bool
	w    *csv.Writer
	n    int
}

// OpenRejectLog opens or creates the reject log at path. A record torn by a
// crash (a last line without its newline) is cut off.
func OpenRejectLog(path string) (*RejectLog, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	seen, end, err := readRejects(f, nil)
	if err == nil {
		err = f.Truncate(end)
	}
	if err == nil {
		_, err = f.Seek(end, io.SeekStart)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return &RejectLog{f: f, seen: seen, w: csv.NewWriter(f), n: len(seen)}, nil
}

// Add records a rejected line unless it was recorded before. It reports
// whether it wrote a record.
func (l *RejectLog) Add(epoch uint64, pos int64, reason string, line []byte) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := rejectKey{epoch, pos}
	if l.seen[k] {
		return false, nil
	}
	l.seen[k] = true
	l.n++
	err := l.w.Write([]string{
		strconv.FormatUint(epoch, 10), strconv.FormatInt(pos, 10), reason, string(line),
	})
	if err == nil {
		l.w.Flush()
		err = l.w.Error()
	}
	return true, err
}

// Len returns the number of distinct rejected lines recorded.
func (l *RejectLog) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// Close closes the file.
func (l *RejectLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.w.Flush()
	return errors.Join(l.w.Error(), l.f.Close())
}

// Refused is a well-formed line in the reject log: a line the run could
// not apply (its account too long for the store, say), as opposed to a
// malformed or oversize one.
type Refused struct {
	Entry
	Epoch    uint64
	Position int64
	Reason   string
}

// CountRejects returns the number of distinct lines in the reject log at
// path, and the well-formed ones among them; a missing log has none.
func CountRejects(path string) (int, []Refused, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil, nil
	}
	if err != nil {
		return 0, nil, err
	}
	defer f.Close()
	var refused []Refused
	seen, _, err := readRejects(f, func(k rejectKey, reason, line string) {
		if len(line) > maxLineBytes {
			return
		}
		if e, err := ParseLine([]byte(line)); err == nil {
			refused = append(refused, Refused{Entry: e, Epoch: k.epoch, Position: k.pos, Reason: reason})
		}
	})
	return len(seen), refused, err
}

// readRejects reads the keys of the records of r and the length of its
// complete lines. Each record is one physical line: a rejected line has no
// "\n", and the CSV writer quotes a field with "\r". When each is not nil
// it is called with the reason and the line of every record whose key was
// not seen before.
func readRejects(r io.Reader, each func(k rejectKey, reason, line string)) (map[rejectKey]bool, int64, error) {
	seen := make(map[rejectKey]bool)
	br := bufio.NewReader(r)
	var end int64
	for {
		rec, err := br.ReadBytes('\n')
		if err == io.EOF {
			return seen, end, nil
		}
		if err != nil {
			return nil, 0, err
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
