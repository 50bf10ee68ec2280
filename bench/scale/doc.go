// Package scale measures the partitioned ledger: `ledger run --source
// nats://… --store postgres://…` (examples/ledger, package cluster), with a
// NATS server in a child process (nats-server v2.15.2 from its Go module,
// sync_interval: always) and a PostgreSQL 15 cluster of the benchmark's own
// (fsync and synchronous_commit on), everything on the same machine.
//
// The rows are Go benchmarks, each run once (-benchtime 1x) and reported as
// custom metrics, with their baselines measured in the same run:
//
//	cd bench && go test ./scale -run '^$' -bench . -benchtime 1x
//
//	BenchmarkJetStreamToPostgres   one worker, one partition, exactly once:
//	                               lines/s, and its ratio to a bare durable
//	                               pull consumer that acknowledges every
//	                               1,000 messages (AckAll), on the same stream;
//	                               and the NATS server's CPU time a line (or a
//	                               message) meanwhile: the server shares the
//	                               cores (for the worker, from its take-over
//	                               to its last save)
//	BenchmarkHighCardinality       one worker, one partition, 1,000,000
//	                               accounts (nearly every line a new key):
//	                               lines/s and distinct keys/s
//	BenchmarkPartitions/P=N        one worker holding N partitions: lines/s
//	BenchmarkFailover              a worker's SIGKILL to the first save of
//	                               its successor on the partition: p50, max
//
// TIDEMARK_SCALE_PROFILE=DIR writes a CPU profile of each measured worker
// into DIR (ledger run --cpuprofile). TIDEMARK_SCALE_BASELINE=EXE names a
// ledger program built from another commit: BenchmarkJetStreamToPostgres
// then runs it too in each round, and reports this build's worker CPU a
// line as a ratio of the baseline's (cpu-ratio), measured in the same run
// on the same stream; BenchmarkHighCardinality reports the ratio of the
// rates (ratio):
//
//	(cd /path/to/checkout-of-main && go build -o /tmp/ledger-base ./examples/ledger)
//	TIDEMARK_SCALE_BASELINE=/tmp/ledger-base go test ./scale -run '^$' -bench JetStreamToPostgres -benchtime 5x
//
// The worker rows report, beside their rates, what they cost: the worker's
// CPU a line, the NATS server's and PostgreSQL's (every process of the
// cluster) over the same time, and for BenchmarkJetStreamToPostgres the
// time from the take-over to the first save that holds lines (the source's
// open, its first pull, the first batch and its commit), and each run's
// rate. With a baseline, the baseline runs first in even rounds and last
// in odd ones, so that neither build always follows the bare consumer.
//
// For a diagnosis:
//
//	TIDEMARK_SCALE_ARGS="--max-batch 10000"  more flags for the measured
//	                                        workers (not the baseline's)
//	TIDEMARK_SCALE_LOGS=DIR                 keeps every worker's log in DIR
//	TIDEMARK_SCALE_LOG_LEVEL=info           the workers' log level (warn)
//	TIDEMARK_SCALE_NATS_PPROF=6061          the NATS server serves Go's
//	                                        profiles on that port
//	                                        (/debug/pprof/profile?seconds=1)
//
// Nothing here asserts a speed; see bench/RESULTS.md for the figures.
package scale
