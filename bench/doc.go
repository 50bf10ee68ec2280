// Package bench measures tidemark against the machine it runs on and
// against a peer. It holds what the measurements share: a deterministic
// ledger generator, a fast ledger line parser, and the processors the table
// runs (a no-op processor, the ledger with its state in memory, and the
// ledger with its state in a [state.Store]).
//
// The table itself is printed by bench/cmd/benchtable (make bench, or make
// bench-short for a quick check); the Go benchmarks in this package cover
// the hot functions:
//
//	go test ./bench -run '^$' -bench .
//
// Speed is never asserted in a test: the table prints ratios against
// baselines measured in the same run.
package bench
