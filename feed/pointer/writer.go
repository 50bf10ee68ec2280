package pointer

import (
	"log/slog"
	"sync"
	"time"

	"github.com/tidemark-go/tidemark/vfs"
)

// writer is what a pointer file ([File]) and a registry ([Registry])
// share: the file's path and that of its temporary file, the file system,
// the sync policy, the mutex of their methods, and the calls that take it,
// check that the file is open and hand over to the format's own sync.
//
// Invariant: pending is set while a write is not known durable; flush
// (the format's sync, called with mu held) clears it once it is, and sets
// lastSync.
type writer struct {
	path     string
	tmpPath  string
	fs       vfs.FS
	policy   SyncPolicy
	interval time.Duration
	log      *slog.Logger

	mu       sync.Mutex
	closed   bool
	pending  bool // a write not yet made durable
	lastSync time.Time
	// flush makes every write durable (the format's sync). mu held.
	flush func() error
	// lockf, once Lock took the lock, is an open file of the inode at path
	// that holds it (for a registry, the file written). A replace locks
	// its temporary file before renaming it over path, and lockf becomes
	// that file. made is set when Lock created the (empty) file.
	lockf vfs.File
	made  bool
}

// newWriter returns the writer of the file at path; flush is set by its
// owner.
func newWriter(path string, opts Options) writer {
	opts = opts.withDefaults()
	return writer{
		path:     path,
		tmpPath:  path + TempSuffix,
		fs:       opts.FS,
		policy:   opts.Sync,
		interval: opts.SyncInterval,
		log:      opts.Logger,
	}
}

// Path returns the file's path.
func (w *writer) Path() string { return w.path }

// Sync makes the writes pending under SyncInterval durable now. Under the
// other policies it does nothing (SyncEveryCommit leaves nothing pending;
// SyncNever never syncs).
func (w *writer) Sync() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	if w.policy == SyncNever {
		return nil
	}
	return w.flush()
}

// SyncIfDue makes the writes pending under SyncInterval durable when the
// interval since the last sync has passed; otherwise it does nothing and
// makes no system call. A source calls it when idle, so that the last
// commit before a pause does not wait for the next Store to become durable.
func (w *writer) SyncIfDue() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	return w.syncIfDue()
}

// syncIfDue syncs pending writes when the interval has passed. mu held.
func (w *writer) syncIfDue() error {
	if w.pending && w.policy == SyncInterval && time.Since(w.lastSync) >= w.interval {
		return w.flush()
	}
	return nil
}

// removeTemp removes a leftover temporary file; it is never read.
func (w *writer) removeTemp() { removeTemp(w.fs, w.log, w.tmpPath, w.path) }

// replace writes img as the whole file through the temporary file, renamed
// over the path (the caller syncs the folder). A locked writer locks the
// new file before the rename and holds its lock from then on; the lock of
// the file it replaced is released. On an error it returns the step that
// failed, and the file at the path is as it was. kind names the file in a
// warning ("pointer", "registry"). mu held.
func (w *writer) replace(img []byte, kind string) (string, error) {
	locked := w.lockf != nil
	t, what, err := replaceFile(w.fs, w.tmpPath, w.path, img, locked)
	if err != nil {
		return what, err
	}
	if locked {
		old := w.lockf
		w.lockf, w.made = t, false
		if err := old.Close(); err != nil {
			w.log.Warn("feed: closing the replaced "+kind+" file failed", kind, w.path, "err", err)
		}
	}
	return "", nil
}
