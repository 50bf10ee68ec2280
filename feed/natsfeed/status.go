package natsfeed

import (
	"fmt"
	"maps"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark-go/tidemark/feed"
)

// Stats are a source's facts at one moment, in the stream's own terms:
// sequences and message counts. The stream's and the consumer's state are
// as last read (at open, then every Config.StatusInterval).
type Stats struct {
	Stream, Partition, Consumer, FilterSubject string
	// Epoch is the stream's identity: its creation time in nanoseconds.
	Epoch uint64
	// FirstSeq and LastSeq are the stream's first and last sequences.
	FirstSeq, LastSeq uint64
	// Start is the first sequence this run read from: the lowest
	// sequence after what the stores applied (see [Source.ResumeFrom]).
	Start uint64
	// Read is the last sequence handed out by Poll.
	Read uint64
	// Committed is the last sequence the framework committed: what every
	// subscriber finished and every store made durable.
	Committed uint64
	// Acked is the last sequence acknowledged to the server (AckAll). It
	// lags Committed after a reset of the consumer until the next commit.
	Acked uint64
	// AckFloor is the consumer's ack floor as the server reports it.
	// Advisory: another process acknowledging for the same consumer moves
	// it, so the source never resumes from it when a store has a record.
	AckFloor uint64
	// AckPending is the server's count of delivered, unacknowledged
	// messages.
	AckPending int
	// Lag is how many messages of the partition come after Read: those
	// the server has not delivered yet plus those waiting in the buffer.
	Lag uint64
	// Buffered is the number of messages waiting in the buffer for Poll.
	Buffered int
	// Uncommitted is the number of messages handed out and not committed.
	Uncommitted int
	// Delivered counts the messages received and buffered in this run.
	Delivered uint64
	// RedeliveriesDropped counts messages delivered again by the server
	// (after AckWait, or a failure) that the source had handed out: they
	// are dropped, never handed out twice.
	RedeliveriesDropped uint64
	// Resets counts the resets of the consumer to the last commit after a
	// reconnect or a new consumer leader.
	Resets uint64
	// GapsSkipped counts gaps accepted under GapSkip.
	GapsSkipped uint64
	// AckErrors counts acknowledgements that could not be sent.
	AckErrors uint64
	// BufferFullWaits counts the times the pump found the buffer full and
	// waited for Poll to make room (nats.go pulls no more meanwhile), and
	// BufferFullTime is how long it waited in all (the waits that ended):
	// the feed's side (its groups, their stores) was slower than the
	// server. Near 0 over a busy run, the server's deliveries are what
	// bound the partition's rate.
	BufferFullWaits uint64
	BufferFullTime  time.Duration
	// Leader is the consumer's leader (its server's name).
	Leader string
	// Err is the error that stopped the source, if any.
	Err error
}

// Stats returns the source's facts. Safe from any goroutine.
func (s *Source) Stats() Stats {
	s.mu.Lock()
	st := Stats{
		FirstSeq: s.st.first, LastSeq: s.st.last, Start: s.st.start,
		AckFloor: s.st.ackFloor, AckPending: s.st.ackPending, Leader: s.st.leader,
	}
	s.mu.Unlock()
	st.Stream, st.Partition, st.Consumer, st.FilterSubject = s.cfg.Stream, s.cfg.Partition, s.cfg.Consumer, s.cfg.FilterSubject
	st.Epoch = s.epoch.Load()
	st.Read, st.Committed, st.Acked = s.read.Load(), s.committed.Load(), s.acked.Load()
	st.Buffered = len(s.buf)
	st.Lag = s.pending.Load() + uint64(st.Buffered)
	s.heldMu.Lock()
	st.Uncommitted = len(s.held)
	s.heldMu.Unlock()
	st.Delivered, st.RedeliveriesDropped = s.delivered.Load(), s.redelivered.Load()
	st.Resets, st.GapsSkipped, st.AckErrors = s.resets.Load(), s.gapsSkipped.Load(), s.ackErrors.Load()
	st.BufferFullWaits, st.BufferFullTime = s.fullWaits.Load(), time.Duration(s.fullNanos.Load())
	st.Err = s.failure()
	return st
}

// Path is the name of the source in status: jetstream://STREAM, or
// jetstream://STREAM/PARTITION.
func (s *Source) Path() string {
	p := "jetstream://" + s.cfg.Stream
	if s.cfg.Partition != "" {
		p += "/" + s.cfg.Partition
	}
	return p
}

// Status returns the source's facts as [feed.Status] has them (safe from
// any goroutine):
//
//	Path               jetstream://STREAM/PARTITION
//	Strategy           Committed (the stores and commits decide where a run starts)
//	State              starting; waiting (no stream yet); behind (messages of the
//	                   partition not read yet, or stopped on an error: Detail says);
//	                   caught up; stopped (closed)
//	Detail             the lag, the stream's last sequence, the consumer; or the error
//	Epoch              the stream's creation time in nanoseconds
//	ReadPosition       the last sequence handed out
//	CommittedPosition  the consumer's ack floor, as the server last reported it
//	AskedPosition      the last sequence the framework committed (acknowledged)
//	FileSize           0: a stream has no size in sequences of one partition; see Stats.Lag
//	LinesRead          messages received in this run; BytesRead, their payload bytes
//	Reopens            consumer resets by reason (reconnect, leader change, ...)
//	CommitErrors       acknowledgements that could not be sent
//	Rewinds            starts below the consumer's ack floor (a store behind it)
//
// [Source.Stats] has the rest: first and last sequences, lag, acked
// position, dropped re-deliveries.
func (s *Source) Status() feed.Status {
	st := s.Stats()
	s.mu.Lock()
	out := feed.Status{
		Path:              s.Path(),
		Strategy:          feed.Committed,
		State:             s.st.state,
		Detail:            s.st.detail,
		Epoch:             st.Epoch,
		ReadPosition:      int64(st.Read),
		CommittedPosition: int64(st.AckFloor),
		AskedPosition:     int64(st.Committed),
		LinesRead:         st.Delivered,
		BytesRead:         s.bytes.Load(),
		Reopens:           maps.Clone(s.st.reopens),
		LastReopenReason:  s.st.lastReopen,
		LastReopenAt:      s.st.lastAt,
		CommitErrors:      st.AckErrors,
		LastCommitError:   s.st.lastAckErr,
		Rewinds:           s.st.rewinds,
		LastRewind:        s.st.lastRewind,
	}
	s.mu.Unlock()
	if out.State == feed.StateBehind || out.State == feed.StateCaughtUp {
		switch {
		case st.Err != nil:
			out.State = feed.StateBehind
		case st.Lag == 0:
			out.State = feed.StateCaughtUp
		default:
			out.State = feed.StateBehind
		}
		if out.Detail == "" {
			out.Detail = fmt.Sprintf("lag %d messages, stream last sequence %d, consumer %s", st.Lag, st.LastSeq, st.Consumer)
		}
	}
	return out
}

// Collector returns a Prometheus collector of the source's metrics, each
// labelled with the stream and partition (register one per source):
//
//	tidemark_jetstream_stream_first_sequence   the stream's first sequence
//	tidemark_jetstream_stream_last_sequence    the stream's last sequence
//	tidemark_jetstream_read_sequence           the last sequence handed out
//	tidemark_jetstream_committed_sequence      the last sequence the framework committed
//	tidemark_jetstream_acked_sequence          the last sequence acknowledged
//	tidemark_jetstream_ack_floor_sequence      the consumer's ack floor (server)
//	tidemark_jetstream_lag_messages            messages of the partition after the read sequence
//	tidemark_jetstream_uncommitted_messages    handed out, not committed
//	tidemark_jetstream_delivered_total         messages received
//	tidemark_jetstream_redeliveries_dropped_total
//	tidemark_jetstream_resets_total
//	tidemark_jetstream_gaps_skipped_total
//	tidemark_jetstream_ack_errors_total
//	tidemark_jetstream_buffer_full_waits_total waits of the pump for room in a full buffer
//	tidemark_jetstream_buffer_full_seconds_total the time they took
//	tidemark_jetstream_failed                  1 once the source stopped on an error
func (s *Source) Collector() prometheus.Collector {
	labels := prometheus.Labels{"stream": s.cfg.Stream, "partition": s.cfg.Partition}
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("tidemark_jetstream_"+name, help, nil, labels)
	}
	return &collector{s: s, descs: []*prometheus.Desc{
		d("stream_first_sequence", "The stream's first sequence, as last read."),
		d("stream_last_sequence", "The stream's last sequence, as last read."),
		d("read_sequence", "The last stream sequence the source handed out."),
		d("committed_sequence", "The last stream sequence the framework committed."),
		d("acked_sequence", "The last stream sequence acknowledged to the server."),
		d("ack_floor_sequence", "The consumer's ack floor as the server last reported it (advisory)."),
		d("lag_messages", "Messages of the partition after the last one handed out."),
		d("uncommitted_messages", "Messages handed out and not committed."),
		d("delivered_total", "Messages received from the server in this run."),
		d("redeliveries_dropped_total", "Re-deliveries of messages handed out already, dropped."),
		d("resets_total", "Resets of the consumer to the last commit."),
		d("gaps_skipped_total", "Gaps accepted under OnGap: skip."),
		d("ack_errors_total", "Acknowledgements that could not be sent."),
		d("buffer_full_waits_total", "Waits of the pump for room in a full buffer: the feed's side was slower than the server."),
		d("buffer_full_seconds_total", "The time the pump waited for room in a full buffer."),
		d("failed", "1 once the source stopped on an error (see its status)."),
	}}
}

type collector struct {
	s     *Source
	descs []*prometheus.Desc
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	failed := 0.0
	if st.Err != nil {
		failed = 1
	}
	vals := []struct {
		t prometheus.ValueType
		v float64
	}{
		{prometheus.GaugeValue, float64(st.FirstSeq)},
		{prometheus.GaugeValue, float64(st.LastSeq)},
		{prometheus.GaugeValue, float64(st.Read)},
		{prometheus.GaugeValue, float64(st.Committed)},
		{prometheus.GaugeValue, float64(st.Acked)},
		{prometheus.GaugeValue, float64(st.AckFloor)},
		{prometheus.GaugeValue, float64(st.Lag)},
		{prometheus.GaugeValue, float64(st.Uncommitted)},
		{prometheus.CounterValue, float64(st.Delivered)},
		{prometheus.CounterValue, float64(st.RedeliveriesDropped)},
		{prometheus.CounterValue, float64(st.Resets)},
		{prometheus.CounterValue, float64(st.GapsSkipped)},
		{prometheus.CounterValue, float64(st.AckErrors)},
		{prometheus.CounterValue, float64(st.BufferFullWaits)},
		{prometheus.CounterValue, st.BufferFullTime.Seconds()},
		{prometheus.GaugeValue, failed},
	}
	for i, d := range c.descs {
		ch <- prometheus.MustNewConstMetric(d, vals[i].t, vals[i].v)
	}
}
