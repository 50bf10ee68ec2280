// Package tidemarktest tests a processor's exactly-once behaviour without
// writing files, killing processes or reading stores by hand.
//
// A [Harness] runs a processor group the way a program does, through the
// framework, over a real file feed and a real store in a temporary folder.
// A test appends lines, runs the group until everything is read, saved and
// committed, and then does what production does to a processor:
//
//   - Run again, with new processors: a restart (in-memory state is gone);
//   - Redeliver(n): the feed's pointer goes back to just after line n, as a
//     crash before those lines were committed leaves it; the next Run
//     delivers them again, and a processor that keeps its state in the
//     store skips what it applied;
//   - Snapshot and Restore: the store goes back to an older copy (a backup,
//     a store that lost its last batches) while the pointer stays ahead; the
//     next Run re-reads what the store lacks, because a feed resumes from
//     its stores;
//   - View and Output read the store's tables and transactional outputs.
//
// [CheckExactlyOnce] puts it together: it compares the state after a run
// with the state after runs that re-deliver from several points, and
// reports each point where a re-delivery changed the result. A processor
// that applies through the store passes; one that counts in memory, writes
// to a file of its own, or applies without the delivery's position fails.
//
//	func TestLedgerIsExactlyOnce(t *testing.T) {
//		cfg := tidemarktest.Config{Processors: func() framework.Processors {
//			return framework.Processors{"ledger": &ledger{}}
//		}}
//		tidemarktest.CheckExactlyOnce(t, cfg, lines, nil, func(h *tidemarktest.Harness) any {
//			return balances(h) // read with h.View
//		})
//	}
//
// The processors subscribe to the feed named [Feed]; their group is named
// [Group] and has the store (Config.Backend: bbolt by default).
package tidemarktest
