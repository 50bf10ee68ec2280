package feed

// This file is the contract between the pointer file and the file source.
// The bodies are placeholders, replaced by the pointer file's implementation.

import (
	"errors"
	"log/slog"
	"time"

	"github.com/tidemark-go/tidemark/dedupe"
	"github.com/tidemark-go/tidemark/internal/vfs"
)

// PointerSuffix is appended to the input's path to name its pointer file.
const PointerSuffix = ".readPointer"

// ErrCorruptPointer is wrapped by errors of a pointer record that does not
// verify (bad magic, checksum, length or version).
var ErrCorruptPointer = errors.New("feed: corrupt pointer record")

// Pointer is the content of a pointer record.
type Pointer struct {
	Epoch       uint64
	Position    int64
	Identity    dedupe.Identity
	Fingerprint dedupe.Fingerprint
	// TailLen and TailHash cover the bytes just before Position (up to 64).
	TailLen  int
	TailHash uint64
}

// SyncPolicy decides when a pointer write is made durable.
type SyncPolicy int

// The sync policies.
const (
	SyncEveryCommit SyncPolicy = iota // the zero value
	SyncInterval
	SyncNever
)

// HashBytes is the hash used for fingerprints and tail hashes.
func HashBytes(b []byte) uint64 { panic("not yet") }

// NewEpoch returns an epoch larger than prev, based on now.
func NewEpoch(prev uint64, now time.Time) uint64 { panic("not yet") }

// EncodePointer appends p's record to dst.
func EncodePointer(dst []byte, p Pointer) []byte { panic("not yet") }

// DecodePointer decodes one record.
func DecodePointer(b []byte) (Pointer, error) { panic("not yet") }

// PointerFileOptions configures a PointerFile.
type PointerFileOptions struct {
	FS           vfs.FS
	Sync         SyncPolicy
	SyncInterval time.Duration
	Logger       *slog.Logger
}

// LoadResult is what Load found.
type LoadResult struct {
	Pointer Pointer
	Found   bool   // a valid current-format record was found
	Missing bool   // no pointer file
	Legacy  bool   // a legacy 1024-byte pointer; Pointer.Position holds its count, Epoch is 0
	Reason  string // why a present file gave no valid record, or which slot was used
}

// PointerFile is the durable pointer of one input.
type PointerFile struct{}

// OpenPointerFile prepares the pointer file at path; it does not read it.
func OpenPointerFile(path string, opts PointerFileOptions) *PointerFile { panic("not yet") }

// Load reads the last valid record.
func (pf *PointerFile) Load() (LoadResult, error) { panic("not yet") }

// Store writes p durably according to the sync policy.
func (pf *PointerFile) Store(p Pointer) error { panic("not yet") }

// Close flushes a pending sync and closes the file.
func (pf *PointerFile) Close() error { panic("not yet") }
