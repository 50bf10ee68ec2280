//go:build unix

package feed

import "syscall"

// openNonblock is or-ed into the flags of an input's open, so that a path
// that names a FIFO by the time it is opened does not block the open; the
// source then sees it is not a regular file and closes it.
const openNonblock = syscall.O_NONBLOCK
