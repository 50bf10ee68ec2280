// Package cluster spreads the partitions of a NATS JetStream stream over
// several worker processes, on one machine or many, and runs, for each
// partition a worker holds, the same tidemark server a file feed would
// have: one framework.Server, one JetStream source (package natsfeed) and
// one PostgreSQL store (package state). The processors do not change.
//
//	stream ORDERS, partitions 0..5 (subject transform partition(6, ...))
//	   │
//	   ├─ worker A ─ supervisor ─┬─ partition 0: natsfeed.Source ─► framework.Server ─► store NAME/ORDERS/0
//	   │                         └─ partition 3: ...
//	   ├─ worker B ─ supervisor ─┬─ partition 1 ...
//	   └─ worker C ...           └─ partition 4 ...
//	                               PostgreSQL: the stores, their leases, the table of workers
//
// # What it guarantees
//
// Every message of every partition is applied exactly once by the stores
// of the processors that keep their state in the partition's store, across
// SIGKILLs of workers, workers paused or cut off, hand-overs between
// workers, restarts of NATS servers and of PostgreSQL, under the
// conditions natsfeed states (the server must not lose what it
// acknowledged: sync_interval: always, or R3 streams; the stream keeps
// messages until they are applied). How:
//
//   - A partition is owned through its store's lease: opening the
//     PostgreSQL store takes it (with the next token), and only the
//     holder can commit (state's fenced commits). A worker paused past its
//     lease, whose partition another worker took, has its late commits
//     refused (state.ErrFenced) and nothing of them is visible; the
//     supervisor stops that partition and keeps it in standby.
//   - A partition's source resumes from what its store has durably
//     applied, never from JetStream's acknowledgements (natsfeed), so a
//     new owner starts exactly after the last line the old one saved.
//   - Each owner reads through a consumer of its own, NAME-P-TOKEN, and
//     deletes the consumers of older tokens once its own exists: a paused
//     old owner's pulls cannot take the new owner's deliveries, and its
//     source stops (natsfeed.ErrConsumer) when it wakes. (Under WorkQueue
//     retention, which allows one consumer per subject, the old consumer
//     goes first.)
//   - A hand-over (balancing, shutdown) is a clean stop of the partition's
//     server: it drains, the store flushes, the feed commits, the store
//     releases the lease. The next owner re-reads nothing and waits for
//     nothing.
//
// # Workers and balance
//
// Workers of one job (the same Config.Name and Stream, the same Database)
// find each other through a table of the database, tidemark_workers: each
// renews a heartbeat there every Config.Interval (timed by the database's
// clock, as the leases are) with the partitions it holds. A worker whose
// heartbeat is older than the lease is dead; the partitions it held are
// taken by the others as soon as their leases run out: within the lease
// and an interval of its death.
//
// The rule (see balance.go): with P partitions and W live workers, each
// holds ⌊P/W⌋ or ⌈P/W⌉. A worker above ⌈P/W⌉ gives the excess up (a
// worker joined); a worker below it takes partitions no live worker holds,
// the workers below ⌊P/W⌋ first; when none is free and a worker is below
// ⌊P/W⌋, the first by name of those that hold the most gives one up. A
// worker never takes a partition another holds: it waits for the holder to
// give it up or to die. Workers started together wait one interval before
// their first take, so that each sees the others.
//
// # Use
//
// The Partition factory of [Config] makes the server of one partition
// from the feed and the store spec the supervisor gives it:
//
//	js, _ := jetstream.New(nc) // nc: nats.Connect(url, nats.MaxReconnects(-1))
//	sup, err := cluster.New(cluster.Config{
//		Name: "ledger", JetStream: js, Stream: "ORDERS", Partitions: 6,
//		FilterSubject: func(p int) string { return fmt.Sprintf("orders.%d", p) }, // stored as orders.P
//		Database:      "postgres://app@db:5432/app?sslmode=verify-full",
//		Partition: func(p cluster.Partition) (framework.Config, framework.Processors, error) {
//			return framework.Config{
//				Feeds:  []framework.FeedConfig{p.Feed},
//				Groups: []framework.GroupConfig{{Name: "ledger", Processors: []string{"ledger"}, Store: p.Store}},
//			}, framework.Processors{"ledger": newLedger(p.Feed.Name)}, nil
//		},
//	})
//	...
//	err = sup.Run(ctx) // until ctx is done: then every partition stops cleanly
//
// Run on every machine with its own Worker name (the default is HOST-PID).
// [Supervisor.Status] says, per partition, who holds it and by which lease
// token, and, for those held here, the store's applied position, the
// committed and acknowledged positions and the lag; [Supervisor.Collector]
// exports it to Prometheus with the sources' own metrics, and
// [Supervisor.Handler] serves /status and /metrics.
//
// # Limits
//
//   - The partition count is fixed for the life of a stream: the
//     stream's subject transform (partition(N, ...)) and every worker say
//     the same N. Repartitioning is a new stream, a new epoch, read from
//     its start into new stores.
//   - A partition's state lives in its one store; several processors of a
//     partition share it through namespaces. State is per partition: a key
//     of two partitions (a total over all accounts) is summed at read
//     time.
//   - While PostgreSQL is down, the partitions' commits fail and their
//     servers stop (a commit in doubt is a failed commit); the supervisor
//     tries them again with a back-off, and once the database is back the
//     partitions whose leases were not released wait for them to run out.
//     Nothing is lost or applied twice; the lines not saved are read again.
//   - nats-server 2.14 or later (natsfeed resets its consumers).
package cluster
