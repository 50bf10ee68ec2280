// Package state is a durable store that applies every delivered line of a
// feed exactly once: it writes a processor's state change and the feed's
// (epoch, position) in one transaction, skips re-deliveries, and drives the
// feed's checkpoint so that the feed's pointer never passes what is durable.
//
// # Caveats
//
//   - Values returned by [Tx.Get] are valid only inside the function given
//     to Apply, View or Snapshot, and the keys and values of a loop (see
//     "Iteration") only until its next step; none may be modified. Copy
//     what you keep. A [Tx] must not be used after its function returned.
//     A [Table]'s values are decoded copies.
//   - The function given to Apply must not call the store: Apply and View are
//     serialized, one at a time, for the whole store. A read beside a
//     running processor (a status page, a query, a tool) belongs in
//     [Store.Snapshot], which blocks neither.
//   - In the default, batched mode, Apply returns before the change is
//     durable. A crash loses the changes staged since the last commit; that
//     is safe only because the store, not the processor, tells the feed what
//     is durable (the group's checkpoint is bound to the store): the feed
//     re-delivers the lost lines and they are applied again, once. So a
//     batched Apply of a feed that no checkpoint is bound to fails with
//     [ErrNotBound]. A framework group's store is bound by the framework;
//     bind one yourself with [Store.Bind], or open it with
//     [Options].Unbound if you resume from [Store.AppliedAll] yourself.
//   - A key or value longer than the backend takes (bbolt: a key of 32768
//     bytes with the store's prefix; each backend's limits are listed at
//     [TooLargeError]) is refused inside Apply with a [*TooLargeError], a
//     permanent error: the line goes to the failure policy, and the lines
//     after it commit as usual.
//   - A processor that also writes somewhere else (a socket, another file)
//     repeats those effects after a crash. Write derived files through
//     [Tx.Output] to have them exactly once.
//   - After a failed commit (an I/O error, a full disk) the store is failed:
//     every Apply and Flush returns [ErrFailed], and nothing more is declared
//     durable; [Store.Failed] is closed, for a host whose feed is idle (the
//     framework stops its server). Restart the process; nothing is lost.
//   - View sees the staged state (what Apply calls have done, durable or
//     not), not only the durable one. [Store.Applied] reports the durable
//     position.
//   - A store folder belongs to one process at a time, enforced: Open takes
//     an OS lock (flock on the folder's LOCK file) before it reads or
//     writes anything else there, and holds it until Close (the kernel
//     drops it with a dead process). Another Open, in this process or
//     another, waits up to [Options.LockTimeout], then fails with
//     [ErrLocked], naming the holder's process id where the system tells
//     (Linux).
//   - A folder's STORE file stands for its store: a new store writes it
//     last, once the backend holds data. A folder whose STORE names a
//     backend whose data is not there (state.bolt, or the Pebble database
//     in pebble/, deleted) fails to open with [ErrStoreMissing]; one whose
//     STORE disagrees with the data it holds, with [ErrBackendMismatch].
//     Neither changes anything in the folder. To start over, remove the
//     whole folder: the feeds then read their input again, as a store with
//     no record of a feed asks.
//   - Pebble's write-ahead log: a store closed cleanly keeps nothing in it
//     (Close flushes Pebble's memtable), so damage to it between two runs
//     loses nothing. After a crash the log holds the last batches. A damaged
//     record that records synced after it vouch for (in a later 32 KiB
//     block) makes Open fail with [ErrCorrupt], naming the file and the
//     offset. Damage that Pebble takes for the log's end (in its last 32
//     KiB) loses the batches from there on: the store logs a warning that
//     names the file and the offset, and opens behind, never ahead of what
//     it holds; the feeds re-read the lines it lacks.
//   - Damage is found, never trusted. Every value the store writes (format 2
//     on) carries a CRC-32C of its key and bytes, checked on every read, in
//     every backend. bbolt trusts its pages (a damaged leaf or branch page
//     makes keys silently absent, which no value checksum sees), so every
//     bbolt file is checked once per open: its whole tree read in file
//     order, each page held to the layout bbolt writes (its id, its element
//     count and the packing of its elements, its overflow pages), each key
//     to its order and to the range its parent gives it, each value to its
//     checksum, and the freelist to the pages no tree reaches. A file of at
//     most [Options].VerifyMaxBytes (64 MiB by default) is checked before
//     Open returns; a larger one in the background while the store serves
//     the processor's reads, with its first commit, its snapshots and its
//     backups waiting for the check, so that nothing read from a damaged
//     file is ever committed, shown to an operator or copied (damage found
//     then fails the store: every later read, Apply, Flush and commit
//     returns it, and [Store.Failed] is closed at once). The check costs about 0.4 s for 1,000,000 values (a file of 140 MiB) and 5
//     to 7 s for 10,000,000 (1.4 GiB), about 4 s a GiB on a loaded 2-core
//     machine; an open that leaves it to the background takes milliseconds
//     (BenchmarkOpenVerify). A restart must not wait seconds for it on a
//     store it left sound: a clean close of a file that passed its
//     check (or was vouched for so) records its size, modification time
//     (set a second back first, so that any later write moves it), inode
//     and meta transaction in state.bolt.checked, and an open that finds
//     the file exactly so, whatever its size, checks it in the background
//     and lets its commits go on meanwhile
//     (the check still fails the store on damage, and removes the record).
//     Snapshots, backups and upgrades still wait for the check. A panic or fault of bbolt on a damaged page
//     becomes an error (the memory-mapped pages are read with
//     debug.SetPanicOnFault). Pebble checks its own blocks as it reads them;
//     before it opens, the store reads its MANIFEST (Pebble takes a damaged
//     record of it for its end, and would open an older version of its
//     tables and delete the newer ones) and refuses a damaged one, and a
//     database of at most VerifyMaxBytes is opened read-only and its levels
//     checked first (about 2 µs a key), unless the store left it so at its
//     last clean close: state.pebble.checked then lists every file of the
//     database with its size, modification time (set a second back) and
//     inode, and an open that finds them exactly so reads the whole
//     database in the background instead, a second later (damage found
//     fails the store; the record is removed at every open, so a crash
//     leaves none). A file output's committed bytes are checked at open
//     against a CRC-32C recorded with its length: the whole file when it
//     is at most VerifyMaxBytes, or changed since the store's last clean
//     close; a larger one found exactly as that close left it
//     (state.outputs.checked records its size, modification time, set a
//     second back, and inode) only the bytes of the last batch that wrote
//     to it (recorded with their offset and the CRC-32C of the bytes before
//     them), the rest in the background a second later (damage found fails
//     the store; a backup waits for the check), so that a restart does not
//     read the whole file (380 MB at 10,000,000 ledger lines), and a file
//     changed while the store was closed is read whole by a run of any
//     length. Each failure is a
//     [*CorruptError] (wrapping [ErrCorrupt]) that names the file, the
//     record (namespace, bucket, key) and what to do: restore the folder
//     from a backup, or remove it to start over (the feeds then read their
//     input again). The framework stops on it rather than skip a line. A
//     store of format 1, written before the checksums, opens and is used as
//     it is, without them; [Upgrade] (tidemark store upgrade DIR) gives its
//     values their checksums in place, in chunks that survive a kill at any
//     moment (the next open finishes an interrupted upgrade). Values
//     checksummed cost a few percent of Apply (BenchmarkChecksum; bench/
//     row 19 runs the ledger into stores of both formats).
//   - A store says its format in its format record, read before anything
//     else: 1 (no checksums), 2 (checksums), 3 (as 2; a file output's
//     record also holds where its last batch starts, so that an open
//     checks only that batch's bytes), 4 (bbolt stores only: as 3, each
//     table's keys in a bbolt bucket of their own, without the table's
//     prefix). A new bbolt store is of format 4, a new Pebble or
//     PostgreSQL store of format 3; a bbolt store of format 3 or before
//     keeps its keys where they are until [Upgrade] moves them into their
//     tables' buckets (in chunks too, finished by the next open after a
//     kill). One of format 2 becomes one of format 3 in the transaction of
//     its first
//     output record of that kind, so that a version of tidemark that knows
//     only format 2 refuses the store on its format record ("format
//     "tidemark-state 3"") rather than take the new record for damage
//     and advise removing the folder: going back to such a version means
//     restoring a backup it made, or keeping the newer one. An open that
//     finds a format newer than it knows fails with [ErrNewerFormat]
//     ("written by a newer tidemark (format N); run that version or
//     newer"), not [ErrCorrupt], and changes nothing.
//   - An output is recorded before its first byte is written, so a file of
//     the output's name that the store has no record of is not its own: if
//     it is not empty, declaring the output fails with [ErrOutputExists]
//     and the file is left as it is. Move it away.
//   - A PostgreSQL store belongs to one owner at a time, through its
//     lease (see "PostgreSQL").
//   - The function's error is returned as is and nothing it wrote is kept;
//     the feed's failure policy decides what happens to the line.
//
// # Use
//
// A processor group of the framework declares its store
// (framework.GroupConfig.Store): the framework opens it, binds it to the
// checkpoint of every feed the group subscribes, flushes it when the group
// drains and closes it at stop. Used on its own: open a store, bind the
// processor group's checkpoint, and apply each line in the processor's
// Handle:
//
//	var balances = state.NewTable("balances", state.String{}, state.Int64{})
//
//	st, err := state.Open("bbolt:data/state", nil) // or "pebble:DIR"
//	...
//	defer st.Close() // flushes
//	st.Bind("orders", registry.Hold("orders", "orders-agent"))
//	ledger := st.Namespace("ledger")
//
//	// in Handle(ctx, d tidemark.Delivery, line []byte):
//	_, err := ledger.Apply(ctx, d, func(tx *state.Tx) error {
//		_, err := balances.Add(tx, account, amount)
//		return err
//	})
//
// The backend ("bbolt" or "pebble") is recorded in the directory's STORE
// file: a tool opens an existing store with [OpenDir] (or Open("DIR")).
//
// # Tables
//
// A [Table] is a typed bucket: NewTable(bucket, keyCodec, valueCodec).
// Its Get, Put, Delete, Update and Add work in any transaction, its loops
// (All, Range, Prefix, ...) return decoded keys and values. The codecs
// [Int64], [Uint64], [String], [Bytes] and [JSON] are built in; a type of
// your own implements [Codec] (values) or [KeyCodec] (keys, in an order
// preserving encoding). The encodings:
//
//	codec    as a value                       as a key
//	Int64    8 bytes big-endian, two's        8 bytes big-endian, sign bit
//	         complement (PutInt64's)          flipped: -1 sorts before 0
//	Uint64   8 bytes big-endian               the same
//	String   the bytes of the string          the same
//	Bytes    the bytes                        the same
//	JSON     encoding/json                    (not a key codec)
//
// So a Table[string, int64] reads the values that [Bucket.AddInt64] and
// [Bucket.PutInt64] wrote, and the other way round: a store written
// before tables existed reads through them. (Raw keys written with
// PutInt64's encoding do not read back through the Int64 key codec, whose
// bytes differ for the order's sake.)
//
// A [Counter] is one key of a table of Int64 or Uint64 values that many
// lines add to (a count of lines, a sum): var lines =
// counters.Counter("lines"), then lines.Add(tx, 1) in Apply. It is the
// table's Add of that key, with the key encoded once and its place in the
// staging batch remembered by the store, so that an Add after the first
// of a batch neither hashes nor looks up the key: about 13 ns rather than
// 26 (BenchmarkTableLine, table-counter against table-add).
//
// The first write through a table in a run records the table's [Schema]
// (its codecs' names) in the store, with the batch that holds that write,
// read back by [Bucket.Schema] once it is durable: so that tidemark store
// show decodes its keys and values.
//
// # Iteration
//
// A bucket's or a table's All, Range, From, Prefix and their Reverse forms
// return an [iter.Seq2] for a range loop. The loop reads the backend as it
// goes (a bbolt cursor a page at a time, a Pebble iterator, pages of rows
// of PostgreSQL) and merges in key order the changes staged in memory
// (the batches not yet durable, and the transaction's own writes), which
// win over the backend's; a staged delete hides a key. Nothing is copied
// but a page of the backend's keys and the staged changes' order (bounded
// by the batches), so a bucket of any size iterates in bounded memory.
// [Bucket.ForEach] is All as a callback.
//
// An iteration's error (a read that failed, a value whose checksum does
// not match, which is a [*CorruptError] naming the key, a value its codec
// cannot decode) ends the loop and fails the transaction: [Tx.Err] returns it,
// and Apply, View and Snapshot return it even when their function returns
// nil; a failed Apply stages nothing of its line.
//
// # Snapshots
//
// [Store.Snapshot] runs a read-only function on a consistent snapshot of
// the durable state: bbolt's read transaction, a Pebble snapshot, or a
// PostgreSQL transaction REPEATABLE READ, READ ONLY on a connection of its
// own. It takes neither the lock of Apply and View nor the store's: the
// processor applies and commits while it runs, and its own View keeps
// seeing what it staged. The snapshot holds on to what it reads while it
// lasts: bbolt keeps the pages it sees (its file grows by what commits
// meanwhile; the store maps the first GiB of the file from the start, so
// that bbolt does not wait for the snapshot to map a growing file again
// below that), Pebble its tables, PostgreSQL its row versions (VACUUM
// waits). Keep snapshots short: a page of a listing, not a session.
// [Tx.Namespaces], [Tx.Buckets] and [Tx.Feeds] list what a snapshot holds,
// for tools.
//
// # Backup
//
// [Store.Backup] writes a consistent copy of the whole store into a new
// folder while the store is in use: a snapshot's durable state, with the
// applied positions of every feed in it and the outputs cut at the
// lengths it records. bbolt writes its file from a read transaction
// (Tx.WriteTo); Pebble makes a checkpoint (hard links to its tables where
// the folder is on the same file system); a PostgreSQL store is copied
// into a bbolt store (its outputs become files), since a folder is what a
// backup is. The copy is built beside the folder and renamed into place
// once synced: the folder is either absent or a complete store, which
// OpenDir opens.
//
// A backup reads every value it copies and checks its checksum (and the
// backend's own checks run on the way: bbolt's pages, Pebble's blocks), so
// that damage is found when the copy is made, not when it is needed: a
// damaged value fails the backup with a [*CorruptError] naming the
// record, and leaves no folder. The outputs' files are copied up to their
// committed lengths; the copy of a PostgreSQL store records the checksum
// of each output file's bytes, as a local store does.
//
// Opening the copy is a restore: the store is behind its feeds, and a
// feed resumes from the store (the framework reads [Store.AppliedAll]),
// so the lines after the backup are read again and applied once. To
// restore, stop the process, move the store's folder away, put the copy
// (or a copy of it) in its place, and start again. A PostgreSQL store's
// backup is a local bbolt store: open it as one (to read it, or to run
// on); the database's own backups (pg_dump, base backups) are the way to
// restore the database.
//
// # How a line is applied
//
// Apply skips a delivery at or below the position recorded for its feed in
// the same epoch (see [tidemark.AlreadyApplied]), without calling the function,
// and counts it in [Stats]. Otherwise it calls the function with a [Tx] whose
// reads see the durable state, every change staged by earlier Apply calls,
// and its own writes, and stages the writes together with the delivery's
// (epoch, position). Each processor has its own namespace
// ([Store.Namespace]): its own keys, buckets and positions per feed.
//
// ApplyEach ([Namespace].ApplyEach) applies several lines in one call,
// each as Apply would (its own transaction, skipped when a re-delivery),
// for a processor that is handed lines in batches (the framework's
// BatchHandler):
//
//	done, err := ledger.ApplyEach(ctx, len(ds), func(i int) *tidemark.Delivery { return &ds[i] },
//		func(tx *state.Tx, i int) error {
//			_, err := balances.Add(tx, accounts[i], amounts[i])
//			return err
//		})
//
// It takes the store once for the lines rather than once a line, and
// stages most of them without the store's lock (the lines of one feed and
// epoch in order, while the batch has room): the atomic operations of a
// line's Apply, each a full barrier, cost about as much as a cheap line's
// writes. A line whose function fails is not applied and ends the call
// (done is its index); the lines before it stay staged.
//
// ApplyRuns ([Namespace].ApplyRuns) goes further: one transaction for each
// run of the lines (of one feed and epoch, in order, as many as the
// staging batch takes), whose function applies the run's lines and can
// write once for all of them what each line changes:
//
//	done, err := ledger.ApplyRuns(ctx, len(ds), func(i int) *tidemark.Delivery { return &ds[i] },
//		func(tx *state.Tx, from, to int) error {
//			var sum int64
//			for i := from; i < to; i++ {
//				if _, err := balances.Add(tx, accounts[i], amounts[i]); err != nil {
//					return err
//				}
//				sum += amounts[i]
//			}
//			_, err := total.Add(tx, sum)
//			return err
//		})
//
// A key written by several lines of a run is logged for undo once, and
// the run's position is recorded once. When the function fails, nothing
// of its run is staged and done is the run's first line: a processor that
// must keep the lines before the one that fails applies the rest with
// ApplyEach (the ledger example does).
//
// # Durability modes
//
// Batched (the default). Apply stages the change in memory. A committer
// goroutine cuts a batch every [Options.BatchSize] deliveries (default
// 10000) or every [Options.BatchInterval] (default 20 ms), and commits it in
// one durable transaction (bbolt: a commit with its two syncs; Pebble: a
// batch committed with Sync) holding only the keys the batch changed and the
// highest position per feed. Only then does it hand each bound checkpoint
// the mark it took when it cut the batch. The mark is taken under the lock
// that swaps the staged batch: every item the mark counts has finished, so
// its Apply returned, so its changes are in this batch or an earlier one. The
// mark never gets ahead of what is durable.
//
// While a batch commits the next one is staged. With
// [Options].MaxBatchSize above BatchSize, the staged batch goes on taking
// deliveries past BatchSize while the one before commits, up to
// MaxBatchSize: a committer that falls behind gets fewer, bigger batches,
// which change fewer keys a line (at 10,000 accounts, 6,300 keys for
// 10,000 lines, 9,800 for 40,000). A batch that reaches MaxBatchSize (or
// BatchSize, without it) while the one before commits is cut, and waits
// for that commit, which the committer follows with its own at once; the
// next batch fills meanwhile. When that one is full too, Apply waits
// (back-pressure): at most three batches are staged. With one batch in
// flight, the Applies and the committer took turns waiting for each
// other (examples/ledger, 10,000 accounts, saves of 10,000 lines: the
// committer idle a sixth of the run, the lines waiting a third); a batch
// that waits its turn took 12 and 16 % off that run in two series of
// alternated runs (nothing in a third), and 6 to 30 % off the runs of 20
// accounts (core.canPend). A batch full of bytes or of the keys a
// bbolt commit has memory for (limits of memory) does not wait beside
// another: the Apply waits instead. Apply waits less with larger batches
// too (the ledger runs with 4 times its batch;
// 5,000,000 lines of 10,000 accounts: 233 saves instead of 529, 27 % less
// CPU; with PostgreSQL, whose server works a row for each key a batch
// changes, 20 times: 1,000,000 lines of 10,000 accounts in 7 saves and
// 0.84 to 0.92 s, against 26 and 1.49 to 2.08 s with 4 times). The last
// batch committed is kept too, as a cache of durable values (a read of a key
// it holds does not go to the backend), so memory holds the changes of at
// most four batches. A crash or a power loss loses at most the three
// batches staged (three times MaxBatchSize deliveries at most); the feed's
// pointer is behind them, so the feed re-delivers their lines.
//
// # Memory and the cache budget
//
// A read of a key that none of those batches holds is served from the
// store's value cache, or read from the backend and cached: the cache holds
// durable values (and absent keys) read or committed, and the committer
// folds every batch it commits into it (off its own way) before any
// transaction stops finding the batch's values in the batch itself, so it
// never serves a value older than the backend's. A bbolt or Pebble store
// that held no data when it opened knows every key it holds while its cache
// has dropped none: a key new to it (an account's first line in a new
// ledger) is known to be absent without a read of the backend. One that
// held data reads its keys into the cache after the open, in key order, on
// a goroutine of its own, until the cache has no room for the next (the
// open does not wait; meanwhile a key the cache does not hold is read from
// the backend): with a budget that holds them all, the cache then knows
// every key again, and no read goes to the backend. A value the preload
// read is never put over one a commit folded in or a read put there, and
// the preload stops once the cache dropped an entry. Measured: 1,000,000
// lines into a Pebble store of 1,000,000 accounts with a budget for every
// balance, 7.1 to 7.6 s against 8.2 to 8.7 s without it (the preload took
// about 2 s of the run); a run of 300,000 lines, as long as the preload,
// gains nothing. The preload first sizes the cache's map for the keys the
// backend holds (Pebble: the entries its tables' properties count; bbolt:
// its pages in use, at 64 bytes a key), at most what the budget has room
// for, so that a million keys go in without the map growing as they come:
// that run then took 2.47 to 2.61 s against 2.65 to 2.97 s.
// [Options].CacheSize is its budget (default
// [DefaultCacheSize], 32 MiB; about 350 bytes a key of 20 bytes with an
// int64, plus bbolt's commit share, or 700 with Pebble); above it, random
// entries are dropped. A Pebble store gives
// half of the budget to Pebble's block cache (index, filter and data
// blocks) and writes a bloom filter of 10 bits a key into every table, so a
// miss of the value cache costs about one block read, and a new key none;
// Pebble reserves its two memtables in that block cache, each an eighth of
// it (4 MiB, Pebble's default, up to 64 MiB), so that a save of tens of
// thousands of keys stays in a memtable instead of making a table of level
// 0 of its own (a budget for every balance of 1,000,000 accounts: 300,000
// random lines in a median of 1.56 s instead of 2.44 s, see
// pebbleMemTableSize in cache.go).
// bbolt's pages are the operating system's page cache (file-backed memory,
// not counted in the budget). A store's anonymous memory is its cache budget
// plus the staged batches (their keys, values and outputs), plus, with bbolt,
// what a commit holds while it runs: bbolt reads every page the batch changes
// into memory and writes each anew, about 12 KiB of anonymous memory a
// changed page (its node and its buffer, 6 KiB live, with the garbage
// collector's headroom) when the keys are spread over a large store (1,000,000
// accounts, a batch of 10,000 lines: about 110 MiB until the commit ends; a
// program that commits the same batches to bbolt without tidemark holds it
// too). So a bbolt store counts its commit in the budget: half of
// CacheSize (at most 128 MiB) bounds the commit, the value cache gets the
// rest, and once the tree has more pages than the commit's share holds, the
// committer also cuts a batch when it changed as many keys as the share
// has pages for (the expected pages k random keys change in a tree of P
// pages, P(1-e^(-k/P))) until a commit tells more: after each commit of
// at least 64 keys, the cap is what the pages it wrote for each key allow
// (keys in order, new accounts at the end, share pages and are not cut
// there; random keys of a deep tree change the branch pages above their
// leaves too, about 1.25 pages a key at 10,000,000 accounts, which the
// estimate does not count), and it follows the file's pages in use.
// Measured (2026-12-01, 200,000 random lines into a bbolt store of
// 1,000,000 accounts, ledger run, one after the other at a load of 12 to
// 13 on 2 cores; CPU time, user + system): before the cut, 6.3 s with a
// peak anonymous RSS of 174 MiB (batches of 10,000 lines); with the
// default budget (32 MiB: batches of about 1,400 lines) 8.5 s, 1.35 times
// the CPU a line, and 57 MiB; with a 64 MiB budget 8.5 s and 91 MiB; with
// 128 MiB 7.1 s (1.12) and 148 MiB: each within 64 MiB and its budget. A
// larger budget buys throughput with memory. Under a soft memory limit of
// the Go runtime (GOMEMLIMIT) of at most 64 MiB plus the part of the
// budget that is Go heap (MemoryLimit gives one, and examples/ledger's run
// sets it), the collector holds the heap within the limit, and the store
// counts its commit's pages and its value cache at their live size, 6 KiB
// a page: a bbolt store's commits hold twice the keys, and the value cache
// of either backend twice the values. Measured (2026-12-06, 100,000
// random lines into a bbolt store of 10,000,000 accounts, default budget,
// 3 rounds alternated): 37 to 40 saves in 3.25 to 3.66 s against 73 to
// 75 in 3.62 to 3.87 s, a peak anonymous RSS of 85 to 92 MiB (the
// ceiling: 96 MiB). A page's node holds 64 bytes for each element of the
// page, so a page of the ledger's tree at 10,000,000 accounts (83 small
// elements a leaf) takes 10.4 KB, not 6 KiB: under the limit a commit is
// also held to what three quarters of the limit leave beside 16 MiB and
// what the value cache holds, its pages counted by the elements its leaf
// pages hold (each commit reads the headers of 32 pages at random).
// Before, a budget of 64 MiB gave the commits 48 MiB at 6 KiB a page,
// which took 80 MB of heap, and the collector ran without pause under
// the limit of 120 MiB (115 collections in a run of 100,000 lines into
// 10,000,000 accounts, 4.19 to 4.50 s; held to the limit's room, 45
// collections and 3.01 to 3.39 s; the default budget's saves are as
// before, 34 in that run). The program that commits batches of 10,000 lines
// without tidemark took 2.86 to 3.01 s and 173 to 190 MiB, and, at the
// batches this memory allows (2,560 lines), 4.08 to 4.17 s. 1,000,000 new
// accounts in order cost the same CPU with and without the cut. A commit whose keys of
// a table all sort at or after the table's last key (keys added in order:
// ids, times, a first load of sorted balances) fills the table's new pages
// to nine tenths, where bbolt's default leaves them half full; keys added
// at random keep the default, under which a page splits in halves. A
// table of 100,000 accounts loaded in order takes 1,205 leaf pages instead
// of 2,173, small enough for the commit's share of the default budget to
// hold it whole: 20,000 lines of random accounts then take 3 saves instead
// of 10, and 0.12 s instead of 0.22 s.
//
// The split in halves is moved by what the value cache is found to be
// worth. Once the cache is full and finds fewer than a quarter of the keys
// looked for in it (counted over 8,192 lookups at a time: random keys of a
// state many times what it holds; at 1,000,000 accounts and the default
// budget it finds about one in ten, and a miss costs one search of bbolt's
// mapped file), the cache shrinks to a quarter of the budget and the
// commits get three quarters (at most 128 MiB), in that order, so that the
// two never hold more than the budget: a save then takes about 4,800 random
// keys instead of 3,000. When the cache, so shrunk, finds more than half of
// them (the lines turned to fewer keys), the commits give its half back:
// their cap falls at once, and the cache grows two commits later, when no
// batch cut at the higher cap is committing. [Stats] counts its hits and
// misses and gives its budget. Measured (2026-12-07, default budget,
// under examples/ledger's memory limit, rounds alternated with the build
// before): 300,000 random lines into a bbolt store of 1,000,000 accounts,
// 6 rounds, 62 saves in 4.60 to 5.38 s (median 4.79) against 96 saves in
// 4.91 to 5.49 s (median 5.21), the naive program that reads its misses
// from bbolt a median of 4.71 s; peak anonymous RSS 86 to 87 MiB against
// 81 (ceiling 96 MiB). 100,000 random lines into one of 10,000,000
// accounts, 4 rounds: 34 saves in 3.27 to 3.78 s (median 3.39) against 37
// in 3.40 to 3.70 s (median 3.53). There, with the cap of the random keys'
// estimate, the commits' three quarters took 26 saves and 3.45 to 4.10 s:
// their branch pages took the live heap to the memory limit, and the
// collector ran back to back (103 collections against 54).
//
// Sync ([Options.Sync]). Each Apply is one durable transaction, committed
// before Apply returns. A crash loses nothing that Apply returned. It is
// several hundred times slower (see below). The checkpoint's mark is still
// taken inside Apply, where it cannot count the line being handled: that line
// is declared durable by the next Apply, by the committer's next tick (every
// BatchInterval) or by [Store.Flush].
//
// Flush commits what is staged and waits; call it (or Close) at a clean stop,
// so that the feed's last commit covers every line handled.
//
// Measured on a shared 2-core machine with an SSD (go test -run '^$'
// -bench BenchmarkApply -benchtime 3s ./state; the time runs until a final
// Flush made everything durable; the figures vary with the disk and the
// load). BenchmarkApplyBatched: each line adds to one of 1000 balances and
// writes an output line. BenchmarkApplyLedger: each line adds to one of 100
// balances, to a count and to a total, as the ledger of the bench does.
//
//	batch size              bbolt lines/s      pebble lines/s
//	                        batched  ledger    batched  ledger
//	100                     74 000   130 000   65 000   182 000
//	1000                    373 000  1.13 M    262 000  1.51 M
//	10000                   1.58 M   3.56 M    1.35 M   4.37 M
//	defaults (10000, 20 ms) 1.61 M             1.50 M
//	Sync (one per line)     1 000              1 400
//
// (2026-11-29 23:29 UTC, load about 1.3.)
//
// Staging a line allocates nothing: its Tx handle (with the handles of
// its first bucket and its first output in it) serves in turn from a ring
// of 4096 per store, and a Tx kept past its function and used is never
// served again (only further buckets and outputs of a line cut handles
// from slabs); a batch's entries, keys, values and index are cut from the
// memory of the batches committed before it. The function writes straight
// into the staging batch (its output bytes too), whose keys are found
// through an index of its own (one multiply hash a key, the bucket's
// prefix and the key never joined for it); the old value of each key it changes, and the
// length of each output it appends to, is logged, so that a failure or a
// panic undoes the line, and a batch is cut only between transactions (a
// line's, or a run's of ApplyRuns). A line of the same feed as the last
// enters Apply without the lock when nothing changed meanwhile; ApplyEach
// takes the token once for its lines, and the lock about once for them;
// ApplyRuns takes the lock once a run, and logs a key its run writes
// again once. The store's own part of a ledger line
// (its Apply, the commits included) is about 0.45 µs of CPU at batch 10000
// and 100 balances (BenchmarkApplyLedger, at a load of 15); a line of 20
// accounts with two counters, 136-216 ns through Apply and 119-189 through
// ApplyEach (BenchmarkTableLine, table-counter and table-counter-each, on
// a machine whose fsync takes 0.2-0.9 ms, 2026-12-06). `ledger run` as a
// whole (reading, framing, the group's loop, parsing, the output line),
// whose processor applies the runs of lines it is handed with ApplyRuns
// (one transaction a run, its two counters added once), costs about
// 0.4-0.5 µs of CPU a line at 20 accounts and 1.5-1.8 µs with 10,000
// accounts, whose batches change thousands of keys each (bbolt and Pebble,
// 5,000,000 lines, --max-batch 10000, bench/cmd/benchtable's CPU a line,
// 2026-12-07 00:25-00:29 UTC, load 1.4-1.8; the program the bench compares
// it with, which keeps its balances in a map, 0.3 and 1.0-1.6 µs on one
// core). At 20 accounts the rate is the group's CPU a line: its goroutine
// took 1.41 s of a 5,000,000-line run with ApplyEach, 0.96-1.16 s with
// ApplyRuns (pprof). With 10,000 accounts the committer's part (bbolt's
// Put and commit, the sort of the keys) runs on its own goroutine beside
// it, and the two cores are the bound: the group's goroutine waits for
// the committer, and folds each batch that the committer's commit woke it
// for into the value cache itself (core.startFold), where a goroutine of
// its own had taken the committer's core; the lists of a commit's writes
// serve again from commit to commit (over 5,000,000 lines, half the memory
// a run allocated, 55 collections against 120); and a batch sorted ahead
// gets its values' checksums on the sort's goroutine (core.presort). A commit's writes are sorted by the store (writeOrder: the bytes
// a group of keys shares skipped, the next 8 ranked by radix), so that the
// backend gets its keys in order. A batch that fills while the one before
// commits, and waits for it, has its keys sorted on a goroutine of its own
// meanwhile (core.presort), off the committer's path: with 10,000
// accounts and saves of 10,000 lines, the committer's CPU over 5,000,000
// lines fell from 2.86 s to 2.24 s (pprof, 2026-12-06).
//
// A batch costs one durable commit (for bbolt two syncs, plus one of each
// output file written), so the throughput grows with the batch until staging
// in memory is the limit; with the defaults, under load, the 20 ms interval
// cuts the batches (about 5000 lines each) and the size only bounds memory.
// What a crash costs is at most three batches re-delivered and skipped.
//
// # Transactional output
//
// [Tx.Output] stages bytes for an append-only file in the store's directory.
// The committer appends a batch's bytes and syncs the file, then commits the
// state with the file's new length. On open the file is cut back to the
// recorded length: bytes past it belong to a batch whose state never
// committed, and the feed re-delivers their lines. So every output line is
// in the file exactly once, whatever moment a kill picks. An output's
// declaration (its length 0) is recorded durably before the file is
// created, so only a file the store recorded is ever cut.
//
// # Epoch lineage
//
// A position means something only within its epoch, and a feed starts a new
// epoch when its pointer file is lost or migrated, even on the same file.
// With each recorded position the store keeps the file's identity and
// fingerprint from the delivery's [tidemark.Origin], and the hash of the (up
// to 64) bytes just before the position, read back once per batch through
// [tidemark.Origin.TailHash]. When a new epoch arrives whose file has the same
// leading bytes (over the length the recorded fingerprint covers: an epoch
// begun on an empty or short file is still recognised once the file has
// grown) and the same bytes before the recorded position, its lines at
// or below that position are skipped too (counted as SkippedByLineage). The
// identity is recorded but not required to match: the feed keeps its
// position for a copy of the file with another identity and the same
// leading bytes, and the store follows the same rule, so a restored or moved
// copy whose pointer file was lost is not applied a second time. A file truncated and rewritten, even with the same
// leading bytes, does not match: its bytes before the position differ, or it
// is shorter. The verdict is taken once per feed and epoch.
//
// The tail hash is read when the batch commits, not when the line was
// applied, and from the committer's goroutine (so TailHash must be safe to
// call concurrently with the feed). A file rewritten in place, keeping its
// first 4 KB and its length, in the few milliseconds between a line's Apply
// and its batch's commit would be hashed as rewritten; if the pointer file
// is then lost too, its lines up to that position would be taken for the
// old ones. Only a lineage record made durable can match: a position still
// staged never does, and a TailHash error records no tail, which never
// matches either.
//
// # PostgreSQL
//
// A store can live in a PostgreSQL database instead of a directory, so
// that the process that owns it can move to another machine:
//
//	st, err := state.Open("postgres://tidemark@db:5432/app?sslmode=verify-full&store=ledger/orders/3", nil)
//
// The spec is a pgx connection URL with the store's own parameters:
// store=NAME (required; at most 200 bytes), lease=DURATION (default
// [DefaultLease]) and cache=BYTES (default [DefaultReadCache]: the memory
// of the read cache, see Reads, its entries at most half of it and the Go
// heap's room to grow between collections the rest; 0 turns the cache
// off). [OpenPostgres] takes any DSN pgx accepts and the name
// apart. Dir returns "postgres:NAME" and Backend [Postgres]. The tables
// (tidemark_data, one row a key; tidemark_ids, one row a store, its name
// and a number, its sid; tidemark_owner, one row a store, its lease) and
// the function tidemark_fence are created, if missing, in the first
// schema of the search_path; many stores share them. A store keeps its
// rows under its sid (format 5): every row, and every entry of the
// primary key's index, four bytes of it instead of the store's name
// (examples/ledger's: 36 bytes), so that the server does less for each
// key. Measured (2026-12-07), ledger run, 300,000 lines of random
// accounts into a store of 1,000,000 with a cache for every balance, 5
// runs alternated: 4.39 to 4.67 s (median 4.55) and 3.39 to 3.51 s of the
// server's CPU, against 5.04 to 5.28 s (median 5.14) and 3.98 to 4.44 s
// with rows under the name; the program without tidemark that keeps
// every balance in a map, its table keyed by account: 4.44 to 5.74 s
// (median 4.64) and 3.22 to 4.83 s. A store made by a version before
// format 5 keeps its rows under its name in tidemark_kv, where it is read
// and written as before, until [Upgrade] moves them (one transaction); a
// version before format 5 refuses a store of format 5 ([ErrNewerFormat])
// at its format record, which tidemark_kv holds for it. The first open by
// this version in a database whose tables an earlier one made creates
// tidemark_data and tidemark_ids: the role needs CREATE on the schema
// then (or a role that has it runs the statements of pgSchema, in
// state/postgres.go, first).
//
// A batch is one transaction, sent in one round trip: the fence, an
// insert of the keys the store knows are new (its read cache holds every
// key, see Reads) and an upsert of the others (each unnest of two arrays,
// the keys in order), a delete, COMMIT. Sessions run with synchronous_commit on,
// and without bitmap scans (enable_bitmapscan off, unless the DSN sets it):
// the store's pages of keys in order walk the primary key's index and stop
// at their limit, where on a table without statistics yet the server read
// and sorted every key after the page's first. A commit whose outcome
// is not known (the connection lost before COMMIT's reply) is a failed
// commit: the store fails as after a disk error, the process restarts,
// and reloads what the database holds.
//
// While the server works on a commit, the store goes on: an Apply that
// waited for a full batch to be cut is woken once that batch's
// statements are sent, not when the commit before it ends, and the batch
// just committed is folded into the value cache then too. On a machine of
// two cores, woken earlier, they took a core from the committer while it
// prepared the statements the server waited for: with 10,000 accounts,
// saves of 10,000 lines, the committer's time between two commits over
// 1,000,000 lines fell from 0.31-0.48 s to 0.21-0.29 s (2026-12-07).
//
// Ownership. A store has one owner at a time, through a lease row with a
// token that each take-over increments; leases are timed by the server's
// clock only (now()). Open takes the lease when it has run out (or was
// released by Close), and otherwise waits up to [Options].LockTimeout and
// fails with [ErrLocked], naming the owner. Every commit starts with
// tidemark_fence, which checks the owner's token and its count of commits
// and extends the lease in the same transaction: an owner that was paused
// or cut off past its lease, and was taken over, has its next commit
// refused, with [ErrFenced] inside [ErrFailed], and nothing of it becomes
// visible. The count also catches a commit the owner took for durable and
// the server lost. An idle store renews its lease every third of it.
// [LeaseOf] reports an open store's lease (its token, and the error that
// ended it, if one did), for a supervisor that moves stores between
// processes (package cluster names each owner's consumer by its token and
// stops a partition whose lease was taken over).
//
// Reads. The store keeps a cache of durable values, filled after the open
// with every key of the store while they fit in its size (then a key it
// does not hold does not exist, and a read inside Apply costs no round
// trip), and kept up to date by each commit. The open does not wait for
// the fill: it reads the store in pages of 10,000 keys beside the first
// lines, whose reads the cache does not answer yet go to the server (a
// restart on a store of 10,000,000 keys with one new line: 0.02 s from
// exec to exit; 1.0 s on a store of 1,000,000 keys when the open waited
// for the fill). Once the fill has read 100,000 rows, it makes the
// cache's map for the rows the server's statistics say the store holds
// (its planner's estimate, no row read), at most what cache= has room
// for, so that the rest go in without the map growing as they come:
// 300,000 lines into a store of 1,000,000 keys with a cache for all of
// them, 6 rounds alternated (2026-12-07), 5.17 to 6.08 s against 5.26 to
// 7.14 s; a restart that applies a line and closes before makes no such
// map. It is right because only the
// owner writes: a commit made while the fill reads its rows wins over
// them. An entry of a ledger
// (a 33-byte key, an int64) takes about 165 bytes of the cache's half
// of cache=: the default holds about 800,000 keys, and a larger store
// wants a larger cache= to keep its reads in memory. Do not change the
// rows of an open store by hand. A read the cache cannot answer is a
// round trip (0.4 ms measured on the machine below; 3.5 µs from the
// cache).
//
// Outputs. There are no local files: [Tx.Output] bytes are rows of the
// store's table (chunks of up to 1 MiB keyed by their offset), written in
// the transaction of the state, so they are exactly once as a file's are.
// Read them with [Output.WriteTo]; Output.Path is "". The server
// compresses each chunk: the store's sessions set default_toast_compression
// to lz4 where the server has it (PostgreSQL 14 and later, built with
// lz4), unless the DSN sets it. With the server's default, pglz, the
// compression was most of the server's work for a ledger of few accounts
// (1,000,000 lines of `ledger run` at 20 accounts: 0.9 to 1.1 s of its
// CPU against 0.3 s, and runs of 1.2 to 1.4 s against 0.4 to 0.5 s); lz4
// stores chunks about a fifth larger.
//
// Limits: a key (with the store's prefix) of at most 2400 bytes (a btree
// entry must fit in a third of a page) and a value of at most 64 MiB.
//
// Measured with everything on one 2-core machine (the server on a unix
// socket, fsync on; go test -run '^$' -bench
// 'ApplyLedger/postgres|PostgresBare|PostgresColdRead|PostgresDistinct'
// ./state), the ledger at batch 10000 against BenchmarkPostgresBareLedger:
// a loop written by hand on pgx that folds the same lines in memory (a map
// by account name) and writes, each batch, the same keys with the same
// values in one pipelined transaction, synchronous_commit on, with no
// fence, staging, undo log or checksum
// (TestPostgresBareLedgerWritesWhatTheStoreWrites holds it to the store).
// At load 13: 0.67-0.93 M lines/s (a commit of 103 keys in 9-12 ms;
// 158-195 of the 200 batches waited for the one before) against 1.11-1.31
// M, 0.6-0.7; the store's process spends 0.39-0.50 µs of CPU a line, the
// bare loop 0.07-0.09. The store stages the next batch while the last one
// commits, so under load the commit is the bound, and on a quiet machine
// the staging is: at load 0.3-1 (main 50faf7e, before its Tx handles cost
// about 0.05 µs a line less, and with a bare loop that folded nothing)
// 2.2-2.4 M lines/s against 5.4-6.2 M, 0.40, the 10,000 Applies of a
// batch (about 0.4 µs of CPU each, nearly all of it the core's Tx and
// batch, the same with bbolt) taking longer than the commit of the batch
// before (2.3 ms). The engine's own part of a commit (fence, key order,
// read cache, pgx) is about 0.025 µs a line, on the committer's goroutine.
//
// Distinct keys, each line a new one of 1,000,000 accounts: 21,000 keys/s
// at load 10, 5,100 at load 24 (a batch of 10,000 new keys commits in 0.5
// to 2 s, nearly all of it the server's: no read goes to the server, the
// cache knows a new key does not exist). The cost is per key changed, not
// per line. A plain insert of the keys known new, in key order, instead
// of an upsert in the batch's order: 21,700-25,800 keys/s against
// 17,100-18,000 at load 17-21 (EXPLAIN ANALYZE of 10,000 new keys: 3
// WAL records and about 7 buffer hits a key either way; the upsert's
// speculative insertion costs the rest). Tried and not taken (load 7-14):
// COPY of the new keys (149-231 ms for 10,000 against 167-211 for the
// insert; 15 % less WAL, of about 320 bytes a key), and an UPDATE of the
// keys the cache knows exist instead of the upsert (163 against 173 ms
// for 10,000 keys, 5.4 ms either way for 103).
//
// # Errors
//
// A failed commit is returned by the next Apply and by Flush, wrapped in
// [ErrFailed], and shown in [Stats] (FailedCommits, LastError). Apply's own
// errors are [ErrNotBound] (a batched Apply of a feed no checkpoint is
// bound to) and [*TooLargeError], which wraps [ErrTooLarge] (a key or value
// the backend cannot store; its Permanent method returns true). Open errors
// are [ErrNotStore], [ErrUnknownBackend], [ErrBackendMismatch],
// [ErrStoreMissing], [ErrLocked] and [ErrCorrupt] (a [*CorruptError] for
// damaged data, from Open or from any read); declaring an output,
// [ErrBadName] and [ErrOutputExists]. Every error names the store's
// directory and says what to do, and Apply's the feed, epoch and position.
// A PostgreSQL store taken over by another owner fails its commits with
// [ErrFenced] inside [ErrFailed].
package state
