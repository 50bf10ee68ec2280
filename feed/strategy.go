package feed

import (
	"errors"
	"fmt"
	"strings"
)

// ErrDone is returned by Poll once a source with a once strategy has
// delivered everything it will deliver.
var ErrDone = errors.New("feed: done")

// ReadStrategy decides where a file source starts, whether it keeps a
// pointer file, and what it does at the end of the file.
//
//	strategy      starts at                  pointer file        after the end of the file
//	Committed     the pointer, else 0        read and written    tails
//	Earliest      0                          never opened        tails
//	OnceEarliest  0                          never opened        done at the first end of file
//	Latest        the end when opened        never written       tails
//	OnceLatest    the end                    never written       done at once
//
// The zero value is Committed, the only strategy that commits.
type ReadStrategy int

// The read strategies.
const (
	Committed ReadStrategy = iota
	Earliest
	OnceEarliest
	Latest
	OnceLatest
)

// String returns the strategy's configuration name.
func (s ReadStrategy) String() string {
	switch s {
	case Committed:
		return "COMMITTED"
	case Earliest:
		return "EARLIEST"
	case OnceEarliest:
		return "ONCE_EARLIEST"
	case Latest:
		return "LATEST"
	case OnceLatest:
		return "ONCE_LATEST"
	}
	return fmt.Sprintf("ReadStrategy(%d)", int(s))
}

// ParseReadStrategy parses a configuration name: COMMITTED (or the
// reference's spelling COMMITED), EARLIEST, ONCE_EARLIEST, LATEST or
// ONCE_LATEST, in any case. The empty string is Committed.
func ParseReadStrategy(name string) (ReadStrategy, error) {
	switch strings.ToUpper(strings.TrimSpace(name)) {
	case "", "COMMITTED", "COMMITED":
		return Committed, nil
	case "EARLIEST":
		return Earliest, nil
	case "ONCE_EARLIEST":
		return OnceEarliest, nil
	case "LATEST":
		return Latest, nil
	case "ONCE_LATEST":
		return OnceLatest, nil
	}
	return 0, fmt.Errorf("feed: unknown read strategy %q: use COMMITTED, EARLIEST, ONCE_EARLIEST, LATEST or ONCE_LATEST", name)
}

// Commits reports whether the strategy reads and writes a pointer file.
func (s ReadStrategy) Commits() bool { return s == Committed }

// UnmarshalText implements encoding.TextUnmarshaler with ParseReadStrategy.
func (s *ReadStrategy) UnmarshalText(b []byte) error {
	v, err := ParseReadStrategy(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// MarshalText implements encoding.TextMarshaler.
func (s ReadStrategy) MarshalText() ([]byte, error) { return []byte(s.String()), nil }
