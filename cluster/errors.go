package cluster

import (
	"errors"
	"fmt"
)

// errNotSet is returned by a partition's source used before the
// supervisor made its JetStream source: a processor that polled the feed
// itself, in its Start. It is permanent.
var errNotSet = &permanentError{errors.New("cluster: the partition's source was read before the supervisor made it (after the store was opened); do not read the feed from a processor's Start")}

type permanentError struct{ error }

func (e *permanentError) Unwrap() error   { return e.error }
func (e *permanentError) Permanent() bool { return true }

// heldError is an attempt that found the partition's lease held by
// another owner: the partition stays in standby, nothing failed.
type heldError struct{ err error }

func (e *heldError) Error() string { return e.err.Error() }
func (e *heldError) Unwrap() error { return e.err }

// configError wraps a partition's framework config that breaks a rule.
func configError(p int, format string, args ...any) error {
	return fmt.Errorf("%w: partition %d: %s", ErrConfig, p, fmt.Sprintf(format, args...))
}
