package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
)

// maxLineBytes is the longest line the ledger's feed delivers; a longer line
// is skipped by the feed itself (counted there, never handed to the ledger).
const maxLineBytes = 1 << 20

// Model is what an input implies: the state a ledger that applied every line
// exactly once must hold, and the ids its output must contain.
type Model struct {
	// Lines counts the input's complete lines (a last line without its
	// newline is not delivered yet, so it is not counted).
	Lines int
	// Malformed counts the lines that are not `id,account,amount`.
	Malformed int
	// Oversize counts the lines longer than the feed delivers.
	Oversize int
	// Applied is the number of well-formed lines.
	Applied int64
	// Total is the sum of their amounts.
	Total int64
	// Balances is the sum of the amounts per account.
	Balances map[string]int64
	// IDs counts the well-formed lines per id.
	IDs map[int64]int
}

// NewModel returns the model of an empty input.
func NewModel() *Model {
	return &Model{Balances: make(map[string]int64), IDs: make(map[int64]int)}
}

// Add applies one line payload (without its terminator) to the model.
func (m *Model) Add(payload []byte) {
	m.Lines++
	if len(payload) > maxLineBytes {
		m.Oversize++
		return
	}
	e, err := ParseLine(payload)
	if err != nil {
		m.Malformed++
		return
	}
	m.Applied++
	m.Total += e.Amount
	m.Balances[e.Account] += e.Amount
	m.IDs[e.ID]++
}

// Remove takes a well-formed line that the run rejected out of the model,
// as if the input did not hold it. It reports false, and changes nothing,
// when the model holds no line of e's id.
func (m *Model) Remove(e Entry) bool {
	if m.IDs[e.ID] == 0 {
		return false
	}
	if m.IDs[e.ID]--; m.IDs[e.ID] == 0 {
		delete(m.IDs, e.ID)
	}
	m.Applied--
	m.Total -= e.Amount
	m.Balances[e.Account] -= e.Amount
	return true
}

// ReadFrom adds every complete line of r, framed the way the feed frames
// them: a line ends with "\n", and a "\r" just before it is not part of the
// payload. An unterminated last line is ignored.
func (m *Model) ReadFrom(r io.Reader) (int64, error) {
	var n int64
	err := eachLine(r, func(payload []byte, _ int64) {
		m.Add(payload)
	}, &n)
	return n, err
}

// ModelOf reads the model of the concatenation of the files at paths.
func ModelOf(paths ...string) (*Model, error) {
	m := NewModel()
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		_, err = m.ReadFrom(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", p, err)
		}
	}
	return m, nil
}

// eachLine calls fn with the payload and end position of every complete
// line of r. A line longer than maxLineBytes is passed cut to maxLineBytes+1
// bytes, so that fn can tell it apart without holding all of it.
func eachLine(r io.Reader, fn func(payload []byte, pos int64), n *int64) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var long []byte // the start of a line longer than the buffer
	inLong := false
	var longLen int // the full length of that start
	var pos int64
	for {
		chunk, err := br.ReadSlice('\n')
		pos += int64(len(chunk))
		*n = pos
		if errors.Is(err, bufio.ErrBufferFull) {
			inLong = true
			longLen += len(chunk)
			if room := maxLineBytes + 2 - len(long); room > 0 {
				long = append(long, chunk[:min(room, len(chunk))]...)
			}
			continue
		}
		if err == io.EOF {
			return nil // an unterminated tail is not a line yet
		}
		if err != nil {
			return err
		}
		line := chunk[:len(chunk)-1]
		if inLong {
			// Keep at most maxLineBytes+2 bytes: enough to tell a line that
			// is too long from one that fits once its "\r" is cut.
			whole := longLen+len(line) <= maxLineBytes+2
			if room := maxLineBytes + 2 - len(long); room > 0 {
				long = append(long, line[:min(room, len(line))]...)
			}
			line = long
			if whole {
				line = bytes.TrimSuffix(line, []byte{'\r'})
			}
			if len(line) > maxLineBytes+1 {
				line = line[:maxLineBytes+1]
			}
		} else {
			line = bytes.TrimSuffix(line, []byte{'\r'})
		}
		fn(line, pos)
		long, inLong, longLen = long[:0], false, 0
	}
}

// OutputLine is one line of output.csv: `id,account,amount,balance_after`.
type OutputLine struct {
	Entry
	BalanceAfter int64
}

// AppendOutput appends o as an output line with its newline.
func AppendOutput(dst []byte, o OutputLine) []byte {
	dst = AppendLine(dst, o.Entry)
	dst = dst[:len(dst)-1]
	dst = append(dst, ',')
	dst = strconv.AppendInt(dst, o.BalanceAfter, 10)
	return append(dst, '\n')
}

// ParseOutput parses one output line without its newline.
func ParseOutput(line []byte) (OutputLine, error) {
	i := bytes.LastIndexByte(line, ',')
	if i < 0 {
		return OutputLine{}, malformed("output line without balance")
	}
	e, err := ParseLine(line[:i])
	if err != nil {
		return OutputLine{}, err
	}
	b, err := parseAmount(line[i+1:])
	if err != nil {
		return OutputLine{}, err
	}
	return OutputLine{Entry: e, BalanceAfter: b}, nil
}

// OutputSummary is what output.csv holds.
type OutputSummary struct {
	// IDs counts the output lines per id.
	IDs map[int64]int
	// Lines counts the complete output lines.
	Lines int
	// Bad counts the lines that do not parse.
	Bad int
	// Partial is the length of an unterminated last line, if any.
	Partial int64
	// Unfollowed counts the lines whose balance_after is not the previous
	// output line's balance of the same account plus the amount: output
	// that does not follow the state it was written with.
	Unfollowed int
	// Last is the balance_after of each account's last output line.
	Last map[string]int64
}

// ReadOutput summarises the output file at path. A missing file is empty.
func ReadOutput(path string) (*OutputSummary, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return ReadOutputFrom(bytes.NewReader(nil))
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadOutputFrom(f)
}

// ReadOutputFrom summarises the output read from r (an output kept in a
// database, read with state.Output.WriteTo).
func ReadOutputFrom(r io.Reader) (*OutputSummary, error) {
	s := &OutputSummary{IDs: make(map[int64]int), Last: make(map[string]int64)}
	var n, last int64
	err := eachLine(r, func(payload []byte, pos int64) {
		last = pos
		s.Lines++
		o, err := ParseOutput(payload)
		if err != nil {
			s.Bad++
			return
		}
		s.IDs[o.ID]++
		if s.Last[o.Account]+o.Amount != o.BalanceAfter {
			s.Unfollowed++
		}
		s.Last[o.Account] = o.BalanceAfter
	}, &n)
	s.Partial = n - last
	return s, err
}
