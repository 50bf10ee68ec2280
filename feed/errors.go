package feed

import (
	"errors"

	"github.com/tidemark-go/tidemark/feed/pointer"
)

// Errors of a file source.
var (
	// ErrInvalidConfig is wrapped by NewFileSource's errors.
	ErrInvalidConfig = errors.New("feed: invalid file source config")
	// ErrClosed is returned by Poll and Commit after Close.
	ErrClosed = errors.New("feed: source closed")
	// ErrCommitAhead is wrapped by the error of a Commit beyond the lines
	// read: a bug in the caller.
	ErrCommitAhead = errors.New("feed: commit beyond the lines read")
	// ErrNotRegular is wrapped by the error of a source whose input is not
	// a regular file once symbolic links are followed: a FIFO, a device, a
	// socket or a directory. Such an input is never opened for reading in
	// a way that can block, and no pointer file is made for it. The error
	// names the path and what it is. It is returned by NewFileSource when
	// the path names such a file already, and by Poll when it comes to
	// (every open checks again). A framework treats it as fatal: retrying
	// does not help until the path is fixed.
	ErrNotRegular = errors.New("feed: input is not a regular file")
	// ErrPointerLocked is wrapped by the error of a Committed source whose
	// pointer file another source holds, in this process or another: one
	// writer per pointer. The error names the pointer file and, where the
	// operating system tells (Linux), the process that holds it. It is
	// returned by NewFileSource. A framework treats it as fatal: stop the
	// other feed, or give this one its own Config.PointerDir.
	ErrPointerLocked = pointer.ErrLocked
)
