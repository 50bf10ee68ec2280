package main

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// errMalformed is wrapped by every error of a line that is not
// `id,account,amount`.
var errMalformed = errors.New("ledger: malformed line")

// Entry is one parsed ledger line.
type Entry struct {
	// ID is a positive integer.
	ID int64
	// Account is a non-empty UTF-8 string without commas.
	Account string
	// Amount is a signed amount in cents.
	Amount int64
}

// ParseLine parses one line without its terminator: `id,account,amount`,
// where id is a positive decimal integer without sign or leading zeros,
// account a non-empty valid UTF-8 string without commas, and amount a signed
// decimal integer that fits in 64 bits. Anything else is malformed: the error
// wraps errMalformed and says why.
func ParseLine(line []byte) (Entry, error) {
	if len(line) == 0 {
		return Entry{}, malformed("empty line")
	}
	i := bytes.IndexByte(line, ',')
	if i < 0 {
		return Entry{}, malformed("want 3 comma-separated fields, found 1")
	}
	rest := line[i+1:]
	j := bytes.IndexByte(rest, ',')
	if j < 0 {
		return Entry{}, malformed("want 3 comma-separated fields, found 2")
	}
	idField, account, amountField := line[:i], rest[:j], rest[j+1:]
	if bytes.IndexByte(amountField, ',') >= 0 {
		return Entry{}, malformed("want 3 comma-separated fields, found more")
	}
	id, err := parseID(idField)
	if err != nil {
		return Entry{}, err
	}
	if len(account) == 0 {
		return Entry{}, malformed("empty account")
	}
	if !utf8.Valid(account) {
		return Entry{}, malformed("account is not valid UTF-8")
	}
	amount, err := parseAmount(amountField)
	if err != nil {
		return Entry{}, err
	}
	return Entry{ID: id, Account: string(account), Amount: amount}, nil
}

// AppendLine appends e as an input line with its newline.
func AppendLine(dst []byte, e Entry) []byte {
	dst = strconv.AppendInt(dst, e.ID, 10)
	dst = append(dst, ',')
	dst = append(dst, e.Account...)
	dst = append(dst, ',')
	dst = strconv.AppendInt(dst, e.Amount, 10)
	return append(dst, '\n')
}

func malformed(why string) error {
	return fmt.Errorf("%w: %s", errMalformed, why)
}

func parseID(b []byte) (int64, error) {
	if len(b) == 0 {
		return 0, malformed("empty id")
	}
	if b[0] == '0' {
		return 0, malformed("id must be a positive integer without leading zeros")
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, malformed(fmt.Sprintf("id %q is not a positive integer", b))
		}
		d := int64(c - '0')
		if n > (1<<63-1-d)/10 {
			return 0, malformed(fmt.Sprintf("id %q is too large", b))
		}
		n = n*10 + d
	}
	return n, nil
}

func parseAmount(b []byte) (int64, error) {
	digits := b
	if len(digits) > 0 && (digits[0] == '-' || digits[0] == '+') {
		digits = digits[1:]
	}
	if len(digits) == 0 {
		return 0, malformed(fmt.Sprintf("amount %q is not an integer", b))
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, malformed(fmt.Sprintf("amount %q is not an integer", b))
		}
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return 0, malformed(fmt.Sprintf("amount %q does not fit in 64 bits", b))
	}
	return n, nil
}
