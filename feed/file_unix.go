//go:build unix

package feed

import (
	"io/fs"
	"syscall"

	"github.com/tidemark-go/tidemark/dedupe"
)

// fileIdentity returns the device and inode of fi, and whether the platform
// provides them.
func fileIdentity(fi fs.FileInfo) (dedupe.Identity, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st == nil {
		return dedupe.Identity{}, false
	}
	return dedupe.Identity{Dev: uint64(st.Dev), Ino: uint64(st.Ino)}, true //nolint:unconvert // Dev is int32 on some platforms
}

// openNonblock is or-ed into the flags of an input's open, so that a path
// that names a FIFO by the time it is opened does not block the open; the
// source then sees it is not a regular file and closes it.
const openNonblock = syscall.O_NONBLOCK
