package natsfeed_test

import (
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/tidemark-go/tidemark/feed/natsfeed"
)

// FuzzSubjectMatches compares the source's filter match (used to check
// that a store's record is of the partition) and its filter validation
// with nats-server's own.
func FuzzSubjectMatches(f *testing.F) {
	for _, c := range [][2]string{
		{"orders.>", "orders.1.x"}, {"orders.1.>", "orders.1"}, {"orders.*.x", "orders.1.x"},
		{"orders.*", "orders.1.x"}, {"a.b", "a.b"}, {">", "a"}, {"*", "a.b"}, {"a.*.>", "a.b"},
		{"a..b", "a.b"}, {"a.>.b", "a.x.b"}, {"orders.1*", "orders.1"}, {"", "a"},
	} {
		f.Add(c[0], c[1])
	}
	f.Fuzz(func(t *testing.T, filter, subject string) {
		if got, want := natsfeed.ValidSubject(filter), server.IsValidSubject(filter); got && !want {
			t.Fatalf("filter %q: valid for the source, not for the server", filter)
		}
		if !natsfeed.ValidSubject(filter) || !server.IsValidPublishSubject(subject) {
			return
		}
		if got, want := natsfeed.SubjectMatches(filter, subject), server.SubjectMatchesFilter(subject, filter); got != want {
			t.Fatalf("filter %q, subject %q: source says %v, server %v", filter, subject, got, want)
		}
	})
}
