package tidemark

// Delivery is the context of one line handed to a processor: which feed it
// came from, the epoch (position space) it was read in, the byte offset just
// after its terminator, and its sequence number in this run.
//
// Seq restarts at 1 with every run of the server and must never be used to
// recognise a line across a restart; (Feed, File, Epoch, Position) is
// stable.
type Delivery struct {
	// Feed is the name of the feed the line came from.
	Feed string
	// File names the file of a feed that follows a set of files (its path
	// as the feed matched it); empty for a feed of one file. Each file of
	// a set is its own position space, with its own epochs: a store keeps
	// one applied record per (Feed, File), and the rule of AlreadyApplied
	// applies within one file.
	File string
	// Epoch names the position space. Zero means the feed has no positions
	// (an in-memory feed, a pipe, a non-committing read strategy); such a
	// delivery is never recognised as a re-delivery.
	Epoch uint64
	// Position is the byte offset just after the line's terminator.
	Position int64
	// Seq is the line's sequence number in this run, from 1.
	Seq uint64
	// Origin describes the file the epoch was opened on, so that a store can
	// recognise lines it applied under an earlier epoch of the same file
	// (see [Origin]). Nil when the feed cannot describe it. All deliveries
	// of one epoch share the same *Origin.
	Origin *Origin
}

// Applied is what a processor records with its state: the last (epoch,
// position) it applied for a feed. The zero value means nothing applied.
type Applied struct {
	Epoch    uint64
	Position int64
}

// AlreadyApplied reports whether d is a re-delivery of a line at or before
// the recorded position last. It is true only when d has positions (Epoch is
// not zero), is in the same epoch as last, and its position is at or below
// last.Position. A delivery in another epoch is in a new position space and
// is never a re-delivery by this rule: see [Lineage] for the stores that can
// do better.
func AlreadyApplied(d Delivery, last Applied) bool {
	return d.Epoch != 0 && d.Epoch == last.Epoch && d.Position <= last.Position
}

// Advance returns the recorded position after d has been applied: d's epoch
// and position when d is newer than last, else last.
func Advance(last Applied, d Delivery) Applied {
	if d.Epoch == 0 {
		return last
	}
	if d.Epoch != last.Epoch || d.Position > last.Position {
		return Applied{Epoch: d.Epoch, Position: d.Position}
	}
	return last
}

// Identity is a file's identity: device and inode on Unix.
type Identity struct {
	Dev uint64
	Ino uint64
}

// Fingerprint is a hash of a file's leading bytes.
type Fingerprint struct {
	// Len is how many leading bytes the hash covers, at most 4096.
	Len int
	// Hash is the hash of those bytes.
	Hash uint64
}

// Origin is what a file feed knows about the file an epoch was opened on. A
// store keeps it with the applied position (as a [Lineage]) so that when a new
// epoch starts on the same, unchanged file (the pointer file was deleted, or a
// legacy pointer was migrated) it can still recognise the lines it applied.
type Origin struct {
	// Identity of the file when the epoch was opened.
	Identity Identity
	// Fingerprint of the file's leading bytes when the epoch was opened.
	Fingerprint Fingerprint
	// TailHash returns the hash of the n bytes just before pos in the file
	// as it is now, computed the same way as [Lineage.TailHash]. It returns
	// an error when the file is shorter than pos or cannot be read. Nil when
	// the feed cannot read the file back.
	TailHash func(pos int64, n int) (uint64, error)
}

// Lineage is what a store records with an applied position so that it can
// later decide whether a new epoch covers the same bytes.
type Lineage struct {
	Applied
	// File is the file of a file set the record is of (Delivery.File);
	// empty for a feed of one file.
	File        string
	Identity    Identity
	Fingerprint Fingerprint
	// TailLen is the number of bytes just before Position that TailHash
	// covers, at most 64.
	TailLen int
	// TailHash is the hash of those bytes.
	TailHash uint64
}
