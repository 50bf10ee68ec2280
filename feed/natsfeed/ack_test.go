package natsfeed_test

import (
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/tidemark-go/tidemark/feed/natsfeed"
)

// FuzzParseAck compares the source's parse of an ack subject with
// nats.go's (the parser jetstream.Msg's Metadata uses): where nats.go
// reads the subject and each number token is a decimal number in range,
// the source reads the same numbers; where nats.go refuses it, so does
// the source; where a number token is not a number (nats.go reads 0), the
// source refuses it.
func FuzzParseAck(f *testing.F) {
	for _, s := range []string{
		"$JS.ACK.ORDERS.c.1.42.7.1733068800000000000.99",                    // v1
		"$JS.ACK._.ACCHASH.ORDERS.c.1.42.7.1733068800000000000.99.rand",     // v2
		"$JS.ACK.hub.ACCHASH.ORDERS.c.2.42.7.1733068800000000000.0",         // v2 without the last token
		"$JS.ACK.hub.ACCHASH.ORDERS.c.2.42.7.1733068800000000000.0.r.extra", // v2 with more
		"$JS.ACK.ORDERS.c.1.42.7.1733068800000000000",                       // 8 tokens
		"$JS.ACK.a.b.ORDERS.c.1.42.7.1733068800000000000",                   // 10 tokens
		"$JS.ACK.ORDERS.c.1.42.x.1733068800000000000.99",                    // not a number
		"$JS.ACK.ORDERS.c.1.18446744073709551616.7.1.1",                     // overflows
		"$JS.ACK.ORDERS.c.1.18446744073709551615.7.9223372036854775808.1",   // time overflows int64
		"$JS.ACK.ORDERS.c..42.7.1.99",                                       // empty number
		"$JS.ACk.ORDERS.c.1.42.7.1.99", "", "$JS.ACK.", "_INBOX.x.y.z.1.2.3.4.5",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, reply string) {
		delivered, sseq, cseq, ts, pending, err := natsfeed.ParseAck(reply)
		md, nerr := (&nats.Msg{Reply: reply, Sub: &nats.Subscription{}}).Metadata()
		if nerr != nil {
			if err == nil {
				t.Fatalf("%q: nats.go refuses it (%v), the source reads it", reply, nerr)
			}
			return
		}
		// The number tokens, where nats.go finds them.
		toks := strings.Split(reply, ".")
		base := 4
		if len(toks) > 9 {
			base = 6
		}
		valid := true
		for i, tok := range toks[base : base+5] {
			v, perr := strconv.ParseUint(tok, 10, 64)
			if perr != nil || (i == 3 && v > math.MaxInt64) {
				valid = false
			}
		}
		if !valid {
			if err == nil {
				t.Fatalf("%q: a number token is not a number in range, and the source reads it", reply)
			}
			return
		}
		if err != nil {
			t.Fatalf("%q: nats.go reads it, the source refuses it: %v", reply, err)
		}
		if delivered != md.NumDelivered || sseq != md.Sequence.Stream || cseq != md.Sequence.Consumer ||
			ts != md.Timestamp.UnixNano() || pending != md.NumPending {
			t.Fatalf("%q: the source reads %d %d %d %d %d, nats.go %d %d %d %d %d", reply,
				delivered, sseq, cseq, ts, pending, md.NumDelivered, md.Sequence.Stream, md.Sequence.Consumer, md.Timestamp.UnixNano(), md.NumPending)
		}
	})
}
