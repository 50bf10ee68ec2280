package natsfeed

import (
	"fmt"
	"math"
	"strings"
)

// ackMeta is what the pump reads of a delivery's metadata.
type ackMeta struct {
	delivered uint64 // the times the message was delivered, this one included
	stream    uint64 // the stream sequence
	consumer  uint64 // the consumer sequence
	ts        int64  // when the stream stored the message, Unix nanoseconds
	pending   uint64 // the partition's messages not delivered yet
}

// parseAck reads a delivery's metadata from its reply (ack) subject, as
// nats.go's jetstream.Msg Metadata does, in one of its two forms:
//
//	$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<time>.<pending>
//	$JS.ACK.<domain>.<account hash>.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<time>.<pending>[.<token>…]
//
// (9 tokens; 11 or more: a server may add tokens at the end). The pump
// parses it itself because Metadata allocates a struct with the stream,
// consumer and domain names for every message, which the pump does not
// use: it was 6 % of a worker's CPU at 100,000 messages a second. Unlike
// Metadata, parseAck refuses a number token that is not a decimal number
// of uint64 (a time, of int64) instead of reading it as 0.
// FuzzParseAck compares the two.
func parseAck(reply string) (ackMeta, error) {
	const prefix = "$JS.ACK."
	if !strings.HasPrefix(reply, prefix) {
		return ackMeta{}, fmt.Errorf("reply subject %q is not a JetStream acknowledgement subject ($JS.ACK.…)", reply)
	}
	var skip int // the name tokens before the numbers
	switch n := strings.Count(reply, ".") + 1; {
	case n == 9:
		skip = 2
	case n >= 11:
		skip = 4
	default:
		return ackMeta{}, fmt.Errorf("reply subject %q has %d tokens: a JetStream acknowledgement subject has 9, or 11 and more", reply, n)
	}
	rest := reply[len(prefix):]
	for range skip {
		_, rest, _ = strings.Cut(rest, ".")
	}
	var nums [5]uint64
	for i := range nums {
		var tok string
		tok, rest, _ = strings.Cut(rest, ".")
		v, ok := parseDecimal(tok)
		if !ok {
			return ackMeta{}, fmt.Errorf("reply subject %q: token %q is not a decimal number", reply, tok)
		}
		nums[i] = v
	}
	if nums[3] > math.MaxInt64 {
		return ackMeta{}, fmt.Errorf("reply subject %q: time %d out of range", reply, nums[3])
	}
	return ackMeta{delivered: nums[0], stream: nums[1], consumer: nums[2], ts: int64(nums[3]), pending: nums[4]}, nil
}

// parseDecimal parses a non-empty string of decimal digits that fits in a
// uint64.
func parseDecimal(s string) (uint64, bool) {
	if s == "" || len(s) > 20 {
		return 0, false
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		d := uint64(s[i]) - '0'
		if d > 9 {
			return 0, false
		}
		// 19 digits always fit; the 20th may not.
		if i == 19 && (n > math.MaxUint64/10 || n*10 > math.MaxUint64-d) {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}
