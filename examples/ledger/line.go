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
	id, account, amount, err := parseFields(line)
	if err != nil {
		return Entry{}, err
	}
	return Entry{ID: id, Account: string(account), Amount: amount}, nil
}

// parseFields is ParseLine without the account's string: account is a
// part of line.
func parseFields(line []byte) (id int64, account []byte, amount int64, err error) {
	if id, account, amount, ok := parseCanonical(line); ok {
		return id, account, amount, nil
	}
	return parseChecked(line)
}

// parseCanonical parses a line as AppendLine writes one, in one pass: an
// id and an amount of at most 18 digits (so that neither overflows), no
// leading zeros, no '+', a valid UTF-8 account. It reports false for any other
// line, well-formed or not, which parseChecked then parses and explains.
// A line it takes is the one AppendLine writes for its entry, byte for
// byte: the ledger's output line starts with it (see applyLine).
func parseCanonical(line []byte) (id int64, account []byte, amount int64, ok bool) {
	const maxDigits = 18
	n := len(line)
	if n == 0 || line[0] < '1' || line[0] > '9' {
		return 0, nil, 0, false
	}
	i := 0
	for ; i < n && i < maxDigits; i++ {
		c := line[i]
		if c < '0' || c > '9' {
			break
		}
		id = id*10 + int64(c-'0')
	}
	if i == n || line[i] != ',' {
		return 0, nil, 0, false
	}
	i++
	a0 := i
	ascii := true
	for ; i < n; i++ {
		c := line[i]
		if c == ',' {
			break
		}
		if c >= utf8.RuneSelf {
			ascii = false
		}
	}
	if i == a0 || i == n {
		return 0, nil, 0, false
	}
	account = line[a0:i]
	if !ascii && !utf8.Valid(account) {
		return 0, nil, 0, false // parseChecked explains it
	}
	i++
	neg := i < n && line[i] == '-'
	if neg {
		i++
	}
	if i == n || line[i] < '0' || line[i] > '9' || (line[i] == '0' && (neg || i+1 != n)) {
		return 0, nil, 0, false // empty, a sign or leading zeros, or "-0"
	}
	d0 := i
	for ; i < n && i-d0 < maxDigits; i++ {
		c := line[i]
		if c < '0' || c > '9' {
			return 0, nil, 0, false
		}
		amount = amount*10 + int64(c-'0')
	}
	if i != n {
		return 0, nil, 0, false
	}
	if neg {
		amount = -amount
	}
	return id, account, amount, true
}

// parseChecked is parseFields for any line: it checks each rule in turn,
// and says which one a malformed line breaks.
func parseChecked(line []byte) (id int64, account []byte, amount int64, err error) {
	if len(line) == 0 {
		return 0, nil, 0, malformed("empty line")
	}
	i := bytes.IndexByte(line, ',')
	if i < 0 {
		return 0, nil, 0, malformed("want 3 comma-separated fields, found 1")
	}
	rest := line[i+1:]
	j := bytes.IndexByte(rest, ',')
	if j < 0 {
		return 0, nil, 0, malformed("want 3 comma-separated fields, found 2")
	}
	idField, account, amountField := line[:i], rest[:j], rest[j+1:]
	if bytes.IndexByte(amountField, ',') >= 0 {
		return 0, nil, 0, malformed("want 3 comma-separated fields, found more")
	}
	if id, err = parseID(idField); err != nil {
		return 0, nil, 0, err
	}
	if len(account) == 0 {
		return 0, nil, 0, malformed("empty account")
	}
	if !utf8.Valid(account) {
		return 0, nil, 0, malformed("account is not valid UTF-8")
	}
	if amount, err = parseAmount(amountField); err != nil {
		return 0, nil, 0, err
	}
	return id, account, amount, nil
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
	digits, neg := b, false
	if len(digits) > 0 && (digits[0] == '-' || digits[0] == '+') {
		digits, neg = digits[1:], digits[0] == '-'
	}
	if len(digits) == 0 {
		return 0, malformed(fmt.Sprintf("amount %q is not an integer", b))
	}
	// The magnitude, up to 2^63 (the magnitude of math.MinInt64).
	const limit = uint64(1) << 63
	var n uint64
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, malformed(fmt.Sprintf("amount %q is not an integer", b))
		}
		d := uint64(c - '0')
		if n > (limit-d)/10 {
			n = limit + 1 // too large; the other digits are still checked
			continue
		}
		n = n*10 + d
	}
	if n > limit || (n == limit && !neg) {
		return 0, malformed(fmt.Sprintf("amount %q does not fit in 64 bits", b))
	}
	if neg {
		return int64(-n), nil // -(2^63) wraps to math.MinInt64, as it should
	}
	return int64(n), nil
}
