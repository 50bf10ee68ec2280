// Package feed reads line-oriented input files for tidemark: it cuts a file
// into lines, remembers how far it has been processed in a side-car pointer
// file, and follows the file through appends, rotation and truncation.
//
// # Caveats first
//
//   - A line handed out by Poll ([Item.Line]) is a slice of the source's read
//     buffer: it is valid until the next Poll. Copy what you keep.
//   - Delivery is at least once. After a crash, everything after the pointer
//     is delivered again; a processor whose state cannot absorb duplicates
//     records (epoch, position) with its state (see the root package tidemark).
//   - Only the Committed strategy keeps a pointer file. The others never
//     open it, so they re-read or skip on every run.
//   - A Committed source locks its pointer file from NewFileSource until
//     Close: one source per pointer file, in this process or another. Close
//     every source you make; a second one on the same pointer fails at
//     NewFileSource with [ErrPointerLocked].
//   - The input must be a regular file: a FIFO, a device, a socket or a
//     directory is refused ([ErrNotRegular]).
//   - A line is delivered only once its '\n' is there. A file that never
//     ends its last line never delivers it.
//
// # Where this package sits
//
// The framework polls a [Source] from one goroutine (the feed's runner): each
// duty cycle it commits the position that every subscriber has finished
// ([Source.Commit]), then reads a batch ([Source.Poll]) and hands the items to
// the subscriber queues. [FileSource] is the Source of a file; its
// durable pointer is a [github.com/tidemark-go/tidemark/feed/pointer.File]
// (package feed/pointer holds the format, for tools). The package knows
// nothing of processors, queues or stores; checkpoint and state build on
// what it delivers: an [Item]'s Epoch, Position and Origin.
//
// The smallest use:
//
//	src, err := feed.NewFileSource(feed.Config{Path: "orders.csv"}) // locks orders.csv.readPointer
//	...
//	defer src.Close() // releases the lock
//	items := make([]feed.Item, 256)
//	for {
//		n, err := src.Poll(ctx, items) // never blocks; ErrDone ends a once strategy
//		if n == 0 {
//			// back off (the framework's idle strategy), then poll again
//			continue
//		}
//		// process items[:n]; once they are processed:
//		err = src.Commit(items[n-1].Epoch, items[n-1].Position)
//	}
//
// # Lines and positions
//
// A line ends with '\n'; a '\r' just before it is removed from the payload,
// so "\r\n" files read like "\n" files. An item's Position is the byte offset
// just after the line's '\n': committing it means "everything before this
// offset is processed", so the pointer always names a line start.
//
// A line whose payload is longer than Config.MaxLineBytes (default 1 MiB)
// is not delivered: the source skips to its '\n' reading in chunks (it never
// holds more than MaxLineBytes+2 bytes of a line), counts it
// (Status.OversizeSkipped), logs a warning with the path, epoch and
// position, and passes it to Config.OnReject. Lines after it are read as
// usual and the position moves past it.
//
// The source reads with one buffer of 64 KiB that grows for long lines and
// shrinks back after them; the lines of a Poll are slices of it. A Poll of
// a batch allocates nothing.
//
// # Read strategies
//
//	strategy       starts at                       pointer file       at the end of the file
//	Committed      the pointer, else 0             read and written   tails
//	Earliest       0                               never opened       tails
//	OnceEarliest   0                               never opened       ErrDone at the first end of file
//	Latest         the end of the file (*)         never opened       tails: every later line
//	OnceLatest     -                               never opened       ErrDone at once
//
// (*) Latest starts at the end of the file as it is at the first Poll. If
// that end is inside a line, the rest of that line is skipped. If the file
// does not exist at the first Poll, every line of the file that appears is
// new, so it is read from 0. Every line appended after the start is
// delivered: nothing is conflated.
//
// OnceLatest delivers nothing: it starts where the file ends and stops
// there, so its first Poll returns [ErrDone] without opening the file. It
// exists so that a configuration can switch a feed off without removing it.
//
// OnceEarliest waits for an empty or missing file's first bytes, then
// returns ErrDone at the first end of file it reaches. An unterminated last
// line is not delivered.
//
// Only Committed gives items an epoch and an Origin: items of the other
// strategies have Epoch 0 (no positions to recognise across runs), and their
// commits are ignored. [FileSource.Rereadable] is true for every strategy,
// since a file can always be read again; only Committed resumes after a
// restart.
//
// # The pointer file
//
// Committed keeps its position in a pointer file named after the input,
// <base of Path>.readPointer (pointer.Suffix), beside the input or in
// Config.PointerDir ([github.com/tidemark-go/tidemark/feed/pointer.Path]; see "Where the pointer file lives").
// The format (two checksummed 80-byte records in 4096-byte slots, written
// alternately), its byte-by-byte diagram, why it is crash safe, and what a
// commit costs are documented on [github.com/tidemark-go/tidemark/feed/pointer.File]. A record holds:
//
//   - the epoch and the position;
//   - the identity of the input (device and inode on Unix);
//   - a fingerprint: the hash ([pointer.HashBytes]) of the input's first Len bytes,
//     Len = min(4096, size of the file when it was fingerprinted);
//   - a tail hash: the hash of the (up to 64) bytes just before the
//     position.
//
// Every commit writes all of them. The tail hash is of the bytes as they
// were read: taken from the read buffer when it still holds them (the last
// 64 KiB or so read), else read back from the file (one 64-byte read),
// and then the source checks that the bytes just before what it has read
// are still those it read (one more 64-byte read): a file rewritten in
// place since it was read never lends its new bytes to the pointer. When
// they differ, the commit stores nothing (the pointer stays where it was;
// Commit returns nil) and the file is read again from 0 under a new epoch
// ([ReasonRewritten]). The same check guards the fingerprint's extension
// below, which reads the file's first bytes back. While the fingerprint covers
// fewer than 4096 bytes because the file was short when it was opened, a
// commit extends it to the bytes the file has now; and before a Poll
// delivers lines read beyond the prefix the stored fingerprint covers, the
// source stores the pointer again (same position) with a longer one. So
// lines a store may have applied are always covered by the stored
// fingerprint, up to 4096 bytes: a file replaced while the source is down,
// before any commit, is not taken for the one read. This costs at most a
// few extra pointer writes in the first 4096 bytes of each epoch. A
// fingerprint is always compared on the prefix length it covers: a file
// fingerprinted at 10 bytes that has grown since is compared on its first
// 10 bytes.
//
// Sync policies ([SyncPolicy]) decide what a power loss (or an operating
// system crash) can cost; a process crash (kill -9) costs nothing under any
// of them, because the kernel keeps every completed write (with group
// commit, below, both also cost the commits not written yet):
//
//	policy            a power loss costs
//	SyncEveryCommit   nothing: every commit is durable when Commit returns (one fdatasync per commit)
//	SyncInterval      re-delivery of the lines committed since the last sync, at most about one interval
//	SyncNever         re-delivery of what was committed since the kernel last wrote the file back (often 30 s, possibly more)
//
// Never a gap: a lost pointer write only moves the pointer back.
//
// # One writer per pointer file
//
// Two sources that commit to one pointer file lose lines: each starts at
// the other's pointer, and each moves it past lines only the other
// processed. So a Committed source takes an exclusive OS lock on its
// pointer file (flock on Unix, [github.com/tidemark-go/tidemark/feed/pointer.File.Lock]) in NewFileSource, and
// holds it until Close; the operating system releases it when the process
// dies, kill -9 included, so no stale lock is ever left to clean up. A
// second source on the same pointer file, in this process or another,
// fails at NewFileSource, before it reads a line, with an error wrapping
// [ErrPointerLocked] that names the pointer file and the holder: "held by
// process 1234" on Linux (from /proc/locks; "(this process)" when it is
// this one), "held by another process" where the system does not tell.
// tidemark pointer set and migrate take the same lock, so they refuse a
// pointer that a running feed holds, and a feed cannot start while they
// write.
//
// When it is taken:
//
//   - after the check that the input is a regular file (when it exists), so
//     that no pointer file is made for a FIFO or a device;
//   - whether the input exists or not: a missing pointer file is created
//     empty to be locked, so that two sources waiting for the same missing
//     input conflict at once, not when it appears. An empty pointer file
//     holds no record, like a missing one: a source killed between taking
//     the lock and its first write leaves one, and the next start reads
//     from 0 under a new epoch with a note, not a warning of damage. Close
//     removes the empty pointer file it made when nothing was written to
//     it (the input never appeared, or was refused);
//   - the lock follows the file: a pointer file is created or replaced
//     through a temporary file renamed over it, and the source locks the
//     temporary file before the rename, so the file at the path is locked at
//     every moment.
//
// A source that finds the pointer's folder missing creates it (Warn for the
// input's own folder, Info for a PointerDir); one that cannot create its
// pointer file there (a read-only folder) fails at NewFileSource, naming
// the file and suggesting PointerDir.
//
// # Where the pointer file lives
//
// By default the pointer file is beside the input: Path+".readPointer".
// Config.PointerDir puts it in another folder, as
// PointerDir/<base of Path>.readPointer, created when missing. Use it when
// the input's folder is read-only (logs written by another user, a
// read-only mount), or when two programs follow one input: each with its
// own pointer folder has its own pointer, lock and epochs, and neither
// holds the other back. The input renamed away while stopped is still
// looked for in the input's folder. tidemark pointer takes --input for a
// pointer file that is not beside its input.
//
// # Group commit
//
// Under SyncEveryCommit a Commit writes the pointer and waits for its
// fdatasync (some 200 µs on a common disk): a source that commits every
// 1024 lines reads no more than about five million lines a second, a tenth
// of what the disk's page cache gives. Config.GroupCommit lifts that cap:
//
//   - Commit computes the record as without it (fingerprint, tail hash, the
//     rewrite-in-place check), hands it to a writer goroutine and returns
//     at once. The writer writes one record at a time, with the sync the
//     policy asks for, in the same two-slot scheme; the records handed
//     during a write coalesce, and only the newest is written next. Under
//     SyncEveryCommit the writer then rests three times as long as the
//     write and sync took (at most 20 ms; a Flush or a Close ends the rest
//     at once): a sync costs CPU time beyond its wait (the kernel's journal
//     and the disk's queue), and a writer that synced again as soon as one
//     ended took 30 % of the work of two busy goroutines on a machine of
//     two cores. The pointer moves at most a quarter as often as the disk
//     could sync, still every millisecond or so, and reading is no longer
//     held up by the syncs.
//   - Only a record that moves the position, in the same epoch and on the
//     same file (identity and fingerprint), goes to the writer. Every other
//     store (a new epoch, a copy of another identity renamed over the path,
//     a longer fingerprint, the migration of a legacy pointer) and every
//     reopen first waits for the writer, then stores as without group
//     commit: the old epoch's last commit is in the pointer file before the
//     new epoch's record, and nothing of the old epoch is written after
//     it. Should the writer's write fail there, the store waits for it:
//     it is not made while an older record is not; and a reopen that
//     would start a new epoch waits, as it waits for lines not committed
//     (Poll returns 0, behind), until the old file's commits are written.
//   - What it costs: a kill -9, like a power loss, also loses the commits
//     not written yet, at most those handed during one write and sync and
//     the rest after it: the pointer only lags the commits, and their
//     lines are delivered again after the restart, never skipped. The power
//     loss figures of the table above grow by the same amount.
//   - A failed write is counted in Status and logged as a failed commit is;
//     the record stays pending and the next Commit returns the error (nil
//     once a write succeeds). The next Commit (a newer record replaces the
//     failed one, and a Commit that moves nothing retries it), Flush and
//     Close retry it.
//   - [FileSource.Flush] waits until the records handed are written; Close
//     flushes, then ends the writer's goroutine, which starts with the
//     first record handed to it. Status.CommittedPosition is the position
//     written, Status.AskedPosition the newest one Commit accepted.
//
// Use it when the source commits often (the framework commits every duty
// cycle) and a few thousand lines delivered again after a crash cost less
// than a sync per commit: the de-duplication a processor needs for any
// crash absorbs them. Leave it off when a caller relies on Commit having
// written the pointer when it returns (check Status.CommittedPosition, or
// call Flush, instead). Under SyncInterval and SyncNever the writer writes
// without syncing as the policy says; group commit then only takes the
// write itself off the caller's goroutine.
//
// # Epochs
//
// An epoch names a position space: an offset means something only within
// its epoch. A new epoch is [pointer.NewEpoch] of the largest epoch known and the
// clock: time based (nanoseconds since 1970), and larger than the epoch of
// the record it replaces and of every epoch of this run. (The epochs of a
// pointer file that holds no valid record are unknown: the clock decides.)
// It is stored in the pointer file at once (at position 0, or at the
// migrated position of a legacy pointer), so that a crash before the first
// commit does not lose it. Commits of an older epoch are ignored: lines of a
// rotated-away file that are acknowledged late never move the new file's
// pointer.
//
// # Opening the input (Committed)
//
// At the first Poll the source opens the input and compares it with the
// pointer file:
//
//	the input, compared with the pointer                   position           epoch   log
//	appended to, or only its times changed                 kept               kept    -
//	shorter than the position (truncated)                  0                  new     warning
//	shorter than its fingerprinted prefix (truncated)      0                  new     warning
//	other leading bytes (replaced, rewritten)              0                  new     warning
//	other bytes just before the position (tail hash)       0                  new     warning
//	another identity, and the file the pointer names is    the renamed file   kept    warning naming the renamed file
//	  in the folder under another name, with its bytes     from the pointer,  (info when it was read to its end)
//	  (renamed away while stopped; see below), whatever    then the path's
//	  the file at the path holds                           file from 0 (new)
//	another identity, same bytes, not shorter, and the     kept               kept    warning
//	  file the pointer names has no name left (a copy
//	  renamed over the path, a remount)
//	pointer file missing, or empty (made to be locked;     0                  new     info
//	  a source stopped before its first write)
//	pointer file shorter than 8 bytes, NULs,               0                  new     warning naming the file and reason
//	  corrupt, unknown version
//	legacy pointer (1024 bytes, a big-endian count)        the count as a     new     info naming the migration
//	                                                       byte offset (**)
//	legacy pointer past the end of the file                0                  new     warning
//
// Then, where the table keeps the epoch (the "kept" rows and the renamed
// file) or migrates a legacy pointer, the start is lowered to the
// floor of the stores when the framework passed resume points (see
// "Resuming from the stores" below); every other row starts a new epoch
// from 0, with nothing to lower.
//
// (**) The product tidemark replaces counted UTF-16 code units, which equal
// bytes only for ASCII text. The count is taken as a byte offset; when that
// falls inside a line (after non-ASCII text, it does), the source resumes
// after the next '\n', and stores that position under the new epoch as soon
// as it has read it. Lines between the count and the real position of the
// old product are delivered again. The legacy file stays in place until
// then, so a crash in between migrates again.
//
// A pointer file that cannot be read at all (an I/O error) is not guessed
// around: Poll returns the error, naming the file, and the next Poll tries
// again. One that cannot even be opened for writing, to be locked (a
// permission, a folder at its path, a read-only folder without it), fails
// NewFileSource, naming the file.
//
// # Resuming from the stores
//
// The pointer file says how far the feed's commits got; a store that keeps
// a processor's state says how far that processor durably applied the
// lines. When they disagree the store is the truth: a store restored from
// a backup, one that lost the tail of its log, or a new one, is behind the
// pointer, and starting at the pointer would skip the lines it lacks.
// [FileSource] implements [Resumer]: before the first Poll, the framework
// passes one [ResumePoint] per store of the groups subscribing to the feed,
// and at the first open, once the table above has kept the pointer's epoch
// E at position P, the source starts at the lowest position they cover,
// if that is below P:
//
//	the store's record                                  covers
//	none (the store has no record of the feed)          nothing: read from 0
//	in epoch E                                          its position (a line end of the bytes the pointer vouches for)
//	of another epoch, and the input holds the bytes     its position: the store skips the lines it holds
//	  it was applied from: its first Fingerprint.Len      by their lineage
//	  bytes, at least its length, the TailLen bytes
//	  before its position
//	of another epoch, the input does not hold them      nothing: read from 0
//
// The start is min(P, the lowest cover), in epoch E: a store ahead of the
// pointer changes nothing. The pointer file is not moved back: it stays at
// P (Status.CommittedPosition too), and commits at or below P are not
// stored until the reading passes it, so that a processor without a store
// is not sent back after a crash. Those commits still say which lines are
// processed: a rotation noticed while re-reading, or the input renamed away
// read again from the store's position, waits for them before it moves to
// a new epoch, as it waits for any delivered line. A legacy pointer's
// migration takes the same floor against its count (every point is then of
// another epoch), and stores the new epoch at once at the start. Each
// rewind is logged once at WARN, with the path, the pointer file, the
// epoch, the pointer's position, the holder, the store's epoch and
// position, the start and the reason, and is counted in Status.Rewinds
// (Status.LastRewind says the last one). The other strategies ignore the
// points: Earliest reads from 0 anyway, and Latest has no past.
//
// # An input renamed away while stopped
//
// A file rotated by rename while the source was stopped (or killed before
// it had read it to its end) holds lines after the pointer that the file
// at the path does not. At the first open, when the file at the path has
// another identity than the pointer's, the source looks in the input's
// folder for the file with the pointer's identity (device and inode),
// whatever its name: renamed once or several times (in.log → in.log.1 →
// in.log.2), it is found. It does so even when the file at the path
// matches the pointer's bytes: a pointer whose fingerprint covers nothing
// (an epoch started on an empty file) or a header line matches any new file
// that starts the same way, and only the renamed file holds the lines
// after the pointer. It stats the folder's entries and reads only that
// file; it uses it only when its leading bytes, its length and the 64
// bytes before the pointer match the pointer (an inode reused by another
// file is not taken for it: warning, not read). Then:
//
//   - it reads that file from the start (the pointer, or the floor of the
//     stores when one is behind) to its end, in the pointer's epoch (a file
//     read to its end already delivers nothing: info): the same position space, its Origin names that file, and
//     commits move the pointer as usual ([Status] Detail says
//     [ReasonRenamedAway], and a warning names the file);
//   - at its end, it moves to the file at the path as at a rotation: the
//     unterminated last line (if any) is dropped and reported, the file at
//     the path is compared with the file left (a new file: from 0 under a
//     new epoch, stored at once), and the source first waits until every
//     line it delivered from the renamed file is committed.
//
// A source started while the path names no file (the new file not created
// yet) looks for the renamed file once, at its first Poll: it finishes it
// as above, then waits for the path; the file that appears there is
// compared with the file left, as at any reopen.
//
// The pointer names the renamed file until its last delivered line is
// committed, so a crash while finishing it finds it again at the next start
// and goes on from the last commit; once the source has moved on, the
// pointer names the file at the path, and the renamed file is not read
// again.
//
// Limits: a folder of more than 4096 entries is not scanned (warning); a
// file deleted, or moved to another folder, while the source was stopped
// cannot be read (its unread lines are lost; the info log says no file had
// the identity); the folder is listed through Config.FS when its opened folders list their
// names, else through the operating system (stats and reads still go
// through Config.FS); platforms without file identities do not scan.
//
// # The input must be a regular file
//
// A file feed reads a file it can read again: the input must be a regular
// file once symbolic links are followed (a link to one is read as that file;
// its pointer is named after the link). A FIFO, a device such as /dev/zero,
// a socket or a directory is refused with an error wrapping [ErrNotRegular]
// that names the path and what it is: by NewFileSource when the path names
// one already, and by Poll at every open of the input (the start, each
// reopen after a rotation, the search for an input renamed away), since the
// path may come to name one later. Such a file is never opened in a way
// that can block: the source stats the path before it opens it, opens it
// with O_NONBLOCK (a FIFO made between the two does not block the open),
// and checks the opened file again before it reads a byte. No pointer file
// is made for it. Poll returns the error again at every call until the path
// names a regular file; a framework treats it as fatal.
//
// # Tailing, rotation and truncation
//
// Poll never blocks: at the end of the input it returns 0 and nil, and the
// caller backs off with its idle strategy. Before reporting "caught up", the
// source stats the path (one stat per idle Poll, nothing else) and checks
// that the path still names the file it reads, and that the file is not
// shorter than what it has read. If not, it reports behind with the reason
// ([ReasonReplaced], [ReasonTruncated]), reads what the writer appended to
// the old file up to its end, closes it, and opens the file at the path.
// When the path names another file, or none, the open file itself is
// checked first (its size, and the 64 bytes before the offset read): a file
// truncated, or rewritten in place, and then renamed away between two polls
// is not read on from the old offset (that would hand out pieces of its new
// content in the old epoch); it is read again from 0 under a new epoch
// (it holds the lines written since), and then the file at the path.
//
// Each read of new bytes (at most 64 KiB, at the return from idle or where
// a Poll goes on in the middle of the file) is followed by a read of the (up
// to 64) bytes just before them, compared with the bytes the source read
// there: one 64-byte read per read of the file, none per line. The look
// comes after the read, not before it, because a writer that truncates the
// file and fills it again past the offset (copytruncate, or a rewrite in
// place) may act between any look and the read; since a writer appends in
// order, new bytes at the offset mean new bytes before it too. If they
// differ, the bytes just read are taken back unframed and the file is
// treated as truncated ([ReasonRewritten]: nothing more is read from the old
// offset; with Rotated, the unread lines are read from the copy
// copytruncate made, in the same epoch; then the file is read from 0 under a
// new epoch, a warning is logged, and an unterminated line read from the old
// content is dropped and reported). The first read of a file after it was
// opened, which may be at 0 with no bytes before it, also reads the file's
// first bytes (up to 4096) and compares them with the fingerprint taken at
// the open, where the source decided where to read it and in which epoch:
// a file truncated and filled again between that open and its first read
// is treated the same way, and so is a file that, before anything was
// read from it, became shorter than the bytes fingerprinted at its open (a
// truncation to 0 leaves no offset past the size to tell it by). When that
// look itself fails, the bytes are taken back and the next Poll reads them
// again.
//
// When it reopens:
//
//   - The file at the path is read on in the same epoch, from the position
//     read, only when it holds the bytes read from the old file, an
//     unterminated last line included (compared as at open: the size, the
//     hash of the first up to 4096 bytes, and of the 64 bytes before the end
//     of what was read), and the old file has no name left: a writer that
//     appends by writing a copy and renaming it over the path. Otherwise (a
//     new file after a rotation: the old file was renamed, and keeps a
//     name), it is read from 0 under a new epoch, even when it starts with
//     the same bytes (a header line, or nothing at all). Committed only: when the epoch goes
//     on in a file of another identity (here, or at the start), the pointer
//     is stored again at the committed position naming that file before any
//     of its lines is handed out (Poll returns 0 while that write fails), so
//     that a restart after the file is renamed away finds it by its identity.
//   - A truncated (or rewritten in place) file is always read from 0 under a
//     new epoch, even when it has grown back past the old position: the
//     lines there are new. The source reads it again through the file it
//     holds open, so that a file renamed away after its truncation is read
//     too; the file at the path follows, if the path names another one.
//   - An unterminated last line of the old file is not delivered: it is
//     counted (Status.PartialDropped), logged and passed to OnReject.
//   - Committed only: when the file at the path would start a new epoch (or
//     there is none) and lines delivered from the old file (rotated or
//     replaced, not truncated) are not committed yet, the source waits: Poll
//     returns 0, state behind, detail "<reason>: waiting for the lines read
//     from the old file to be committed", and it moves on at the first Poll
//     after the commit of the last of them. The new epoch is stored as soon
//     as the source moves on; were it stored while old lines are still being
//     processed, a crash would skip them (the pointer would name the new
//     file), and a crash after lines of the new epoch are applied would make
//     the old lines, read again, look new to a store. Killed while it waits,
//     the pointer still names the old file, which the next start finds by
//     its identity (see "An input renamed away while stopped"). A copy
//     renamed over the path (the same epoch goes on) does not wait. A
//     consumer must commit what it has processed without waiting for more
//     lines (the framework commits every duty cycle).
//   - A path with no file (a rotation in progress) is not a change: the open
//     file is read on, and the source reports caught up. With Rotated, a
//     rotated file newer than the open one (logrotate's nocreate: the file
//     renamed, none made at the path) is read meanwhile, after RotateWait.
//
// A replacement is noticed at the first Poll that reaches the end of the
// open file after it. An input missing at the first Poll is waited for:
// one warning, then status waiting with the detail "waiting for <path>".
//
// # Rotated files
//
// Config.Rotated names the pattern of the files the input is rotated to
// ("orders.csv.*"; relative to the input's folder, or with a folder of its
// own for logrotate's olddir). The source then treats the input and its
// rotated files as one history of files, and reads every file of it it
// has not finished, oldest first, each to its end, then the file at the
// path:
//
//   - Order. The file at the path is the newest. Rotated files carrying the
//     same kind of suffix are ordered by it: numbers the logrotate way (.2
//     is older than .1), dates (8 digits or more, in.log-20240102) the
//     earlier first; ".gz" is ignored for this. Others by modification
//     time, then by name.
//   - Which files are not finished. At a start, the file the pointer names
//     is looked for among the rotated files when the path does not hold
//     it: by identity with the pointer's content (renamed), else by
//     content alone (the oldest such file: compressed, or copied before
//     the input was truncated). It is read from the pointer in the
//     pointer's epoch, then every newer file from 0, each under a new
//     epoch. While running, at the end of a file the path no longer names,
//     the source moves to the file that follows it in the order (found by
//     identity, else by its first bytes when it was compressed meanwhile,
//     else by modification time), not to the path: any number of rotations
//     while it is behind or stopped loses nothing.
//   - copytruncate. When the file being read is truncated (the path keeps
//     its identity), the source first looks for a rotated file holding its
//     bytes up to the position read (the epoch's fingerprint and the 64
//     bytes before the position, as read) and more: the copy. It reads the
//     copy on from the position in the same epoch, then the input from 0
//     under a new epoch. Lines written between logrotate's copy and its
//     truncation are in neither file (logrotate's own limit).
//   - Compressed files (name.gz) are read decompressed (see "Compressed
//     files"); name.gz is not considered while name is there (gzip is still
//     writing it).
//   - RotateWait. A file renamed away from the path is read on until it has
//     been quiet (not modified) for Config.RotateWait, 5 s by default with
//     Rotated: a writer that has not reopened the path yet still appends
//     to it. Meanwhile the status says so, and the newer files wait.
//   - Each move to a newer file waits, as any rotation does, until the
//     lines delivered from the file left are committed.
//   - Every matching name is stat'ed at each move and at a start that needs
//     it, whatever the folder's size; only candidates are read (a
//     compressed one decompressed only when its first bytes match).
//
// Without Rotated the source follows the path alone: a file rotated twice
// while it is behind or stopped, a copytruncate, a rotated file moved out
// of the folder, or a folder of more than 4096 entries lose lines (see
// "What is not detected").
//
// # What each rotation style does
//
// With Rotated naming the rotated files (and RotateWait left at its
// default), logrotate's styles do this. Numbered rotation with create,
// nocreate, copytruncate, compress, truncation and deletion of finished
// files are driven at random, with pauses, stops and kills of a reader
// process, by the model test in package torture (TestRotationModel);
// dateext and olddir have tests of their own here. (That model test still
// finds a loss, about once in thirty sequences, after a kill amid several
// copytruncates and rotations during a pause: see RELIABILITY.md.)
//
//   - create (rename, new file at the path), with or without dateext,
//     olddir (a Rotated pattern with its folder) and delaycompress: every
//     line; any number of rotations while the source is behind or stopped.
//   - create with a writer that reopens late (postrotate signal): the lines
//     it appends to the renamed file within RotateWait of its last write
//     are read; later ones are not.
//   - nocreate: the renamed file is read, the path is waited for.
//   - copytruncate: the lines the source had not read are read from the
//     copy, found by the bytes the source read; lines written between the
//     copy and the truncation are in neither file (logrotate's own limit),
//     and a file the source has read nothing of yet has no bytes to find its
//     copy by (its lines are lost).
//   - compress: a compressed rotated file is read decompressed once
//     complete; a file compressed while being read is recognised.
//   - Deleting rotated files (rotate N, maxage): safe once the source has
//     moved past them (Status names the file it reads); a file deleted
//     before is lost from where the source was.
//
// Without Rotated, only create and nocreate with the source caught up and
// running lose nothing; see "What is not detected" for the rest.
//
// # File sets
//
// Config.Paths makes the source follow every file its patterns match (see
// path/filepath.Match; "logs/*.log"), but for those Config.Exclude matches,
// now or later: the patterns are matched again every Config.ScanInterval.
// Each file is read as if it were a feed of its own, by its own reader,
// with its own epoch, positions, status (Status.Files) and record, and
// every rule above applies to it alone. Its items name it ([Item.File], the
// path as matched), so a store keeps one applied record per file (see
// tidemark.Delivery.File) and a restart resumes each file from its own. A
// Commit of one item commits every file up to the last of its lines handed
// out before that item.
//
//   - The records of the files live in one registry,
//     PointerDir/<Name>.registry (PointerDir is required), written as the
//     pointer file is (crash-safe, per the sync policy; format in package
//     feed/pointer). The records of files found at one scan are made
//     durable together, with one sync. A file that had a pointer file of
//     its own (the feed followed that one file before) goes on where that
//     pointer was, and the pointer file is moved into the registry.
//   - A file found after the first scan is new: it is read from its start,
//     whatever the strategy (Latest starts at the end only of the files
//     there at the first scan).
//   - With Rotated, the pattern names each file's rotated files by
//     "{name}" ("{name}.*"), and files it matches are read as rotated files
//     of their file, never as files of their own.
//   - A file that is gone (removed, renamed out of the patterns, or no
//     longer matched) is read to its end through the descriptor its reader
//     holds, then closed, marked finished in the registry, and forgotten
//     after Config.ForgetAfter (1 h): a file that comes back under its name
//     within that time is recognised and read on. A file gone with lines not
//     read or not committed is reported (a warning); so is a file of the
//     registry gone while the source was stopped.
//
// # Files renamed within a set
//
// A file is one file of the set whatever its name: a file renamed to
// another name the patterns match (logrotate's dateext, app.log to
// app-20261201.log under "*.log"; or app.log to app.1.log) is read on
// under its new name, in its epoch, from where it was, and none of its
// lines is delivered again, nor read again (a renamed 1 GB file costs a
// stat, not a second read). Its items name the new name from then on.
//
//   - Running, or behind (a paused consumer): at each scan, a new name
//     that names a file a reader holds open (same device and inode) is
//     that reader's new name: its registry entry moves there (written
//     under the new name, then forgotten under the old one), and it reads
//     on, late writes included. A reader whose path names another file
//     asks the set before it leaves its file: the next Poll scans, and the
//     reader leaves only if its file is at no name of the set at two scans
//     in a row (renamed out of it, or deleted: then the path's file is read
//     as a new epoch, as a single file's source does; one scan may list the
//     names before a rename and look at them after). When the new name is taken by a file
//     renamed there too (numbered rotation between two polls: app.1.log to
//     app.2.log and app.log to app.1.log at once), the files move in order;
//     a reader whose path names a file another reader holds reads its own
//     file to its end and leaves the path to it.
//   - Stopped: the first scan looks at every name, and a name whose file
//     (identity, and content: the entry's first bytes and the bytes
//     before its position) is the file of another name's registry entry
//     takes that entry, which is forgotten under the old name; the old
//     name's file, if any, is new (read from 0 under a new epoch). Two
//     entries of one file (a crash between the two writes of a move) are
//     resolved the same way: the one of the name that names the file wins;
//     when neither name does (the file renamed again, to a third name), the
//     third name takes the entry at the higher position and the other is
//     forgotten (its name's file, if any, is new). A reader that finds its
//     entry's file under another name when it opens its path (renamed after
//     the scan listed the names) reads it, and leaves it, as a reader whose
//     path names another file: only once the set has looked for that name
//     since, which moves the reader there when the set matches it.
//   - Compressed (app-20261201.log.gz, when the patterns match it): gzip
//     writes another file, so it is found by content alone, among the
//     entries of names gone from the set. It is not started while a reader
//     still reads a file with its first bytes under a name gone from the
//     set; once that file is finished, the compressed file takes its entry
//     and goes on from its position (with nothing more to read).
//   - A new name Exclude matches is a name out of the set: the file is gone
//     from the set, read to its end through the reader's descriptor (or,
//     stopped, found by the reader of its old name in the folder).
//
// The store side: an epoch names one file's position space whatever its
// name, so a store that finds no record of a delivery's epoch under its
// file takes the record of that epoch under another file of the same
// feed, and moves it to the new name (package state). A record a file
// leaves for a new epoch (a new file at its name) is kept under a name of
// its own, so that the renamed file's lines are still recognised after the
// old name has recorded the new file's; and ResumeFrom takes a store's
// record of a file's epoch as its point, whatever file it names. Killed at
// any moment of a move (the registry moved and the store not, or the
// reverse), a restart delivers again only lines after the registry's
// position, and the store skips those it applied.
//
// Limits of file sets:
//
//   - A hard link (a second name of a file of the set) is not a file of
//     its own: the name is not read while the file's first name names it.
//   - A file renamed within the set while stopped, and changed so that its
//     first bytes or the bytes before its position differ: a new file.
//   - A compressed copy of a file renamed within the set is found only
//     among the entries of names gone from the set, and by the bytes
//     before its position: a file read to position 0 (nothing read) is
//     read from its start.
//   - One Poll hands out lines of one file; a busy file is read for at most
//     16 full batches before the next file with lines gets its turn.
//   - Every file of the set is stat'ed once per idle Poll of its own; a set
//     of many files costs one stat per file per idle round, and one read
//     buffer per file being read.
//
// # Compressed files
//
// A file whose name ends in ".gz" is read decompressed: positions are
// offsets in the decompressed stream, the fingerprint and tail hash are of
// decompressed bytes (a file compressed after it was partly read is
// recognised), and a restart resumes inside it by decompressing the bytes
// before the position. A compressed file is read only once it is complete:
// it is decompressed to its end once when opened, and one that ends early
// or fails its checksum is not read (a compressed input waits, with the
// detail "waiting for the compressed input … to be complete"). A compressed
// input is not tailed: a change of its size is verified again, and read on
// in the same epoch when it holds the bytes read.
//
// # What is not detected
//
//   - A file rewritten in place that keeps its first 4096 bytes, its length
//     up to the position, and the 64 bytes before the position: its new
//     content is taken for the old one.
//   - A file replaced while the source is down by one with the same first
//     4096 bytes (and, if the pointer is past 0, the same 64 bytes before
//     the pointer), when lines after the pointer had been delivered and not
//     committed: their positions in the new file are those of the old
//     lines, in the same epoch, so a store that applied the old ones skips
//     the new ones. Commit often; a store can check its own tail hash
//     against [tidemark.Origin.TailHash].
//   - While the file is open, a rewrite in place (or a truncation followed by
//     growth) to at least the length already read that keeps the 64 bytes
//     before the offset read: only those bytes, the size and the identity
//     are checked at each read.
//   - A rewrite in place to exactly the length read is seen only when the
//     file grows again (nothing is read meanwhile).
//   - A file deleted, or moved out of its folder, while the source was
//     stopped, with lines after the pointer: those lines are not read.
//   - Without Rotated: two rotations between two polls at the end of the
//     file, or while the source is stopped, or while it is behind: the file
//     in between is never opened; a copytruncate while the source is behind
//     or stopped: the lines it had not read are only in the copy, which it
//     never opens; a file rotated into another folder, or in a folder of
//     more than 4096 entries, while stopped.
//   - With Rotated: a file the pointer names that is gone from the rotated
//     files (deleted, or moved out of the pattern) while stopped: its
//     unread lines, and the order of the files that followed it (the path
//     is read next). Delete rotated files only once the source has moved
//     past them (its status names the file it reads).
//   - With Rotated, a copytruncate of a file the source has read nothing of
//     since it was made or last truncated: its copy cannot be told from any
//     other rotated file, so the lines it holds are not read.
//   - Lines a writer appends to a rotated-away file after it has been quiet
//     for RotateWait and the source has moved on (with RotateWait 0, the
//     default without Rotated: as soon as the source has read it to its
//     end).
//   - On platforms without file identities (not Unix), a replacement by
//     rename is only seen through the size, the fingerprint and the tail
//     hash.
//
// # Status
//
// [FileSource.Status] may be called from any goroutine. It reports the
// state (starting, waiting, behind, caught up, done, stopped) and its
// detail ("partial line pending", "waiting for <path>", a reopen reason),
// the epoch, read, committed (written) and asked positions, file size,
// lines and bytes read, oversize lines skipped, whether a partial line is
// pending, partial lines dropped, reopens by reason with the last one, and
// failed commits with the last error.
package feed
