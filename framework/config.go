package framework

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/checkpoint"
	"github.com/tidemark-go/tidemark/feed"
	"github.com/tidemark-go/tidemark/state"
)

// Defaults used when a Config field is zero.
const (
	// DefaultQueueCapacity is the most lines a subscriber queue holds:
	// four batches.
	DefaultQueueCapacity = 4 * DefaultBatchSize
	// DefaultBatchSize is the most lines the feed reads and hands off at
	// once. Each batch handed costs the feed a wake-up of every group
	// that waits for it: with four groups of cheap processors on two
	// cores (bench row 3), 20,000,000 lines took 1.19 s in batches of
	// 1,024 and 1.06 s in batches of 2,048 (one group: 0.76 and 0.75 s).
	DefaultBatchSize = 2048
	// MaxQueueCapacity and MaxBatchSize bound the configurable values.
	MaxQueueCapacity = 1 << 24
	MaxBatchSize     = 1 << 16
	// DefaultSpin is how long a DropAfterSpin queue may stay full before
	// the lines that do not fit are dropped for it.
	DefaultSpin = 5 * time.Millisecond
	// DefaultDrainTimeout bounds how long Stop waits for the groups to
	// finish their queues.
	DefaultDrainTimeout = 10 * time.Second
	// DefaultRetries is how often a failed delivery is retried when
	// FailurePolicy.Retries is zero (in YAML: when retries is not set).
	DefaultRetries = 3
	// NoRetries, as FailurePolicy.Retries, means a failed delivery is not
	// retried: the Action is taken at once. In YAML it is "retries: 0".
	NoRetries = -1
	// DefaultBackoff is the first retry's wait; it doubles up to DefaultMaxBackoff.
	DefaultBackoff = 10 * time.Millisecond
	// DefaultMaxBackoff caps the retry wait.
	DefaultMaxBackoff = time.Second
)

// Config describes a server: its feeds, its processor groups, and how it
// stops. The zero values of the fields are documented defaults. A Config
// is loaded from YAML with [LoadConfig] or written in Go; processors are
// bound by name when the server is made ([New]).
type Config struct {
	// Feeds are the sources lines are read from.
	Feeds []FeedConfig
	// Groups are the processor groups. Each runs on its own goroutine.
	Groups []GroupConfig
	// DrainTimeout bounds how long Stop lets the groups finish the lines
	// already in their queues. Zero means DefaultDrainTimeout.
	DrainTimeout time.Duration
	// Logger receives the server's logs, and is the default logger of the
	// file sources and stores the server makes. Nil means slog.Default():
	// a warning (an input that does not exist, a rewind) is never lost.
	Logger *slog.Logger
	// LogLevel, when set and Logger is nil, is the least level the server
	// logs at (and its file sources and stores, and the operator
	// listener): the records at it and above go to slog.Default()'s
	// handler, or, when that handler would drop them (the standard
	// library's default handler drops DEBUG), to a text handler on
	// standard error at that level. Nil means slog.Default() as it is. A
	// *slog.LevelVar changes the level while the server runs. Ignored when
	// Logger is set: give that logger its own level. YAML: logLevel.
	LogLevel slog.Leveler
	// Operator, when set, is the operator listener to serve while the
	// server runs (metrics, status, health probes: package ops). The
	// framework does not import package ops: StartOperator, which ops.Start
	// is, starts it at Start and the server closes it at the end of its
	// stop. YAML: operator.
	Operator *OperatorConfig
	// StartOperator starts the listener that Operator describes; it is
	// required when Operator is set (New fails without it, so that an
	// operator section is never ignored). ops.Start is one; ops.Use sets it
	// together with the histograms it serves. It is called at Start, before
	// the feeds read, with the server and the settings; its Closer is
	// closed once the server has stopped.
	StartOperator func(ctx context.Context, srv *Server, c OperatorConfig) (io.Closer, error)
	// Observer, when set, is told how long each line took its group to
	// handle (all its processors, retries included). ops.Observer is one.
	// It is called on the group's goroutine once per line: it must be
	// cheap and must not block. Nil measures nothing and costs nothing.
	Observer HandleObserver
	// Checkpoints is the set of checkpoint holds. Nil means the server
	// makes its own; pass one to share it with a store made before the server.
	Checkpoints *checkpoint.Set
	// UntilSettled makes [Server.Run] a batch run: it returns once every
	// feed has settled (read to its end, every line finished and
	// committed), after a clean stop. A feed that stalls, or whose input
	// does not exist, ends the run with an error instead of waiting
	// forever. By default Run runs until its context is done.
	UntilSettled bool
}

// FeedConfig describes one feed.
type FeedConfig struct {
	// Name names the feed; processors subscribe to it by this name.
	Name string
	// Source is the source to read. When nil, File must be set and the
	// server makes a file source from it.
	Source feed.Source
	// File describes a file source; used when Source is nil.
	File *FileConfig
	// AgentName names the feed's reader: its logs carry it as "agent".
	// Optional.
	AgentName string
	// Overload decides what a full subscriber queue does to the feed.
	Overload OverloadConfig
	// Idle is how the feed's reader waits when there is nothing to read.
	// Nil means a [Backoff] from 1 ms to 50 ms.
	Idle IdleStrategy
	// QueueCapacity is the most lines one subscriber queue holds, rounded
	// up to whole batches. Zero means DefaultQueueCapacity.
	QueueCapacity int
	// BatchSize is the most lines read and handed to the queues at once.
	// Zero means DefaultBatchSize.
	BatchSize int
	// StatusEvents, when set, sends a [StatusEvent] through every
	// subscriber queue each time the source's state changes. Processors
	// that implement [StatusHandler] receive them; checkpoint marks count
	// them.
	StatusEvents bool
}

// FileConfig describes a file source: the spec's FileEventSource.
type FileConfig struct {
	// Filename is the path of the input file. Give Filename or Paths.
	Filename string
	// Paths makes the feed follow a set of files: every file these
	// patterns match, now or later, but those Exclude matches, each read
	// as if it were its own feed (see feed.Config.Paths). A line's
	// Delivery.File names its file, and a group's store keeps one record
	// per file. The records of the files live in one registry,
	// PointerDir/<feed name>.registry: PointerDir is required.
	Paths   []string
	Exclude []string
	// ForgetAfter is how long the registry keeps a file read to its end
	// and gone (feed.Config.ForgetAfter; 0: one hour).
	ForgetAfter time.Duration
	// ReadStrategy decides where reading starts and whether a pointer file
	// is kept. The zero value is feed.Committed.
	ReadStrategy feed.ReadStrategy
	// PointerDir is the folder of the pointer file (see
	// feed.Config.PointerDir); "" means beside the input, as
	// Filename+".readPointer". Give it when the input's folder is
	// read-only, or when two programs follow one file: each needs its own
	// pointer (the pointer file is locked by the feed that holds it).
	PointerDir string
	// Rotated is the pattern of the names the file is rotated to, e.g.
	// "orders.csv.*" (see feed.Config.Rotated): with it the feed reads
	// every rotated file it has not finished, oldest first, before the
	// file at Filename. RotateWait is how long a rotated file is read on
	// after its last write (feed.Config.RotateWait; 0: the default).
	Rotated    string
	RotateWait time.Duration
	// MaxLineBytes is the longest line delivered; 0 means
	// feed.DefaultMaxLineBytes.
	MaxLineBytes int
	// Sync and SyncInterval decide when a pointer write is made durable;
	// the zero value syncs every commit.
	Sync         feed.SyncPolicy
	SyncInterval time.Duration
	// SyncCommit makes every commit wait for its pointer write (and, under
	// feed.SyncEveryCommit, its fdatasync) before the feed reads on. By
	// default, under SyncEveryCommit, the feed's source commits through
	// feed.Config.GroupCommit: a background writer writes one record at a
	// time and coalesces the commits that arrive meanwhile, so reading
	// overlaps the sync instead of waiting for it once a duty cycle. The
	// cost: a crash or power loss also re-delivers the lines committed since
	// the write in progress began, or the rest after it (the writer rests
	// three times as long as its write and sync took, at most 20 ms): a few
	// tens of milliseconds' worth at most, never a gap.
	// Under the other sync policies a pointer write does not wait for the
	// disk, and commits are synchronous whatever SyncCommit says.
	SyncCommit bool
	// OnReject, when set, is told of every line the source does not
	// deliver (oversize, or the unterminated end of a rotated file); the
	// source also logs and counts them (FeedStatus.OversizeSkipped,
	// PartialDropped).
	OnReject func(feed.Reject)
}

// OperatorConfig is the operator listener's settings (YAML "operator:"):
// plain values, handed to Config.StartOperator, since the framework does not
// import package ops (ops.Start maps them to an ops.Config: see there for
// each one's meaning). The zero value of each takes the ops default.
type OperatorConfig struct {
	// Addr is the TCP address to listen on; "" means 127.0.0.1 on a port
	// the system picks (the listener logs the address it took).
	Addr string
	// Token, when set, is demanded on every request (reads included) and
	// allows clients on other hosts; without it only loopback clients are
	// served. Give it from the environment: token: ${TIDEMARK_TOKEN}.
	Token string
	// AllowedHosts are the host names, besides localhost and IP addresses,
	// that a request may name (a guard against DNS rebinding).
	AllowedHosts []string
	// MaxConns caps the connections held open at once.
	MaxConns int
	// ReadHeaderTimeout, ReadTimeout, WriteTimeout and IdleTimeout bound a
	// request's header, a whole request, a response, and a keep-alive
	// connection's wait for its next request.
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration
	// Watch, when positive, logs a record per stall, reopen, drop or failed
	// commit, checking this often; zero means no watcher.
	Watch time.Duration
	// Refresh is how often the status page reloads itself.
	Refresh time.Duration
}

// OverloadPolicy decides what the feed does when a subscriber queue is full.
type OverloadPolicy int

// The overload policies.
const (
	// PolicyDefault takes the source's default: Pause for a source that
	// can re-read its lines after a restart, DropAfterSpin otherwise.
	PolicyDefault OverloadPolicy = iota
	// Pause stops the feed from reading until the queue has room. Nothing
	// is dropped.
	Pause
	// DropAfterSpin waits up to the spin time, then drops the lines that
	// did not fit, for that queue only. Dropped lines are counted, logged
	// and committed past.
	DropAfterSpin
)

// String returns the policy's configuration name.
func (p OverloadPolicy) String() string {
	switch p {
	case PolicyDefault:
		return "DEFAULT"
	case Pause:
		return "PAUSE"
	case DropAfterSpin:
		return "DROP_AFTER_SPIN"
	}
	return fmt.Sprintf("OverloadPolicy(%d)", int(p))
}

// UnmarshalText parses PAUSE or DROP_AFTER_SPIN, in any case.
func (p *OverloadPolicy) UnmarshalText(b []byte) error {
	switch strings.ToUpper(strings.TrimSpace(string(b))) {
	case "", "DEFAULT":
		*p = PolicyDefault
	case "PAUSE":
		*p = Pause
	case "DROP_AFTER_SPIN", "DROPAFTERSPIN":
		*p = DropAfterSpin
	default:
		return fmt.Errorf("framework: unknown overload policy %q: use PAUSE or DROP_AFTER_SPIN", string(b))
	}
	return nil
}

// MarshalText implements encoding.TextMarshaler.
func (p OverloadPolicy) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// OverloadConfig is a feed's overload policy.
type OverloadConfig struct {
	// Policy is the policy; the zero value takes the source's default and
	// logs which one at start.
	Policy OverloadPolicy
	// Spin is how long DropAfterSpin waits for room. Zero means DefaultSpin.
	Spin time.Duration
}

// GroupConfig describes a processor group.
type GroupConfig struct {
	// Name names the group (the spec's agentName). Checkpoint holds are
	// taken by (feed, group name).
	Name string
	// Processors are the names of the group's processors, bound to the
	// [Processors] passed to [New]. They receive each line in this order.
	Processors []string
	// Failure is what the group does when a processor fails.
	Failure FailurePolicy
	// Store is where the group's processors keep their state: "bbolt:DIR"
	// or "pebble:DIR" (created if DIR holds no store), or "DIR" (an
	// existing store, whatever its backend); see state.Open. The server
	// opens it at New and owns it: it binds it to the checkpoint of every
	// feed the group subscribes to (so a feed's pointer never passes what
	// the store has not made durable), resumes each such feed from what
	// the store holds (see Resume), flushes it when the group has drained
	// at Stop, and closes it last. Processors reach it with
	// [Context.Store]. Empty: the group has no store.
	Store string
	// StoreOptions are the options the store is opened with; nil means
	// the defaults. A nil Logger in them means the server's.
	StoreOptions *state.Options
	// Resume decides where the feeds of a group with a store resume after
	// a restart; the zero value, ResumeFromStore, is the one that never
	// loses a line.
	Resume ResumeMode
}

// ResumeMode says whether a group's store decides where its feeds resume.
type ResumeMode int

// The resume modes.
const (
	// ResumeFromStore: a feed that the group subscribes to resumes from the
	// lowest position the group's store has durably applied for it (and
	// from the input's start when the store holds no record of it), never
	// from a pointer that is ahead of the store: the store is the truth,
	// the pointer file a hint. Lines the store already holds are skipped
	// by it. The zero value.
	ResumeFromStore ResumeMode = iota
	// ResumeFromPointer leaves the group's store out of that decision: the
	// feed resumes from its pointer as for a group without a store. Use it
	// for a new processor that should start at the feed's current pointer
	// rather than read the input from its start; a store that lost what
	// it held (deleted, restored from a backup, damaged) then silently
	// misses the lines between.
	ResumeFromPointer
)

// String returns the mode's configuration name.
func (m ResumeMode) String() string {
	switch m {
	case ResumeFromStore:
		return "STORE"
	case ResumeFromPointer:
		return "POINTER"
	}
	return fmt.Sprintf("ResumeMode(%d)", int(m))
}

// UnmarshalText parses STORE or POINTER, in any case.
func (m *ResumeMode) UnmarshalText(b []byte) error {
	switch strings.ToUpper(strings.TrimSpace(string(b))) {
	case "", "STORE":
		*m = ResumeFromStore
	case "POINTER":
		*m = ResumeFromPointer
	default:
		return fmt.Errorf("framework: unknown resume mode %q: use STORE or POINTER", string(b))
	}
	return nil
}

// MarshalText implements encoding.TextMarshaler.
func (m ResumeMode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// FailureAction is what a group does with a line whose retries are spent.
type FailureAction int

// The failure actions.
const (
	// Skip reports the line through the reject callback, logs and counts
	// it, and counts it as finished. The zero value.
	Skip FailureAction = iota
	// Quarantine fences the group: it stops, and every feed it consumes
	// from pauses for every consumer until the fence lifts
	// ([Server.LiftFence]), the processor or group is removed, or the
	// group is restarted.
	Quarantine
)

// String returns the action's configuration name.
func (a FailureAction) String() string {
	switch a {
	case Skip:
		return "SKIP"
	case Quarantine:
		return "QUARANTINE"
	}
	return fmt.Sprintf("FailureAction(%d)", int(a))
}

// UnmarshalText parses SKIP or QUARANTINE, in any case.
func (a *FailureAction) UnmarshalText(b []byte) error {
	switch strings.ToUpper(strings.TrimSpace(string(b))) {
	case "", "SKIP":
		*a = Skip
	case "QUARANTINE":
		*a = Quarantine
	default:
		return fmt.Errorf("framework: unknown failure action %q: use SKIP or QUARANTINE", string(b))
	}
	return nil
}

// MarshalText implements encoding.TextMarshaler.
func (a FailureAction) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// FailurePolicy is how a group handles a processor's error or panic: it
// retries with a doubling back-off that sleeps only its own goroutine, then
// takes the Action.
type FailurePolicy struct {
	// Retries is how many times a failed delivery is retried. Zero means
	// DefaultRetries; NoRetries (any negative value) means none. In YAML,
	// an absent retries means DefaultRetries and "retries: 0" none. An
	// error marked [Permanent] (or whose type says Permanent() true, as a
	// state.ErrTooLarge does) is never retried.
	Retries int
	// Backoff is the wait before the first retry; it doubles up to
	// MaxBackoff. Zero means DefaultBackoff.
	Backoff time.Duration
	// MaxBackoff caps the wait. Zero means DefaultMaxBackoff.
	MaxBackoff time.Duration
	// Action is taken once the retries are spent.
	Action FailureAction
	// OnReject is called, on the group's goroutine, with each line the
	// Skip action gives up on. Optional.
	OnReject func(Rejection)
}

func (p FailurePolicy) withDefaults() FailurePolicy {
	if p.Retries == 0 {
		p.Retries = DefaultRetries
	} else if p.Retries < 0 {
		p.Retries = 0
	}
	if p.Backoff <= 0 {
		p.Backoff = DefaultBackoff
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = DefaultMaxBackoff
	}
	if p.MaxBackoff < p.Backoff {
		p.MaxBackoff = p.Backoff
	}
	return p
}

// delay returns the wait before retry number attempt (0-based).
func (p FailurePolicy) delay(attempt int) time.Duration {
	d := p.Backoff
	for i := 0; i < attempt && d < p.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, p.MaxBackoff)
}

// Rejection is a line that a group skipped after its retries were spent.
type Rejection struct {
	// Group and Processor name who failed.
	Group     string
	Processor string
	// Delivery is the line's delivery context: feed, epoch, position, seq.
	Delivery tidemark.Delivery
	// Line is a copy of the line's payload.
	Line []byte
	// Err is the last error.
	Err error
}

// HandleObserver is told how long a processor group took to handle a line.
// A line of a [BatchHandler]'s call is told its share of the call's time
// (the call's time divided by the lines it finished).
type HandleObserver interface {
	ObserveHandle(group string, d time.Duration)
}
