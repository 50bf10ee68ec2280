// Package natsfeed reads a NATS JetStream stream as a tidemark feed: a
// [Source] delivers the messages of one partition of a stream, in order,
// through a durable pull consumer, and resumes where the stores that
// process them have durably applied, never from JetStream's own record of
// what was acknowledged.
//
// (It is not named jetstream so that it does not clash with nats.go's
// jetstream package, which every caller imports too.)
//
// # What it guarantees
//
// With processors that keep their state in tidemark stores, every message
// of the partition is applied exactly once across crashes of the
// consuming process, restarts and crashes of the server, and fail-overs of
// an R3 stream, as long as:
//
//   - the server does not lose messages it acknowledged to their
//     publisher. By default a JetStream file store syncs to disk every two
//     minutes: a power loss or an operating-system crash of the server can
//     lose what it acknowledged since (a crash of the server process
//     alone loses nothing). Run the server with sync_interval: always, or
//     use R3 streams, or the guarantee is at most once for those messages.
//     The source detects the damage it can see (a stream that ends below a
//     store's position, a message at a store's position that is not the
//     one applied) and stops; it cannot see a lost message that no store
//     had applied yet;
//   - one source reads a partition's consumer at a time (one owner per
//     partition, by a lease). A second reader is detected and stops the
//     source ([ErrSecondReader]), but only once this source is handed a
//     message after the other took some;
//   - the stream keeps the messages until they are applied: a purge, a
//     MaxAge or a MaxMsgs limit that removes messages before they were
//     applied is a gap ([ErrGap]), reported and never skipped silently.
//
// Processors without a store get at-least-once delivery: after a crash
// they resume at the consumer's ack floor (the source acknowledges only
// what the framework committed), and get again what they had not finished.
//
// The partition count is fixed for the life of a stream (an epoch):
// repartitioning is a new stream, read from its first sequence.
//
// The source needs nats-server 2.14 or later: it resets its consumer to a
// sequence (ResetConsumerToSequence), which older servers cannot do. An
// older server is an [ErrConsumer] at open. (Debian 12 packages 2.9.)
//
// # The source contract, on a stream
//
//   - Epoch: the stream's creation time (StreamInfo.Created) in
//     nanoseconds since 1970. A stream deleted and created again under
//     the same name is a new epoch, as the server itself tells them apart;
//     a purge keeps the epoch (the stream's sequences go on).
//   - Position: the stream sequence of the message. A partition's
//     sequences increase with gaps (the other partitions' messages are in
//     between), which the stores' rule needs no more than increasing.
//   - Line: the message's payload, valid until the next Poll. Its subject
//     is not delivered (the partition is the consumer's filter).
//   - Origin: one per epoch. Its TailHash hashes the whole message at a
//     position (epoch, sequence, the time the stream stored it, subject,
//     payload; n is not used), while the source still holds it, which is
//     when a store asks (for the last position of a batch, before the
//     framework commits it). A store records it with its position, and the
//     source checks it at the next open. Identity and Fingerprint are
//     zero: a new epoch never continues the lineage of an old one, since
//     a recreated stream holds new messages.
//   - Commit(epoch, position): an acknowledgement (AckAll) of the message
//     at position, which covers every message of the partition up to it.
//     The framework commits only what every subscriber finished and every
//     store made durable, so the consumer's ack floor never passes what is
//     applied. The ack is sent without waiting for the reply.
//   - Rereadable: true. The framework's default overload policy is Pause:
//     when Poll is not called, the pump goroutine stops pulling once its
//     buffer (Config.Buffer) and nats.go's (Config.PullBatch) are full,
//     and the server delivers nothing more until Poll makes room. Poll
//     never blocks.
//
// # Where a run starts
//
// The framework gives the stores' records to [Source.ResumeFrom] before
// the first Poll. At open (the first Poll, or [Source.Open]) the source
// looks the stream up and, for each record:
//
//	the record                                  covers                 checked
//	no record (a new or emptied store)          nothing: read from the  -
//	                                            stream's first sequence
//	another epoch (the stream was recreated)    nothing: idem, a new     -
//	                                            epoch (logged)
//	the current epoch, applied sequence A       up to A                  A ≤ the stream's last sequence (else
//	                                                                     ErrStreamBehind); the message at A is
//	                                                                     in the partition (else
//	                                                                     ErrWrongPartition) and is the one the
//	                                                                     store applied (its tail hash, else
//	                                                                     ErrDiverged)
//
// It starts after the lowest cover, and also no later than after the
// consumer's ack floor, so that subscribers without a store get what they
// did not finish (the stores skip what they applied). A store behind the
// ack floor (restored from a backup, or another process acknowledged) is
// logged and counted in Status.Rewinds. With no record at all, the ack
// floor is where it resumes (a new consumer: the stream's first sequence).
// If the stream no longer holds the start (its first sequence is above
// it), the messages between are gone: [ErrGap], unless Config.OnGap is
// GapSkip. Then it creates (or updates) the durable consumer, resets it
// to the start (which also drops the server's re-delivery state, and
// lowers the ack floor to what the stores hold), and starts pulling.
//
// # What is checked while it reads
//
// Since each reset, the consumer numbers its deliveries 1, 2, 3...; the
// pump checks that every delivery follows the last, so that every message
// of the partition after the reset reached it, in order:
//
//   - a delivery that skips or goes back, on the same connection and with
//     the same consumer leader, means another client pulled from or reset
//     the consumer: the source stops ([ErrSecondReader]);
//   - after a reconnect or a new consumer leader (a server restart, a
//     fail-over), deliveries in flight may be lost and the server would
//     deliver them again only after AckWait, after newer ones: the source
//     resets the consumer to the last commit, and drops the deliveries it
//     has handed out already. Status counts the resets by reason;
//   - a re-delivery (after AckWait without a commit) of a message handed
//     out already is dropped, counted (Stats.RedeliveriesDropped) and
//     logged;
//   - the partition's count of undelivered messages must not shrink by
//     more than what was delivered: if it does while the stream's first
//     sequence passed what was read, messages were removed before delivery
//     (the feed was paused or behind while a limit or a purge removed
//     them): [ErrGap], or logged and counted under GapSkip. The count is
//     also compared at each status read, so a gap is found while no
//     message arrives;
//   - the stream deleted, or recreated (a new epoch), stops the source
//     ([ErrStreamChanged]); a new source reads the new stream. The
//     consumer deleted (by a new owner at take-over, or an operator) stops
//     it too ([ErrConsumer]): it is not made again behind the new owner's
//     back; a new source makes it and resumes from the stores.
//
// Every [Error] names the stream, partition, consumer, epoch and the
// sequences concerned, and says what to do; Permanent reports true. After
// one, Poll hands out what it had received before, then returns it, at
// every call.
//
// # Gaps
//
// At open, a stream whose first sequence is above where the source must
// start is a gap even for a partition that had no message in between: the
// removed messages cannot be asked which partition they were of. A
// partition quiet for longer than a MaxAge (or a MaxMsgs) while the others
// were busy therefore reports a gap it did not have; set GapSkip for that
// start when it is known to be so. Messages deleted one by one from the
// middle of the stream (DeleteMsg, a purge by subject) are logged, not
// reported.
//
// # Partitions
//
// One source reads one partition: a consumer filtered to its subjects,
// usually from a stream that partitions by subject
// (SubjectTransform{Source: "orders.*", Destination:
// "orders.{{partition(6,1)}}"}), with FilterSubject "orders.3".
//
// Keep the key out of the stored subject, and the filter literal: for a
// filter with a wildcard ("orders.3.>" over orders.P.KEY), nats-server's
// file store looks through every subject of a message block for each
// message it delivers, so a partition of 1,000 keys was read at about a
// third of the rate of the same partition stored as orders.3 (one lookup
// a message; bench/scale, 2026-12-01). The processor finds the key in the
// message, as the ledger does. A supervisor that owns partitions makes one source, one
// store and one framework server per partition: New(Config{JetStream, Stream,
// Partition, FilterSubject}), ResumeFrom(the store's AppliedAll), run.
//
// A partition taken over from another owner (its lease expired): the old
// owner may still be alive (paused, partitioned away) with pull requests
// waiting on the server, which take deliveries meant for the new owner
// until they expire or its connection is closed; the new owner then
// stops with ErrSecondReader. Give each owner's source its own consumer
// (Config.Consumer with the lease's token in its name) and delete the
// previous owner's consumer at take-over: the old owner's requests then
// reach a consumer that no longer exists, and the old owner's source
// stops (ErrConsumer). The new consumer starts where the store says, as
// always.
//
// MaxAckPending must exceed what is in flight at once: the buffers, the
// feed's queue and batch, and two store batches per group, each up to the
// store's MaxBatchSize (see Config.MaxAckPending; the default, 65536,
// covers the framework's and state's defaults, not a MaxBatchSize of
// 40,000 as the ledger example's). Below that the server holds
// deliveries back until a commit: slower, never wrong.
//
// # Status
//
// [Source.Status] maps the stream onto [feed.Status] (its doc lists the
// fields); [Source.Stats] has the stream's terms (first and last
// sequences, lag in messages, the committed, acknowledged and ack-floor
// sequences, dropped re-deliveries, resets, gaps skipped), and
// [Source.Collector] exports them to Prometheus, labelled by stream and
// partition.
//
// The smallest use (the framework does this for a configured feed):
//
//	js, _ := jetstream.New(nc) // nc: nats.Connect(url, nats.MaxReconnects(-1))
//	src, err := natsfeed.New(natsfeed.Config{
//		JetStream: js, Stream: "ORDERS", Partition: "3", FilterSubject: "orders.3.>",
//	})
//	...
//	err = src.ResumeFrom(points) // one per store: state.Store.AppliedAll
//	items := make([]feed.Item, 1024)
//	for {
//		n, err := src.Poll(ctx, items) // never blocks
//		...                            // apply items[:n]; once durable:
//		err = src.Commit(items[n-1].Epoch, items[n-1].Position)
//	}
package natsfeed
