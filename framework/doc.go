// Package framework is the server: it reads feeds, hands their lines to
// processor groups, and commits each feed's pointer only past lines that
// every subscriber has finished.
//
// # The map
//
//	feed.Source ─► feed runner (one goroutine per feed)
//	                 │ duty cycle: commit, then poll a batch, then hand it off
//	                 ▼
//	               one bounded queue per subscribing group (Pause or DropAfterSpin)
//	                 │ batches, not lines: one channel send per batch per queue
//	                 ▼
//	               group goroutine ─► Processor.Handle(ctx, delivery, line)
//	                 │ (or BatchHandler.HandleBatch(ctx, run of lines))
//	                 │ failure policy: retry with back-off, then Skip or Quarantine
//	                 ▼
//	               finished count + checkpoint holds ─► commit (next duty cycle,
//	                                                     or at once when woken)
//
// A [Server] is made from a [Config] (Go, or YAML through [LoadConfig]) and a
// [Processors] that binds processor names to [Processor] values. Each processor
// group runs on its own goroutine: a slow group never slows another group's
// processing, only the shared pointer.
//
// # What is committed
//
// A group counts a line as finished when its processors' Handle returned, or
// when the failure policy decided its fate (skipped). At the start of each
// duty cycle the feed commits the highest line that every live subscriber
// queue has finished, capped by checkpoint holds (package checkpoint); a
// group that finishes a batch, and a hold declared durable, wake the feed to
// commit at once, also while it waits idle or for room in a full queue.
// [FeedStatus].ProcessedPending is the commit lag: the lines finished and
// not yet committed. The pointer follows the slowest group and never moves
// back. A line dropped for
// a full DropAfterSpin queue is committed past.
//
// After a crash the source re-delivers every line after the pointer (or
// after what a subscriber's store holds, if that is lower): duplicates,
// never a gap. A clean [Server.Stop] stops reading, lets every group drain
// its queue (bounded by Config.DrainTimeout), tells the processors that
// implement [Drainer] (so that a batching processor saves and declares
// durable what it still buffers), flushes the groups' stores, and commits
// again, so lines finished after the feed stopped are committed too. Sequence
// numbers start at 1 every run: recognise a line across runs by its epoch
// and position (package tidemark, the module root), never by its sequence number.
//
// # Runs of lines: BatchHandler
//
// A processor that pays a cost per call (a hold of its store, say) may
// also implement [BatchHandler]: on a queue where it is the only processor
// (with a Config.Observer too), the group hands it a run of
// consecutive lines of the feed in one HandleBatch call (a [Batch]: from
// the next line up to the next status event or the end of the batch the
// feed read), instead of one Handle call a line. Elsewhere it gets Handle
// calls. The call's lines count as finished when it returns, so the
// pointer stays before its first line until then. HandleBatch returns
// (b.Len(), nil), or (k, err) for a line k that failed: the lines before
// k are finished, line k goes through the failure policy (its retries call
// Handle), and a new call goes on after it. Any other result stops the
// server with an error that names HandleBatch. After a panic in
// HandleBatch, the call's lines go to Handle one at a time from the
// call's first: the lines it had handled are handled again (at least
// once; a store skips what it already applied).
//
// # Holds and stalls
//
// The pointer never passes a line that a consumer was given and did not
// finish, however the consumer went (unsubscribed, processor removed, group
// restarted or removed). While it holds, the feed reports stalled with the
// reason, and [Server.WaitSettled] returns a [*StalledError]:
//
//	removed consumer with unfinished lines, others remain
//	    others fed; pointer held before its first unfinished line;
//	    "a removed consumer left unprocessed items: <group> (n items)"
//	last consumer removed
//	    no reading, consumers 0; "no live consumer"; a later subscriber
//	    resumes reading, the pointer stays held
//	group quarantined (fenced) or dead (its restart failed)
//	    the whole feed pauses; "consumer <group> fenced or dead"
//	removed consumer that had finished everything
//	    nothing held
//
// A restarted group's new queues replace its old ones in one step: a line
// read during the restart goes to the new queue, or is held by the old one.
//
// The operator calls are [Server.Unsubscribe], [Server.RemoveProcessor],
// [Server.RestartGroup], [Server.RemoveGroup], [Server.LiftFence] and
// [Server.Release], which gives up a removed consumer's hold without a
// restart (logged and counted). A processor leaves a feed with
// [Context.Unsubscribe]. [Server.FeedStatus] and [Server.GroupStatus] say
// where everything is.
// Holds and fences apply to sources that can re-read (Source.Rereadable);
// for the others a removed consumer's unfinished lines are counted as
// dropped and a fenced group does not pause the feed.
//
// # Stores: exactly once, and the store decides where a feed resumes
//
// A group that keeps its state in a store declares it (GroupConfig.Store:
// "bbolt:DIR" or "pebble:DIR"; YAML "store:"), and the server owns it:
//
//   - New opens it; a processor gets it with [Context.Store] in Start and
//     applies each line to it (state.Store.Apply writes the change and the
//     line's epoch and position in one transaction, and skips a line it
//     already applied);
//   - every feed the group subscribes to is bound to it: the feed's pointer
//     never passes a line whose effect the store has not made durable;
//   - before a feed reads, it is told what the stores of its subscribers
//     hold (feed.Resumer): it resumes from the lowest position they have
//     durably applied, never from a pointer ahead of them, and reads the
//     input from its start for a store that holds no record of it (a new,
//     deleted or restored store). The store is the truth; the pointer file
//     a hint, and the resume point of groups without a store. A group with
//     ResumeFromPointer opts out;
//   - at a clean stop, once the group drained, it is flushed before the
//     final commit, so nothing is read again; it is closed last.
//
// A processor's error marked [Permanent] skips the retries; one marked
// [Fatal], a store's failed commit, or an Apply on a store no checkpoint is
// bound to stops the server: [Server.Run] returns it, [Server.Done] and
// [Server.Err] tell a host that runs several servers. So does a group's
// store that fails while its feeds are idle (the check of a large bbolt
// file running in the background finds damage, see state.Store.Failed):
// the server stops at once, without waiting for a line.
//
// # Configuration
//
// A [Config] is written in Go or loaded from YAML ([LoadConfigFile]). The
// complete commented example, every key with its default, is
// testdata/example.yaml in this package's folder (a test loads it, and
// checks that it names every key). Values may name environment variables
// (${VAR}, ${VAR:-default}, $$ for a $). A mistake is a [*ConfigError]
// that says where and what, and wraps ErrInvalidConfig:
//
//	orders.yaml:7: processorGroups[0]: unknown key "agentNme"; did you mean "agentName"? (valid: agentName, processors, failure, store, storeOptions, resume)
//
// Config.LogLevel (logLevel) sets the level of the default logger.
// Config.Operator (operator) describes the operator listener of package
// ops, which the framework does not import: the program calls ops.Use(&cfg)
// before New, and the server then starts the listener at Start and closes
// it once stopped; New refuses an operator section that nothing serves.
//
// # Smallest use
//
//	srv, err := framework.New(framework.Config{
//		Feeds:  []framework.FeedConfig{{Name: "orders", File: &framework.FileConfig{Filename: "orders.csv"}}},
//		Groups: []framework.GroupConfig{{Name: "orders-agent", Processors: []string{"counter"}, Store: "bbolt:data"}},
//	}, framework.Processors{"counter": counter})
//	...
//	ctx, stop := srv.SignalContext(context.Background()) // SIGTERM, Ctrl-C: a clean stop
//	defer stop()
//	err = srv.Run(ctx) // until ctx is done; Config.UntilSettled: until every feed settled
//
// The counter's Start calls fc.Store() and fc.Subscribe("orders"); its
// Handle calls Apply (see Example_exactlyOnce). Logs go to Config.Logger
// (log/slog); nil means slog.Default(). The package knows nothing of file
// formats or store formats: it opens stores through package state.
package framework
