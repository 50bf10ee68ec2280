package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tidemark-go/tidemark/feed/natsfeed"
	"github.com/tidemark-go/tidemark/framework"
	"github.com/tidemark-go/tidemark/state"
)

// ErrConfig is wrapped by every error of a Config that cannot make a
// supervisor, and of a partition's framework config that breaks a rule of
// the supervisor (see [Config].Partition).
var ErrConfig = errors.New("cluster: invalid config")

// ErrWorkerExists is returned by [Supervisor.Run] when another live worker
// of the same job has the same name: two processes would each take the
// other's share for their own.
var ErrWorkerExists = errors.New("cluster: a live worker of this job has the same name")

// MaxPartitions is the most partitions a supervisor runs.
const MaxPartitions = 1024

// Config says which stream a worker shares with the others, where the
// partitions' state lives, and how a partition's server is made. JetStream,
// Stream, Partitions, FilterSubject, Database and Partition are required.
type Config struct {
	// Name names the job: workers with the same Name and Stream share the
	// stream's partitions. It names the partitions' stores (see
	// StoreName) and consumers (NAME-P-TOKEN). Letters, digits, '-' and
	// '_'; "" means "tidemark".
	Name string
	// Worker is this worker's name, unique among the job's workers; ""
	// means HOST-PID. A second live worker of the same name is refused
	// ([ErrWorkerExists]).
	Worker string
	// JetStream is the JetStream context of the connection the sources
	// read with (jetstream.New(nc), nc with nats.MaxReconnects(-1)). The
	// supervisor never closes it.
	JetStream jetstream.JetStream
	// Stream is the stream's name.
	Stream string
	// Partitions is the stream's number of partitions, 0..Partitions-1.
	// It is fixed for the life of the stream (an epoch): every worker of
	// the job must be given the same, as it is written in the stream's
	// subject transform (partition(N, ...)).
	Partitions int
	// FilterSubject returns the subjects of partition p: the filter of its
	// consumer, e.g. "orders.3" for a stream that stores partition 3's
	// messages as orders.3 (a literal filter is the fast one for the
	// server: see natsfeed, "Partitions"). Two partitions must not
	// overlap.
	FilterSubject func(p int) string
	// Database is the URL of the PostgreSQL database that holds the
	// partitions' stores and the job's table of workers
	// (postgres://user@host:5432/db?sslmode=...; its parameters other than
	// store and lease are kept). Every worker of the job names the same
	// database.
	Database string
	// StoreName returns the name of partition p's store in Database; nil
	// means "NAME/STREAM/P".
	StoreName func(p int) string
	// Lease is how long a partition's store stays owned without a commit
	// or a renewal (the store's lease=), and a worker counts as alive
	// without a heartbeat. A worker that dies loses its partitions after
	// at most this long; a worker paused longer than this loses them, and
	// its late commits are refused. 0 means [state.DefaultLease].
	Lease time.Duration
	// Interval is how often the worker renews its heartbeat, reads the
	// other workers' and looks for partitions to take or to give up; 0
	// means Lease/5, at most 2 s.
	Interval time.Duration
	// FeedName is the name of the partition's feed in its server, the one
	// the processors subscribe to, and under which the store records what
	// it applied; "" means Stream.
	FeedName string
	// Source holds the settings of the partitions' sources: Buffer,
	// PullBatch, MaxAckPending, AckWait, OnGap, Timeout, StatusInterval,
	// Replicas. Its JetStream, Stream, Partition, FilterSubject, Consumer
	// and Logger are the supervisor's.
	Source natsfeed.Config
	// Partition makes the server of partition p: the same framework
	// config and processors as for a file feed, with p.Feed among its
	// Feeds (the partition's JetStream source) and p.Store as the Store of
	// the group that keeps the partition's state. It is called at every
	// attempt to take the partition, so it must make new processors each
	// time and do nothing else. Rules, checked at each call (an error
	// wrapping ErrConfig): p.Feed is in Feeds, unchanged; one group has
	// Store p.Store, and no group has another store (a partition's state
	// must move with it: use namespaces for several processors);
	// UntilSettled is false. The supervisor sets the store's LockTimeout
	// and, when nil, the Logger of the config and of the store.
	Partition func(p Partition) (framework.Config, framework.Processors, error)
	// OnEvent, when set, is told of each change of a partition here (see
	// [Event]). It is called from the supervisor's goroutines, one event
	// at a time, and must not block.
	OnEvent func(Event)
	// Logger receives the supervisor's logs; nil means slog.Default().
	Logger *slog.Logger
}

// Partition is what [Config].Partition is given to make the server of one
// partition.
type Partition struct {
	// Index is the partition's number, 0..Partitions-1.
	Index int
	// Feed is the partition's feed: put it in the config's Feeds as it is.
	// Its Source reads the partition from what the store applied.
	Feed framework.FeedConfig
	// Store is the spec of the partition's PostgreSQL store: the Store of
	// the group that keeps the partition's state.
	Store string
	// StoreName is the store's name in the database.
	StoreName string
}

// defaultInterval bounds the default Interval.
const defaultInterval = 2 * time.Second

// withDefaults returns c with its zero values replaced, or an error
// wrapping ErrConfig.
func (c Config) withDefaults() (Config, error) {
	bad := func(format string, args ...any) (Config, error) {
		return c, fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, args...))
	}
	if c.Name == "" {
		c.Name = "tidemark"
	}
	if !nameOK(c.Name) {
		return bad("job name %q: letters, digits, '-' and '_' only (it names consumers and stores)", c.Name)
	}
	if c.Worker == "" {
		host, _ := os.Hostname()
		c.Worker = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if c.JetStream == nil {
		return bad("JetStream is nil")
	}
	if c.Stream == "" || strings.ContainsAny(c.Stream, ">*. /\\\t\r\n") {
		return bad("stream name %q: must be set, without spaces, dots, slashes or wildcards", c.Stream)
	}
	if c.Partitions < 1 || c.Partitions > MaxPartitions {
		return bad("%d partitions: want 1 to %d", c.Partitions, MaxPartitions)
	}
	if c.FilterSubject == nil {
		return bad("FilterSubject is nil: it names each partition's subjects (e.g. orders.P)")
	}
	seen := map[string]int{}
	for p := range c.Partitions {
		f := c.FilterSubject(p)
		if f == "" {
			return bad("partition %d has no filter subject: every partition reads its own subjects", p)
		}
		if q, ok := seen[f]; ok {
			return bad("partitions %d and %d have the same filter subject %q", q, p, f)
		}
		seen[f] = p
	}
	if c.Lease == 0 {
		c.Lease = state.DefaultLease
	}
	if c.Lease < 100*time.Millisecond {
		return bad("lease %v: at least 100ms", c.Lease)
	}
	if c.Interval == 0 {
		c.Interval = min(c.Lease/5, defaultInterval)
	}
	if c.Interval <= 0 || c.Interval >= c.Lease/2 {
		return bad("interval %v: positive and under half the lease (%v), or a worker would count as dead between two heartbeats", c.Interval, c.Lease)
	}
	u, err := url.Parse(c.Database)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return bad("database %q: want a URL postgres://user@host:port/db?...", redact(c.Database))
	}
	if q := u.Query(); q.Has("store") || q.Has("lease") {
		return bad("database %q: leave out store= and lease= (the supervisor names each partition's store, and Lease sets the lease)", redact(c.Database))
	}
	if c.StoreName == nil {
		name, stream := c.Name, c.Stream
		c.StoreName = func(p int) string { return name + "/" + stream + "/" + strconv.Itoa(p) }
	}
	names := map[string]int{}
	for p := range c.Partitions {
		n := c.StoreName(p)
		if n == "" {
			return bad("partition %d has an empty store name", p)
		}
		if q, ok := names[n]; ok {
			return bad("partitions %d and %d have the same store %q: each partition needs its own", q, p, n)
		}
		names[n] = p
	}
	if c.FeedName == "" {
		c.FeedName = c.Stream
	}
	if c.Partition == nil {
		return bad("Partition is nil: it makes each partition's server")
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// nameOK reports whether s is a name that fits in consumer and store
// names.
func nameOK(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
		default:
			return false
		}
	}
	return true
}

// storeSpec returns the spec of partition p's store: the database's URL
// with store= and lease=.
func (c *Config) storeSpec(p int) string {
	u, _ := url.Parse(c.Database) // checked by withDefaults
	q := u.Query()
	q.Set("store", c.StoreName(p))
	q.Set("lease", c.Lease.String())
	u.RawQuery = q.Encode()
	return u.String()
}

// consumerPrefix is the start of the names of partition p's consumers:
// NAME-P-, then the lease token of the owner that made it.
func (c *Config) consumerPrefix(p int) string { return fmt.Sprintf("%s-%d-", c.Name, p) }

// job is the key of the job's workers in the table of workers.
func (c *Config) job() string { return c.Name + "/" + c.Stream }

// redact returns dsn without its password, for messages.
func redact(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
			return u.String()
		}
	}
	return dsn
}
