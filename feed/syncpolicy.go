package feed

import "github.com/tidemark-go/tidemark/feed/pointer"

// SyncPolicy decides when a pointer write is made durable; see the table
// in the package documentation. Whatever the policy, the pointer on disk
// only ever lags the pointer stored: a power loss costs re-delivery, never
// a gap.
type SyncPolicy = pointer.SyncPolicy

// The sync policies (see [pointer.SyncPolicy] for the details).
const (
	// SyncEveryCommit makes every commit durable (one fdatasync) before
	// the write is reported done. The zero value.
	SyncEveryCommit = pointer.SyncEveryCommit
	// SyncInterval makes a commit durable at most once every
	// Config.SyncInterval; an idle source syncs a pending one.
	SyncInterval = pointer.SyncInterval
	// SyncNever leaves write-back to the operating system.
	SyncNever = pointer.SyncNever
)

// DefaultSyncInterval is the interval of SyncInterval when
// Config.SyncInterval is 0.
const DefaultSyncInterval = pointer.DefaultSyncInterval

// The limits of what the source compares when it opens a file: the
// fingerprint covers at most the first maxFPLen bytes, the tail hash
// at most the maxTailLen bytes before a position.
const (
	maxFPLen   = pointer.MaxFingerprintLen
	maxTailLen = pointer.MaxTailLen
)
