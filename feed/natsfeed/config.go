package natsfeed

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The defaults of Config.
const (
	// DefaultBuffer is the default number of messages the pump goroutine
	// holds for Poll.
	DefaultBuffer = 2048
	// DefaultPullBatch is the default number of messages nats.go asks the
	// server for at a time (PullMaxMessages).
	DefaultPullBatch = 1024
	// DefaultMaxAckPending is the default limit of the consumer's
	// delivered and unacknowledged messages. See Config.MaxAckPending for
	// the rule it must meet.
	DefaultMaxAckPending = 65536
	// DefaultAckWait is the default time the server waits for an
	// acknowledgement before it delivers a message again.
	DefaultAckWait = time.Hour
	// DefaultTimeout is the default bound of one JetStream API request.
	DefaultTimeout = 10 * time.Second
	// DefaultStatusInterval is the default time between two reads of the
	// stream's and the consumer's state for status and the gap check.
	DefaultStatusInterval = 2 * time.Second
)

// GapPolicy says what the source does when messages its subscribers need
// are no longer in the stream ([ErrGap]).
type GapPolicy int

// The gap policies.
const (
	// GapFail stops the source with an [*Error] of kind ErrGap. The
	// default: a lost message is never skipped silently.
	GapFail GapPolicy = iota
	// GapSkip logs the gap at ERROR (stream, epoch, sequences), counts it
	// in [Stats].GapsSkipped, and reads on from the first message the
	// stream still holds. For an operator who accepts the loss, or for a
	// partition known to have had no messages in the range (see "Gaps" in
	// the package documentation).
	GapSkip
)

// String returns the policy's name.
func (p GapPolicy) String() string {
	switch p {
	case GapFail:
		return "fail"
	case GapSkip:
		return "skip"
	}
	return fmt.Sprintf("GapPolicy(%d)", int(p))
}

// Config says which stream and partition a [Source] reads, and how. Only
// JetStream and Stream are required.
type Config struct {
	// JetStream is the JetStream context of the connection to read with
	// (jetstream.New(nc)). The source never closes the connection. Give
	// the connection unlimited reconnects (nats.MaxReconnects(-1)): a
	// connection that gives up closes, and the source stops with
	// ErrClosed.
	JetStream jetstream.JetStream
	// Stream is the stream's name.
	Stream string
	// Partition names the part of the stream this source reads, for the
	// consumer's default name, logs and status ("3"); "" when the source
	// reads the whole stream.
	Partition string
	// FilterSubject selects the partition's messages ("orders.3.>"); ""
	// reads every subject of the stream.
	FilterSubject string
	// Consumer is the name of the durable consumer the source reads
	// through; the default is "tidemark" for the whole stream and
	// "tidemark-<Partition>" for a partition. The source creates it (or
	// updates it to the configuration it needs). One source reads one
	// consumer at a time: a second reader is detected ([ErrSecondReader]).
	Consumer string
	// Replicas is the consumer's replica count; 0 takes the stream's.
	Replicas int
	// Buffer is how many messages the pump goroutine holds for Poll
	// (DefaultBuffer when 0). When Poll is not called (the feed pauses),
	// the pump stops pulling once Buffer messages wait, plus at most
	// PullBatch in nats.go's own buffer.
	Buffer int
	// PullBatch is how many messages nats.go asks for at a time
	// (DefaultPullBatch when 0).
	PullBatch int
	// MaxAckPending is the consumer's limit of delivered, unacknowledged
	// messages (DefaultMaxAckPending when 0). The source acknowledges only
	// what the framework commits, and the framework commits only what
	// every store made durable, so the limit must exceed everything in
	// flight: Buffer + PullBatch + the feed's queue capacity and read
	// batch + two store batches per group (the one committing and the
	// one staged: each up to state's MaxBatchSize, or BatchSize when that
	// is less). Below that the server holds deliveries back until the
	// next commit: reading is slower, never wrong. Above it costs the
	// server too: it keeps a record of every message delivered and not
	// acknowledged, and writes them all with the consumer's state (in
	// bench/scale, a quarter of the NATS server's CPU for the ledger,
	// which acknowledges only what its store committed).
	MaxAckPending int
	// AckWait is how long the server waits for an acknowledgement before
	// it delivers a message again (DefaultAckWait when 0). The source
	// drops such redeliveries (it has handed the message out already), so
	// a short AckWait only costs traffic.
	AckWait time.Duration
	// OnGap says what to do when messages the subscribers need are gone
	// (GapFail, the default, or GapSkip).
	OnGap GapPolicy
	// Timeout bounds each JetStream API request (DefaultTimeout when 0).
	Timeout time.Duration
	// StatusInterval is the time between two reads of the stream's and the
	// consumer's state, for status, metrics and the gap check while no
	// message arrives (DefaultStatusInterval when 0; negative: never).
	StatusInterval time.Duration
	// Logger receives the source's logs; nil means slog.Default().
	Logger *slog.Logger
}

// withDefaults returns c with its zero values replaced, or an error
// wrapping ErrConfig.
func (c Config) withDefaults() (Config, error) {
	if c.JetStream == nil {
		return c, fmt.Errorf("%w: JetStream is nil", ErrConfig)
	}
	if c.Stream == "" || strings.ContainsAny(c.Stream, ">*. /\\\t\r\n") {
		return c, fmt.Errorf("%w: stream name %q: must be set, without spaces, dots, slashes or wildcards", ErrConfig, c.Stream)
	}
	if c.FilterSubject != "" && !validSubject(c.FilterSubject) {
		return c, fmt.Errorf("%w: filter subject %q: tokens separated by dots, '*' for one token, '>' for the rest", ErrConfig, c.FilterSubject)
	}
	if c.Consumer == "" {
		c.Consumer = "tidemark"
		if c.Partition != "" {
			c.Consumer += "-" + c.Partition
		}
	}
	if strings.ContainsAny(c.Consumer, ">*. /\\\t\r\n") {
		return c, fmt.Errorf("%w: consumer name %q (from partition %q): no spaces, dots, slashes or wildcards; set Consumer", ErrConfig, c.Consumer, c.Partition)
	}
	if c.Buffer < 0 || c.PullBatch < 0 || c.MaxAckPending < 0 || c.AckWait < 0 || c.Timeout < 0 || c.Replicas < 0 {
		return c, fmt.Errorf("%w: negative Buffer, PullBatch, MaxAckPending, AckWait, Timeout or Replicas", ErrConfig)
	}
	if c.OnGap != GapFail && c.OnGap != GapSkip {
		return c, fmt.Errorf("%w: unknown gap policy %d", ErrConfig, int(c.OnGap))
	}
	if c.Buffer == 0 {
		c.Buffer = DefaultBuffer
	}
	if c.PullBatch == 0 {
		c.PullBatch = DefaultPullBatch
	}
	if c.MaxAckPending == 0 {
		c.MaxAckPending = DefaultMaxAckPending
	}
	if c.AckWait == 0 {
		c.AckWait = DefaultAckWait
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.StatusInterval == 0 {
		c.StatusInterval = DefaultStatusInterval
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// consumerConfig is the durable consumer the source reads through.
func (c *Config) consumerConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       c.Consumer,
		Description:   "tidemark source: positions live in the stores; never resume from this consumer's ack floor",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckAllPolicy,
		AckWait:       c.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: c.MaxAckPending,
		FilterSubject: c.FilterSubject,
		Replicas:      c.Replicas,
	}
}

// validSubject reports whether s is a subject or a filter: tokens
// separated by dots, none empty, '*' a whole token, '>' only as the last.
func validSubject(s string) bool {
	if s == "" || strings.ContainsAny(s, " \t\r\n\f") {
		return false
	}
	toks := strings.Split(s, ".")
	for i, t := range toks {
		switch {
		case t == "":
			return false
		case t == ">":
			if i != len(toks)-1 {
				return false
			}
		case strings.ContainsAny(t, "*>") && t != "*":
			return false
		}
	}
	return true
}

// subjectMatches reports whether subject is matched by filter ("" matches
// everything).
func subjectMatches(filter, subject string) bool {
	if filter == "" {
		return true
	}
	for {
		ft, frest, fmore := strings.Cut(filter, ".")
		st, srest, smore := strings.Cut(subject, ".")
		switch {
		case ft == ">":
			return st != ""
		case ft != "*" && ft != st:
			return false
		}
		if !fmore || !smore {
			return fmore == smore
		}
		filter, subject = frest, srest
	}
}
