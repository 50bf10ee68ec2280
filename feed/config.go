package feed

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/tidemark-go/tidemark/vfs"
)

// maxConfigLineBytes bounds Config.MaxLineBytes: the framer may hold that
// many bytes in memory.
const maxConfigLineBytes = 1 << 30

// Config configures a [FileSource]. The zero value of every field but Path
// is a sensible default.
type Config struct {
	// Path is the input file. It need not exist yet: the source waits for
	// it. It must be a regular file, or a symbolic link to one
	// (ErrNotRegular). Give Path or Paths, not both.
	Path string
	// Paths makes the source follow a set of files: every file that one of
	// these patterns (path/filepath.Match syntax, e.g. "logs/*.log")
	// matches, now or later (they are matched again every ScanInterval),
	// but for those Exclude matches. Each file is read as if it were its
	// own feed, with its own epoch, position and status
	// (Status.Files), and its own record in the set's registry, one file
	// PointerDir/<Name>.registry (Committed; PointerDir is required). Its
	// items name it (Item.File). See "File sets" in the package
	// documentation.
	Paths []string
	// Exclude lists patterns of files Paths matches that the set leaves
	// out, matched against the whole path and against the base name
	// ("*.gz", "debug-*.log").
	Exclude []string
	// Name names the feed: the registry file of a file set is
	// PointerDir/<Name>.registry ("files" when empty). The framework sets
	// it to the feed's name.
	Name string
	// ScanInterval is how often a file set matches Paths again to find new
	// files and files gone; 0 means DefaultScanInterval (1 s).
	ScanInterval time.Duration
	// ForgetAfter is how long the registry keeps the record of a file of a
	// set that was read to its end and is gone (removed, or no longer
	// matched): a file that comes back within it is recognised and read on.
	// 0 means DefaultForgetAfter (1 h); a negative value forgets at once.
	ForgetAfter time.Duration
	// Strategy is the read strategy; the zero value is Committed, the only
	// strategy that opens a pointer file.
	Strategy ReadStrategy
	// PointerDir is the folder of the pointer file (Committed only); ""
	// means the input's folder. The pointer file is
	// PointerDir/<base of Path>.readPointer ([github.com/tidemark-go/tidemark/feed/pointer.Path]). With a folder
	// of its own, the input's folder may be read-only, and two programs
	// may follow one file, each with its own pointer. The folder is
	// created when missing (logged).
	PointerDir string
	// MaxLineBytes is the longest line payload (without its terminator)
	// delivered; longer lines are skipped and reported. 0 means
	// DefaultMaxLineBytes (1 MiB). The source's read buffer is 64 KiB and
	// grows for longer lines up to MaxLineBytes+2 bytes, never beyond.
	MaxLineBytes int
	// Sync is when a pointer write is made durable (Committed only).
	Sync SyncPolicy
	// SyncInterval is the interval of SyncInterval; 0 means
	// DefaultSyncInterval.
	SyncInterval time.Duration
	// FS is the file system; nil means vfs.Default(), the operating system.
	FS vfs.FS
	// Logger receives the source's warnings and notes; nil means
	// slog.Default(), as in every tidemark package. To silence a source,
	// pass a logger with slog.DiscardHandler (Status and OnReject still
	// report everything). At slog.LevelDebug it also says how each file
	// was chosen: the pointer found at the start, each rotated file
	// compared with it and why it is not the pointer's, and each file the
	// source begins to read (its identity, size, start and epoch), for
	// the investigation of a line an operator believes lost.
	Logger *slog.Logger
	// OnReject, when set, is called for every line that is not delivered:
	// an oversize line, or the unterminated last line of a file that was
	// replaced or truncated while being read. It is called from Poll.
	OnReject func(Reject)
	// Now is the clock for new epochs and for RotateWait; nil means
	// time.Now.
	Now func() time.Time
	// Rotated is the pattern (path/filepath.Match syntax) of the names the
	// input is rotated to: "orders.csv.*" for logrotate's orders.csv.1,
	// orders.csv.2.gz, or orders.csv-20240102 with dateext;
	// "archive/orders.csv.*" or an absolute pattern for rotated files
	// moved to another folder (olddir). A relative pattern is relative to
	// the input's folder. With it, the source follows the input through
	// its rotated files: at a rotation, and at a start, it finds among
	// them every file it has not finished, by identity and content (the
	// file its pointer names, renamed, compressed or copied before a
	// truncation), and reads them oldest first, each to its end, before
	// the file at the path. See "Rotated files" in the package
	// documentation for the order and what each rotation style does.
	//
	// Without it, the source follows the path only, and finds the file
	// its pointer names renamed away while it was stopped by a scan of
	// the input's folder by identity: the limits of that are stated in the
	// package documentation ("What is not detected").
	Rotated string
	// RotateWait is how long a rotated file (renamed away from the path)
	// is read on after its last write before the source moves to the next
	// file: lines a writer appends to it before it reopens the path (a
	// postrotate signal not handled yet) are delivered. 0 means
	// DefaultRotateWait when Rotated is set, and no wait otherwise; a
	// negative value means no wait. The time is the file's modification
	// time against Now.
	RotateWait time.Duration
	// GroupCommit (Committed only) makes Commit hand the pointer record to
	// a writer goroutine instead of writing it itself: Commit computes the
	// record as without it (fingerprint, tail hash, the rewrite-in-place
	// check) and returns without waiting for the write and its sync. The
	// writer writes one record at a time (write and sync per Sync, so the
	// two-slot scheme is unchanged); the commits that arrive during a write
	// coalesce, and only the newest is written next. Under
	// SyncEveryCommit the writer rests after each write and sync, three
	// times as long as they took (at most 20 ms), so that it syncs at most
	// a quarter of the time: a sync costs CPU time beyond its wait, which
	// a writer syncing without pause took from the feed and its
	// processors. Commits are no longer capped by the disk's sync rate: a
	// file is read at close to the speed of its page cache under
	// SyncEveryCommit.
	//
	// Only a record that moves the position within the epoch, on the same
	// file (identity and fingerprint), goes to the writer. Every other
	// store (a new epoch, another identity, a longer fingerprint) first
	// waits for the writer's pending write, then is written as without
	// GroupCommit: the pointer moves in the same order.
	//
	// What it costs: a kill -9, a power loss or an operating system crash
	// also loses the commits not yet written when it happens, at most those
	// handed during one write and sync and the rest after it. Their lines are delivered again
	// after the restart, never skipped. A failed write is counted in Status,
	// logged, and returned by the next Commit; the next Commit, Flush or
	// Close retries it. Status.CommittedPosition is the position written;
	// Status.AskedPosition the newest position Commit accepted. Call
	// [FileSource.Flush] to wait for the writer; Close flushes.
	GroupCommit bool
}

// Reject describes a line the source did not deliver.
type Reject struct {
	// Path is the input's path.
	Path string
	// Epoch is the epoch the line was read in (0 for strategies without a
	// pointer).
	Epoch uint64
	// Position is the offset of the line's first byte.
	Position int64
	// End is the offset just after the line's terminator, 0 when it has
	// none (a dropped partial line).
	End int64
	// Length is the number of bytes of the line, its terminator included.
	Length int64
	// Reason is RejectOversize or RejectPartialDropped.
	Reason string
}

// validate reports what is wrong with cfg, in an error wrapping
// ErrInvalidConfig.
func (cfg *Config) validate() error {
	name := cfg.Path
	if len(cfg.Paths) > 0 {
		name = strings.Join(cfg.Paths, ", ")
	}
	switch {
	case cfg.Path == "" && len(cfg.Paths) == 0:
		return fmt.Errorf("%w: Path is empty: set it to the input file (or Paths to the patterns of a set of files)", ErrInvalidConfig)
	case cfg.Path != "" && len(cfg.Paths) > 0:
		return fmt.Errorf("%w: both Path (%s) and Paths (%s): give one file, or the patterns of a set", ErrInvalidConfig, cfg.Path, name)
	case len(cfg.Paths) > 0 && cfg.Strategy.Commits() && cfg.PointerDir == "":
		return fmt.Errorf("%w: the file set %s keeps the records of its files in one registry in PointerDir: set PointerDir to a folder the feed may write", ErrInvalidConfig, name)
	case len(cfg.Paths) > 0 && cfg.Rotated != "" && !strings.Contains(cfg.Rotated, "{name}"):
		return fmt.Errorf("%w: Rotated %q of the file set %s must name each file's rotated files by its name: use {name}, e.g. %q", ErrInvalidConfig, cfg.Rotated, name, "{name}.*")
	case cfg.ScanInterval < 0:
		return fmt.Errorf("%w: negative ScanInterval %v for %s", ErrInvalidConfig, cfg.ScanInterval, name)
	case strings.ContainsRune(cfg.Name, filepath.Separator):
		return fmt.Errorf("%w: Name %q contains a path separator: it names the registry file in PointerDir", ErrInvalidConfig, cfg.Name)
	}
	for _, pats := range [][]string{cfg.Paths, cfg.Exclude} {
		for _, g := range pats {
			if _, err := filepath.Match(g, ""); err != nil || g == "" {
				return fmt.Errorf("%w: %q of %s is not a valid pattern: use path/filepath.Match syntax, e.g. %q", ErrInvalidConfig, g, name, "logs/*.log")
			}
		}
	}
	switch {
	case cfg.Strategy < Committed || cfg.Strategy > OnceLatest:
		return fmt.Errorf("%w: unknown read strategy %d for %s", ErrInvalidConfig, int(cfg.Strategy), name)
	case cfg.MaxLineBytes < 0 || cfg.MaxLineBytes > maxConfigLineBytes:
		return fmt.Errorf("%w: MaxLineBytes %d for %s is outside 0..%d (0 means %d)", ErrInvalidConfig, cfg.MaxLineBytes, name, maxConfigLineBytes, DefaultMaxLineBytes)
	case cfg.Sync < SyncEveryCommit || cfg.Sync > SyncNever:
		return fmt.Errorf("%w: unknown sync policy %d for %s", ErrInvalidConfig, int(cfg.Sync), name)
	case cfg.SyncInterval < 0:
		return fmt.Errorf("%w: negative SyncInterval %v for %s", ErrInvalidConfig, cfg.SyncInterval, name)
	}
	if cfg.Rotated != "" {
		if _, err := filepath.Match(cfg.Rotated, ""); err != nil {
			return fmt.Errorf("%w: Rotated %q of %s is not a valid pattern (%v): use path/filepath.Match syntax, e.g. %q", ErrInvalidConfig, cfg.Rotated, name, err, filepath.Base(cfg.Path)+".*")
		}
	}
	return nil
}

// DefaultRotateWait is Config.RotateWait when Rotated is set and RotateWait
// is 0.
const DefaultRotateWait = 5 * time.Second

// rotatedPattern returns the pattern of the rotated files of input: the
// pattern, made relative to the input's folder when it is not absolute.
func rotatedPattern(input, pattern string) string {
	if pattern == "" || filepath.IsAbs(pattern) {
		return pattern
	}
	return filepath.Join(filepath.Dir(input), pattern)
}

// rotateWait returns the effective RotateWait.
func (cfg *Config) rotateWait() time.Duration {
	switch {
	case cfg.RotateWait < 0:
		return 0
	case cfg.RotateWait == 0 && cfg.Rotated != "":
		return DefaultRotateWait
	}
	return cfg.RotateWait
}
