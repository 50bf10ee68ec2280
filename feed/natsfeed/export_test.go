package natsfeed

// Exported for the external tests.
var (
	SubjectMatches = subjectMatches
	ValidSubject   = validSubject
)

// ParseAck is parseAck, its fields in order.
func ParseAck(reply string) (delivered, stream, consumer uint64, ts int64, pending uint64, err error) {
	m, err := parseAck(reply)
	return m.delivered, m.stream, m.consumer, m.ts, m.pending, err
}
